//! Recording a shape: one of testdata/go/cmd's programs under the real collector (`heapwatch
//! run` in a real memory cgroup, or `collect http://…`), once per test process. The run stays
//! under the Cargo target's tmp dir, named in every failure, so it can be read again by hand;
//! the tests that judge one shape share its recording.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prerequisite::{self, Need};
use crate::util;

/// A kill can follow a freeze of 40 s and more at the limit: waits are this long, never
/// "quick enough".
pub const DEADLINE: Duration = Duration::from_secs(180);

type Cell = Arc<OnceLock<Vec<PathBuf>>>;
static RECORDINGS: Mutex<BTreeMap<&'static str, Cell>> = Mutex::new(BTreeMap::new());

/// The runs of `shape`, recorded by `record` into a directory of their own the first time a
/// test of this process asks for them.
pub fn shared(shape: &'static str, record: impl FnOnce(&Path) -> Vec<PathBuf>) -> Vec<PathBuf> {
    let cell = RECORDINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(shape)
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zoo-{shape}-"))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a directory for the recording")
            .keep();
        let started = Instant::now();
        let runs = record(&dir);
        eprintln!(
            "zoo: recorded {shape} in {:.1} s into {}",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        runs
    })
    .clone()
}

/// Whether this machine can record the zoo: the Go toolchain (the programs are built once per
/// test process), and root for a memory cgroup where `root`. Without them the test says what
/// it needs and is skipped (a failure under CI).
pub fn ready(root: bool) -> bool {
    if util::go_fixtures().is_none() {
        return false;
    }
    if root {
        if let Err(e) = util::MemoryCgroup::create("zoo-probe", 64 << 20) {
            prerequisite::skip(
                Need::Root,
                &format!("heapwatch run needs a memory cgroup to be killed in ({e})"),
            );
            return false;
        }
    }
    true
}

/// One program started by `heapwatch run`.
pub struct Launch<'a> {
    pub name: &'a str,
    pub program: &'a str,
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
    pub limit: &'a str,
    pub restarts: u32,
}

impl Launch<'_> {
    /// `heapwatch run` of the program, with `flags` of run's beside the usual ones.
    fn spawn(&self, dir: &Path, flags: &[&str]) -> (Child, PathBuf) {
        let program = util::go_fixture(self.program).expect("the Go fixtures were built");
        let run = dir.join(self.name);
        let err = fs::File::create(dir.join(format!("{}.err", self.name))).unwrap();
        let mut cmd = util::heapwatch();
        cmd.args(["run", "-q", "--label", self.name, "--interval", "200ms"])
            .args(["--limit", self.limit, "--restarts"])
            .arg(self.restarts.to_string())
            .arg("--out")
            .arg(&run)
            .args(flags)
            .arg("--")
            .arg(&program)
            .args(self.args)
            .envs(self.env.iter().copied())
            .stdout(Stdio::null())
            .stderr(err);
        (cmd.spawn().expect("heapwatch run starts"), run)
    }
}

/// What `heapwatch run` and the program said on stderr.
pub fn said(run: &Path) -> String {
    fs::read_to_string(run.with_extension("err")).unwrap_or_default()
}

/// Runs `launch` until every life has ended (the restarts spent); a kill is waited for.
pub fn run_to_end(dir: &Path, launch: &Launch) -> PathBuf {
    run_to_end_with(dir, launch, &[])
}

/// [`run_to_end`] with `flags` given to `heapwatch run`.
pub fn run_to_end_with(dir: &Path, launch: &Launch, flags: &[&str]) -> PathBuf {
    let (mut child, run) = launch.spawn(dir, flags);
    let (status, _) = util::wait_for_exit(&mut child, DEADLINE * (launch.restarts + 1));
    assert!(
        status.success(),
        "{}: {status}: {}",
        launch.name,
        said(&run)
    );
    confined(&run);
    run
}

/// Runs `launch` and stops it with Ctrl-C once `enough` holds for the manifest so far.
pub fn run_until(dir: &Path, launch: &Launch, mut enough: impl FnMut(&[Value]) -> bool) -> PathBuf {
    let (mut child, run) = launch.spawn(dir, &[]);
    let started = Instant::now();
    while !enough(&util::manifest_so_far(&run)) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{}: heapwatch run ended first ({status}): {}",
                launch.name,
                said(&run)
            );
        }
        if started.elapsed() > DEADLINE {
            util::signal(child.id(), "INT");
            let _ = util::wait_for_exit(&mut child, Duration::from_secs(30));
            panic!(
                "{}: not recorded as wanted within {DEADLINE:?}",
                launch.name
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    util::signal(child.id(), "INT");
    let (status, _) = util::wait_for_exit(&mut child, Duration::from_secs(60));
    assert!(
        status.success(),
        "{}: {status}: {}",
        launch.name,
        said(&run)
    );
    confined(&run);
    run
}

/// A run made without a memory cgroup had a watchdog for a kernel: not the zoo's truth.
fn confined(run: &Path) {
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    let mode = info["options"]["confinement"].as_str().unwrap_or("");
    assert!(
        mode.starts_with("cgroup"),
        "heapwatch run made no memory cgroup (confinement {mode}): the zoo needs root"
    );
}

/// Good heap captures of life `incarnation` (duplicates included: they are the clock too).
pub fn heaps(records: &[Value], incarnation: u64) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["kind"] == "heap" && r["error"].is_null())
        .filter(|r| r["incarnation"] == incarnation)
        .collect()
}

/// Seconds between the first and the last good heap capture of life `incarnation`.
pub fn span_s(records: &[Value], incarnation: u64) -> f64 {
    let h = heaps(records, incarnation);
    match (h.first(), h.last()) {
        (Some(a), Some(b)) => {
            (b["t_ms"].as_i64().unwrap() - a["t_ms"].as_i64().unwrap()) as f64 / 1000.0
        }
        _ => 0.0,
    }
}
