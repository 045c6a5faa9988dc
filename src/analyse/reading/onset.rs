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
