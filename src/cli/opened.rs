//! A run opened for analysis, as every command that reads one (`check`, `report`, `growth`,
//! `compare`) does it: the boot cycles picked by flags or `RUN@N`, the pipeline's options from
//! the flags, its errors as the command reports them, and the baseline beside the run (one run,
//! or a cluster matched node by node).

use std::path::{Path, PathBuf};

use heapwatch::analyse::triage::kube;
use heapwatch::pipeline::cluster::{BaselineRun, ClusterRun};
use heapwatch::pipeline::{self, Analysis, CyclePicks, Options, PipelineError};

use super::{CliError, DecodeFlags, OwnFlags};

/// A CPU count as Kubernetes writes it: `2`, `1.5`, `500m`.
pub fn parse_cores(text: &str) -> Result<f64, String> {
    let cores = kube::parse_quantity(text)?;
    if cores > 0.0 {
        Ok(cores)
    } else {
        Err(format!(
            "{text:?}: a CPU limit is above zero (2, 1.5, 500m)"
        ))
    }
}

/// Flags that choose the compared cycles, shared by `check` and `report`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct CycleFlags {
    /// The boot cycle of the run to compare with the baseline (also `RUN@N`). Default: the
    /// cycles of the run's newest build, each compared, the worst shown.
    #[arg(long, value_name = "N")]
    pub cycle: Option<u32>,
    /// The boot cycle of the baseline (also `--baseline RUN@N`). Default: the cycles of the
    /// baseline's build that is not the run's.
    #[arg(long, value_name = "N", requires = "baseline")]
    pub baseline_cycle: Option<u32>,
}

/// Splits `RUN@N` off the run and baseline paths; a flag wins over `@N`.
pub fn resolve_picks(
    run: &Path,
    baseline: Option<&Path>,
    flags: &CycleFlags,
) -> (PathBuf, Option<PathBuf>, CyclePicks) {
    use heapwatch::analyse::select::parse_run_arg;
    let (run, run_pick) = parse_run_arg(run);
    let (baseline, base_pick) = match baseline.map(parse_run_arg) {
        Some((p, n)) => (Some(p), n),
        None => (None, None),
    };
    let picks = CyclePicks {
        run: flags.cycle.or(run_pick),
        baseline: flags.baseline_cycle.or(base_pick),
    };
    (run, baseline, picks)
}

/// The pipeline's options from the flags.
pub fn options(
    limit: Option<u64>,
    cpu_limit: Option<f64>,
    decode: &DecodeFlags,
    picks: CyclePicks,
    own: &OwnFlags,
) -> Options {
    Options {
        limit,
        cpu_limit,
        decode: decode.limits(),
        picks,
        own: own.own.clone(),
    }
}

/// A pipeline error as the command reports it (exit 2).
pub fn failed(e: PipelineError) -> CliError {
    match e {
        PipelineError::NeedsBaseline { .. } | PipelineError::Input(_) => {
            CliError::Usage(e.to_string())
        }
        PipelineError::Read { path, source } => CliError::Read { path, source },
        other => CliError::Pipeline(other),
    }
}

/// Reads and analyses a run and its baseline.
pub fn analyse(
    run_path: &Path,
    baseline: Option<&Path>,
    options: &Options,
) -> Result<Analysis, CliError> {
    refuse_cluster_baseline(baseline)?;
    pipeline::analyse(run_path, baseline, options).map_err(failed)
}

/// A single run is not compared with a whole cluster: the user picks the node.
fn refuse_cluster_baseline(baseline: Option<&Path>) -> Result<(), CliError> {
    let Some(path) = baseline else { return Ok(()) };
    match ClusterRun::open(path).map_err(failed)? {
        Some(c) => Err(CliError::Usage(format!(
            "{}: is a cluster run ({}); compare one run with one of its nodes: {}/targets/NAME",
            path.display(),
            c.names().join(", "),
            path.display()
        ))),
        None => Ok(()),
    }
}

/// Opens what `--baseline` names for a cluster run: a cluster (matched node by node) or a
/// single run (every node's baseline).
pub fn cluster_baseline(path: Option<&Path>) -> Result<Option<ClusterRun>, CliError> {
    match path {
        None => Ok(None),
        Some(p) => ClusterRun::open(p).map_err(failed),
    }
}

/// The baseline argument of [`cluster::analyse_cluster`].
pub fn baseline_run<'a>(path: Option<&'a Path>, opened: Option<&'a ClusterRun>) -> BaselineRun<'a> {
    match (opened, path) {
        (Some(c), _) => BaselineRun::Cluster(c),
        (None, Some(p)) => BaselineRun::Single(p),
        (None, None) => BaselineRun::None,
    }
}
