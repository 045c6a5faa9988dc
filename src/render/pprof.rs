//! Two profiles as one pprof diff, the profile `go tool pprof -diff_base=BASE NEW` builds
//! internally: every sample of NEW as it is, every sample of BASE negated and labelled
//! `pprof::base=true`, strings, functions, mappings and locations of both merged under fresh
//! ids. `go tool pprof` opens the result as a diff; so does heapwatch's own decoder.

use std::collections::HashMap;
use std::io::Write as _;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message as _;
use thiserror::Error;

use crate::decode::pb;
use crate::model::{LabelValue, LocId, Profile, StrId};

/// The label pprof puts on the samples of the diff base; it reads the total from them.
pub const BASE_LABEL: (&str, &str) = ("pprof::base", "true");

#[derive(Debug, Error, Clone, PartialEq)]
pub enum MergeError {
    #[error(
        "the two profiles share no sample type (same name and unit), so there is nothing to diff"
    )]
    NoCommonSampleType,
}

/// The merged diff profile, gzipped as Go writes profiles.
pub fn diff_profile_gz(base: &Profile, new: &Profile) -> Result<Vec<u8>, MergeError> {
    let raw = diff_profile(base, new)?.encode_to_vec();
    let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 4), Compression::default());
    gz.write_all(&raw).expect("writing to a Vec cannot fail");
    Ok(gz.finish().expect("writing to a Vec cannot fail"))
}

/// The merged diff profile as a protobuf message. Only the sample types both profiles have
/// (same name and unit) are kept, in NEW's order, as pprof does.
pub fn diff_profile(base: &Profile, new: &Profile) -> Result<pb::Profile, MergeError> {
    // (index in new, index in base) of each shared sample type.
    let common: Vec<(usize, usize)> = (0..new.sample_types.len())
        .filter_map(|i| {
            (0..base.sample_types.len())
                .find(|&j| {
                    base.sample_type_name(j) == new.sample_type_name(i)
                        && base.sample_type_unit(j) == new.sample_type_unit(i)
                })
                .map(|j| (i, j))
        })
        .collect();
    if common.is_empty() {
        return Err(MergeError::NoCommonSampleType);
    }

    let mut m = Merger::default();
    m.strings.intern("");
    let sample_type = common
        .iter()
        .map(|&(i, _)| pb::ValueType {
            r#type: m.strings.intern(new.sample_type_name(i)),
            unit: m.strings.intern(new.sample_type_unit(i)),
        })
        .collect();
    let new_types: Vec<usize> = common.iter().map(|&(i, _)| i).collect();
    let base_types: Vec<usize> = common.iter().map(|&(_, j)| j).collect();
    m.add(new, &new_types, false);
    m.add(base, &base_types, true);

    fn header(p: &Profile) -> Option<(&str, &str)> {
        p.period_type.map(|t| (p.str(t.kind), p.str(t.unit)))
    }
    let period_type = header(new)
        .or_else(|| header(base))
        .map(|(kind, unit)| pb::ValueType {
            r#type: m.strings.intern(kind),
            unit: m.strings.intern(unit),
        });
    let default_sample_type = [new, base]
        .into_iter()
        .filter_map(|p| p.default_sample_type.map(|id| p.str(id)))
        .find(|name| {
            common
                .iter()
                .any(|&(i, _)| new.sample_type_name(i) == *name)
        })
        .map_or(0, |name| m.strings.intern(name));
    let mut comments = Vec::new();
    for p in [new, base] {
        for &c in &p.comments {
            let id = m.strings.intern(p.str(c));
            if !comments.contains(&id) {
                comments.push(id);
            }
        }
    }
    let frames = |pick: fn(&Profile) -> StrId| {
        [new, base]
            .into_iter()
            .map(|p| p.str(pick(p)))
            .find(|s| !s.is_empty())
            .unwrap_or("")
    };
    let drop_frames = m.strings.intern(frames(|p| p.drop_frames));
    let keep_frames = m.strings.intern(frames(|p| p.keep_frames));
    // Earliest nonzero time, summed durations, largest period: pprof's merge rules.
    let time_nanos = [new.time_nanos, base.time_nanos]
        .into_iter()
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(0);

    Ok(pb::Profile {
        sample_type,
        sample: m.samples,
        mapping: m.mappings,
        location: m.locations,
        function: m.functions,
        string_table: m.strings.table,
        drop_frames,
        keep_frames,
        time_nanos,
        duration_nanos: new.duration_nanos.saturating_add(base.duration_nanos),
        period_type,
        period: new.period.max(base.period),
        comment: comments,
        default_sample_type,
        doc_url: 0,
    })
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

type LocationKey = (u64, u64, Vec<(u64, i64)>);

/// Builds the merged message, giving equal functions, mappings and locations one id.
#[derive(Default)]
struct Merger {
    strings: Strings,
    functions: Vec<pb::Function>,
    function_ids: HashMap<(i64, i64, i64, i64), u64>,
    mappings: Vec<pb::Mapping>,
    mapping_ids: HashMap<(u64, u64, u64, i64, i64, bool), u64>,
    locations: Vec<pb::Location>,
    location_ids: HashMap<LocationKey, u64>,
    samples: Vec<pb::Sample>,
}

impl Merger {
    /// Adds every sample of `p`, values of the sample types `types` only, negated and
    /// labelled for the base.
    fn add(&mut self, p: &Profile, types: &[usize], is_base: bool) {
        let function_ids: Vec<u64> = p
            .functions
            .iter()
            .map(|f| {
                let key = (
                    self.strings.intern(p.str(f.name)),
                    self.strings.intern(p.str(f.system_name)),
                    self.strings.intern(p.str(f.file)),
                    f.start_line,
                );
                let next = self.functions.len() as u64 + 1;
                *self.function_ids.entry(key).or_insert_with(|| {
                    self.functions.push(pb::Function {
                        id: next,
                        name: key.0,
                        system_name: key.1,
                        filename: key.2,
                        start_line: key.3,
                    });
                    next
                })
            })
            .collect();

        // The model keeps no mapping flags. Go sets has_functions on a mapping whose
        // locations are all symbolized; saying so keeps pprof from symbolizing again.
        let mut symbolized: Vec<Option<bool>> = vec![None; p.mappings.len()];
        for (i, l) in p.locations.iter().enumerate() {
            if let Some(m) = l.mapping {
                let named = p
                    .location_frames(LocId(i as u32))
                    .iter()
                    .all(|f| f.function.is_some());
                let flag = &mut symbolized[m as usize];
                *flag = Some(flag.unwrap_or(true) && named);
            }
        }
        let mapping_ids: Vec<u64> = p
            .mappings
            .iter()
            .zip(&symbolized)
            .map(|(m, &symbolized)| {
                let has_functions = symbolized == Some(true);
                let key = (
                    m.start,
                    m.limit,
                    m.offset,
                    self.strings.intern(p.str(m.file)),
                    self.strings.intern(p.str(m.build_id)),
                    has_functions,
                );
                let next = self.mappings.len() as u64 + 1;
                *self.mapping_ids.entry(key).or_insert_with(|| {
                    self.mappings.push(pb::Mapping {
                        id: next,
                        memory_start: key.0,
                        memory_limit: key.1,
                        file_offset: key.2,
                        filename: key.3,
                        build_id: key.4,
                        has_functions,
                        ..Default::default()
                    });
                    next
                })
            })
            .collect();

        let location_ids: Vec<u64> = (0..p.locations.len())
            .map(|i| {
                let l = &p.locations[i];
                // Frames are leaf first, like a location's lines; an unsymbolized location is
                // one frame with no function and no lines.
                let lines: Vec<(u64, i64)> = p
                    .location_frames(LocId(i as u32))
                    .iter()
                    .filter_map(|f| f.function.map(|id| (function_ids[id.0 as usize], f.line)))
                    .collect();
                let mapping_id = l.mapping.map_or(0, |m| mapping_ids[m as usize]);
                let key = (mapping_id, l.address, lines);
                let next = self.locations.len() as u64 + 1;
                let locations = &mut self.locations;
                *self.location_ids.entry(key).or_insert_with_key(|key| {
                    locations.push(pb::Location {
                        id: next,
                        mapping_id: key.0,
                        address: key.1,
                        line: key
                            .2
                            .iter()
                            .map(|&(function_id, line)| pb::Line {
                                function_id,
                                line,
                                column: 0,
                            })
                            .collect(),
                        is_folded: false,
                    });
                    next
                })
            })
            .collect();

        let base_key = self.strings.intern(BASE_LABEL.0);
        let base_value = self.strings.intern(BASE_LABEL.1);
        for (i, s) in p.samples.iter().enumerate() {
            let values = p.sample_values(i);
            let mut label: Vec<pb::Label> = p
                .sample_labels(s)
                .iter()
                .filter(|l| !(is_base && p.str(l.key) == BASE_LABEL.0))
                .map(|l| {
                    let key = self.strings.intern(p.str(l.key));
                    match l.value {
                        LabelValue::Str(v) => pb::Label {
                            key,
                            str: self.strings.intern(p.str(v)),
                            ..Default::default()
                        },
                        LabelValue::Num { value, unit } => pb::Label {
                            key,
                            num: value,
                            num_unit: self.strings.intern(p.str(unit)),
                            ..Default::default()
                        },
                    }
                })
                .collect();
            if is_base {
                label.push(pb::Label {
                    key: base_key,
                    str: base_value,
                    ..Default::default()
                });
            }
            self.samples.push(pb::Sample {
                location_id: p
                    .sample_stack(s)
                    .iter()
                    .map(|l| location_ids[l.0 as usize])
                    .collect(),
                value: types
                    .iter()
                    .map(|&t| {
                        if is_base {
                            values[t].saturating_neg()
                        } else {
                            values[t]
                        }
                    })
                    .collect(),
                label,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::analyse::diff::testing::arb_profile;
    use crate::analyse::diff::{DiffLevel, diff};
    use crate::decode::{DecodeLimits, decode};
    use crate::model::aggregate::{self, Granularity};

    fn nonzero(rows: impl Iterator<Item = (String, i64, i64)>) -> BTreeMap<String, (i64, i64)> {
        rows.filter(|&(_, f, c)| f != 0 || c != 0)
            .map(|(n, f, c)| (n, (f, c)))
            .collect()
    }

    proptest! {
        /// The merged profile is the diff: its sites carry exactly the changes `diff` computes.
        #[test]
        fn the_merged_profile_decodes_to_the_diff(a in arb_profile(), b in arb_profile()) {
            let bytes = diff_profile_gz(&a, &b).unwrap();
            let merged = decode(&bytes, &DecodeLimits::default()).unwrap();
            prop_assert_eq!(merged.samples.len(), a.samples.len() + b.samples.len());
            for sample in ["alloc_space", "inuse_space"] {
                let index = merged.find_sample_type(sample).unwrap();
                for granularity in [Granularity::Function, Granularity::File, Granularity::Line] {
                    // aggregate::SiteKeys names every unsymbolized frame at line granularity
                    // after the first one it meets (its cache key drops the address there).
                    let unsymbolized = |p: &Profile| p.frames.iter().any(|f| f.function.is_none());
                    if granularity == Granularity::Line && (unsymbolized(&a) || unsymbolized(&b)) {
                        continue;
                    }
                    let d = diff(&a, &b, Some(sample), DiffLevel::Site(granularity)).unwrap();
                    let table = aggregate::sites(&merged, index, granularity);
                    prop_assert_eq!(table.total, d.total_delta());
                    prop_assert_eq!(
                        nonzero(table.sites.into_iter().map(|s| (s.name, s.flat, s.cum))),
                        nonzero(d.rows.iter().map(|r| (r.name.clone(), r.flat(), r.cum())))
                    );
                }
            }
        }
    }

    #[test]
    fn base_samples_are_negated_and_labelled() {
        let bytes = include_bytes!("../../testdata/profiles/hiddenleak-heap-early.pb.gz");
        let base = decode(bytes, &DecodeLimits::default()).unwrap();
        let bytes = include_bytes!("../../testdata/profiles/hiddenleak-heap-late.pb.gz");
        let new = decode(bytes, &DecodeLimits::default()).unwrap();
        let merged = diff_profile(&base, &new).unwrap();
        let strings = &merged.string_table;
        let is_base = |s: &pb::Sample| {
            s.label.iter().any(|l| {
                strings[l.key as usize] == "pprof::base" && strings[l.str as usize] == "true"
            })
        };
        let (based, fresh): (Vec<&pb::Sample>, Vec<&pb::Sample>) =
            merged.sample.iter().partition(|s| is_base(s));
        assert_eq!(based.len(), base.samples.len());
        assert_eq!(fresh.len(), new.samples.len());
        assert!(based.iter().all(|s| s.value.iter().all(|&v| v <= 0)));
        assert!(fresh.iter().all(|s| s.value.iter().all(|&v| v >= 0)));
        // Same build: every function and location of the early capture is in the late one.
        assert_eq!(
            merged.function.len(),
            new.functions.len().max(base.functions.len())
        );
        // Go names no default for heap profiles (pprof takes the last type); none is made up.
        assert_eq!(merged.default_sample_type, 0);
        assert_eq!(new.default_sample_type, None);
        assert_eq!(merged.period, 512 * 1024);
    }

    #[test]
    fn profiles_without_a_shared_sample_type_do_not_merge() {
        let heap = include_bytes!("../../testdata/profiles/steady-heap.pb.gz");
        let goroutine = include_bytes!("../../testdata/profiles/steady-goroutine.pb.gz");
        let heap = decode(heap, &DecodeLimits::default()).unwrap();
        let goroutine = decode(goroutine, &DecodeLimits::default()).unwrap();
        assert_eq!(
            diff_profile(&goroutine, &heap),
            Err(MergeError::NoCommonSampleType)
        );
    }
}
