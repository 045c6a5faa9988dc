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
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use super::cgroup::{CgroupVersion, Confinement};

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
        (cg.version == CgroupVersion::V1 && !max.is_zero()).then(|| OomHold {
            control: cg.path.join("memory.oom_control"),
            max,
            captured_ms,
        })
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
