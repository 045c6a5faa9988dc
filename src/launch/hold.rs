//! The capture at the moment of the OOM kill. A heap read at the kernel's decision to kill is
//! the fullest the process ever was; polled captures land up to an interval before it. With a
//! cgroup v1 that heapwatch made, `memory.oom_control`'s `oom_kill_disable` makes the kernel
//! hold the process at its limit instead of killing it (the tasks that need memory sleep,
//! killable, in the cgroup's OOM wait; `under_oom` reads 1). The supervisor sees that, waits
//! until a capture that began after it is in the run, and clears `oom_kill_disable`: the kernel
//! then kills as it would have (SIGKILL, its `oom_kill` counter), only later.
//!
//! A process is never left held: the hold lasts at most `max`, Ctrl-C releases it, and should
//! heapwatch itself be killed, the command dies with the thread that started it (its
//! `PR_SET_PDEATHSIG` is SIGKILL, which the OOM wait lets through). cgroup v2 has no
//! `oom_kill_disable`: there the run says the hold was not possible.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cgroup::{CgroupVersion, Confinement};
use crate::collect::{LiveStatus, Observer};
use crate::store::{CaptureRecord, RecordKind};

/// What `--oom-hold` could do for a run, as `run.json` records it.
pub fn describe(confinement: &Confinement, max: Duration) -> String {
    if max.is_zero() {
        return "off".into();
    }
    match confinement.cgroup() {
        Some(cg) if cg.version == CgroupVersion::V1 => format!(
            "held at the kernel's OOM decision for up to {} ms, until a capture (cgroup v1 \
             memory.oom_control)",
            max.as_millis()
        ),
        Some(_) => "not possible: cgroup v2 has no oom_kill_disable".into(),
        None => "not possible: no memory cgroup".into(),
    }
}

/// Holds the command at its OOM kill until a capture is taken (cgroup v1 only).
#[derive(Debug)]
pub struct OomHold {
    control: PathBuf,
    max: Duration,
    /// Unix ms when the newest recorded capture began: set by the collector's observer.
    captured_ms: Arc<AtomicI64>,
}

/// One hold in progress.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    since: Instant,
    since_ms: i64,
}

impl OomHold {
    /// A hold for the cgroup of `confinement`, when it is a v1 cgroup and `max` is not zero.
    pub fn new(
        confinement: &Confinement,
        max: Duration,
        captured_ms: Arc<AtomicI64>,
    ) -> Option<OomHold> {
        let cg = confinement.cgroup()?;
        (cg.version == CgroupVersion::V1 && !max.is_zero())
            .then(|| OomHold::v1(&cg.path, max, captured_ms))
    }

    /// A hold for the v1 memory cgroup `dir`.
    pub fn v1(dir: &Path, max: Duration, captured_ms: Arc<AtomicI64>) -> OomHold {
        OomHold {
            control: dir.join("memory.oom_control"),
            max,
            captured_ms,
        }
    }

    /// Asks the kernel to hold rather than kill, before each start (a release leaves it
    /// cleared). An error leaves the kernel killing at once, as without a hold.
    pub fn arm(&self) {
        if let Err(e) = fs::write(&self.control, "1") {
            eprintln!(
                "heapwatch: {}: cannot disable the OOM killer for the hold ({e}); the kernel \
                 kills at once",
                self.control.display()
            );
        }
    }

    /// The kernel holds the cgroup's tasks at its limit now.
    pub fn under_oom(&self) -> bool {
        fs::read_to_string(&self.control).is_ok_and(|t| {
            t.lines()
                .any(|l| l.split_whitespace().eq(["under_oom", "1"]))
        })
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    pub fn begin(&self, now_ms: i64) -> Held {
        Held {
            since: Instant::now(),
            since_ms: now_ms,
        }
    }

    /// Whether a held process may go now: a capture that began during the hold is recorded,
    /// or the hold has lasted `max`.
    pub fn done(&self, held: &Held) -> bool {
        self.captured_ms.load(Ordering::Relaxed) >= held.since_ms
            || held.since.elapsed() >= self.max
    }

    /// Clears `oom_kill_disable` for good (the holder is done).
    pub fn disarm(&self) {
        let _ = fs::write(&self.control, "0");
    }

    /// Lets the kernel kill: clears `oom_kill_disable`, which wakes the held tasks into the
    /// OOM killer. Returns how long the process was held.
    pub fn release(&self, held: &Held) -> Duration {
        if let Err(e) = fs::write(&self.control, "0") {
            eprintln!(
                "heapwatch: {}: cannot release the OOM hold ({e})",
                self.control.display()
            );
        }
        held.since.elapsed()
    }
}

/// Passes each attempt on, noting when the newest good capture in the run began: what a hold
/// waits for.
pub struct HoldObserver<O> {
    pub inner: O,
    pub captured_ms: Arc<AtomicI64>,
}

impl<O: Observer> Observer for HoldObserver<O> {
    fn attempt(&mut self, record: &CaptureRecord, status: &LiveStatus) {
        if record.is_ok() && matches!(record.kind, RecordKind::Heap | RecordKind::Goroutine) {
            self.captured_ms.fetch_max(record.t_ms, Ordering::Relaxed);
        }
        self.inner.attempt(record, status);
    }

    fn ended(&mut self, record: &CaptureRecord) {
        self.inner.ended(record);
    }
}

/// Why a cgroup cannot be held by `collect --oom-hold`.
pub fn check_holdable(dir: &Path) -> Result<(), String> {
    let control = dir.join("memory.oom_control");
    let text = fs::read_to_string(&control).map_err(|e| {
        if dir.join("memory.events").is_file() {
            format!(
                "{}: a cgroup v2 directory; the OOM hold needs cgroup v1 (v2 has no \
                 oom_kill_disable)",
                dir.display()
            )
        } else {
            format!(
                "{}: {e} (the OOM hold needs a v1 memory cgroup)",
                control.display()
            )
        }
    })?;
    if text.lines().any(|l| l == "oom_kill_disable 1") {
        return Err(format!(
            "{}: oom_kill_disable is already 1: something else holds this cgroup's OOM kills",
            control.display()
        ));
    }
    Ok(())
}

/// Holds a cgroup heapwatch did not make (`collect --cgroup DIR --oom-hold`): a thread that
/// arms the hold, watches `under_oom`, releases each hold once a capture is in, and re-arms for
/// the next process; and a guardian process that clears `oom_kill_disable` should heapwatch
/// die without doing so (its stdin is a pipe from heapwatch: end of file means heapwatch is
/// gone, however it went).
pub struct Holder {
    hold: Arc<OomHold>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    guardian: Option<Child>,
}

/// How often the holder reads `under_oom`.
const HOLD_POLL: Duration = Duration::from_millis(5);

impl Holder {
    pub fn start(dir: &Path, max: Duration, captured_ms: Arc<AtomicI64>) -> Result<Holder, String> {
        check_holdable(dir)?;
        let exe = std::env::current_exe().map_err(|e| format!("heapwatch's own path: {e}"))?;
        let guardian = {
            use std::os::unix::process::CommandExt;
            Command::new(exe)
                .arg(GUARD_COMMAND)
                .arg(dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                // Out of the terminal's process group: Ctrl-C is heapwatch's to handle.
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot start the OOM hold's guardian: {e}"))?
        };
        let hold = Arc::new(OomHold::v1(dir, max, captured_ms));
        hold.arm();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (hold, stop) = (hold.clone(), stop.clone());
            std::thread::Builder::new()
                .name("oom-hold".into())
                .spawn(move || {
                    let mut held: Option<Held> = None;
                    while !stop.load(Ordering::Relaxed) {
                        let under = hold.under_oom();
                        match held {
                            None if under => held = Some(hold.begin(crate::time::now_ms())),
                            Some(h) if hold.done(&h) => {
                                hold.release(&h);
                                held = None;
                                // The kernel kills; the next process in the cgroup is held too.
                                let deadline = Instant::now() + Duration::from_secs(5);
                                while hold.under_oom() && Instant::now() < deadline {
                                    std::thread::sleep(HOLD_POLL);
                                }
                                hold.arm();
                            }
                            _ => {}
                        }
                        std::thread::sleep(HOLD_POLL);
                    }
                })
                .map_err(|e| format!("cannot start the OOM hold's thread: {e}"))?
        };
        Ok(Holder {
            hold,
            stop,
            thread: Some(thread),
            guardian: Some(guardian),
        })
    }
}

impl Drop for Holder {
    /// Clears `oom_kill_disable` (a process held now is killed by the kernel as it would have
    /// been), then lets the guardian go.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.hold.disarm();
        if let Some(mut g) = self.guardian.take() {
            drop(g.stdin.take());
            let _ = g.wait();
        }
    }
}

/// The hidden command the guardian runs as.
pub const GUARD_COMMAND: &str = "oom-hold-guard";

/// The guardian: waits for its stdin to end (heapwatch gone, or done), then clears the
/// cgroup's `oom_kill_disable`. Ignores the signals a terminal or a group kill sends, so that
/// it outlives heapwatch.
pub fn guard(dir: &Path) -> Result<(), String> {
    // SAFETY: setting signal dispositions to SIG_IGN touches no memory.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    let control = dir.join("memory.oom_control");
    match fs::write(&control, "0") {
        Ok(()) => Ok(()),
        // The cgroup went with its container: nothing is held.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "{}: cannot clear oom_kill_disable: {e}",
            control.display()
        )),
    }
}
