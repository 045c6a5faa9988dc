//! `collect::start`: one collection over one target or several. Each target is a node with
//! its own collector (pacing, burst, memory sampler, boot cycles, manifest) in a run of its
//! own; with two or more, the run directory is a cluster run (`RUN/run.json` lists the nodes,
//! each in `RUN/targets/NAME/`). Marked log lines go to `RUN/events.jsonl` from a thread of
//! their own. Nodes share nothing that can block: each is one task of a single tokio runtime,
//! and the stop is an atomic with a wake-up.
//!
//! # Collecting several targets (cluster runs)
//!
//! `collect::start(targets, options)` is the library entry the CLI calls for one target or many:
//! flags become `TargetSpec`s and `StartOptions`; `start` opens every target first
//! (`collect/targets.rs`: `open_target` turns a target string into a `Box<dyn Source>` and its
//! memory probe, `node_name` names its node), then writes the layout (one target: `RUN` is the
//! run; two or more: `RUN/run.json` of kind `cluster` and a complete run per node in
//! `RUN/targets/NAME/`), and `Collection::run(observers)` records.
//!
//! **Each node is alone.** A node has its own collector, clock, exit watcher, memory sampler and
//! manifest, and is one task of a single tokio runtime (`Collection::run`); the only thing nodes
//! share is the stop (`collect::Stop`, an atomic with a wake-up). The status rows are one observer
//! per node. A hung node's task only awaits its request, and every blocking step (fsync, the proc
//! walk, gunzip) is on the blocking pool, so a hung or failing node delays no other (the
//! end-to-end test hangs one with SIGSTOP and measures the other's largest gap between captures).
//! The log events are `marks.rs`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use super::exits::ExitWatcher;
use super::marks::{self, EventLog, Mark, MarkError, TailTally, Tailer};
use super::sampler::{Far, NodeSampler};
use super::sampler::{Sampler, SamplerTally};
use super::targets::{self, OpenedTarget, TargetError, TargetOptions};
use super::{
    Clock as _, CollectConfig, CollectError, CollectSummary, Collector, Nudge, Observer,
    OutsideMemory, Stop, SystemClock,
};
use crate::source::Target;
use crate::source::procmem::MemoryProbe;
use crate::store::cluster::{
    self, CLUSTER_KIND, ClusterInfo, ClusterTarget, LogSpec, MarkSpec, TARGETS_DIR,
};
use crate::store::{ManifestRead, RunDir, RunInfo, RunWriter, StoreError};

#[derive(Debug, Error)]
pub enum StartError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Marks(#[from] MarkError),
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The targets and names do not make a run (duplicate names, a run of the other layout).
    #[error("{0}")]
    Layout(String),
}

/// One target to collect.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    /// The node's name; in a single-target run it names nothing on disk.
    pub name: String,
    pub target: Target,
    pub options: TargetOptions,
    /// The node's memory limit (`--limit`); else its cgroup's.
    pub limit: Option<u64>,
}

/// What every node shares.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// The run directory: the run itself for one target, the cluster run for several.
    pub out: PathBuf,
    /// The collector's settings; `limit` is each target's own.
    pub config: CollectConfig,
    pub memory_interval: Duration,
    pub label: Option<String>,
    /// Options kept in each node's `run.json` as they were given (`pid` and `cgroup` are
    /// filled in per node).
    pub run_options: crate::model::run_options::RunOptions,
    pub logs: Vec<LogSpec>,
    pub marks: Vec<MarkSpec>,
    /// A run that exists may be resumed against another target than the one it recorded
    /// (`--retarget`): its run.json then names the new one.
    pub retarget: bool,
}

/// The names of the targets' nodes: `--name` by position, else one from the target itself
/// ([`targets::node_name`]). Two nodes of one name are refused.
pub fn node_names(targets: &[Target], names: &[String]) -> Result<Vec<String>, StartError> {
    if names.len() > targets.len() {
        return Err(StartError::Layout(format!(
            "{} --name for {} target(s): give at most one --name per target, in order",
            names.len(),
            targets.len()
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let name = match names.get(i) {
            Some(given) => {
                if targets::safe_name(given) != *given {
                    return Err(StartError::Layout(format!(
                        "--name {given:?}: a node name is one directory name (letters, digits, \
                         '.', '_' and '-')"
                    )));
                }
                given.clone()
            }
            None => targets::node_name(target.as_str()),
        };
        if let Some(j) = out.iter().position(|n| *n == name) {
            return Err(StartError::Layout(format!(
                "{} and {} are both named {name:?}: give each target its own --name \
                 (one per target, in order)",
                targets[j], target
            )));
        }
        out.push(name);
    }
    Ok(out)
}

/// A target opened, with its run directory written and ready to record.
pub struct Node {
    pub name: String,
    pub target: String,
    /// The node's run directory.
    pub dir: PathBuf,
    opened: OpenedTarget,
    writer: RunWriter,
    existing: ManifestRead,
    config: CollectConfig,
    /// Wakes its collector early; its memory sampler nudges it at the burst share too.
    nudge: Option<Nudge>,
    /// Captures to delete, chosen by a budget outside the node.
    deletions: Option<tokio::sync::mpsc::UnboundedReceiver<u64>>,
    /// A memory sampler shared with other nodes (and its slower pace far from the limit), in
    /// place of a thread of the node's own.
    sampler: Option<(NodeSampler, Option<Far>)>,
    /// A subscriber of an exit watcher shared with other nodes, in place of one of its own.
    exits: Option<ExitWatcher>,
}

impl Node {
    /// Its entry in a cluster run's `run.json`, its directory under `targets/` named as on
    /// disk (the last part of its directory).
    pub fn entry(&self) -> ClusterTarget {
        let dir_name = self
            .dir
            .file_name()
            .map_or_else(|| self.name.clone(), |n| n.to_string_lossy().into_owned());
        ClusterTarget {
            name: self.name.clone(),
            target: self.target.clone(),
            source: self.opened.source.kind().as_str().to_string(),
            dir: format!("{TARGETS_DIR}/{dir_name}"),
        }
    }

    /// The node's collector captures at once when `nudge` is told (at most once per burst
    /// interval), and its memory sampler tells it when memory crosses the burst share of the
    /// limit or jumps.
    pub fn with_nudge(mut self, nudge: Nudge) -> Node {
        self.nudge = Some(nudge);
        self
    }

    /// The node's collector deletes (and records as deleted) the captures named here by seq.
    pub fn with_deletions(mut self, deletions: tokio::sync::mpsc::UnboundedReceiver<u64>) -> Node {
        self.deletions = Some(deletions);
        self
    }

    /// The node's memory is sampled by `sampler`'s thread, with `far`'s slower pace while it
    /// is far from its limit.
    pub fn with_node_sampler(mut self, sampler: NodeSampler, far: Option<Far>) -> Node {
        self.sampler = Some((sampler, far));
        self
    }

    /// The node's process ends come from `exits` (a subscriber of a watcher shared with other
    /// nodes).
    pub fn with_exit_watcher(mut self, exits: ExitWatcher) -> Node {
        self.exits = Some(exits);
        self
    }

    /// The node with its run writer replaced, e.g. by one that also pushes each record.
    pub fn wrap_writer<E>(
        mut self,
        wrap: impl FnOnce(RunWriter) -> Result<RunWriter, E>,
    ) -> Result<Node, E> {
        self.writer = wrap(self.writer)?;
        Ok(self)
    }
}

/// Everything opened by [`start`], not yet recording.
pub struct Collection {
    pub nodes: Vec<Node>,
    /// Whether the run is a cluster run (two or more targets).
    pub cluster: bool,
    pub out: PathBuf,
    memory_interval: Duration,
    logs: Vec<LogSpec>,
    marks: Vec<Mark>,
    events: Option<EventLog>,
    stop: Stop,
}

/// How one node's collection ended.
pub struct NodeOutcome {
    pub name: String,
    pub target: String,
    pub dir: PathBuf,
    pub result: Result<CollectSummary, CollectError>,
    /// What the memory sampler saw, when there was one.
    pub memory: Option<SamplerTally>,
}

pub struct CollectionOutcome {
    pub nodes: Vec<NodeOutcome>,
    /// What the log tailer wrote, when logs were tailed.
    pub events: Option<TailTally>,
}

/// Opens every target, then writes the run layout: for one target `RUN` is its run; for
/// several `RUN/run.json` lists them and each is a run in `RUN/targets/NAME/`. A run that
/// exists is resumed. Nothing is recorded until [`Collection::run`].
pub fn start(targets: Vec<TargetSpec>, options: StartOptions) -> Result<Collection, StartError> {
    if targets.is_empty() {
        return Err(StartError::Layout("no target given".into()));
    }
    let marks = marks::compile(&options.logs, &options.marks)?;
    let given: Vec<Target> = targets.iter().map(|t| t.target.clone()).collect();
    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    node_names(&given, &names)?;
    let cluster = targets.len() > 1;
    check_layout(&options.out, cluster)?;
    if !options.retarget {
        for t in &targets {
            let dir = if cluster {
                options.out.join(TARGETS_DIR).join(&t.name)
            } else {
                options.out.clone()
            };
            check_same_target(&dir, &t.target)?;
        }
    }
    for t in &targets {
        let dir = if cluster {
            options.out.join(TARGETS_DIR).join(&t.name)
        } else {
            options.out.clone()
        };
        check_same_own(&dir, &options)?;
    }
    // Every target is opened before anything is written: a bad one leaves no run behind.
    let opened = targets
        .iter()
        .map(|t| targets::open_target(&t.target, &t.options))
        .collect::<Result<Vec<_>, _>>()?;
    let clock = SystemClock::new();
    let started_ms = clock.unix_ms();
    let mut nodes = Vec::new();
    for (spec, opened) in targets.into_iter().zip(opened) {
        let dir = if cluster {
            options.out.join(TARGETS_DIR).join(&spec.name)
        } else {
            options.out.clone()
        };
        nodes.push(open_node(spec, opened, dir, &options, started_ms)?);
    }
    if cluster {
        let entries: Vec<ClusterTarget> = nodes.iter().map(Node::entry).collect();
        write_cluster_info(&options, &entries, Some(started_ms))?;
    }
    let events = if marks.is_empty() {
        None
    } else {
        Some(EventLog::open(&options.out)?)
    };
    Ok(Collection {
        nodes,
        cluster,
        out: options.out,
        memory_interval: options.memory_interval,
        logs: options.logs,
        marks,
        events,
        stop: Stop::new(),
    })
}

/// A cluster run is never resumed as one target's run, nor the other way round.
fn check_layout(out: &Path, cluster: bool) -> Result<(), StartError> {
    let was_cluster = cluster::read_cluster(out)?.is_some();
    let was_single = !was_cluster && out.join(crate::store::MANIFEST_FILE).is_file();
    if cluster && was_single {
        return Err(StartError::Layout(format!(
            "{}: a run of one target already; several targets need a new --out",
            out.display()
        )));
    }
    if !cluster && was_cluster {
        return Err(StartError::Layout(format!(
            "{}: a cluster run; resume it with its targets (see its run.json), or give a new --out",
            out.display()
        )));
    }
    Ok(())
}

/// A run resumed names its sites by the own-code prefixes it recorded (`--own`): another start
/// may not name others, or its index and its captures so far would name sites two ways.
pub fn check_same_own(dir: &Path, options: &StartOptions) -> Result<(), StartError> {
    let Some(old) = RunDir::open(dir).ok().and_then(|r| r.info) else {
        return Ok(());
    };
    let given = options.run_options.own.as_deref().unwrap_or_default();
    match old.own_conflict(given) {
        None => Ok(()),
        Some(why) => Err(StartError::Layout(format!("{}: {why}", dir.display()))),
    }
}

/// A run resumed records the target it recorded before: another one (say an etcd run given a
/// NATS server) would file its captures as more boot cycles of the first.
fn check_same_target(dir: &Path, target: &Target) -> Result<(), StartError> {
    let Some(old) = RunDir::open(dir).ok().and_then(|r| r.info) else {
        return Ok(());
    };
    let shown = |t: &str| t.trim_end_matches('/').to_string();
    if shown(&old.target) == shown(&target.to_string()) {
        return Ok(());
    }
    Err(StartError::Layout(format!(
        "{}: this run recorded {}, not {target}; give a new --out, or --retarget to add {target}'s \
         captures to it as further boot cycles",
        dir.display(),
        old.target
    )))
}

/// A target opened, with its run directory in `dir` opened (resumed when it exists) and its
/// `run.json` written: ready to record.
pub fn open_node(
    spec: TargetSpec,
    opened: OpenedTarget,
    dir: PathBuf,
    options: &StartOptions,
    started_ms: i64,
) -> Result<Node, StartError> {
    check_same_own(&dir, options)?;
    let (writer, existing) = RunWriter::open(&dir)?;
    let mut config = CollectConfig {
        limit: spec.limit,
        ..options.config.clone()
    };
    let info = node_info(&spec, &opened, &dir, options, &config, started_ms);
    writer.write_info(&info)?;
    // The index names sites by the prefixes run.json records (a resumed run's, when this start
    // named none).
    config.own = info.options.own.clone().unwrap_or_default();
    Ok(Node {
        name: spec.name,
        target: spec.target.to_string(),
        dir,
        opened,
        writer,
        existing,
        config,
        nudge: None,
        deletions: None,
        sampler: None,
        exits: None,
    })
}

/// A node's `run.json`; a run resumed continues the one it had (`RunInfo::continuing`).
fn node_info(
    spec: &TargetSpec,
    opened: &OpenedTarget,
    dir: &Path,
    options: &StartOptions,
    config: &CollectConfig,
    started_ms: i64,
) -> RunInfo {
    let mut run_options = options.run_options.clone();
    run_options.pid = spec.options.pid;
    run_options.cgroup = spec
        .options
        .cgroup
        .as_ref()
        .map(|p| p.display().to_string());
    let mut info = RunInfo {
        schema: crate::model::SCHEMA,
        tool: concat!("heapwatch ", env!("CARGO_PKG_VERSION")).to_string(),
        target: spec.target.to_string(),
        source: opened.source.kind().as_str().to_string(),
        started_ms,
        resumed_ms: Vec::new(),
        options: run_options,
        limit_bytes: config.limit,
        label: options.label.clone(),
    };
    if let Some(previous) = RunDir::open(dir).ok().and_then(|r| r.info) {
        info = info.continuing(previous);
    }
    if let Some(MemoryProbe::Cgroup(cg)) = &opened.probe {
        if info.limit_bytes.is_none() {
            info.limit_bytes = cg.limit();
        }
    }
    info
}

/// `RUN/run.json` of a cluster run; a resumed one keeps its first start, its nodes and logs.
/// `RUN/run.json` with `entries` added (or updated by name). `started_ms` is this session's
/// start, noted once per session: `None` for a node added to a session already noted.
pub fn write_cluster_info(
    options: &StartOptions,
    entries: &[ClusterTarget],
    started_ms: Option<i64>,
) -> Result<(), StartError> {
    let now_ms = started_ms.unwrap_or_else(|| SystemClock::new().unix_ms());
    let mut info = ClusterInfo {
        schema: crate::model::SCHEMA,
        tool: concat!("heapwatch ", env!("CARGO_PKG_VERSION")).to_string(),
        kind: CLUSTER_KIND.to_string(),
        started_ms: now_ms,
        resumed_ms: Vec::new(),
        label: options.label.clone(),
        targets: Vec::new(),
        logs: Vec::new(),
        marks: Vec::new(),
    };
    if let Some(old) = cluster::read_cluster(&options.out)? {
        info.started_ms = old.started_ms;
        info.resumed_ms = old.resumed_ms;
        if let Some(started_ms) = started_ms {
            info.resumed_ms.push(started_ms);
        }
        info.label = info.label.or(old.label);
        info.targets = old.targets;
        info.logs = old.logs;
        info.marks = old.marks;
    }
    for entry in entries.iter().cloned() {
        match info.targets.iter_mut().find(|t| t.name == entry.name) {
            Some(t) => *t = entry,
            None => info.targets.push(entry),
        }
    }
    for log in &options.logs {
        if !info.logs.contains(log) {
            info.logs.push(log.clone());
        }
    }
    for mark in &options.marks {
        if !info.marks.contains(mark) {
            info.marks.push(mark.clone());
        }
    }
    // Whole or not at all: written aside, then renamed over the old one.
    crate::store::write_info(&options.out, &info)?;
    Ok(())
}

impl Collection {
    /// The flag that stops every node (Ctrl-C sets it).
    pub fn stop_flag(&self) -> Stop {
        self.stop.clone()
    }

    /// Records every node until it stops, each on its own thread with its own observer (one
    /// per node, in order), and tails the logs meanwhile. A node that fails or hangs delays
    /// no other.
    pub fn run(self, observers: Vec<Box<dyn Observer + Send>>) -> CollectionOutcome {
        let Collection {
            nodes,
            memory_interval,
            logs,
            marks,
            events,
            stop,
            ..
        } = self;
        let tailer = events.map(|events| Tailer::start(&logs, marks, events));
        let mut observers = observers.into_iter();
        // One runtime, each node a task of it: a node waiting on a hung target holds no thread,
        // and blocking work (fsync, the proc walk, gunzip) goes to the blocking pool.
        let outcomes = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("heapwatch-collect")
            .enable_all()
            .build()
        {
            Ok(runtime) => {
                let running: Vec<_> = nodes
                    .into_iter()
                    .map(|node| {
                        let observer = observers
                            .next()
                            .unwrap_or_else(|| Box::new(super::NoObserver));
                        let name = (node.name.clone(), node.target.clone(), node.dir.clone());
                        let handle = runtime.spawn(collect_node(
                            node,
                            memory_interval,
                            stop.clone(),
                            observer,
                        ));
                        (name, handle)
                    })
                    .collect();
                let outcomes = running
                    .into_iter()
                    .map(|((name, target, dir), handle)| {
                        runtime.block_on(handle).unwrap_or_else(|e| {
                            if e.is_panic() {
                                std::panic::resume_unwind(e.into_panic())
                            }
                            NodeOutcome {
                                name,
                                target,
                                dir,
                                result: Err(CollectError::Runtime(std::io::Error::other(
                                    e.to_string(),
                                ))),
                                memory: None,
                            }
                        })
                    })
                    .collect();
                // A blocking fetch cut short by the stop may still run on its thread.
                runtime.shutdown_background();
                outcomes
            }
            Err(e) => nodes
                .into_iter()
                .map(|node| NodeOutcome {
                    name: node.name,
                    target: node.target,
                    dir: node.dir,
                    result: Err(CollectError::Runtime(std::io::Error::new(
                        e.kind(),
                        e.to_string(),
                    ))),
                    memory: None,
                })
                .collect(),
        };
        CollectionOutcome {
            nodes: outcomes,
            events: tailer.map(Tailer::finish),
        }
    }
}

/// One node, start to end: its exit watcher, memory sampler and collector. A task of the
/// caller's runtime; it ends when `stop` is set or its collector ends on its own.
pub async fn collect_node(
    node: Node,
    memory_interval: Duration,
    stop: Stop,
    mut observer: Box<dyn Observer + Send>,
) -> NodeOutcome {
    let Node {
        name,
        target,
        dir,
        opened,
        writer,
        existing,
        config,
        nudge,
        deletions,
        sampler: shared_sampler,
        exits: shared_exits,
    } = node;
    // A reply that does not name its process (HTTP, Envoy) is filed under the process the
    // probe sees, so a new pid opens a new boot cycle.
    let pid_probe = opened.pid_probe();
    let OpenedTarget {
        source: boxed,
        probe,
        ..
    } = opened;
    let mut outside = OutsideMemory::default();
    if let Some(nudge) = &nudge {
        outside.nudge = nudge.clone();
        outside.nudge_permille.store(
            (config.burst_at * 1000.0) as u32,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    let outside = Arc::new(outside);
    // How watched processes end (exit code or signal), where the kernel tells (root). One
    // watcher per node: each takes only the ends of the processes it watches.
    let exits = shared_exits
        .or_else(|| ExitWatcher::start().ok())
        .map(Arc::new);
    let sampler = match probe {
        Some(p) => match writer.memory_log() {
            Ok(log) => Some(match shared_sampler {
                Some((node, far)) => {
                    node.add(p, memory_interval, far, log, outside.clone(), exits.clone())
                }
                None => Sampler::start(p, memory_interval, log, outside.clone(), exits.clone()),
            }),
            Err(e) => {
                return NodeOutcome {
                    name,
                    target,
                    dir,
                    result: Err(e.into()),
                    memory: None,
                };
            }
        },
        None => None,
    };
    let clock = SystemClock::new();
    let mut collector = Collector::new(config, boxed, Arc::new(clock), writer, &existing, stop)
        .with_outside_memory(outside);
    if let Some(probe) = pid_probe {
        collector = collector.with_pid_probe(probe);
    }
    if let Some(exits) = &exits {
        collector = collector.with_exits(exits.clone());
    }
    if let Some(nudge) = nudge {
        collector = collector.with_nudge(nudge);
    }
    if let Some(deletions) = deletions {
        collector = collector.with_deletions(deletions);
    }
    let result = collector.run_async(&mut *observer).await;
    // Both join threads of their own: off the runtime's workers.
    let memory = tokio::task::spawn_blocking(move || {
        if let Some(exits) = &exits {
            exits.finish();
        }
        sampler.map(Sampler::finish)
    })
    .await
    .ok()
    .flatten();
    NodeOutcome {
        name,
        target,
        dir,
        result,
        memory,
    }
}
