//! Time series of many sites on one shared, bounded time grid, and the robust fits run on
//! them. The grid holds at most `MAX_SLOTS` points: when full, neighbours merge, so memory is
//! bounded by the number of sites, not the number of captures.

use std::collections::HashMap;

const MAX_SLOTS: usize = 128;

/// Values of many named series at shared moments. A series that first appears late is zero
/// before (a site with nothing in use).
#[derive(Debug, Default, Clone)]
pub struct SeriesGrid {
    /// Seconds since the cycle's first capture, one per slot (mean of merged moments).
    times: Vec<f64>,
    /// The latest moment each slot holds.
    ends: Vec<f64>,
    /// How many moments each slot holds.
    weights: Vec<u32>,
    /// Moments per slot for new slots; doubles each time the grid is halved.
    stride: u32,
    index: HashMap<String, usize>,
    names: Vec<String>,
    values: Vec<Vec<f64>>,
}

impl SeriesGrid {
    /// Adds one moment with the values of the series present at it.
    pub fn push<'a>(&mut self, t: f64, present: impl IntoIterator<Item = (&'a str, f64)>) {
        let stride = self.stride.max(1);
        let fold = self.weights.last().is_some_and(|&w| w < stride);
        if !fold && self.times.len() == MAX_SLOTS {
            self.halve();
            self.stride = stride * 2;
        }
        let fold = self.weights.last().is_some_and(|&w| w < self.stride.max(1));
        if fold {
            // Every slot holds `stride` moments: the new one joins the last slot's mean.
            let k = self.times.len() - 1;
            let w = self.weights[k] as f64;
            self.times[k] = (self.times[k] * w + t) / (w + 1.0);
            self.ends[k] = self.ends[k].max(t);
            for v in &mut self.values {
                v[k] *= w / (w + 1.0);
            }
            self.weights[k] += 1;
            for (name, value) in present {
                let i = self.series_index(name);
                self.values[i][k] += value / (w + 1.0);
            }
            return;
        }
        let slot = self.times.len();
        self.times.push(t);
        self.ends.push(t);
        self.weights.push(1);
        for v in &mut self.values {
            v.push(0.0);
        }
        for (name, value) in present {
            let i = self.series_index(name);
            self.values[i][slot] += value;
        }
    }

    fn series_index(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len();
        self.index.insert(name.to_string(), i);
        self.names.push(name.to_string());
        self.values.push(vec![0.0; self.times.len()]);
        i
    }

    /// Merges neighbouring slots pairwise (weighted means).
    fn halve(&mut self) {
        let merge = |xs: &[f64], ws: &[u32]| -> Vec<f64> {
            xs.chunks(2)
                .zip(ws.chunks(2))
                .map(|(x, w)| {
                    let total: f64 = w.iter().map(|&w| w as f64).sum();
                    x.iter().zip(w).map(|(x, &w)| x * w as f64).sum::<f64>() / total
                })
                .collect()
        };
        self.times = merge(&self.times, &self.weights);
        self.ends = self
            .ends
            .chunks(2)
            .map(|e| e.iter().copied().fold(f64::MIN, f64::max))
            .collect();
        for v in &mut self.values {
            *v = merge(v, &self.weights);
        }
        self.weights = self.weights.chunks(2).map(|w| w.iter().sum()).collect();
    }

    /// Drops the moments after `t` (a slot whose mean time is after it).
    pub fn truncate_after(&mut self, t: f64) {
        let keep = self.times.partition_point(|&x| x <= t);
        self.times.truncate(keep);
        self.ends.truncate(keep);
        self.weights.truncate(keep);
        for v in &mut self.values {
            v.truncate(keep);
        }
    }

    pub fn times(&self) -> &[f64] {
        &self.times
    }

    /// The latest moment each slot holds (its time is their mean).
    pub fn ends(&self) -> &[f64] {
        &self.ends
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    pub fn series(&self) -> impl Iterator<Item = (&str, &[f64])> {
        self.names
            .iter()
            .map(|n| n.as_str())
            .zip(self.values.iter().map(|v| v.as_slice()))
    }
}

/// A straight-line fit: slope per second, intercept, and how well it explains the points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination of the fitted line, 0..1 (1 for a perfect line, and for
    /// a constant series).
    pub r2: f64,
}

/// A site's growth must add at least this much over the cycle to count (two sampling periods
/// of Go's default MemProfileRate).
pub(crate) const MIN_GROWTH_BYTES: f64 = 1024.0 * 1024.0;

/// Most points whose pairwise slopes Theil–Sen takes: 400 points are 79,800 slopes (0.6 MiB).
/// A longer series is thinned to this many points, evenly spread over its indices, so memory
/// and time stay bounded however many captures a cycle holds (10,000 captures would otherwise
/// be 50 million slopes, 400 MB).
const SLOPE_POINTS: usize = 400;

/// Theil–Sen: the median of pairwise slopes, robust to a stray capture. The R² is that of
/// the robust line over all points, and so is the intercept; the slopes come from at most
/// `SLOPE_POINTS` of them.
pub fn theil_sen(t: &[f64], v: &[f64]) -> Option<LineFit> {
    let n = t.len().min(v.len());
    if n < 2 {
        return None;
    }
    let picked: Vec<usize> = if n <= SLOPE_POINTS {
        (0..n).collect()
    } else {
        // First and last kept; the rest at even steps of index, never twice the same.
        (0..SLOPE_POINTS)
            .map(|k| k * (n - 1) / (SLOPE_POINTS - 1))
            .collect()
    };
    let m = picked.len();
    let mut slopes = Vec::with_capacity(m * (m - 1) / 2);
    for (a, &i) in picked.iter().enumerate() {
        for &j in &picked[a + 1..] {
            let dt = t[j] - t[i];
            if dt > 1e-9 {
                slopes.push((v[j] - v[i]) / dt);
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    let slope = median(&mut slopes);
    let mut offsets: Vec<f64> = (0..n).map(|i| v[i] - slope * t[i]).collect();
    let intercept = median(&mut offsets);
    Some(LineFit {
        slope,
        intercept,
        r2: r_squared(t, v, slope, intercept),
    })
}

/// True when growth goes on to the end rather than levelling off (a bounded cache).
pub(crate) fn sustained(t: &[f64], v: &[f64], whole: &LineFit) -> bool {
    let half = t.len() / 2;
    if t.len() < 4 {
        return whole.slope > 0.0;
    }
    theil_sen(&t[half..], &v[half..]).is_some_and(|late| late.slope >= 0.3 * whole.slope)
}

/// The median, found by selection (tens of thousands of pairwise slopes need no full sort).
fn median(xs: &mut [f64]) -> f64 {
    let (n, m) = (xs.len(), xs.len() / 2);
    let (below, &mut mid, _) = xs.select_nth_unstable_by(m, f64::total_cmp);
    if n % 2 == 1 {
        mid
    } else {
        let low = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (low + mid) / 2.0
    }
}

fn r_squared(t: &[f64], v: &[f64], slope: f64, intercept: f64) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let total: f64 = v.iter().map(|x| (x - mean).powi(2)).sum();
    if total <= f64::EPSILON {
        return 1.0;
    }
    let residual: f64 = t
        .iter()
        .zip(v)
        .map(|(t, v)| (v - (slope * t + intercept)).powi(2))
        .sum();
    (1.0 - residual / total).max(0.0)
}

/// When growth began: the last moment before the peak at which the series was still within
/// 5 % of its rise above its minimum.
pub fn onset(t: &[f64], v: &[f64]) -> Option<f64> {
    let (peak, &max) = v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
    let min = v[..=peak].iter().copied().fold(f64::INFINITY, f64::min);
    if max - min <= 0.0 {
        return None;
    }
    let floor = min + 0.05 * (max - min);
    (0..=peak).rev().find(|&i| v[i] <= floor).map(|i| t[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theil_sen_ignores_a_stray_point() {
        let t: Vec<f64> = (0..20).map(|i| i as f64).collect();
        let mut v: Vec<f64> = t.iter().map(|t| 100.0 + 10.0 * t).collect();
        v[7] = 10_000.0;
        let fit = theil_sen(&t, &v).unwrap();
        assert!((fit.slope - 10.0).abs() < 1e-9, "{fit:?}");
    }

    #[test]
    fn a_long_series_is_thinned_for_its_slopes_and_still_ignores_stray_points() {
        let n = 10_000;
        let t: Vec<f64> = (0..n).map(|i| i as f64 * 0.1).collect();
        let mut v: Vec<f64> = t.iter().map(|t| 5e7 + 2e5 * t).collect();
        // A stray capture every 50th, far above the line: 2 % of the points.
        for i in (0..n).step_by(50) {
            v[i] = 9e9;
        }
        let fit = theil_sen(&t, &v).unwrap();
        assert!((fit.slope - 2e5).abs() < 1.0, "{fit:?}");
        assert!((fit.intercept - 5e7).abs() < 10.0, "{fit:?}");
    }

    #[test]
    fn a_series_just_over_the_bound_gives_the_same_line_as_one_at_it() {
        // One point over the bound is thinned; the line must be the one every pair gives.
        let line = |n: usize| -> (Vec<f64>, Vec<f64>) {
            let t: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let v = t.iter().map(|t| 3.0 * t + 7.0).collect();
            (t, v)
        };
        let (t, v) = line(SLOPE_POINTS);
        let (t2, v2) = line(SLOPE_POINTS + 1);
        assert_eq!(theil_sen(&t, &v).unwrap().slope, 3.0);
        assert_eq!(theil_sen(&t2, &v2).unwrap().slope, 3.0);
    }

    #[test]
    fn a_flat_series_has_no_slope_and_no_onset() {
        let t = [0.0, 1.0, 2.0, 3.0];
        let v = [5e7, 5e7, 5e7, 5e7];
        let fit = theil_sen(&t, &v).unwrap();
        assert_eq!(fit.slope, 0.0);
        assert_eq!(onset(&t, &v), None);
    }

    #[test]
    fn onset_is_where_the_rise_starts() {
        let t: Vec<f64> = (0..10).map(|i| i as f64).collect();
        let v = [1.0, 1.0, 1.0, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0];
        assert_eq!(onset(&t, &v), Some(3.0));
    }

    #[test]
    fn the_grid_stays_bounded_and_keeps_late_series_zero_before_they_appear() {
        let mut g = SeriesGrid::default();
        for i in 0..1000 {
            let mut present = vec![("steady", 10.0)];
            if i >= 500 {
                present.push(("late", i as f64));
            }
            g.push(i as f64, present);
        }
        assert!(g.len() <= MAX_SLOTS);
        let late: Vec<f64> = g.series().find(|(n, _)| *n == "late").unwrap().1.to_vec();
        assert_eq!(late[0], 0.0);
        assert!(*late.last().unwrap() > 900.0);
        let fit = theil_sen(g.times(), g.series().next().unwrap().1).unwrap();
        assert!(fit.slope.abs() < 1e-9);
    }
}
