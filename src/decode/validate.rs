//! Turns the raw protobuf message into the model, checking every reference on the way: string
//! indices, location, function and mapping ids, and one value per sample type in each sample.

use std::collections::HashMap;

use super::{DecodeError, pb};
use crate::model::{
    Frame, FuncId, Function, Label, LabelValue, LocId, Location, Mapping, Profile, Sample, StrId,
    StringTable, ValueType,
};

fn invalid(message: String) -> DecodeError {
    DecodeError::Invalid(message)
}

struct Strings {
    len: usize,
}

impl Strings {
    fn check(&self, index: i64, what: impl FnOnce() -> String) -> Result<StrId, DecodeError> {
        if index < 0 || index as u64 >= self.len as u64 {
            return Err(invalid(format!(
                "{} refers to string {index}, but the string table has {} entries",
                what(),
                self.len
            )));
        }
        Ok(StrId(index as u32))
    }
}

/// Maps the ids a profile uses (any nonzero u64) to dense indices.
enum IdIndex {
    Dense(Vec<u32>),
    Sparse(HashMap<u64, u32>),
}

impl IdIndex {
    fn build(
        ids: impl Iterator<Item = u64> + Clone,
        count: usize,
        what: &str,
    ) -> Result<IdIndex, DecodeError> {
        let max = ids.clone().max().unwrap_or(0);
        let mut index = if max <= (count as u64).saturating_mul(4) + 64 {
            IdIndex::Dense(vec![u32::MAX; max as usize + 1])
        } else {
            IdIndex::Sparse(HashMap::with_capacity(count))
        };
        for (i, id) in ids.enumerate() {
            if id == 0 {
                return Err(invalid(format!("{what} #{i} has the reserved id 0")));
            }
            let fresh = match &mut index {
                IdIndex::Dense(v) => std::mem::replace(&mut v[id as usize], i as u32) == u32::MAX,
                IdIndex::Sparse(m) => m.insert(id, i as u32).is_none(),
            };
            if !fresh {
                return Err(invalid(format!("{what} id {id} is used twice")));
            }
        }
        Ok(index)
    }

    /// Appends the index of each id, or returns the first id that has none. The match on the
    /// representation is outside the loop: this runs once per stack entry of every sample.
    fn map_into(&self, ids: &[u64], out: &mut Vec<LocId>) -> Result<(), u64> {
        out.reserve(ids.len());
        match self {
            IdIndex::Dense(v) => {
                // Unknown ids map to u32::MAX and are looked for afterwards: a branch-free
                // loop that needs no capacity check per element.
                let start = out.len();
                out.extend(
                    ids.iter()
                        .map(|&id| LocId(v.get(id as usize).copied().unwrap_or(u32::MAX))),
                );
                if let Some(k) = out[start..].iter().position(|l| l.0 == u32::MAX) {
                    out.truncate(start);
                    return Err(ids[k]);
                }
            }
            IdIndex::Sparse(m) => {
                for &id in ids {
                    out.push(LocId(*m.get(&id).ok_or(id)?));
                }
            }
        }
        Ok(())
    }

    fn get(&self, id: u64) -> Option<u32> {
        match self {
            IdIndex::Dense(v) => v.get(id as usize).copied().filter(|&i| i != u32::MAX),
            IdIndex::Sparse(m) => m.get(&id).copied(),
        }
    }
}

pub(super) fn build(p: pb::Profile, sample_bodies: &[&[u8]]) -> Result<Profile, DecodeError> {
    if p.string_table.is_empty() {
        return Err(invalid(
            "the string table is empty (it must start with \"\")".into(),
        ));
    }
    if !p.string_table[0].is_empty() {
        return Err(invalid(format!(
            "string table entry 0 must be \"\", found {:?}",
            p.string_table[0]
        )));
    }
    if p.string_table.len() > u32::MAX as usize {
        return Err(invalid(
            "the string table has more than 2^32 entries".into(),
        ));
    }
    let strings = Strings {
        len: p.string_table.len(),
    };

    let mut sample_types = Vec::with_capacity(p.sample_type.len());
    for (i, t) in p.sample_type.iter().enumerate() {
        sample_types.push(ValueType {
            kind: strings.check(t.r#type, || format!("sample type #{i}"))?,
            unit: strings.check(t.unit, || format!("the unit of sample type #{i}"))?,
        });
    }
    let period_type = match &p.period_type {
        Some(t) => Some(ValueType {
            kind: strings.check(t.r#type, || "the period type".into())?,
            unit: strings.check(t.unit, || "the period unit".into())?,
        }),
        None => None,
    };
    let default_sample_type = match p.default_sample_type {
        0 => None,
        i => Some(strings.check(i, || "the default sample type".into())?),
    };
    let comments = p
        .comment
        .iter()
        .enumerate()
        .map(|(i, &c)| strings.check(c, || format!("comment #{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let drop_frames = strings.check(p.drop_frames, || "drop_frames".into())?;
    let keep_frames = strings.check(p.keep_frames, || "keep_frames".into())?;

    let mapping_index = IdIndex::build(p.mapping.iter().map(|m| m.id), p.mapping.len(), "mapping")?;
    let mut mappings = Vec::with_capacity(p.mapping.len());
    for m in &p.mapping {
        mappings.push(Mapping {
            start: m.memory_start,
            limit: m.memory_limit,
            offset: m.file_offset,
            file: strings.check(m.filename, || format!("the file name of mapping {}", m.id))?,
            build_id: strings.check(m.build_id, || format!("the build id of mapping {}", m.id))?,
        });
    }

    let function_index = IdIndex::build(
        p.function.iter().map(|f| f.id),
        p.function.len(),
        "function",
    )?;
    let mut functions = Vec::with_capacity(p.function.len());
    for f in &p.function {
        functions.push(Function {
            name: strings.check(f.name, || format!("the name of function {}", f.id))?,
            system_name: strings.check(f.system_name, || {
                format!("the system name of function {}", f.id)
            })?,
            file: strings.check(f.filename, || format!("the file name of function {}", f.id))?,
            start_line: f.start_line,
        });
    }

    let location_index = IdIndex::build(
        p.location.iter().map(|l| l.id),
        p.location.len(),
        "location",
    )?;
    let mut locations = Vec::with_capacity(p.location.len());
    let mut frames = Vec::with_capacity(p.location.len() + p.location.len() / 4);
    for l in &p.location {
        let mapping = match l.mapping_id {
            0 => None,
            id => Some(mapping_index.get(id).ok_or_else(|| {
                invalid(format!(
                    "location {} refers to mapping {id}, which does not exist",
                    l.id
                ))
            })?),
        };
        let frames_start = frames.len() as u32;
        let n = l.line.len();
        for (j, line) in l.line.iter().enumerate() {
            let f = function_index.get(line.function_id).ok_or_else(|| {
                invalid(format!(
                    "location {} refers to function {}, which does not exist",
                    l.id, line.function_id
                ))
            })?;
            frames.push(Frame {
                function: Some(FuncId(f)),
                line: line.line,
                address: l.address,
                inlined: j + 1 < n,
            });
        }
        if n == 0 {
            frames.push(Frame {
                function: None,
                line: 0,
                address: l.address,
                inlined: false,
            });
        }
        locations.push(Location {
            address: l.address,
            mapping,
            frames_start,
            frames_len: frames.len() as u32 - frames_start,
        });
    }

    let types = sample_types.len();
    let mut samples = Vec::with_capacity(sample_bodies.len());
    let mut stacks = Vec::new();
    let mut values = Vec::with_capacity(sample_bodies.len().saturating_mul(types.min(8)));
    // Sum of |value| per sample type: when it fits in i64, so does every total, flat and cum
    // that a later stage adds up from a subset of the samples.
    let mut magnitude = vec![0u64; types];
    let mut labels = Vec::new();
    let mut s = super::samples::RawSample::default();
    for (i, body) in sample_bodies.iter().enumerate() {
        s.decode(body)?;
        if s.value.len() != types {
            return Err(invalid(format!(
                "sample #{i} has {} values but the profile declares {types} sample types",
                s.value.len()
            )));
        }
        let stack_start = stacks.len() as u32;
        location_index
            .map_into(&s.location_id, &mut stacks)
            .map_err(|id| {
                invalid(format!(
                    "sample #{i} refers to location {id}, which does not exist"
                ))
            })?;
        for (m, &v) in magnitude.iter_mut().zip(&s.value) {
            *m = m.saturating_add((v as i64).unsigned_abs());
        }
        values.extend(s.value.iter().map(|&v| v as i64));
        let labels_start = labels.len() as u32;
        for l in &s.label {
            let key = strings.check(l.key, || format!("a label key of sample #{i}"))?;
            let value = if l.str != 0 {
                LabelValue::Str(strings.check(l.str, || format!("a label value of sample #{i}"))?)
            } else {
                LabelValue::Num {
                    value: l.num,
                    unit: strings.check(l.num_unit, || format!("a label unit of sample #{i}"))?,
                }
            };
            labels.push(Label { key, value });
        }
        samples.push(Sample {
            stack_start,
            stack_len: stacks.len() as u32 - stack_start,
            labels_start,
            labels_len: labels.len() as u32 - labels_start,
        });
    }

    if let Some(t) = magnitude.iter().position(|&m| m > i64::MAX as u64) {
        return Err(invalid(format!(
            "the values of sample type #{t} ({:?}) add up to more than 2^63-1",
            p.string_table[sample_types[t].kind.0 as usize]
        )));
    }

    Ok(Profile {
        strings: StringTable::from_vec(p.string_table),
        sample_types,
        default_sample_type,
        period_type,
        period: p.period,
        time_nanos: p.time_nanos,
        duration_nanos: p.duration_nanos,
        comments,
        drop_frames,
        keep_frames,
        functions,
        mappings,
        locations,
        frames,
        samples,
        stacks,
        values,
        labels,
    })
}
