//! What the events say about a container: readiness failures alone are the aftermath of a
//! restart; liveness failures with Killing mean the kubelet restarts it.

use super::kube::{Event, Pod};
use super::{ProbeFinding, ProbePattern, Termination};

/// The time span the events cover.
pub(super) fn events_window(events: &[Event]) -> (Option<i64>, Option<i64>) {
    let first = events.iter().filter_map(|e| e.first_ms.or(e.last_ms)).min();
    let last = events.iter().filter_map(|e| e.last_ms.or(e.first_ms)).max();
    (first, last)
}

pub(super) fn probes(
    pod: &Pod,
    container: &str,
    events: &[Event],
    events_from: Option<i64>,
    termination: Option<&Termination>,
) -> ProbeFinding {
    let single = pod.spec.containers.len() == 1;
    let namespace_ok = |e: &Event| match (e.namespace.as_deref(), pod.metadata.namespace.as_deref())
    {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let mine = events.iter().filter(|e| {
        e.object_kind == "Pod"
            && e.object_name == pod.metadata.name
            && namespace_ok(e)
            && match e.container.as_deref() {
                Some(c) => c == container,
                None => single,
            }
    });
    let mut f = ProbeFinding {
        pattern: ProbePattern::None,
        readiness_failures: 0,
        liveness_failures: 0,
        startup_failures: 0,
        killing: 0,
        back_off: 0,
        node_oom_events: 0,
        cover_last_death: None,
    };
    let mut probe_kills = 0;
    for e in mine {
        let m = e.message.as_str();
        match e.reason.as_str() {
            "Unhealthy" if m.starts_with("Readiness probe") => f.readiness_failures += e.count,
            "Unhealthy" if m.starts_with("Liveness probe") => f.liveness_failures += e.count,
            "Unhealthy" if m.starts_with("Startup probe") => f.startup_failures += e.count,
            "Killing" => {
                f.killing += e.count;
                if m.contains("failed liveness probe") || m.contains("failed startup probe") {
                    probe_kills += e.count;
                }
            }
            "BackOff" => f.back_off += e.count,
            _ => {}
        }
    }
    if let Some(node) = pod.spec.node_name.as_deref() {
        f.node_oom_events = events
            .iter()
            .filter(|e| e.object_kind == "Node" && e.object_name == node)
            .filter(|e| e.reason == "OOMKilling" || e.reason == "SystemOOM")
            .map(|e| e.count)
            .sum();
    }
    let died = termination.and_then(|t| t.finished_ms);
    f.cover_last_death = died.zip(events_from).map(|(d, from)| from <= d);
    let kill_probe_failures = f.liveness_failures + f.startup_failures;
    f.pattern = if probe_kills > 0 || (kill_probe_failures > 0 && f.killing > 0) {
        ProbePattern::LivenessKills
    } else if kill_probe_failures > 0 {
        ProbePattern::LivenessFailing
    } else if f.readiness_failures > 0 && f.killing == 0 {
        ProbePattern::ReadinessOnly
    } else if f.killing > 0 {
        ProbePattern::KillingOnly
    } else {
        ProbePattern::None
    };
    f
}
