//! Following a process across restarts: `proc:exe:NAME` and `proc:cgroup:PATH`. Each fetch
//! goes to the process found last while it lives; once it is gone, the next one is looked for,
//! polling every few milliseconds for up to one wait, so a restart is captured within
//! milliseconds of its exec. While there is none, a fetch fails as refused (the target is gone).
//!
//! `FollowSource` (`proc:exe:`, `proc:cgroup:`, `heapwatch run`) offers goroutines and MemStats
//! before its first process is attached, so a run that starts before its process gets them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::model::build::BuildInfo;
use crate::source::procfind::{ProcFinder, ProcSelector, ProcessId};
use crate::source::{FailureKind, FetchError, Reply, SiteNaming, Source, SourceKind, Want};

/// How often a fetch looks for the next process while there is none.
const POLL: Duration = Duration::from_millis(5);

/// How long a failed attach is retried within one fetch.
const ATTACH_RETRY: Duration = Duration::from_millis(200);

/// Makes the per-process source for a pid within a timeout (`ProcSource::attach_within` in the
/// CLI).
pub type Attacher = Box<dyn FnMut(u32, Duration) -> Result<Box<dyn Source>, FetchError> + Send>;

struct Attached {
    process: ProcessId,
    source: Box<dyn Source>,
}

pub struct FollowSource {
    target: String,
    finder: ProcFinder,
    attach: Attacher,
    current: Option<Attached>,
    pid: Arc<AtomicU32>,
    wait: Duration,
    /// Handed to each process attached, which names sites for its own program.
    naming: Option<SiteNaming>,
}

impl FollowSource {
    /// `wait` bounds how long one fetch looks for a process before it answers refused: the
    /// collector's interval, so a target that is gone is probed continuously but Ctrl-C and
    /// the other tasks are never held up for longer than an interval.
    pub fn new(target: &str, selector: ProcSelector, attach: Attacher, wait: Duration) -> Self {
        FollowSource {
            target: target.to_string(),
            finder: ProcFinder::new(selector),
            attach,
            current: None,
            pid: Arc::new(AtomicU32::new(0)),
            wait,
            naming: None,
        }
    }

    /// The pid followed now (0 while there is none), for the memory sampler.
    pub fn pid_cell(&self) -> Arc<AtomicU32> {
        self.pid.clone()
    }

    pub fn finder(&self) -> &ProcFinder {
        &self.finder
    }

    fn forget(&mut self) {
        self.current = None;
        self.pid.store(0, Ordering::Relaxed);
    }

    /// The source of the live process, looking for one (and attaching) when needed.
    fn live(&mut self, timeout: Duration) -> Result<&mut Attached, FetchError> {
        if self.current.as_ref().is_some_and(|a| !a.process.alive()) {
            self.forget();
        }
        if self.current.is_none() {
            let deadline = Instant::now() + timeout.min(self.wait);
            let process = loop {
                if let Some(p) = self.finder.find() {
                    break p;
                }
                if Instant::now() >= deadline {
                    return Err(FetchError::new(
                        FailureKind::Refused,
                        format!(
                            "{}: there is no {} (not started, or ended){}",
                            self.target,
                            self.finder.selector().describe(),
                            self.finder
                                .why_none()
                                .map(|w| format!("; {w}"))
                                .unwrap_or_default()
                        ),
                    ));
                }
                std::thread::sleep(POLL);
            };
            let mut source = self.attach_soon(process, deadline, timeout)?;
            if let Some(naming) = &self.naming {
                source.name_sites(naming.clone());
            }
            self.pid.store(process.pid, Ordering::Relaxed);
            self.current = Some(Attached { process, source });
        }
        self.current
            .as_mut()
            .ok_or_else(|| FetchError::new(FailureKind::Other, "no process attached"))
    }
}

impl FollowSource {
    /// Attaches, retrying for a moment: a process caught between exec and the mapping of its
    /// binary (its `exe` link is new, its segments not there yet) is readable milliseconds later.
    fn attach_soon(
        &mut self,
        process: ProcessId,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Box<dyn Source>, FetchError> {
        let retry_until = deadline.min(Instant::now() + ATTACH_RETRY);
        loop {
            match (self.attach)(process.pid, timeout) {
                Ok(source) => return Ok(source),
                // A process that ended while being attached is gone, not broken.
                Err(e) if !process.alive() => {
                    return Err(FetchError::new(FailureKind::Refused, e.message));
                }
                // The attacher's error names the target and the pid.
                Err(e) if Instant::now() >= retry_until => return Err(e),
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }
}

impl Source for FollowSource {
    fn target(&self) -> &str {
        &self.target
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Proc
    }

    fn supports(&self, want: Want) -> bool {
        match &self.current {
            Some(a) => a.source.supports(want),
            // Before the first process: what a Go process read from outside can give. One
            // that cannot (a stripped binary's MemStats) answers each such attempt with why.
            None => matches!(want, Want::Heap | Want::Goroutine | Want::MemStats),
        }
    }

    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        let attached = self.live(timeout)?;
        let process = attached.process;
        match attached.source.fetch(want, timeout) {
            Ok(mut reply) => {
                reply.pid = Some(process.pid);
                Ok(reply)
            }
            Err(e) if !process.alive() => {
                self.forget();
                Err(FetchError::new(
                    FailureKind::Refused,
                    format!("{}: pid {} ended: {e}", self.target, process.pid),
                ))
            }
            Err(e) => Err(e),
        }
    }

    fn build_info(&mut self, timeout: Duration) -> Option<BuildInfo> {
        self.current.as_mut()?.source.build_info(timeout)
    }

    fn name_sites(&mut self, naming: SiteNaming) {
        if let Some(current) = &mut self.current {
            current.source.name_sites(naming.clone());
        }
        self.naming = Some(naming);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::{Child, Command};
    use std::sync::Mutex;

    /// Answers with the pid it was attached to, so a test sees which process was read.
    struct PidEcho(u32);

    impl Source for PidEcho {
        fn target(&self) -> &str {
            "echo"
        }
        fn kind(&self) -> SourceKind {
            SourceKind::Proc
        }
        fn supports(&self, want: Want) -> bool {
            want == Want::Heap
        }
        fn fetch(&mut self, _: Want, _: Duration) -> Result<Reply, FetchError> {
            Ok(Reply {
                bytes: self.0.to_string().into_bytes(),
                pid: None,
                made: None,
            })
        }
    }

    struct Killed(Child);

    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn renamed_sleep() -> (tempfile::TempDir, PathBuf, String) {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let name = format!(
            "hw-follow-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let bin = dir.path().join(&name);
        std::fs::copy("/bin/sleep", &bin).expect("copy sleep");
        (dir, bin, name)
    }

    fn echo_attacher(log: Arc<Mutex<Vec<u32>>>) -> Attacher {
        Box::new(move |pid, _| {
            log.lock().unwrap().push(pid);
            Ok(Box::new(PidEcho(pid)) as Box<dyn Source>)
        })
    }

    #[test]
    fn no_process_is_refused_after_the_wait_and_a_restart_is_followed() {
        let (_dir, bin, name) = renamed_sleep();
        let attached = Arc::new(Mutex::new(Vec::new()));
        let mut source = FollowSource::new(
            &format!("proc:exe:{name}"),
            ProcSelector::Exe(name),
            echo_attacher(attached.clone()),
            Duration::from_millis(30),
        );
        let began = Instant::now();
        let e = source
            .fetch(Want::Heap, Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused);
        assert!(
            e.message
                .contains("there is no process whose executable is named"),
            "{e}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "waits one wait, not the timeout"
        );
        assert_eq!(source.pid_cell().load(Ordering::Relaxed), 0);

        let first = Killed(Command::new(&bin).arg("30").spawn().unwrap());
        let reply = source.fetch(Want::Heap, Duration::from_secs(1)).unwrap();
        assert_eq!(reply.pid, Some(first.0.id()));
        assert_eq!(reply.bytes, first.0.id().to_string().into_bytes());
        assert_eq!(source.pid_cell().load(Ordering::Relaxed), first.0.id());
        let again = source.fetch(Want::Heap, Duration::from_secs(1)).unwrap();
        assert_eq!(again.pid, Some(first.0.id()));
        assert_eq!(
            attached.lock().unwrap().len(),
            1,
            "attached once per process"
        );

        drop(first);
        let e = source
            .fetch(Want::Heap, Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused, "{e}");
        let second = Killed(Command::new(&bin).arg("30").spawn().unwrap());
        let reply = source.fetch(Want::Heap, Duration::from_secs(1)).unwrap();
        assert_eq!(reply.pid, Some(second.0.id()));
        assert_eq!(attached.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_process_started_during_a_fetch_is_read_by_that_fetch() {
        let (_dir, bin, name) = renamed_sleep();
        let mut source = FollowSource::new(
            "t",
            ProcSelector::Exe(name),
            echo_attacher(Arc::default()),
            Duration::from_secs(10),
        );
        let starter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            Killed(Command::new(&bin).arg("30").spawn().unwrap())
        });
        let reply = source.fetch(Want::Heap, Duration::from_secs(10)).unwrap();
        let child = starter.join().unwrap();
        assert_eq!(reply.pid, Some(child.0.id()));
    }

    #[test]
    fn an_attach_that_fails_at_first_is_retried_within_the_fetch() {
        let (_dir, bin, name) = renamed_sleep();
        let child = Killed(Command::new(&bin).arg("30").spawn().unwrap());
        let mut failures = 2;
        let mut source = FollowSource::new(
            "t",
            ProcSelector::Exe(name),
            Box::new(move |pid, _| {
                if failures > 0 {
                    failures -= 1;
                    return Err(FetchError::new(
                        FailureKind::Other,
                        "segments not mapped yet",
                    ));
                }
                Ok(Box::new(PidEcho(pid)) as Box<dyn Source>)
            }),
            Duration::from_secs(1),
        );
        let reply = source.fetch(Want::Heap, Duration::from_secs(1)).unwrap();
        assert_eq!(reply.pid, Some(child.0.id()));
    }

    #[test]
    fn an_attach_error_for_a_live_process_keeps_its_kind_and_names_the_pid() {
        let (_dir, bin, name) = renamed_sleep();
        let child = Killed(Command::new(&bin).arg("30").spawn().unwrap());
        let mut source = FollowSource::new(
            "proc:exe:x",
            ProcSelector::Exe(name),
            Box::new(|pid, _| {
                Err(FetchError::new(
                    FailureKind::Other,
                    format!("process {pid}: not a Go program"),
                ))
            }),
            Duration::from_millis(50),
        );
        let e = source
            .fetch(Want::Heap, Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(e.kind, FailureKind::Other);
        assert!(e.message.contains(&child.0.id().to_string()), "{e}");
        assert!(e.message.contains("not a Go program"), "{e}");
    }
}
