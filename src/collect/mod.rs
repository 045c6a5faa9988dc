//! The flight recorder: paces requests to one target (one in flight, never more), validates
//! each reply, makes it durable, appends its manifest line, spots restarts (boot cycles) and
//! duplicate captures, and thins old captures to stay under a disk budget.
//!
//! This file holds the [`Collector`] (what it owns, how it is put together) and the map; each
//! idea of one target's collection is a file of its own:
//! - `config.rs`: what a collector is told ([`CollectConfig`]); `outcome.rs`: what it tells
//!   ([`Observer`], [`CollectSummary`], [`CollectError`]);
//! - `pacing.rs`: the capture loop, burst mode, the duty cap and goroutine pacing; `idle.rs`:
//!   the idle back-off; `clock.rs`: time, the stop and the nudge;
//! - `attempt.rs`: one attempt, from request to manifest line; `ahead.rs`: the next `proc:` heap
//!   read started while the last capture is stored; `intake.rs`: a body taken in as it arrives;
//!   `replies.rs`: what each kind of reply is checked for; `tasks.rs`: what goes to tokio's
//!   blocking pool;
//! - `cycles.rs`: boot cycles, and the bookkeeping of each answer and failure; `events.rs`: the
//!   `cycle`, `exit` and `stop` records, and the records others send in;
//! - `retention.rs`: thinning under `--max-disk`, and deletions chosen outside (`budget.rs`);
//! - `status.rs`: the live status line's figures; `exits.rs`, `sampler.rs`: the process's end and
//!   its memory, seen from outside;
//! - several targets and whole nodes: `cluster.rs`, `targets.rs`, `marks.rs`, `watch.rs`.
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

mod ahead;
mod attempt;
pub mod budget;
pub mod clock;
pub mod cluster;
mod config;
mod cycles;
mod events;
pub mod exits;
mod held_files;
mod idle;
mod intake;
pub mod marks;
mod outcome;
mod pacing;
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
use std::sync::mpsc::Receiver;
use std::time::Duration;

pub use clock::{Clock, FakeClock, Nudge, Sleep, Stop, SystemClock};
pub use cluster::start;
pub use config::CollectConfig;
pub use idle::IDLE_BACKOFF;
pub use outcome::{CollectError, CollectSummary, NoObserver, Observer, StopReason};
pub use pacing::{GOROUTINE_PACE_MAX, OutsideMemory};
pub use status::LiveStatus;

use crate::index::{CaptureIndexer, Content as IndexContent, OwnCodes};
use crate::source::procmem::MemoryProbe;
use crate::source::{Source, SourceKind};
use crate::store::{CaptureRecord, ManifestRead, RecordKind, RunWriter, StoreError};
use cycles::CycleTracker;
use exits::ExitWatcher;
use idle::HeapMark;
use pacing::Cost;
use retention::Retention;

/// One target's collector. It owns everything it runs, so it can be moved into a task of its
/// own ([`Collector::run_async`]).
pub struct Collector {
    config: CollectConfig,
    /// Away (`None`) while a blocking request has it on tokio's blocking pool, and for good
    /// once the stop cut such a request short: then the collector is stopping.
    source: Option<Box<dyn Source>>,
    /// The next heap read, started while the last capture is stored (`ahead.rs`): it has the
    /// source until it is back.
    ahead: Option<ahead::Ahead>,
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
            CaptureIndexer::start_paced(writer.root(), &config.own, Arc::new(move || clock.now()))
        };
        let own_codes = OwnCodes::of(&existing.records, &config.own);
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
            ahead: None,
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
}

#[cfg(test)]
mod ahead_tests;
#[cfg(test)]
mod streaming_tests;
#[cfg(test)]
mod tests;
