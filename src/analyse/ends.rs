//! How each boot cycle ended, from evidence only (`render::ends` words it):
//! "OOM-killed" (the cgroup's oom_kill counter rose, seen by the sampler or in the exit record
//! of `heapwatch run`, or its watchdog killed at the limit; a SIGKILL alone is not), another
//! signal or exit code where known, "restarted itself" (a new process came with no kill),
//! "collector stopped" (not an end at all), else "stopped answering, cause unknown".
//!
//! # A cycle's death
//!
//! A cycle's death time is its exit record's (`heapwatch run` saw it die), else its first failed
//! capture after the last good one, else the next cycle's start. It is an OOM kill only when the
//! kernel's count says so (the sampler saw `oom_kill` rise, or the exit record's `oom_kill` or
//! `watchdog_kill` is 1); a SIGKILL alone is "ended by signal 9", and a process ended after
//! heapwatch's own `stop` record is "collector stopped". Every collector with an exit watcher
//! (`run`, `collect --pid/--cgroup`, `watch`) reads the cgroup's `oom_kill` count when it hears the
//! exit and writes its rise into the exit record: the memory sampler, on its own pace, can first
//! see the raised count after a restart, and its sample then names the new process and is filed
//! under the next cycle. A kill so filed does not make a cycle OOM-killed whose own exit record
//! says it exited, or died by another signal.

use serde::Serialize;

use crate::analyse::boundaries::CycleSpan;
use crate::model::capture::{CaptureRecord, RecordKind, StopReason};
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
    /// It was a replay, and its recording ended there with the process still answering (a
    /// `stop` record says so): the end of the recording, not of the process.
    RecordingEnded,
}

impl CycleEnd {
    /// True for the ends of a process (not the collector's, not a live one).
    pub fn is_death(&self) -> bool {
        !matches!(
            self,
            CycleEnd::CollectorStopped | CycleEnd::StillAnswering | CycleEnd::RecordingEnded
        )
    }
}

/// A rise of the kernel's OOM-kill counter as the memory sampler saw it, placed on the life
/// that was running when it rose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelKill {
    /// The boot cycle whose process was killed.
    pub cycle: u32,
    /// Unix ms of the first sample that showed the counter risen.
    pub seen_ms: i64,
}

/// Every rise of the kernel's OOM-kill counter, each on the life it ended. The counter rose
/// between the sample before and the one that shows it; the life killed is the one that was
/// running at the sample before (the process that sample names, else the latest cycle begun by
/// then). Never the pid the rising sample names: by then the kubelet or `run` may have started
/// the next process, and the kill is not its own.
pub fn kernel_kills(memory: &[MemorySample], spans: &[CycleSpan]) -> Vec<KernelKill> {
    let mut counted: Vec<&MemorySample> = memory
        .iter()
        .filter(|m| m.killed || m.oom_kills.is_some())
        .collect();
    counted.sort_by_key(|m| m.t_ms);
    let mut kills = Vec::new();
    for (i, m) in counted.iter().enumerate() {
        if !m.killed {
            continue;
        }
        let before = i.checked_sub(1).map(|b| counted[b]);
        let by_pid = before.and_then(|b| b.pid).and_then(|pid| {
            let mut owners = spans.iter().filter(|s| s.pid == Some(pid));
            match (owners.next(), owners.next()) {
                (Some(owner), None) => Some(owner.index),
                _ => None,
            }
        });
        let running_at = before.map_or(m.t_ms, |b| b.t_ms);
        let by_time = spans
            .iter()
            .rev()
            .find(|s| s.start_ms <= running_at)
            .or(spans.first())
            .map(|s| s.index);
        if let Some(cycle) = by_pid.or(by_time) {
            kills.push(KernelKill {
                cycle,
                seen_ms: m.t_ms,
            });
        }
    }
    kills
}

/// What is known of one cycle for telling how it ended.
pub struct EndEvidence<'a> {
    pub index: u32,
    /// All records of the run.
    pub records: &'a [CaptureRecord],
    /// The kernel's kills the memory sampler saw, each placed on its life ([`kernel_kills`]).
    pub kills: &'a [KernelKill],
    /// Unix ms of the cycle's last good capture.
    pub last_ms: i64,
    /// Whether the target stopped answering after it (failed attempts, or the next cycle).
    pub stopped: bool,
    /// The pid of this cycle and of the next one, when known, and whether a next one exists.
    pub pid: Option<u32>,
    pub next: Option<Option<u32>>,
    /// Whether the cycle's memory was sampled from its cgroup (the same cgroup across restarts).
    pub cgroup_watched: bool,
}

/// How a cycle ended, from the evidence.
pub fn cycle_end(e: &EndEvidence) -> CycleEnd {
    let exit = e
        .records
        .iter()
        .find(|r| r.kind == RecordKind::Exit && r.cycle == e.index);
    // Only the kernel's own count says OOM: a SIGKILL alone may be anyone's `kill -9`. The
    // life's own exit record, where whoever started it wrote one with the counter, is the
    // account of its end; else a rise the sampler saw while it ran. A process that exited by
    // itself, or by another signal, was not that kill.
    let counted = |x: &CaptureRecord, key: &str| x.totals.get(key).is_some_and(|&n| n > 0);
    let exit_says = exit.is_some_and(|x| counted(x, "oom_kill") || counted(x, "watchdog_kill"));
    let exit_counted = exit.is_some_and(|x| x.totals.contains_key("oom_kill"));
    let ended_otherwise =
        exit.is_some_and(|x| x.exit_code.is_some() || x.signal.is_some_and(|s| s != 9));
    let sampled_kill = e.kills.iter().any(|k| k.cycle == e.index);
    if exit_says || (sampled_kill && !exit_counted && !ended_otherwise) {
        return CycleEnd::OomKilled;
    }
    let new_process = e.next.is_some_and(|next_pid| match (e.pid, next_pid) {
        (Some(a), Some(b)) => a != b,
        // Without pids, a next cycle watched in the same cgroup is evidence enough.
        _ => e.cgroup_watched,
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
    let stops = || {
        e.records
            .iter()
            .filter(|r| r.kind == RecordKind::Stop && (r.cycle == e.index || r.t_ms >= e.last_ms))
    };
    // A replay whose recording ended: its last answers were the recording's last, whatever
    // failed after them.
    if e.next.is_none() && stops().any(|r| r.reason == Some(StopReason::RecordingEnded)) {
        return CycleEnd::RecordingEnded;
    }
    let stop = stops().next().is_some();
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
        kills: &'a [KernelKill],
        stopped: bool,
        next: Option<Option<u32>>,
    ) -> EndEvidence<'a> {
        EndEvidence {
            index: 1,
            records,
            kills,
            last_ms: 1000,
            stopped,
            pid: Some(10),
            next,
            cgroup_watched: true,
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
        let killed = KernelKill {
            cycle: 1,
            seen_ms: 1100,
        };
        let end = |records: &[CaptureRecord], kills: &[KernelKill], stopped, next| {
            cycle_end(&evidence(records, kills, stopped, next))
        };
        assert_eq!(end(&[], &[killed], true, None), CycleEnd::OomKilled);
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
            end(&[exit(None, Some(0))], &[killed], true, None),
            CycleEnd::Exited { code: 0 }
        );
        assert_eq!(
            end(&[], &[], true, Some(Some(11))),
            CycleEnd::RestartedItself { exit_code: None }
        );
        assert_eq!(
            end(&[], &[], true, Some(None)),
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

    /// Issue 35, item 7a: the demo's healthy baseline ended "stopped answering, cause unknown"
    /// where its replayed recording ended. A `stop` record that says so is the recording's end,
    /// whatever failed after it; a kill before it is still a kill.
    #[test]
    fn a_replay_whose_recording_ended_is_no_death() {
        let mut ended = CaptureRecord::new(140, RecordKind::Stop, 1, 30_000);
        ended.reason = Some(StopReason::RecordingEnded);
        let records = [ended];
        let at_the_end = cycle_end(&evidence(&records, &[], true, None));
        assert_eq!(at_the_end, CycleEnd::RecordingEnded);
        assert!(!at_the_end.is_death());
        let killed = KernelKill {
            cycle: 1,
            seen_ms: 1100,
        };
        assert_eq!(
            cycle_end(&evidence(&records, &[killed], true, None)),
            CycleEnd::OomKilled
        );
        // Not the last life: a life before the last ended before the recording did.
        assert_eq!(
            cycle_end(&evidence(&records, &[], true, Some(Some(11)))),
            CycleEnd::RestartedItself { exit_code: None }
        );
    }
}

#[cfg(test)]
mod kill_tests {
    use super::*;

    fn sample(t_ms: i64, pid: u32, kills: u64, killed: bool) -> MemorySample {
        MemorySample {
            t_ms,
            source: "cgroup".into(),
            pid: Some(pid),
            oom_kills: Some(kills),
            killed,
            alive: true,
            ..MemorySample::default()
        }
    }

    fn span(index: u32, start_ms: i64, pid: u32) -> CycleSpan {
        CycleSpan {
            index,
            start_ms,
            pid: Some(pid),
        }
    }

    /// etcd under `run`: life 2 killed at about 20 s, life 3 started at 20.3 s; the sampler's
    /// first look after the kill came at 20.75 s and named life 3's pid. The kill is life 2's.
    #[test]
    fn a_kill_first_seen_under_the_next_pid_belongs_to_the_life_running_before_it() {
        let spans = [span(1, 0, 100), span(2, 10_000, 200), span(3, 20_300, 300)];
        let memory = [
            sample(9_500, 100, 0, false),
            sample(9_900, 100, 1, true),
            sample(19_800, 200, 1, false),
            sample(20_750, 300, 2, true),
            sample(200_000, 300, 2, false),
        ];
        let kills = kernel_kills(&memory, &spans);
        let cycles: Vec<u32> = kills.iter().map(|k| k.cycle).collect();
        assert_eq!(cycles, [1, 2]);
        assert_eq!(kills[1].seen_ms, 20_750);
    }

    #[test]
    fn without_pids_the_life_begun_before_the_rise_is_the_one_killed() {
        let spans = [
            CycleSpan {
                index: 1,
                start_ms: 0,
                pid: None,
            },
            CycleSpan {
                index: 2,
                start_ms: 5_000,
                pid: None,
            },
        ];
        let mut before = sample(4_900, 0, 0, false);
        before.pid = None;
        let mut after = sample(5_400, 0, 1, true);
        after.pid = None;
        let kills = kernel_kills(&[before, after], &spans);
        assert_eq!(kills.len(), 1);
        assert_eq!(kills[0].cycle, 1);
    }

    /// A life with an exit record that read the counter is told by that record alone: its
    /// `oom_kill` 0 beside a sampled rise placed on it is a `kill -9`, not an OOM.
    #[test]
    fn a_life_s_own_exit_record_is_the_account_of_its_end() {
        let mut exit = CaptureRecord::new(9, RecordKind::Exit, 1, 1200);
        exit.signal = Some(9);
        exit.totals.insert("oom_kill".into(), 0);
        let kills = [KernelKill {
            cycle: 1,
            seen_ms: 1100,
        }];
        let stop = CaptureRecord::new(10, RecordKind::Stop, 2, 9000);
        let records = [exit, stop];
        let end = |index: u32, next| {
            cycle_end(&EndEvidence {
                index,
                records: &records,
                kills: &kills,
                last_ms: 1000,
                stopped: index == 1,
                pid: Some(10),
                next,
                cgroup_watched: true,
            })
        };
        assert_eq!(end(1, Some(Some(11))), CycleEnd::Signal { signal: 9 });
        // Life 2 was stopped by the collector; no kill of its own.
        assert_eq!(end(2, None), CycleEnd::CollectorStopped);
    }
}
