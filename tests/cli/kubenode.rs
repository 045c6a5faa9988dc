//! A Kubernetes node without a cluster: what a kubelet lays out, made for real under temporary
//! roots. A v1 `kubepods` memory cgroup tree (under `/sys/fs/cgroup/memory/heapwatch-node-PID-N/`,
//! so parallel tests never meet) with QoS levels, pods by UID and containers by 64-hex id, in
//! the cgroupfs or the systemd driver's layout; the limits a kubelet sets; the pods and
//! containers log directories; real processes moved into those cgroups, killed by the real
//! kernel at their limits, and restarted by a supervisor as a kubelet would.
//!
//! Everything made is removed on drop, when a test fails too; cgroups left by a test process
//! that was killed outright are swept by the next node made.

#![allow(dead_code)] // A harness: `watch`'s tests use what `ps`'s do not yet.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util::{self, Reaped, signal};

mod supervisor;

pub use supervisor::{Life, Supervised, Supervisor};
use supervisor::{SupervisorState, supervise};

const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
const PREFIX: &str = "heapwatch-node-";

/// The cgroup driver's naming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `kubepods/burstable/pod<UID>/<CID>`
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID_>.slice/cri-containerd-<CID>.scope`
    Systemd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub qos: Qos,
    pub cgroup: PathBuf,
    /// `pods/NAMESPACE_NAME_UID`
    pub log_dir: PathBuf,
}

/// One container as the runtime made it: a restart "as a kubelet would" makes a new one.
#[derive(Debug, Clone)]
pub struct Container {
    pub pod: Pod,
    pub name: String,
    pub id: String,
    pub cgroup: PathBuf,
    pub limit: Option<u64>,
    /// How many times it was restarted: its log file is `RESTARTS.log`.
    pub restarts: u32,
}

impl Container {
    /// `namespace/pod/container`, as `heapwatch ps` names it.
    pub fn full_name(&self) -> String {
        format!("{}/{}/{}", self.pod.namespace, self.pod.name, self.name)
    }

    pub fn log_file(&self) -> PathBuf {
        self.pod
            .log_dir
            .join(&self.name)
            .join(format!("{}.log", self.restarts))
    }

    pub fn pids(&self) -> Vec<u32> {
        read_pids(&self.cgroup)
    }

    /// The kernel's OOM-kill counter of the container's cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        fs::read_to_string(self.cgroup.join("memory.oom_control"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }
}

fn read_pids(cgroup: &Path) -> Vec<u32> {
    fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// What the node made, shared with its supervisors' threads.
struct Inner {
    layout: Layout,
    /// `/sys/fs/cgroup/memory/heapwatch-node-PID-N`
    top: PathBuf,
    /// `top/kubepods` or `top/kubepods.slice`: what `--cgroup-root` names.
    kubepods: PathBuf,
    pods_dir: PathBuf,
    containers_dir: PathBuf,
    /// Every cgroup made, in the order made (removed in reverse).
    made: Mutex<Vec<PathBuf>>,
    ids: AtomicU64,
}

pub struct KubeNode {
    inner: Arc<Inner>,
    supervisors: Vec<(Arc<AtomicBool>, JoinHandle<()>)>,
    /// Processes started outside a supervisor, reaped on drop.
    started: Mutex<Vec<Reaped>>,
    _logs: tempfile::TempDir,
}

impl KubeNode {
    /// A node, or `None` (after saying why) where no v1 memory cgroup can be made; under
    /// `HEAPWATCH_REQUIRE_ROOT` that is a failure.
    pub fn new(layout: Layout) -> Option<KubeNode> {
        sweep_stale();
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let top = Path::new(MEMORY_ROOT).join(format!("{PREFIX}{}-{n}", std::process::id()));
        if let Err(e) = fs::create_dir(&top) {
            crate::prerequisite::skip(
                crate::prerequisite::Need::Root,
                &format!(
                    "no v1 memory cgroup could be made at {}: {e}",
                    top.display()
                ),
            );
            return None;
        }
        let logs = util::tempdir();
        let kubepods = top.join(match layout {
            Layout::Cgroupfs => "kubepods",
            Layout::Systemd => "kubepods.slice",
        });
        let inner = Arc::new(Inner {
            layout,
            kubepods: kubepods.clone(),
            pods_dir: logs.path().join("pods"),
            containers_dir: logs.path().join("containers"),
            made: Mutex::new(vec![top.clone()]),
            top,
            ids: AtomicU64::new(seed()),
        });
        let node = KubeNode {
            inner,
            supervisors: Vec::new(),
            started: Mutex::new(Vec::new()),
            _logs: logs,
        };
        for dir in [&node.inner.pods_dir, &node.inner.containers_dir] {
            fs::create_dir_all(dir).expect("log directories");
        }
        // The node's allocatable memory, as the kubelet sets it on kubepods.
        node.inner.mkcgroup(&kubepods, Some(4 << 30));
        for qos in [Qos::Burstable, Qos::BestEffort] {
            node.inner.mkcgroup(&node.inner.qos_dir(qos), None);
        }
        Some(node)
    }

    /// What `--cgroup-root` names for this node.
    pub fn cgroup_root(&self) -> &Path {
        &self.inner.kubepods
    }

    pub fn pods_dir(&self) -> &Path {
        &self.inner.pods_dir
    }

    pub fn containers_dir(&self) -> &Path {
        &self.inner.containers_dir
    }

    /// A pod, with a pod-level limit when every container of it has one (as the kubelet does).
    pub fn pod(&self, namespace: &str, name: &str, qos: Qos, limit: Option<u64>) -> Pod {
        self.inner.pod(namespace, name, qos, limit)
    }

    /// A container of a pod, not yet running.
    pub fn container(&self, pod: &Pod, name: &str, limit: Option<u64>) -> Container {
        self.inner.container(pod, name, limit, 0)
    }

    /// Ends a container as the runtime does: its processes killed, its cgroup and its
    /// `/var/log/containers` symlink removed (the pod's log directory stays).
    pub fn remove(&self, c: &Container) {
        let _ = fs::remove_file(self.inner.containers_dir.join(format!(
            "{}_{}_{}-{}.log",
            c.pod.name, c.pod.namespace, c.name, c.id
        )));
        remove_cgroup(&c.cgroup);
    }

    /// Starts `program` inside the container (it joins the cgroup before exec), its output to
    /// the container's log file. The node reaps it on drop.
    pub fn start(&self, container: &Container, program: &Path, args: &[&str]) -> u32 {
        let child = spawn_in(container, program, args, &[]);
        let pid = child.id();
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Reaped(child));
        pid
    }

    /// As [`start`](Self::start), with `wrapper` (e.g. `unshare --pid --fork`) in front.
    pub fn start_wrapped(
        &self,
        container: &Container,
        wrapper: &[&str],
        program: &Path,
        args: &[&str],
    ) -> u32 {
        let child = spawn_in(container, program, args, wrapper);
        let pid = child.id();
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Reaped(child));
        pid
    }

    /// Runs the container under a supervisor that restarts it after each death, up to
    /// `restarts` times, after `delay` first: the kubelet's job.
    pub fn supervise(&mut self, container: Container, run: Supervised) -> Supervisor {
        let state = Arc::new(Mutex::new(SupervisorState {
            container: container.clone(),
            lives: Vec::new(),
            done: false,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (inner, state, stop) = (self.inner.clone(), state.clone(), stop.clone());
            std::thread::spawn(move || supervise(&inner, &state, &stop, run))
        };
        self.supervisors.push((stop, thread));
        Supervisor { state }
    }

    /// Polls a container's log file for a line starting with `prefix`.
    pub fn wait_for_line(&self, container: &Container, prefix: &str, timeout: Duration) -> String {
        let started = Instant::now();
        let file = container.log_file();
        loop {
            let text = fs::read_to_string(&file).unwrap_or_default();
            if let Some(rest) = text.lines().find_map(|l| l.strip_prefix(prefix)) {
                return rest.to_string();
            }
            assert!(
                started.elapsed() < timeout,
                "no {prefix:?} line in {} within {timeout:?}; it holds {text:?}",
                file.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Inner {
    fn qos_dir(&self, qos: Qos) -> PathBuf {
        match (self.layout, qos) {
            (_, Qos::Guaranteed) => self.kubepods.clone(),
            (Layout::Cgroupfs, q) => self.kubepods.join(q.as_str()),
            (Layout::Systemd, q) => self.kubepods.join(format!("kubepods-{}.slice", q.as_str())),
        }
    }

    /// A cgroup with a limit (swap may not extend it); remembered for removal.
    fn mkcgroup(&self, dir: &Path, limit: Option<u64>) {
        fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dir.to_path_buf());
        if let Some(limit) = limit {
            let file = dir.join("memory.limit_in_bytes");
            fs::write(&file, limit.to_string())
                .unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
            let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
    }

    /// 64 bits of fresh hex, unique within this node and unlikely to repeat across runs.
    fn hex64(&self) -> String {
        // splitmix64 over a counter seeded from the pid and the clock.
        let mut z = self.ids.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        format!("{:016x}", z ^ (z >> 31))
    }

    fn pod(&self, namespace: &str, name: &str, qos: Qos, limit: Option<u64>) -> Pod {
        let h = format!("{}{}", self.hex64(), self.hex64());
        let uid = format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        );
        let cgroup = match (self.layout, qos) {
            (Layout::Cgroupfs, _) => self.qos_dir(qos).join(format!("pod{uid}")),
            (Layout::Systemd, Qos::Guaranteed) => self
                .kubepods
                .join(format!("kubepods-pod{}.slice", uid.replace('-', "_"))),
            (Layout::Systemd, q) => self.qos_dir(q).join(format!(
                "kubepods-{}-pod{}.slice",
                q.as_str(),
                uid.replace('-', "_")
            )),
        };
        self.mkcgroup(&cgroup, limit);
        let log_dir = self.pods_dir.join(format!("{namespace}_{name}_{uid}"));
        fs::create_dir_all(&log_dir).expect("pod log directory");
        Pod {
            namespace: namespace.into(),
            name: name.into(),
            uid,
            qos,
            cgroup,
            log_dir,
        }
    }

    fn container(&self, pod: &Pod, name: &str, limit: Option<u64>, restarts: u32) -> Container {
        let id = (0..4).map(|_| self.hex64()).collect::<String>();
        let cgroup = match self.layout {
            Layout::Cgroupfs => pod.cgroup.join(&id),
            Layout::Systemd => pod.cgroup.join(format!("cri-containerd-{id}.scope")),
        };
        self.mkcgroup(&cgroup, limit);
        let container = Container {
            pod: pod.clone(),
            name: name.into(),
            id,
            cgroup,
            limit,
            restarts,
        };
        self.open_log(&container);
        container
    }

    /// The container's log file and its `/var/log/containers` symlink, which names it.
    fn open_log(&self, c: &Container) {
        let file = c.log_file();
        fs::create_dir_all(file.parent().expect("log dir")).expect("container log directory");
        fs::write(&file, "").expect("container log file");
        let link = self.containers_dir.join(format!(
            "{}_{}_{}-{}.log",
            c.pod.name, c.pod.namespace, c.name, c.id
        ));
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).expect("containers symlink");
    }

    /// The kubelet's restart: the old container's cgroup and symlink go, a new container (new
    /// id, new cgroup in the same pod, the next log file) takes its place.
    fn replace(&self, old: &Container) -> Container {
        let _ = fs::remove_file(self.containers_dir.join(format!(
            "{}_{}_{}-{}.log",
            old.pod.name, old.pod.namespace, old.name, old.id
        )));
        remove_cgroup(&old.cgroup);
        self.container(&old.pod, &old.name, old.limit, old.restarts + 1)
    }
}

/// Seeds ids from the pid and the clock, so two runs do not make the same ones.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

fn spawn_in(
    container: &Container,
    program: &Path,
    args: &[&str],
    wrapper: &[&str],
) -> std::process::Child {
    let log = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(container.log_file())
        .expect("open the container's log");
    let err = log.try_clone().expect("log handle");
    Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(&container.cgroup)
        .args(wrapper)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()))
}

/// Kills whatever runs in a cgroup, then removes it (retrying while the kernel finishes).
fn remove_cgroup(dir: &Path) {
    for _ in 0..100 {
        let pids = read_pids(dir);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            signal(pid, "KILL");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for attempt in 0..100 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if attempt == 99 => eprintln!("could not remove {}: {e}", dir.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Removes, deepest first, a tree of cgroups.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    remove_cgroup(dir);
}

/// Nodes of test processes that no longer run (killed before their drop could clean up).
fn sweep_stale() {
    let Ok(entries) = fs::read_dir(MEMORY_ROOT) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing {}, left by a test process that was killed", name);
            remove_tree(&e.path());
        }
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        for (stop, _) in &self.supervisors {
            stop.store(true, Ordering::Relaxed);
        }
        for (_, thread) in self.supervisors.drain(..) {
            let _ = thread.join();
        }
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let made = std::mem::take(&mut *self.inner.made.lock().unwrap_or_else(|e| e.into_inner()));
        for dir in made.iter().rev() {
            remove_cgroup(dir);
        }
        // Anything made below those by someone else (a test's own cgroup).
        remove_tree(&self.inner.top);
    }
}
