//! `heapwatch report RUN [--baseline RUN] -o OUT [--fail-on RULE]… [--pod POD.json
//! [--events EVENTS.json]] [--cpu-limit CORES]`: analyses the run, draws a growth flamegraph
//! per boot cycle (and a differential one against the baseline), and writes OUT/index.html,
//! OUT/report.md, OUT/summary.json and OUT/flamegraphs/*.svg. A run with `envoy` records gets
//! an Envoy section; a pod file adds the Kubernetes triage checklist.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::cluster::NodeOutcomes;
use heapwatch::analyse::rules::{Outcome, Rule};
use heapwatch::analyse::triage::kube::{self, Event, KubeError, Pod};
use heapwatch::analyse::triage::{
    self, ContainerTriage, TriageInput, TriageReport, UsageFigure, WorkerFigure,
};
use heapwatch::pipeline::cluster::ClusterRun;
use heapwatch::pipeline::{self, Analysis, CyclePicks, Options};
use heapwatch::render::report::{
    BaselineView, EnvoyView, Flamegraph, KubeView, ReportModel, RunView, html, markdown, summary,
};
use heapwatch::units;

use super::check;
use super::{CliError, DecodeFlags};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// The run of the previous build doing the same work: adds the comparison and a
    /// differential flamegraph.
    #[arg(long, value_name = "RUN")]
    baseline: Option<PathBuf>,
    /// The report folder (created; files in it are replaced).
    #[arg(long, short = 'o', value_name = "OUT")]
    out: PathBuf,
    /// A bar that fails the command (exit 1) after the report is written:
    /// growth>5MiB/s, time-to-limit<60s, regression>1.5x, goroutines>10/s, storm>100MiB/s,
    /// heap>SIZE, memory>SIZE, kills>N, restarts>N, live-share<0.6.
    #[arg(long = "fail-on", value_name = "RULE", value_parser = check::parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// The CPU limit of an Envoy target in cores (2, 1.5, 500m), against its worker count.
    /// Default: `cpu_limit` recorded in the run, else the Envoy container's limit in --pod.
    #[arg(long, value_name = "CORES", value_parser = check::parse_cores)]
    cpu_limit: Option<f64>,
    /// `kubectl get pod NAME -o json` (a Pod or a List): adds the Kubernetes triage section.
    #[arg(long, value_name = "POD.json")]
    pod: Option<PathBuf>,
    /// `kubectl get events -n NS -o json`, for the triage section's probe findings.
    #[arg(long, value_name = "EVENTS.json", requires = "pod")]
    events: Option<PathBuf>,
    /// When the pod file was taken (RFC 3339), for ages and growth estimates. Default: the
    /// pod file's modification time (when kubectl's output was saved).
    #[arg(long, value_name = "TIME", requires = "pod", value_parser = parse_at)]
    at: Option<i64>,
    /// For the triage section: a container's memory use from `kubectl top pod --containers`
    /// (istio-proxy=737Mi, or POD/CONTAINER=737Mi). Repeatable.
    #[arg(long, value_name = "[POD/]CONTAINER=SIZE", requires = "pod",
          value_parser = super::triage::parse_usage)]
    usage: Vec<UsageFigure>,
    /// For the triage section: a known worker count (16, or istio-proxy=16). Default: Envoy's
    /// server.concurrency when the run has it.
    #[arg(long, value_name = "[CONTAINER=]N", requires = "pod",
          value_parser = super::triage::parse_workers)]
    concurrency: Vec<WorkerFigure>,
    /// Keep the profile writer's own stacks (`runtime/pprof`, `compress/flate` under it) in the
    /// growth flamegraphs; left out by default as the cost of watching.
    #[arg(long)]
    keep_profiler: bool,
    #[command(flatten)]
    cycles: check::CycleFlags,
    #[command(flatten)]
    decode: DecodeFlags,
}

fn parse_at(text: &str) -> Result<i64, String> {
    kube::parse_time(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time (2024-05-02T12:00:00Z)"))
}

/// What a report can add to the run's own findings.
#[derive(Default)]
pub struct Extras {
    /// The Envoy target's CPU limit in cores.
    pub cpu_limit: Option<f64>,
    pub pod: Option<PathBuf>,
    pub events: Option<PathBuf>,
    /// When the pod file was taken (unix ms).
    pub at_ms: Option<i64>,
    pub usage: Vec<UsageFigure>,
    pub workers: Vec<WorkerFigure>,
    /// The boot cycles compared with the baseline, when chosen.
    pub picks: CyclePicks,
    /// Keep the profile writer's stacks in the growth flamegraphs.
    pub keep_profiler: bool,
}

/// The pod and event documents, read and parsed before any analysis so that a broken file
/// fails fast (exit 2, naming it).
struct KubeInput {
    /// The file name, as the report shows it.
    file: String,
    /// The path as given, for error messages.
    path: String,
    pods: Vec<Pod>,
    events: Option<Vec<Event>>,
    now_ms: i64,
}

fn read_kube<T>(path: &Path, parse: fn(&[u8]) -> Result<T, KubeError>) -> Result<T, CliError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CliError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&bytes).map_err(|e| CliError::Usage(format!("{shown}: {e}")))
}

fn kube_input(extras: &Extras) -> Result<Option<KubeInput>, CliError> {
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
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
    };
    let now_ms = extras.at_ms.or_else(modified).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    });
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

/// What a written report found, for the callers that print it (`report`, `demo`).
pub struct Written {
    pub headline: String,
    pub outcomes: Vec<Outcome>,
    pub flamegraphs: usize,
    /// On a cluster run, the rules' outcomes on each node (`outcomes` is then empty).
    pub nodes: Option<Vec<NodeOutcomes>>,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let (run, baseline, picks) =
        check::resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let extras = Extras {
        picks,
        keep_profiler: args.keep_profiler,
        cpu_limit: args.cpu_limit,
        pod: args.pod.clone(),
        events: args.events.clone(),
        at_ms: args.at,
        usage: args.usage.clone(),
        workers: args.concurrency.clone(),
    };
    let written = write_report_with(
        &run,
        baseline.as_deref(),
        &args.out,
        &args.fail_on,
        args.limit,
        &args.decode,
        &extras,
    )?;
    println!("{}", written.headline);
    println!(
        "report: {} (with report.md, summary.json and {} flamegraph(s))",
        args.out.join("index.html").display(),
        written.flamegraphs
    );
    match &written.nodes {
        Some(nodes) => check::cluster_gate(nodes),
        None => check::gate(&written.outcomes),
    }
}

/// Analyses, renders and writes the report; checks the rules last.
pub fn write_report(
    run_path: &Path,
    baseline: Option<&Path>,
    out: &Path,
    rules_given: &[Rule],
    limit: Option<u64>,
    decode: &DecodeFlags,
) -> Result<Written, CliError> {
    write_report_with(
        run_path,
        baseline,
        out,
        rules_given,
        limit,
        decode,
        &Extras::default(),
    )
}

/// [`write_report`] with the Envoy CPU limit and the Kubernetes documents.
pub fn write_report_with(
    run_path: &Path,
    baseline: Option<&Path>,
    out: &Path,
    rules_given: &[Rule],
    limit: Option<u64>,
    decode: &DecodeFlags,
    extras: &Extras,
) -> Result<Written, CliError> {
    check::require_baseline(rules_given, baseline)?;
    let kube = kube_input(extras)?;
    let options = check::options(limit, extras.cpu_limit, decode, extras.picks);
    if let Some(c) = ClusterRun::open(run_path).map_err(check::failed)? {
        if kube.is_some() {
            return Err(CliError::Usage(format!(
                "{}: is a cluster run; --pod applies to one pod: report one node ({}/targets/NAME)",
                run_path.display(),
                run_path.display()
            )));
        }
        return cluster::write(&c, baseline, out, rules_given, &options, extras);
    }
    let analysed = check::analyse(run_path, baseline, &options)?;
    let prepared = prepare(analysed, kube, rules_given, &options, extras)?;
    let model = prepared.model();
    write_files(out, &model)?;
    Ok(Written {
        headline: model.headline(),
        flamegraphs: prepared.flamegraphs.len(),
        outcomes: prepared.outcomes.clone(),
        nodes: None,
    })
}

/// A run's analysis with everything its report adds: the Kubernetes triage (and the limits it
/// gives Envoy), the rules' outcomes, the flamegraphs and the notes.
struct Prepared {
    analysed: Analysis,
    kube: Option<KubeInput>,
    triaged: Option<TriageReport>,
    outcomes: Vec<Outcome>,
    flamegraphs: Vec<Flamegraph>,
    notes: Vec<String>,
}

fn prepare(
    mut analysed: Analysis,
    kube: Option<KubeInput>,
    rules_given: &[Rule],
    options: &Options,
    extras: &Extras,
) -> Result<Prepared, CliError> {
    let triaged = match &kube {
        None => None,
        Some(k) => {
            // Envoy's worker count, when the run has it, meets the pod's CPU limit there too.
            let mut workers = extras.workers.clone();
            let from_run = workers.is_empty();
            if from_run {
                workers.extend(
                    pipeline::envoy_snapshots(&analysed.run)
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
            let mut report =
                triage::triage(&input).map_err(|e| CliError::Usage(format!("{}: {e}", k.path)))?;
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
            analysed.envoy = pipeline::envoy_findings(&analysed.run, memory, cpu);
        }
    }
    let outcomes = analysed.evaluate(rules_given);
    let flamegraphs = pipeline::flamegraphs::draw(&analysed, &options.decode, extras.keep_profiler);
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
        flamegraphs,
        notes,
    })
}

impl Prepared {
    fn model(&self) -> ReportModel<'_> {
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
            },
            baseline: analysed.baseline.as_ref().map(|b| BaselineView {
                name: dir_name(&b.run.root),
                info: b.run.info.as_ref(),
                comparison: &b.comparison,
                heap_ratio: b.heap_ratio.as_ref(),
            }),
            rules: &self.outcomes,
            flamegraphs: &self.flamegraphs,
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

/// Writes a folder's file, naming it when that fails.
fn write_file(out: &Path, name: &str, text: &str) -> Result<(), CliError> {
    let path = out.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CliError::Read {
            path: parent.display().to_string(),
            source,
        })?;
    }
    std::fs::write(&path, text).map_err(|source| CliError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Writes one run's report folder: the page, the markdown, the summary and the flamegraphs.
fn write_files(out: &Path, model: &ReportModel) -> Result<(), CliError> {
    let folder = out.join("flamegraphs");
    std::fs::create_dir_all(&folder).map_err(|source| CliError::Read {
        path: folder.display().to_string(),
        source,
    })?;
    for f in model.flamegraphs {
        write_file(out, &f.file, &f.svg)?;
    }
    write_file(out, "index.html", &html::html(model))?;
    write_file(out, "report.md", &markdown::markdown(model))?;
    write_file(out, "summary.json", &summary::json(model))?;
    Ok(())
}

fn dir_name(path: &Path) -> String {
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
