//! The kubelet's part: a supervisor thread that starts a container, waits for its death,
//! and restarts it after a back-off, in the same cgroup or as a new container; it keeps what
//! happened to each life for the test to check.

use std::fs;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Container, Inner, spawn_in};
use crate::util::{self, Reaped};

/// What a supervisor runs, and how it restarts it.
#[derive(Debug, Clone)]
pub struct Supervised {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Restarts after the first start.
    pub restarts: u32,
    /// Before the first start (a container that appears late).
    pub delay: Duration,
    /// Between a death and the restart (the kubelet's back-off, shortened).
    pub backoff: Duration,
    /// `true`: a new container (new id and cgroup) each time, as a kubelet does; `false`: the
    /// same cgroup again.
    pub new_container: bool,
}

/// One life of a supervised container.
#[derive(Debug, Clone)]
pub struct Life {
    pub pid: u32,
    pub container_id: String,
    pub cgroup: PathBuf,
    pub started_ms: i64,
    /// When it ended and how, once it has.
    pub ended: Option<(i64, ExitStatus)>,
    /// The cgroup's OOM-kill counter after the end.
    pub oom_kills_after: Option<u64>,
}

pub(super) struct SupervisorState {
    pub(super) container: Container,
    pub(super) lives: Vec<Life>,
    pub(super) done: bool,
}

/// The test's view of a supervisor.
#[derive(Clone)]
pub struct Supervisor {
    pub(super) state: Arc<Mutex<SupervisorState>>,
}

impl Supervisor {
    pub fn lives(&self) -> Vec<Life> {
        self.lock().lives.clone()
    }

    /// The container as it is now (a restart as a kubelet makes a new one).
    pub fn container(&self) -> Container {
        self.lock().container.clone()
    }

    /// Waits until `n` lives have started, the newest one running.
    pub fn wait_started(&self, n: usize, timeout: Duration) -> Life {
        self.wait(timeout, &format!("{n} starts"), |s| {
            s.lives.get(n - 1).filter(|l| l.ended.is_none()).cloned()
        })
    }

    /// Waits until `n` lives have ended.
    pub fn wait_ended(&self, n: usize, timeout: Duration) -> Life {
        self.wait(timeout, &format!("{n} ends"), |s| {
            s.lives.get(n - 1).filter(|l| l.ended.is_some()).cloned()
        })
    }

    fn wait<T>(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Fn(&SupervisorState) -> Option<T>,
    ) -> T {
        let started = Instant::now();
        loop {
            {
                let s = self.lock();
                if let Some(found) = f(&s) {
                    return found;
                }
                assert!(!s.done, "the supervisor ended before {what}: {:?}", s.lives);
                assert!(
                    started.elapsed() < timeout,
                    "no {what} within {timeout:?}: {:?}",
                    s.lives
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SupervisorState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) fn supervise(
    inner: &Inner,
    state: &Mutex<SupervisorState>,
    stop: &AtomicBool,
    run: Supervised,
) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let pause = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    };
    if !pause(run.delay) {
        lock().done = true;
        return;
    }
    let args: Vec<&str> = run.args.iter().map(String::as_str).collect();
    for life in 0..=run.restarts {
        if life > 0 {
            if !pause(run.backoff) {
                break;
            }
            let old = lock().container.clone();
            let next = if run.new_container {
                inner.replace(&old)
            } else {
                let again = Container {
                    restarts: old.restarts + 1,
                    ..old
                };
                fs::write(again.log_file(), "").expect("next log file");
                again
            };
            lock().container = next;
        }
        let container = lock().container.clone();
        let mut child = Reaped(spawn_in(&container, &run.program, &args, &[]));
        lock().lives.push(Life {
            pid: child.0.id(),
            container_id: container.id.clone(),
            cgroup: container.cgroup.clone(),
            started_ms: util::unix_ms(),
            ended: None,
            oom_kills_after: None,
        });
        let status = loop {
            if stop.load(Ordering::Relaxed) {
                break None;
            }
            match child.0.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        let Some(status) = status else {
            break;
        };
        let mut s = lock();
        if let Some(l) = s.lives.last_mut() {
            l.ended = Some((util::unix_ms(), status));
            l.oom_kills_after = container.oom_kills();
        }
    }
    lock().done = true;
}
