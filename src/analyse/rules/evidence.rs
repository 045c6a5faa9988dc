//! What a rule's outcome rests on: the figures behind it, one variant per way a rule can be
//! met or cannot be checked. `render::rules` words them.

use super::HeapRatio;
use crate::analyse::breakdown::AtLimit;
use crate::analyse::compare::Regression;

/// Why a rule could not be checked on a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Missing {
    /// No boot cycle has captures.
    NoCycles,
    /// Time to the limit with no limit known.
    NoLimit,
    /// A regression rule without `--baseline`.
    NoBaseline,
    /// The baseline has no in-use heap to compare with.
    BaselineHasNoHeap,
    /// No process memory was sampled.
    NoMemory,
    /// No cgroup's `memory.stat` was sampled on one side (its anonymous part is unknown).
    NoAnonymousMemory,
    /// Envoy gave only its `/stats` gauges: the naive share (allocated / heap size).
    EnvoyGaugesOnly { naive_share: f64 },
    /// Neither Envoy's `/memory` nor Go's MemStats.
    NoLiveShare,
}

/// How a growing heap's cycle ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GrowthEnd {
    OomKilled {
        at_s: f64,
    },
    Died {
        at_s: f64,
    },
    /// Still alive at the last capture.
    LastCapture,
}

/// The site that holds most of a rise.
#[derive(Debug, Clone, PartialEq)]
pub struct TopSite {
    pub name: String,
    pub share: f64,
}

/// The sides of a comparison, as a rule names them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sides {
    pub b_cycle: u32,
    pub b: String,
    pub a_cycle: u32,
    pub a: String,
}

/// The figures behind an outcome, one variant per way a rule can be met.
#[derive(Debug, Clone)]
pub enum Evidence {
    Missing(Missing),
    /// growth: the cycle's in-use heap did not rise.
    HeapDidNotRise,
    /// growth: a rise still going at the cycle's end.
    HeapGrows {
        bytes_per_sec: f64,
        onset_s: f64,
        /// The last publication of the rise, seconds from the first capture.
        end_s: f64,
        /// Publications the rate was taken over: two are a chord, not a fit.
        points: usize,
        end: GrowthEnd,
        top: Option<TopSite>,
    },
    /// growth: a rise that ended, then held or fell.
    HeapHeld {
        bytes_per_sec: f64,
        onset_s: f64,
        end_s: f64,
        held_s: f64,
        top: Option<TopSite>,
    },
    /// growth: Envoy's own fit of the figure compared with the limit.
    EnvoyGrowth {
        series: String,
        bytes_per_sec: f64,
        fit_r2: f64,
        first: u64,
        last: u64,
        growing: bool,
    },
    /// time-to-limit: the cycle was OOM-killed at `t`.
    OomKilled {
        t: f64,
    },
    /// time-to-limit: the cgroup was measured at its limit.
    SatAtLimit(AtLimit),
    /// time-to-limit: the limit reached at `t` at the cycle's rate.
    LimitForecast {
        limit: Option<u64>,
        t: f64,
    },
    /// time-to-limit: Envoy's figure is at the limit.
    EnvoyAtLimit {
        series: String,
        limit: Option<u64>,
    },
    /// time-to-limit: Envoy's figure reaches the limit at `t`, `left_s` after its last snapshot.
    EnvoyReaches {
        series: String,
        limit: Option<u64>,
        t: f64,
        bytes_per_sec: f64,
        left_s: f64,
    },
    /// time-to-limit: nothing grows toward the limit.
    NoGrowthTowardLimit,
    /// regression: B was OOM-killed and A was not.
    BOomKilled {
        sides: Sides,
        died_s: f64,
    },
    /// regression: B's peak in-use heap against the baseline's over the span both cover.
    PeakAgainstBaseline {
        ratio: HeapRatio,
        sides: Option<Sides>,
        worst: Option<Regression>,
    },
    /// memory-regression, anon-regression: B's peak against the baseline's, whole cycles.
    MemoryAgainstBaseline {
        /// "cgroup memory", "process memory" or "anonymous memory".
        of: String,
        bytes: i64,
        baseline_bytes: i64,
        sides: Sides,
    },
    Goroutines {
        per_sec: f64,
        fastest: Option<String>,
    },
    NoStorm,
    Storm {
        name: String,
        peak_bytes_per_sec: f64,
        typical_bytes_per_sec: f64,
    },
    HeapReached {
        bytes: i64,
    },
    MemoryReached {
        bytes: u64,
        /// The cgroup's usage (sampled), not the process's RSS.
        cgroup: bool,
    },
    Kills {
        n: usize,
        /// The boot cycles that ended so, when more than one (one is the outcome's cycle).
        cycles: Vec<u32>,
    },
    Restarts {
        cycles: usize,
    },
    EnvoyRestarts {
        n: usize,
    },
    EnvoyLiveShare {
        live: f64,
        naive: f64,
        held_not_returned: u64,
    },
    GoLiveShare {
        live: f64,
        held_not_returned: Option<i64>,
        /// When the MemStats were read, seconds since the cycle's first capture.
        at_s: f64,
    },
}

impl Evidence {
    /// A rise still going, seen between two publications only: a chord through them, which
    /// fits them perfectly and so says nothing of how well a rate describes the rise.
    pub fn is_chord(&self) -> bool {
        matches!(self, Evidence::HeapGrows { points, .. } if *points <= 2)
    }
}
