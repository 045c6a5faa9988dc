//! `triage`: the Kubernetes part of the OOM checklist. Per container of each pod: how often it
//! restarted and how it last died, whether sibling replicas die together or each on its own,
//! what the probe events say, requests against limits, workers against the CPU limit, and a
//! verdict. Pure: documents and figures in, findings out.

pub mod kube;
mod probes;
mod replicas;
mod resources;

pub use resources::trim_ratio;

use serde::Serialize;

use crate::time::parse_rfc3339 as parse_time;
use kube::{Event, KubeError, Pod, Terminated};

/// Sibling replicas whose last deaths lie further apart than this died independently.
const TOGETHER_WITHIN_S: f64 = 120.0;
/// Limits this many times the requests leave scheduling blind to the real use.
pub const BLIND_RATIO: f64 = 2.0;
/// Usage at this share of the limit is one growth spurt from the OOM kill.
pub const NEAR_LIMIT: f64 = 0.9;

/// A container's memory use from outside the pod JSON (`kubectl top pod --containers`).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageFigure {
    /// `None`: every pod's container of that name.
    pub pod: Option<String>,
    pub container: String,
    /// As written (`737Mi`).
    pub text: String,
    pub bytes: u64,
}

/// A known worker count (Envoy's `server.concurrency`, Go's GOMAXPROCS).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerFigure {
    /// `None`: the Envoy container of each pod, or its only container.
    pub container: Option<String>,
    pub workers: u32,
}

pub struct TriageInput<'a> {
    pub pods: &'a [Pod],
    /// `None` when no events file was given (absence of events then proves nothing).
    pub events: Option<&'a [Event]>,
    pub usage: &'a [UsageFigure],
    pub workers: &'a [WorkerFigure],
    /// When the documents and the usage figures were taken (unix ms).
    pub now_ms: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TriageReport {
    pub as_of: String,
    pub events_given: bool,
    /// The span the events cover (Kubernetes keeps them for an hour by default).
    pub events_from: Option<String>,
    pub events_to: Option<String>,
    /// In JSON through `render::worded::TriageJson`, with the words of every container.
    #[serde(skip)]
    pub pods: Vec<PodTriage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Owner {
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PodTriage {
    pub name: String,
    pub namespace: Option<String>,
    pub owner: Option<Owner>,
    pub node: Option<String>,
    pub phase: Option<String>,
    /// `Evicted` and the like, when the pod itself failed.
    pub reason: Option<String>,
    pub qos_class: String,
    /// `status` (as Kubernetes reported it) or `derived` (from the resources).
    pub qos_source: &'static str,
    pub age_s: Option<f64>,
    /// In JSON through `render::worded::PodJson`, with their words.
    #[serde(skip)]
    pub containers: Vec<ContainerTriage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContainerTriage {
    pub name: String,
    pub restarts: u32,
    pub ready: bool,
    /// `running`, `waiting: CrashLoopBackOff`, `terminated`, `unknown`.
    pub state: String,
    pub running_for_s: Option<f64>,
    pub restarts_per_day: Option<f64>,
    // The findings are written to JSON by `render::worded::ContainerJson`, each with its
    // words.
    #[serde(skip)]
    pub termination: Option<Termination>,
    #[serde(skip)]
    pub replicas: Option<ReplicaFinding>,
    #[serde(skip)]
    pub probes: Option<ProbeFinding>,
    #[serde(skip)]
    pub memory: MemoryFinding,
    #[serde(skip)]
    pub cpu: CpuFinding,
    #[serde(skip)]
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TerminationClass {
    /// 137 with reason OOMKilled.
    OomKilled,
    /// 137 with reason Error: the kubelet did not flag it (node pressure); treated as OOM.
    OomUnflagged,
    /// 137 with another reason (ContainerStatusUnknown …).
    Killed,
    /// 139.
    Segfault,
    /// 134.
    Abort,
    /// 143.
    Sigterm,
    /// Another signal (exit code above 128).
    Signal,
    /// Exit code 0.
    Completed,
    /// Any other exit code.
    Exit,
}

impl TerminationClass {
    pub fn is_oom(self) -> bool {
        matches!(
            self,
            TerminationClass::OomKilled | TerminationClass::OomUnflagged
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Termination {
    /// By exit code and reason alone; `meaning` and the verdict also weigh the events.
    pub class: TerminationClass,
    pub exit_code: i32,
    pub reason: Option<String>,
    pub signal: Option<i32>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// How long that run lasted.
    pub lived_s: Option<f64>,
    #[serde(skip)]
    finished_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaPattern {
    /// Several replicas restart and their last deaths are spread out: each dies on its own.
    Staggered,
    /// Several replicas died within a short window: a shared trigger.
    Together,
    /// Several replicas restart; no termination times to compare.
    Several,
    /// Only one replica restarts.
    OnlyOne,
    /// No replica restarts.
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaFinding {
    pub pattern: ReplicaPattern,
    pub owner: String,
    pub replicas: usize,
    pub restarted: usize,
    pub restarts: Vec<u32>,
    /// Replicas whose last death carries the OOMKilled flag.
    pub oom_killed: usize,
    /// From the first to the last of the replicas' last deaths.
    pub spread_s: Option<f64>,
    pub nodes: usize,
    /// The node, when the replicas that restarted all ran on one.
    #[serde(skip)]
    pub only_node: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbePattern {
    /// Only readiness failures: the aftermath of a restart, not its cause.
    ReadinessOnly,
    /// Liveness (or startup) failures and Killing: the kubelet restarts it.
    LivenessKills,
    /// Liveness failures without Killing (yet).
    LivenessFailing,
    /// Killing without failed probes: deletion, eviction or preemption.
    KillingOnly,
    /// No probe events for this container.
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeFinding {
    pub pattern: ProbePattern,
    pub readiness_failures: u32,
    pub liveness_failures: u32,
    pub startup_failures: u32,
    pub killing: u32,
    pub back_off: u32,
    /// `OOMKilling` events the kernel's OOM killer left on the pod's node.
    pub node_oom_events: u32,
    /// Whether the events reach back to the last death (false: they cannot explain it).
    pub cover_last_death: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryFinding {
    pub request: Option<String>,
    pub request_bytes: Option<u64>,
    /// True when no request is set and Kubernetes takes the limit as the request.
    pub request_from_limit: bool,
    pub limit: Option<String>,
    pub limit_bytes: Option<u64>,
    /// limit / request.
    pub ratio: Option<f64>,
    pub usage: Option<String>,
    pub usage_bytes: Option<u64>,
    pub usage_of_limit: Option<f64>,
    /// Growth estimated from usage against time since start (several replicas: a fit).
    pub growth_bytes_per_min: Option<f64>,
    /// `replicas` (fitted over sibling replicas of different ages) or `since-start`.
    pub growth_basis: Option<&'static str>,
    pub limit_in_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CpuFinding {
    pub request_cores: Option<f64>,
    pub limit_cores: Option<f64>,
    pub workers: Option<u32>,
    /// Where the worker count came from.
    pub workers_source: Option<String>,
    pub workers_per_cpu: Option<f64>,
    /// True when the workers outnumber the CPUs of the limit (the hidden multiplier).
    pub multiplied: bool,
    /// The container is an Envoy (Istio's proxy or an Envoy image).
    #[serde(skip)]
    pub envoy: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `oom`, `liveness-kill`, `crash`, `killed`, `sigterm`, `exited`, `exit-code`,
    /// `unknown`, `no-restarts`.
    pub code: &'static str,
}

/// Triage of every container of every pod. Fails only on a resource quantity that does not
/// parse (the verdicts would rest on it).
pub fn triage(input: &TriageInput) -> Result<TriageReport, KubeError> {
    let mut pods = Vec::with_capacity(input.pods.len());
    for pod in input.pods {
        pods.push(pod_facts(pod, input)?);
    }
    let window = input
        .events
        .map(probes::events_window)
        .unwrap_or((None, None));
    replicas::replicas(input.pods, &mut pods);
    replicas::usage_growth(&mut pods);
    for (pod, triage) in input.pods.iter().zip(pods.iter_mut()) {
        for c in &mut triage.containers {
            if let Some(events) = input.events {
                c.probes = Some(probes::probes(
                    pod,
                    &c.name,
                    events,
                    window.0,
                    c.termination.as_ref(),
                ));
            }
            c.verdict = verdict(c);
        }
    }
    Ok(TriageReport {
        as_of: crate::time::rfc3339(input.now_ms),
        events_given: input.events.is_some(),
        events_from: window.0.map(crate::time::rfc3339),
        events_to: window.1.map(crate::time::rfc3339),
        pods,
    })
}

fn pod_facts(pod: &Pod, input: &TriageInput) -> Result<PodTriage, KubeError> {
    let now = input.now_ms;
    let age_s = pod
        .metadata
        .creation_timestamp
        .as_deref()
        .and_then(parse_time)
        .map(|t| seconds(now - t));
    let (qos_class, qos_source) = match &pod.status.qos_class {
        Some(q) if !q.is_empty() => (q.clone(), "status"),
        _ => (resources::derive_qos(pod), "derived"),
    };
    let mut containers = Vec::new();
    for spec in &pod.spec.containers {
        let status = pod.status_of(&spec.name);
        let restarts = status.map_or(0, |s| s.restart_count);
        let state = match status.map(|s| &s.state) {
            None => "unknown".to_string(),
            Some(s) if s.running.is_some() => "running".to_string(),
            Some(s) if s.terminated.is_some() => "terminated".to_string(),
            Some(s) => match s.waiting.as_ref().and_then(|w| w.reason.as_deref()) {
                Some(r) => format!("waiting: {r}"),
                None => "waiting".to_string(),
            },
        };
        let running_for_s = status
            .and_then(|s| s.state.running.as_ref())
            .and_then(|r| r.started_at.as_deref())
            .and_then(parse_time)
            .map(|t| seconds(now - t));
        let termination = status
            .and_then(|s| {
                s.state
                    .terminated
                    .as_ref()
                    .or(s.last_state.terminated.as_ref())
            })
            .map(classify);
        let restarts_per_day = age_s
            .filter(|&a| a >= 3600.0 && restarts > 0)
            .map(|a| f64::from(restarts) / (a / 86_400.0));
        containers.push(ContainerTriage {
            name: spec.name.clone(),
            restarts,
            ready: status.is_some_and(|s| s.ready),
            state,
            running_for_s,
            restarts_per_day,
            termination,
            replicas: None,
            probes: None,
            memory: resources::memory_facts(pod, spec, input.usage)?,
            cpu: resources::cpu_facts(pod, spec, input.workers)?,
            verdict: Verdict { code: "unknown" },
        });
    }
    Ok(PodTriage {
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        owner: pod.owner().map(|o| Owner {
            kind: o.kind.clone(),
            name: o.name.clone(),
        }),
        node: pod.spec.node_name.clone(),
        phase: pod.status.phase.clone(),
        reason: pod.status.reason.clone(),
        qos_class,
        qos_source,
        age_s,
        containers,
    })
}

fn seconds(ms: i64) -> f64 {
    (ms.max(0) as f64) / 1000.0
}

fn classify(t: &Terminated) -> Termination {
    let reason = t.reason.as_deref().unwrap_or("");
    let class = match (t.exit_code, reason) {
        (_, "OOMKilled") => TerminationClass::OomKilled,
        (137, "Error") => TerminationClass::OomUnflagged,
        (137, _) => TerminationClass::Killed,
        (139, _) => TerminationClass::Segfault,
        (134, _) => TerminationClass::Abort,
        (143, _) => TerminationClass::Sigterm,
        (0, _) => TerminationClass::Completed,
        (code, _) if code > 128 => TerminationClass::Signal,
        _ => TerminationClass::Exit,
    };
    let started = t.started_at.as_deref().and_then(parse_time);
    let finished = t.finished_at.as_deref().and_then(parse_time);
    Termination {
        class,
        exit_code: t.exit_code,
        reason: t.reason.clone(),
        signal: t.signal.filter(|&s| s != 0),
        started_at: t.started_at.clone(),
        finished_at: t.finished_at.clone(),
        lived_s: started.zip(finished).map(|(a, b)| seconds(b - a)),
        finished_ms: finished,
    }
}

/// The verdict's code (`render::triage_words::verdict_summary` words it).
fn verdict(c: &ContainerTriage) -> Verdict {
    let liveness = c
        .probes
        .as_ref()
        .is_some_and(|p| p.pattern == ProbePattern::LivenessKills);
    let class = c.termination.as_ref().map(|t| t.class);
    let code = if c.restarts == 0 && class.is_none() {
        "no-restarts"
    } else if liveness && class != Some(TerminationClass::OomKilled) {
        "liveness-kill"
    } else {
        match class {
            Some(TerminationClass::OomKilled | TerminationClass::OomUnflagged) => "oom",
            Some(TerminationClass::Killed) => "killed",
            Some(
                TerminationClass::Segfault | TerminationClass::Abort | TerminationClass::Signal,
            ) => "crash",
            Some(TerminationClass::Sigterm) => "sigterm",
            Some(TerminationClass::Completed) => "exited",
            Some(TerminationClass::Exit) => "exit-code",
            None => "unknown",
        }
    };
    Verdict { code }
}

/// A span of time as people say it: `45s`, `12m 5s`, `3h 12m`, `228d`.
pub fn format_span(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 if s % 3600 / 60 == 0 => format!("{}h", s / 3600),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ if s < 3 * 86_400 && s % 86_400 / 3600 != 0 => {
            format!("{}d {}h", s / 86_400, s % 86_400 / 3600)
        }
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn pod(json: &str) -> Pod {
        kube::parse_pods(json.as_bytes()).unwrap().remove(0)
    }

    pub(super) fn run(
        pods: &[Pod],
        events: Option<&[Event]>,
        usage: &[UsageFigure],
    ) -> TriageReport {
        triage(&TriageInput {
            pods,
            events,
            usage,
            workers: &[],
            now_ms: parse_time("2024-05-02T12:00:00Z").unwrap(),
        })
        .unwrap()
    }

    fn terminated(code: i32, reason: &str) -> String {
        format!(
            r#"{{"kind":"Pod","metadata":{{"name":"p"}},
            "spec":{{"containers":[{{"name":"app"}}]}},
            "status":{{"containerStatuses":[{{"name":"app","restartCount":3,
              "state":{{"running":{{"startedAt":"2024-05-02T11:50:00Z"}}}},
              "lastState":{{"terminated":{{"exitCode":{code},"reason":"{reason}",
                "startedAt":"2024-05-02T11:20:00Z","finishedAt":"2024-05-02T11:49:50Z"}}}}}}]}}}}"#
        )
    }

    #[test]
    fn exit_codes_are_classified() {
        for (code, reason, class, verdict) in [
            (137, "OOMKilled", TerminationClass::OomKilled, "oom"),
            (137, "Error", TerminationClass::OomUnflagged, "oom"),
            (
                137,
                "ContainerStatusUnknown",
                TerminationClass::Killed,
                "killed",
            ),
            (139, "Error", TerminationClass::Segfault, "crash"),
            (134, "Error", TerminationClass::Abort, "crash"),
            (143, "Error", TerminationClass::Sigterm, "sigterm"),
            (0, "Completed", TerminationClass::Completed, "exited"),
            (1, "Error", TerminationClass::Exit, "exit-code"),
        ] {
            let report = run(&[pod(&terminated(code, reason))], None, &[]);
            let c = &report.pods[0].containers[0];
            let t = c.termination.as_ref().unwrap();
            assert_eq!(t.class, class, "{code} {reason}");
            assert_eq!(c.verdict.code, verdict, "{code} {reason}");
            assert_eq!(t.lived_s, Some(1790.0));
        }
    }

    #[test]
    fn spans_read_like_people_write_them() {
        assert_eq!(format_span(45.0), "45s");
        assert_eq!(format_span(725.0), "12m 5s");
        assert_eq!(format_span(1200.0), "20m");
        assert_eq!(format_span(3.0 * 3600.0 + 720.0), "3h 12m");
        assert_eq!(format_span(228.0 * 86_400.0 + 5000.0), "228d");
    }
}
