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

pub mod budget;
pub mod clock;
pub mod cluster;
mod cycles;
mod events;
pub mod exits;
mod idle;
mod intake;
pub mod marks;
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
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use thiserror::Error;

pub use clock::{Clock, FakeClock, Nudge, Sleep, Stop, SystemClock};
pub use cluster::start;
pub use idle::IDLE_BACKOFF;
pub use status::LiveStatus;

use crate::analyse::reduce::OwnCode;
use crate::decode::{self, DecodeLimits, stackdump};
use crate::index::{CaptureIndexer, Content as IndexContent, OwnCodes};
use crate::source::procmem::MemoryProbe;
use crate::source::{BodyTap, FailureKind, FetchError, Reply, Source, SourceKind, Want, memstats};
use crate::store::{CaptureRecord, ManifestRead, RecordKind, RunWriter, StoreError};
use cycles::CycleTracker;
use exits::ExitWatcher;
use idle::HeapMark;
use intake::{Intake, Streamed};
use retention::Retention;
use tasks::joined;

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
        }
    }
}

#[derive(Debug, Error)]
pub enum CollectError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking `run` could not start its tokio runtime (no file descriptors left).
    #[error("cannot start the collector's runtime: {0}; raise the open-file limit")]
    Runtime(std::io::Error),
}

/// Why the collector stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Interrupted,
    DurationReached,
    TargetExited,
    DiskFull,
}

/// What the collector did. Every attempt is one of: a profile stored, a duplicate of the last
/// one stored, a runtime figure read (MemStats, the agent's stats, Envoy's /memory), or a
/// failure: `attempts = stored + duplicates + figures + errors`.
#[derive(Debug, Clone)]
pub struct CollectSummary {
    pub reason: StopReason,
    pub attempts: u64,
    /// Attempts that answered: `stored + duplicates + figures`.
    pub captures: u64,
    pub stored: u64,
    pub duplicates: u64,
    /// Runtime figures read (no profile file).
    pub figures: u64,
    /// Failed attempts.
    pub errors: u64,
    pub cycles: u32,
    pub deleted: u64,
    /// Whether the target answered at least once.
    pub reached: bool,
    /// Whether anything answered at all, if only with an error page or garbage.
    pub responded: bool,
    pub last_error: Option<String>,
    pub disk_error: Option<String>,
    /// Stored captures the collector's indexer wrote no entry for (left out while decoding
    /// was paced, or still waiting at the exit's grace): the first analysis builds them.
    pub unindexed: u64,
}

/// Told about every attempt, for the live status line.
pub trait Observer {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus);

    /// Told about each process end written (`exit`), once it is in the manifest.
    fn ended(&mut self, _record: &CaptureRecord) {}
}

pub struct NoObserver;

impl<O: Observer + ?Sized> Observer for &mut O {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus) {
        (**self).attempt(record, status);
    }

    fn ended(&mut self, record: &CaptureRecord) {
        (**self).ended(record);
    }
}

impl<O: Observer + ?Sized> Observer for Box<O> {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus) {
        (**self).attempt(record, status);
    }

    fn ended(&mut self, record: &CaptureRecord) {
        (**self).ended(record);
    }
}

impl Observer for NoObserver {
    fn attempt(&mut self, _: &CaptureRecord, _: &LiveStatus) {}
}

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

/// What the inbox held at the top of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inbox {
    Quiet,
    /// A process's end was written: the next attempt is due at once.
    Ended,
    /// Its senders are gone (`heapwatch run` is done with the command): the collector ends,
    /// as for a target gone for good, with no `stop` record.
    Closed,
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

/// How often a sleeping collector with an inbox looks into it.
const EVENT_POLL: Duration = Duration::from_millis(20);

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

    /// Writes the events received so far.
    async fn record_events(&mut self) -> Result<Inbox, StoreError> {
        let Some(events) = &self.events else {
            return Ok(Inbox::Quiet);
        };
        let mut pending = std::mem::take(&mut self.pending_events);
        let mut closed = self.events_closed;
        loop {
            match events.try_recv() {
                Ok(record) => pending.push(record),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        let ended = pending.iter().any(|r| r.kind == RecordKind::Exit);
        for mut record in pending {
            record.seq = self.next_seq;
            self.next_seq += 1;
            record.cycle = if record.kind == RecordKind::Exit {
                self.cycles.ended(record.pid)
            } else {
                self.cycles.current()
            };
            if record.kind == RecordKind::Exit {
                self.ends_to_tell.push(record.clone());
            }
            self.append(record).await?;
        }
        Ok(if closed {
            Inbox::Closed
        } else if ended {
            Inbox::Ended
        } else {
            Inbox::Quiet
        })
    }

    /// Sleeps until `wake`, or until an event arrives: a death told by whoever started the
    /// target makes the next attempt at once, which then waits for its successor.
    async fn sleep_until(&mut self, wake: Duration) {
        if self.events.is_none() {
            return self.sleep_or_stop(wake).await;
        }
        loop {
            let now = self.clock.now();
            if now >= wake || self.stop.is_set() {
                return;
            }
            self.sleep_or_stop(wake.min(now + EVENT_POLL)).await;
            match self.events.as_ref().map(|e| e.try_recv()) {
                Some(Ok(record)) => {
                    self.pending_events.push(record);
                    return;
                }
                Some(Err(TryRecvError::Disconnected)) => {
                    self.events_closed = true;
                    return;
                }
                _ => {}
            }
        }
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

    /// One attempt, recorded. `None` when the stop came during the request.
    async fn attempt(
        &mut self,
        want: Want,
        observer: &mut impl Observer,
    ) -> Option<Result<(), StoreError>> {
        let kind = match want {
            Want::Heap => RecordKind::Heap,
            Want::Goroutine => RecordKind::Goroutine,
            Want::MemStats => RecordKind::Memstats,
            Want::Stats => RecordKind::Stats,
        };
        let interval = self.heap_interval();
        let timeout = self.timeout();
        // A profile's body is written and gunzipped as it arrives.
        let mut intake = match want {
            Want::Heap | Want::Goroutine => match self.intake(self.next_seq, kind) {
                Ok(intake) => Some(intake),
                Err(e) => return Some(Err(e)),
            },
            Want::MemStats | Want::Stats => None,
        };
        let t_ms = self.clock.unix_ms();
        let began = self.clock.now();
        let tap = intake.as_mut().map(|i| i as &mut dyn BodyTap);
        let Some(fetched) = self.fetch(want, timeout, tap).await else {
            if let Some(intake) = intake {
                intake.abandon().await;
            }
            return None;
        };
        let received = self.clock.now();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.summary.attempts += 1;
        self.last_latency = received - began;
        let mut record = CaptureRecord::new(seq, kind, self.cycles.current(), t_ms);
        record.latency_ms = ms(received - began);
        if fetched.is_ok() {
            let cost = match want {
                Want::Heap => Some(&mut self.heap_cost),
                Want::Goroutine => Some(&mut self.goroutine_cost),
                _ => None,
            };
            if let Some(cost) = cost {
                cost.add(received - began);
            }
        }
        record.interval_ms = Some(interval.as_millis() as u64);
        Some(
            self.record_reply(want, fetched, intake, record, began, received, observer)
                .await,
        )
    }

    /// Takes in a profile's body as it arrives: its temporary file, named for `seq`, and its
    /// gunzip.
    fn intake(&mut self, seq: u64, kind: RecordKind) -> Result<Intake, StoreError> {
        let temp = self
            .writer()
            .temp_path(&format!("{seq:06}-{}.partial", kind.as_str()))?;
        Ok(Intake::new(
            temp,
            self.writer().publisher(),
            self.clock.clone(),
            self.config.decode.max_decompressed,
        ))
    }

    /// Checks a reply, makes it durable and appends its record. A profile's body went to
    /// `intake` as it arrived.
    #[allow(clippy::too_many_arguments)]
    async fn record_reply(
        &mut self,
        want: Want,
        fetched: Result<Reply, FetchError>,
        mut intake: Option<Intake>,
        mut record: CaptureRecord,
        began: Duration,
        received: Duration,
        observer: &mut impl Observer,
    ) -> Result<(), StoreError> {
        let (seq, kind) = (record.seq, record.kind);
        match fetched {
            Err(e) => {
                if let Some(intake) = intake {
                    intake.abandon().await;
                }
                self.failed(&mut record, &e, began);
            }
            Ok(reply) => {
                record.bytes = reply.bytes.len() as u64;
                record.pid = reply
                    .pid
                    .or_else(|| self.pid_probe.as_ref().and_then(MemoryProbe::current_pid));
                if let (Some(exits), Some(pid)) = (&self.exits, record.pid) {
                    exits.watch(pid);
                }
                // What the body gunzips to, from a source that made it (proc): checked and
                // summed as it is, never gunzipped again.
                let made = reply
                    .made
                    .filter(|_| matches!(want, Want::Heap | Want::Goroutine));
                let bytes: Arc<[u8]> = reply.bytes.into();
                // A profile was written under a temporary name and gunzipped on the blocking
                // pool as it arrived; its fsync runs now, while this task checks it. It gets its
                // final name only if it is whole and new: told so, the job that wrote it names
                // it as soon as its fsync is done, without waiting for this task to come back.
                if intake
                    .as_ref()
                    .is_some_and(|i| i.told() != 0 && i.told() != bytes.len() as u64)
                {
                    // The source told pieces of something other than this body: start over
                    // with the body as it is.
                    intake = Some(self.intake(seq, kind)?);
                }
                if let Some(intake) = &mut intake {
                    if made.is_some() {
                        intake.without_gunzip();
                    }
                    intake.end(&bytes);
                }
                let outcome = match want {
                    Want::MemStats => self.memstats(&mut record, &bytes),
                    Want::Stats => self.stats(&mut record, &bytes),
                    Want::Goroutine if is_stack_dump(&bytes) => {
                        self.stack_dump(&mut record, &bytes)
                    }
                    _ => {
                        let pid = record.pid;
                        let streamed = match (&mut intake, made) {
                            (_, Some(made)) => Made(made),
                            (Some(intake), None) => Gunzipped(intake.gunzipped().await),
                            (None, None) => Gunzipped(Streamed::Recheck),
                        };
                        self.profile(&mut record, bytes.clone(), pid, streamed)
                            .await
                    }
                };
                match outcome {
                    Ok(()) => {}
                    Err(Invalid(message)) => {
                        let e = FetchError::new(FailureKind::Other, message);
                        self.failed(&mut record, &e, began);
                        record.error_kind = Some(FailureKind::Invalid.as_str().into());
                    }
                }
                let publish = record
                    .file
                    .clone()
                    .filter(|_| record.dup_of.is_none() && record.is_ok());
                let name = publish
                    .as_deref()
                    .map(|f| f.trim_start_matches("profiles/").to_string());
                let written = match intake {
                    Some(intake) => Some(intake.publish(name.clone()).await),
                    None => None,
                };
                if let (Some(file), Some(name)) = (publish, name) {
                    let stored = match written {
                        Some(Ok(Some(durable_at))) => Ok(durable_at),
                        Some(Err(e)) => Err(e),
                        _ => {
                            let clock = self.clock.clone();
                            self.on_disk(move |w| {
                                w.store_profile(&name, &bytes).map(|_| clock.now())
                            })
                            .await
                        }
                    };
                    let durable_at = match stored {
                        Ok(at) => at,
                        Err(e) => {
                            record.file = None;
                            record.error = Some(e.to_string());
                            record.error_kind = Some(FailureKind::Disk.as_str().into());
                            self.summary.errors += 1;
                            let _ = self.append(record).await;
                            return Err(e);
                        }
                    };
                    record.durable_ms = Some(ms(durable_at.saturating_sub(received)));
                    self.retention.stored(&record);
                    self.last_stored
                        .insert(kind, (record.hash.clone().unwrap_or_default(), seq, file));
                    self.summary.stored += 1;
                }
            }
        }
        self.append(record.clone()).await?;
        if record.is_ok() && record.cycle > self.cycle_noted {
            self.note_cycle(&record).await?;
        }
        let named_for = self.named_for.take();
        if let Some(content) = self.to_index.take() {
            // Durable and recorded, and its cycle's build noted (its main module names the
            // sites): only now is its index entry made, off this thread.
            if let (Some(_), Some(file)) = (record.durable_ms, &record.file) {
                let path = self.root.join(file);
                let own = self.own_codes.of_cycle(record.cycle);
                let named_as_decoded =
                    named_for.is_none_or(|m| OwnCode::module(m.as_deref().unwrap_or("")) == *own);
                if named_as_decoded {
                    self.indexer.add(&record, path, content, own);
                } else {
                    self.indexer.leave_out();
                }
            }
        }
        self.pace_idle(&record);
        if record.is_ok() {
            self.summary.captures += 1;
            if record.file.is_none() {
                self.summary.figures += 1;
            }
        } else {
            self.summary.errors += 1;
        }
        self.thin().await?;
        self.status.bursting = self.bursting();
        self.status.memory = self.memory_now();
        self.status.memory_total = self
            .outside
            .as_ref()
            .map(|o| o.bytes.load(Ordering::Relaxed))
            .filter(|&b| b > 0);
        self.status.memory_total_is_rss = self
            .outside
            .as_ref()
            .is_some_and(|o| !o.from_cgroup.load(Ordering::Relaxed));
        if let Some(bytes) = self.status.memory {
            self.status.memory_point(record.t_ms, bytes as i64);
        }
        self.status.limit = self.limit();
        self.status.attempts = self.summary.attempts;
        self.status.captures = self.summary.captures;
        self.status.errors = self.summary.errors;
        if let Some(latest) = self.indexer.take_latest_heap() {
            if latest.cycle == self.status.cycle {
                self.status.heap_sites(latest.t_ms, latest.sites);
            }
        }
        observer.attempt(&record, &self.status);
        Ok(())
    }

    fn failed(&mut self, record: &mut CaptureRecord, e: &FetchError, began: Duration) {
        record.error = Some(e.message.clone());
        record.error_kind = Some(e.kind.as_str().to_string());
        // An HTTP status is an answer: the target is there (Envoy's 501 for /heap_dump).
        if self.failing_since.is_none() && e.kind != FailureKind::Status {
            self.failing_since = Some(began);
        }
        if self.gone_since.is_none() && e.kind.means_gone() {
            self.gone_since = Some(began);
        }
        if e.kind.means_gone() {
            // The figures of a process that is no more are not shown as current.
            self.status.target_gone();
            self.runtime_memory = None;
        }
        self.cycles.failed(e.kind);
        self.status.last_error = Some(e.message.clone());
        self.summary.last_error = Some(e.message.clone());
        if matches!(
            e.kind,
            FailureKind::Status | FailureKind::Other | FailureKind::TooLarge
        ) {
            self.summary.responded = true;
        }
    }

    /// The target answered: bookkeeping common to every good reply. Returns the boot cycle.
    fn answered(&mut self, totals: &BTreeMap<String, i64>, pid: Option<u32>) -> u32 {
        self.failing_since = None;
        self.gone_since = None;
        self.summary.reached = true;
        let before = self.cycles.current();
        let now = self.cycles.answered(totals, pid);
        if now != before {
            self.last_stored.clear();
            self.runtime_memory = None;
            self.last_heap = None;
            self.idle_factor = 1;
            self.status.new_cycle(now);
        }
        now
    }

    fn memstats(&mut self, record: &mut CaptureRecord, bytes: &[u8]) -> Result<(), Invalid> {
        if self.kind == SourceKind::Envoy {
            return self.envoy(record, bytes);
        }
        let text = String::from_utf8_lossy(bytes);
        let stats = memstats::parse_debug_heap(&text)
            .or_else(|| memstats::parse_agent(&text))
            .ok_or_else(|| Invalid("the reply has no runtime.MemStats figures".into()))?;
        record.cycle = self.answered(&stats, record.pid);
        self.runtime_memory = memstats::held_bytes(&stats).map(|b| b.max(0) as u64);
        record.totals = stats;
        Ok(())
    }

    /// Envoy's `/memory` and `/stats` figures, kept in an `envoy` record. The memory the
    /// limit applies to is the physical figure tcmalloc reports, else what it allocated.
    fn envoy(&mut self, record: &mut CaptureRecord, bytes: &[u8]) -> Result<(), Invalid> {
        let totals = crate::source::envoy::totals_from_reply(bytes)
            .ok_or_else(|| Invalid("the reply has no Envoy /memory or /stats figures".into()))?;
        record.kind = RecordKind::Envoy;
        record.cycle = self.answered(&totals, record.pid);
        let memory = [
            "memory.total_physical_bytes",
            "memory.allocated",
            "server.memory_physical_size",
        ]
        .iter()
        .find_map(|k| totals.get(*k).copied().filter(|&v| v > 0));
        if let Some(m) = memory {
            self.runtime_memory = Some(m.max(0) as u64);
            self.status.heap(record.t_ms, m);
        }
        record.totals = totals;
        Ok(())
    }

    /// The agent's runtime counts (op 0x07), kept in the record like MemStats.
    fn stats(&mut self, record: &mut CaptureRecord, bytes: &[u8]) -> Result<(), Invalid> {
        let text = String::from_utf8_lossy(bytes);
        let stats = memstats::parse_agent_stats(&text).ok_or_else(|| {
            let head: String = text.chars().take(80).collect();
            Invalid(format!("the reply has no runtime stats: {head:?}"))
        })?;
        record.cycle = self.answered(&stats, record.pid);
        self.status.goroutines = stats.get("goroutines").copied();
        record.totals = stats;
        Ok(())
    }

    /// A goroutine stack dump as text (the agent's op 0x01), stored as it came,
    /// as `NNNNNN-goroutine.txt`; a dump cut short is an error, never a capture.
    fn stack_dump(&mut self, record: &mut CaptureRecord, bytes: &[u8]) -> Result<(), Invalid> {
        let dump = stackdump::parse(bytes).map_err(|e| Invalid(e.to_string()))?;
        let goroutines = dump.goroutines();
        let totals = BTreeMap::from([("goroutine".to_string(), goroutines)]);
        record.cycle = self.answered(&totals, record.pid);
        self.status.goroutines = Some(goroutines);
        record.totals = totals;
        self.keep_or_dedup(record, dump.content_hash(), "txt");
        self.to_index = Some(IndexContent::Dump(dump));
        Ok(())
    }

    /// A pprof profile, gunzipped and summed as it streamed in, or else now, on the blocking
    /// pool (a few ms of CPU for a large one, which would otherwise hold up every target
    /// sharing the runtime's thread); or, from a source that made it, its protobuf summed as
    /// given, under the same ceiling.
    async fn profile(
        &mut self,
        record: &mut CaptureRecord,
        bytes: Arc<[u8]>,
        pid: Option<u32>,
        streamed: Body,
    ) -> Result<(), Invalid> {
        let limits = self.config.decode;
        let mut sites = None;
        let mut len = 0;
        let (raw, summary) = match streamed {
            Made(made) => {
                record.gc = made.gc;
                if made.len > limits.max_decompressed {
                    let max = limits.max_decompressed;
                    return Err(Invalid(decode::DecodeError::TooLarge { max }.to_string()));
                }
                len = made.len;
                sites = made.sites;
                (made.raw.unwrap_or_default(), made.summary)
            }
            Gunzipped(Streamed::Profile(raw, summary)) => (raw, summary),
            Gunzipped(Streamed::Invalid(message)) => return Err(Invalid(message)),
            Gunzipped(Streamed::Recheck) => {
                let decoded = tokio::task::spawn_blocking(move || {
                    let raw =
                        decode::decompress(&bytes, &limits).map_err(|e| Invalid(e.to_string()))?;
                    // Totals and hash in one pass; the model is built only when a run is
                    // analysed.
                    let summary = decode::summarize(&raw).map_err(|e| Invalid(e.to_string()))?;
                    Ok::<_, Invalid>((raw.into_owned(), summary))
                })
                .await;
                joined(decoded)?
            }
        };
        let hash = summary.hash;
        let totals: BTreeMap<String, i64> = summary.totals.into_iter().collect();
        record.cycle = self.answered(&totals, pid);
        if record.kind == RecordKind::Heap {
            if let Some(&inuse) = totals.get("inuse_space") {
                self.status.heap(record.t_ms, inuse);
            }
        }
        if record.kind == RecordKind::Goroutine {
            self.status.goroutines = totals.get("goroutine").copied();
        }
        record.totals = totals;
        self.keep_or_dedup(record, hash, "pb.gz");
        // Figures made with the profile need no decode, and the protobuf is let go now.
        self.to_index = Some(match sites {
            Some(sites) => {
                self.named_for = Some(sites.module.clone());
                IndexContent::Figures(sites.into(), len)
            }
            None => IndexContent::Profile(raw),
        });
        Ok(())
    }

    /// Names the file a capture goes to, or marks it a duplicate of the last stored one.
    fn keep_or_dedup(&mut self, record: &mut CaptureRecord, hash: String, extension: &str) {
        match self.last_stored.get(&record.kind) {
            Some((last_hash, seq, file)) if *last_hash == hash => {
                record.dup_of = Some(*seq);
                record.file = Some(file.clone());
                self.summary.duplicates += 1;
            }
            _ => {
                record.file = Some(format!(
                    "profiles/{:06}-{}.{extension}",
                    record.seq,
                    record.kind.as_str()
                ));
            }
        }
        record.hash = Some(hash);
    }

    /// Deletes captures chosen by the retention policy and records each deletion.
    async fn thin(&mut self) -> Result<(), StoreError> {
        let current = self.cycles.current();
        while let Some(victim) = self.retention.next_victim(current) {
            self.delete(victim).await?;
        }
        Ok(())
    }

    /// Deletes the captures asked for on the deletions channel that are still kept.
    async fn delete_requested(&mut self) -> Result<(), StoreError> {
        let mut asked = Vec::new();
        if let Some(rx) = &mut self.deletions {
            while let Ok(seq) = rx.try_recv() {
                asked.push(seq);
            }
        }
        for seq in asked {
            if let Some(victim) = self.retention.take(seq) {
                self.delete(victim).await?;
            }
        }
        Ok(())
    }

    /// Deletes one stored capture, its `delete` record first.
    async fn delete(&mut self, victim: retention::Kept) -> Result<(), StoreError> {
        {
            let mut record = CaptureRecord::new(
                self.next_seq,
                RecordKind::Delete,
                victim.cycle,
                self.clock.unix_ms(),
            );
            self.next_seq += 1;
            record.file = Some(victim.file.clone());
            record.deleted_seq = Some(victim.seq);
            record.bytes = victim.bytes;
            let file = victim.file.clone();
            self.on_disk(move |w| {
                w.append(&record)?;
                w.delete_profile(&file)
            })
            .await?;
            self.summary.deleted += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod streaming_tests;
#[cfg(test)]
mod tests;

struct Invalid(String);

/// A profile's body as the collector checks it: what the gunzip beside the request made of
/// it, or the protobuf the source made and gzipped itself.
enum Body {
    Gunzipped(Streamed),
    Made(crate::source::Made),
}
use Body::{Gunzipped, Made};

/// A goroutine reply in text (op 0x01, or `?debug=2`) rather than a gzipped pprof profile.
fn is_stack_dump(bytes: &[u8]) -> bool {
    !decode::is_gzip(bytes) && bytes.starts_with(b"goroutine ")
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
