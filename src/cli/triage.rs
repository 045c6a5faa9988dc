//! `heapwatch triage POD.json [--events EVENTS.json]`: the Kubernetes part of the OOM
//! checklist from `kubectl get pod -o json` (a Pod or a List) and `kubectl get events -o json`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::triage::kube::{self, Event, KubeError, Pod};
use heapwatch::analyse::triage::{self, TriageInput, UsageFigure, WorkerFigure};
use heapwatch::render::triage as render;

use super::{CliError, emit};

#[derive(clap::Args)]
pub struct Args {
    /// `kubectl get pod NAME -o json` (a Pod) or `kubectl get pods -l … -o json` (a List).
    pod: PathBuf,
    /// `kubectl get events -n NS -o json`: tells liveness kills from readiness noise.
    #[arg(long, value_name = "EVENTS.json")]
    events: Option<PathBuf>,
    /// A container's memory use from `kubectl top pod --containers` (e.g. istio-proxy=737Mi,
    /// or POD/CONTAINER=737Mi for one pod of a List). Repeatable.
    #[arg(long, value_name = "[POD/]CONTAINER=SIZE", value_parser = parse_usage)]
    usage: Vec<UsageFigure>,
    /// A known worker count, e.g. Envoy's server.concurrency (16, or istio-proxy=16), to
    /// compare with the CPU limit. Without a container name it applies to the Envoy container.
    #[arg(long, value_name = "[CONTAINER=]N", value_parser = parse_workers)]
    concurrency: Vec<WorkerFigure>,
    /// When the pod JSON and the usage were taken (RFC 3339), for ages and growth estimates.
    /// Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_at)]
    at: Option<i64>,
    /// JSON (with "schema": 1) instead of the checklist text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let pods: Vec<Pod> = read(&args.pod, kube::parse_pods)?;
    let events: Option<Vec<Event>> = match &args.events {
        Some(path) => Some(read(path, kube::parse_events)?),
        None => None,
    };
    let now_ms = args.at.unwrap_or_else(heapwatch::time::now_ms);
    let input = TriageInput {
        pods: &pods,
        events: events.as_deref(),
        usage: &args.usage,
        workers: &args.concurrency,
        now_ms,
    };
    let shown = args.pod.display().to_string();
    let report = triage::triage(&input).map_err(|e| CliError::Usage(format!("{shown}: {e}")))?;
    emit(&if args.json {
        render::json(&shown, &report)
    } else {
        render::text(&shown, &report)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Reads and parses one document; errors name the file.
fn read<T>(path: &Path, parse: fn(&[u8]) -> Result<T, KubeError>) -> Result<T, CliError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CliError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&bytes).map_err(|e| CliError::Usage(format!("{shown}: {e}")))
}

pub(super) fn parse_usage(text: &str) -> Result<UsageFigure, String> {
    let (who, size) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected CONTAINER=SIZE or POD/CONTAINER=SIZE"))?;
    let (pod, container) = match who.split_once('/') {
        Some((p, c)) => (Some(p.trim().to_string()), c.trim().to_string()),
        None => (None, who.trim().to_string()),
    };
    if container.is_empty() {
        return Err(format!("{text:?}: no container name"));
    }
    let bytes = kube::parse_quantity(size)?;
    if bytes < 0.0 {
        return Err(format!("{text:?}: a negative size"));
    }
    Ok(UsageFigure {
        pod,
        container,
        text: size.trim().to_string(),
        bytes: bytes.round() as u64,
    })
}

pub(super) fn parse_workers(text: &str) -> Result<WorkerFigure, String> {
    let (container, n) = match text.split_once('=') {
        Some((c, n)) => (Some(c.trim().to_string()), n),
        None => (None, text),
    };
    let workers: u32 =
        n.trim().parse().ok().filter(|&w| w > 0).ok_or_else(|| {
            format!("{text:?}: expected a worker count such as 16 or istio-proxy=16")
        })?;
    Ok(WorkerFigure { container, workers })
}

fn parse_at(text: &str) -> Result<i64, String> {
    heapwatch::time::parse_rfc3339(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time (2024-05-02T12:00:00Z)"))
}
