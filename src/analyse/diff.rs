//! Per-site change between two profiles, the figures `go tool pprof -diff_base=BASE NEW` shows.
//! Sites are matched by name (function, file, line or whole stack), never by address or id, so
//! two builds of one program compare. No I/O.

use std::collections::HashMap;
use std::fmt;

use thiserror::Error;

use crate::model::Profile;
use crate::model::aggregate::{self, Granularity};

/// What makes two samples' frames the same row of a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffLevel {
    /// One frame at a granularity: flat counts the leaf, cum anywhere on the stack.
    Site(Granularity),
    /// The whole stack of function names; flat and cum are both the stack's value.
    Stack,
}

impl Default for DiffLevel {
    fn default() -> Self {
        DiffLevel::Site(Granularity::Function)
    }
}

impl DiffLevel {
    pub fn parse(text: &str) -> Option<DiffLevel> {
        match text {
            "stack" | "stacks" => Some(DiffLevel::Stack),
            _ => Granularity::parse(text).map(DiffLevel::Site),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DiffLevel::Site(Granularity::Function) => "function",
            DiffLevel::Site(Granularity::File) => "file",
            DiffLevel::Site(Granularity::Line) => "line",
            DiffLevel::Stack => "stack",
        }
    }
}

/// Which of the two profiles something is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Base,
    New,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Base => "base",
            Side::New => "new",
        })
    }
}

/// Why two profiles cannot be diffed. The caller adds the file names.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DiffError {
    #[error("the profile declares no sample types")]
    NoSampleTypes { side: Side },
    #[error("no sample type {wanted:?}; this profile has {}", available.join(", "))]
    MissingSampleType {
        side: Side,
        wanted: String,
        available: Vec<String>,
    },
    #[error(
        "{sample} is measured in {base_unit:?} in the base profile but in {new_unit:?} in the new one"
    )]
    UnitMismatch {
        sample: String,
        base_unit: String,
        new_unit: String,
    },
}

impl DiffError {
    /// The profile at fault, when it is one of the two.
    pub fn side(&self) -> Option<Side> {
        match self {
            DiffError::NoSampleTypes { side } | DiffError::MissingSampleType { side, .. } => {
                Some(*side)
            }
            DiffError::UnitMismatch { .. } => None,
        }
    }
}

/// How a site fared between the two profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Grown,
    Shrunk,
    /// Only in the new profile.
    New,
    /// Only in the base profile.
    Gone,
    Same,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Grown => "grown",
            Status::Shrunk => "shrunk",
            Status::New => "new",
            Status::Gone => "gone",
            Status::Same => "same",
        }
    }
}

/// One site's figures on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteDelta {
    pub name: String,
    pub base_flat: i64,
    pub new_flat: i64,
    pub base_cum: i64,
    pub new_cum: i64,
}

impl SiteDelta {
    /// New minus base flat, as pprof -diff_base prints it.
    pub fn flat(&self) -> i64 {
        self.new_flat.saturating_sub(self.base_flat)
    }

    pub fn cum(&self) -> i64 {
        self.new_cum.saturating_sub(self.base_cum)
    }

    /// A site shows in a profile when it has a flat or cum figure there. Growth is judged on
    /// flat (what the site itself holds), on cum only when flat did not move.
    pub fn status(&self) -> Status {
        let in_base = self.base_flat != 0 || self.base_cum != 0;
        let in_new = self.new_flat != 0 || self.new_cum != 0;
        let change = match self.flat() {
            0 => self.cum(),
            d => d,
        };
        match (in_base, in_new) {
            (false, true) => Status::New,
            (true, false) => Status::Gone,
            _ if change > 0 => Status::Grown,
            _ if change < 0 => Status::Shrunk,
            _ => Status::Same,
        }
    }
}

/// The change of one sample type between two profiles, site by site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDiff {
    pub sample: String,
    pub unit: String,
    pub level: DiffLevel,
    pub total_base: i64,
    pub total_new: i64,
    /// Every site of either side, sorted by |flat change| (descending), then name, as
    /// `pprof -top` sorts; sites whose figures did not move are included.
    pub rows: Vec<SiteDelta>,
}

impl ProfileDiff {
    pub fn total_delta(&self) -> i64 {
        self.total_new.saturating_sub(self.total_base)
    }

    /// The rows whose figures moved, in order.
    pub fn changed(&self) -> impl Iterator<Item = &SiteDelta> {
        self.rows.iter().filter(|r| r.status() != Status::Same)
    }
}

/// Which sample type of each profile a diff reads: `wanted` by name (or index in the new
/// profile), default the new profile's default. Both sides must have it, in the same unit.
pub fn sample_indices(
    base: &Profile,
    new: &Profile,
    wanted: Option<&str>,
) -> Result<(usize, usize), DiffError> {
    for (side, p) in [(Side::New, new), (Side::Base, base)] {
        if p.sample_types.is_empty() {
            return Err(DiffError::NoSampleTypes { side });
        }
    }
    let missing = |side: Side, p: &Profile, wanted: &str| DiffError::MissingSampleType {
        side,
        wanted: wanted.to_string(),
        available: (0..p.sample_types.len())
            .map(|i| p.sample_type_name(i).to_string())
            .collect(),
    };
    let new_index = match wanted {
        None => new.default_sample_index(),
        Some(w) => new
            .find_sample_type(w)
            .ok_or_else(|| missing(Side::New, new, w))?,
    };
    let name = new.sample_type_name(new_index);
    let base_index = (0..base.sample_types.len())
        .find(|&i| base.sample_type_name(i) == name)
        .ok_or_else(|| missing(Side::Base, base, name))?;
    let (base_unit, new_unit) = (
        base.sample_type_unit(base_index),
        new.sample_type_unit(new_index),
    );
    if base_unit != new_unit {
        return Err(DiffError::UnitMismatch {
            sample: name.to_string(),
            base_unit: base_unit.to_string(),
            new_unit: new_unit.to_string(),
        });
    }
    Ok((base_index, new_index))
}

/// The per-site change of one sample type from `base` to `new`.
pub fn diff(
    base: &Profile,
    new: &Profile,
    sample: Option<&str>,
    level: DiffLevel,
) -> Result<ProfileDiff, DiffError> {
    let (bi, ni) = sample_indices(base, new, sample)?;
    let mut rows: HashMap<String, SiteDelta> = HashMap::new();
    let (total_base, total_new) = match level {
        DiffLevel::Site(granularity) => {
            let b = aggregate::sites(base, bi, granularity);
            let n = aggregate::sites(new, ni, granularity);
            for s in b.sites {
                let r = entry(&mut rows, s.name);
                r.base_flat = s.flat;
                r.base_cum = s.cum;
            }
            for s in n.sites {
                let r = entry(&mut rows, s.name);
                r.new_flat = s.flat;
                r.new_cum = s.cum;
            }
            (b.total, n.total)
        }
        DiffLevel::Stack => {
            for s in aggregate::stacks(base, bi, Granularity::Function) {
                let r = entry(&mut rows, folded(&s.frames));
                r.base_flat += s.value;
                r.base_cum += s.value;
            }
            for s in aggregate::stacks(new, ni, Granularity::Function) {
                let r = entry(&mut rows, folded(&s.frames));
                r.new_flat += s.value;
                r.new_cum += s.value;
            }
            (base.total(bi), new.total(ni))
        }
    };
    let mut rows: Vec<SiteDelta> = rows
        .into_values()
        .filter(|r| r.base_flat != 0 || r.base_cum != 0 || r.new_flat != 0 || r.new_cum != 0)
        .collect();
    // pprof's order for -top: size of the flat change, then name.
    rows.sort_by(|a, b| {
        b.flat()
            .unsigned_abs()
            .cmp(&a.flat().unsigned_abs())
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(ProfileDiff {
        sample: new.sample_type_name(ni).to_string(),
        unit: new.sample_type_unit(ni).to_string(),
        level,
        total_base,
        total_new,
        rows,
    })
}

fn entry(rows: &mut HashMap<String, SiteDelta>, name: String) -> &mut SiteDelta {
    rows.entry(name).or_insert_with_key(|name| SiteDelta {
        name: name.clone(),
        base_flat: 0,
        new_flat: 0,
        base_cum: 0,
        new_cum: 0,
    })
}

/// A stack as one name, root first and `;`-separated, the way folded flamegraph input reads.
fn folded(leaf_first: &[String]) -> String {
    let mut out = String::new();
    for (i, name) in leaf_first.iter().rev().enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(name);
    }
    out
}

/// Random small profiles for property tests: a few shared function names, so that two
/// profiles built with different ids and addresses still have sites in common.
#[cfg(test)]
pub(crate) mod testing {
    use proptest::prelude::*;
    use prost::Message as _;

    use crate::decode::pb;
    use crate::model::Profile;

    const NAMES: [&str; 6] = [
        "main.main",
        "main.load",
        "main.(*cache).put",
        "pkg.Encode",
        "runtime.mallocgc",
        "main.load.func1",
    ];
    const FILES: [&str; 3] = ["main.go", "cache.go", "pkg/encode.go"];

    /// (name, file, start line) of each function.
    type Functions = Vec<(usize, usize, i64)>;
    /// (address, mapped, lines as (function index, line)) of each location.
    type Locations = Vec<(u64, bool, Vec<(usize, i64)>)>;
    /// (location indices leaf first, values, label value) of each sample.
    type Samples = Vec<(Vec<usize>, [i64; 2], Option<usize>)>;

    fn build(
        id_offset: u64,
        functions: Functions,
        locations: Locations,
        samples: Samples,
    ) -> Profile {
        let mut strings: Vec<String> = vec![String::new()];
        let mut intern = |s: &str| -> i64 {
            match strings.iter().position(|x| x == s) {
                Some(i) => i as i64,
                None => {
                    strings.push(s.to_string());
                    strings.len() as i64 - 1
                }
            }
        };
        let sample_type = vec![
            pb::ValueType {
                r#type: intern("alloc_space"),
                unit: intern("bytes"),
            },
            pb::ValueType {
                r#type: intern("inuse_space"),
                unit: intern("bytes"),
            },
        ];
        let function = functions
            .iter()
            .enumerate()
            .map(|(i, &(name, file, start_line))| pb::Function {
                id: id_offset + i as u64 + 1,
                name: intern(NAMES[name]),
                system_name: intern(NAMES[name]),
                filename: intern(FILES[file]),
                start_line,
            })
            .collect();
        let mapping = vec![pb::Mapping {
            id: id_offset + 7,
            memory_start: 0x400000,
            memory_limit: 0x800000,
            filename: intern("/bin/app"),
            build_id: intern(&format!("build-{id_offset}")),
            has_functions: true,
            ..Default::default()
        }];
        let location = locations
            .iter()
            .enumerate()
            .map(|(i, (address, mapped, lines))| pb::Location {
                id: id_offset + i as u64 + 1,
                mapping_id: if *mapped { id_offset + 7 } else { 0 },
                address: *address + id_offset,
                line: lines
                    .iter()
                    .map(|&(f, line)| pb::Line {
                        function_id: id_offset + (f % functions.len()) as u64 + 1,
                        line,
                        column: 0,
                    })
                    .collect(),
                is_folded: false,
            })
            .collect();
        let key = intern("tenant");
        let sample = samples
            .iter()
            .map(|(stack, values, label)| pb::Sample {
                location_id: stack
                    .iter()
                    .map(|&l| id_offset + (l % locations.len()) as u64 + 1)
                    .collect(),
                value: values.to_vec(),
                label: label
                    .map(|v| pb::Label {
                        key,
                        str: intern(["a", "b"][v % 2]),
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
            })
            .collect();
        let message = pb::Profile {
            sample_type,
            sample,
            mapping,
            location,
            function,
            period_type: Some(pb::ValueType {
                r#type: intern("space"),
                unit: intern("bytes"),
            }),
            period: 524288,
            default_sample_type: intern("inuse_space"),
            string_table: strings,
            ..Default::default()
        };
        crate::decode::decode_protobuf(&message.encode_to_vec()).expect("a valid profile")
    }

    /// A small Go-like heap profile with two sample types; recursion, inlined frames,
    /// unsymbolized locations, zero values and labels all occur.
    pub(crate) fn arb_profile() -> impl Strategy<Value = Profile> {
        let functions = prop::collection::vec((0..NAMES.len(), 0..FILES.len(), 0i64..30), 1..8);
        let line = (0usize..8, 1i64..60);
        let locations = prop::collection::vec(
            (0u64..64, any::<bool>(), prop::collection::vec(line, 0..3)),
            1..10,
        );
        let sample = (
            prop::collection::vec(0usize..10, 1..6),
            [0i64..5000, 0i64..5000],
            prop::option::of(0usize..2),
        );
        let samples = prop::collection::vec(sample, 0..12);
        (0u64..3, functions, locations, samples)
            .prop_map(|(offset, f, l, s)| build(offset * 1000, f, l, s))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::testing::arb_profile;
    use super::*;

    const LEVELS: [DiffLevel; 4] = [
        DiffLevel::Site(Granularity::Function),
        DiffLevel::Site(Granularity::File),
        DiffLevel::Site(Granularity::Line),
        DiffLevel::Stack,
    ];

    fn by_name(d: &ProfileDiff) -> BTreeMap<&str, (i64, i64, Status)> {
        d.rows
            .iter()
            .map(|r| (r.name.as_str(), (r.flat(), r.cum(), r.status())))
            .collect()
    }

    proptest! {
        #[test]
        fn a_profile_diffed_with_itself_is_empty(a in arb_profile()) {
            for level in LEVELS {
                for sample in ["alloc_space", "inuse_space"] {
                    let d = diff(&a, &a, Some(sample), level).unwrap();
                    prop_assert_eq!(d.total_delta(), 0);
                    prop_assert_eq!(d.changed().count(), 0);
                    prop_assert!(d.rows.iter().all(|r| r.flat() == 0 && r.cum() == 0));
                }
            }
        }

        #[test]
        fn swapping_the_sides_negates_every_change(a in arb_profile(), b in arb_profile()) {
            for level in LEVELS {
                let ab = diff(&a, &b, None, level).unwrap();
                let ba = diff(&b, &a, None, level).unwrap();
                prop_assert_eq!(ab.total_delta(), -ba.total_delta());
                let (ab, ba) = (by_name(&ab), by_name(&ba));
                prop_assert_eq!(ab.len(), ba.len());
                for (name, &(flat, cum, status)) in &ab {
                    let &(f, c, s) = &ba[name];
                    prop_assert_eq!((flat, cum), (-f, -c), "{}", name);
                    let mirrored = match status {
                        Status::Grown => Status::Shrunk,
                        Status::Shrunk => Status::Grown,
                        Status::New => Status::Gone,
                        Status::Gone => Status::New,
                        Status::Same => Status::Same,
                    };
                    prop_assert_eq!(s, mirrored, "{}", name);
                }
            }
        }

        #[test]
        fn flat_changes_add_up_to_the_total_change(a in arb_profile(), b in arb_profile()) {
            for level in LEVELS {
                let d = diff(&a, &b, Some("alloc_space"), level).unwrap();
                let sum: i64 = d.rows.iter().map(SiteDelta::flat).sum();
                prop_assert_eq!(sum, d.total_new - d.total_base);
                prop_assert_eq!(d.total_base, a.total(0));
                prop_assert_eq!(d.total_new, b.total(0));
            }
        }

        #[test]
        fn rows_are_ranked_by_the_size_of_the_flat_change(a in arb_profile(), b in arb_profile()) {
            let d = diff(&a, &b, None, DiffLevel::default()).unwrap();
            for pair in d.rows.windows(2) {
                let (x, y) = (pair[0].flat().abs(), pair[1].flat().abs());
                prop_assert!(x > y || (x == y && pair[0].name < pair[1].name));
            }
        }
    }

    fn profile(types: &[(&str, &str)], default: Option<&str>) -> Profile {
        let mut strings = vec![String::new()];
        let mut intern = |s: &str| {
            strings.push(s.to_string());
            crate::model::StrId(strings.len() as u32 - 1)
        };
        let sample_types = types
            .iter()
            .map(|(k, u)| crate::model::ValueType {
                kind: intern(k),
                unit: intern(u),
            })
            .collect();
        let default_sample_type = default.map(&mut intern);
        Profile {
            sample_types,
            default_sample_type,
            strings: crate::model::StringTable::from_vec(strings),
            ..Default::default()
        }
    }

    #[test]
    fn the_sample_type_defaults_to_the_new_profiles_default() {
        let heap = profile(
            &[("alloc_space", "bytes"), ("inuse_space", "bytes")],
            Some("inuse_space"),
        );
        let allocs = profile(
            &[("inuse_space", "bytes"), ("alloc_space", "bytes")],
            Some("alloc_space"),
        );
        assert_eq!(sample_indices(&heap, &allocs, None), Ok((0, 1)));
        assert_eq!(sample_indices(&allocs, &heap, None), Ok((0, 1)));
        assert_eq!(
            sample_indices(&allocs, &heap, Some("alloc_space")),
            Ok((1, 0))
        );
    }

    #[test]
    fn a_sample_type_missing_on_one_side_names_that_side() {
        let heap = profile(&[("inuse_space", "bytes")], None);
        let goroutine = profile(&[("goroutine", "count")], None);
        let err = sample_indices(&goroutine, &heap, None).unwrap_err();
        assert_eq!(err.side(), Some(Side::Base));
        assert_eq!(
            err.to_string(),
            "no sample type \"inuse_space\"; this profile has goroutine"
        );
        let err = sample_indices(&heap, &goroutine, Some("inuse_space")).unwrap_err();
        assert_eq!(err.side(), Some(Side::New));
        let err = sample_indices(&heap, &Profile::default(), None).unwrap_err();
        assert_eq!(err, DiffError::NoSampleTypes { side: Side::New });
    }

    #[test]
    fn units_must_agree() {
        let bytes = profile(&[("inuse_space", "bytes")], None);
        let kib = profile(&[("inuse_space", "kilobytes")], None);
        let err = sample_indices(&bytes, &kib, None).unwrap_err();
        assert!(matches!(err, DiffError::UnitMismatch { .. }), "{err}");
        assert_eq!(err.side(), None);
    }

    #[test]
    fn status_tells_new_and_gone_sites_from_grown_ones() {
        let row = |base_flat, new_flat, base_cum, new_cum| SiteDelta {
            name: "f".into(),
            base_flat,
            new_flat,
            base_cum,
            new_cum,
        };
        assert_eq!(row(0, 5, 0, 5).status(), Status::New);
        assert_eq!(row(5, 0, 5, 0).status(), Status::Gone);
        assert_eq!(row(5, 7, 5, 7).status(), Status::Grown);
        assert_eq!(row(0, 0, 5, 3).status(), Status::Shrunk);
        assert_eq!(row(4, 4, 9, 9).status(), Status::Same);
        // Flat decides when both moved.
        assert_eq!(row(5, 3, 5, 9).status(), Status::Shrunk);
    }

    #[test]
    fn levels_parse() {
        assert_eq!(DiffLevel::parse("stack"), Some(DiffLevel::Stack));
        assert_eq!(
            DiffLevel::parse("file"),
            Some(DiffLevel::Site(Granularity::File))
        );
        assert_eq!(DiffLevel::parse("address"), None);
        for level in LEVELS {
            assert_eq!(DiffLevel::parse(level.name()), Some(level));
        }
    }
}
