//! What `heapwatch flame` draws, up to the drawing: a [`FlameRequest`] (the input as given,
//! `RUN@N` included) in, a [`FlameGraph`] (folded stacks, title, subtitle) out, for
//! `render::flame` to draw. One profile, what a boot cycle of a run added between two
//! captures, or the difference from a base profile or run. [`super::captures`]
//! picks the captures of a run; `growth` is the one growth flamegraph (the report draws it
//! too); `words` names what is drawn.

mod growth;
mod words;

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::PipelineError;
use super::captures::{self, CaptureError, StoredCapture, by_seq, cycle_captures, stored_captures};
use super::cluster::ClusterRun;
use super::scan::{self, ScanError};
use crate::analyse::diff::{self, DiffError, Side};
use crate::analyse::select::parse_run_arg;
use crate::decode::{self, DecodeError, DecodeLimits};
use crate::model::Profile;
use crate::model::aggregate::folded;
use crate::render::flame_titles::FlameTitle;
use crate::store::{RecordKind, RunDir, StoreError};
pub use growth::{GrowthSpan, growth_graph};
use words::{capture as capture_at, file_name, measure, program, run_name};

/// What to draw, as the command line gave it.
#[derive(Debug, Clone, Default)]
pub struct FlameRequest {
    /// A profile, or a run directory (`RUN@N` names a boot cycle).
    pub input: PathBuf,
    /// What a boot cycle of the run added between two captures.
    pub growth: bool,
    /// With `growth`: keep the profile writer's own stacks.
    pub keep_profiler: bool,
    /// The base to draw the difference from: a profile, or a run (`RUN@N`).
    pub diff: Option<PathBuf>,
    /// Sample type by name or index.
    pub sample: Option<String>,
    pub cycle: Option<u32>,
    /// With `diff` of two runs: the base run's boot cycle.
    pub baseline_cycle: Option<u32>,
    /// Capture seqs: the earlier one of a growth, the base run's of a diff.
    pub from: Option<u64>,
    /// The later capture of a growth, the new run's of a diff, the one drawn otherwise.
    pub to: Option<u64>,
    pub limits: DecodeLimits,
    /// Module prefixes the user named as their own code (`--own`), which name the sites a
    /// growth's title quotes; empty: as recorded.
    pub own: Vec<String>,
}

/// The stacks to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stacks {
    Plain(Vec<(String, i64)>),
    /// Drawn as a difference: red grew, blue shrank.
    Diff {
        base: Vec<(String, i64)>,
        new: Vec<(String, i64)>,
    },
}

/// A flamegraph before it is drawn: its stacks and what its title names
/// (`render::flame_titles` words it).
#[derive(Debug, Clone)]
pub struct FlameGraph {
    pub stacks: Stacks,
    pub title: FlameTitle,
}

/// Why there is nothing to draw. Every message names the file or run at fault.
#[derive(Debug, Error)]
pub enum FlameError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Profile { path: String, source: DecodeError },
    #[error("{path}: is a cluster run; draw one of its nodes: {}", nodes.join(", "))]
    Cluster { path: String, nodes: Vec<String> },
    #[error("{0}: --growth draws a run, and this is not a run directory")]
    GrowthOfAProfile(String),
    #[error("{0}: --cycle, --from and --to choose captures of a run, and this is a profile")]
    CapturesOfAProfile(String),
    #[error("{0}: a run directory; --diff of a profile needs a base profile")]
    BaseIsARun(String),
    #[error("{0}: not a run directory; --diff of a run needs a base run")]
    BaseIsNotARun(String),
    #[error("--from is for --growth and --diff; --to picks the capture to draw")]
    FromWithoutGrowth,
    #[error("{0}: the profile declares no sample types")]
    NoSampleTypes(String),
    #[error("{path}: no sample type {wanted:?}; this profile has {}", names.join(", "))]
    NoSampleType {
        path: String,
        wanted: String,
        names: Vec<String>,
    },
    /// Two profiles whose sample types do not match; `files` names the one at fault, or both.
    #[error("{files}: {source}")]
    Samples { files: String, source: DiffError },
    #[error(
        "{run}: capture #{from} is in boot cycle {from_cycle} and #{to} in cycle {to_cycle}: \
         growth is measured within one boot cycle"
    )]
    AcrossCycles {
        run: String,
        from: u64,
        from_cycle: u32,
        to: u64,
        to_cycle: u32,
    },
    #[error("{run}: captures #{from} and #{to} are in boot cycle {cycle}, not {wanted}")]
    NotInCycle {
        run: String,
        from: u64,
        to: u64,
        cycle: u32,
        wanted: u32,
    },
    #[error("{run}: capture #{from} is a {from_kind} profile and #{to} a {to_kind} profile")]
    KindsDiffer {
        run: String,
        from: u64,
        from_kind: &'static str,
        to: u64,
        to_kind: &'static str,
    },
    #[error("{run}: --from #{from} must be a capture taken before --to #{to}")]
    FromNotBeforeTo { run: String, from: u64, to: u64 },
    #[error("no stored heap captures to compare")]
    NothingToCompare,
}

/// What `request` draws: its stacks and titles.
pub fn flame(request: &FlameRequest) -> Result<FlameGraph, FlameError> {
    let mut request = request.clone();
    // RUN@N names a run's boot cycle.
    let (input, pick) = parse_run_arg(&request.input);
    if input.is_dir() {
        refuse_cluster(&input)?;
        request.input = input;
        request.cycle = request.cycle.or(pick);
    }
    if let Some(base) = &request.diff {
        let (base, pick) = parse_run_arg(base);
        if base.is_dir() {
            refuse_cluster(&base)?;
            request.diff = Some(base);
            request.baseline_cycle = request.baseline_cycle.or(pick);
        }
    }
    if request.input.is_dir() {
        run_graph(&request)
    } else {
        profile_graph(&request)
    }
}

/// A flamegraph is of one process: a cluster run's root is refused with the paths of its
/// nodes, each an ordinary run.
fn refuse_cluster(path: &Path) -> Result<(), FlameError> {
    match ClusterRun::open(path)? {
        None => Ok(()),
        Some(c) => Err(FlameError::Cluster {
            path: path.display().to_string(),
            nodes: c
                .info
                .targets
                .iter()
                .map(|t| path.join(&t.dir).display().to_string())
                .collect(),
        }),
    }
}

/// Reads and decodes one profile file; errors name the file.
fn load_profile(path: &Path, limits: &DecodeLimits) -> Result<Profile, FlameError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| FlameError::Read {
        path: shown.clone(),
        source,
    })?;
    decode::decode(&bytes, limits).map_err(|source| FlameError::Profile {
        path: shown,
        source,
    })
}

// ---- profiles ----

fn profile_graph(req: &FlameRequest) -> Result<FlameGraph, FlameError> {
    let shown = req.input.display().to_string();
    if req.growth {
        return Err(FlameError::GrowthOfAProfile(shown));
    }
    if req.cycle.is_some() || req.from.is_some() || req.to.is_some() {
        return Err(FlameError::CapturesOfAProfile(shown));
    }
    let new = load_profile(&req.input, &req.limits)?;
    let Some(base_path) = &req.diff else {
        let index = sample_index(&new, req.sample.as_deref(), &shown)?;
        return Ok(FlameGraph {
            stacks: Stacks::Plain(folded(&new, index)),
            title: FlameTitle::Profile {
                measure: measure(&new, index),
                file: file_name(&req.input),
                total: new.total(index),
                program: program(&new),
            },
        });
    };
    let base_shown = base_path.display().to_string();
    if base_path.is_dir() {
        return Err(FlameError::BaseIsARun(base_shown));
    }
    let base = load_profile(base_path, &req.limits)?;
    let (bi, ni) = diff::sample_indices(&base, &new, req.sample.as_deref())
        .map_err(|e| name_files(e, &base_shown, &shown))?;
    Ok(FlameGraph {
        stacks: Stacks::Diff {
            base: folded(&base, bi),
            new: folded(&new, ni),
        },
        title: FlameTitle::ProfileDiff {
            measure: measure(&new, ni),
            file: file_name(&req.input),
            total: new.total(ni),
            program: program(&new),
            base_file: file_name(base_path),
            base_total: base.total(bi),
            base_program: program(&base),
        },
    })
}

fn sample_index(profile: &Profile, wanted: Option<&str>, shown: &str) -> Result<usize, FlameError> {
    if profile.sample_types.is_empty() {
        return Err(FlameError::NoSampleTypes(shown.to_string()));
    }
    match wanted {
        None => Ok(profile.default_sample_index()),
        Some(w) => profile
            .find_sample_type(w)
            .ok_or_else(|| FlameError::NoSampleType {
                path: shown.to_string(),
                wanted: w.to_string(),
                names: (0..profile.sample_types.len())
                    .map(|i| profile.sample_type_name(i).to_string())
                    .collect(),
            }),
    }
}

fn name_files(err: DiffError, base: &str, new: &str) -> FlameError {
    let files = match err.side() {
        Some(Side::Base) => base.to_string(),
        Some(Side::New) => new.to_string(),
        None => format!("{base} and {new}"),
    };
    FlameError::Samples { files, source: err }
}

// ---- runs ----

fn run_graph(req: &FlameRequest) -> Result<FlameGraph, FlameError> {
    let run = RunDir::open(&req.input)?.naming_own(&req.own);
    if let Some(base_path) = &req.diff {
        if !base_path.is_dir() {
            return Err(FlameError::BaseIsNotARun(base_path.display().to_string()));
        }
        let base = RunDir::open(base_path)?.naming_own(&req.own);
        return runs_diff(&base, &run, req);
    }
    if req.growth {
        return growth(&run, req);
    }
    if req.from.is_some() {
        return Err(FlameError::FromWithoutGrowth);
    }
    let captures = stored_captures(&run);
    let capture = match req.to {
        Some(seq) => by_seq(&run, &captures, seq)?,
        None => {
            let cycle = cycle_captures(&run, &captures, req.cycle, 1, false)?;
            cycle[cycle.len() - 1]
        }
    };
    let profile = load_profile(&capture.path, &req.limits)?;
    let shown = capture.path.display().to_string();
    let wanted = req.sample.as_deref().or(default_sample(capture));
    let index = sample_index(&profile, wanted, &shown)?;
    Ok(FlameGraph {
        stacks: Stacks::Plain(folded(&profile, index)),
        title: FlameTitle::Capture {
            measure: measure(&profile, index),
            run: run_name(&run),
            capture: capture_at(capture),
            total: profile.total(index),
            path: run_file(&run, capture),
        },
    })
}

fn default_sample(capture: &StoredCapture<'_>) -> Option<&'static str> {
    (capture.record.kind == RecordKind::Heap).then_some("inuse_space")
}

/// "hiddenleak/profiles/000012-heap.pb.gz": where a capture lives, short enough for a title.
fn run_file(run: &RunDir, capture: &StoredCapture<'_>) -> String {
    format!(
        "{}/{}",
        file_name(&run.root),
        capture.record.file.as_deref().unwrap_or("")
    )
}

/// `flame --growth`: `--from` and `--to` when given, else the cycle's default span
/// ([`GrowthSpan::of_cycle`]) of `--cycle`, of the cycle of the one capture given, or of the
/// last cycle that died (else the last).
fn growth(run: &RunDir, args: &FlameRequest) -> Result<FlameGraph, FlameError> {
    let limits = &args.limits;
    let shown = run.root.display().to_string();
    let captures = stored_captures(run);
    let picked_from = args.from.map(|s| by_seq(run, &captures, s)).transpose()?;
    let picked_to = args.to.map(|s| by_seq(run, &captures, s)).transpose()?;
    let span = match (picked_from, picked_to) {
        (Some(from), Some(to)) => GrowthSpan {
            from,
            to,
            rise: false,
        },
        (f, t) => {
            let report = std::cell::OnceCell::new();
            let report = || {
                report
                    .get_or_init(|| scan::growth(run, None, limits).ok().map(|(r, _)| r))
                    .as_ref()
            };
            // By default the last cycle that died (the growth worth drawing), else the last.
            let died = || {
                let ended = report()?
                    .cycles
                    .iter()
                    .filter(|c| c.end.is_death() && c.stored >= 2);
                ended.map(|c| c.index).next_back()
            };
            let cycle = args.cycle.or(f.or(t).map(|c| c.record.cycle)).or_else(died);
            let in_cycle = cycle_captures(run, &captures, cycle, 2, false)?;
            let rise = || {
                let n = in_cycle[0].record.cycle;
                let c = report()?.cycles.iter().find(|c| c.index == n)?;
                super::flamegraphs::rise_into_peak(c)
            };
            match (f, t) {
                (None, None) => GrowthSpan::of_cycle(&in_cycle, rise()),
                _ => None,
            }
            .unwrap_or(GrowthSpan {
                from: f.unwrap_or(in_cycle[0]),
                to: t.unwrap_or(in_cycle[in_cycle.len() - 1]),
                rise: false,
            })
        }
    };
    let (from, to) = (span.from, span.to);
    if from.record.cycle != to.record.cycle {
        return Err(FlameError::AcrossCycles {
            run: shown,
            from: from.record.seq,
            from_cycle: from.record.cycle,
            to: to.record.seq,
            to_cycle: to.record.cycle,
        });
    }
    if let Some(n) = args.cycle.filter(|&n| n != to.record.cycle) {
        return Err(FlameError::NotInCycle {
            run: shown,
            from: from.record.seq,
            to: to.record.seq,
            cycle: to.record.cycle,
            wanted: n,
        });
    }
    if from.record.kind != to.record.kind {
        return Err(FlameError::KindsDiffer {
            run: shown,
            from: from.record.seq,
            from_kind: from.record.kind.as_str(),
            to: to.record.seq,
            to_kind: to.record.kind.as_str(),
        });
    }
    if (from.record.t_ms, from.record.seq) >= (to.record.t_ms, to.record.seq) {
        return Err(FlameError::FromNotBeforeTo {
            run: shown,
            from: from.record.seq,
            to: to.record.seq,
        });
    }
    growth_graph(
        run,
        &span,
        args.sample.as_deref(),
        args.keep_profiler,
        limits,
    )
}

/// The capture of each run to compare: `--from` in the base run and `--to` in the new one,
/// else the captures at the same age ([`captures::at_same_age`]) of the pair of cycles
/// `compare` leads with: B's newest build against A's, or `--cycle` / `--baseline-cycle`.
fn runs_diff(
    base_run: &RunDir,
    new_run: &RunDir,
    args: &FlameRequest,
) -> Result<FlameGraph, FlameError> {
    let limits = &args.limits;
    let (base_caps, new_caps) = (stored_captures(base_run), stored_captures(new_run));
    let (base, new) = match (args.from, args.to) {
        (Some(b), Some(n)) => (
            by_seq(base_run, &base_caps, b)?,
            by_seq(new_run, &new_caps, n)?,
        ),
        (b, n) => {
            // The pair of cycles compare leads with, at the end of the span both cover.
            let c = scan::compare(base_run, new_run, args.baseline_cycle, args.cycle, limits)?;
            let bc = cycle_captures(base_run, &base_caps, Some(c.a_cycle), 1, true)?;
            let nc = cycle_captures(new_run, &new_caps, Some(c.b_cycle), 1, true)?;
            let (at_b, at_n) = captures::at_same_age(base_run, &bc, new_run, &nc)
                .ok_or(FlameError::NothingToCompare)?;
            let base = match b {
                Some(seq) => by_seq(base_run, &base_caps, seq)?,
                None => at_b,
            };
            let new = match n {
                Some(seq) => by_seq(new_run, &new_caps, seq)?,
                None => at_n,
            };
            (base, new)
        }
    };
    let (bp, np) = (
        load_profile(&base.path, limits)?,
        load_profile(&new.path, limits)?,
    );
    let wanted = args.sample.as_deref().or(default_sample(new));
    let (bi, ni) = diff::sample_indices(&bp, &np, wanted).map_err(|e| {
        name_files(
            e,
            &base.path.display().to_string(),
            &new.path.display().to_string(),
        )
    })?;
    Ok(FlameGraph {
        stacks: Stacks::Diff {
            base: folded(&bp, bi),
            new: folded(&np, ni),
        },
        title: FlameTitle::RunsDiff {
            measure: measure(&np, ni),
            run: run_name(new_run),
            capture: capture_at(new),
            total: np.total(ni),
            base_run: run_name(base_run),
            base_capture: capture_at(base),
            base_total: bp.total(bi),
        },
    })
}
