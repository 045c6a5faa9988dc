//! Where a rise into the peak began, when that is later than the low before it: a rise that
//! changed its rate for good on the way (two straight segments fitting far better than one),
//! or the moment the sites still rising into the peak joined it (a start-up load, a spike or a
//! filled cache before a leak lie between the heap's low and its peak).

use super::{MIN_SITE_BYTES, SAMPLE_BYTES};
use crate::analyse::series::{MIN_GROWTH_BYTES, SeriesGrid, theil_sen};

/// Where a rise changes its rate for good (a load, then a slower leak; a trickle, then a
/// flood): the start of the last of two straight segments, when two fit far better than one.
/// `points` run from the onset to the peak.
pub(super) fn later_onset(points: &[(f64, f64)]) -> Option<usize> {
    const MIN_POINTS: usize = 8;
    if points.len() < MIN_POINTS {
        return None;
    }
    let sse = |seg: &[(f64, f64)]| -> Option<(f64, f64)> {
        let (t, v): (Vec<f64>, Vec<f64>) = seg.iter().copied().unzip();
        let f = theil_sen(&t, &v)?;
        let e = seg
            .iter()
            .map(|(t, v)| (v - (f.slope * t + f.intercept)).powi(2))
            .sum();
        Some((e, f.slope))
    };
    let (whole, _) = sse(points)?;
    let whole_fit = {
        let (t, v): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
        theil_sen(&t, &v)?
    };
    if whole_fit.r2 >= 0.9 || whole <= 0.0 {
        return None;
    }
    // The later segment keeps at least a third of the points: an onset, not a last wiggle.
    let last = points.len() - points.len() / 3;
    let (k, split, early, late) = (1..=last)
        .filter_map(|k| {
            let (e1, s1) = sse(&points[..=k])?;
            let (e2, s2) = sse(&points[k..])?;
            Some((k, e1 + e2, s1, s2))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let changed = late < 0.5 * early || late > 2.0 * early;
    let grew = late * (points[points.len() - 1].0 - points[k].0) >= MIN_GROWTH_BYTES;
    (split < 0.25 * whole && changed && grew && late > 0.0).then_some(k)
}

/// Where the rise from `heap[b]` to `heap[p]` began as its sites tell it, when that was after
/// `b`: the latest moment such that the sites still rising into `p` that joined the rise at it
/// or later add at least half of what those sites added lately (in the last third of the
/// figures: a cache that filled before a leak, replaced fast, publishes more garbage in use
/// as the heap grows and its marks last longer, and still rises, by little). A start-up
/// load, then a leak at a like rate, is one line in the heap; a level the heap wobbled about
/// (churn published in use) has its lowest figure seconds before the rise began; a cache that
/// filled, or a spike, before the leak lies between the heap's low and its peak; the sites'
/// own figures say which still rise and when each left its level (issue 33, items 3 and 5: a
/// start-up load named "65 % of the rise"; "rose from 8.0 s" for a load that began at 17.7 s).
///
/// A site still rises when its last third of the figures adds [`STILL_RISING`] of its own rise
/// (and a sample). It joined after the last of its figures near where it stood at `b` (within
/// [`JOINED`] of its own rise, and half a sample: it gained none; the last moment of that slot
/// of the grid), or by `b` when it stood above its lowest figure before then already. The
/// answer is the last heap figure at or before that moment, when it lies in the lower half
/// of the rise.
pub(super) fn sites_joined(
    grid: &SeriesGrid,
    heap: &[(f64, f64)],
    b: usize,
    p: usize,
) -> Option<usize> {
    let (from, to) = (heap[b].0, heap[p].0);
    let times = grid.times();
    let inside: Vec<usize> = (0..times.len())
        .filter(|&i| times[i] >= from - 1e-9 && times[i] <= to + 1e-9)
        .collect();
    let (&first, &last) = (inside.first()?, inside.last()?);
    let late = inside[inside.len() * 2 / 3];
    let mut joined: Vec<(f64, f64)> = grid
        .series()
        .filter(|(name, _)| *name != crate::analyse::reduce::PROFILING_SITE)
        .filter_map(|(_, v)| {
            let own = v[last] - v[first];
            let lately = v[last] - v[late];
            if own < MIN_SITE_BYTES || lately < (STILL_RISING * own).max(SAMPLE_BYTES) {
                return None;
            }
            let margin = (JOINED * own).max(0.5 * SAMPLE_BYTES);
            // Already above where it stood before: it joined by `b`.
            let lowest = v[..=first].iter().copied().fold(f64::INFINITY, f64::min);
            if v[first] > lowest + margin {
                return Some((from, lately));
            }
            let k = inside.iter().rposition(|&i| v[i] <= v[first] + margin)?;
            Some((grid.ends()[inside[k]], lately))
        })
        .collect();
    let rising: f64 = joined.iter().map(|j| j.1).sum();
    joined.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut held = 0.0;
    let at = joined.iter().find_map(|&(t, own)| {
        held += own;
        (held >= 0.5 * rising).then_some(t)
    })?;
    let k = heap[..=p].iter().rposition(|h| h.0 <= at + 1e-9)?;
    // The rise begins low: a dip in a level the heap already held (a storm's garbage
    // published in use, gone at the next GC) is no onset.
    let low = heap[k].1 <= heap[b].1 + 0.5 * (heap[p].1 - heap[b].1);
    (k > b && k < p && low).then_some(k)
}

/// A site still rises into the end of a rise when its last third of figures adds this share
/// of its own rise.
pub(super) const STILL_RISING: f64 = 0.1;
/// A site has joined the rise once it is this share of its own rise above where it stood.
pub(super) const JOINED: f64 = 0.01;

/// Where, between the last publication before a rise (`heap[b]`) and the first that shows it,
/// the rise began, by the runtime's own count of what was allocated. A heap profile moves only
/// at a GC, and a quiet heap runs few: the last flat publication may be seconds older than the
/// load (a flood at 6.0 s read "from 0.0 s"). The `proc:` source reads at every capture what
/// was allocated since the last publication (`recent_space`); with what the publications count
/// (`alloc_space`) that is everything allocated until the capture (`allocated`: seconds,
/// cumulative bytes). The rise began when allocation left the trend it kept: the onset moves
/// to the last capture before the run of loud captures that took it off that trend.
///
/// Only ever later, never past the first publication of the rise, and only where allocation
/// did leave its trend by half the rise up to its peak (`heap[p]`): a rise made by frees
/// stopping (a cache that no longer evicts) allocates no more than before, and keeps the onset
/// the publications gave.
pub(super) fn onset_by_allocation(
    heap: &[(f64, f64)],
    b: usize,
    p: usize,
    allocated: &[(f64, f64)],
) -> Option<f64> {
    const EPS: f64 = 1e-6;
    let (onset_s, next, end) = (heap[b].0, *heap.get(b + 1)?, heap.get(p)?.0);
    let rise = heap[p].1 - heap[b].1;
    if rise <= 0.0 || p <= b {
        return None;
    }
    let at = allocated.iter().rposition(|a| a.0 <= onset_s + EPS)?;
    let (t0, a0) = allocated[at];
    // The trend it kept: the median rate between captures up to the first publication of the
    // rise. The onset this moves is stale (most of that stretch came before the rise), so the
    // median is the quiet rate; where the rise filled most of it, allocation never leaves
    // that trend and nothing moves. (Before the onset, a start-up's own load may run.)
    let mut rates: Vec<f64> = allocated[at..]
        .windows(2)
        .take_while(|w| w[1].0 <= next.0 + EPS)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
        .collect();
    if rates.is_empty() {
        return None;
    }
    rates.sort_by(f64::total_cmp);
    let trend = rates[rates.len() / 2].max(0.0);
    let off_trend = |&(t, a): &(f64, f64)| a - (a0 + trend * (t - t0));
    let window: Vec<&(f64, f64)> = allocated[at..]
        .iter()
        .take_while(|a| a.0 <= end + EPS)
        .collect();
    // The rise was allocated: by its peak, allocation stood off its trend by half of it.
    if window.last().is_none_or(|a| off_trend(a) < 0.5 * rise) {
        return None;
    }
    // A few samples (each stands for 512 KiB allocated on average) are noise.
    let tolerance = (4.0 * SAMPLE_BYTES).max(0.05 * rise);
    let left = window.iter().position(|a| off_trend(a) > tolerance)?;
    // Back from there over the captures between which allocation ran above its trend by
    // more than its count's noise (three standard deviations of the samples, two at least):
    // the rise began at the last quiet one.
    let loud = |w: (&(f64, f64), &(f64, f64))| {
        let expected = trend * (w.1.0 - w.0.0);
        let noise = (3.0 * (expected * SAMPLE_BYTES).sqrt()).max(2.0 * SAMPLE_BYTES);
        w.1.1 - w.0.1 > expected + noise
    };
    let mut began = left;
    while began > 0 && loud((window[began - 1], window[began])) {
        began -= 1;
    }
    Some(window[began].0).filter(|&t| t > onset_s + EPS && t < next.0 - EPS)
}
