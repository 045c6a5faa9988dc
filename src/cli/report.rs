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
use heapwatch::analyse::triage::{UsageFigure, WorkerFigure};
use heapwatch::pipeline::CyclePicks;
use heapwatch::pipeline::cluster::ClusterRun;
use heapwatch::pipeline::report::{self, ReportInputs};
use heapwatch::render::report::{ReportModel, flames, html, markdown, summary};
use heapwatch::units;

use super::{CliError, DecodeFlags};
use super::{gate, opened};

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
    #[arg(long = "fail-on", value_name = "RULE", value_parser = gate::parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// The CPU limit of an Envoy target in cores (2, 1.5, 500m), against its worker count.
    /// Default: `cpu_limit` recorded in the run, else the Envoy container's limit in --pod.
    #[arg(long, value_name = "CORES", value_parser = opened::parse_cores)]
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
    cycles: opened::CycleFlags,
    #[command(flatten)]
    decode: DecodeFlags,
}

fn parse_at(text: &str) -> Result<i64, String> {
    heapwatch::time::parse_rfc3339(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time (2024-05-02T12:00:00Z)"))
}

/// What a report can add to the run's own findings.
#[derive(Default)]
pub struct Extras {
    /// The Envoy target's CPU limit in cores.
    pub cpu_limit: Option<f64>,
    /// The boot cycles compared with the baseline, when chosen.
    pub picks: CyclePicks,
    /// The Kubernetes documents and figures, and the flamegraph choice.
    pub inputs: ReportInputs,
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
        opened::resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let extras = Extras {
        picks,
        cpu_limit: args.cpu_limit,
        inputs: ReportInputs {
            keep_profiler: args.keep_profiler,
            pod: args.pod.clone(),
            events: args.events.clone(),
            at_ms: args.at,
            usage: args.usage.clone(),
            workers: args.concurrency.clone(),
        },
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
        Some(nodes) => gate::cluster_gate(nodes),
        None => gate::gate(&written.outcomes),
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
    gate::require_baseline(rules_given, baseline)?;
    let kube = report::kube_input(&extras.inputs).map_err(opened::failed)?;
    let options = opened::options(limit, extras.cpu_limit, decode, extras.picks);
    if let Some(c) = ClusterRun::open(run_path).map_err(opened::failed)? {
        if kube.is_some() {
            return Err(CliError::Usage(format!(
                "{}: is a cluster run; --pod applies to one pod: report one node ({}/targets/NAME)",
                run_path.display(),
                run_path.display()
            )));
        }
        return cluster::write(&c, baseline, out, rules_given, &options, &extras.inputs);
    }
    let analysed = opened::analyse(run_path, baseline, &options)?;
    let prepared = report::prepare(analysed, kube, rules_given, &options, &extras.inputs)
        .map_err(opened::failed)?;
    let drawn = flames::draw(&prepared.flames);
    let model = prepared.model(&drawn);
    write_files(out, &model)?;
    Ok(Written {
        headline: model.headline(),
        flamegraphs: drawn.len(),
        outcomes: prepared.outcomes.clone(),
        nodes: None,
    })
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
