//! What a report adds to a run's analysis, before it is rendered: the Kubernetes documents
//! read and triaged (and the limits they give Envoy), the rules' outcomes, the flamegraphs
//! and the notes on what could not be read; then the report's model.

use std::path::{Path, PathBuf};

use super::{Analysis, Options, PipelineError};
use crate::analyse::rules::{Outcome, Rule};
use crate::analyse::triage::kube::{self, Event, KubeError, Pod};
use crate::analyse::triage::{
    self, ContainerTriage, TriageInput, TriageReport, UsageFigure, WorkerFigure,
};
use crate::render::report::explorer::CarriedStacks;
use crate::render::report::flames::ReportFlame;
use crate::render::report::{BaselineView, EnvoyView, Flamegraph, KubeView, ReportModel, RunView};

/// What a report is given beside the run.
#[derive(Debug, Default, Clone)]
pub struct ReportInputs {
    /// `kubectl get pod -o json`, for the triage section.
    pub pod: Option<PathBuf>,
    /// `kubectl get events -o json`, for its probe findings.
    pub events: Option<PathBuf>,
    /// When the pod file was taken (unix ms); default its modification time.
    pub at_ms: Option<i64>,
    pub usage: Vec<UsageFigure>,
    pub workers: Vec<WorkerFigure>,
    /// Keep the profile writer's stacks in the growth flamegraphs.
    pub keep_profiler: bool,
}

/// The pod and event documents, read and parsed before any analysis so that a broken file
/// fails fast (exit 2, naming it).
pub struct KubeInput {
    /// The file name, as the report shows it.
    file: String,
    /// The path as given, for error messages.
    path: String,
    pods: Vec<Pod>,
    events: Option<Vec<Event>>,
    now_ms: i64,
}

fn read_kube<T>(path: &Path, parse: fn(&[u8]) -> Result<T, KubeError>) -> Result<T, PipelineError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| PipelineError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&bytes).map_err(|e| PipelineError::Input(format!("{shown}: {e}")))
}

pub fn kube_input(extras: &ReportInputs) -> Result<Option<KubeInput>, PipelineError> {
    let Some(path) = &extras.pod else {
        return Ok(None);
    };
    let pods = read_kube(path, kube::parse_pods)?;
    let events = match &extras.events {
        Some(e) => Some(read_kube(e, kube::parse_events)?),
        None => None,
    };
    let modified = || {
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(crate::time::system_ms)
    };
    let now_ms = extras
        .at_ms
        .or_else(modified)
        .unwrap_or_else(crate::time::now_ms);
    Ok(Some(KubeInput {
        file: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        path: path.display().to_string(),
        pods,
        events,
        now_ms,
    }))
}

/// The Envoy container of the first pod: `istio-proxy`, a name with "envoy" in it, or the
/// pod's only container.
fn envoy_container(report: &TriageReport) -> Option<&ContainerTriage> {
    let pod = report.pods.first()?;
    pod.containers
        .iter()
        .find(|c| c.name == "istio-proxy" || c.name.contains("envoy"))
        .or(match pod.containers.as_slice() {
            [only] => Some(only),
            _ => None,
        })
}

/// A run's analysis with everything its report adds: the Kubernetes triage (and the limits it
/// gives Envoy), the rules' outcomes, the flamegraphs and the notes.
pub struct Prepared {
    pub analysed: Analysis,
    pub kube: Option<KubeInput>,
    pub triaged: Option<TriageReport>,
    pub outcomes: Vec<Outcome>,
    /// What the report's flamegraphs show, for `render::report::flames::draw`.
    pub flames: Vec<ReportFlame>,
    /// The stacks the page's explorer carries (none for a run without heap profiles).
    pub explorer: Option<CarriedStacks>,
    pub notes: Vec<String>,
}

pub fn prepare(
    mut analysed: Analysis,
    kube: Option<KubeInput>,
    rules_given: &[Rule],
    options: &Options,
    extras: &ReportInputs,
) -> Result<Prepared, PipelineError> {
    let triaged = match &kube {
        None => None,
        Some(k) => {
            // Envoy's worker count, when the run has it, meets the pod's CPU limit there too.
            let mut workers = extras.workers.clone();
            let from_run = workers.is_empty();
            if from_run {
                workers.extend(
                    super::envoy_snapshots(&analysed.run)
                        .iter()
                        .rev()
                        .find_map(|s| s.stats.concurrency())
                        .and_then(|c| u32::try_from(c).ok())
                        .filter(|&w| w > 0)
                        .map(|workers| WorkerFigure {
                            container: None,
                            workers,
                        }),
                );
            }
            let input = TriageInput {
                pods: &k.pods,
                events: k.events.as_deref(),
                usage: &extras.usage,
                workers: &workers,
                now_ms: k.now_ms,
            };
            let mut report = triage::triage(&input)
                .map_err(|e| PipelineError::Input(format!("{}: {e}", k.path)))?;
            if from_run && !workers.is_empty() {
                for c in report.pods.iter_mut().flat_map(|p| p.containers.iter_mut()) {
                    if c.cpu.workers_source.as_deref() == Some("--concurrency") {
                        c.cpu.workers_source = Some("server.concurrency in the run".into());
                    }
                }
            }
            Some(report)
        }
    };
    // Limits the run does not know come from the Envoy container of the pod.
    if let (Some(e), Some(c)) = (
        analysed.envoy.as_ref(),
        triaged.as_ref().and_then(envoy_container),
    ) {
        let from = format!("pod container {}", c.name);
        let memory = e
            .limits
            .memory_bytes
            .zip(e.memory_from.clone())
            .or_else(|| c.memory.limit_bytes.map(|m| (m, from.clone())));
        let cpu = e
            .limits
            .cpu_cores
            .zip(e.cpu_from.clone())
            .or_else(|| c.cpu.limit_cores.map(|l| (l, from.clone())));
        if memory.as_ref().map(|m| m.0) != e.limits.memory_bytes
            || cpu.as_ref().map(|c| c.0) != e.limits.cpu_cores
        {
            analysed.envoy = super::envoy_findings(&analysed.run, memory, cpu);
        }
    }
    let outcomes = analysed.evaluate(rules_given);
    let flames =
        super::flamegraphs::report_flames(&analysed, &options.decode, extras.keep_profiler);
    let explorer =
        super::explorer::carry(&analysed, &flames, &options.decode, super::explorer::BUDGET);
    let mut notes: Vec<String> = analysed
        .notes
        .unreadable
        .iter()
        .map(|p| format!("skipped {p}"))
        .collect();
    if analysed.notes.missing > 0 {
        notes.push(format!(
            "{} profile file(s) named in the manifest are missing (thinned by --max-disk?)",
            analysed.notes.missing
        ));
    }
    Ok(Prepared {
        analysed,
        kube,
        triaged,
        outcomes,
        flames,
        explorer,
        notes,
    })
}

impl Prepared {
    /// The report's model, borrowing from the analysis and the flamegraphs drawn from
    /// [`Prepared::flames`].
    pub fn model<'a>(&'a self, flamegraphs: &'a [Flamegraph]) -> ReportModel<'a> {
        let analysed = &self.analysed;
        ReportModel {
            run: RunView {
                name: dir_name(&analysed.run.root),
                info: analysed.run.info.as_ref(),
                records: &analysed.run.manifest.records,
                memory: &analysed.memory,
                growth: &analysed.growth,
                events: &analysed.events,
                notes: self.notes.clone(),
                node: None,
            },
            baseline: analysed.baseline.as_ref().map(|b| BaselineView {
                name: dir_name(&b.run.root),
                info: b.run.info.as_ref(),
                comparison: &b.comparison,
                heap_ratio: b.heap_ratio.as_ref(),
            }),
            rules: &self.outcomes,
            flamegraphs,
            explorer: self.explorer.as_ref(),
            peak_heap: &analysed.peak_heap,
            envoy: analysed.envoy.as_ref().map(|e| EnvoyView {
                target: &e.target,
                report: &e.report,
                limits: e.limits,
                memory_from: e.memory_from.as_deref(),
                cpu_from: e.cpu_from.as_deref(),
            }),
            kube: self
                .kube
                .as_ref()
                .zip(self.triaged.as_ref())
                .map(|(k, report)| KubeView {
                    file: k.file.clone(),
                    report,
                }),
        }
    }
}

/// A directory's own name (not its path, so reports do not depend on where they run).
pub fn dir_name(path: &Path) -> String {
    std::fs::canonicalize(path)
        .ok()
        .as_deref()
        .unwrap_or(path)
        .file_name()
        .map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}
