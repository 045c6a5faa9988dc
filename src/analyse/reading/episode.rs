//! The bounds of a rise into a cycle's peak: its onset near the low before it, the first
//! figure near its top and the peak; whether the heap held near its top since (the rise is
//! over), by its own figures and, where they are few, by the outside memory sampled far more
//! often; and where the rise stood when that memory settled at the level it kept.

use super::{
    FEW_PUBLICATIONS, FORECAST_POINTS, HELD_SHARE, HELD_SPACINGS, LATE_TREND_R2,
    MIN_HELD_PUBLICATIONS, MIN_RISE_SHARE, NEAR_LOW, NEAR_TOP, PEAK_TOLERANCE, SAMPLE_BYTES,
};
use crate::analyse::series::{MIN_GROWTH_BYTES, theil_sen};

/// The bounds of the rise of `heap` (`(seconds, bytes)` in time order) into its peak: its
/// onset (the last point near the low before it), the first point near its top (within a fifth
/// of the rise) and the peak. `None` when the rise is too small to be one.
pub fn episode_bounds(heap: &[(f64, f64)]) -> Option<(usize, usize, usize)> {
    let max = heap.iter().map(|h| h.1).fold(f64::NEG_INFINITY, f64::max);
    if heap.len() < 2 || !max.is_finite() {
        return None;
    }
    let p_max = heap
        .iter()
        .position(|h| h.1 >= max - PEAK_TOLERANCE * max)?;
    let low = heap[..=p_max]
        .iter()
        .map(|h| h.1)
        .fold(f64::INFINITY, f64::min);
    let rise = heap[p_max].1 - low;
    if rise < MIN_GROWTH_BYTES || rise < MIN_RISE_SHARE * low {
        return None;
    }
    let q = heap[..=p_max]
        .iter()
        .position(|h| h.1 >= max - NEAR_TOP * rise)?;
    let near_low = low + NEAR_LOW * rise;
    let b = (0..=q).rev().find(|&i| heap[i].1 <= near_low)?;
    // A rise that came near the top, fell back by more than half of itself and rose again
    // into the peak (a spike before a leak): the rise into the peak began at the low between.
    let fell_to = (q..p_max).min_by(|&i, &j| heap[i].1.total_cmp(&heap[j].1));
    let fall = (FELL_BACK * rise).max(FELL_BACK_SAMPLES * SAMPLE_BYTES);
    if let Some(k) = fell_to.filter(|&k| heap[k].1 < heap[q].1 - fall) {
        let (b, q, p) = episode_bounds(&heap[k..])?;
        return Some((k + b, k + q, k + p));
    }
    (b < q).then_some((b, q, p_max))
}

/// A fall by this share of a rise, and by this many samples at least (a few samples are a
/// figure's wobble: a storm's garbage published in use, gone at the next GC), before the
/// heap's peak, ends the rise before it.
pub(super) const FELL_BACK: f64 = 0.5;
pub(super) const FELL_BACK_SAMPLES: f64 = 8.0;

/// Whether the heap held near its top since `q` (the rise is over): long enough against the
/// rise and the publications' spacing, and without rising on since by a tenth of the rise in a
/// trend that is more than noise.
///
/// A heap published seldom (one GC cycle every second or two) may show its plateau in only a
/// few publications before the cycle ends, and a few figures wobbling with the GC's timing can
/// line up as a rise. Then the outside memory, sampled far more often, decides: fewer spacings
/// do, and a late "rise" is none, when it held over the same stretch (`memory_held`).
pub(super) fn held_since(
    heap: &[(f64, f64)],
    b: usize,
    q: usize,
    memory_held: &dyn Fn(f64) -> bool,
) -> bool {
    let mut spacings: Vec<f64> = heap.windows(2).map(|w| w[1].0 - w[0].0).collect();
    spacings.sort_by(f64::total_cmp);
    let spacing = spacings[spacings.len() / 2];
    let since = heap[heap.len() - 1].0 - heap[q].0;
    if since <= HELD_SHARE * (heap[q].0 - rise_start(heap, b, q)) {
        return false;
    }
    let after = heap.len() - 1 - q;
    if since <= HELD_SPACINGS * spacing && !(after >= MIN_HELD_PUBLICATIONS && memory_held(since)) {
        return false;
    }
    let rise = heap[q..].iter().map(|h| h.1).fold(f64::MIN, f64::max) - heap[b].1;
    let (t, v): (Vec<f64>, Vec<f64>) = heap[q..].iter().copied().unzip();
    // Held: it rose on by little since, or what it did since is noise about a level (a
    // plateau under GOMEMLIMIT wobbles by a fifth of its height with the GC's timing), or the
    // outside memory held over the same stretch: a bounded cache under churn publishes its
    // not-yet-swept garbage as in use, a few figures that can line up as a rise.
    theil_sen(&t, &v)
        .is_none_or(|late| late.slope * since < allowed_rise(rise) || late.r2 < LATE_TREND_R2)
        || (after <= FEW_PUBLICATIONS && memory_held(since) && !climbing(&heap[q..], rise))
}

/// Whether every figure rose above the one before, by more than a held level may rise in all:
/// no wobble does that. Under GOMEMLIMIT the process's memory sits at the soft limit while a
/// leak eats the GC's headroom, and a memory that held says nothing of the heap.
pub(super) fn climbing(figures: &[(f64, f64)], rise: f64) -> bool {
    figures.len() >= 4
        && figures.windows(2).all(|w| w[1].1 > w[0].1)
        && figures[figures.len() - 1].1 - figures[0].1 > allowed_rise(rise)
}

/// When the rise from `heap[b]` to `heap[p]` started, as far as the figures tell: the onset's
/// own time, unless that figure is far older than the rise (a quiet start publishes nothing,
/// no GC running): then the first figure of the rise, as the rate's fit takes it. Measuring a
/// held level against a rise that seems to start at the quiet start's last publication would
/// ask a plateau to last half of the idle time too.
pub(super) fn rise_start(heap: &[(f64, f64)], b: usize, p: usize) -> f64 {
    if lone_onset(heap, b, p) {
        heap[b + 1].0
    } else {
        heap[b].0
    }
}

/// Whether the onset's figure, `heap[b]`, lies far before the rest of the rise to `heap[p]`:
/// more than three of the rise's usual publication spacings before the next figure.
pub(super) fn lone_onset(heap: &[(f64, f64)], b: usize, p: usize) -> bool {
    if p < b + 3 {
        return false;
    }
    let mut gaps: Vec<f64> = heap[b + 1..=p]
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .collect();
    gaps.sort_by(f64::total_cmp);
    heap[b + 1].0 - heap[b].0 > 3.0 * gaps[gaps.len() / 2]
}

/// How much a held level may still rise after its rise of `rise` bytes.
pub(super) fn allowed_rise(rise: f64) -> f64 {
    (NEAR_TOP / 2.0 * rise).max(MIN_GROWTH_BYTES)
}

/// When the outside memory came to the level it kept to its end: the first sample after the
/// last one further than `allowed` from its closing level (the median of its last samples).
pub(super) fn memory_settled(memory: &[(f64, f64)], allowed: f64) -> Option<f64> {
    const CLOSING: usize = 5;
    let mut closing: Vec<f64> = memory.iter().rev().take(CLOSING).map(|m| m.1).collect();
    closing.sort_by(f64::total_cmp);
    let level = *closing.get(closing.len() / 2)?;
    let first = memory
        .iter()
        .rposition(|&(_, v)| (v - level).abs() >= allowed)
        .map_or(0, |i| i + 1);
    memory.get(first).map(|m| m.0)
}

/// The rise as it stood when the outside memory settled, when the heap's highest figure came
/// later: under a soft limit (GOMEMLIMIT) or with garbage not yet swept, a late publication
/// can stand above the plateau while the memory has not moved for seconds. The rise then ends
/// where the heap came near its top before the memory settled, if the memory held from a
/// publication after that to the end, and the heap itself (without the memory's word) held
/// from there too: a leak that eats the GC's headroom under a flat memory
/// is a trend in the heap and stays one.
pub(super) fn bounds_when_memory_settled(
    heap: &[(f64, f64)],
    memory: &[(f64, f64)],
    rise: f64,
    p_max: usize,
) -> Option<(usize, usize, usize)> {
    let settled = memory_settled(memory, allowed_rise(rise))?;
    let mut spacings: Vec<f64> = heap.windows(2).map(|w| w[1].0 - w[0].0).collect();
    spacings.sort_by(f64::total_cmp);
    let spacing = *spacings.get(spacings.len() / 2)?;
    let k = heap.iter().rposition(|h| h.0 <= settled + spacing)?;
    if k >= p_max {
        return None;
    }
    let (b, q, p) = episode_bounds(&heap[..=k])?;
    let since = memory.last()?.0 - (heap[q].0 + spacing);
    (outside_held(memory, since, rise) && held_since(heap, b, q, &|_| false)).then_some((b, q, p))
}

/// Whether the outside memory held over its last `since` seconds: sampled over most of that
/// stretch, and rising in it by less than the share of the heap's `rise` that [`held_since`]
/// allows the heap, in a trend that is more than noise or not. A process at its limit holds
/// because it cannot grow: that is no plateau, and the caller does not ask.
pub(super) fn outside_held(memory: &[(f64, f64)], since: f64, rise: f64) -> bool {
    let Some(&(end, _)) = memory.last() else {
        return false;
    };
    let tail: Vec<(f64, f64)> = memory
        .iter()
        .copied()
        .filter(|&(t, _)| t >= end - since)
        .collect();
    if tail.len() < FORECAST_POINTS || end - tail[0].0 < HELD_SHARE * since {
        return false;
    }
    let (t, v): (Vec<f64>, Vec<f64>) = tail.into_iter().unzip();
    let allowed = allowed_rise(rise);
    let spread =
        v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min);
    spread < allowed
        || theil_sen(&t, &v)
            .is_some_and(|f| f.slope * since < allowed && f.slope * since > -allowed)
}
