//! How each boot cycle ended, from evidence only (`render::ends` words it):
//! "OOM-killed" (the cgroup's oom_kill counter rose, seen by the sampler or in the exit record
//! of `heapwatch run`, or its watchdog killed at the limit; a SIGKILL alone is not), another
//! signal or exit code where known, "restarted itself" (a new process came with no kill),
//! "collector stopped" (not an end at all), else "stopped answering, cause unknown".

use serde::Serialize;

use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CycleEnd {
    /// The kernel killed it for memory.
    OomKilled,
    /// Ended by another signal, seen by whoever started it.
    Signal { signal: i32 },
    /// Exited by itself with this code, seen by whoever started it.
    Exited { code: i32 },
    /// A new process took its place with no kill: it restarted itself (with this exit code,
    /// when whoever watched it saw one).
    RestartedItself { exit_code: Option<i32> },
    /// The collector was stopped while the process lived: not an end at all.
    CollectorStopped,
    /// It stopped answering and nothing says why.
    StoppedAnswering,
    /// It still answered when the run's data ends (a run recorded before `stop` records).
    StillAnswering,
}

impl CycleEnd {
    /// True for the ends of a process (not the collector's, not a live one).
    pub fn is_death(&self) -> bool {
        !matches!(self, CycleEnd::CollectorStopped | CycleEnd::StillAnswering)
    }
}

/// What is known of one cycle for telling how it ended.
pub struct EndEvidence<'a> {
    pub index: u32,
    /// All records of the run.
    pub records: &'a [CaptureRecord],
    /// The memory samples of this cycle, and of the run (a restart is told by what comes next).
    pub memory: &'a [&'a MemorySample],
    /// Unix ms of the cycle's last good capture.
    pub last_ms: i64,
    /// Whether the target stopped answering after it (failed attempts, or the next cycle).
    pub stopped: bool,
    /// The pid of this cycle and of the next one, when known, and whether a next one exists.
    pub pid: Option<u32>,
    pub next: Option<Option<u32>>,
}

/// How a cycle ended, from the evidence.
pub fn cycle_end(e: &EndEvidence) -> CycleEnd {
    let exit = e
        .records
        .iter()
        .find(|r| r.kind == RecordKind::Exit && r.cycle == e.index);
    // Only the kernel's own count says OOM: a SIGKILL alone may be anyone's `kill -9`. A rise
    // the memory sampler saw is filed by time and pid, so it may land on the life after the
    // one killed; a process that exited by itself, or by another signal, was not that kill.
    let ended_otherwise =
        exit.is_some_and(|x| x.exit_code.is_some() || x.signal.is_some_and(|s| s != 9));
    let kernel_killed = !ended_otherwise && e.memory.iter().any(|m| m.killed);
    let counted = |x: &CaptureRecord, key: &str| x.totals.get(key).is_some_and(|&n| n > 0);
    let exit_says = exit.is_some_and(|x| counted(x, "oom_kill") || counted(x, "watchdog_kill"));
    if kernel_killed || exit_says {
        return CycleEnd::OomKilled;
    }
    let new_process = e.next.is_some_and(|next_pid| match (e.pid, next_pid) {
        (Some(a), Some(b)) => a != b,
        // Without pids, a next cycle watched in the same cgroup is evidence enough.
        _ => e.memory.iter().any(|m| m.source == "cgroup"),
    });
    // heapwatch's own stop (Ctrl-C) ended the process it started: not the process's end.
    let stopped_first = exit.is_some_and(|x| {
        e.records
            .iter()
            .any(|r| r.kind == RecordKind::Stop && r.cycle == e.index && r.t_ms <= x.t_ms)
    });
    if stopped_first {
        return CycleEnd::CollectorStopped;
    }
    if let Some(x) = exit {
        if let Some(signal) = x.signal {
            return CycleEnd::Signal { signal };
        }
        if let Some(code) = x.exit_code {
            // It exited by itself and a new process came: a self-restart.
            if new_process {
                return CycleEnd::RestartedItself {
                    exit_code: Some(code),
                };
            }
            return CycleEnd::Exited { code };
        }
    }
    let stop = e
        .records
        .iter()
        .any(|r| r.kind == RecordKind::Stop && (r.cycle == e.index || r.t_ms >= e.last_ms));
    if e.next.is_some() {
        return if new_process {
            CycleEnd::RestartedItself { exit_code: None }
        } else {
            CycleEnd::StoppedAnswering
        };
    }
    if stop && !e.stopped {
        return CycleEnd::CollectorStopped;
    }
    if e.stopped {
        return CycleEnd::StoppedAnswering;
    }
    if stop {
        CycleEnd::CollectorStopped
    } else {
        CycleEnd::StillAnswering
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence<'a>(
        records: &'a [CaptureRecord],
        memory: &'a [&'a MemorySample],
        stopped: bool,
        next: Option<Option<u32>>,
    ) -> EndEvidence<'a> {
        EndEvidence {
            index: 1,
            records,
            memory,
            last_ms: 1000,
            stopped,
            pid: Some(10),
            next,
        }
    }

    fn exit(signal: Option<i32>, code: Option<i32>) -> CaptureRecord {
        let mut r = CaptureRecord::new(9, RecordKind::Exit, 1, 1200);
        r.signal = signal;
        r.exit_code = code;
        r.totals.insert("oom_kill".into(), 0);
        r
    }

    fn oom_exit() -> CaptureRecord {
        let mut r = exit(Some(9), None);
        r.totals.insert("oom_kill".into(), 1);
        r
    }

    #[test]
    fn each_end_is_named_from_its_evidence() {
        let killed = MemorySample {
            killed: true,
            ..MemorySample::default()
        };
        let cgroup = MemorySample {
            source: "cgroup".into(),
            ..MemorySample::default()
        };
        let end = |records: &[CaptureRecord], memory: &[&MemorySample], stopped, next| {
            cycle_end(&evidence(records, memory, stopped, next))
        };
        assert_eq!(end(&[], &[&killed], true, None), CycleEnd::OomKilled);
        assert_eq!(end(&[oom_exit()], &[], true, None), CycleEnd::OomKilled);
        // A `kill -9` by hand: SIGKILL with the kernel's counter still at 0.
        assert_eq!(
            end(&[exit(Some(9), None)], &[], true, None),
            CycleEnd::Signal { signal: 9 }
        );
        assert_eq!(
            end(&[exit(Some(2), None)], &[], true, None),
            CycleEnd::Signal { signal: 2 }
        );
        assert_eq!(
            end(&[exit(None, Some(3))], &[], true, None),
            CycleEnd::Exited { code: 3 }
        );
        // A kill the sampler filed under this life, which then exited by itself.
        assert_eq!(
            end(&[exit(None, Some(0))], &[&killed], true, None),
            CycleEnd::Exited { code: 0 }
        );
        assert_eq!(
            end(&[], &[], true, Some(Some(11))),
            CycleEnd::RestartedItself { exit_code: None }
        );
        assert_eq!(
            end(&[], &[&cgroup], true, Some(None)),
            CycleEnd::RestartedItself { exit_code: None }
        );
        let stop = CaptureRecord::new(5, RecordKind::Stop, 1, 2000);
        assert_eq!(
            end(std::slice::from_ref(&stop), &[], false, None),
            CycleEnd::CollectorStopped
        );
        // Ctrl-C of `heapwatch run`: its stop, then the process it ended.
        let mut after_stop = exit(Some(9), None);
        after_stop.t_ms = 2100;
        assert_eq!(
            end(&[stop, after_stop], &[], true, None),
            CycleEnd::CollectorStopped
        );
        assert_eq!(end(&[], &[], true, None), CycleEnd::StoppedAnswering);
        assert_eq!(end(&[], &[], false, None), CycleEnd::StillAnswering);
    }
}
