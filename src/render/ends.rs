//! The fixed words for how a boot cycle ended ([`CycleEnd`]), shared by every report, the
//! growth verdicts and the charts, so one end reads the same everywhere.

use crate::analyse::ends::CycleEnd;
use crate::store::CaptureRecord;

fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// "OOM-killed", "ended by signal 2 (SIGINT)", "restarted itself (exited with code 1)", …
pub fn end_words(end: &CycleEnd) -> String {
    match end {
        CycleEnd::OomKilled => "OOM-killed".into(),
        CycleEnd::Signal { signal } => match signal_name(*signal) {
            Some(name) => format!("ended by signal {signal} ({name})"),
            None => format!("ended by signal {signal}"),
        },
        CycleEnd::Exited { code } => format!("exited with code {code}"),
        CycleEnd::RestartedItself { exit_code: None } => "restarted itself".into(),
        CycleEnd::RestartedItself {
            exit_code: Some(code),
        } => format!("restarted itself (exited with code {code})"),
        CycleEnd::CollectorStopped => "collector stopped".into(),
        CycleEnd::StoppedAnswering => "stopped answering, cause unknown".into(),
        CycleEnd::StillAnswering => "still answering at the end of the run".into(),
        CycleEnd::RecordingEnded => "still answering when its recording ended".into(),
    }
}

/// The evidence of one process's end as it is seen live: its exit status and whether the
/// cgroup's OOM-kill counter (or `run`'s watchdog) rose with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    pub watchdog_killed: bool,
}

impl ProcessEnd {
    /// An `exit` record's evidence: its status and its `oom_kill` / `watchdog_kill` totals.
    pub fn of_record(record: &CaptureRecord) -> Self {
        let rose = |name: &str| record.totals.get(name).is_some_and(|&k| k > 0);
        ProcessEnd {
            exit_code: record.exit_code,
            signal: record.signal,
            oom_killed: rose("oom_kill"),
            watchdog_killed: rose("watchdog_kill"),
        }
    }
}

/// "OOM-killed (signal 9, the cgroup's oom_kill rose)", "killed by signal 15 (SIGTERM)", …:
/// one wording for the line `collect`, `run` and `watch` print as a process ends, so the same
/// evidence reads the same whichever command saw it.
pub fn process_end_words(end: &ProcessEnd) -> String {
    match (end.exit_code, end.signal) {
        (_, Some(9)) if end.oom_killed => {
            "OOM-killed (signal 9, the cgroup's oom_kill rose)".into()
        }
        (_, Some(9)) if end.watchdog_killed => {
            "killed by the watchdog (signal 9, RSS past the limit)".into()
        }
        (_, Some(s)) => match signal_name(s) {
            Some(name) => format!("killed by signal {s} ({name})"),
            None => format!("killed by signal {s}"),
        },
        (Some(c), _) => format!("exited with code {c}"),
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_end_reads_from_its_evidence() {
        let mut r = CaptureRecord::new(9, crate::store::RecordKind::Exit, 3, 0);
        r.signal = Some(9);
        r.totals.insert("oom_kill".into(), 1);
        let words = |r: &CaptureRecord| process_end_words(&ProcessEnd::of_record(r));
        assert_eq!(
            words(&r),
            "OOM-killed (signal 9, the cgroup's oom_kill rose)"
        );
        r.totals.insert("oom_kill".into(), 0);
        assert_eq!(words(&r), "killed by signal 9 (SIGKILL)");
        r.totals.insert("watchdog_kill".into(), 1);
        assert_eq!(
            words(&r),
            "killed by the watchdog (signal 9, RSS past the limit)"
        );
        r.signal = None;
        r.exit_code = Some(0);
        assert_eq!(words(&r), "exited with code 0");
    }

    #[test]
    fn each_end_has_its_words() {
        let cases = [
            (CycleEnd::OomKilled, "OOM-killed"),
            (CycleEnd::Signal { signal: 2 }, "ended by signal 2 (SIGINT)"),
            (CycleEnd::Signal { signal: 40 }, "ended by signal 40"),
            (CycleEnd::Exited { code: 3 }, "exited with code 3"),
            (
                CycleEnd::RestartedItself { exit_code: None },
                "restarted itself",
            ),
            (
                CycleEnd::RestartedItself { exit_code: Some(1) },
                "restarted itself (exited with code 1)",
            ),
            (CycleEnd::CollectorStopped, "collector stopped"),
            (
                CycleEnd::StoppedAnswering,
                "stopped answering, cause unknown",
            ),
            (
                CycleEnd::StillAnswering,
                "still answering at the end of the run",
            ),
            (
                CycleEnd::RecordingEnded,
                "still answering when its recording ended",
            ),
        ];
        for (end, words) in cases {
            assert_eq!(end_words(&end), words);
        }
    }
}
