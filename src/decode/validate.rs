//! Completes a streamed profile once the string table, which comes last, is known: checks
//! every string index and every reference to a mapping, function and location, in the order
//! of the parts of the message, so a broken profile is reported the same way whatever order
//! its fields came in.

use std::collections::HashMap;

use super::builder::Builder;
use super::samples::{FORWARD_FIRST, LabelPart};
use super::{DecodeError, pb};
use crate::model::{
    FuncId, Function, LabelValue, LocId, Mapping, Profile, StrId, StringTable, ValueType,
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

/// Maps the ids of mappings and functions (any nonzero u64) to their positions.
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

    fn get(&self, id: u64) -> Option<u32> {
        match self {
            IdIndex::Dense(v) => v.get(id as usize).copied().filter(|&i| i != u32::MAX),
            IdIndex::Sparse(m) => m.get(&id).copied(),
        }
    }
}

pub(super) fn finish(mut b: Builder) -> Result<Profile, DecodeError> {
    if b.strings.is_empty() {
        return Err(invalid(
            "the string table is empty (it must start with \"\")".into(),
        ));
    }
    if !b.strings[0].is_empty() {
        return Err(invalid(format!(
            "string table entry 0 must be \"\", found {:?}",
            b.strings[0]
        )));
    }
    if b.strings.len() > u32::MAX as usize {
        return Err(invalid(
            "the string table has more than 2^32 entries".into(),
        ));
    }
    let strings = Strings {
        len: b.strings.len(),
    };

    let mut sample_types = Vec::with_capacity(b.sample_types.len());
    for (i, t) in b.sample_types.iter().enumerate() {
        sample_types.push(ValueType {
            kind: strings.check(t.r#type, || format!("sample type #{i}"))?,
            unit: strings.check(t.unit, || format!("the unit of sample type #{i}"))?,
        });
    }
    let period_type = match &b.period_type {
        Some(t) => Some(ValueType {
            kind: strings.check(t.r#type, || "the period type".into())?,
            unit: strings.check(t.unit, || "the period unit".into())?,
        }),
        None => None,
    };
    let default_sample_type = match b.default_sample_type {
        0 => None,
        i => Some(strings.check(i, || "the default sample type".into())?),
    };
    let comments = b
        .comments
        .iter()
        .enumerate()
        .map(|(i, &c)| strings.check(c, || format!("comment #{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let drop_frames = strings.check(b.drop_frames, || "drop_frames".into())?;
    let keep_frames = strings.check(b.keep_frames, || "keep_frames".into())?;

    let mapping_index =
        IdIndex::build(b.mappings.iter().map(|m| m.id), b.mappings.len(), "mapping")?;
    let mappings = b
        .mappings
        .iter()
        .map(|m| mapping(m, &strings))
        .collect::<Result<Vec<_>, _>>()?;

    let function_index = IdIndex::build(
        b.functions.iter().map(|f| f.id),
        b.functions.len(),
        "function",
    )?;
    let functions = b
        .functions
        .iter()
        .map(|f| function(f, &strings))
        .collect::<Result<Vec<_>, _>>()?;

    if let Some(fault) = b.location_id_fault.take() {
        return Err(fault);
    }
    for (i, location) in b.locations.iter_mut().enumerate() {
        let id = b.location_ids[i];
        location.mapping = match b.location_mapping_ids[i] {
            0 => None,
            m => Some(mapping_index.get(m).ok_or_else(|| {
                invalid(format!(
                    "location {id} refers to mapping {m}, which does not exist"
                ))
            })?),
        };
        let frames =
            location.frames_start as usize..(location.frames_start + location.frames_len) as usize;
        for (frame, &function_id) in b.frames[frames.clone()]
            .iter_mut()
            .zip(&b.frame_function_ids[frames])
        {
            if let Some(function_id) = function_id {
                let f = function_index.get(function_id).ok_or_else(|| {
                    invalid(format!(
                        "location {id} refers to function {function_id}, which does not exist"
                    ))
                })?;
                frame.function = Some(FuncId(f));
            }
        }
    }

    if let Some(fault) = first_sample_fault(&mut b, &strings, sample_types.len()) {
        return Err(fault);
    }

    let types = sample_types.len();
    // Sum of |value| per sample type: when it fits in i64, so does every total, flat and cum
    // that a later stage adds up from a subset of the samples.
    let mut magnitude = vec![0u64; types];
    if types > 0 {
        for values in b.values.chunks_exact(types) {
            for (m, &v) in magnitude.iter_mut().zip(values) {
                *m = m.saturating_add(v.unsigned_abs());
            }
        }
    }
    if let Some(t) = magnitude.iter().position(|&m| m > i64::MAX as u64) {
        return Err(invalid(format!(
            "the values of sample type #{t} ({:?}) add up to more than 2^63-1",
            b.strings[sample_types[t].kind.0 as usize]
        )));
    }

    Ok(Profile {
        strings: StringTable::from_vec(b.strings),
        sample_types,
        default_sample_type,
        period_type,
        period: b.period,
        time_nanos: b.time_nanos,
        duration_nanos: b.duration_nanos,
        comments,
        drop_frames,
        keep_frames,
        functions,
        mappings,
        locations: b.locations,
        frames: b.frames,
        samples: b.samples,
        stacks: b.stacks,
        values: b.values,
        labels: b.labels,
    })
}

fn mapping(m: &pb::Mapping, strings: &Strings) -> Result<Mapping, DecodeError> {
    Ok(Mapping {
        start: m.memory_start,
        limit: m.memory_limit,
        offset: m.file_offset,
        file: strings.check(m.filename, || format!("the file name of mapping {}", m.id))?,
        build_id: strings.check(m.build_id, || format!("the build id of mapping {}", m.id))?,
    })
}

fn function(f: &pb::Function, strings: &Strings) -> Result<Function, DecodeError> {
    Ok(Function {
        name: strings.check(f.name, || format!("the name of function {}", f.id))?,
        system_name: strings.check(f.system_name, || {
            format!("the system name of function {}", f.id)
        })?,
        file: strings.check(f.filename, || format!("the file name of function {}", f.id))?,
        start_line: f.start_line,
    })
}

/// The error of the first refused sample, as a sample-by-sample check would find it: in each
/// sample, its wire format, then its number of values, its locations, its labels. Resolves
/// the placeholders of locations named before they arrived.
fn first_sample_fault(b: &mut Builder, strings: &Strings, types: usize) -> Option<DecodeError> {
    let mut faults: Vec<(usize, u8, DecodeError)> = Vec::new();
    if let Some((number, fault)) = b.sample_fault.take() {
        faults.push((number, 0, fault));
    }
    let counts = &b.value_counts;
    let wrong_count = match (counts.first, counts.first_other) {
        (Some(first), _) if first != types => Some((0, first)),
        (_, other) => other,
    };
    if let Some((number, count)) = wrong_count {
        faults.push((
            number,
            1,
            invalid(format!(
                "sample #{number} has {count} values but the profile declares {types} sample types"
            )),
        ));
    }
    if let Some((position, id)) = resolve_forward(b) {
        let number = sample_at(b, position, |s| (s.stack_start, s.stack_len));
        faults.push((
            number,
            2,
            invalid(format!(
                "sample #{number} refers to location {id}, which does not exist"
            )),
        ));
    }
    if b.label_strings.max as usize >= strings.len {
        if let Some(fault) = first_label_fault(b, strings) {
            faults.push(fault);
        }
    }
    faults
        .into_iter()
        .min_by_key(|&(number, order, _)| (number, order))
        .map(|(_, _, fault)| fault)
}

/// Replaces each placeholder with its location's position; the first stack entry whose
/// location never came, and that location's id.
fn resolve_forward(b: &mut Builder) -> Option<(usize, u64)> {
    if b.forward.ids.is_empty() {
        return None;
    }
    let resolved: Vec<Option<u32>> = b
        .forward
        .ids
        .iter()
        .map(|&id| b.location_index.get(id))
        .collect();
    let lowest = FORWARD_FIRST - (resolved.len() as u32 - 1);
    let mut missing = None;
    for (position, entry) in b.stacks.iter_mut().enumerate() {
        if entry.0 >= lowest {
            let k = (FORWARD_FIRST - entry.0) as usize;
            match resolved[k] {
                Some(p) => *entry = LocId(p),
                None => {
                    missing.get_or_insert((position, b.forward.ids[k]));
                }
            }
        }
    }
    missing
}

/// The number of the sample whose range (from `range`) holds `position`.
fn sample_at(
    b: &Builder,
    position: usize,
    range: impl Fn(&crate::model::Sample) -> (u32, u32),
) -> usize {
    b.samples.partition_point(|s| {
        let (start, len) = range(s);
        (start as usize + len as usize) <= position
    })
}

fn first_label_fault(b: &Builder, strings: &Strings) -> Option<(usize, u8, DecodeError)> {
    let unfit = b.label_strings.first_unfit;
    let given = |position: usize, part: LabelPart, id: StrId| match unfit {
        Some((p, q, index)) if p == position && q == part => index,
        _ => i64::from(id.0),
    };
    for (position, label) in b.labels.iter().enumerate() {
        let (part, id) = match label.value {
            LabelValue::Str(id) => (LabelPart::Str, id),
            LabelValue::Num { unit, .. } => (LabelPart::Unit, unit),
        };
        for (part, id) in [(LabelPart::Key, label.key), (part, id)] {
            if (id.0 as usize) < strings.len {
                continue;
            }
            let number = sample_at(b, position, |s| (s.labels_start, s.labels_len));
            let what = match part {
                LabelPart::Key => "a label key",
                LabelPart::Str => "a label value",
                LabelPart::Unit => "a label unit",
            };
            let fault = strings
                .check(given(position, part, id), || {
                    format!("{what} of sample #{number}")
                })
                .err()?;
            return Some((number, 3, fault));
        }
    }
    None
}
