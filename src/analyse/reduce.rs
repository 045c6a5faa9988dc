//! Shrinks one decoded profile to what the growth analysis keeps of it: per-site figures
//! keyed by name, so builds with different addresses compare and the profile can be dropped.

use std::collections::HashMap;

use crate::decode::stackdump::StackDump;
use crate::model::{LocId, Profile};

/// The pseudo-site that collects what the profile writer itself allocates in the target.
pub const PROFILING_SITE: &str = "(profiling: runtime/pprof)";

/// One site's figures in one capture.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteFigures {
    pub name: String,
    /// In-use bytes (heap) or goroutine count.
    pub value: i64,
    /// Cumulative allocated bytes since process start (heap only).
    pub alloc: i64,
}

fn is_profiler(name: &str) -> bool {
    name.starts_with("runtime/pprof.") || name.starts_with("net/http/pprof.")
}

/// Leaves the profile writer's stacks out of folded stacks ("root;…;leaf"): any stack through
/// `runtime/pprof` or `net/http/pprof` (the `compress/flate` under them included) is the cost
/// of watching, not the target's growth. Returns what is kept and the amount left out.
pub fn without_profiler(stacks: Vec<(String, i64)>) -> (Vec<(String, i64)>, i64) {
    let mut left_out = 0;
    let kept = stacks
        .into_iter()
        .filter(|(stack, v)| {
            let profiler = stack.split(';').any(is_profiler);
            if profiler {
                left_out += v.max(&0);
            }
            !profiler
        })
        .collect();
    (kept, left_out)
}

/// Heap sites: flat in-use and allocated bytes at the leaf function, as pprof names it;
/// samples under the profile writer go to [`PROFILING_SITE`] so the cost of watching is
/// never mistaken for the culprit. Names and the profiler test are worked out once per
/// function and location, so the per-sample work is indexing.
pub fn heap_sites(profile: &Profile) -> Vec<SiteFigures> {
    let Some(inuse) = profile
        .find_sample_type("inuse_space")
        .or_else(|| (!profile.sample_types.is_empty()).then(|| profile.default_sample_index()))
    else {
        return Vec::new();
    };
    let alloc = profile.find_sample_type("alloc_space");
    let mut slots: Vec<(&str, i64, i64)> = vec![(PROFILING_SITE, 0, 0), ("(unsymbolized)", 0, 0)];
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut function_slot = Vec::with_capacity(profile.functions.len());
    let mut function_profiler = Vec::with_capacity(profile.functions.len());
    for f in &profile.functions {
        let name = profile.str(f.name);
        function_profiler.push(is_profiler(name));
        let next = slots.len();
        let slot = *by_name.entry(name).or_insert(next);
        if slot == next {
            slots.push((name, 0, 0));
        }
        function_slot.push(slot);
    }
    let location_profiler: Vec<bool> = (0..profile.locations.len())
        .map(|l| {
            profile.location_frames(LocId(l as u32)).iter().any(|f| {
                f.function
                    .is_some_and(|id| function_profiler[id.0 as usize])
            })
        })
        .collect();
    let types = profile.sample_types.len();
    for (i, sample) in profile.samples.iter().enumerate() {
        let values = &profile.values[i * types..(i + 1) * types];
        let (v_inuse, v_alloc) = (values[inuse], alloc.map_or(0, |a| values[a]));
        if v_inuse == 0 && v_alloc == 0 {
            continue;
        }
        let stack = profile.sample_stack(sample);
        let Some(&leaf_location) = stack.first() else {
            continue;
        };
        let slot = if stack.iter().any(|l| location_profiler[l.0 as usize]) {
            0
        } else {
            match profile
                .location_frames(leaf_location)
                .first()
                .and_then(|f| f.function)
            {
                Some(id) => function_slot[id.0 as usize],
                None => 1,
            }
        };
        slots[slot].1 += v_inuse;
        slots[slot].2 += v_alloc;
    }
    let mut out: Vec<SiteFigures> = slots
        .into_iter()
        .filter(|&(_, value, alloc)| value != 0 || alloc != 0)
        .map(|(name, value, alloc)| SiteFigures {
            name: name.to_string(),
            value,
            alloc,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Goroutine stacks named by their first frame outside the runtime (a parked goroutine's
/// leaf is always `runtime.gopark`), with their counts.
pub fn goroutine_sites(profile: &Profile) -> Vec<SiteFigures> {
    let types = profile.sample_types.len();
    let index = profile.default_sample_index();
    let mut sites: HashMap<String, i64> = HashMap::new();
    for (i, sample) in profile.samples.iter().enumerate() {
        let count = profile.values[i * types + index];
        let name = profile
            .stack_frames(sample)
            .map(|f| profile.frame_name(f).to_string())
            .find(|n| !is_runtime(n))
            .unwrap_or_else(|| "runtime".to_string());
        *sites.entry(name).or_insert(0) += count;
    }
    let mut out: Vec<SiteFigures> = sites
        .into_iter()
        .map(|(name, value)| SiteFigures {
            name,
            value,
            alloc: 0,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The same per-site figures from a text stack dump (the agent's op 0x01): each stack named by
/// its first frame outside the runtime, so a run collected over the agent shows the same
/// goroutine growth as one collected over HTTP.
pub fn goroutine_dump_sites(dump: &StackDump) -> Vec<SiteFigures> {
    let mut sites: HashMap<&str, i64> = HashMap::new();
    for stack in &dump.stacks {
        let name = stack
            .frames
            .iter()
            .map(String::as_str)
            .find(|n| !is_runtime(n))
            .unwrap_or("runtime");
        *sites.entry(name).or_insert(0) += stack.count;
    }
    let mut out: Vec<SiteFigures> = sites
        .into_iter()
        .map(|(name, value)| SiteFigures {
            name: name.to_string(),
            value,
            alloc: 0,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn is_runtime(name: &str) -> bool {
    name.starts_with("runtime.") || name.contains(".runtime_") || name.starts_with("internal/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{DecodeLimits, decode};

    fn fixture(name: &str) -> Profile {
        let path = format!("{}/testdata/profiles/{name}", env!("CARGO_MANIFEST_DIR"));
        decode(&std::fs::read(path).unwrap(), &DecodeLimits::default()).unwrap()
    }

    #[test]
    fn leaked_goroutines_are_named_by_their_first_frame_outside_the_runtime() {
        let sites = goroutine_sites(&fixture("goroutineleak-goroutine.pb.gz"));
        let top = sites.iter().max_by_key(|s| s.value).unwrap();
        assert_eq!(top.name, "main.watchSubscription");
        assert!(top.value > 100, "{sites:?}");
        assert!(sites.iter().all(|s| !s.name.starts_with("runtime.gopark")));
    }

    #[test]
    fn heap_sites_sum_to_the_profile_totals() {
        let p = fixture("hiddenleak-heap-late.pb.gz");
        let sites = heap_sites(&p);
        let inuse: i64 = sites.iter().map(|s| s.value).sum();
        assert_eq!(inuse, p.total(p.find_sample_type("inuse_space").unwrap()));
        let catalog = sites.iter().find(|s| s.name == "main.loadCatalog").unwrap();
        assert!(catalog.value > 64 << 20);
    }

    #[test]
    fn a_text_dump_names_sites_like_a_goroutine_profile() {
        let text = include_bytes!("../../testdata/agent/goroutine-stack.txt");
        let dump = crate::decode::stackdump::parse(text).unwrap();
        let sites = goroutine_dump_sites(&dump);
        assert_eq!(
            sites.iter().map(|s| s.value).sum::<i64>(),
            dump.goroutines()
        );
        let top = sites.iter().max_by_key(|s| s.value).unwrap();
        assert_eq!(top.name, "main.watchPeer");
        // os/signal.signal_recv is the runtime's, linknamed: pprof names it the same way.
        assert!(
            sites.iter().any(|s| s.name == "os/signal.signal_recv"),
            "{sites:?}"
        );
        assert!(sites.iter().all(|s| !s.name.starts_with("runtime.")));
    }
}
