//! One reading of a boot cycle's growth, computed once and quoted by every table, rule, summary
//! field and headline: growth is an episode with an onset, not a line through the whole cycle.
//!
//! # The episode
//!
//! `reading::read` runs once per cycle, inside `GrowthBuilder::finish`, on the heap's
//! publications (each placed at the moment it describes: a GC publishes the snapshot of the GC
//! before, so a new publication goes where the one before was first seen; when it is further
//! above that one than one GC goal allows (1.25 × the larger of twice it and 4 MiB), GCs ran
//! unseen between two captures, and the one before is placed again at the last capture that still
//! showed it and the new one halfway from there to its own capture, `growth::placement::place_publication`;
//! duplicates count as sightings).
//!
//! The episode is the rise into the cycle's peak (or its death), from its onset (the last
//! publication near the low before it: a quiet start is no part of it; when the heap came near
//! its top, fell back by half the rise and eight samples at least, and rose again, the rise into
//! the peak began at the low between: a spike before a leak) to its end (the peak while
//! the rise goes on; the first publication near the top, within a fifth of the rise, when the heap
//! held there long enough and rose on by less than a tenth of the rise since; "long enough" is
//! half the rise's length and more than three publication spacings, or, for a heap published
//! seldom, two publications when the cgroup or process memory, sampled every 50 ms, held over the
//! same stretch and the cycle did not sit at its limit; the same memory also overrules a late
//! "rise" of a few publications (up to six), which a bounded cache under churn shows as its
//! not-yet-swept garbage is published as in use).
//!
//! Two more readings keep noise from being called growth. When the heap's highest figure came
//! after the outside memory settled at the level it kept to the end (a plateau under GOMEMLIMIT
//! whose last publications climb with the GC's timing), the rise ends where the heap came near
//! its top before the memory settled, provided the memory held from there on and the heap itself
//! shows no trend since (a leak eating the GC's headroom under a flat memory is a trend and stays
//! growth). And while a cycle still lives, a heap that came near its top only in its last
//! publication, after holding a level, above that level by no more than the level's own wobble,
//! is read without that figure (one figure is no trend); a rise still going before it (a leak
//! published at each doubling of the heap) or a jump past the wobble is left alone. A heap whose
//! last figure fell out of the band near its top (below it by more than a fifth of the rise)
//! after the peak is no rise going on either.
//!
//! A memory that held says nothing of a heap whose every last figure climbed past what a held
//! level may rise (under GOMEMLIMIT the process sits at its soft limit while a leak eats the
//! GC's headroom): such a heap is still rising (`reading/episode.rs`).
//!
//! A rise still going may have changed its rate for good on the way (a load, then a slower leak;
//! a trickle, then a flood): when two straight segments fit far better than one, it starts at the
//! second. Where the sites were sampled, the onset is where the sites still rising into the
//! peak joined the rise, when that lies in its lower half: a start-up load, a filled cache or a
//! spike before a leak then fall before the onset, whatever the heap's line looks like
//! (`reading/onset.rs`). Its rate is the Theil–Sen slope over the episode alone (the rise over
//! its time for a step the fit cannot follow). Its sites are those holding the rise, ranked by their share of
//! it: from the grid at first, then exactly, in `pipeline::scan::growth`, from the two stored
//! captures whose figures are the onset's and the end's (`CycleGrowth::set_rise_sites`). A
//! forecast of the time to the limit is made only while the rise still goes on, never for a cycle
//! that died or sat at its limit, only with four points and a fit of R² ≥ 0.8 (on cgroup or
//! process memory over the same episode when sampled), and with the range the middle half of the
//! fit's pairwise slopes gives.
//!
//! # One reading, quoted everywhere
//!
//! The `Reading` is kept on `CycleGrowth` (`reading`), and the older fields are its figures:
//! `total_bytes_per_sec`, `total_fit_r2`, `limit_at_s`, `heap_sustained` and `sites` (the sites
//! holding at least a tenth of a rise still going on). The verdict, `growth`'s tables, the boot
//! cycle table and sites table of report.md and index.html, summary.json (`heap_bytes_per_sec`,
//! `growing_at_end`, `reading`), the rules (`growth>` is the episode's rate while it goes on, else
//! 0; `time-to-limit<` the death, the measured arrival at the limit, or the forecast) and
//! `compare` (`a_episode`, `b_episode`, who died first) all quote it; tests/cli/episodes.rs holds
//! every figure of the report, summary.json and `check` for a cycle against it. How a cycle
//! ended, and its death time, are `ends.rs`'s; allocation storms, `storms.rs`'s.
//!
//! Once the cycle's end is known, a rise that "held" in a life OOM-killed at its limit is read
//! again against the runtime's own figures at the death (`reading/death.rs`): a published heap
//! that stood still because no GC finished to publish it did not hold.

use serde::Serialize;

use super::series::{SeriesGrid, theil_sen};

mod death;
mod episode;
mod onset;

pub use death::{IntoDeath, into_death};

pub use episode::episode_bounds;
use episode::{bounds_when_memory_settled, held_since, lone_onset, outside_held};
use onset::{later_onset, onset_by_allocation, sites_joined};

/// An episode must rise by this share of the heap before it, beside [`MIN_GROWTH_BYTES`](super::series::MIN_GROWTH_BYTES).
const MIN_RISE_SHARE: f64 = 0.1;
/// The onset is the last capture within this share of the rise above the low point.
const NEAR_LOW: f64 = 0.05;
/// The heap is near its top within this share of the rise below its peak.
const NEAR_TOP: f64 = 0.2;
/// The heap held (the rise is over) when it stayed near its top at least this share of the
/// rise's length, and for more than [`HELD_SPACINGS`] publication spacings.
const HELD_SHARE: f64 = 0.5;
const HELD_SPACINGS: f64 = 3.0;
/// Publications after the heap came near its top that may show it held, with the outside
/// memory's word for the time between them; up to this many the outside memory may overrule
/// what looks like a trend in them (more are a trend the heap itself shows).
const MIN_HELD_PUBLICATIONS: usize = 2;
const FEW_PUBLICATIONS: usize = 6;
/// The peak is the first capture within this share of the largest one (a plateau's noise does
/// not move it to the plateau's end).
const PEAK_TOLERANCE: f64 = 0.01;
/// What the heap did after coming near its top is a trend, not noise, from this fit quality.
const LATE_TREND_R2: f64 = 0.5;
/// A forecast needs at least this many points in the episode and this fit quality.
const FORECAST_POINTS: usize = 4;
const FORECAST_R2: f64 = 0.8;
/// A forecast further out than this after the last capture is no forecast.
const FORECAST_HORIZON_S: f64 = 3600.0;
/// Sites kept in a reading.
const SITES: usize = 8;
/// A site holds part of the rise when it added at least this much.
const MIN_SITE_BYTES: f64 = 512.0 * 1024.0;
/// The bytes one sample of the heap profile stands for, on average (`MemProfileRate`).
const SAMPLE_BYTES: f64 = 512.0 * 1024.0;

/// A site holding part of the rise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RiseSite {
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    /// Its in-use bytes at the onset and at the episode's end.
    pub before: i64,
    pub after: i64,
    /// Its share of the heap's rise, 0..1.
    pub share: f64,
    /// Its part of the episode's rate: share × the heap's rate.
    pub bytes_per_sec: f64,
}

/// When the limit would be reached at the episode's rate, and how sure that is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// Seconds after the cycle's first capture.
    pub at_s: f64,
    /// The range the fit's middle half of slopes gives (the faster slope first).
    pub earliest_s: f64,
    pub latest_s: f64,
    /// R² of the fit it comes from.
    pub fit_r2: f64,
    /// What was fitted: "cgroup memory", "process memory" or "in-use heap".
    pub of: String,
}

/// The episode of a cycle: its onset, its rate, its sites, and whether it was still going.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    /// Seconds after the cycle's first capture: where the rise began, and where it ended (the
    /// peak, or the last capture when it rose to the end).
    pub onset_s: f64,
    pub end_s: f64,
    /// The in-use heap at the onset and at the end.
    pub from_bytes: i64,
    pub to_bytes: i64,
    /// The heap's rate fitted over the episode alone.
    pub bytes_per_sec: f64,
    pub fit_r2: f64,
    /// Heap publications inside the episode.
    pub points: usize,
    /// Still going at the end of the cycle (rising into the death, or at the last capture).
    pub ongoing: bool,
    /// When it was not: how long the heap held (or fell) after the peak, to the last capture.
    pub held_s: Option<f64>,
    /// The heap's figure at the last capture, when it held or fell after the peak.
    pub last_bytes: i64,
    /// Sites holding the rise, largest share first.
    pub sites: Vec<RiseSite>,
    /// The captures whose figures are the onset's and the end's (a publication is placed at
    /// the moment it describes, earlier than its capture).
    #[serde(skip)]
    pub onset_seq: Option<u64>,
    #[serde(skip)]
    pub end_seq: Option<u64>,
    /// The two stored captures the sites were read from (onset, end), when read from profiles.
    pub from_seq: Option<u64>,
    pub to_seq: Option<u64>,
    pub forecast: Option<Forecast>,
    /// One caller under which most of a rise spread over several sites lies, when there is one
    /// (read from the stacks that grew between `from_seq` and `to_seq`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<crate::analyse::cause::Cause>,
    /// A life killed at its limit while its published heap stood still and the runtime's own
    /// figures rose on: those figures (`death.rs`). The rise is then `ongoing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into_death: Option<IntoDeath>,
}

impl Reading {
    /// The rate the heap grows at the end of the cycle: the episode's while it goes on, else 0.
    pub fn rate_now(&self) -> f64 {
        if self.ongoing {
            self.bytes_per_sec
        } else {
            0.0
        }
    }

    pub fn rise(&self) -> i64 {
        self.to_bytes - self.from_bytes
    }
}

/// The median and quartiles of the pairwise slopes of `points`.
fn slope_quartiles(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let mut slopes = Vec::new();
    // At most 200 points, evenly spread, keep this bounded.
    let step = points.len().div_ceil(200).max(1);
    let picked: Vec<(f64, f64)> = points.iter().step_by(step).copied().collect();
    for (i, a) in picked.iter().enumerate() {
        for b in &picked[i + 1..] {
            if b.0 - a.0 > 1e-9 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    let mut q = |f: f64| {
        let at = ((slopes.len() - 1) as f64 * f).round() as usize;
        *slopes.select_nth_unstable_by(at, f64::total_cmp).1
    };
    Some((q(0.25), q(0.5), q(0.75)))
}

/// What the reading is computed from.
pub struct ReadingInput<'a> {
    /// The in-use heap at each publication, `(seconds, bytes)` in time order, and the seq of
    /// the stored capture that carried each (a duplicate's earlier twin; empty when unknown).
    pub heap: &'a [(f64, f64)],
    pub seqs: &'a [u64],
    /// Every site's in-use bytes on the cycle's grid (profiler's own site included: skipped).
    pub sites: &'a SeriesGrid,
    /// Outside memory (cgroup usage, else RSS) while the process lived, `(seconds, bytes)`,
    /// and what it is.
    pub memory: &'a [(f64, f64)],
    pub memory_of: &'a str,
    pub limit: Option<u64>,
    /// Seconds after the first capture when the cycle died, when it did (any death).
    pub died_s: Option<f64>,
    /// The limit was measured reached: no forecast then.
    pub at_limit: bool,
    /// Everything allocated until each capture, `(seconds, bytes)`, where the source counts
    /// what its publications do not hold yet (`proc:`'s `recent_space`); empty otherwise.
    pub allocated: &'a [(f64, f64)],
}

/// The reading of one cycle; `None` when the heap had no rise worth one.
pub fn read(input: &ReadingInput) -> Option<Reading> {
    without_a_last_wobble(input).unwrap_or_else(|| read_figures(input))
}

/// A cycle still alive at its end whose heap came near its top only in its last publication,
/// after it had held a level: when that figure stands above the level by no more than the
/// level's own wobble, one figure is no trend (a steady service's heap wobbles, and a wobble
/// can fall last). The reading is then that of the publications before it, with the figure
/// kept as the cycle's last. `None` when the rule does not apply. A rise still going before
/// the last figure (a leak published at each doubling of the heap) is left alone.
fn without_a_last_wobble(input: &ReadingInput) -> Option<Option<Reading>> {
    let heap = input.heap;
    if input.died_s.is_some()
        || heap.len() <= FORECAST_POINTS
        || episode_bounds(heap).is_none_or(|(_, q, _)| q + 1 != heap.len())
    {
        return None;
    }
    let n = heap.len() - 1;
    let before = read_figures(&ReadingInput {
        heap: &heap[..n],
        seqs: &input.seqs[..input.seqs.len().min(n)],
        ..*input
    });
    if before.as_ref().is_some_and(|r| r.ongoing) {
        return None;
    }
    // The level is what the heap did after the rise before came to its end: a spike's own
    // peak is no part of it (a leak rising on past a spike that fell is no wobble).
    let level_after = before.as_ref().map_or(f64::NEG_INFINITY, |r| r.end_s);
    let level: Vec<f64> = heap[..n]
        .iter()
        .filter(|h| h.0 > level_after)
        .map(|h| h.1)
        .collect();
    let high = level.iter().copied().fold(f64::MIN, f64::max);
    let low = level.iter().copied().fold(f64::MAX, f64::min);
    if heap[n].1 - high > high - low {
        return None;
    }
    // A level is many figures about one value: past the fence of their quartiles (Tukey's,
    // 1.5 times their spread above the upper one), a figure stands out. A storm's garbage
    // published in use makes the "level" after its rise range from the storm's top to the
    // heap without it, and a leak rising on past it is no wobble of that.
    if level.len() >= 4 {
        let mut sorted = level.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let (q1, q3) = (at(0.25), at(0.75));
        if heap[n].1 > q3 + 1.5 * (q3 - q1) && heap[n].1 > high {
            return None;
        }
    }
    Some(before.map(|mut r| {
        r.last_bytes = heap[n].1 as i64;
        r
    }))
}

fn read_figures(input: &ReadingInput) -> Option<Reading> {
    let heap = input.heap;
    let (mut b0, mut q0, mut p_max) = episode_bounds(heap)?;
    // A rise that filled and held ends where it came near its top; one still going may have
    // changed its rate for good on the way (a load, then a slower leak): it starts there.
    let rise = heap[p_max].1 - heap[b0].1;
    let memory_held = |since: f64| !input.at_limit && outside_held(input.memory, since, rise);
    // A heap that fell out of the band near its top after the peak is no rise going on.
    let fell = heap[heap.len() - 1].1 < heap[p_max].1 - NEAR_TOP * rise;
    let mut held = fell || held_since(heap, b0, q0, &memory_held);
    if !held && !input.at_limit {
        if let Some(bounds) = bounds_when_memory_settled(heap, input.memory, rise, p_max) {
            (b0, q0, p_max) = bounds;
            held = true;
        }
    }
    let (b, p) = if held {
        (b0, q0)
    } else {
        (later_onset(&heap[b0..=p_max]).map_or(b0, |k| b0 + k), p_max)
    };
    let b = sites_joined(input.sites, heap, b, p).unwrap_or(b);
    let q = if held { q0 } else { p };
    // A quiet start publishes nothing (no GC runs): the onset's figure may be far older than
    // the rise. Then the rate is fitted from the first figure of the rise on, and the onset
    // is where that line leaves the onset's level.
    // Where the captures counted what was allocated between publications, the runtime's own
    // count tells when the rise began: the onset's figure held until then.
    let by_allocation = if b < p {
        onset_by_allocation(heap, b, p, input.allocated)
    } else {
        None
    };
    let lone = by_allocation.is_none() && lone_onset(heap, b, p);
    let from = if lone { b + 1 } else { b };
    let mut points = heap[from..=p].to_vec();
    if let Some(t) = by_allocation {
        points[0].0 = t;
    }
    let (t, v): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let fit = theil_sen(&t, &v)?;
    let onset_s = match by_allocation {
        Some(t) => t,
        None if lone && fit.slope > 0.0 => {
            let left = heap[b + 1].0 - (heap[b + 1].1 - heap[b].1) / fit.slope;
            left.clamp(heap[b].0, heap[b + 1].0)
        }
        None => heap[b].0,
    };
    let end_s = heap[p].0;
    let last = heap[heap.len() - 1];
    let after = last.0 - heap[q].0;
    let ongoing = !held;
    // A step (a load at once) has no fitted slope: its rate is then the rise over its time.
    let rate = if fit.r2 >= 0.5 {
        fit.slope.max(0.0)
    } else {
        let (first, last) = (points[0], points[points.len() - 1]);
        ((last.1 - first.1) / (last.0 - first.0).max(1e-9)).max(0.0)
    };
    let mut reading = Reading {
        onset_s,
        end_s,
        from_bytes: heap[b].1 as i64,
        to_bytes: heap[p].1 as i64,
        bytes_per_sec: rate,
        fit_r2: fit.r2,
        points: points.len(),
        ongoing,
        held_s: held.then_some(after),
        last_bytes: last.1 as i64,
        sites: grid_sites(input.sites, onset_s, end_s),
        onset_seq: input.seqs.get(b).copied(),
        end_seq: input.seqs.get(p).copied(),
        from_seq: None,
        to_seq: None,
        forecast: None,
        cause: None,
        into_death: None,
    };
    set_shares(&mut reading);
    reading.forecast = forecast(input, &reading);
    Some(reading)
}

/// Ranks sites by what each added from `before` to `after` (`(name, bytes)` each), against
/// the heap's rise, and gives each its part of the rate.
pub fn rise_sites<'a>(
    before: impl Iterator<Item = (&'a str, f64)>,
    after: impl Iterator<Item = (&'a str, f64)>,
) -> Vec<RiseSite> {
    let was: std::collections::HashMap<&str, f64> = before.collect();
    let mut out: Vec<RiseSite> = after
        .filter(|(name, _)| *name != super::reduce::PROFILING_SITE)
        .filter_map(|(name, v)| {
            let b = was.get(name).copied().unwrap_or(0.0);
            (v - b >= MIN_SITE_BYTES).then(|| RiseSite {
                name: name.to_string(),
                before: b as i64,
                after: v as i64,
                share: 0.0,
                bytes_per_sec: 0.0,
            })
        })
        .collect();
    out.sort_by(|x, y| {
        (y.after - y.before)
            .cmp(&(x.after - x.before))
            .then(x.name.cmp(&y.name))
    });
    out.truncate(SITES);
    out
}

/// Shares of the rise and parts of the rate, from the sites' own figures.
pub fn set_shares(r: &mut Reading) {
    let rise = r.rise().max(1) as f64;
    for s in &mut r.sites {
        s.share = ((s.after - s.before) as f64 / rise).clamp(0.0, 1.0);
        s.bytes_per_sec = s.share * r.bytes_per_sec;
    }
}

/// The sites from the grid: the slots nearest the onset and the end.
fn grid_sites(grid: &SeriesGrid, onset_s: f64, end_s: f64) -> Vec<RiseSite> {
    let times = grid.times();
    let nearest = |at: f64| {
        (0..times.len()).min_by(|&a, &b| (times[a] - at).abs().total_cmp(&(times[b] - at).abs()))
    };
    let (Some(i), Some(j)) = (nearest(onset_s), nearest(end_s)) else {
        return Vec::new();
    };
    if i >= j {
        return Vec::new();
    }
    rise_sites(
        grid.series().map(|(n, v)| (n, v[i])),
        grid.series().map(|(n, v)| (n, v[j])),
    )
}

/// The time to the limit at the episode's rate, while it goes on and the fit supports it.
fn forecast(input: &ReadingInput, r: &Reading) -> Option<Forecast> {
    let limit = input.limit? as f64;
    if !r.ongoing || input.died_s.is_some() || input.at_limit || r.points < FORECAST_POINTS {
        return None;
    }
    // The kernel counts outside memory: fit it over the same episode when it was sampled.
    let mem: Vec<(f64, f64)> = input
        .memory
        .iter()
        .filter(|m| m.0 >= r.onset_s - 1e-9)
        .copied()
        .collect();
    let (points, of): (Vec<(f64, f64)>, &str) = if mem.len() >= FORECAST_POINTS {
        (mem, input.memory_of)
    } else {
        (
            input
                .heap
                .iter()
                .filter(|h| h.0 >= r.onset_s - 1e-9 && h.0 <= r.end_s + 1e-9)
                .copied()
                .collect(),
            "in-use heap",
        )
    };
    let (t, v): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let fit = theil_sen(&t, &v)?;
    if fit.r2 < FORECAST_R2 || fit.slope <= 0.0 {
        return None;
    }
    let (slow, mid, fast) = slope_quartiles(&points)?;
    let t_last = points.last()?.0;
    // From where the fitted line stands at the last point, at the fit's slopes.
    let anchor = fit.slope * t_last + fit.intercept;
    let at = |slope: f64| (slope > 0.0).then(|| t_last + (limit - anchor) / slope);
    let at_s = at(mid)?;
    if at_s < t_last || at_s - t_last > FORECAST_HORIZON_S {
        return None;
    }
    Some(Forecast {
        at_s,
        earliest_s: at(fast).unwrap_or(at_s).min(at_s),
        latest_s: at(slow).map_or(f64::INFINITY, |l| l.max(at_s)),
        fit_r2: fit.r2,
        of: of.to_string(),
    })
}

#[cfg(test)]
mod tests;
