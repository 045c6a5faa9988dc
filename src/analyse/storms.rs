//! Allocation storms: from the rise of each site's cumulative `alloc_space`, windows where the
//! allocation rate runs far above that site's typical rate, even when the GC frees it all; and
//! the cost of the profile writer itself, reported apart so it is never taken for the culprit.
//!
//! # In-use flat
//!
//! An allocation storm's site is "in-use flat" when, over the storm's windows, it kept less than
//! a tenth of what they allocated (or under 1 MiB), and the growth reading does not name it as
//! holding the rise (the churn's unswept garbage is not growth: `reading.rs`).

use serde::Serialize;

use super::reduce::PROFILING_SITE;
use super::series::{MIN_GROWTH_BYTES, SeriesGrid};

#[derive(Debug, Clone, Serialize)]
pub struct StormWindow {
    pub start_s: f64,
    pub end_s: f64,
    pub bytes_per_sec: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AllocStorm {
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    /// Mean allocation rate over the cycle.
    pub bytes_per_sec: f64,
    /// The site's typical (median) allocation rate between captures.
    pub typical_bytes_per_sec: f64,
    pub peak_bytes_per_sec: f64,
    pub windows: Vec<StormWindow>,
    /// Whether the site's in-use bytes stayed flat meanwhile (the GC freed it all).
    pub inuse_flat: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProfilingCost {
    pub inuse_bytes: i64,
    pub alloc_bytes_per_sec: f64,
    /// Share of the target's whole allocation rate spent writing profiles, 0..1.
    pub alloc_share: f64,
}

/// A window whose site kept this share of what it allocated is growth, not a storm.
const KEPT_SHARE: f64 = 0.5;
/// A storm whose site kept less than this share of what its windows allocated left its
/// in-use flat.
const FLAT_SHARE: f64 = 0.1;

/// The value of a series at time `at`: its last point at or before it.
fn value_at(times: &[f64], values: &[f64], at: f64) -> Option<f64> {
    let i = times.partition_point(|&t| t <= at + 1e-9);
    values.get(i.checked_sub(1)?).copied()
}

/// A storm window runs at least this many times the site's typical allocation rate.
const STORM_FACTOR: f64 = 4.0;
const STORM_FLOOR_BPS: f64 = 8.0 * 1024.0 * 1024.0;
/// Allocation rates are measured over windows at least this long (seconds).
const STORM_WINDOW_S: f64 = 1.0;

/// A site's typical allocation rate and the bar a storm passes: the time-weighted median
/// rate of the spans that are not themselves above the bar. A plain median is outvoted by a
/// storm that covers half the spans (a few seconds of a short recording, or a stretch where
/// the GC, and so the publication of the figures, runs far more often), and an idle start
/// that no GC published is one long span however long it lasted. `spans` are (seconds, rate).
fn typical_rate(spans: &[(f64, f64)]) -> (f64, f64) {
    let mut spans = spans.to_vec();
    loop {
        let typical = weighted_median(&spans);
        let bar = (typical * STORM_FACTOR).max(STORM_FLOOR_BPS);
        let before = spans.len();
        spans.retain(|&(_, r)| r < bar);
        if spans.len() == before || spans.is_empty() {
            return (typical, bar);
        }
    }
}

pub(crate) fn storms(
    alloc: &SeriesGrid,
    inuse: &SeriesGrid,
) -> (Vec<AllocStorm>, Option<ProfilingCost>) {
    let t = alloc.times();
    let span = t.last().copied().unwrap_or(0.0) - t.first().copied().unwrap_or(0.0);
    if t.len() < 3 || span <= 0.0 {
        return (Vec::new(), None);
    }
    // When the heap profile was published anew: the captures whose in-use figures moved.
    let published: Vec<f64> = {
        let times = inuse.times();
        let totals: Vec<f64> = (0..times.len())
            .map(|i| inuse.series().map(|(_, v)| v[i]).sum())
            .collect();
        (1..times.len())
            .filter(|&i| totals[i] != totals[i - 1])
            .map(|i| times[i])
            .collect()
    };
    let mut total_rate = 0.0;
    let mut profiling_rate = 0.0;
    let mut out = Vec::new();
    for (name, values) in alloc.series() {
        let mean = (values[values.len() - 1] - values[0]) / span;
        total_rate += mean.max(0.0);
        if name == PROFILING_SITE {
            profiling_rate = mean.max(0.0);
            continue;
        }
        // Allocation totals are published at each GC, so single intervals are lumpy; rates
        // are taken over windows of at least STORM_WINDOW_S.
        let mut spans: Vec<(usize, usize, f64)> = Vec::new();
        let mut j = 0;
        for k in 1..t.len() {
            if t[k] - t[j] >= STORM_WINDOW_S || k == t.len() - 1 {
                spans.push((
                    j,
                    k,
                    ((values[k] - values[j]) / (t[k] - t[j]).max(1e-3)).max(0.0),
                ));
                j = k;
            }
        }
        let mut timed: Vec<(f64, f64)> = spans.iter().map(|&(j, k, r)| (t[k] - t[j], r)).collect();
        // Before its first point the series says only what the site had allocated since the
        // cycle began: an idle start that no GC published is that long at that rate.
        if t[0] >= STORM_WINDOW_S {
            timed.push((t[0], values[0].max(0.0) / t[0]));
        }
        let (typical, bar) = typical_rate(&timed);
        let held = inuse.series().find(|(n, _)| *n == name).map(|(_, v)| v);
        // The spans above the bar, joined where they touch: one burst each. The first span
        // publishes everything allocated since process start (the first GC): start-up work,
        // not a storm.
        let mut bursts: Vec<(usize, usize, f64)> = Vec::new();
        for &(from, to, r) in spans.iter().filter(|s| s.2 >= bar && s.0 != 0) {
            match bursts.last_mut() {
                Some(b) if b.1 == from => {
                    let (x, y) = (t[b.1] - t[b.0], t[to] - t[from]);
                    b.2 = (b.2 * x + r * y) / (x + y);
                    b.1 = to;
                }
                _ => bursts.push((from, to, r)),
            }
        }
        let mut windows: Vec<StormWindow> = Vec::new();
        // What the storm's bursts allocated, and how much of it the site held after them.
        let (mut storm_allocated, mut storm_kept) = (0.0, 0.0);
        for (from, to, r) in bursts {
            // A burst that kept at least half of what it allocated is the site's growth (a
            // store filling up), which the reading reports, not a storm that drops it all.
            // What it kept is published one to two GCs late: it is the most the site held
            // from the burst's end to the second publication after it.
            let allocated = values[to] - values[from];
            let horizon = published
                .iter()
                .filter(|&&p| p > t[to] + 1e-9)
                .nth(1)
                .copied()
                .unwrap_or(f64::INFINITY);
            let kept = held.and_then(|v| {
                let times = inuse.times();
                let base = value_at(times, v, t[from])?;
                let later = (0..times.len())
                    .filter(|&i| times[i] >= t[to] - 1e-9 && times[i] <= horizon + 1e-9)
                    .map(|i| v[i])
                    .fold(value_at(times, v, t[to])?, f64::max);
                Some(later - base)
            });
            if kept.is_some_and(|k| k >= KEPT_SHARE * allocated) {
                continue;
            }
            storm_allocated += allocated;
            storm_kept += kept.unwrap_or(0.0).max(0.0);
            windows.push(StormWindow {
                start_s: t[from],
                end_s: t[to],
                bytes_per_sec: r,
            });
        }
        // A storm allocates far more than its site keeps: a site whose in-use rose over the
        // cycle by half of what its windows allocated is a grower under load, which the
        // reading names; its allocation is not a second finding that contradicts it.
        let kept_over_cycle = held.map_or(0.0, |v| {
            let first = v.first().copied().unwrap_or(0.0);
            v.iter().copied().fold(first, f64::max) - first
        });
        if windows.is_empty() || kept_over_cycle >= KEPT_SHARE * storm_allocated {
            continue;
        }
        let peak = windows.iter().map(|w| w.bytes_per_sec).fold(0.0, f64::max);
        // Flat meanwhile: over its windows the site kept next to nothing of what it
        // allocated. (A fit over the whole cycle read a step, the level of unswept garbage a
        // churn publishes once it starts, as growth; a site that grows besides is named by
        // the reading, which then calls it not flat.)
        let inuse_flat = storm_kept < (FLAT_SHARE * storm_allocated).max(MIN_GROWTH_BYTES);
        out.push(AllocStorm {
            name: name.to_string(),
            bytes_per_sec: mean,
            typical_bytes_per_sec: typical,
            peak_bytes_per_sec: peak,
            windows,
            inuse_flat,
        });
    }
    out.sort_by(|a, b| {
        b.peak_bytes_per_sec
            .total_cmp(&a.peak_bytes_per_sec)
            .then(a.name.cmp(&b.name))
    });
    let profiling = (profiling_rate > 0.0).then(|| ProfilingCost {
        inuse_bytes: inuse
            .series()
            .find(|(n, _)| *n == PROFILING_SITE)
            .and_then(|(_, v)| v.last().copied())
            .unwrap_or(0.0) as i64,
        alloc_bytes_per_sec: profiling_rate,
        alloc_share: if total_rate > 0.0 {
            profiling_rate / total_rate
        } else {
            0.0
        },
    });
    (out, profiling)
}

/// The rate at which half the spans' time runs at or below: of two middle spans, the quieter.
fn weighted_median(spans: &[(f64, f64)]) -> f64 {
    let mut spans = spans.to_vec();
    spans.sort_by(|a, b| a.1.total_cmp(&b.1));
    let half = spans.iter().map(|s| s.0).sum::<f64>() / 2.0;
    let mut so_far = 0.0;
    for (seconds, rate) in &spans {
        so_far += seconds;
        if so_far >= half - 1e-9 {
            return *rate;
        }
    }
    spans.last().map_or(0.0, |s| s.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    /// 20 s of captures every 0.5 s; from 10 to 13 s the site allocates 16 MiB/s (1 MiB/s
    /// before and after), and `keeps` of it stays in use.
    fn grids(keeps: f64) -> (SeriesGrid, SeriesGrid) {
        let (mut alloc, mut inuse) = (SeriesGrid::default(), SeriesGrid::default());
        let (mut allocated, mut held) = (0.0, 0.0);
        for i in 0..=40 {
            let t = i as f64 * 0.5;
            let rate = if (10.0..13.0).contains(&t) { 16.0 } else { 1.0 };
            allocated += rate * 0.5 * MIB;
            if rate > 1.0 {
                held += keeps * rate * 0.5 * MIB;
            }
            alloc.push(t, [("main.store", allocated)]);
            inuse.push(t, [("main.store", held)]);
        }
        (alloc, inuse)
    }

    #[test]
    fn a_burst_that_drops_what_it_allocates_is_a_storm_and_one_that_keeps_it_is_growth() {
        let (alloc, inuse) = grids(0.0);
        let (found, _) = storms(&alloc, &inuse);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].inuse_flat);
        assert!(found[0].peak_bytes_per_sec > 10.0 * MIB, "{found:?}");

        // A store filling up at the same rate: the reading's growth, not a storm.
        let (alloc, inuse) = grids(1.0);
        let (found, _) = storms(&alloc, &inuse);
        assert!(found.is_empty(), "{found:?}");
        // Keeping less than half is still a storm beside a slower growth, but its in-use
        // is not flat.
        let (alloc, inuse) = grids(0.3);
        let (found, _) = storms(&alloc, &inuse);
        assert_eq!(found.len(), 1);
        assert!(!found[0].inuse_flat, "{found:?}");
    }

    /// etcd's WAL replay (issue 33, item 8): the records a window decodes are kept, but the
    /// profile publishes them one GC later, after the window. Kept, so no storm "in-use flat".
    #[test]
    fn what_a_window_keeps_is_read_after_the_publication_lag() {
        let (mut alloc, mut inuse) = (SeriesGrid::default(), SeriesGrid::default());
        let (mut allocated, mut published) = (0.0, 0.0);
        let mut kept_so_far = 0.0;
        for i in 0..=40 {
            let t = i as f64 * 0.5;
            let rate = if (10.0..13.0).contains(&t) { 40.0 } else { 1.0 };
            allocated += rate * 0.5 * MIB;
            if rate > 1.0 {
                kept_so_far += rate * 0.5 * MIB;
            }
            // Published every 1.5 s, showing what was kept a GC before.
            if i % 3 == 0 {
                published = kept_so_far - if rate > 1.0 { 60.0 * MIB } else { 0.0 };
                published = published.max(0.0);
            }
            alloc.push(t, [("wal.MustUnmarshalEntry", allocated)]);
            inuse.push(t, [("wal.MustUnmarshalEntry", published)]);
        }
        let (found, _) = storms(&alloc, &inuse);
        assert!(found.is_empty(), "{found:?}");
    }

    /// An idle start that no GC published (one point at 0 s, or none: the series then starts
    /// at the flood), then a parser that allocates and drops 400 MiB/s, published every 0.2 s,
    /// for a shorter time than the idle lasted (the zoo's flood beside a storm). By count, the
    /// storm's spans outvoted the idle start and set their own bar; by time, the idle start is
    /// the site's typical rate.
    #[test]
    fn a_storm_after_an_unpublished_idle_start_is_found() {
        for point_at_start in [true, false] {
            let (mut alloc, mut inuse) = (SeriesGrid::default(), SeriesGrid::default());
            if point_at_start {
                alloc.push(0.0, [("main.(*client).parse", 0.0)]);
                inuse.push(0.0, [("main.(*client).parse", 0.0)]);
            }
            for i in 0..=11 {
                let t = 3.3 + i as f64 * 0.2;
                let allocated = 20.0 * MIB + 400.0 * MIB * (t - 3.3);
                alloc.push(t, [("main.(*client).parse", allocated)]);
                inuse.push(t, [("main.(*client).parse", MIB)]);
            }
            let (found, _) = storms(&alloc, &inuse);
            assert_eq!(found.len(), 1, "point at 0 s: {point_at_start}: {found:?}");
            assert!(found[0].inuse_flat, "{found:?}");
            assert!(found[0].peak_bytes_per_sec > 200.0 * MIB, "{found:?}");
            assert!(found[0].typical_bytes_per_sec < 10.0 * MIB, "{found:?}");
        }
    }

    #[test]
    fn a_step_to_a_level_after_the_storm_leaves_its_in_use_flat() {
        // A storm from 3 to 6 s that frees all it allocates; from 10 s a churn publishes a
        // level of unswept garbage (20 MiB). A Theil-Sen fit over the whole cycle reads that
        // step as 1.1 MiB/s of growth (22 MiB over the cycle); the storm itself kept nothing.
        let (mut alloc, mut inuse) = (SeriesGrid::default(), SeriesGrid::default());
        let mut allocated = 0.0;
        for i in 0..=40 {
            let t = i as f64 * 0.5;
            let rate = if (3.0..6.0).contains(&t) { 16.0 } else { 1.0 };
            allocated += rate * 0.5 * MIB;
            let level = if t >= 10.0 { 20.0 * MIB } else { 0.0 };
            alloc.push(t, [("main.parse", allocated)]);
            inuse.push(t, [("main.parse", level + (i % 2) as f64 * 0.1 * MIB)]);
        }
        let (found, _) = storms(&alloc, &inuse);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].inuse_flat, "{found:?}");
    }
}
