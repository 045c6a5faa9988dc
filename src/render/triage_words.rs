//! The words of a Kubernetes triage: each container's last termination, probe events,
//! replicas, memory and verdict, from the classes, patterns, codes and figures the triage
//! found, made from the finished triage whenever an output needs them.

use crate::analyse::triage::{
    BLIND_RATIO, ContainerTriage, CpuFinding, MemoryFinding, NEAR_LIMIT, ProbeFinding,
    ProbePattern, ReplicaFinding, ReplicaPattern, Termination, TerminationClass, format_span,
    trim_ratio,
};
use crate::units::format_bytes;

/// The sentences of one container's triage: what each finding means, and the verdict.
pub struct ContainerWords {
    pub termination: Option<String>,
    pub replicas: Option<String>,
    pub probes: Option<String>,
    pub memory: String,
    /// The worker count against the CPU limit, when there is one to tell.
    pub cpu: Option<String>,
    pub verdict: String,
}

/// The words of one container of a pod (its memory is read against the pod's QoS class).
pub fn container_words(c: &ContainerTriage, qos_class: &str) -> ContainerWords {
    let liveness_kills = c
        .probes
        .as_ref()
        .is_some_and(|p| p.pattern == ProbePattern::LivenessKills);
    ContainerWords {
        termination: c
            .termination
            .as_ref()
            .map(|t| termination_meaning(t, liveness_kills)),
        replicas: c.replicas.as_ref().map(replicas_meaning),
        probes: c.probes.as_ref().map(probes_meaning),
        memory: memory_meaning(&c.memory, qos_class),
        cpu: cpu_meaning(&c.cpu),
        verdict: verdict_summary(c),
    }
}

/// The container's verdict in words, beside its code.
pub fn verdict_summary(c: &ContainerTriage) -> String {
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

/// The memory request and limit, the use and the growth, and what they mean for the kill.
fn memory_meaning(m: &MemoryFinding, qos: &str) -> String {
    let Some(limit) = &m.limit else {
        return match &m.usage {
            Some(u) => format!(
                "no memory limit: it uses {u} and can take the node's memory, so the node's \
                 OOM killer or eviction decides when it dies"
            ),
            None => "no memory limit: it can take the node's memory, so the node's OOM killer \
                     or eviction decides when it dies"
                .to_string(),
        };
    };
    let request = m.request.as_deref().unwrap_or(limit);
    let mut s = match m.ratio {
        Some(r) if r >= BLIND_RATIO => {
            let use_part = match (&m.usage, m.usage_of_limit) {
                (Some(u), Some(share)) => format!(
                    "a container that uses {u} ({:.0} % of its {limit} limit)",
                    share * 100.0
                ),
                _ => format!(
                    "a container allowed {limit}; its real use is not in the pod JSON (take it \
                     from `kubectl top pod --containers` and pass --usage CONTAINER=SIZE)"
                ),
            };
            format!(
                "{}x: the scheduler reserves {request} for {use_part}; QoS {qos}: scheduling \
                 is blind to the real use",
                trim_ratio(r)
            )
        }
        Some(r) if r > 1.0 + 1e-9 => {
            format!("requests {request}, limits {limit} ({}x)", trim_ratio(r))
        }
        _ if m.request_from_limit => {
            format!("limit {limit}, no request: Kubernetes reserves the limit")
        }
        _ => format!("requests = limits = {limit}: the scheduler reserves what it may use"),
    };
    if m.ratio.is_some_and(|r| r < BLIND_RATIO) {
        if let (Some(u), Some(share)) = (&m.usage, m.usage_of_limit) {
            s.push_str(&format!("; uses {u} ({:.0} % of the limit)", share * 100.0));
        }
    }
    if m.usage_of_limit.is_some_and(|u| u >= NEAR_LIMIT) {
        s.push_str("; at the limit: the next growth is an OOM kill");
    }
    if let Some(rate) = m.growth_bytes_per_min {
        let rate = format_bytes(rate as i64);
        if m.growth_basis == Some("replicas") {
            s.push_str(&format!(
                "; grows about {rate}/min (fitted over the replicas' usage against their uptime)"
            ));
            if let Some(t) = m.limit_in_s {
                s.push_str(&format!(", the limit in about {}", format_span(t)));
            }
        } else {
            // From one pod the start-up footprint is unknown: an upper bound only.
            s.push_str(&format!(
                "; grows at most {rate}/min (its usage over its uptime, as if it started from \
                 nothing)"
            ));
            if let Some(t) = m.limit_in_s {
                s.push_str(&format!(", the limit no sooner than in {}", format_span(t)));
            }
        }
    }
    s
}

/// What the probe and kill events say about the deaths.
fn probes_meaning(f: &ProbeFinding) -> String {
    let kill_probe_failures = f.liveness_failures + f.startup_failures;
    let mut meaning = match f.pattern {
        ProbePattern::LivenessKills => format!(
            "{} failed liveness/startup probes and {} Killing{}: the kubelet restarts it; \
             look at the probe (timeout, threshold) and the container's latency",
            kill_probe_failures,
            f.killing,
            if f.readiness_failures > 0 {
                format!(" (and {} failed readiness probes)", f.readiness_failures)
            } else {
                String::new()
            }
        ),
        ProbePattern::LivenessFailing => format!(
            "{kill_probe_failures} failed liveness/startup probes, no Killing yet: the \
             kubelet will restart it once the failure threshold is reached"
        ),
        ProbePattern::ReadinessOnly => format!(
            "only readiness failures ({}), no Liveness probe failed, no Killing: the kubelet \
             is not killing it, it dies by itself; readiness fails while it starts again, a \
             consequence, not the cause",
            f.readiness_failures
        ),
        ProbePattern::KillingOnly => format!(
            "{} Killing without failed probes: stopped by the kubelet for a deletion, an \
             eviction or a preemption",
            f.killing
        ),
        ProbePattern::None => "no probe events for this container".to_string(),
    };
    if f.back_off > 0 {
        meaning.push_str(&format!(
            "; {} BackOff (restarting in a crash loop)",
            f.back_off
        ));
    }
    if f.node_oom_events > 0 {
        meaning.push_str(&format!(
            "; its node logged {} OOMKilling events",
            f.node_oom_events
        ));
    }
    if f.cover_last_death == Some(false) {
        meaning.push_str(
            "; the events begin after its last death, so they cannot show what killed it \
             (Kubernetes keeps events for one hour by default)",
        );
    }
    meaning
}

/// How the replicas of one owner restart: none, one, together, staggered.
fn replicas_meaning(f: &ReplicaFinding) -> String {
    let (owner, n, r) = (&f.owner, f.replicas, f.restarted);
    match (f.pattern, f.spread_s) {
        (ReplicaPattern::None, _) => format!("none of the {n} replicas of {owner} restarts"),
        (ReplicaPattern::OnlyOne, _) => format!(
            "only 1 of {n} replicas of {owner} restarts: look at what is particular to it (its \
             node, its share of the traffic)"
        ),
        (ReplicaPattern::Together, Some(s)) => format!(
            "{r} of {n} replicas of {owner} last died within {} of each other{}: a shared \
             trigger (node pressure, a config push, a dependency), not each on its own",
            format_span(s),
            match &f.only_node {
                Some(node) => format!(", all on node {node}"),
                None => String::new(),
            }
        ),
        (ReplicaPattern::Staggered, Some(s)) => format!(
            "{r} of {n} replicas of {owner} restart, their last deaths spread over {}{}: each \
             dies on its own, so the death is internal (OOM or crash), not a rollout or one node",
            format_span(s),
            if f.nodes > 1 {
                format!(" on {} nodes", f.nodes)
            } else {
                String::new()
            }
        ),
        _ => format!(
            "{r} of {n} replicas of {owner} restart (no termination times to tell whether \
             together or staggered)"
        ),
    }
}

/// The worker count against the CPU limit, when either is known (or the container is an Envoy,
/// whose unknown worker count matters).
fn cpu_meaning(c: &CpuFinding) -> Option<String> {
    match (c.workers, c.limit_cores) {
        (Some(w), Some(l)) if c.multiplied => Some(format!(
            "{w} workers on a {} CPU limit ({}x): the worker count follows the node's cores, \
             not the limit, and each worker keeps its own copy of per-worker state{}; align it \
             with the limit",
            trim_ratio(l),
            trim_ratio(f64::from(w) / l),
            if c.envoy {
                " (Envoy replicates cluster state per worker)"
            } else {
                ""
            }
        )),
        (Some(w), Some(l)) => Some(format!("{w} workers within a {} CPU limit", trim_ratio(l))),
        (Some(w), None) => Some(format!("{w} workers, no CPU limit")),
        (None, _) if c.envoy => Some(
            "worker count unknown: an Envoy with concurrency 0 or unset may run one worker per \
             core of the node, whatever its CPU limit; read server.concurrency from its admin \
             port and pass --concurrency N"
                .to_string(),
        ),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::triage::kube;
    use crate::analyse::triage::{TriageInput, UsageFigure, triage};
    use crate::time::parse_rfc3339 as parse_time;

    /// The memory words of the first container of the first pod.
    fn memory_words(pods: &str, usage: &[UsageFigure]) -> String {
        let pods = kube::parse_pods(pods.as_bytes()).unwrap();
        let report = triage(&TriageInput {
            pods: &pods,
            events: None,
            usage,
            workers: &[],
            now_ms: parse_time("2024-05-02T12:00:00Z").unwrap(),
        })
        .unwrap();
        let pod = &report.pods[0];
        container_words(&pod.containers[0], &pod.qos_class).memory
    }

    #[test]
    fn limits_far_above_requests_say_the_scheduler_is_blind() {
        let burstable = r#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[
            {"name":"a","resources":{"requests":{"memory":"128Mi","cpu":"10m"},
             "limits":{"memory":"1Gi","cpu":"2"}}}]}}"#;
        let m = memory_words(burstable, &[]);
        assert!(m.starts_with("8x: the scheduler reserves 128Mi"), "{m}");
    }

    #[test]
    fn the_use_of_replicas_is_said_with_its_share_of_the_limit() {
        // The field report: 737Mi 32 min after a restart, 424Mi 7 min after.
        let make = |name: &str, started: &str| {
            format!(
                r#"{{"kind":"Pod","metadata":{{"name":"{name}","ownerReferences":[
                  {{"kind":"ReplicaSet","name":"gw","controller":true}}]}},
                "spec":{{"containers":[{{"name":"istio-proxy","resources":{{
                  "requests":{{"memory":"128Mi"}},"limits":{{"memory":"1Gi"}}}}}}]}},
                "status":{{"containerStatuses":[{{"name":"istio-proxy","restartCount":1,
                  "state":{{"running":{{"startedAt":"{started}"}}}}}}]}}}}"#
            )
        };
        let list = format!(
            r#"{{"kind":"List","items":[{},{}]}}"#,
            make("a", "2024-05-02T11:28:00Z"),
            make("b", "2024-05-02T11:53:00Z")
        );
        let usage =
            [("a", "737Mi", 737 << 20), ("b", "424Mi", 424 << 20)].map(|(pod, text, bytes)| {
                UsageFigure {
                    pod: Some(pod.into()),
                    container: "istio-proxy".into(),
                    text: text.into(),
                    bytes,
                }
            });
        let m = memory_words(&list, &usage);
        assert!(m.contains("uses 737Mi (72 % of its 1Gi limit)"), "{m}");
    }
}
