//! The words of a Kubernetes triage: each container's verdict summary, from the code and the
//! figures the triage found. Written into its report before any output.

use crate::analyse::triage::{
    BLIND_RATIO, ContainerTriage, NEAR_LIMIT, ProbePattern, ReplicaPattern, TerminationClass,
    TriageReport, format_span, trim_ratio,
};

/// Writes every container's verdict summary into a finished triage.
pub fn word_triage(report: &mut TriageReport) {
    for c in report.pods.iter_mut().flat_map(|p| p.containers.iter_mut()) {
        c.verdict.summary = verdict_summary(c);
    }
}

fn verdict_summary(c: &ContainerTriage) -> String {
    let probes = c.probes.as_ref();
    let class = c.termination.as_ref().map(|t| t.class);
    let limit = c.memory.limit.as_deref();
    let code = c.verdict.code;
    let first = match code {
        "no-restarts" => "no restarts".to_string(),
        "liveness-kill" => "restarted by the kubelet after failed liveness probes: a probe or \
                            latency problem first, memory only if the process stalls near its \
                            limit"
            .to_string(),
        _ => match class {
            Some(TerminationClass::OomKilled) => match limit {
                Some(l) => format!("OOM-killed at its {l} memory limit"),
                None => "OOM-killed".to_string(),
            },
            Some(TerminationClass::OomUnflagged) => {
                match c.replicas.as_ref().map_or(0, |r| r.oom_killed) {
                    0 => "killed with exit 137 (reason Error): treated as an OOM kill under node \
                          pressure"
                        .to_string(),
                    n => format!(
                        "killed with exit 137 (reason Error) while {n} sibling replica{} \
                         OOMKilled: the same OOM, without the flag",
                        if n == 1 { " was" } else { "s were" }
                    ),
                }
            }
            Some(TerminationClass::Killed) => {
                "killed with SIGKILL, not flagged as an OOM kill".to_string()
            }
            Some(TerminationClass::Segfault) => {
                "crashed with SIGSEGV (exit 139): a bug, not memory".to_string()
            }
            Some(TerminationClass::Abort) => {
                "aborted with SIGABRT (exit 134): a fatal error, not memory".to_string()
            }
            Some(TerminationClass::Signal) => format!(
                "ended by signal {}",
                c.termination.as_ref().map_or(0, |t| t.exit_code - 128)
            ),
            Some(TerminationClass::Sigterm) => {
                "stopped with SIGTERM (exit 143): a controlled stop, not a death".into()
            }
            Some(TerminationClass::Completed) => "exited on its own with code 0".to_string(),
            Some(TerminationClass::Exit) => format!(
                "exited with code {}: the application gave up",
                c.termination.as_ref().map_or(0, |t| t.exit_code)
            ),
            None => format!("{} restarts but no termination recorded", c.restarts),
        },
    };
    let mut parts = vec![first];
    if c.restarts > 0 {
        if let Some(r) = &c.replicas {
            match r.pattern {
                ReplicaPattern::Staggered => parts.push(format!(
                    "{} of {} replicas die on their own, staggered: internal, not a rollout",
                    r.restarted, r.replicas
                )),
                ReplicaPattern::Together => parts.push(format!(
                    "{} of {} replicas died together: look for a shared trigger",
                    r.restarted, r.replicas
                )),
                _ => {}
            }
        }
        if probes.is_some_and(|p| p.pattern == ProbePattern::ReadinessOnly) {
            parts.push("readiness failures are the aftermath, not the cause".to_string());
        }
        if probes.is_none() && class == Some(TerminationClass::OomUnflagged) {
            parts.push(
                "without events a liveness kill, which also ends in 137, is not ruled out"
                    .to_string(),
            );
        }
    }
    let oomish = code == "oom" || code == "no-restarts";
    if oomish {
        if let (Some(r), Some(req), Some(l)) = (c.memory.ratio, &c.memory.request, limit) {
            if r >= BLIND_RATIO {
                parts.push(format!(
                    "requests {req} against limits {l} ({}x): scheduling is blind to its real use",
                    trim_ratio(r)
                ));
            }
        }
        if c.memory.usage_of_limit.is_some_and(|u| u >= NEAR_LIMIT) {
            parts.push("its usage is at the limit".to_string());
        }
        let fitted = c.memory.growth_basis == Some("replicas");
        if let Some(t) = c.memory.limit_in_s.filter(|_| fitted) {
            parts.push(format!(
                "at its growth rate the limit is {} away",
                format_span(t)
            ));
        }
    }
    if c.cpu.multiplied {
        if let (Some(w), Some(l)) = (c.cpu.workers, c.cpu.limit_cores) {
            parts.push(format!(
                "{w} workers on a {} CPU limit multiply its per-worker memory",
                trim_ratio(l)
            ));
        }
    }
    parts.join("; ")
}
