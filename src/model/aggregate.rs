//! Folding a profile's samples into sites: flat (the leaf), cum (anywhere on the stack, once per
//! stack even under recursion) and whole stacks, at function, file or line granularity. The
//! rules are pprof's, so the figures match `go tool pprof -top` on the same file.

use std::collections::{BTreeMap, HashMap};

use super::{Frame, FrameName, Profile};

/// What makes two frames the same site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Granularity {
    /// The function name (pprof's default): different lines and files of one name merge.
    #[default]
    Function,
    /// The source file.
    File,
    /// Function, file and line.
    Line,
}

impl Granularity {
    pub fn parse(text: &str) -> Option<Granularity> {
        match text {
            "function" | "functions" => Some(Granularity::Function),
            "file" | "files" => Some(Granularity::File),
            "line" | "lines" => Some(Granularity::Line),
            _ => None,
        }
    }
}

/// One site with its flat and cumulative value for the chosen sample type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteTotal {
    pub name: String,
    pub flat: i64,
    pub cum: i64,
}

/// Every site of a profile for one sample type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteTable {
    pub total: i64,
    /// Sorted by flat, then cum (both descending), then name.
    pub sites: Vec<SiteTotal>,
}

impl SiteTable {
    /// The table's own order: flat, then cum (both descending), then name.
    pub fn sort_by_flat(&mut self) {
        self.sites.sort_by(|a, b| {
            b.flat
                .cmp(&a.flat)
                .then(b.cum.cmp(&a.cum))
                .then(a.name.cmp(&b.name))
        });
    }

    pub fn sort_by_cum(&mut self) {
        self.sites.sort_by(|a, b| {
            b.cum
                .cmp(&a.cum)
                .then(b.flat.cmp(&a.flat))
                .then(a.name.cmp(&b.name))
        });
    }
}

/// Names every frame of the profile at a granularity and gives equal names one dense key, so
/// per-sample work is array indexing rather than string hashing.
pub struct SiteKeys {
    /// Key of each entry of `Profile::frames`.
    pub frame_key: Vec<u32>,
    pub names: Vec<String>,
}

impl SiteKeys {
    pub fn new(profile: &Profile, granularity: Granularity) -> SiteKeys {
        let mut by_name: HashMap<String, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut frame_key = Vec::with_capacity(profile.frames.len());
        // Most frames of one function share a name id; remember the last to skip formatting.
        let mut by_function: HashMap<(Option<u32>, i64, u64), u32> = HashMap::new();
        for frame in &profile.frames {
            let cache_key = cache_key(frame, granularity);
            if let Some(&k) = by_function.get(&cache_key) {
                frame_key.push(k);
                continue;
            }
            let name = site_name(profile, frame, granularity);
            let next = names.len() as u32;
            let k = *by_name.entry(name).or_insert_with_key(|name| {
                names.push(name.clone());
                next
            });
            by_function.insert(cache_key, k);
            frame_key.push(k);
        }
        SiteKeys { frame_key, names }
    }
}

fn cache_key(frame: &Frame, granularity: Granularity) -> (Option<u32>, i64, u64) {
    let function = frame.function.map(|f| f.0);
    match (granularity, function) {
        // Unsymbolized frames are named by address at every granularity.
        (_, None) => (None, 0, frame.address),
        (Granularity::Line, _) => (function, frame.line, 0),
        (_, Some(_)) => (function, 0, 0),
    }
}

/// The printed name of a frame at a granularity, spelled as pprof spells it.
pub fn site_name(profile: &Profile, frame: &Frame, granularity: Granularity) -> String {
    let name = profile.frame_name(frame);
    match granularity {
        Granularity::Function => name.to_string(),
        Granularity::File => {
            let file = profile.frame_file(frame);
            if file.is_empty() {
                name.to_string()
            } else {
                file.to_string()
            }
        }
        Granularity::Line => match name {
            FrameName::Function(n) => {
                let file = profile.frame_file(frame);
                if file.is_empty() {
                    n.to_string()
                } else {
                    format!("{n} {file}:{}", frame.line)
                }
            }
            FrameName::Address(_) => name.to_string(),
        },
    }
}

/// Flat and cum per site for one sample type.
pub fn sites(profile: &Profile, sample_index: usize, granularity: Granularity) -> SiteTable {
    let keys = SiteKeys::new(profile, granularity);
    let n = keys.names.len();
    let mut flat = vec![0i64; n];
    let mut cum = vec![0i64; n];
    // Stamp of the last sample that counted a key into cum: once per stack under recursion.
    let mut seen = vec![u32::MAX; n];
    let types = profile.sample_types.len();
    let mut total = 0i64;
    for (i, sample) in profile.samples.iter().enumerate() {
        let v = profile.values[i * types + sample_index];
        total += v;
        if v == 0 {
            continue;
        }
        let stamp = i as u32;
        let mut leaf = true;
        for &loc in profile.sample_stack(sample) {
            let l = &profile.locations[loc.0 as usize];
            let start = l.frames_start as usize;
            for &k in &keys.frame_key[start..start + l.frames_len as usize] {
                let k = k as usize;
                if leaf {
                    flat[k] += v;
                    leaf = false;
                }
                // Branch-free: whether a key repeats within a stack is not predictable.
                let fresh = i64::from(seen[k] != stamp);
                seen[k] = stamp;
                cum[k] += v & -fresh;
            }
        }
    }
    let sites: Vec<SiteTotal> = keys
        .names
        .into_iter()
        .enumerate()
        .filter(|&(k, _)| flat[k] != 0 || cum[k] != 0)
        .map(|(k, name)| SiteTotal {
            name,
            flat: flat[k],
            cum: cum[k],
        })
        .collect();
    let mut table = SiteTable { total, sites };
    table.sort_by_flat();
    table
}

/// One whole stack (site names, leaf first) with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackTotal {
    pub frames: Vec<String>,
    pub value: i64,
}

/// Values summed per distinct stack of site names, in no particular order.
pub fn stacks(profile: &Profile, sample_index: usize, granularity: Granularity) -> Vec<StackTotal> {
    let keys = SiteKeys::new(profile, granularity);
    let types = profile.sample_types.len();
    let mut by_stack: HashMap<Vec<u32>, i64> = HashMap::new();
    let mut path = Vec::new();
    for (i, sample) in profile.samples.iter().enumerate() {
        let v = profile.values[i * types + sample_index];
        if v == 0 {
            continue;
        }
        path.clear();
        for &loc in profile.sample_stack(sample) {
            let l = &profile.locations[loc.0 as usize];
            let start = l.frames_start as usize;
            path.extend_from_slice(&keys.frame_key[start..start + l.frames_len as usize]);
        }
        match by_stack.get_mut(path.as_slice()) {
            Some(total) => *total += v,
            None => {
                by_stack.insert(path.clone(), v);
            }
        }
    }
    by_stack
        .into_iter()
        .map(|(path, value)| StackTotal {
            frames: path
                .iter()
                .map(|&k| keys.names[k as usize].clone())
                .collect(),
            value,
        })
        .collect()
}

/// Stands in for a stack without frames, which folded text cannot spell.
const EMPTY_STACK: &str = "(no frames)";

/// Folded stacks of one sample type of a profile (function granularity), root first and
/// `;`-separated, sorted by stack. A `;` inside a function name becomes `:` so that it cannot
/// split a frame. An out-of-range sample index gives no stacks.
pub fn folded(profile: &Profile, sample_index: usize) -> Vec<(String, i64)> {
    if sample_index >= profile.sample_types.len() {
        return Vec::new();
    }
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for stack in stacks(profile, sample_index, Granularity::Function) {
        let mut line = String::new();
        for (i, name) in stack.frames.iter().rev().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.extend(name.chars().map(|c| if c == ';' { ':' } else { c }));
        }
        if line.is_empty() {
            line.push_str(EMPTY_STACK);
        }
        let total = totals.entry(line).or_insert(0);
        *total = total.saturating_add(stack.value);
    }
    totals.into_iter().collect()
}

#[cfg(test)]
mod folded_tests {
    use proptest::prelude::*;

    use super::folded;
    use crate::analyse::diff::testing::arb_profile;

    proptest! {
        #[test]
        fn folded_stacks_add_up_to_the_profile_total(p in arb_profile()) {
            for index in 0..p.sample_types.len() {
                let stacks = folded(&p, index);
                let sum: i64 = stacks.iter().map(|(_, v)| v).sum();
                prop_assert_eq!(sum, p.total(index));
                prop_assert!(stacks.windows(2).all(|w| w[0].0 < w[1].0));
                prop_assert!(stacks.iter().all(|(s, _)| !s.is_empty()));
            }
            prop_assert!(folded(&p, p.sample_types.len()).is_empty());
        }
    }
}
