//! A thread that samples process / cgroup memory at a high rate into `memory.jsonl`,
//! independent of the profile requests, and feeds burst mode through [`OutsideMemory`].
//! Usage is read every tick; where it goes (`memory.stat`, `smaps_rollup`) every
//! [`DETAIL_EVERY`], as it costs several times more (docs/benchmarks.md).
//!
//! # Burst mode and the time to the limit go by memory that can kill
//!
//! Once a detailed sample has split the cgroup (or the process), the figure the sampler gives
//! burst mode (`OutsideMemory::killable`) is anonymous plus shared memory, not usage; between
//! detailed samples it is usage less the reclaimable part last seen (page cache that grows since
//! counts as killable until the next split, so burst comes a moment early, never late), and usage
//! moving by more than 16 MiB triggers a split at once. The status line sets the usage against
//! the limit, with that part beside it ("cgroup 255 MiB of 256 MiB | 9 MiB of it not
//! reclaimable").
//!
//! # `smaps_rollup` every 500 ms, not every tick
//!
//! It walks every mapping under the target's mmap lock; the cheap sample (usage, limit, OOM
//! count, pid, RSS) stays every tick (`benches/memory_sample.rs`, docs/benchmarks.md).
//!
//! # One sampler thread for a node's containers (`NodeSampler`, under `watch`)
//!
//! Each container's sampling state (`Probing`) sits in one map, and the thread wakes for
//! whichever sample is due next. A container far from its limit (under half its burst share, or
//! no limit) is sampled every `--far-interval` (1 s), near it every `--memory-interval` (100 ms);
//! the collector is woken (its `Nudge`) only when the burst share is crossed or memory jumps.
//! `collect` and `run` keep a sampler thread of their own (`Sampler::start`).
//!
//! A sample costs a few reads of open files (`source::procmem`'s doc). Under `watch`, where a
//! node's containers add up, the detailed sample is the cgroup's split only (no `smaps_rollup`,
//! which walks the target's page tables under its mmap lock), and a container far from its limit
//! has its log made durable every 5 s rather than every sample (a kill at once).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::OutsideMemory;
use super::exits::ExitWatcher;
use super::held_files::FileWatch;
use crate::source::procmem::{Detail, MemoryProbe, MemorySample};
use crate::store::MemoryLog;

/// How often a sample also says where the memory goes.
pub const DETAIL_EVERY: Duration = Duration::from_millis(500);

/// How often the memory log is made durable: the samples of the last quarter second at most
/// are lost to a crash of heapwatch itself (a kill is made durable at once).
const SYNC_EVERY: Duration = Duration::from_millis(250);

/// The same while a container is far from its limit (`watch`): a sample a second, made
/// durable in fives.
const FAR_SYNC_EVERY: Duration = Duration::from_secs(5);

/// A memory sampler: a thread of its own (`collect`, `run`), or one probe of a
/// [`NodeSampler`] that samples every container of a node from one thread (`watch`).
pub struct Sampler(Kind);

enum Kind {
    Own {
        stop: Arc<AtomicBool>,
        handle: Option<JoinHandle<SamplerTally>>,
    },
    Shared {
        node: Arc<NodeShared>,
        id: u64,
    },
}

/// What the sampler saw over the run.
#[derive(Debug, Clone, Default)]
pub struct SamplerTally {
    pub samples: u64,
    pub kills: u64,
    pub peak: u64,
    pub error: Option<String>,
}

/// One probe's sampling state, from sample to sample.
struct Probing {
    probe: MemoryProbe,
    interval: Duration,
    /// With a slower pace far from the limit: that pace, and its detail interval.
    far: Option<Far>,
    log: MemoryLog,
    outside: Arc<OutsideMemory>,
    exits: Option<Arc<ExitWatcher>>,
    tally: SamplerTally,
    kills: Option<u64>,
    last_sync: Instant,
    last_detail: Option<Instant>,
    split: Split,
    last_killable: u64,
    /// The files the process holds, noted at detailed samples of `collect` and `run`.
    files: FileWatch,
    /// When the next sample is due.
    due: Instant,
    /// The log failed: no more samples.
    failed: bool,
}

/// The slower pace of a container far from its limit.
#[derive(Debug, Clone, Copy)]
pub struct Far {
    /// Time between samples while the memory that can get it killed is under half its burst
    /// share of the limit (or no limit is known, so no burst is due).
    pub interval: Duration,
    /// Time between detailed samples then.
    pub detail_every: Duration,
}

impl Probing {
    fn new(
        probe: MemoryProbe,
        interval: Duration,
        far: Option<Far>,
        log: MemoryLog,
        outside: Arc<OutsideMemory>,
        exits: Option<Arc<ExitWatcher>>,
    ) -> Probing {
        Probing {
            probe,
            interval,
            far,
            log,
            outside,
            exits,
            tally: SamplerTally::default(),
            kills: None,
            last_sync: Instant::now(),
            last_detail: None,
            split: Split::default(),
            last_killable: 0,
            files: FileWatch::default(),
            due: Instant::now(),
            failed: false,
        }
    }

    /// One sample, its figures handed to the collector and written to the log; sets when the
    /// next is due.
    fn tick(&mut self) {
        let outside = &self.outside;
        if !self.probe.ready() {
            self.due = Instant::now() + self.interval;
            return;
        }
        let last_killable = self.last_killable;
        let permille = outside.nudge_permille.load(Ordering::Relaxed);
        let far = self.far.filter(|_| {
            far_from_limit(
                last_killable,
                outside.limit.load(Ordering::Relaxed),
                permille,
            )
        });
        let detail_every = far.map_or(DETAIL_EVERY, |f| f.detail_every);
        let mut detailed = self.last_detail.is_none_or(|t| t.elapsed() >= detail_every);
        // Where a node's containers are watched (a far pace is set), where the cgroup's memory
        // goes is enough: what the kernel kills by and every figure the analysis reads are in
        // it, and the process's own split (`smaps_rollup`) walks its page tables under its
        // mmap lock. `collect` and `run` read both.
        let depth = if self.far.is_some() {
            Detail::Cgroup
        } else {
            Detail::Full
        };
        let mut sample = self.probe.sample(
            crate::time::now_ms(),
            self.kills,
            if detailed { depth } else { Detail::Usage },
        );
        // Memory moving fast (a file written into the page cache, or a heap growing): look
        // where it went now rather than guess for up to 500 ms. At the limit, every sample:
        // what the kernel does there (reclaim, writeback, the kill) moves within one.
        if !detailed && (self.split.jumped(&sample) || at_limit(&sample)) {
            detailed = true;
            sample = self.probe.sample(crate::time::now_ms(), self.kills, depth);
        }
        if detailed {
            self.last_detail = Some(Instant::now());
            // The files behind the page cache: where a node's containers are watched, their
            // maps (read under the process's mmap lock) are left alone, as `smaps_rollup` is.
            if depth == Detail::Full {
                self.files.note(&mut sample);
            }
        }
        self.kills = sample.oom_kills.or(self.kills);
        if let (Some(exits), Some(pid)) = (&self.exits, sample.pid) {
            exits.watch(pid);
        }
        if sample.killed {
            self.tally.kills += 1;
        }
        let bytes = sample.bytes().unwrap_or(0);
        self.tally.peak = self.tally.peak.max(bytes);
        outside.bytes.store(bytes, Ordering::Relaxed);
        outside
            .from_cgroup
            .store(sample.usage.is_some(), Ordering::Relaxed);
        let killable = self.split.killable(&sample).unwrap_or(0);
        outside.killable.store(killable, Ordering::Relaxed);
        let mut nudged = false;
        if let Some(limit) = sample.limit.filter(|&l| l > 0) {
            if nudge_due(last_killable, killable, limit, permille) {
                outside.nudge.nudge();
                nudged = true;
            }
        }
        self.last_killable = killable;
        outside.pid.store(
            sample.pid.filter(|_| sample.alive).unwrap_or(0),
            Ordering::Relaxed,
        );
        if let Some(limit) = sample.limit {
            outside.limit.store(limit, Ordering::Relaxed);
        }
        // A kill, or the pace's time since the last fsync: make it durable.
        let sync_every = far.map_or(SYNC_EVERY, |_| FAR_SYNC_EVERY);
        let sync = sample.killed || self.last_sync.elapsed() >= sync_every;
        if let Err(e) = self.log.append(&sample, sync) {
            self.tally.error = Some(e.to_string());
            self.failed = true;
            return;
        }
        if sync {
            self.last_sync = Instant::now();
        }
        self.tally.samples += 1;
        // The pace for the next: slow only while still far, and not right after a jump.
        let limit = sample.limit.unwrap_or(0);
        let still_far = self
            .far
            .filter(|_| !nudged && !sample.killed && far_from_limit(killable, limit, permille));
        self.due = Instant::now() + still_far.map_or(self.interval, |f| f.interval);
    }

    /// A last detailed sample, and what was seen.
    fn close(mut self) -> SamplerTally {
        if !self.failed && self.probe.ready() {
            let _ = self.log.append(
                &self
                    .probe
                    .sample(crate::time::now_ms(), self.kills, Detail::Full),
                true,
            );
        }
        self.tally
    }
}

impl Sampler {
    /// A sampler on a thread of its own, sampling every `interval`.
    pub fn start(
        probe: MemoryProbe,
        interval: Duration,
        log: MemoryLog,
        outside: Arc<OutsideMemory>,
        exits: Option<Arc<ExitWatcher>>,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        let mut probing = Probing::new(probe, interval, None, log, outside, exits);
        let handle = std::thread::Builder::new()
            .name("heapwatch-memory".into())
            .spawn(move || {
                while !stop_thread.load(Ordering::Relaxed) && !probing.failed {
                    probing.tick();
                    std::thread::sleep(probing.due.saturating_duration_since(Instant::now()));
                }
                probing.close()
            })
            .expect("spawn the memory sampler thread");
        Sampler(Kind::Own {
            stop,
            handle: Some(handle),
        })
    }

    pub fn finish(self) -> SamplerTally {
        match self.0 {
            Kind::Own { stop, mut handle } => {
                stop.store(true, Ordering::Relaxed);
                handle
                    .take()
                    .and_then(|h| h.join().ok())
                    .unwrap_or_default()
            }
            Kind::Shared { node, id } => {
                let probing = node
                    .probes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                node.changed.notify_all();
                probing.map(Probing::close).unwrap_or_default()
            }
        }
    }
}

/// One thread sampling the memory of every container of a node, each at its own pace: a
/// wake-up per due sample rather than a thread per container.
#[derive(Clone)]
pub struct NodeSampler {
    node: Arc<NodeShared>,
    handle: Arc<Mutex<Option<JoinHandle<()>>>>,
}

struct NodeShared {
    probes: Mutex<BTreeMap<u64, Probing>>,
    /// Told when a probe is added or taken away, and at the stop.
    changed: Condvar,
    next_id: AtomicU64,
    stop: AtomicBool,
}

impl NodeSampler {
    pub fn start() -> NodeSampler {
        let node = Arc::new(NodeShared {
            probes: Mutex::new(BTreeMap::new()),
            changed: Condvar::new(),
            next_id: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let shared = node.clone();
        let handle = std::thread::Builder::new()
            .name("heapwatch-memory".into())
            .spawn(move || {
                let mut probes = shared.probes.lock().unwrap_or_else(|p| p.into_inner());
                while !shared.stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    for probing in probes.values_mut() {
                        if probing.due <= now && !probing.failed {
                            probing.tick();
                        }
                    }
                    let next = probes
                        .values()
                        .filter(|p| !p.failed)
                        .map(|p| p.due)
                        .min()
                        .unwrap_or(now + Duration::from_secs(1));
                    let wait = next.saturating_duration_since(Instant::now());
                    probes = shared
                        .changed
                        .wait_timeout(probes, wait)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            })
            .expect("spawn the memory sampler thread");
        NodeSampler {
            node,
            handle: Arc::new(Mutex::new(Some(handle))),
        }
    }

    /// Samples `probe` from now on, every `interval`, or every `far.interval` while it is far
    /// from its limit.
    pub fn add(
        &self,
        probe: MemoryProbe,
        interval: Duration,
        far: Option<Far>,
        log: MemoryLog,
        outside: Arc<OutsideMemory>,
        exits: Option<Arc<ExitWatcher>>,
    ) -> Sampler {
        let id = self.node.next_id.fetch_add(1, Ordering::Relaxed);
        let probing = Probing::new(probe, interval, far, log, outside, exits);
        self.node
            .probes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, probing);
        self.node.changed.notify_all();
        Sampler(Kind::Shared {
            node: self.node.clone(),
            id,
        })
    }

    /// Stops the thread (probes not finished are left unsampled).
    pub fn stop(&self) {
        self.node.stop.store(true, Ordering::Relaxed);
        self.node.changed.notify_all();
        if let Some(h) = self.handle.lock().ok().and_then(|mut h| h.take()) {
            let _ = h.join();
        }
    }
}

/// Whether memory that can get the target killed (`killable`) is under half the burst share
/// (`permille` thousandths) of `limit`, or no burst can come (no limit known, bursts off): a
/// container that may be sampled at the slower pace.
fn far_from_limit(killable: u64, limit: u64, permille: u32) -> bool {
    limit == 0
        || permille == 0
        || u128::from(killable) * 2000 < u128::from(limit) * u128::from(permille)
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

/// The share of its limit at which a cgroup's split is read at every sample.
const AT_LIMIT_PERMILLE: u64 = 950;

/// The cgroup's usage at (or within 5 % of) its limit.
fn at_limit(sample: &MemorySample) -> bool {
    match (sample.usage, sample.limit) {
        (Some(usage), Some(limit)) if limit > 0 => {
            usage as u128 * 1000 >= limit as u128 * AT_LIMIT_PERMILLE as u128
        }
        _ => false,
    }
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
    fn the_split_is_read_at_every_sample_near_the_limit_only() {
        let mib = 1 << 20;
        let sample = |usage, limit| MemorySample {
            usage: Some(usage),
            limit,
            ..MemorySample::default()
        };
        assert!(at_limit(&sample(250 * mib, Some(256 * mib))));
        assert!(at_limit(&sample(256 * mib, Some(256 * mib))));
        assert!(!at_limit(&sample(200 * mib, Some(256 * mib))));
        assert!(!at_limit(&sample(250 * mib, None)));
    }

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

    #[test]
    fn a_container_is_far_from_its_limit_under_half_its_burst_share_or_with_no_limit() {
        let mib = 1 << 20;
        // Burst at 60% of 100 MiB: far below 30 MiB.
        assert!(far_from_limit(29 * mib, 100 * mib, 600));
        assert!(!far_from_limit(30 * mib, 100 * mib, 600));
        assert!(!far_from_limit(90 * mib, 100 * mib, 600));
        // No limit known, or no burst asked for: nothing to be near.
        assert!(far_from_limit(90 * mib, 0, 600));
        assert!(far_from_limit(90 * mib, 100 * mib, 0));
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
