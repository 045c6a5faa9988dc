//! One boot cycle read whole once its captures are in: the heap's publications placed
//! ([`placement`](super::placement)) into the series the reading fits, the death from its
//! evidence, the memory's own trend, storms, goroutines, MemStats, the breakdown at the peak
//! and at the limit, and the reading's growing sites as the table's rows.

use super::placement::{
    LIVE_SHARE, Publication, Sighting, after_unpublished, before_first_publication,
    place_publication,
};
use super::{CycleGrowth, CycleState, SiteGrowth, Unpublished};
use crate::analyse::breakdown;
use crate::analyse::ends::CycleEnd;
use crate::analyse::reading::{self, Reading, ReadingInput};
use crate::analyse::runtime::{goroutines, memstats_view};
use crate::analyse::series::{LineFit, theil_sen};
use crate::analyse::spikes;
use crate::analyse::storms::storms;
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;

/// Whether a line fitted to time-ordered `points` rises over their span by at least half of
/// their rise from the first figure to the highest (a rise under an eighth of the highest
/// needs no accounting for).
pub(super) fn accounts_for_rise(fit: &LineFit, points: &[(f64, f64)]) -> bool {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return true;
    };
    let peak = points.iter().map(|p| p.1).fold(first.1, f64::max);
    let rise = peak - first.1;
    rise <= peak / 8.0 || fit.slope * (last.0 - first.0) >= rise / 2.0
}

pub(super) fn fit_points(points: &[(f64, f64)]) -> Option<LineFit> {
    let (t, v): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    theil_sen(&t, &v)
}

pub(super) fn cycle(
    index: u32,
    records: &[&CaptureRecord],
    state: CycleState,
    mem: &[&MemorySample],
    (next_start, exit): (Option<i64>, Option<&CaptureRecord>),
    limit: Option<u64>,
    forced_gc: bool,
) -> Option<CycleGrowth> {
    let good: Vec<&&CaptureRecord> = records.iter().filter(|r| r.is_ok()).collect();
    let exit_ms = exit.map(|x| x.t_ms);
    // A life known by its end alone: killed before it answered any capture (an `--also`
    // endpoint that opens only after a start-up replay). It began when its exit record says it
    // did, and is a life like any other: its death is counted (etcd under `--also`: 3 kills in
    // the manifest, "2 OOM-killed" said, and `check kills>2` passed).
    let (first, last) = match (
        good.iter().map(|r| r.t_ms).min(),
        good.iter().map(|r| r.t_ms).max(),
    ) {
        (Some(first), Some(last)) => (first, last),
        _ => {
            let x = exit?;
            let born = x.t_ms - x.totals.get("lived_ms").copied().unwrap_or(0);
            (born, born)
        }
    };
    let start_ms = state.start_ms.unwrap_or(first).min(first);
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    let heap: Vec<&&&CaptureRecord> = good.iter().filter(|r| r.kind == RecordKind::Heap).collect();
    let mut by_time = heap.clone();
    by_time.sort_by_key(|r| (r.t_ms, r.seq));
    // Duplicates too: each tells that the publication it showed still held.
    let mut published = None;
    let mut before: Option<&&&CaptureRecord> = None;
    let (mut distinct, mut seqs): (Vec<(f64, f64)>, Vec<u64>) = (Vec::new(), Vec::new());
    let inuse_of = |f: &(i64, Option<i64>)| f.0 as f64;
    let clocked: Vec<(f64, Option<u32>)> = by_time
        .iter()
        .map(|r| (secs(r.t_ms), r.gc.map(|g| g.num_gc)))
        .collect();
    // A capture stored as a twin of an earlier one (`dup_of`) is read from that one's file.
    let stored = |r: &CaptureRecord| r.dup_of.unwrap_or(r.seq);
    let mut unpublished = by_time.first().is_some_and(|r| before_first_publication(r));
    // The moment of the GC the first publication describes and its figure, when captures before
    // it counted garbage as in use: those after it, or above it, are no figure of the heap.
    let mut superseded_after: Option<(f64, i64)> = None;
    for r in &by_time {
        let last = before.replace(r);
        // With a forced GC every capture is current and placed, but a stored twin only once.
        if forced_gc && r.dup_of.is_some() {
            continue;
        }
        let Some(&inuse) = r.totals.get("inuse_space") else {
            continue;
        };
        let figures = (inuse, r.totals.get("alloc_space").copied());
        let at_before = last.map(|b| Sighting {
            at: secs(b.t_ms),
            num_gc: b.gc.map(|g| g.num_gc),
        });
        // The first publication after captures made before any: at its GC's moment, the
        // captures after it (garbage counted as in use) giving way, and so do those before it
        // that stand above it: what they summed beyond the heap that GC found was garbage.
        // When that GC found less than half of what had been allocated in use, they summed
        // garbage mostly, and all give way (GOGC=off: no GC until the soft limit, and 263 MiB
        // of dropped buffers read as the heap at 2 s).
        if let Some(at) = after_unpublished(r, unpublished, &clocked) {
            unpublished = false;
            let allocated = r.totals.get("alloc_space").copied().unwrap_or(inuse);
            let figure = if (inuse as f64) < LIVE_SHARE * allocated as f64 {
                i64::MIN
            } else {
                inuse
            };
            superseded_after = Some((at, figure));
            let keep = distinct.partition_point(|p: &(f64, f64)| p.0 <= at);
            distinct.truncate(keep);
            seqs.truncate(keep);
            let mut k = 0;
            while k < distinct.len() {
                if distinct[k].1 > figure as f64 {
                    distinct.remove(k);
                    seqs.remove(k);
                } else {
                    k += 1;
                }
            }
            distinct.push((at, inuse as f64));
            seqs.push(stored(r));
            published = Some(Publication {
                figures,
                first: secs(r.t_ms),
                last: secs(r.t_ms),
                at: Some(at),
                num_gc: r.gc.map(|g| g.num_gc),
                gc_after: None,
            });
            continue;
        }
        let current = before_first_publication(r);
        unpublished &= current;
        let Some(placed) = place_publication(
            &mut published,
            (&figures, inuse_of),
            secs(r.t_ms),
            at_before,
            r.gc.map(|g| g.num_gc),
            forced_gc || current,
        ) else {
            continue;
        };
        if let (Some((at, again)), Some(b)) = (placed.again, last) {
            distinct.push((at, again.0 as f64));
            seqs.push(stored(b));
        }
        distinct.push((placed.at, inuse as f64));
        seqs.push(stored(r));
    }
    let failed_after = records
        .iter()
        .filter(|r| !r.is_ok() && r.t_ms > last)
        .map(|r| r.t_ms)
        .min();
    // The death: the exit record of whoever started the process, else the first failed
    // capture after the last good one, else the next cycle's start.
    let stopped = exit_ms.or(failed_after).or(next_start);
    // How the cycle ended is told once its neighbours are known (`GrowthBuilder::finish`).
    let killed = false;
    let cgroup = mem
        .iter()
        .any(|m| m.source == "cgroup" && m.usage.is_some());
    let mem_points: Vec<(f64, f64)> = mem
        .iter()
        .filter(|m| m.alive && m.t_ms <= last.max(stopped.unwrap_or(last)))
        .filter_map(|m| m.bytes().map(|b| (secs(m.t_ms), b as f64)))
        .collect();
    // A whole-cycle fit is the memory's trend only when it accounts for the rise: a quiet start
    // and then a climb to the limit in its last moments fit a flat line ("0 B/s").
    let mem_fit = thin(&mem_points, 256)
        .and_then(|p| fit_points(&p))
        .filter(|f| accounts_for_rise(f, &mem_points));
    let at_limit = breakdown::at_limit(mem, start_ms, limit, killed);
    let died_after_s = stopped.map(secs);
    // Without totals in the records, the sites' sum on the grid is the heap.
    let summed: Vec<(f64, f64)> = if distinct.is_empty() {
        let times = state.inuse.times();
        (0..times.len())
            .map(|i| (times[i], state.inuse.series().map(|(_, v)| v[i]).sum()))
            .collect()
    } else {
        Vec::new()
    };
    let heap_points: &[(f64, f64)] = if distinct.is_empty() {
        &summed
    } else {
        &distinct
    };
    // What was allocated until each capture, where the source counts what its publications
    // do not hold yet (`proc:`'s recent_space): the runtime's own clock between GCs.
    let allocated: Vec<(f64, f64)> = by_time
        .iter()
        .filter_map(|r| {
            let published = *r.totals.get("alloc_space")?;
            let recent = *r.totals.get("recent_space")?;
            Some((secs(r.t_ms), (published + recent) as f64))
        })
        .collect();
    let reading = reading::read(&ReadingInput {
        heap: heap_points,
        seqs: &seqs,
        sites: &state.inuse,
        memory: &thin(&mem_points, 512).unwrap_or_default(),
        memory_of: if cgroup {
            "cgroup memory"
        } else {
            "process memory"
        },
        limit,
        died_s: died_after_s,
        at_limit: at_limit.is_some(),
        allocated: &allocated,
    });
    let sites = reading.as_ref().map_or_else(Vec::new, site_rows);

    // Allocation storms and the profiling cost.
    let (alloc_storms, profiling) = storms(&state.alloc, &state.inuse);
    let goroutine_growth = goroutines(&state.goroutines);
    let memstats = memstats_view(&good, start_ms);

    let memstats_records: Vec<&CaptureRecord> = good
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats)
        .map(|r| **r)
        .collect();
    let good_records: Vec<&CaptureRecord> = good.iter().map(|r| **r).collect();
    let stuck = crate::analyse::stuck::read(at_limit.as_ref(), mem, &good_records, start_ms);
    let heap_series: Vec<(f64, i64)> = by_time
        .iter()
        .filter(|r| {
            !(before_first_publication(r)
                && superseded_after.is_some_and(|(at, figure)| {
                    secs(r.t_ms) > at || r.totals.get("inuse_space").is_some_and(|&v| v > figure)
                }))
        })
        .filter_map(|r| Some((secs(r.t_ms), *r.totals.get("inuse_space")?)))
        .collect();
    let c = CycleGrowth {
        index,
        build: String::new(),
        build_info: None,
        pid: None,
        captures: good.len(),
        stored: heap.iter().filter(|r| r.dup_of.is_none()).count(),
        duplicates: heap.iter().filter(|r| r.dup_of.is_some()).count(),
        errors: records.iter().filter(|r| !r.is_ok()).count(),
        start_ms,
        span_s: secs(last),
        died_after_s,
        interval_s: good
            .iter()
            .max_by_key(|r| (r.t_ms, r.seq))
            .and_then(|r| r.interval_ms)
            .map(|ms| ms as f64 / 1000.0),
        end: CycleEnd::StillAnswering,
        killed,
        gc_clock: !heap.is_empty() && heap.iter().all(|r| r.gc.is_some()),
        kill_seen_s: None,
        oom_held_ms: None,
        oom_held_below_bytes: None,
        unpublished: heap.last().and_then(|r| {
            let recent_bytes = *r.totals.get("recent_space")?;
            let file = r.file.clone().or_else(|| {
                let twin = r.dup_of?;
                heap.iter().find(|h| h.seq == twin)?.file.clone()
            });
            Some(Unpublished {
                seq: r.seq,
                file,
                at_s: secs(r.t_ms),
                inuse_bytes: r.totals.get("inuse_space").copied().unwrap_or(0),
                recent_bytes,
            })
        }),
        heap_first: heap
            .first()
            .and_then(|r| r.totals.get("inuse_space").copied()),
        heap_last: heap
            .last()
            .and_then(|r| r.totals.get("inuse_space").copied()),
        total_bytes_per_sec: Some(reading.as_ref().map_or(0.0, |r| r.bytes_per_sec)),
        total_fit_r2: reading.as_ref().map(|r| r.fit_r2),
        memory_bytes_per_sec: mem_fit.map(|f| f.slope),
        memory_peak: mem.iter().filter_map(|m| m.bytes()).max(),
        memory_from_s: mem.first().map(|m| secs(m.t_ms)),
        limit_at_s: reading
            .as_ref()
            .and_then(|r| r.forecast.as_ref())
            .map(|f| f.at_s),
        sites,
        alloc_storms,
        goroutine_growth,
        profiling,
        memstats,
        runtime: None,
        peaks: spikes::peaks(&heap_series, mem, start_ms),
        breakdown: breakdown::at_peak(mem, &memstats_records, start_ms, limit),
        at_limit,
        stuck,
        memory_peak_anon: mem
            .iter()
            .filter_map(|m| {
                m.cgroup
                    .as_ref()
                    .and_then(|c| c.anon)
                    .or_else(|| m.process.as_ref().and_then(|p| p.rss_anon))
            })
            .max(),
        other_episodes: spikes::episode(&heap_series, limit)
            .map(|main| spikes::other_episodes(&heap_series, limit, &main))
            .unwrap_or_default(),
        episode: spikes::episode(&heap_series, limit),
        heap_sustained: reading.as_ref().is_some_and(|r| r.ongoing),
        reading,
    };
    let mut c = c;
    c.unflatten_storms();
    Some(c)
}

/// A site is among the growing ones when it holds at least this share of a rise still going on.
pub(super) const GROWING_SHARE: f64 = 0.1;

/// The rows of the growing-sites table: the reading's sites, each with its part of the rate,
/// while the episode still goes on at the end of the cycle (a rise that held is no growth).
pub(super) fn site_rows(r: &Reading) -> Vec<SiteGrowth> {
    if !r.ongoing {
        return Vec::new();
    }
    r.sites
        .iter()
        .filter(|s| s.share >= GROWING_SHARE)
        .map(|s| SiteGrowth {
            name: s.name.clone(),
            bytes_per_sec: s.bytes_per_sec,
            fit_r2: r.fit_r2,
            inuse_first: s.before,
            inuse_last: s.after,
            onset_s: Some(r.onset_s),
            share: s.share,
        })
        .collect()
}

pub(super) fn thin(points: &[(f64, f64)], max: usize) -> Option<Vec<(f64, f64)>> {
    if points.len() < 2 {
        return None;
    }
    let step = points.len().div_ceil(max);
    Some(points.iter().step_by(step.max(1)).copied().collect())
}
