//! `heapwatch growth RUN`. A run with `envoy` records (from `collect envoy:http://…`) also
//! gets Envoy's findings; a run of Envoy admin figures alone (no heap profiles) gets them
//! instead of the per-cycle site tables. A cluster run gets one section per node, headed by
//! its name; with `--json`, `{"kind": "cluster", "nodes": {NAME: <the node's growth JSON>}}`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::pipeline::{self, Options, cluster::ClusterRun};
use heapwatch::render::cluster::{self as render_cluster, NodePart};
use heapwatch::render::growth::{self as render_growth, EnvoyPart};
use heapwatch::store::{RecordKind, RunDir};
use heapwatch::units;

use super::opened;
use super::{CliError, DecodeFlags, OwnFlags, emit};

#[derive(clap::Args)]
pub struct GrowthArgs {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// The CPU limit of an Envoy target in cores (2, 1.5, 500m), against its worker count
    /// (default: `cpu_limit` recorded in the run).
    #[arg(long, value_name = "CORES", value_parser = opened::parse_cores)]
    cpu_limit: Option<f64>,
    /// Rows per table.
    #[arg(short = 'n', default_value_t = 10)]
    n: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
    #[command(flatten)]
    own: OwnFlags,
}

pub fn run(args: GrowthArgs) -> Result<ExitCode, CliError> {
    if let Some(c) = ClusterRun::open(&args.run).map_err(opened::failed)? {
        return run_cluster(&c, &args);
    }
    let run = RunDir::open(&args.run)?;
    emit(&node_growth(run, &args, None)?)?;
    Ok(ExitCode::SUCCESS)
}

/// The growth of one run as the command prints it; problems go to stderr, after `who`.
fn node_growth(run: RunDir, args: &GrowthArgs, node: Option<&str>) -> Result<String, CliError> {
    let options = Options {
        limit: args.limit,
        cpu_limit: args.cpu_limit,
        decode: args.decode.limits(),
        own: args.own.own.clone(),
        ..Options::default()
    };
    let a = pipeline::analyse_runs(run, None, &options).map_err(|e| match node {
        Some(name) => CliError::InNode {
            node: name.to_string(),
            source: Box::new(e.into()),
        },
        None => e.into(),
    })?;
    let who = node.map_or(String::new(), |name| format!("node {name}: "));
    for problem in &a.notes.unreadable {
        eprintln!("heapwatch: {who}skipped {problem}");
    }
    let profiles = a
        .run
        .manifest
        .records
        .iter()
        .any(|r| r.is_ok() && matches!(r.kind, RecordKind::Heap | RecordKind::Goroutine));
    let part = a.envoy.as_ref().map(|e| EnvoyPart {
        target: &e.target,
        report: &e.report,
        alone: !profiles,
    });
    Ok(if args.json {
        render_growth::json(&a.growth, part.as_ref())
    } else {
        render_growth::text(&a.growth, args.n, part.as_ref())
    })
}

/// Growth of every node of a cluster run, each in its own section (or under its name in JSON).
fn run_cluster(c: &ClusterRun, args: &GrowthArgs) -> Result<ExitCode, CliError> {
    let mut parts = Vec::new();
    for (name, run) in c.open_nodes().map_err(opened::failed)? {
        let body = node_growth(run, args, Some(&name))?;
        let dir = c
            .info
            .targets
            .iter()
            .find(|t| t.name == name)
            .map_or("", |t| t.dir.as_str());
        parts.push(NodePart {
            body: if args.json {
                body
            } else {
                render_cluster::heading(&name, dir) + &body
            },
            name,
        });
    }
    emit(&if args.json {
        render_cluster::json(&parts, vec![]).map_err(|source| CliError::Json {
            what: "growth JSON of a node",
            source,
        })?
    } else {
        render_cluster::text(&parts)
    })?;
    Ok(ExitCode::SUCCESS)
}
