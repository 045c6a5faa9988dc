//! Spikes are findings: per boot cycle the peak of the in-use heap, of process memory and of
//! cgroup memory, each with its time; and a transient episode (a rise, then a fall) with the
//! sites that made it, found by comparing the capture at the peak with the one before the
//! rise. Steady growth fits miss these; an OOM can still come of them.

use serde::Serialize;

use super::reduce::{PROFILING_SITE, SiteFigures};
use crate::model::memory::MemorySample;

/// A rise smaller than this is no episode (32 sampling periods of Go's MemProfileRate).
const MIN_RISE_BYTES: i64 = 16 << 20;
/// ... nor one that adds less than this share of the heap before it.
const MIN_RISE_SHARE: f64 = 0.5;
/// An episode is transient when the heap falls back by at least this share of the rise.
const FALL_SHARE: f64 = 0.5;
/// A site counts among the makers of a peak when it added at least this much.
const MIN_SITE_BYTES: i64 = 1 << 20;
/// Sites kept per episode.
const SITES: usize = 5;

/// The largest figure of a series, and when (seconds since the cycle's first capture).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Peak {
    pub bytes: i64,
    pub at_s: f64,
}

/// Per cycle, the peak of each memory figure there is.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Peaks {
    /// In-use heap, as the heap profiles reported it.
    pub heap: Option<Peak>,
    /// The process's resident memory (RSS), sampled from outside.
    pub process: Option<Peak>,
    /// The cgroup's usage, page cache included.
    pub cgroup: Option<Peak>,
}

/// A site that made a peak: its in-use bytes before the rise and at the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpikeSite {
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    pub before: i64,
    pub at_peak: i64,
    /// Share of the whole rise, 0..1.
    pub share: f64,
}

/// A rise of the in-use heap into a peak, and the fall after it when there was one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// The capture before the rise: when, and the heap then.
    pub start_s: f64,
    pub base_bytes: i64,
    pub peak_s: f64,
    pub peak_bytes: i64,
    /// When the heap had fallen back (by at least half the rise), and to what.
    pub fell_s: Option<f64>,
    pub after_bytes: Option<i64>,
    /// True when it fell back: a transient episode, not growth.
    pub transient: bool,
    /// The peak against the memory limit, 0..1, when the limit is known.
    pub share_of_limit: Option<f64>,
    /// The seqs of the two captures compared (before the rise, at the peak), for flamegraphs.
    pub from_seq: Option<u64>,
    pub to_seq: Option<u64>,
    pub sites: Vec<SpikeSite>,
}

fn peak_of(points: impl Iterator<Item = (f64, i64)>) -> Option<Peak> {
    points
        .map(|(at_s, bytes)| Peak { bytes, at_s })
        .reduce(|a, b| if b.bytes > a.bytes { b } else { a })
}

/// The peaks of a cycle: `heap` is `(seconds, in-use bytes)` per heap capture, `memory` the
/// samples of the cycle with `start_ms` its first capture.
pub fn peaks(heap: &[(f64, i64)], memory: &[&MemorySample], start_ms: i64) -> Peaks {
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    Peaks {
        heap: peak_of(heap.iter().copied()),
        process: peak_of(
            memory
                .iter()
                .filter_map(|m| m.rss.map(|r| (secs(m.t_ms), r as i64))),
        ),
        cgroup: peak_of(
            memory
                .iter()
                .filter_map(|m| m.usage.map(|u| (secs(m.t_ms), u as i64))),
        ),
    }
}

/// The biggest rise of the in-use heap into its peak, when it is big enough to be one:
/// from the last capture before the peak still near the low point before it, to the peak.
/// `heap` is `(seconds, bytes)` in time order.
pub fn episode(heap: &[(f64, i64)], limit: Option<u64>) -> Option<Episode> {
    let (p, &(peak_s, peak)) = heap
        .iter()
        .enumerate()
        .reduce(|a, b| if b.1.1 > a.1.1 { b } else { a })?;
    let low = heap[..=p].iter().map(|h| h.1).min()?;
    let rise = peak - low;
    if rise < MIN_RISE_BYTES || (rise as f64) < MIN_RISE_SHARE * low as f64 {
        return None;
    }
    let near_low = low + rise / 20;
    let b = (0..=p).rev().find(|&i| heap[i].1 <= near_low)?;
    let fell = heap[p..]
        .iter()
        .find(|h| ((peak - h.1) as f64) >= FALL_SHARE * rise as f64)
        .copied();
    Some(Episode {
        start_s: heap[b].0,
        base_bytes: heap[b].1,
        peak_s,
        peak_bytes: peak,
        fell_s: fell.map(|f| f.0),
        after_bytes: fell.map(|_| heap[p..].iter().map(|h| h.1).min().unwrap_or(peak)),
        transient: fell.is_some(),
        share_of_limit: limit.filter(|&l| l > 0).map(|l| peak as f64 / l as f64),
        from_seq: None,
        to_seq: None,
        sites: Vec::new(),
    })
}

/// Episodes kept beside the biggest one.
const OTHER_EPISODES: usize = 4;

/// The transient episodes other than `main` (the biggest): found the same way in the stretches
/// before its rise and after its fall, biggest rise first.
pub fn other_episodes(heap: &[(f64, i64)], limit: Option<u64>, main: &Episode) -> Vec<Episode> {
    fn walk(heap: &[(f64, i64)], limit: Option<u64>, out: &mut Vec<Episode>, depth: usize) {
        if depth > 8 || heap.len() < 3 {
            return;
        }
        let Some(e) = episode(heap, limit) else {
            return;
        };
        let start = heap.iter().position(|h| h.0 >= e.start_s).unwrap_or(0);
        let end = e
            .fell_s
            .and_then(|f| heap.iter().position(|h| h.0 >= f))
            .unwrap_or(heap.len());
        walk(&heap[..start], limit, out, depth + 1);
        walk(&heap[(end + 1).min(heap.len())..], limit, out, depth + 1);
        if e.transient {
            out.push(e);
        }
    }
    let start = heap.iter().position(|h| h.0 >= main.start_s).unwrap_or(0);
    let end = main
        .fell_s
        .and_then(|f| heap.iter().position(|h| h.0 >= f))
        .unwrap_or(heap.len());
    let mut out = Vec::new();
    walk(&heap[..start], limit, &mut out, 0);
    walk(&heap[(end + 1).min(heap.len())..], limit, &mut out, 0);
    out.sort_by(|a, b| {
        (b.peak_bytes - b.base_bytes)
            .cmp(&(a.peak_bytes - a.base_bytes))
            .then(a.peak_s.total_cmp(&b.peak_s))
    });
    out.truncate(OTHER_EPISODES);
    out
}

/// The sites that made a peak: what each added from `before` to `at_peak`, most first.
pub fn spike_sites(before: &[SiteFigures], at_peak: &[SiteFigures]) -> Vec<SpikeSite> {
    let was = |name: &str| {
        before
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.value)
    };
    let mut out: Vec<SpikeSite> = at_peak
        .iter()
        .filter(|s| s.name != PROFILING_SITE)
        .map(|s| SpikeSite {
            name: s.name.clone(),
            before: was(&s.name),
            at_peak: s.value,
            share: 0.0,
        })
        .filter(|s| s.at_peak - s.before >= MIN_SITE_BYTES)
        .collect();
    let rise: i64 =
        at_peak.iter().map(|s| s.value).sum::<i64>() - before.iter().map(|s| s.value).sum::<i64>();
    for s in &mut out {
        s.share = if rise > 0 {
            ((s.at_peak - s.before) as f64 / rise as f64).min(1.0)
        } else {
            0.0
        };
    }
    out.sort_by(|x, y| {
        (y.at_peak - y.before)
            .cmp(&(x.at_peak - x.before))
            .then(x.name.cmp(&y.name))
    });
    out.truncate(SITES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    fn series(values: &[i64]) -> Vec<(f64, i64)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64 * 0.5, v * MIB))
            .collect()
    }

    #[test]
    fn a_rise_and_fall_is_a_transient_episode_from_the_low_point_to_the_peak() {
        // 30.8 → 199 → 58.8 MiB, as the controller's datastore migration did.
        let heap = series(&[31, 31, 30, 60, 120, 199, 199, 90, 59, 59]);
        let e = episode(&heap, Some(1024 * MIB as u64)).expect("an episode");
        assert_eq!((e.start_s, e.peak_s), (1.0, 2.5));
        assert_eq!((e.base_bytes, e.peak_bytes), (30 * MIB, 199 * MIB));
        assert!(e.transient);
        assert_eq!(e.fell_s, Some(3.5));
        assert_eq!(e.after_bytes, Some(59 * MIB));
        let share = e.share_of_limit.unwrap();
        assert!((share - 199.0 / 1024.0).abs() < 1e-9);
    }

    #[test]
    fn several_spikes_are_each_an_episode_biggest_first() {
        let heap = series(&[10, 10, 80, 10, 10, 200, 10, 10, 50, 10, 10]);
        let main = episode(&heap, None).unwrap();
        assert_eq!(main.peak_bytes, 200 * MIB);
        let others = other_episodes(&heap, None, &main);
        let peaks: Vec<i64> = others.iter().map(|e| e.peak_bytes / MIB).collect();
        assert_eq!(peaks, [80, 50]);
        assert!(others.iter().all(|e| e.transient));
    }

    #[test]
    fn growth_to_the_end_is_an_episode_that_did_not_fall_and_noise_is_none() {
        let e = episode(&series(&[4, 20, 40, 80, 120]), None).unwrap();
        assert!(!e.transient);
        assert_eq!(e.fell_s, None);
        // A few MiB on a large heap is no episode.
        assert_eq!(episode(&series(&[100, 104, 110, 101]), None), None);
        assert_eq!(episode(&[], None), None);
    }

    #[test]
    fn the_sites_that_made_the_peak_are_those_that_added_to_it() {
        let f = |name: &str, mib: i64| SiteFigures {
            name: name.into(),
            value: mib * MIB,
            alloc: 0,
        };
        let before = [f("main.settings", 4), f("main.index", 0)];
        let at = [
            f("main.settings", 4),
            f("main.index", 150),
            f("main.small", 2),
            f(PROFILING_SITE, 8),
        ];
        let sites = spike_sites(&before, &at);
        let names: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["main.index", "main.small"]);
        assert!(sites[0].share > 0.9, "{sites:?}");
    }
}
