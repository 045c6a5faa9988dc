//! What the live status line shows: captures, heap in use, growth rate, time to the limit,
//! restarts, the last error. Kept by the collector, drawn by the command line.
//!
//! # The status line says only what is true now
//!
//! - Once the target is gone (refused, its process ended) the heap, rates and runtime figures of
//!   the process that was are cleared ("target gone").
//! - "at limit" when the memory that can kill or the cgroup's whole charge is within 1 % of the
//!   limit.
//! - "limit in N s" only for a sustained rise of that memory: at least 5 points over 5 s (fitted
//!   over the last 10 s of samples, so a rise at the burst interval counts), a line fitting them
//!   with R² ≥ 0.9, and the later half still rising at half the rate or more (a start-up ramp
//!   that levelled off forecasts nothing).
//! - "top SITE +RATE/s" is the site whose in-use bytes rose most over the last ten indexed heap
//!   captures of the cycle (at least 1 MiB over at least 1 s; the site index's thread hands the
//!   newest capture's sites to the collector), named short: its own-code frame without the import
//!   path.
//! - Where the cgroup is known, its usage is the figure set against the limit ("cgroup 250 MiB
//!   of 256 MiB"), with the part that cannot be reclaimed when it is smaller (a heap profile can
//!   count more than is charged: fresh spans not yet touched); a process alone in a memory
//!   cgroup of its own is sampled with its cgroup's charge and limit (`source::procmem`).
//!   Otherwise the total is the process's RSS (its binary's mapped text included), said so
//!   ("RSS"), and never set against a limit it is not counted by.
//!
//! The command line draws it (`src/cli/status_line.rs`): on a terminal it is fitted to the
//! width (parts dropped by rank: the last error first, then goroutines, the heap rate, the cycle…),
//! so it never wraps and a redraw after a resize leaves nothing behind; off a terminal nothing is
//! cut but the last error, at a word's end. A process's end gets a line of its own that stays
//! (`cycle 3: pid 4242 OOM-killed …`).

use std::collections::{HashMap, VecDeque};

/// The memory figure's rate is fitted over this long (ms), at most this many points.
const MEMORY_WINDOW_MS: i64 = 10_000;
const MEMORY_WINDOW_POINTS: usize = 400;

/// A site is named the top growing one only past this much growth over the window (bytes)…
const TOP_SITE_MIN_BYTES: i64 = 1 << 20;
/// …measured over at least this long (ms), across at most this many heap captures.
const TOP_SITE_MIN_SPAN_MS: i64 = 1_000;
const TOP_SITE_WINDOW: usize = 10;

/// The furthest time to the limit the status line forecasts, in seconds.
pub const FORECAST_HORIZON_S: f64 = 3600.0;

/// A forecast needs a rise that lasts: at least this many points of the memory figure…
const SUSTAINED_POINTS: usize = 5;
/// …over at least this long (ms)…
const SUSTAINED_SPAN_MS: i64 = 5_000;
/// …that a line fits this well (R²)…
const SUSTAINED_R2: f64 = 0.9;
/// …and whose later half still rises at this share of the whole rate: a start-up ramp that
/// has levelled off is no growth.
const STILL_RISING: f64 = 0.5;

#[derive(Debug, Clone, Default)]
pub struct LiveStatus {
    pub attempts: u64,
    pub captures: u64,
    pub errors: u64,
    pub cycle: u32,
    pub heap_inuse: Option<i64>,
    pub goroutines: Option<i64>,
    /// Bytes per second of in-use heap over the recent captures of this boot cycle.
    pub growth_bps: Option<f64>,
    /// The memory that can get the target killed, from outside (anonymous memory once the
    /// split is known) or from the heap, whichever is larger.
    pub memory: Option<u64>,
    /// Everything charged from outside (cgroup usage, else RSS), page cache included.
    pub memory_total: Option<u64>,
    /// `memory_total` is a process's RSS (its binary's file pages included), not a cgroup's
    /// charge.
    pub memory_total_is_rss: bool,
    /// The target is gone (refused, or its process ended): the figures of the process that
    /// was are cleared, not shown as if current.
    pub gone: bool,
    pub limit: Option<u64>,
    pub bursting: bool,
    pub last_error: Option<String>,
    /// Bytes per second of `memory` (the figure the limit applies to) over the recent attempts.
    pub memory_bps: Option<f64>,
    /// The site whose in-use bytes grew fastest over the recent heap captures of this boot
    /// cycle, and its rate in bytes per second.
    pub top_site: Option<(String, f64)>,
    /// Recent heap captures' in-use bytes per site (time, sites), oldest first.
    recent_sites: VecDeque<(i64, HashMap<String, i64>)>,
    recent: VecDeque<(i64, i64)>,
    /// When the current heap figure was first seen, and the figure.
    published: Option<(i64, i64)>,
    recent_memory: VecDeque<(i64, i64)>,
}

impl LiveStatus {
    /// The target is gone: no heap, memory or rate of a process that is no more.
    pub fn target_gone(&mut self) {
        self.gone = true;
        self.top_site = None;
        self.recent_sites.clear();
        self.heap_inuse = None;
        self.growth_bps = None;
        self.memory_bps = None;
        self.goroutines = None;
        self.recent.clear();
        self.recent_memory.clear();
        self.published = None;
    }

    pub fn new_cycle(&mut self, cycle: u32) {
        self.gone = false;
        self.top_site = None;
        self.recent_sites.clear();
        self.cycle = cycle;
        self.recent.clear();
        self.published = None;
        self.growth_bps = None;
        self.heap_inuse = None;
        self.recent_memory.clear();
        self.memory_bps = None;
    }

    /// The memory figure compared with the limit, at one attempt.
    pub fn memory_point(&mut self, t_ms: i64, bytes: i64) {
        if self.recent_memory.back().is_some_and(|&(t, _)| t == t_ms) {
            return;
        }
        self.recent_memory.push_back((t_ms, bytes));
        // A window of time, not of points: at the burst interval twenty points span two
        // seconds, too short for a rise to count as sustained.
        while self.recent_memory.len() > MEMORY_WINDOW_POINTS
            || self
                .recent_memory
                .front()
                .is_some_and(|&(t, _)| t_ms - t > MEMORY_WINDOW_MS)
        {
            self.recent_memory.pop_front();
        }
        self.memory_bps = sustained(&self.recent_memory);
    }

    /// A heap capture. Go publishes the previous GC's figures at each GC, so a new figure is
    /// placed where the previous one was first seen (as `growth` does); the first of a cycle
    /// describes an unknown moment and only moves the previous-sighting mark.
    pub fn heap(&mut self, t_ms: i64, inuse: i64) {
        self.heap_inuse = Some(inuse);
        self.last_error = None;
        if self.published.is_some_and(|(_, v)| v == inuse) {
            return;
        }
        let at = self.published.map(|(t, _)| t);
        self.published = Some((t_ms, inuse));
        let Some(at) = at else { return };
        self.recent.push_back((at, inuse));
        while self.recent.len() > 20 {
            self.recent.pop_front();
        }
        self.growth_bps = slope(&self.recent).map(|(rate, _)| rate);
    }

    /// A heap capture's in-use bytes per site (figures as published, like [`LiveStatus::heap`]):
    /// the top growing site is the one whose bytes rose most per second from the oldest
    /// recent capture to this one, when the rise is large enough to mean something.
    pub fn heap_sites(&mut self, t_ms: i64, sites: Vec<(String, i64)>) {
        if self.recent_sites.back().is_some_and(|(t, _)| *t >= t_ms) {
            return;
        }
        self.recent_sites
            .push_back((t_ms, sites.into_iter().collect()));
        while self.recent_sites.len() > TOP_SITE_WINDOW {
            self.recent_sites.pop_front();
        }
        let ((t0, first), (t1, last)) = match (self.recent_sites.front(), self.recent_sites.back())
        {
            (Some(a), Some(b)) => (a, b),
            _ => return,
        };
        let span_ms = t1 - t0;
        if span_ms < TOP_SITE_MIN_SPAN_MS {
            self.top_site = None;
            return;
        }
        self.top_site = last
            .iter()
            .map(|(name, &now)| (name, now - first.get(name).copied().unwrap_or(0)))
            .filter(|&(_, rise)| rise >= TOP_SITE_MIN_BYTES)
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(name, rise)| (name.clone(), rise as f64 * 1000.0 / span_ms as f64));
    }

    /// Seconds until the limit at the current growth rate of the memory the limit applies to
    /// (else of the heap): a forecast only while under the limit, and only within
    /// `FORECAST_HORIZON_S` (further out, a rate measured over seconds says nothing).
    /// The rate is the memory figure's, and only while its rise is sustained (see
    /// `sustained`); the heap's own rate never forecasts alone.
    pub fn time_to_limit(&self) -> Option<f64> {
        let (limit, now) = (self.limit?, self.memory?);
        let rate = self.memory_bps?;
        if rate <= 0.0 || self.at_limit() || self.gone {
            return None;
        }
        let secs = (limit as f64 - now as f64) / rate;
        (secs <= FORECAST_HORIZON_S).then_some(secs)
    }

    /// The cgroup's charge is at the limit (within 1 %), where the cgroup is known: what its
    /// limit counts. Elsewhere, the memory that can kill is: measured, not forecast.
    pub fn at_limit(&self) -> bool {
        let Some(limit) = self.limit.filter(|&l| l > 0) else {
            return false;
        };
        let now = self.cgroup_usage().or(self.memory);
        now.is_some_and(|now| now as f64 >= 0.99 * limit as f64)
    }

    /// The cgroup's usage, where the memory from outside is a cgroup's charge (not a
    /// process's RSS).
    pub fn cgroup_usage(&self) -> Option<u64> {
        self.memory_total.filter(|_| !self.memory_total_is_rss)
    }
}

/// The rate of a rise that lasts, in bytes per second: enough points over long enough, a
/// line that fits them, and a later half still rising. `None` for a ramp that levelled off,
/// noise, or too little to tell.
fn sustained(points: &VecDeque<(i64, i64)>) -> Option<f64> {
    let (first, last) = (points.front()?.0, points.back()?.0);
    if points.len() < SUSTAINED_POINTS || last - first < SUSTAINED_SPAN_MS {
        return None;
    }
    let (rate, r2) = slope(points)?;
    if rate <= 0.0 || r2 < SUSTAINED_R2 {
        return None;
    }
    let half: VecDeque<(i64, i64)> = points.iter().skip(points.len() / 2).copied().collect();
    let (late, _) = slope(&half)?;
    (late >= STILL_RISING * rate).then_some(rate)
}

/// Least-squares slope in bytes per second, and the fit's R² (1 for a flat line of equal
/// points).
fn slope(points: &VecDeque<(i64, i64)>) -> Option<(f64, f64)> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let t0 = points[0].0;
    let (mut st, mut sv, mut stt, mut stv) = (0.0, 0.0, 0.0, 0.0);
    for &(t, v) in points {
        let t = (t - t0) as f64 / 1000.0;
        let v = v as f64;
        st += t;
        sv += v;
        stt += t * t;
        stv += t * v;
    }
    let denominator = n * stt - st * st;
    if denominator.abs() <= 1e-9 {
        return None;
    }
    let rate = (n * stv - st * sv) / denominator;
    let (mean_t, mean_v) = (st / n, sv / n);
    let (mut total, mut residual) = (0.0, 0.0);
    for &(t, v) in points {
        let t = (t - t0) as f64 / 1000.0;
        let fitted = mean_v + rate * (t - mean_t);
        total += (v as f64 - mean_v).powi(2);
        residual += (v as f64 - fitted).powi(2);
    }
    let r2 = if total <= 0.0 {
        1.0
    } else {
        1.0 - residual / total
    };
    Some((rate, r2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn the_top_growing_site_is_the_one_that_rose_most_over_the_recent_captures() {
        let mut s = LiveStatus::default();
        s.heap_sites(
            0,
            sites(&[("main.cache", 10 << 20), ("main.flood", 1 << 20)]),
        );
        assert_eq!(s.top_site, None, "one capture shows no growth");
        s.heap_sites(
            500,
            sites(&[("main.cache", 10 << 20), ("main.flood", 4 << 20)]),
        );
        assert_eq!(s.top_site, None, "half a second is too short to tell");
        s.heap_sites(
            2_000,
            sites(&[("main.cache", 11 << 20), ("main.flood", 9 << 20)]),
        );
        let (name, rate) = s.top_site.clone().expect("a site grew 8 MiB in 2 s");
        assert_eq!(name, "main.flood");
        assert_eq!(rate, (4 << 20) as f64);
        // A site that appears in the window counts its whole size as the rise.
        s.heap_sites(
            4_000,
            sites(&[("main.cache", 11 << 20), ("main.new", 30 << 20)]),
        );
        assert_eq!(s.top_site.as_ref().map(|t| t.0.as_str()), Some("main.new"));
        s.new_cycle(2);
        assert_eq!(s.top_site, None, "a new boot cycle starts over");
    }

    #[test]
    fn a_steady_rise_sampled_at_the_burst_interval_is_forecast() {
        let mut s = LiveStatus {
            limit: Some(200 << 20),
            ..LiveStatus::default()
        };
        // 16 MiB/s sampled every 100 ms for 6 s, from 56 MiB.
        for i in 0..60i64 {
            let bytes = (56 << 20) + i * (16 << 20) / 10;
            s.memory = Some(bytes as u64);
            s.memory_point(i * 100, bytes);
        }
        let secs = s
            .time_to_limit()
            .expect("a sustained rise at 100 ms captures");
        assert!((secs - 3.1).abs() < 0.3, "{secs}");
    }

    #[test]
    fn no_site_is_named_when_nothing_grew_enough() {
        let mut s = LiveStatus::default();
        s.heap_sites(0, sites(&[("main.cache", 10 << 20)]));
        s.heap_sites(5_000, sites(&[("main.cache", (10 << 20) + 4096)]));
        assert_eq!(s.top_site, None);
        s.heap_sites(6_000, sites(&[("main.cache", 5 << 20)]));
        assert_eq!(s.top_site, None, "a shrinking site is not growing");
    }

    fn status(memory: u64, bps: f64) -> LiveStatus {
        LiveStatus {
            limit: Some(1000 << 20),
            memory: Some(memory),
            memory_bps: Some(bps),
            ..LiveStatus::default()
        }
    }

    #[test]
    fn the_time_to_the_limit_is_forecast_only_under_the_limit_and_within_an_hour() {
        let t = status(500 << 20, (1 << 20) as f64).time_to_limit().unwrap();
        assert!((t - 500.0).abs() < 1e-6, "{t}");
        // 59046 s away: no forecast.
        assert_eq!(status(500 << 20, 8880.0).time_to_limit(), None);
        // At the limit: measured, not forecast.
        let full = status(1000 << 20, (1 << 20) as f64);
        assert!(full.at_limit());
        assert_eq!(full.time_to_limit(), None);
    }

    #[test]
    fn a_cgroup_charged_to_its_limit_is_at_the_limit_but_a_processs_rss_is_not_a_charge() {
        let mut s = status(300 << 20, 0.0);
        s.memory_total = Some(995 << 20);
        assert!(s.at_limit(), "the cgroup is full");
        s.memory_total_is_rss = true;
        assert!(!s.at_limit());
        // The heap (or the runtime's own figure) past the limit while the cgroup is not: the
        // cgroup's usage is what its limit counts.
        let mut heap_over = status(1010 << 20, 0.0);
        heap_over.memory_total = Some(600 << 20);
        assert!(!heap_over.at_limit());
    }

    /// Memory points every 500 ms from `f(seconds)`.
    fn fed(f: impl Fn(f64) -> f64, seconds: f64) -> LiveStatus {
        let mut s = LiveStatus {
            limit: Some(256 << 20),
            ..LiveStatus::default()
        };
        let mut t = 0.0;
        while t <= seconds {
            let bytes = f(t) as i64;
            s.memory = Some(bytes as u64);
            s.memory_point((t * 1000.0) as i64, bytes);
            t += 0.5;
        }
        s
    }

    #[test]
    fn an_idle_start_up_ramp_is_no_forecast_but_a_sustained_rise_is() {
        let mib = (1 << 20) as f64;
        // 3 s of start-up to 20 MiB, then flat: no "limit in".
        let ramp = fed(|t| (t.min(3.0) / 3.0) * 20.0 * mib, 8.0);
        assert_eq!(ramp.time_to_limit(), None, "{:?}", ramp.memory_bps);
        // Too soon to tell.
        let early = fed(|t| 8.0 * mib + 4.0 * mib * t, 2.0);
        assert_eq!(early.time_to_limit(), None);
        // 4 MiB/s for 8 s, still going.
        let rise = fed(|t| 8.0 * mib + 4.0 * mib * t, 8.0);
        let secs = rise.time_to_limit().unwrap();
        let expected = (256.0 - 40.0) / 4.0;
        assert!((secs - expected).abs() < 1.0, "{secs}");
        // Gone: nothing is forecast for a process that is no more.
        let mut gone = rise.clone();
        gone.target_gone();
        assert_eq!(gone.time_to_limit(), None);
        assert!(gone.heap_inuse.is_none() && gone.memory_bps.is_none());
    }
}
