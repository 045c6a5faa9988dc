//! What a collector is told, already checked: how often to ask (the interval, burst mode near
//! the limit, the duty cap, the idle back-off), what to capture, when to stop, the disk budget and
//! the decoding limits. The command line builds it from flags (`cli/collect/config.rs`, `run`,
//! `watch`); the collector never sees a flag.

use std::time::Duration;

use crate::decode::DecodeLimits;

/// Everything the collector needs to know, already validated.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub interval: Duration,
    pub burst_interval: Duration,
    /// Fraction of `limit` above which burst mode starts.
    pub burst_at: f64,
    pub limit: Option<u64>,
    pub timeout: Duration,
    pub heap: bool,
    pub goroutine: bool,
    pub goroutine_interval: Duration,
    /// Time between runtime figure reads: MemStats, and the agent's stats. Zero disables them.
    pub memstats_interval: Duration,
    pub duration: Option<Duration>,
    /// With `--until-exit`: stop once the target has been gone this long.
    pub until_exit: Option<Duration>,
    pub max_disk: Option<u64>,
    /// Largest share of wall time the target may spend serving profiles (1.0: no cap); twice
    /// this in burst mode.
    pub max_duty: f64,
    /// Idle back-off: while heap captures find the heap flat, the interval doubles up to this
    /// many times itself (1: never backs off).
    pub idle_backoff: u32,
    pub decode: DecodeLimits,
    /// Module path prefixes of the user's own code, as the run's `run.json` records them
    /// (`--own`): the site index names each capture's sites by them, as analyses will.
    pub own: Vec<String>,
}

impl Default for CollectConfig {
    fn default() -> Self {
        CollectConfig {
            interval: Duration::from_millis(crate::model::run_options::DEFAULT_INTERVAL_MS),
            burst_interval: Duration::from_millis(100),
            burst_at: 0.6,
            limit: None,
            timeout: Duration::from_secs(2),
            heap: true,
            goroutine: false,
            goroutine_interval: Duration::from_secs(1),
            memstats_interval: Duration::from_secs(5),
            duration: None,
            until_exit: None,
            max_disk: None,
            max_duty: 0.25,
            idle_backoff: 1,
            decode: DecodeLimits::default(),
            own: Vec::new(),
        }
    }
}
