//! `heapwatch watch`: one long-running collection of every Go container on a node. Discovery
//! (`crate::node`) is rescanned every few hundred milliseconds; each container with a Go
//! process becomes a node of a cluster run (`OUT/targets/NAME/`), recorded by the collector
//! every cluster node has ([`cluster::collect_node`]): a `proc:cgroup:` source that follows
//! whichever Go process runs in the container (a new pid is a new boot cycle), a memory
//! sampler on the container's cgroup (its OOM-kill counter, anonymous memory against the
//! limit), a slow baseline, and burst mode near the limit. Nodes come and go at run time:
//! each is a task of one runtime with a stop of its own.
//!
//! # The loop
//!
//! `collect::watch` turns node discovery (`node::Discovery`) into a cluster run whose nodes are
//! added at run time. Its loop, on the calling thread: rescan; group the Go processes by
//! container cgroup and name each (`GoProcess::name`: namespace/pod/container, else cgroup path
//! and executable); for a name not being recorded, open a `proc:cgroup:DIR` target
//! (`targets::open_target`, whose `FollowSource` attaches with `ProcSource::attach_within`) and a
//! node for it (`cluster::open_node` into `targets/NAMESPACE_POD_CONTAINER/`, `run.json` updated
//! by `cluster::write_cluster_info`), and spawn `cluster::collect_node` on one shared tokio
//! runtime (two workers) with a `Stop` of its own. The limit given to the node is the lowest of
//! the container's and its ancestors' (`Container::memory`). A name seen in a new cgroup (a
//! kubelet restart) stops the old node and starts a new session in the same directory; a name
//! not seen for 60 s is stopped. Ctrl-C / SIGTERM sets every node's stop and joins them.
//!
//! **Sessions**: a name seen in a new cgroup (a kubelet restart), or back after it was gone, has
//! its old collector joined before the directory is opened again, so one writer owns a manifest.
//!
//! # Two seams in the collector
//!
//! The collector has two seams for `watch`, both unused by `collect` and `run`: pacing by a
//! `Nudge` (`clock.rs`'s doc) and deletions from outside for one disk budget (`budget.rs`'s).
//!
//! # What one process shares across the node's containers
//!
//! - **One memory sampler thread** (`sampler::NodeSampler`; `sampler.rs`'s doc).
//! - **One process-event socket** (`collect::exits`; `exits.rs`'s doc).
//! - **Open files.** The files read at every sample stay open (`source::procmem`), so the soft
//!   open-file limit is raised to the hard one.
//! - **`--push`**: one live push per container directory (`src/cli/watch.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::budget::NodeBudget;
use super::cluster::{self, Node, NodeOutcome, StartError, StartOptions, TargetSpec};
use super::exits::ExitWatcher;
use super::sampler::{Far, NodeSampler};
use super::targets::{self, TargetOptions};
use super::{Clock as _, Nudge, Observer, Stop, SystemClock};
use crate::model::run_options::PushSettings;
use crate::node::{self, Discovery, GoProcess, NodeError};
use crate::render::ends::{ProcessEnd, process_end_words};
use crate::store::CaptureRecord;
use crate::store::cluster::{TARGETS_DIR, read_cluster};

#[derive(Debug, Error)]
pub enum WatchError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("cannot start the watcher's runtime: {0}; raise the open-file limit")]
    Runtime(std::io::Error),
    #[error("{path}: {why}")]
    Out { path: PathBuf, why: String },
}

/// What `watch` needs, already validated.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The run directory and the collector's settings (`config.interval` is the baseline).
    pub start: StartOptions,
    pub discovery: node::Options,
    /// Time between rescans of the node.
    pub rescan: Duration,
    /// A container not seen for this long has its collector stopped (it comes back as a
    /// further session of the same node if it reappears).
    pub gone_after: Duration,
    /// One disk budget for every container's captures, and the window kept whole before each
    /// kill (and at the newest end of each node): see [`super::budget`].
    pub disk_budget: Option<(u64, Duration)>,
    /// The slower memory sampling of a container far from its limit (under half its burst
    /// share); `None` samples every container every `start.memory_interval`.
    pub far: Option<Far>,
}

/// How one container's recording went: one entry per session (a container seen again after
/// it was gone, or in a new cgroup, is recorded again into the same directory).
pub struct ContainerOutcome {
    pub name: String,
    pub dir: PathBuf,
    pub sessions: Vec<NodeOutcome>,
}

pub struct WatchOutcome {
    pub containers: Vec<ContainerOutcome>,
}

/// A container being recorded.
struct Running {
    cgroup: PathBuf,
    pids: BTreeSet<u32>,
    stop: Stop,
    nudge: Nudge,
    last_seen: Instant,
    handle: tokio::task::JoinHandle<NodeOutcome>,
}

/// One directory name under `targets/` for a container's name: `namespace_pod_container`
/// (Kubernetes names have no `_`), else the cgroup path and executable made safe.
pub fn dir_name(name: &str) -> String {
    targets::safe_name(name.replace('/', "_").trim_matches('_'))
}

/// The push labels a container's run keeps (run.json `options.push`), as Grafana users filter
/// Kubernetes profiles: `namespace`, `pod`, `container`, and `service_name` as
/// `namespace/container` (the name Grafana Alloy gives a Kubernetes target that sets none). A
/// push of the run, live (`watch --push`) or later (`heapwatch push`), sends them; `--service`
/// and `--push-label` on its command line go over them. `None` for a container the kubelet's
/// files do not name.
pub fn pod_push_settings(name: &str, container: &node::Container) -> Option<PushSettings> {
    container.kube.as_ref()?;
    // A named container is `namespace/pod/container`; Kubernetes names hold no `/`.
    let mut parts = name.splitn(3, '/');
    let (namespace, pod, container) = (parts.next()?, parts.next()?, parts.next()?);
    let labels = [
        ("namespace", namespace),
        ("pod", pod),
        ("container", container),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Some(PushSettings {
        service: Some(format!("{namespace}/{container}")),
        labels,
    })
}

/// Tells the watcher's caller about process ends as they are written.
struct EndTeller {
    name: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Observer for EndTeller {
    fn attempt(&mut self, _: &CaptureRecord, _: &super::LiveStatus) {}

    fn ended(&mut self, record: &CaptureRecord) {
        let pid = record
            .pid
            .map_or("its process".into(), |p| format!("pid {p}"));
        // The same words `run` and `collect` print for the same evidence: an OOM kill where
        // the exit record's count of the cgroup's kills rose.
        let how = process_end_words(&ProcessEnd::of_record(record));
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(format!(
                "{}: cycle {}: {pid} {how}",
                self.name, record.cycle
            ));
        }
    }
}

/// The containers with Go processes in a scan: name, cgroup directory, the pids in it. A
/// container is named after its oldest Go process; two cgroups of one name (a kubelet restart
/// whose old container is not yet removed) give the one with the newest process.
fn containers(scan: &node::Scan) -> BTreeMap<String, (Arc<node::Container>, BTreeSet<u32>)> {
    let mut by_cgroup: BTreeMap<PathBuf, Vec<&GoProcess>> = BTreeMap::new();
    for p in &scan.processes {
        by_cgroup
            .entry(p.container.cgroup.clone())
            .or_default()
            .push(p);
    }
    let mut out: BTreeMap<String, (Arc<node::Container>, BTreeSet<u32>, u64)> = BTreeMap::new();
    for (_, procs) in by_cgroup {
        let Some(oldest) = procs.iter().min_by_key(|p| (p.start_ticks, p.pid)) else {
            continue;
        };
        let newest = procs.iter().map(|p| p.start_ticks).max().unwrap_or(0);
        let pids = procs.iter().map(|p| p.pid).collect();
        let name = oldest.name();
        match out.get(&name) {
            Some((_, _, seen)) if *seen >= newest => {}
            _ => {
                out.insert(name, (oldest.container.clone(), pids, newest));
            }
        }
    }
    out.into_iter()
        .map(|(name, (container, pids, _))| (name, (container, pids)))
        .collect()
}

/// A cluster run's directory, or a new one; never a single target's run.
fn prepare_out(out: &Path) -> Result<(), WatchError> {
    if out.join(crate::store::MANIFEST_FILE).is_file() {
        return Err(WatchError::Out {
            path: out.to_path_buf(),
            why: "a run of one target already; watch needs a new --out or a watch run".into(),
        });
    }
    read_cluster(out).map_err(|e| WatchError::Start(e.into()))?;
    std::fs::create_dir_all(out.join(TARGETS_DIR)).map_err(|e| WatchError::Out {
        path: out.to_path_buf(),
        why: e.to_string(),
    })
}

/// Raises the soft limit on open files to the hard one: each container keeps a few small
/// files open between memory samples, its profiles and logs too, and a node has hundreds of
/// containers, where a container runtime's default soft limit may be 1024.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct given, which lives here.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Watches the node until `stop` is set; `say` is told what happens (a container found, a
/// process ended, a note from discovery), one line at a time. `attach` is given each
/// container's node once its run.json (with its pod labels) and the cluster's are written, and
/// may wrap its writer (the live push); an error leaves the container unrecorded until a later
/// rescan, said once.
pub fn watch(
    options: WatchOptions,
    stop: Stop,
    mut say: impl FnMut(&str),
    mut attach: impl FnMut(Node) -> Result<Node, String>,
) -> Result<WatchOutcome, WatchError> {
    raise_open_file_limit();
    let mut discovery = Discovery::new(&options.discovery)?;
    let hierarchy = discovery.hierarchy().clone();
    let start = &options.start;
    prepare_out(&start.out)?;
    // A container recorded before with other own-code prefixes is refused now, not when it
    // is seen again.
    if let Ok(dirs) = std::fs::read_dir(start.out.join(TARGETS_DIR)) {
        for dir in dirs.flatten() {
            cluster::check_same_own(&dir.path(), start)?;
        }
    }
    let started_ms = SystemClock::new().unix_ms();
    cluster::write_cluster_info(start, &[], Some(started_ms))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("heapwatch-watch")
        .enable_all()
        .build()
        .map_err(WatchError::Runtime)?;
    // One memory sampler and one exit watcher for the whole node: a thread each, however many
    // containers there are.
    let sampler = NodeSampler::start();
    // Stopped however watch returns.
    struct Stopping(NodeSampler);
    impl Drop for Stopping {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let _stopping = Stopping(sampler.clone());
    let exits = match ExitWatcher::start() {
        Ok(w) => Some(w),
        Err(e) => {
            say(&format!("note: exit statuses will not be known: {e}"));
            None
        }
    };
    let ends = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut ending: Vec<(String, tokio::task::JoinHandle<NodeOutcome>)> = Vec::new();
    let mut outcomes: BTreeMap<String, Vec<NodeOutcome>> = BTreeMap::new();
    // What could not be opened, by name and cgroup: said once, tried again at each rescan.
    let mut refused: BTreeSet<(String, PathBuf)> = BTreeSet::new();
    let mut noted: BTreeSet<String> = BTreeSet::new();
    let mut budget = options
        .disk_budget
        .map(|(bytes, window)| NodeBudget::new(bytes, window));
    while !stop.is_set() {
        let scan = discovery.rescan();
        for note in &scan.notes {
            if noted.len() < 1024 && noted.insert(note.message.clone()) {
                say(&format!("note: {note}"));
            }
        }
        let now = Instant::now();
        for (name, (container, pids)) in containers(&scan) {
            let cgroup = container.cgroup.clone();
            if let Some(r) = running.get_mut(&name) {
                if r.cgroup == cgroup && !r.handle.is_finished() {
                    // A new pid in the container: its next boot cycle, captured now.
                    if pids.iter().any(|p| !r.pids.contains(p)) {
                        r.nudge.nudge();
                    }
                    r.pids = pids;
                    r.last_seen = now;
                    continue;
                }
                // A new cgroup for the name (a kubelet restart), or a collector that ended:
                // the old one is done writing before the directory is opened again (one
                // writer per manifest, and its records all offered to its push).
                if let Some(old) = running.remove(&name) {
                    old.stop.set();
                    if let Some(outcome) = join(&runtime, old.handle) {
                        outcomes.entry(name.clone()).or_default().push(outcome);
                    }
                }
            }
            // The lowest limit of the container and its ancestors (a pod's, the node's).
            let limit = container.memory(&hierarchy).ok().and_then(|m| m.limit);
            let target = format!("proc:cgroup:{}", cgroup.display());
            let spec = TargetSpec {
                name: name.clone(),
                target: target.as_str().into(),
                options: TargetOptions {
                    interval: start.config.interval,
                    timeout: start.config.timeout,
                    ..TargetOptions::default()
                },
                limit,
            };
            let opened = match targets::open_target(&spec.target, &spec.options) {
                Ok(opened) => opened,
                Err(e) => {
                    if refused.insert((name.clone(), cgroup.clone())) {
                        say(&format!("{name}: not recorded: {e}"));
                    }
                    continue;
                }
            };
            // A session of the name still ending (gone, then back): done before this one.
            while let Some(i) = ending.iter().position(|(n, _)| *n == name) {
                let (_, handle) = ending.swap_remove(i);
                if let Some(outcome) = join(&runtime, handle) {
                    outcomes.entry(name.clone()).or_default().push(outcome);
                }
            }
            let dir = start.out.join(TARGETS_DIR).join(dir_name(&name));
            let nudge = Nudge::new();
            let mut own = start.clone();
            own.run_options.push = pod_push_settings(&name, &container);
            let mut node = cluster::open_node(spec, opened, dir, &own, started_ms)?
                .with_nudge(nudge.clone())
                .with_node_sampler(sampler.clone(), options.far);
            if let Some(exits) = &exits {
                node = node.with_exit_watcher(exits.subscriber());
            }
            cluster::write_cluster_info(start, &[node.entry()], None)?;
            let mut node = match attach(node) {
                Ok(node) => node,
                Err(e) => {
                    if refused.insert((name.clone(), cgroup.clone())) {
                        say(&format!("{name}: not recorded: {e}"));
                    }
                    continue;
                }
            };
            if let Some(budget) = &mut budget {
                let (send, deletions) = tokio::sync::mpsc::unbounded_channel();
                budget.add(&name, &node.dir, send);
                node = node.with_deletions(deletions);
            }
            say(&format!(
                "{name}: recording pid {} ({})",
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                node.dir.display()
            ));
            let node_stop = Stop::new();
            let observer = Box::new(EndTeller {
                name: name.clone(),
                lines: ends.clone(),
            });
            let handle = runtime.spawn(cluster::collect_node(
                node,
                start.memory_interval,
                node_stop.clone(),
                observer,
            ));
            running.insert(
                name,
                Running {
                    cgroup,
                    pids,
                    stop: node_stop,
                    nudge,
                    last_seen: now,
                    handle,
                },
            );
        }
        // Containers gone for a while: their collectors end (their last records durable).
        let gone: Vec<String> = running
            .iter()
            .filter(|(_, r)| now.duration_since(r.last_seen) >= options.gone_after)
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                say(&format!("{name}: gone, its recording ends"));
                r.stop.set();
                ending.push((name, r.handle));
            }
        }
        if let Some(budget) = &mut budget {
            budget.enforce();
        }
        for (name, handle) in finished(&runtime, &mut ending) {
            outcomes.entry(name).or_default().push(handle);
        }
        for line in ends
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
        {
            say(&line);
        }
        // Sleeps until the next rescan, in steps short enough for Ctrl-C to feel immediate.
        let next = now + options.rescan;
        while !stop.is_set() {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    for r in running.values() {
        r.stop.set();
    }
    ending.extend(running.into_iter().map(|(n, r)| (n, r.handle)));
    for (name, handle) in ending {
        if let Some(outcome) = join(&runtime, handle) {
            outcomes.entry(name).or_default().push(outcome);
        }
    }
    for line in ends
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default()
    {
        say(&line);
    }
    // A blocking fetch cut short by the stop may still run on its thread.
    runtime.shutdown_background();
    Ok(WatchOutcome {
        containers: outcomes
            .into_iter()
            .map(|(name, sessions)| ContainerOutcome {
                dir: start.out.join(TARGETS_DIR).join(dir_name(&name)),
                name,
                sessions,
            })
            .collect(),
    })
}

/// The collectors among `ending` that are done, taken out of it.
fn finished(
    runtime: &tokio::runtime::Runtime,
    ending: &mut Vec<(String, tokio::task::JoinHandle<NodeOutcome>)>,
) -> Vec<(String, NodeOutcome)> {
    let (done, still): (Vec<_>, Vec<_>) = std::mem::take(ending)
        .into_iter()
        .partition(|(_, h)| h.is_finished());
    *ending = still;
    done.into_iter()
        .filter_map(|(name, h)| join(runtime, h).map(|o| (name, o)))
        .collect()
}

fn join(
    runtime: &tokio::runtime::Runtime,
    handle: tokio::task::JoinHandle<NodeOutcome>,
) -> Option<NodeOutcome> {
    match runtime.block_on(handle) {
        Ok(outcome) => Some(outcome),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_name_is_one_directory_name() {
        assert_eq!(dir_name("jobs/grower-0/grow"), "jobs_grower-0_grow");
        assert_eq!(
            dir_name("/system.slice/api.service:api"),
            "system.slice_api.service-api"
        );
        assert_eq!(dir_name("../.."), ".._..");
        assert_eq!(dir_name(".."), "node");
    }

    /// Issue 35, item 5c: watch said "killed by signal 9" where its own exit record says the
    /// cgroup's OOM-kill count rose; `run` said "OOM-killed". One wording for one evidence.
    #[test]
    fn a_process_end_reads_as_run_and_collect_say_it() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut teller = EndTeller {
            name: "jobs/grower-0/grow".into(),
            lines: lines.clone(),
        };
        let mut exit = CaptureRecord::new(40, crate::store::RecordKind::Exit, 2, 1_000);
        exit.pid = Some(4242);
        exit.signal = Some(9);
        exit.totals.insert("oom_kill".into(), 1);
        teller.ended(&exit);
        exit.totals.insert("oom_kill".into(), 0);
        teller.ended(&exit);
        let said = lines.lock().unwrap().clone();
        assert_eq!(
            said,
            [
                format!(
                    "jobs/grower-0/grow: cycle 2: pid 4242 {}",
                    "OOM-killed (signal 9, the cgroup's oom_kill rose)"
                ),
                "jobs/grower-0/grow: cycle 2: pid 4242 killed by signal 9 (SIGKILL)".to_string(),
            ]
        );
    }
}
