//! The analysis pipeline as a library: a run directory (and optionally its baseline) in,
//! findings out. Commands only turn flags into [`Options`], call [`analyse`] and render. It
//! sits beside `scan` rather than in `analyse/` because it reads run directories; `analyse/`
//! stays pure. [`cluster`] runs it over every node of a cluster run.
//!
//! # Run analysis as a library
//!
//! Every analysing command is flags → options → library → render:
//! `pipeline::analyse(run, baseline, &Options) -> Analysis` reads a run (and its baseline) and
//! holds the growth report, memory samples, peak heaps, the comparison, Envoy's findings and the
//! run's `events.jsonl`; `Analysis::evaluate(rules)` gives the `--fail-on` outcomes;
//! `pipeline::report::prepare` adds what a report needs (Kubernetes triage and the Envoy limits it
//! gives, flamegraphs, notes) and builds the `render::report::ReportModel`. `src/cli/` keeps only
//! the clap flags, the printing and the exit codes. The pipeline (with `pipeline::scan`, which
//! reads a run's captures) is not in `analyse/` because it reads run directories: `analyse/`
//! stays free of I/O.

pub mod captures;
pub mod cluster;
mod envoy;
pub mod explorer;
pub mod flame;
pub mod flamegraphs;
pub mod report;
pub mod scan;

use std::path::Path;

use thiserror::Error;

use crate::analyse::compare::Comparison;
use crate::analyse::growth::GrowthReport;
use crate::analyse::rules::{self, Findings, HeapRatio, Outcome, Rule};
use crate::decode::DecodeLimits;
use crate::model::memory::MemorySample;
use crate::store::cluster::{self as store_cluster, Event};
use crate::store::{RunDir, StoreError};
use scan::{ScanError, ScanNotes};

pub use envoy::{
    EnvoyFindings, Sourced, cpu_limit_source, envoy_findings, envoy_snapshots, has_envoy,
    heap_dump_state, memory_limit_source, recorded_cpu_limit,
};

/// Why a run could not be analysed.
#[derive(Debug, Error)]
pub enum PipelineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// A file given beside the run could not be read.
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// A file given beside the run is not what it should be.
    #[error("{0}")]
    Input(String),
    /// A node of a cluster run could not be read or analysed.
    #[error("node {node}: {why}")]
    Node { node: String, why: String },
    /// A rule compares with a baseline run and none was given.
    #[error("--fail-on {rule}: needs --baseline RUN (the run of the build to compare with)")]
    NeedsBaseline { rule: String },
}

/// The boot cycles a comparison uses, when chosen (`RUN@N`, `--cycle N`,
/// `--baseline-cycle N`); the default pairing otherwise.
#[derive(Debug, Default, Clone, Copy)]
pub struct CyclePicks {
    pub run: Option<u32>,
    pub baseline: Option<u32>,
}

/// What an analysis is told beside the run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The target's memory limit (default: the one recorded in the run).
    pub limit: Option<u64>,
    /// An Envoy target's CPU limit in cores (default: `cpu_limit` in run.json).
    pub cpu_limit: Option<f64>,
    pub decode: DecodeLimits,
    pub picks: CyclePicks,
    /// Module prefixes the user named as their own code (`--own`); empty: as recorded.
    pub own: Vec<String>,
}

/// A run and, optionally, its baseline, read and analysed.
pub struct Analysis {
    pub run: RunDir,
    pub memory: Vec<MemorySample>,
    pub growth: GrowthReport,
    pub notes: ScanNotes,
    pub peak_heap: Vec<(u32, i64)>,
    pub baseline: Option<Baseline>,
    pub envoy: Option<EnvoyFindings>,
    /// Marked log lines of the run (`events.jsonl`), oldest first; empty without the file.
    pub events: Vec<Event>,
}

/// The baseline run and how the run compares with it.
pub struct Baseline {
    pub run: RunDir,
    pub comparison: Comparison,
    pub heap_ratio: Option<HeapRatio>,
}

/// Refuses rules that cannot be checked with what was given, before any work.
pub fn require_baseline(rules_given: &[Rule], baseline: bool) -> Result<(), PipelineError> {
    match rules_given.iter().find(|r| rules::needs_baseline(r)) {
        Some(r) if !baseline => Err(PipelineError::NeedsBaseline {
            rule: r.text.clone(),
        }),
        _ => Ok(()),
    }
}

/// Reads and analyses a run, and compares it with `baseline` when given.
pub fn analyse(
    run_path: &Path,
    baseline: Option<&Path>,
    options: &Options,
) -> Result<Analysis, PipelineError> {
    let run = RunDir::open(run_path)?;
    let baseline = match baseline {
        None => None,
        Some(path) => Some(RunDir::open(path)?),
    };
    analyse_runs(run, baseline, options)
}

/// [`analyse`] of runs already opened.
pub fn analyse_runs(
    run: RunDir,
    baseline: Option<RunDir>,
    options: &Options,
) -> Result<Analysis, PipelineError> {
    let limits = &options.decode;
    let run = run.naming_own(&options.own);
    let baseline = baseline.map(|b| b.naming_own(&options.own));
    let (growth, notes) = scan::growth(&run, options.limit, limits)?;
    let memory: Vec<MemorySample> = run.memory_samples();
    let peak_heap = rules::peak_heap(&run.manifest.records);
    let envoy = envoy_findings(
        &run,
        memory_limit_source(&run, options.limit, growth.limit_bytes),
        cpu_limit_source(&run, options.cpu_limit),
    );
    let baseline = match baseline {
        None => None,
        Some(base) => {
            let comparison = scan::compare(
                &base,
                &run,
                options.picks.baseline,
                options.picks.run,
                limits,
            )?;
            // The gate's pair: the worst of those compared like with like.
            let heap_ratio = HeapRatio::of(&comparison);
            Some(Baseline {
                run: base,
                comparison,
                heap_ratio,
            })
        }
    };
    let events = store_cluster::read_events(&run.root);
    Ok(Analysis {
        run,
        memory,
        growth,
        notes,
        peak_heap,
        baseline,
        envoy,
        events,
    })
}

impl Analysis {
    /// Every rule against this run's findings.
    pub fn evaluate(&self, rules_given: &[Rule]) -> Vec<Outcome> {
        let findings = Findings {
            growth: &self.growth,
            peak_heap: &self.peak_heap,
            comparison: self.baseline.as_ref().map(|b| &b.comparison),
            heap_ratio: self.baseline.as_ref().and_then(|b| b.heap_ratio.as_ref()),
            envoy: self.envoy.as_ref().map(|e| &e.report),
        };
        rules::evaluate_all(rules_given, &findings)
    }
}
