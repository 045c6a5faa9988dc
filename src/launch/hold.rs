//! The capture at the moment of the OOM kill. A heap read at the kernel's decision to kill is
//! the fullest the process ever was; polled captures land up to an interval before it.
//!
//! - cgroup v1: `memory.oom_control`'s `oom_kill_disable` makes the kernel hold the process at
//!   its limit instead of killing it (the tasks that need memory sleep, killable, in the
//!   cgroup's OOM wait; `under_oom` reads 1). The supervisor sees that, waits until a capture
//!   that began after it is in the run, and clears `oom_kill_disable`: the kernel then kills
//!   as it would have (SIGKILL, its `oom_kill` counter), only later.
//! - cgroup v2 has no `oom_kill_disable`. What it has is `memory.high`: a cgroup over it is
//!   throttled (reclaim, then a sleep on each return to user space that grows with the excess,
//!   up to two seconds; with no swap, reclaim cannot free a Go heap). So `memory.high` is set
//!   a little below `memory.max`: the process is slowed there, `memory.events` counts `high`,
//!   the capture is taken, and `memory.high` is put back; the process goes on to `memory.max`,
//!   where the kernel kills it. The capture is of the process a margin before its kill, not at
//!   it, and crossing `memory.high` is not a decision to kill: a process that backs off lives,
//!   and is held again the next time it nears the limit.
//!
//! A process is never left held: the hold lasts at most `max`, Ctrl-C releases it, and should
//! heapwatch itself be killed, the command dies with the thread that started it (its
//! `PR_SET_PDEATHSIG` is SIGKILL, which the OOM wait lets through); for a cgroup heapwatch did
//! not make, a guardian process puts the cgroup back as it was found.
//!
//! # The capture at the moment of the OOM kill (`launch/hold.rs`, `run --oom-hold`)
//!
//! Polled captures land up to an interval before the kill; the fullest heap is at the kernel's
//! decision to kill. On a cgroup v1 that `run` made, the supervisor writes `1` to
//! `memory.oom_control` before each start (`oom_kill_disable`): at the limit the kernel then puts
//! the tasks that need memory to sleep, killable, instead of killing (`under_oom 1`). The
//! supervisor reads `under_oom` at each poll (5 ms; an eventfd on `cgroup.event_control` would
//! save the reads, but the supervisor polls `waitpid` anyway), notes when the hold began, and
//! waits until the collector's observer has seen a capture that *began* after it (its `t_ms`), or
//! until `--oom-hold` has passed (off by default: in a CI run a held Go process once
//! exited 2 by itself, its runtime refused memory, instead of being killed). It then writes `0`: the kernel wakes the held
//! tasks into its OOM killer, so the end is still the kernel's kill (SIGKILL, `oom_kill` + 1),
//! and the `exit` record carries `oom_held_ms`. The proc source reads a held process as any other
//! (its memory is resident; the read takes ~2 ms). `run.json` says what was possible
//! (`options.oom_hold`): held at the kill on v1, slowed at `memory.high` on v2 (below), "not
//! possible" without a cgroup or, on v2, without a `memory.max`.
//!
//! # The OOM hold on cgroup v2
//!
//! v2 has no `oom_kill_disable`: nothing makes the kernel wait at its decision to kill. What it
//! has is `memory.high`. A cgroup over it is throttled: the kernel reclaims, and when that cannot
//! bring usage down (no swap, and a Go heap is anonymous memory) each task that charged pages
//! sleeps on its way back to user space, longer the further over it is (up to 2 s a time). So
//! before each start the hold sets `memory.high` a margin below `memory.max`: a 16th of the
//! limit, at least 2 MiB and at most 128 MiB (`hold::high_margin`), never above a `memory.high`
//! already set (the kubelet's memory QoS sets one; it is kept and put back). The process slows at
//! the mark, `memory.events` counts `high`; the supervisor sees the count rise (or
//! `memory.current` at the mark), waits for a capture that began after that as on v1, and puts
//! `memory.high` back. The process goes on to `memory.max` and the kernel kills it there: the
//! exit is the kernel's OOM kill as before, and the last capture was taken a margin before it,
//! not at it. Crossing `memory.high` is no decision to kill: a process that backs off lives (no
//! supervisor kill follows a v2 release), and the hold is set up again once usage is a margin
//! below the mark, unless the cgroup's kill counter rose: a killed process's memory is freed
//! before it can be reaped, and read as a back-off it cost the record of its hold. The kernel's side was measured in a VM with a v2 memory controller
//! (tests/cli/cgroup_v2.rs, testdata/vm/); this machine's memory controller is v1.
//!
//! Never left held: the hold has its deadline; Ctrl-C kills the child as before (the OOM wait is
//! killable); a release the kernel does not act on within 5 s ends in the supervisor's own
//! SIGKILL; and should heapwatch be SIGKILLed, the child dies with the thread that started it
//! (`PR_SET_PDEATHSIG`), which the test does while a hold waits for a capture 30 s away.
//!
//! The analysis reads the hold and the unpublished heap from the records alone: `CycleGrowth`
//! takes `oom_held_ms` from the cycle's exit record (present only when a hold happened) and
//! `unpublished` from the last heap capture's totals (`recent_space` beside `inuse_space`, with
//! the stored file, a duplicate's twin), and render words both (`render::growth::unpublished_words`).
//!
//! `collect --oom-hold DURATION` (off by default) holds a cgroup heapwatch did not make (`--cgroup`
//! or a `proc:cgroup:` target, one target; refused by name where it cannot hold: no memory
//! cgroup, a v2 one without `memory.max`, or a v1 one where something else already set
//! `oom_kill_disable`). There no thread of heapwatch is the process's parent, so a
//! guardian does what `PR_SET_PDEATHSIG` does for `run`: `launch::hold::Holder` starts
//! `heapwatch oom-hold-guard DIR` (hidden) in its own process group, ignoring SIGINT, SIGHUP and
//! SIGTERM, with a pipe from heapwatch on its stdin; when the pipe ends (heapwatch done, or
//! killed however) it puts the cgroup back: v1 clears `oom_kill_disable`, and the kernel kills
//! what it held; v2 writes `memory.high` back as it was found (`--high`), and the throttle ends.
//! The holder's thread polls every 5 ms, releases each hold as `run`'s supervisor does, and
//! re-arms for the next approach (v1: the next process in the cgroup, a container's restart; v2:
//! once usage is a margin below the mark); on stop it leaves the cgroup as found.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::LaunchError;
use super::confinement::Confinement;
use crate::collect::{LiveStatus, Observer};
use crate::source::cgroup::CgroupVersion;
use crate::store::{CaptureRecord, RecordKind};
use crate::units::format_bytes;

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
        Some(cg) => match HighMark::read(&cg.path) {
            Ok(mark) => format!(
                "slowed at memory.high {} below memory.max for up to {} ms, until a capture, \
                 then killed by the kernel at memory.max (cgroup v2 has no oom_kill_disable)",
                format_bytes((mark.limit - mark.mark) as i64),
                max.as_millis()
            ),
            Err(why) => format!("not possible: {why}"),
        },
        None => "not possible: no memory cgroup".into(),
    }
}

/// How a cgroup's process is held near its OOM kill.
#[derive(Debug)]
enum Mechanism {
    /// cgroup v1: `memory.oom_control`'s `oom_kill_disable`.
    KillDisable { control: PathBuf },
    /// cgroup v2: `memory.high` a margin below `memory.max`.
    High(HighMark),
}

/// `memory.high` set a margin below `memory.max` (cgroup v2).
#[derive(Debug)]
struct HighMark {
    dir: PathBuf,
    /// `memory.max` in bytes.
    limit: u64,
    /// What `memory.high` is set to while armed: never above what it was found at.
    mark: u64,
    /// `memory.high` as found ("max", or bytes): put back at each release and at the end.
    found: String,
    /// `memory.events` `high` when last armed.
    armed_events: AtomicU64,
}

/// The margin below `memory.max` where a v2 hold slows the process: 1/16 of the limit, at
/// least 2 MiB and at most 128 MiB (this module's doc, "The OOM hold on cgroup v2": deep
/// enough that the kernel's throttle, which grows with the square of the excess, gives a
/// capture time; shallow enough that the capture is of the process near its kill).
pub fn high_margin(limit: u64) -> u64 {
    (limit / 16).clamp(2 << 20, 128 << 20).min(limit / 2)
}

impl HighMark {
    /// The mark for the v2 cgroup `dir`, or why none can be set.
    fn read(dir: &Path) -> Result<HighMark, String> {
        let file = |name: &str| {
            let path = dir.join(name);
            fs::read_to_string(&path)
                .map(|t| t.trim().to_string())
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let max = file("memory.max")?;
        let limit: u64 = match max.as_str() {
            "max" => {
                return Err(format!(
                    "{}: memory.max is max: no limit to hold the process near",
                    dir.display()
                ));
            }
            text => text
                .parse()
                .map_err(|_| format!("{}: memory.max reads {text:?}", dir.display()))?,
        };
        let found = file("memory.high")?;
        let mark = limit - high_margin(limit);
        let mark = found.parse::<u64>().map_or(mark, |high| mark.min(high));
        Ok(HighMark {
            dir: dir.to_path_buf(),
            limit,
            mark,
            found,
            armed_events: AtomicU64::new(0),
        })
    }

    fn write_high(&self, value: &str) -> std::io::Result<()> {
        fs::write(self.dir.join("memory.high"), value)
    }

    /// `memory.events` `high`: how many times the cgroup was throttled over `memory.high`.
    fn high_events(&self) -> u64 {
        fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    let (key, value) = l.split_once(' ')?;
                    (key == "high").then(|| value.trim().parse().ok())?
                })
            })
            .unwrap_or(0)
    }

    fn current(&self) -> Option<u64> {
        fs::read_to_string(self.dir.join("memory.current"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// Holds the command near its OOM kill until a capture is taken.
#[derive(Debug)]
pub struct OomHold {
    how: Mechanism,
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

impl Held {
    /// How long it has lasted so far.
    pub fn lasted(&self) -> Duration {
        self.since.elapsed()
    }
}

impl OomHold {
    /// A hold for the cgroup of `confinement`, when `max` is not zero and the cgroup can hold.
    pub fn new(
        confinement: &Confinement,
        max: Duration,
        captured_ms: Arc<AtomicI64>,
    ) -> Option<OomHold> {
        let cg = confinement.cgroup()?;
        if max.is_zero() {
            return None;
        }
        OomHold::for_cgroup(&cg.path, max, captured_ms).ok()
    }

    /// A hold for the memory cgroup `dir`: v1 when it has `memory.oom_control`, else v2.
    pub fn for_cgroup(
        dir: &Path,
        max: Duration,
        captured_ms: Arc<AtomicI64>,
    ) -> Result<OomHold, String> {
        let control = dir.join("memory.oom_control");
        let how = if control.is_file() {
            Mechanism::KillDisable { control }
        } else {
            Mechanism::High(HighMark::read(dir)?)
        };
        Ok(OomHold {
            how,
            max,
            captured_ms,
        })
    }

    /// Sets the hold up before each start (a release leaves it off). An error leaves the kernel
    /// killing at once, as without a hold.
    pub fn arm(&self) {
        let (file, result) = match &self.how {
            Mechanism::KillDisable { control } => (control.clone(), fs::write(control, "1")),
            Mechanism::High(h) => {
                h.armed_events.store(h.high_events(), Ordering::Relaxed);
                (h.dir.join("memory.high"), h.write_high(&h.mark.to_string()))
            }
        };
        if let Err(e) = result {
            eprintln!(
                "heapwatch: {}: cannot set the OOM hold up ({e}); the kernel kills at once",
                file.display()
            );
        }
    }

    /// The process is held now: at the kernel's OOM decision (v1), or slowed at the mark (v2).
    pub fn under_oom(&self) -> bool {
        match &self.how {
            Mechanism::KillDisable { control } => fs::read_to_string(control).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.split_whitespace().eq(["under_oom", "1"]))
            }),
            Mechanism::High(h) => {
                h.high_events() > h.armed_events.load(Ordering::Relaxed)
                    || h.current().is_some_and(|c| c >= h.mark)
            }
        }
    }

    /// True when a released hold is followed by the kernel's kill for certain (v1: the kernel
    /// had decided). On v2 the process may back off and live.
    pub fn kill_follows(&self) -> bool {
        matches!(self.how, Mechanism::KillDisable { .. })
    }

    /// How far below `memory.max` a v2 hold slows the process (none on v1: held at the kill).
    pub fn below_limit(&self) -> Option<u64> {
        match &self.how {
            Mechanism::KillDisable { .. } => None,
            Mechanism::High(h) => Some(h.limit - h.mark),
        }
    }

    /// v2, after a release: the process is well below the mark again (it backed off and
    /// lives), so the hold may be set up again for its next approach.
    pub fn settled(&self) -> bool {
        match &self.how {
            Mechanism::KillDisable { .. } => false,
            Mechanism::High(h) => h
                .current()
                .is_some_and(|c| c < h.mark.saturating_sub(h.limit - h.mark)),
        }
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

    /// Puts the cgroup back as found, for good (the holder is done).
    pub fn disarm(&self) {
        let _ = self.put_back();
    }

    fn put_back(&self) -> std::io::Result<()> {
        match &self.how {
            Mechanism::KillDisable { control } => fs::write(control, "0"),
            Mechanism::High(h) => h.write_high(&h.found),
        }
    }

    /// Lets the process go: v1 clears `oom_kill_disable`, which wakes the held tasks into the
    /// OOM killer; v2 puts `memory.high` back. Returns how long the process was held.
    pub fn release(&self, held: &Held) -> Duration {
        if let Err(e) = self.put_back() {
            eprintln!("heapwatch: cannot release the OOM hold ({e})");
        }
        held.since.elapsed()
    }

    /// The guardian's arguments: what it must put back should heapwatch die.
    fn guard_args(&self) -> Vec<String> {
        match &self.how {
            Mechanism::KillDisable { .. } => Vec::new(),
            Mechanism::High(h) => vec!["--high".into(), h.found.clone()],
        }
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
    if !control.is_file() && dir.join("memory.events").is_file() {
        return HighMark::read(dir).map(|_| ());
    }
    let text = fs::read_to_string(&control).map_err(|e| {
        format!(
            "{}: {e} (the OOM hold needs a memory cgroup: v1 memory.oom_control or v2 \
             memory.max)",
            control.display()
        )
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
/// sets the hold up, watches for it, releases each hold once a capture is in, and sets it up
/// again for the next approach; and a guardian process that puts the cgroup back as found
/// should heapwatch die without doing so (its stdin is a pipe from heapwatch: end of file
/// means heapwatch is gone, however it went).
pub struct Holder {
    hold: Arc<OomHold>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    guardian: Option<Child>,
}

/// How often the holder looks at the cgroup.
const HOLD_POLL: Duration = Duration::from_millis(5);

impl Holder {
    pub fn start(dir: &Path, max: Duration, captured_ms: Arc<AtomicI64>) -> Result<Holder, String> {
        check_holdable(dir)?;
        let hold = Arc::new(OomHold::for_cgroup(dir, max, captured_ms)?);
        let exe = std::env::current_exe().map_err(|e| format!("heapwatch's own path: {e}"))?;
        let guardian = {
            use std::os::unix::process::CommandExt;
            Command::new(exe)
                .arg(GUARD_COMMAND)
                .arg(dir)
                .args(hold.guard_args())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                // Out of the terminal's process group: Ctrl-C is heapwatch's to handle.
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot start the OOM hold's guardian: {e}"))?
        };
        hold.arm();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (hold, stop) = (hold.clone(), stop.clone());
            std::thread::Builder::new()
                .name("oom-hold".into())
                .spawn(move || hold_loop(&hold, &stop))
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

/// The holder's thread: hold, release once a capture is in, set up again for the next.
fn hold_loop(hold: &OomHold, stop: &AtomicBool) {
    let mut held: Option<Held> = None;
    while !stop.load(Ordering::Relaxed) {
        let under = hold.under_oom();
        match held {
            None if under => held = Some(hold.begin(crate::time::now_ms())),
            Some(h) if hold.done(&h) => {
                hold.release(&h);
                held = None;
                // v1: the kernel kills, and the next process in the cgroup is held too. v2:
                // the process goes on to memory.max and its kill, or backs off and lives;
                // either way it is held again only once well below the mark.
                let deadline = Instant::now() + Duration::from_secs(5);
                while !stop.load(Ordering::Relaxed) {
                    let ready = if hold.kill_follows() {
                        !hold.under_oom() || Instant::now() >= deadline
                    } else {
                        hold.settled()
                    };
                    if ready {
                        break;
                    }
                    std::thread::sleep(HOLD_POLL);
                }
                hold.arm();
            }
            _ => {}
        }
        std::thread::sleep(HOLD_POLL);
    }
}

impl Drop for Holder {
    /// Puts the cgroup back as found (a process held now goes on: on v1 the kernel kills it as
    /// it would have been), then lets the guardian go.
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

/// The guardian: waits for its stdin to end (heapwatch gone, or done), then puts the cgroup
/// back: v1 clears `oom_kill_disable`, v2 writes `memory.high` back as `high` (as found).
/// Ignores the signals a terminal or a group kill sends, so that it outlives heapwatch.
pub fn guard(dir: &Path, high: Option<&str>) -> Result<(), LaunchError> {
    // SAFETY: setting signal dispositions to SIG_IGN touches no memory.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    let (file, value) = match high {
        Some(high) => (dir.join("memory.high"), high),
        None => (dir.join("memory.oom_control"), "0"),
    };
    match fs::write(&file, value) {
        Ok(()) => Ok(()),
        // The cgroup went with its container: nothing is held.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LaunchError::PutBack {
            file,
            value: value.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 cgroup's files, as the kernel lays them out, in a temporary folder.
    fn v2_dir(max: &str, high: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("memory.max", format!("{max}\n")),
            ("memory.high", format!("{high}\n")),
            ("memory.current", "1048576\n".to_string()),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n".to_string(),
            ),
        ] {
            fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    fn read(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn the_margin_is_a_16th_of_the_limit_within_2_and_128_mib() {
        assert_eq!(high_margin(96 << 20), 6 << 20);
        assert_eq!(high_margin(16 << 20), 2 << 20);
        assert_eq!(high_margin(2 << 20), 1 << 20, "never more than half");
        assert_eq!(high_margin(8 << 30), 128 << 20);
    }

    #[test]
    fn a_v2_hold_sets_memory_high_below_max_sees_the_throttle_and_puts_it_back() {
        let dir = v2_dir("100663296", "max");
        let captured = Arc::new(AtomicI64::new(i64::MIN));
        let hold = OomHold::for_cgroup(dir.path(), Duration::from_secs(2), captured.clone())
            .expect("a v2 cgroup with a limit holds");
        assert!(!hold.kill_follows());
        hold.arm();
        assert_eq!(read(dir.path(), "memory.high"), (90u64 << 20).to_string());
        assert!(!hold.under_oom());
        // The kernel throttled the cgroup over memory.high once.
        let events = read(dir.path(), "memory.events").replace("high 0", "high 1");
        fs::write(dir.path().join("memory.events"), events).unwrap();
        assert!(hold.under_oom());
        let held = hold.begin(1_000);
        assert!(!hold.done(&held));
        captured.store(1_001, Ordering::Relaxed);
        assert!(hold.done(&held));
        hold.release(&held);
        assert_eq!(read(dir.path(), "memory.high"), "max");
        // At the mark still: not settled; well below it: held again at the next approach.
        fs::write(dir.path().join("memory.current"), (90u64 << 20).to_string()).unwrap();
        assert!(!hold.settled() && hold.under_oom());
        fs::write(dir.path().join("memory.current"), (83u64 << 20).to_string()).unwrap();
        assert!(hold.settled());
        hold.arm();
        assert!(
            !hold.under_oom(),
            "the count is taken afresh at each arming"
        );
    }

    #[test]
    fn a_v2_hold_never_raises_a_lower_memory_high_and_needs_a_limit() {
        let dir = v2_dir("100663296", "50331648");
        let hold =
            OomHold::for_cgroup(dir.path(), Duration::from_secs(2), Default::default()).unwrap();
        hold.arm();
        assert_eq!(read(dir.path(), "memory.high"), "50331648");
        hold.disarm();
        assert_eq!(read(dir.path(), "memory.high"), "50331648");

        let unlimited = v2_dir("max", "max");
        let err = check_holdable(unlimited.path()).unwrap_err();
        assert!(err.contains("memory.max is max"), "{err}");
        let err = OomHold::for_cgroup(unlimited.path(), Duration::from_secs(2), Default::default())
            .unwrap_err();
        assert!(
            err.contains(&unlimited.path().display().to_string()),
            "{err}"
        );
    }
}
