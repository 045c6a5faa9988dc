//! `heapwatch report RUN [--baseline RUN] -o OUT [--fail-on RULE]… [--pod POD.json
//! [--events EVENTS.json]] [--cpu-limit CORES]`: analyses the run, draws a growth flamegraph
//! per boot cycle (and a differential one against the baseline), and writes OUT/index.html,
//! OUT/report.md, OUT/summary.json and OUT/flamegraphs/*.svg. A run with `envoy` records gets
//! an Envoy section; a pod file adds the Kubernetes triage checklist. The folder is written
//! by [`super::report_folder`], which `demo` ends with too.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::analyse::rules::Rule;
use heapwatch::analyse::triage::{UsageFigure, WorkerFigure};
use heapwatch::pipeline::report::ReportInputs;
use heapwatch::units;

use super::report_folder::{Extras, write_report_with};
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
    #[command(flatten)]
    own: super::OwnFlags,
}

fn parse_at(text: &str) -> Result<i64, String> {
    heapwatch::time::parse_rfc3339(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time (2024-05-02T12:00:00Z)"))
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
        own: args.own.clone(),
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
    print!("{}", written.headline.text("  "));
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
