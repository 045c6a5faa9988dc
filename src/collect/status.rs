//! What the live status line shows: captures, heap in use, growth rate, time to the limit,
//! restarts, the last error. Kept by the collector, drawn by the command line.

use std::collections::VecDeque;

/// The furthest time to the limit the status line forecasts, in seconds.
pub const FORECAST_HORIZON_S: f64 = 3600.0;

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
    /// Everything charged from outside (cgroup usage, else RSS), page cache included, when it
    /// differs from `memory`.
    pub memory_total: Option<u64>,
    pub limit: Option<u64>,
    pub bursting: bool,
    pub last_error: Option<String>,
    /// Bytes per second of `memory` (the figure the limit applies to) over the recent attempts.
    pub memory_bps: Option<f64>,
    recent: VecDeque<(i64, i64)>,
    /// When the current heap figure was first seen, and the figure.
    published: Option<(i64, i64)>,
    recent_memory: VecDeque<(i64, i64)>,
}

impl LiveStatus {
    pub fn new_cycle(&mut self, cycle: u32) {
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
        while self.recent_memory.len() > 20 {
            self.recent_memory.pop_front();
        }
        self.memory_bps = slope(&self.recent_memory);
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
        self.growth_bps = slope(&self.recent);
    }

    /// Seconds until the limit at the current growth rate of the memory the limit applies to
    /// (else of the heap): a forecast only while under the limit, and only within
    /// [`FORECAST_HORIZON_S`] (further out, a rate measured over seconds says nothing).
    pub fn time_to_limit(&self) -> Option<f64> {
        let (limit, now) = (self.limit?, self.memory?);
        let rate = self.memory_bps.or(self.growth_bps)?;
        if rate <= 0.0 || self.at_limit() {
            return None;
        }
        let secs = (limit as f64 - now as f64) / rate;
        (secs <= FORECAST_HORIZON_S).then_some(secs)
    }

    /// The memory that can kill is at the limit (within 1 %): measured, not forecast.
    pub fn at_limit(&self) -> bool {
        match (self.limit, self.memory) {
            (Some(limit), Some(now)) => now as f64 >= 0.99 * limit as f64,
            _ => false,
        }
    }
}

/// Least-squares slope in bytes per second.
fn slope(points: &VecDeque<(i64, i64)>) -> Option<f64> {
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
    (denominator.abs() > 1e-9).then(|| (n * stv - st * sv) / denominator)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
