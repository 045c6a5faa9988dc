//! The flight recorder: paces requests to one target (one in flight, never more), validates
//! each reply, makes it durable, appends its manifest line, spots restarts (boot cycles) and
//! duplicate captures, and thins old captures to stay under a disk budget.
//!
//! # The collector on tokio
//!
//! A `Collector` owns everything it runs: its source (`Box<dyn Source>`), its clock
//! (`Arc<dyn Clock>`), its `RunWriter` and a `Stop`. `Collector::run_async(observer)` is one
//! future per target, `Send` whenever the observer is (a test spawns it with `tokio::spawn`), so a
//! multi-target `collect` runs one task per target on one runtime. `Collector::run` is a thin
//! wrapper for callers that are not async (`collect` with one target, `heapwatch run` and its
//! `--also` threads): it builds a current-thread runtime, blocks on `run_async` and shuts the
//! runtime down in the background. What the collector hands to tokio, and why nothing that can
//! block runs on its task, is `tasks.rs`'s doc; the stop and the clock are `clock.rs`'s; the body
//! taken in as it arrives is `intake.rs`'s.

mod attempt;
pub mod budget;
pub mod clock;
pub mod cluster;
mod config;
mod cycles;
mod events;
pub mod exits;
mod idle;
mod intake;
pub mod marks;
mod outcome;
mod replies;
mod retention;
pub mod sampler;
mod status;
pub mod targets;
mod tasks;
pub mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

pub use clock::{Clock, FakeClock, Nudge, Sleep, Stop, SystemClock};
pub use cluster::start;
pub use config::CollectConfig;
pub use idle::IDLE_BACKOFF;
pub use outcome::{CollectError, CollectSummary, NoObserver, Observer, StopReason};
pub use status::LiveStatus;

use crate::index::{CaptureIndexer, Content as IndexContent, OwnCodes};
use crate::source::procmem::MemoryProbe;
use crate::source::{Source, SourceKind, Want};
use crate::store::{CaptureRecord, ManifestRead, RecordKind, RunWriter, StoreError};
use cycles::CycleTracker;
use events::Inbox;
use exits::ExitWatcher;
use idle::HeapMark;
use retention::Retention;

/// Memory of the target seen from outside (RSS or cgroup usage), shared with a sampler thread
/// so burst mode reacts even while the target does not answer. Zero means unknown.
#[derive(Debug, Default)]
pub struct OutsideMemory {
    /// Cgroup usage, else RSS: everything charged, page cache included.
    pub bytes: AtomicU64,
    pub limit: AtomicU64,
    /// The part of `bytes` reclaim cannot take back (anonymous and shared memory), once the
    /// split is known: what burst mode and the time to the limit go by.
    pub killable: AtomicU64,
    /// The process measured.
    pub pid: AtomicU32,
    /// `bytes` is a cgroup's charge (else a process's RSS).
    pub from_cgroup: std::sync::atomic::AtomicBool,
    /// Told by the sampler when `killable` crosses this share of the limit (in thousandths;
    /// zero: never) or jumps by a twentieth of it in one sample, so a collector paced slowly
    /// (`heapwatch watch`'s baseline) bursts at once rather than at its next capture.
    pub nudge_permille: AtomicU32,
    pub nudge: Nudge,
}

struct Task {
    want: Want,
    due: Duration,
}

/// One target's collector. It owns everything it runs, so it can be moved into a task of its
/// own ([`Collector::run_async`]).
pub struct Collector {
    config: CollectConfig,
    /// Away (`None`) while a blocking request has it on tokio's blocking pool, and for good
    /// once the stop cut such a request short: then the collector is stopping.
    source: Option<Box<dyn Source>>,
    /// The source's kind, known even while the source is away.
    kind: SourceKind,
    /// An agent found on this machine by its pid (`agent:PID`, `agent:auto`): the pids it
    /// tells are this PID namespace's.
    local_agent: bool,
    clock: Arc<dyn Clock>,
    /// Away (`None`) only while a write has it on tokio's blocking pool.
    writer: Option<RunWriter>,
    /// The run directory.
    root: PathBuf,
    stop: Stop,
    outside: Option<Arc<OutsideMemory>>,
    next_seq: u64,
    cycles: CycleTracker,
    retention: Retention,
    status: LiveStatus,
    summary: CollectSummary,
    /// Last stored capture per kind in this boot cycle: (content hash, seq, file).
    last_stored: BTreeMap<RecordKind, (String, u64, String)>,
    /// Monotonic time of the first refusal since the target last answered.
    gone_since: Option<Duration>,
    /// How long the last request took, from sending it to its last byte.
    last_latency: Duration,
    /// Monotonic time of the first failure since the target last answered.
    failing_since: Option<Duration>,
    /// Memory the latest MemStats of this boot cycle says the process holds (`Sys` less
    /// released heap): a burst trigger when nothing samples the process from outside.
    runtime_memory: Option<u64>,
    /// Event records from outside the collector (`exit`, `stop` from `heapwatch run`), given
    /// their seq and boot cycle here so the manifest has one writer.
    events: Option<Receiver<CaptureRecord>>,
    /// Events taken from the inbox while sleeping, written at the top of the loop.
    pending_events: Vec<CaptureRecord>,
    /// Every sender of the inbox is gone: whoever started the target has ended it for good.
    events_closed: bool,
    /// Names the process behind a reply that does not (HTTP with `--pid` or `--cgroup`).
    pid_probe: Option<MemoryProbe>,
    /// The newest boot cycle whose `cycle` record is written.
    cycle_noted: u32,
    /// The boot cycle of each process that answered.
    cycle_of_pid: BTreeMap<u32, u32>,
    /// Exit statuses of the processes that answered, from the kernel.
    exits: Option<Arc<ExitWatcher>>,
    /// The cgroup's `oom_kill` count when the last exit was noted (or at the start), so that
    /// a SIGKILL's exit record says whether the kernel's count rose with it.
    oom_kills_seen: Option<u64>,
    /// Idle back-off: the heap interval is multiplied by this (1, 2, 4, … up to
    /// `config.idle_backoff`) while consecutive heap captures find it flat.
    idle_factor: u32,
    /// The in-use heap and memory when the heap last moved.
    last_heap: Option<HeapMark>,
    /// Writes each stored capture's site index entry on a thread of its own.
    indexer: CaptureIndexer,
    /// Each boot cycle's own code, from the `cycle` records: what the indexer names sites by.
    own_codes: OwnCodes,
    /// `exit` records written since the observer was last told.
    ends_to_tell: Vec<CaptureRecord>,
    /// What a heap and a goroutine capture cost the target lately (see [`Cost`]).
    heap_cost: Cost,
    goroutine_cost: Cost,
    /// The content the current attempt decoded, for the indexer once it is durable.
    to_index: Option<IndexContent>,
    /// When `to_index` holds the figures per site the source made with the profile (proc),
    /// the main module they were named for: they are its entry only if that is its boot
    /// cycle's own code.
    named_for: Option<Option<String>>,
    /// Wakes the collector for a heap capture before its due time (at most one per burst
    /// interval).
    nudge: Option<Nudge>,
    /// Captures to delete, chosen outside (the node-wide disk budget of `heapwatch watch`):
    /// taken at the top of the loop, each recorded with a `delete` record.
    deletions: Option<tokio::sync::mpsc::UnboundedReceiver<u64>>,
}

/// The longest goroutine captures are spread apart by their cost.
pub const GOROUTINE_PACE_MAX: Duration = Duration::from_secs(60);

/// What one kind of capture costs the target: its recent time to answer (rendering a profile
/// is CPU in the target, and a goroutine profile stops the world to walk every stack), as a
/// moving average in which each new capture weighs a quarter.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    seconds: Option<f64>,
}

impl Cost {
    fn add(&mut self, took: Duration) {
        let new = took.as_secs_f64();
        self.seconds = Some(self.seconds.map_or(new, |o| 0.75 * o + 0.25 * new));
    }

    /// How many times `other` this costs.
    fn ratio_to(&self, other: &Cost) -> Option<f64> {
        Some(self.seconds? / other.seconds?.max(1e-4))
    }
}

impl Collector {
    pub fn new(
        config: CollectConfig,
        source: Box<dyn Source>,
        clock: Arc<dyn Clock>,
        writer: RunWriter,
        existing: &ManifestRead,
        stop: Stop,
    ) -> Collector {
        let next_seq = existing
            .records
            .iter()
            .map(|r| r.seq)
            .max()
            .map_or(1, |s| s + 1);
        let mut status = LiveStatus::default();
        status.limit = config.limit;
        let cycles = CycleTracker::resume(&existing.records)
            .pid_is_process(source.kind() == SourceKind::Proc);
        status.cycle = cycles.current();
        let retention = Retention::resume(&existing.records, config.max_disk);
        let cycle_noted = existing
            .records
            .iter()
            .filter(|r| r.kind == RecordKind::Cycle)
            .map(|r| r.cycle)
            .max()
            .unwrap_or(0);
        let indexer = {
            let clock = clock.clone();
            CaptureIndexer::start_paced(writer.root(), Arc::new(move || clock.now()))
        };
        let own_codes = OwnCodes::of(&existing.records);
        let mut source = source;
        source.name_sites(crate::index::build::site_naming());
        Collector {
            config,
            kind: source.kind(),
            local_agent: matches!(
                crate::source::agent::AgentTarget::parse(source.target()),
                Ok(crate::source::agent::AgentTarget::Pid(_)
                    | crate::source::agent::AgentTarget::Auto(_))
            ),
            source: Some(source),
            clock,
            root: writer.root().to_path_buf(),
            writer: Some(writer),
            stop,
            outside: None,
            next_seq,
            cycles,
            retention,
            status,
            summary: CollectSummary {
                reason: StopReason::Interrupted,
                attempts: 0,
                captures: 0,
                stored: 0,
                duplicates: 0,
                figures: 0,
                errors: 0,
                cycles: 0,
                deleted: 0,
                reached: false,
                responded: false,
                last_error: None,
                disk_error: None,
                unindexed: 0,
            },
            last_stored: BTreeMap::new(),
            failing_since: None,
            last_latency: Duration::ZERO,
            gone_since: None,
            runtime_memory: None,
            events: None,
            pending_events: Vec::new(),
            events_closed: false,
            pid_probe: None,
            cycle_noted,
            cycle_of_pid: existing
                .records
                .iter()
                .filter(|r| r.kind == RecordKind::Cycle)
                .filter_map(|r| Some((r.pid?, r.cycle)))
                .collect(),
            exits: None,
            oom_kills_seen: None,
            idle_factor: 1,
            last_heap: None,
            indexer,
            own_codes,
            to_index: None,
            named_for: None,
            ends_to_tell: Vec::new(),
            heap_cost: Cost::default(),
            goroutine_cost: Cost::default(),
            nudge: None,
            deletions: None,
        }
    }

    /// Captures named (by seq) on this channel are deleted and recorded as deleted.
    pub fn with_deletions(mut self, deletions: tokio::sync::mpsc::UnboundedReceiver<u64>) -> Self {
        self.deletions = Some(deletions);
        self
    }

    /// A nudge makes the heap capture (the probe while the target does not answer) due at
    /// once, or one burst interval after the previous one if that is later.
    pub fn with_nudge(mut self, nudge: Nudge) -> Self {
        self.nudge = Some(nudge);
        self
    }

    /// Records sent here are appended to the manifest before the next attempt and when the
    /// collector stops. An `exit` record's boot cycle is the one its pid answered in.
    pub fn with_events(mut self, events: Receiver<CaptureRecord>) -> Self {
        self.events = Some(events);
        self
    }

    /// Where the exit statuses of the processes that answer come from.
    pub fn with_exits(mut self, exits: Arc<ExitWatcher>) -> Self {
        self.exits = Some(exits);
        self
    }

    /// Where to look up the process of a reply that does not name it: a new pid there opens
    /// a new boot cycle, as the agent's does.
    pub fn with_pid_probe(mut self, probe: MemoryProbe) -> Self {
        if let MemoryProbe::Cgroup(cg) = &probe {
            self.oom_kills_seen = cg.oom_kills();
        }
        self.pid_probe = Some(probe);
        self
    }

    pub fn with_outside_memory(mut self, outside: Arc<OutsideMemory>) -> Self {
        self.outside = Some(outside);
        self
    }

    fn limit(&self) -> Option<u64> {
        self.config.limit.or_else(|| {
            let l = self.outside.as_ref()?.limit.load(Ordering::Relaxed);
            (l > 0).then_some(l)
        })
    }

    /// The largest figure known now of the memory that can get the target killed: from
    /// outside, its anonymous memory when the split is known (page cache is reclaimed before
    /// a kill), else RSS or cgroup usage; the latest heap capture's in-use bytes; the latest
    /// MemStats.
    fn memory_now(&self) -> Option<u64> {
        let outside = self.outside_now();
        let heap = self.status.heap_inuse.map(|b| b.max(0) as u64);
        [outside, heap, self.runtime_memory]
            .into_iter()
            .flatten()
            .max()
    }

    /// Memory seen from outside (anonymous once the split is known, else usage or RSS).
    fn outside_now(&self) -> Option<u64> {
        self.outside.as_ref().and_then(|o| {
            [&o.killable, &o.bytes]
                .into_iter()
                .map(|a| a.load(Ordering::Relaxed))
                .find(|&b| b > 0)
        })
    }

    fn bursting(&self) -> bool {
        match (self.limit(), self.memory_now()) {
            (Some(limit), Some(now)) if limit > 0 => {
                now as f64 >= self.config.burst_at * limit as f64
            }
            _ => false,
        }
    }

    fn heap_interval(&self) -> Duration {
        if self.bursting() {
            self.config.burst_interval
        } else {
            self.config.interval * self.idle_factor
        }
    }

    /// The time between goroutine captures: `--goroutine-interval` (never under the heap
    /// interval), stretched so goroutine profiles cost the target no more than heap profiles
    /// do: a goroutine capture that takes N times a heap capture's time comes N heap intervals
    /// apart, up to [`GOROUTINE_PACE_MAX`].
    fn goroutine_period(&self) -> Duration {
        let base = self.config.goroutine_interval.max(self.heap_interval());
        let Some(ratio) = self.goroutine_cost.ratio_to(&self.heap_cost) else {
            return base;
        };
        let paced = self.heap_interval().mul_f64(ratio.clamp(1.0, 1e6));
        base.max(paced.min(GOROUTINE_PACE_MAX))
    }

    fn timeout(&self) -> Duration {
        if self.bursting() {
            // A long timeout would spend the target's last live moments waiting.
            self.config
                .timeout
                .min((self.config.burst_interval * 4).max(Duration::from_millis(250)))
        } else {
            self.config.timeout
        }
    }

    /// [`Collector::run_async`] on a runtime of its own, for a caller that is not async.
    pub fn run(self, observer: &mut dyn Observer) -> Result<CollectSummary, CollectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CollectError::Runtime)?;
        let result = runtime.block_on(self.run_async(observer));
        // A blocking fetch cut short by the stop may still run on its thread: not waited for.
        runtime.shutdown_background();
        result
    }

    /// Runs until interrupted, until `duration`, until the target is gone for good
    /// (`until_exit`), or until the disk is full. Requests are paced here; blocking work
    /// (the proc source's walk, every fsync) goes to tokio's blocking pool. The future is
    /// `Send` when the observer is, so each target can be a task of its own.
    pub async fn run_async<O: Observer>(
        mut self,
        mut observer: O,
    ) -> Result<CollectSummary, CollectError> {
        let start = self.clock.now();
        let mut tasks = Vec::new();
        if self.config.heap {
            tasks.push(Task {
                want: Want::Heap,
                due: start,
            });
        }
        let (goroutine, memstats, stats) = {
            let supports = |want| self.source().is_some_and(|s| s.supports(want));
            (
                supports(Want::Goroutine),
                supports(Want::MemStats),
                supports(Want::Stats),
            )
        };
        if self.config.goroutine && goroutine {
            tasks.push(Task {
                want: Want::Goroutine,
                due: start,
            });
        }
        for (want, supported) in [(Want::MemStats, memstats), (Want::Stats, stats)] {
            if !self.config.memstats_interval.is_zero() && supported {
                tasks.push(Task { want, due: start });
            }
        }
        if !self.config.heap && !self.config.goroutine {
            tasks.insert(
                0,
                Task {
                    want: Want::Heap,
                    due: start,
                },
            );
        }
        // Envoy is watched through /memory: it goes first, and heap dumps (a tcmalloc
        // snapshot on Envoy's main thread) come rarely, only while the build serves them.
        let envoy = self.kind == SourceKind::Envoy;
        if envoy {
            tasks.retain(|t| t.want != Want::MemStats);
            tasks.insert(
                0,
                Task {
                    want: Want::MemStats,
                    due: start,
                },
            );
        }
        // While the target is not answering, only the first task (the main profile) probes.
        let probe = tasks[0].want;
        let mut last_began: Option<Duration> = None;
        loop {
            if let Err(e) = self.delete_requested().await {
                if e.is_disk_full() {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                return Err(e.into());
            }
            if self.nudge.as_ref().is_some_and(Nudge::take) {
                let soonest =
                    last_began.map_or(self.clock.now(), |b| b + self.config.burst_interval);
                for t in tasks
                    .iter_mut()
                    .filter(|t| t.want == probe || t.want == Want::Heap)
                {
                    t.due = t.due.min(soonest);
                }
            }
            self.note_exits().await?;
            let inbox = self.record_events().await;
            for end in std::mem::take(&mut self.ends_to_tell) {
                observer.ended(&end);
            }
            match inbox {
                Ok(Inbox::Ended) => {
                    let now = self.clock.now();
                    for t in tasks.iter_mut().filter(|t| t.want == probe) {
                        t.due = t.due.min(now);
                    }
                }
                Ok(Inbox::Closed) => {
                    self.summary.reason = StopReason::TargetExited;
                    break;
                }
                Ok(Inbox::Quiet) => {}
                Err(e) if e.is_disk_full() => {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
            // A source still away is one a request cut short by the stop kept.
            if self.stop.is_set() || self.source.is_none() {
                self.summary.reason = StopReason::Interrupted;
                self.stopped().await?;
                break;
            }
            let now = self.clock.now();
            if let Some(d) = self.config.duration {
                if now.saturating_sub(start) >= d {
                    self.summary.reason = StopReason::DurationReached;
                    self.stopped().await?;
                    break;
                }
            }
            if let Some(grace) = self.config.until_exit {
                // Gone means refused (or never there): a target frozen at its limit times
                // out for seconds before the kernel kills it, and is still alive.
                let gone_since = self.gone_since.or((!self.summary.reached).then_some(start));
                if let Some(since) = gone_since {
                    if self.summary.attempts > 0 && now.saturating_sub(since) >= grace {
                        self.summary.reason = StopReason::TargetExited;
                        break;
                    }
                }
            }
            let gone = self.failing_since.is_some();
            if let Some(source) = self.source.as_deref() {
                tasks.retain(|t| t.want == probe || source.supports(t.want));
            }
            let next = tasks
                .iter_mut()
                .filter(|t| !gone || t.want == probe)
                .min_by_key(|t| t.due)
                .expect("the probing task is always present");
            if next.due > now {
                let mut wake = next.due;
                if let Some(d) = self.config.duration {
                    wake = wake.min(start + d);
                }
                self.sleep_until(wake).await;
                continue;
            }
            let want = next.want;
            let began = now;
            if want == probe || want == Want::Heap {
                last_began = Some(began);
            }
            let result = match self.attempt(want, &mut observer).await {
                Some(result) => result,
                // Stopped mid-request: the attempt is not recorded, the stop is.
                None => continue,
            };
            let period = match want {
                Want::MemStats if envoy => self.heap_interval(),
                Want::Heap if envoy => (self.config.interval * 20).max(Duration::from_secs(10)),
                Want::Heap => self.heap_interval(),
                Want::Goroutine => self.goroutine_period(),
                // Near the limit the runtime figures come at least once per normal interval:
                // they are cheap, and may be the only fresh memory figure there is.
                Want::MemStats | Want::Stats if self.bursting() => {
                    self.config.memstats_interval.min(self.config.interval)
                }
                Want::MemStats | Want::Stats => self.config.memstats_interval,
            };
            // A slow target delays the next capture; requests never pile up.
            let task = tasks
                .iter_mut()
                .find(|t| t.want == want)
                .expect("task exists");
            let ended = self.clock.now();
            task.due = (began + period).max(ended);
            // Only a rendered profile costs the target: after a failure (a stall, a refusal)
            // the next attempt keeps its normal time, the last live moments matter most.
            if matches!(want, Want::Heap | Want::Goroutine)
                && self.failing_since.is_none()
                && self.kind.costs_target()
            {
                // Rendering a profile costs the target CPU: keep the share of time it spends
                // serving us under the duty cap (doubled near the limit).
                let duty = if self.bursting() {
                    (self.config.max_duty * 2.0).min(1.0)
                } else {
                    self.config.max_duty
                };
                if duty > 0.0 && duty < 1.0 {
                    // The target was busy for the request, not for our checking and fsync.
                    let busy = self.last_latency;
                    task.due = task.due.max(began + busy.mul_f64(1.0 / duty));
                }
            }
            if let Err(e) = result {
                if e.is_disk_full() {
                    self.summary.reason = StopReason::DiskFull;
                    self.summary.disk_error = Some(e.to_string());
                    break;
                }
                return Err(e.into());
            }
        }
        self.note_exits().await?;
        self.record_events().await?;
        for end in std::mem::take(&mut self.ends_to_tell) {
            observer.ended(&end);
        }
        self.summary.cycles = self.cycles.current();
        self.summary.unindexed = self.indexer.finish(crate::index::INDEX_GRACE);
        Ok(self.summary)
    }
}

#[cfg(test)]
mod streaming_tests;
#[cfg(test)]
mod tests;
