//! `heapwatch compare RUN_A RUN_B`. Two cluster runs are compared node by node, nodes matched
//! by name (the nodes only one side has are listed, not compared); a cluster against a single
//! run compares each node with that run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::cluster::pair_nodes;
use heapwatch::analyse::compare::Comparison;
use heapwatch::analyse::select::parse_run_arg;
use heapwatch::pipeline::cluster::ClusterRun;
use heapwatch::render::cluster::{self as render_cluster, NodePart};
use heapwatch::render::compare as render_compare;
use heapwatch::store::RunDir;

use super::{CliError, DecodeFlags, OwnFlags, emit, opened};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The run of the old build (e.g. 2.0.2); `RUN@N` compares its boot cycle N.
    run_a: PathBuf,
    /// The run of the new build (e.g. 2.1.0); `RUN@N` compares its boot cycle N. Default: the
    /// cycles of B's newest build against those of A's build, each compared, the worst first.
    run_b: PathBuf,
    /// B's boot cycle to compare (same as `RUN_B@N`).
    #[arg(long, value_name = "N")]
    cycle: Option<u32>,
    /// A's boot cycle to compare with (same as `RUN_A@N`).
    #[arg(long, value_name = "N")]
    baseline_cycle: Option<u32>,
    #[arg(short = 'n', default_value_t = 10)]
    n: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
    #[command(flatten)]
    own: OwnFlags,
}

pub fn run(args: CompareArgs) -> Result<ExitCode, CliError> {
    let (path_a, pick_a) = parse_run_arg(&args.run_a);
    let (path_b, pick_b) = parse_run_arg(&args.run_b);
    let picks = (args.baseline_cycle.or(pick_a), args.cycle.or(pick_b));
    let cluster = |p: &PathBuf| ClusterRun::open(p).map_err(opened::failed);
    match (cluster(&path_a)?, cluster(&path_b)?) {
        (None, None) => {
            let (a, b) = (open(&path_a, &args)?, open(&path_b, &args)?);
            let comparison = compare_runs(&a, &b, picks, &args)?;
            emit(&if args.json {
                render_compare::json(&comparison)
            } else {
                render_compare::text(&comparison, args.n)
            })?;
        }
        (a, b) => emit(&compare_clusters(
            Side::of(a, &path_a),
            Side::of(b, &path_b),
            picks,
            &args,
        )?)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn open(p: &Path, args: &CompareArgs) -> Result<RunDir, CliError> {
    Ok(RunDir::open(p)?.naming_own(&args.own.own))
}

fn compare_runs(
    a: &RunDir,
    b: &RunDir,
    (pick_a, pick_b): (Option<u32>, Option<u32>),
    args: &CompareArgs,
) -> Result<Comparison, CliError> {
    Ok(heapwatch::pipeline::scan::compare(
        a,
        b,
        pick_a,
        pick_b,
        &args.decode.limits(),
    )?)
}

/// One side of a comparison with a cluster in it: a cluster, or a single run that stands
/// against every node of the other side.
enum Side<'a> {
    Cluster(Box<ClusterRun>),
    Single(&'a Path),
}

impl<'a> Side<'a> {
    fn of(cluster: Option<ClusterRun>, path: &'a Path) -> Side<'a> {
        cluster.map_or(Side::Single(path), |c| Side::Cluster(Box::new(c)))
    }

    fn names(&self) -> Vec<&str> {
        match self {
            Side::Cluster(c) => c.names(),
            Side::Single(_) => Vec::new(),
        }
    }

    /// The run that stands for node `name` on this side.
    fn run_for(&self, name: &str, args: &CompareArgs) -> Result<Option<RunDir>, CliError> {
        match self {
            Side::Single(p) => open(p, args).map(Some),
            Side::Cluster(c) => match c.node_dir(name) {
                Some(dir) => open(&dir, args).map(Some).map_err(|e| CliError::InNode {
                    node: name.to_string(),
                    source: Box::new(e),
                }),
                None => Ok(None),
            },
        }
    }
}

/// Two clusters node by node (matched by name), or every node of one cluster against a
/// single run; one section per node, then the nodes only one side has.
fn compare_clusters(
    a: Side,
    b: Side,
    picks: (Option<u32>, Option<u32>),
    args: &CompareArgs,
) -> Result<String, CliError> {
    let pairing = match (&a, &b) {
        (Side::Cluster(_), Side::Cluster(_)) => pair_nodes(&a.names(), &b.names()),
        (Side::Cluster(_), Side::Single(_)) => pair_nodes(&a.names(), &a.names()),
        _ => pair_nodes(&b.names(), &b.names()),
    };
    let mut parts = Vec::new();
    for name in &pairing.both {
        let (Some(run_a), Some(run_b)) = (a.run_for(name, args)?, b.run_for(name, args)?) else {
            continue;
        };
        let comparison =
            compare_runs(&run_a, &run_b, picks, args).map_err(|e| CliError::InNode {
                node: name.clone(),
                source: Box::new(e),
            })?;
        parts.push(NodePart {
            name: name.clone(),
            body: if args.json {
                render_compare::json(&comparison)
            } else {
                render_cluster::heading(
                    name,
                    &format!("{} against {}", run_b.root.display(), run_a.root.display()),
                ) + &render_compare::text(&comparison, args.n)
            },
        });
    }
    Ok(if args.json {
        render_cluster::json(&parts, render_cluster::unpaired_json(&pairing)).map_err(|source| {
            CliError::Json {
                what: "compare JSON of a node",
                source,
            }
        })?
    } else {
        let unpaired = render_cluster::unpaired_text(&pairing);
        let mut out = render_cluster::text(&parts);
        if !unpaired.is_empty() {
            out.push('\n');
            out.push_str(&unpaired);
        }
        out
    })
}
