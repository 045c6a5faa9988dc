//! The words of a Kubernetes triage: each container's last termination and verdict summary,
//! from the classes, codes and figures the triage found; written into its report before any
//! output.

use crate::analyse::triage::{
    BLIND_RATIO, ContainerTriage, NEAR_LIMIT, ProbePattern, ReplicaPattern, Termination,
    TerminationClass, TriageReport, format_span, trim_ratio,
};

/// Writes every container's termination meaning and verdict summary into a finished triage.
pub fn word_triage(report: &mut TriageReport) {
    for c in report.pods.iter_mut().flat_map(|p| p.containers.iter_mut()) {
        let liveness_kills = c
            .probes
            .as_ref()
            .is_some_and(|p| p.pattern == ProbePattern::LivenessKills);
        if let Some(t) = c.termination.as_mut() {
            t.meaning = termination_meaning(t, liveness_kills);
        }
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

/// How the last termination reads; after Killing for failed liveness probes, the kubelet's
/// kill is named as such, not as an OOM kill or a stop.
fn termination_meaning(t: &Termination, liveness_kills: bool) -> String {
    let reason = t.reason.as_deref().unwrap_or("");
    if liveness_kills {
        match t.class {
            TerminationClass::OomUnflagged | TerminationClass::Killed => {
                return format!(
                    "exit 137 ({}) after Killing for failed liveness probes: the kubelet's \
                     SIGKILL once the grace period ran out, not an OOM kill",
                    t.reason.as_deref().unwrap_or("no reason")
                );
            }
            TerminationClass::Sigterm => {
                return "exit 143 after Killing for failed liveness probes: the process stopped \
                        on the kubelet's SIGTERM"
                    .to_string();
            }
            _ => {}
        }
    }
    match t.class {
        TerminationClass::OomKilled => {
            "OOM kill: the container passed its memory limit and the kernel sent SIGKILL (a \
             `kubectl logs --previous` that ends without an error is consistent with it)"
                .to_string()
        }
        TerminationClass::OomUnflagged => {
            "exit 137 with reason Error: SIGKILL without the OOMKilled flag, which the kubelet \
             does not always set under node pressure; treated as an OOM kill"
                .to_string()
        }
        TerminationClass::Killed if reason == "ContainerStatusUnknown" => {
            "exit 137, ContainerStatusUnknown: the container's state was lost (its node or pod \
             went away); no evidence of what ended it"
                .to_string()
        }
        TerminationClass::Killed => format!(
            "exit 137 ({}): killed with SIGKILL, not flagged as an OOM kill",
            if reason.is_empty() {
                "no reason"
            } else {
                reason
            }
        ),
        TerminationClass::Segfault => {
            "exit 139: SIGSEGV, the process crashed (a bug, not memory)".to_string()
        }
        TerminationClass::Abort => {
            "exit 134: SIGABRT, the process aborted on a fatal error or assertion".to_string()
        }
        TerminationClass::Sigterm => {
            "exit 143: SIGTERM, a controlled stop (kubelet, deploy, preemption), not a death"
                .to_string()
        }
        TerminationClass::Signal => format!(
            "exit {}: ended by signal {}",
            t.exit_code,
            t.exit_code - 128
        ),
        TerminationClass::Completed => {
            "exit 0: the process ended on its own without an error".to_string()
        }
        TerminationClass::Exit => format!(
            "exit {}: the process gave up with an error (read `kubectl logs --previous`)",
            t.exit_code
        ),
    }
}
