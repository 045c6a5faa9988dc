//! Starting the command and restarting it as a kubelet would. The child joins its cgroup
//! between fork and exec, so it is inside before it allocates anything; it gets its own
//! process group (the terminal's Ctrl-C reaches heapwatch only, which stops it in order) and
//! dies with the thread that started it should heapwatch itself be killed.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::LaunchError;
use super::hold::{Held, OomHold};
use crate::source::procmem::process_rss;

/// The command to start, and the cgroup it joins.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// `cgroup.procs` of the cgroup to join before exec.
    pub join: Option<PathBuf>,
}

impl Launch {
    pub fn spawn(&self) -> io::Result<Child> {
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null());
        let join = self
            .join
            .as_deref()
            .map(|p| CString::new(p.as_os_str().as_bytes()))
            .transpose()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: between fork and exec only async-signal-safe calls (setpgid, prctl, open,
        // write, close) on memory prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(path) = &join {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // "0" is the writing process itself, in v1 and v2 alike.
                    let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let error = io::Error::last_os_error();
                    libc::close(fd);
                    if written != 1 {
                        return Err(error);
                    }
                }
                Ok(())
            });
        }
        command.spawn()
    }
}

/// Which ends are restarted: a Pod's `restartPolicy`, as the kubelet applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartOn {
    /// Every end, a clean exit (code 0) included: a controller that exits 0 to be restarted
    /// (after installing a snapshot) is restarted. The kubelet's default.
    #[default]
    Always,
    /// Every end but a clean exit.
    OnFailure,
    /// None.
    Never,
}

impl RestartOn {
    pub fn parse(text: &str) -> Result<RestartOn, String> {
        match text.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "always" => Ok(RestartOn::Always),
            "onfailure" => Ok(RestartOn::OnFailure),
            "never" => Ok(RestartOn::Never),
            _ => Err(format!(
                "{text:?} is not a restart policy (Always, OnFailure or Never, as a Pod's \
                 restartPolicy)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartOn::Always => "Always",
            RestartOn::OnFailure => "OnFailure",
            RestartOn::Never => "Never",
        }
    }

    /// Whether a process that ended with this exit code (`None`: killed by a signal) is
    /// restarted.
    pub fn restarts(self, exit_code: Option<i32>) -> bool {
        match self {
            RestartOn::Always => true,
            RestartOn::OnFailure => exit_code != Some(0),
            RestartOn::Never => false,
        }
    }
}

/// How restarts are paced and bounded.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    /// Which ends are restarted.
    pub on: RestartOn,
    /// Restarts after the first start; `None`: as many as the policy asks for, until Ctrl-C.
    pub restarts: Option<u32>,
    /// The wait before the first restart, doubled for each quick death in a row.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// A process that lived this long resets the backoff, as the kubelet's does.
    pub reset_after: Duration,
    /// How often the child is checked (its exit, the watchdog's limit, Ctrl-C).
    pub poll: Duration,
}

impl Default for RestartPolicy {
    /// The local default: restarts come quicker than the kubelet's (250 ms doubling to 10 s,
    /// reset after a minute running), so a crash loop is seen in seconds.
    fn default() -> Self {
        RestartPolicy {
            on: RestartOn::default(),
            restarts: None,
            backoff: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
            reset_after: Duration::from_secs(60),
            poll: Duration::from_millis(5),
        }
    }
}

impl RestartPolicy {
    /// The kubelet's CrashLoopBackOff: 10 s doubling to 5 min, reset once a container has run
    /// for 10 min.
    pub fn kubelet_backoff(self) -> RestartPolicy {
        RestartPolicy {
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
            ..self
        }
    }

    /// The wait before restart number `quick` of a run of quick deaths (1 for the first).
    pub fn delay(&self, quick: u32) -> Duration {
        let factor = 1u32 << quick.saturating_sub(1).min(16);
        self.backoff.saturating_mul(factor).min(self.backoff_max)
    }
}

/// How one process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    pub pid: u32,
    /// Unix ms when the end was seen (within one poll of it): the kill when one was seen,
    /// else the exit.
    pub t_ms: i64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The cgroup's OOM-kill counter rose during this process's life.
    pub oom_killed: bool,
    /// The watchdog killed it for passing the limit.
    pub watchdog_killed: bool,
    /// How long the kernel held it at its OOM kill for a capture (`--oom-hold`).
    pub oom_held: Option<Duration>,
    /// On cgroup v2, how far below its limit it was held (slowed at `memory.high`).
    pub oom_held_below: Option<u64>,
    pub lived: Duration,
}

/// What the supervisor tells its owner, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifeEvent {
    Started {
        pid: u32,
        t_ms: i64,
    },
    Died(Death),
    /// Ctrl-C: told before the child is killed, so that the kill is no death of the target.
    Interrupted {
        pid: Option<u32>,
        t_ms: i64,
    },
}

/// Why supervision ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A clean exit the policy does not restart (OnFailure, Never).
    CleanExit,
    /// A failure the policy does not restart (Never).
    NotRestarted,
    RestartsUsed,
    Interrupted,
}

/// What the supervisor needs to watch beyond the child itself.
pub struct Watch<'a> {
    /// Set by Ctrl-C.
    pub interrupt: &'a AtomicBool,
    /// The pid running now (0 between processes), for the memory sampler.
    pub pid: &'a AtomicU32,
    /// The watchdog's limit on RSS, when there is no cgroup.
    pub watchdog: Option<u64>,
    /// The cgroup's OOM-kill counter, when there is a cgroup.
    pub oom_kills: &'a (dyn Fn() -> Option<u64> + Sync),
    /// Hold the command at its OOM kill until a capture is taken (cgroup v1).
    pub hold: Option<&'a OomHold>,
}

/// Starts the command, waits for each end, restarts it by the policy.
pub fn supervise(
    launch: &Launch,
    policy: &RestartPolicy,
    watch: &Watch<'_>,
    on_event: &mut dyn FnMut(LifeEvent),
) -> Result<(Ending, u32), LaunchError> {
    let mut restarts = 0;
    let mut quick = 0;
    loop {
        let kills_before = (watch.oom_kills)();
        if let Some(hold) = watch.hold {
            hold.arm();
        }
        let mut child = launch.spawn().map_err(|source| LaunchError::Spawn {
            program: Path::new(&launch.program).display().to_string(),
            source,
        })?;
        let pid = child.id();
        let started = Instant::now();
        watch.pid.store(pid, Ordering::Relaxed);
        on_event(LifeEvent::Started {
            pid,
            t_ms: crate::time::now_ms(),
        });
        let mut watchdog_killed = false;
        // When the kill was seen: the kernel's OOM kill (its counter rose) or the watchdog's.
        // Tearing down a large process takes tens of milliseconds before it can be reaped.
        let mut killed_ms = None;
        // The hold in progress, and how long the last one lasted.
        let mut held: Option<Held> = None;
        let mut oom_held = None;
        let mut released: Option<Instant> = None;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(source) => {
                    stop(&mut child);
                    return Err(LaunchError::Wait { pid, source });
                }
            }
            if watch.interrupt.load(Ordering::Relaxed) {
                on_event(LifeEvent::Interrupted {
                    pid: Some(pid),
                    t_ms: crate::time::now_ms(),
                });
                stop(&mut child);
                watch.pid.store(0, Ordering::Relaxed);
                return Ok((Ending::Interrupted, restarts));
            }
            if let Some(limit) = watch.watchdog {
                if !watchdog_killed && process_rss(pid).is_some_and(|rss| rss > limit) {
                    // SAFETY: kill(2) on our own unreaped child: the pid cannot be reused yet.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    watchdog_killed = true;
                    killed_ms = Some(crate::time::now_ms());
                }
            }
            if let Some(hold) = watch.hold {
                if held.is_none() && oom_held.is_none() && hold.under_oom() {
                    held = Some(hold.begin(crate::time::now_ms()));
                }
                if let Some(h) = held.filter(|h| hold.done(h)) {
                    let lasted = hold.release(&h);
                    oom_held = Some(lasted);
                    held = None;
                    released = Some(Instant::now());
                }
                // v2: a process that backed off after its hold lives, and is held again at
                // its next approach. One the kernel killed is low too, its memory freed before
                // it can be reaped: the kill counter rises before the kill frees anything, so it
                // is read after the memory.
                if oom_held.is_some()
                    && held.is_none()
                    && hold.settled()
                    && !kernel_killed(kills_before, (watch.oom_kills)())
                {
                    hold.arm();
                    oom_held = None;
                    released = None;
                }
                // A release the kernel did not act on (the file could not be written):
                // the process is never left held.
                let overdue = released.is_some_and(|r| r.elapsed() > HOLD_GRACE);
                if hold.kill_follows() && overdue && killed_ms.is_none() && hold.under_oom() {
                    // SAFETY: kill(2) on our own unreaped child: the pid cannot be reused yet.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
            if killed_ms.is_none() && kernel_killed(kills_before, (watch.oom_kills)()) {
                killed_ms = Some(crate::time::now_ms());
            }
            std::thread::sleep(watch_poll(policy));
        };
        let t_ms = killed_ms.unwrap_or_else(crate::time::now_ms);
        // v2: the kernel may kill at memory.max before a capture ends the hold.
        let oom_held = oom_held.or(held.map(|h| h.lasted()));
        watch.pid.store(0, Ordering::Relaxed);
        let lived = started.elapsed();
        let kills_after = (watch.oom_kills)();
        let death = Death {
            pid,
            t_ms,
            exit_code: status.code(),
            signal: status.signal(),
            oom_killed: kernel_killed(kills_before, kills_after),
            watchdog_killed,
            oom_held,
            oom_held_below: oom_held.and(watch.hold.and_then(OomHold::below_limit)),
            lived,
        };
        on_event(LifeEvent::Died(death));
        if !policy.on.restarts(status.code()) {
            return Ok((
                if status.code() == Some(0) {
                    Ending::CleanExit
                } else {
                    Ending::NotRestarted
                },
                restarts,
            ));
        }
        if policy.restarts.is_some_and(|n| restarts >= n) {
            return Ok((Ending::RestartsUsed, restarts));
        }
        quick = if lived >= policy.reset_after {
            1
        } else {
            quick + 1
        };
        let until = Instant::now() + policy.delay(quick);
        while Instant::now() < until {
            if watch.interrupt.load(Ordering::Relaxed) {
                on_event(LifeEvent::Interrupted {
                    pid: None,
                    t_ms: crate::time::now_ms(),
                });
                return Ok((Ending::Interrupted, restarts));
            }
            std::thread::sleep(
                watch_poll(policy).min(until.saturating_duration_since(Instant::now())),
            );
        }
        restarts += 1;
    }
}

/// How long after a hold's release the kernel has to kill before the supervisor does.
const HOLD_GRACE: Duration = Duration::from_secs(5);

/// Whether the cgroup's OOM kill counter rose from `before` to `now` (neither unreadable).
fn kernel_killed(before: Option<u64>, now: Option<u64>) -> bool {
    matches!((before, now), (Some(a), Some(b)) if b > a)
}

fn watch_poll(policy: &RestartPolicy) -> Duration {
    policy.poll.max(Duration::from_millis(1))
}

/// Kills the child's whole process group and reaps the child.
fn stop(child: &mut Child) {
    // SAFETY: kill(2) on the process group our unreaped child leads.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            join: None,
        }
    }

    fn fast(restarts: Option<u32>) -> RestartPolicy {
        RestartPolicy {
            restarts,
            backoff: Duration::from_millis(10),
            ..RestartPolicy::default()
        }
    }

    fn run(
        launch: &Launch,
        policy: &RestartPolicy,
        interrupt: &AtomicBool,
        watchdog: Option<u64>,
    ) -> (Result<(Ending, u32), LaunchError>, Vec<LifeEvent>) {
        let pid = AtomicU32::new(0);
        let watch = Watch {
            interrupt,
            pid: &pid,
            watchdog,
            oom_kills: &|| None,
            hold: None,
        };
        let mut events = Vec::new();
        let result = supervise(launch, policy, &watch, &mut |e| events.push(e));
        assert_eq!(pid.load(Ordering::Relaxed), 0, "no pid left behind");
        (result, events)
    }

    fn deaths(events: &[LifeEvent]) -> Vec<&Death> {
        events
            .iter()
            .filter_map(|e| match e {
                LifeEvent::Died(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_failing_command_is_restarted_until_the_restarts_are_used() {
        let (result, events) = run(&sh("exit 3"), &fast(Some(2)), &AtomicBool::new(false), None);
        assert_eq!(result.unwrap(), (Ending::RestartsUsed, 2));
        let d = deaths(&events);
        assert_eq!(d.len(), 3);
        assert!(
            d.iter()
                .all(|d| d.exit_code == Some(3) && d.signal.is_none())
        );
        let pids: std::collections::BTreeSet<u32> = d.iter().map(|d| d.pid).collect();
        assert_eq!(pids.len(), 3, "a new process each time");
    }

    #[test]
    fn a_clean_exit_ends_it_under_on_failure_and_a_signal_is_recorded_as_such() {
        let on_failure = RestartPolicy {
            on: RestartOn::OnFailure,
            ..fast(Some(5))
        };
        let (result, events) = run(&sh("exit 0"), &on_failure, &AtomicBool::new(false), None);
        assert_eq!(result.unwrap(), (Ending::CleanExit, 0));
        assert_eq!(deaths(&events).len(), 1);
        let (result, events) = run(
            &sh("kill -SEGV $$"),
            &fast(Some(0)),
            &AtomicBool::new(false),
            None,
        );
        assert_eq!(result.unwrap(), (Ending::RestartsUsed, 0));
        let d = deaths(&events)[0];
        assert_eq!((d.exit_code, d.signal), (None, Some(libc::SIGSEGV)));
        assert!(!d.oom_killed && !d.watchdog_killed);
    }

    #[test]
    fn the_watchdog_kills_a_process_past_the_limit() {
        // A shell is a few MiB of RSS: a 1 KiB limit is passed at once.
        let (result, events) = run(
            &sh("sleep 30"),
            &fast(Some(0)),
            &AtomicBool::new(false),
            Some(1024),
        );
        assert_eq!(result.unwrap(), (Ending::RestartsUsed, 0));
        let d = deaths(&events)[0];
        assert_eq!(d.signal, Some(libc::SIGKILL));
        assert!(d.watchdog_killed);
        assert!(d.lived < Duration::from_secs(20));
    }

    #[test]
    fn ctrl_c_is_told_before_the_kill_and_is_no_death() {
        let interrupt = AtomicBool::new(false);
        let (result, events) = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                interrupt.store(true, Ordering::Relaxed);
            });
            run(&sh("sleep 30"), &fast(None), &interrupt, None)
        });
        assert_eq!(result.unwrap(), (Ending::Interrupted, 0));
        assert!(matches!(events[0], LifeEvent::Started { .. }));
        assert!(matches!(
            events[1],
            LifeEvent::Interrupted { pid: Some(_), .. }
        ));
        assert_eq!(events.len(), 2, "{events:?}");
    }

    #[test]
    fn a_command_that_cannot_start_names_itself() {
        let launch = Launch {
            program: "/no/such/heapwatch-cmd".into(),
            args: vec![],
            join: None,
        };
        let (result, events) = run(&launch, &fast(None), &AtomicBool::new(false), None);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("/no/such/heapwatch-cmd"), "{e}");
        assert!(events.is_empty());
    }

    #[test]
    fn joining_a_cgroup_that_cannot_be_joined_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch {
            join: Some(dir.path().join("missing/cgroup.procs")),
            ..sh("exit 0")
        };
        let e = launch.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn always_restarts_a_clean_exit_and_never_restarts_nothing() {
        let (result, events) = run(&sh("exit 0"), &fast(Some(2)), &AtomicBool::new(false), None);
        assert_eq!(result.unwrap(), (Ending::RestartsUsed, 2));
        assert_eq!(
            deaths(&events).len(),
            3,
            "exit 0 restarted as the kubelet does"
        );
        let never = RestartPolicy {
            on: RestartOn::Never,
            ..fast(Some(5))
        };
        let (result, events) = run(&sh("exit 3"), &never, &AtomicBool::new(false), None);
        assert_eq!(result.unwrap(), (Ending::NotRestarted, 0));
        assert_eq!(deaths(&events).len(), 1);
        let on_failure = RestartPolicy {
            on: RestartOn::OnFailure,
            ..fast(Some(1))
        };
        let (result, events) = run(&sh("exit 3"), &on_failure, &AtomicBool::new(false), None);
        assert_eq!(result.unwrap(), (Ending::RestartsUsed, 1));
        assert_eq!(deaths(&events).len(), 2);
        assert_eq!(RestartOn::parse("OnFailure"), Ok(RestartOn::OnFailure));
        assert_eq!(RestartOn::parse("always"), Ok(RestartOn::Always));
        assert!(RestartOn::parse("sometimes").is_err());
    }

    #[test]
    fn the_kubelets_backoff_is_10s_doubling_to_5_minutes() {
        let p = RestartPolicy::default().kubelet_backoff();
        let delays: Vec<u64> = (1..=7).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(p.reset_after, Duration::from_secs(600));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = RestartPolicy {
            backoff: Duration::from_millis(250),
            backoff_max: Duration::from_secs(1),
            ..RestartPolicy::default()
        };
        let delays: Vec<u64> = (1..=5).map(|n| p.delay(n).as_millis() as u64).collect();
        assert_eq!(delays, vec![250, 500, 1000, 1000, 1000]);
    }
}
