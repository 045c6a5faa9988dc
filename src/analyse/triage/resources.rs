//! Requests against limits and workers against the CPU limit, per container: what the
//! scheduler reserves, what the container may use, and the hidden worker multiplier.

use super::kube::{Container, KubeError, Pod, quantity_value};
use super::{CpuFinding, MemoryFinding, UsageFigure, WorkerFigure};

/// Kubernetes' rule: BestEffort without any request or limit, Guaranteed when every container
/// has cpu and memory limits and its requests (defaulting to the limits) equal them.
pub(super) fn derive_qos(pod: &Pod) -> String {
    let resources = pod.spec.containers.iter().map(|c| &c.resources);
    let any = resources.clone().any(|r| {
        ["cpu", "memory"]
            .iter()
            .any(|k| r.requests.contains_key(*k) || r.limits.contains_key(*k))
    });
    if !any {
        return "BestEffort".into();
    }
    let guaranteed = resources.clone().all(|r| {
        ["cpu", "memory"].iter().all(|k| match r.limits.get(*k) {
            None => false,
            Some(limit) => match r.requests.get(*k) {
                None => true,
                Some(request) => same_quantity(request, limit),
            },
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
    .into()
}

fn same_quantity(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (quantity_value(a), quantity_value(b)) {
        (Ok((_, x)), Ok((_, y))) => (x - y).abs() <= f64::EPSILON * x.abs().max(1.0),
        _ => a == b,
    }
}

fn quantity(
    pod: &Pod,
    spec: &Container,
    section: &str,
    key: &str,
) -> Result<Option<(String, f64)>, KubeError> {
    let map = if section == "requests" {
        &spec.resources.requests
    } else {
        &spec.resources.limits
    };
    match map.get(key) {
        None => Ok(None),
        Some(v) => quantity_value(v)
            .map(Some)
            .map_err(|_| KubeError::BadQuantity {
                pod: pod.metadata.name.clone(),
                container: spec.name.clone(),
                field: format!("resources.{section}.{key}"),
                value: v.as_str().map_or_else(|| v.to_string(), str::to_string),
            }),
    }
}

pub(super) fn memory_facts(
    pod: &Pod,
    spec: &Container,
    usage: &[UsageFigure],
) -> Result<MemoryFinding, KubeError> {
    let limit = quantity(pod, spec, "limits", "memory")?;
    let request = quantity(pod, spec, "requests", "memory")?;
    let request_from_limit = request.is_none() && limit.is_some();
    let request = request.or_else(|| limit.clone());
    let ratio = match (&request, &limit) {
        (Some((_, r)), Some((_, l))) if *r > 0.0 => Some(l / r),
        _ => None,
    };
    let used = usage
        .iter()
        .find(|u| u.container == spec.name && u.pod.as_deref() == Some(&pod.metadata.name))
        .or_else(|| {
            usage
                .iter()
                .find(|u| u.container == spec.name && u.pod.is_none())
        });
    let limit_bytes = limit.as_ref().map(|(_, b)| *b as u64);
    Ok(MemoryFinding {
        request: request.as_ref().map(|(t, _)| t.clone()),
        request_bytes: request.as_ref().map(|(_, b)| *b as u64),
        request_from_limit,
        limit: limit.as_ref().map(|(t, _)| t.clone()),
        limit_bytes,
        ratio,
        usage: used.map(|u| u.text.clone()),
        usage_bytes: used.map(|u| u.bytes),
        usage_of_limit: used
            .zip(limit_bytes)
            .filter(|(_, l)| *l > 0)
            .map(|(u, l)| u.bytes as f64 / l as f64),
        growth_bytes_per_min: None,
        growth_basis: None,
        limit_in_s: None,
    })
}

pub fn trim_ratio(r: f64) -> String {
    if (r - r.round()).abs() < 0.05 {
        format!("{}", r.round() as i64)
    } else {
        format!("{r:.1}")
    }
}

/// Envoy's container in Istio and plain Envoy images.
fn is_envoy(spec: &Container) -> bool {
    spec.name == "istio-proxy"
        || spec
            .image
            .as_deref()
            .is_some_and(|i| i.contains("envoy") || i.contains("proxyv2"))
}

pub(super) fn cpu_facts(
    pod: &Pod,
    spec: &Container,
    figures: &[WorkerFigure],
) -> Result<CpuFinding, KubeError> {
    let request = quantity(pod, spec, "requests", "cpu")?.map(|(_, v)| v);
    let limit = quantity(pod, spec, "limits", "cpu")?.map(|(_, v)| v);
    let envoy = is_envoy(spec);
    let given = figures
        .iter()
        .find(|f| f.container.as_deref() == Some(&spec.name))
        .or_else(|| {
            let unnamed = figures.iter().find(|f| f.container.is_none())?;
            let applies = envoy
                || (pod.spec.containers.len() == 1)
                || !pod.spec.containers.iter().any(is_envoy);
            applies.then_some(unnamed)
        });
    let (workers, source) = match given {
        Some(f) => (Some(f.workers), Some("--concurrency".to_string())),
        None => match workers_in_spec(pod, spec, envoy) {
            Some((w, s)) => (Some(w), Some(s)),
            None => (None, None),
        },
    };
    let cores = limit.map(|l| l.ceil().max(1.0));
    let multiplied = matches!((workers, cores), (Some(w), Some(c)) if f64::from(w) > c);
    let per_cpu = workers.zip(limit).map(|(w, l)| f64::from(w) / l.max(1e-3));
    Ok(CpuFinding {
        request_cores: request,
        limit_cores: limit,
        workers,
        workers_source: source,
        workers_per_cpu: per_cpu,
        multiplied,
        envoy,
    })
}

/// A worker count written into the pod: `--concurrency N` in the container's command line,
/// GOMAXPROCS in its environment, or `concurrency` in Istio's proxy config annotation.
fn workers_in_spec(pod: &Pod, spec: &Container, envoy: bool) -> Option<(u32, String)> {
    let words: Vec<&str> = spec
        .command
        .iter()
        .chain(&spec.args)
        .map(String::as_str)
        .collect();
    for (i, w) in words.iter().enumerate() {
        let value = match w.strip_prefix("--concurrency") {
            Some("") => words.get(i + 1).copied(),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(n) = value.and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 0) {
            return Some((n, "container args".into()));
        }
    }
    if let Some(n) = spec
        .env
        .iter()
        .find(|e| e.name == "GOMAXPROCS")
        .and_then(|e| e.value.as_deref()?.trim().parse::<u32>().ok())
    {
        return Some((n, "GOMAXPROCS".into()));
    }
    if envoy {
        let config = pod.metadata.annotations.get("proxy.istio.io/config")?;
        let at = config.find("concurrency")? + "concurrency".len();
        let digits: String = config[at..]
            .trim_start_matches(|c: char| c == '"' || c == ':' || c.is_whitespace())
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let n = digits.parse::<u32>().ok().filter(|&n| n > 0)?;
        return Some((n, "proxy.istio.io/config".into()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::{pod, run};
    use super::*;

    #[test]
    fn qos_is_derived_when_the_status_lacks_it() {
        let burstable = pod(
            r#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[
            {"name":"a","resources":{"requests":{"memory":"128Mi","cpu":"10m"},
             "limits":{"memory":"1Gi","cpu":"2"}}}]}}"#,
        );
        let guaranteed = pod(
            r#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[
            {"name":"a","resources":{"limits":{"memory":"1Gi","cpu":"2"}}}]}}"#,
        );
        let best = pod(
            r#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[
            {"name":"a"}]}}"#,
        );
        assert_eq!(derive_qos(&burstable), "Burstable");
        assert_eq!(derive_qos(&guaranteed), "Guaranteed");
        assert_eq!(derive_qos(&best), "BestEffort");
        let report = run(&[burstable], None, &[]);
        let m = &report.pods[0].containers[0].memory;
        assert_eq!(m.ratio, Some(8.0));
    }

    #[test]
    fn worker_counts_are_found_in_the_pod() {
        let p = pod(r#"{"kind":"Pod","metadata":{"name":"p","annotations":{
              "proxy.istio.io/config":"{\"concurrency\": 16}"}},
            "spec":{"containers":[{"name":"istio-proxy","resources":{"limits":{"cpu":"2"}}},
              {"name":"app","args":["serve","--concurrency=3"],"resources":{"limits":{"cpu":"4"}}},
              {"name":"go","env":[{"name":"GOMAXPROCS","value":"8"}],
               "resources":{"limits":{"cpu":"500m"}}}]}}"#);
        let report = run(&[p], None, &[]);
        let cpu: Vec<_> = report.pods[0].containers.iter().map(|c| &c.cpu).collect();
        assert_eq!(cpu[0].workers, Some(16));
        assert!(cpu[0].multiplied);
        assert_eq!(cpu[1].workers, Some(3));
        assert!(!cpu[1].multiplied);
        assert_eq!(cpu[2].workers_source.as_deref(), Some("GOMAXPROCS"));
        assert!(cpu[2].multiplied);
    }
}
