//! The fixed words for how a boot cycle ended ([`CycleEnd`]), shared by every report, the
//! growth verdicts and the charts, so one end reads the same everywhere.

use crate::analyse::ends::CycleEnd;

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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for (end, words) in cases {
            assert_eq!(end_words(&end), words);
        }
    }
}
