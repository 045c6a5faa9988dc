//! A thread that samples process / cgroup memory at a high rate into `memory.jsonl`,
//! independent of the profile requests, and feeds burst mode through [`OutsideMemory`].
//! Usage is read every tick; where it goes (`memory.stat`, `smaps_rollup`) every
//! [`DETAIL_EVERY`], as it costs several times more (docs/benchmarks.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::OutsideMemory;
use super::exits::ExitWatcher;
use crate::source::procmem::{MemoryProbe, MemorySample};
use crate::store::MemoryLog;

/// How often a sample also says where the memory goes.
pub const DETAIL_EVERY: Duration = Duration::from_millis(500);

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<SamplerTally>>,
}

/// What the sampler saw over the run.
#[derive(Debug, Clone, Default)]
pub struct SamplerTally {
    pub samples: u64,
    pub kills: u64,
    pub peak: u64,
    pub error: Option<String>,
}

impl Sampler {
    pub fn start(
        probe: MemoryProbe,
        interval: Duration,
        mut log: MemoryLog,
        outside: Arc<OutsideMemory>,
        exits: Option<Arc<ExitWatcher>>,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        let handle = std::thread::Builder::new()
            .name("heapwatch-memory".into())
            .spawn(move || {
                let mut tally = SamplerTally::default();
                let mut kills = None;
                let mut last_sync = Instant::now();
                let mut last_detail: Option<Instant> = None;
                let mut split = Split::default();
                let mut last_killable = 0u64;
                while !stop_thread.load(Ordering::Relaxed) {
                    if !probe.ready() {
                        std::thread::sleep(interval);
                        continue;
                    }
                    let mut detailed = last_detail.is_none_or(|t| t.elapsed() >= DETAIL_EVERY);
                    let mut sample = probe.sample(crate::time::now_ms(), kills, detailed);
                    // Memory moving fast (a file written into the page cache, or a heap
                    // growing): look where it went now rather than guess for up to 500 ms.
                    if !detailed && split.jumped(&sample) {
                        detailed = true;
                        sample = probe.sample(crate::time::now_ms(), kills, true);
                    }
                    if detailed {
                        last_detail = Some(Instant::now());
                    }
                    kills = sample.oom_kills.or(kills);
                    if let (Some(exits), Some(pid)) = (&exits, sample.pid) {
                        exits.watch(pid);
                    }
                    if sample.killed {
                        tally.kills += 1;
                    }
                    let bytes = sample.bytes().unwrap_or(0);
                    tally.peak = tally.peak.max(bytes);
                    outside.bytes.store(bytes, Ordering::Relaxed);
                    outside
                        .from_cgroup
                        .store(sample.usage.is_some(), Ordering::Relaxed);
                    let killable = split.killable(&sample).unwrap_or(0);
                    outside.killable.store(killable, Ordering::Relaxed);
                    if let Some(limit) = sample.limit.filter(|&l| l > 0) {
                        if nudge_due(
                            last_killable,
                            killable,
                            limit,
                            outside.nudge_permille.load(Ordering::Relaxed),
                        ) {
                            outside.nudge.nudge();
                        }
                    }
                    last_killable = killable;
                    outside.pid.store(
                        sample.pid.filter(|_| sample.alive).unwrap_or(0),
                        Ordering::Relaxed,
                    );
                    if let Some(limit) = sample.limit {
                        outside.limit.store(limit, Ordering::Relaxed);
                    }
                    // A kill or a quarter second since the last fsync: make it durable.
                    let sync = sample.killed || last_sync.elapsed() >= Duration::from_millis(250);
                    if let Err(e) = log.append(&sample, sync) {
                        tally.error = Some(e.to_string());
                        break;
                    }
                    if sync {
                        last_sync = Instant::now();
                    }
                    tally.samples += 1;
                    std::thread::sleep(interval);
                }
                if probe.ready() {
                    let _ = log.append(&probe.sample(crate::time::now_ms(), kills, true), true);
                }
                tally
            })
            .expect("spawn the memory sampler thread");
        Sampler {
            stop,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> SamplerTally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// Whether memory that can get the target killed went from `before` to `now` across the burst
/// share of `limit` (`permille` thousandths; zero: never), or rose by a twentieth of the limit
/// in one sample: either way a collector paced slowly should capture now.
fn nudge_due(before: u64, now: u64, limit: u64, permille: u32) -> bool {
    if permille == 0 || before == 0 {
        return false;
    }
    let at = (u128::from(limit) * u128::from(permille) / 1000) as u64;
    (before < at && now >= at) || now.saturating_sub(before) >= limit / 20
}

/// The memory that can get the target killed, between two detailed samples: what the last
/// detailed sample found unreclaimable, plus whatever the total grew by since. Page cache that
/// grows since is counted as killable until the next detailed sample (burst mode a moment
/// early, never late); a total that shrinks is taken as reclaimed cache (the kernel reclaims
/// cache first), so killable never drops below the last figure but for the total itself.
#[derive(Debug, Default)]
struct Split {
    /// The unreclaimable part at the last detailed sample.
    unreclaimable: Option<u64>,
    /// The total at the last detailed sample.
    total: Option<u64>,
}

/// How far the total may move between detailed samples before the next is taken at once.
const JUMP: u64 = 16 << 20;

impl Split {
    /// The total moved by more than [`JUMP`] since the last detailed sample.
    fn jumped(&self, sample: &MemorySample) -> bool {
        match (self.total, sample.bytes()) {
            (Some(then), Some(now)) => then.abs_diff(now) > JUMP,
            _ => false,
        }
    }

    fn killable(&mut self, sample: &MemorySample) -> Option<u64> {
        let total = sample.bytes()?;
        let unreclaimable = match (&sample.cgroup, &sample.process) {
            (Some(cg), _) if sample.usage.is_some() => cg.unreclaimable(),
            (None, Some(p)) if sample.usage.is_none() => p.unreclaimable(),
            _ => None,
        };
        if let Some(u) = unreclaimable {
            self.unreclaimable = Some(u);
            self.total = Some(total);
            return Some(u.min(total));
        }
        let grown = total.saturating_sub(self.total?);
        Some(self.unreclaimable?.saturating_add(grown).min(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::procmem::CgroupBreakdown;

    #[test]
    fn a_slow_collector_is_nudged_at_the_burst_share_and_on_a_jump_only() {
        let mib = 1 << 20;
        // Crossing 60% of 100 MiB upward, not staying above it, not going down through it.
        assert!(nudge_due(59 * mib, 61 * mib, 100 * mib, 600));
        assert!(!nudge_due(61 * mib, 62 * mib, 100 * mib, 600));
        assert!(!nudge_due(62 * mib, 40 * mib, 100 * mib, 600));
        // A twentieth of the limit in one sample, below the burst share too.
        assert!(nudge_due(10 * mib, 15 * mib, 100 * mib, 600));
        assert!(!nudge_due(10 * mib, 14 * mib, 100 * mib, 600));
        // Off, and nothing known before.
        assert!(!nudge_due(59 * mib, 61 * mib, 100 * mib, 0));
        assert!(!nudge_due(0, 61 * mib, 100 * mib, 600));
    }

    fn sample(usage: u64, anon: Option<u64>) -> MemorySample {
        MemorySample {
            usage: Some(usage),
            cgroup: anon.map(|a| CgroupBreakdown {
                anon: Some(a),
                shmem: Some(0),
                ..CgroupBreakdown::default()
            }),
            ..MemorySample::default()
        }
    }

    #[test]
    fn killable_memory_leaves_out_the_page_cache_of_the_last_detailed_sample() {
        let mut split = Split::default();
        assert_eq!(
            split.killable(&sample(500, None)),
            None,
            "nothing known yet"
        );
        // 200 anonymous of 250: 50 of cache.
        assert_eq!(split.killable(&sample(250, Some(200))), Some(200));
        // Usage grows by 100 before the next detailed sample: counted as killable.
        assert_eq!(split.killable(&sample(350, None)), Some(300));
        // The detailed sample says it was cache.
        assert_eq!(split.killable(&sample(350, Some(200))), Some(200));
        // At the limit the kernel reclaims cache and the total falls below what the last
        // detailed sample called killable plus cache: still the 200 anonymous, never 0
        // (which reads as "unknown", and burst mode would go by the total with its cache).
        assert_eq!(split.killable(&sample(210, None)), Some(200));
        assert_eq!(split.killable(&sample(120, None)), Some(120));
        // A jump of more than 16 MiB asks for a detailed sample at once.
        assert!(!split.jumped(&sample(350 + (16 << 20), None)));
        assert!(split.jumped(&sample(351 + (16 << 20), None)));
    }
}
