//! Command-line flags and their translation into the plain configurations the library takes.
//! Nothing below this module sees clap.

mod check;
mod collect;
mod collect_push;
mod compare;
mod demo;
mod diff;
mod flame;
mod gate;
mod growth;
mod headers;
mod index;
mod opened;
mod ps;
mod push;
mod push_flags;
mod record_flags;
mod replay;
mod report;
mod report_folder;
mod run;
mod status_line;
mod top;
mod triage;
mod watch;

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use thiserror::Error;

use heapwatch::decode::{self, DecodeError, DecodeLimits};
use heapwatch::model::Profile;
use heapwatch::units;

/// Everything a command can fail with, and the exit code each maps to.
#[derive(Debug, Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Profile { path: String, source: DecodeError },
    #[error("{path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("writing output: {0}")]
    Output(io::Error),
    /// `watch`: the collector of one container ended in an error (exit 2); the others' are
    /// printed before it.
    #[error("{container}: {source}")]
    Container {
        container: String,
        source: heapwatch::collect::CollectError,
    },
    /// The collector stopped on a full disk, with the store's words when it had them (exit 2).
    #[error("stopped: {}", .why.as_deref().unwrap_or("disk full"))]
    DiskFull { why: Option<String> },
    /// What a push left undone (exit 2).
    #[error(transparent)]
    Pushed(#[from] push::PushProblem),
    /// `collect --push`: the push could not start beside the collector (exit 2).
    #[error("--push {url}: {}", match .source { Some(e) => e.to_string(), None => "the push thread ended".to_string() })]
    PushStart {
        url: String,
        source: Option<heapwatch::push::PushError>,
    },
    /// A thread of the command panicked: "a replay thread", "the replay thread" (exit 2).
    #[error("{what} panicked")]
    Panicked { what: &'static str },
    /// `demo`: a build's replay server failed (exit 2).
    #[error("replay of {build}: {source}")]
    DemoReplay {
        build: &'static str,
        source: io::Error,
    },
    /// `demo`: the collector of a build's replay did not end well (exit 2).
    #[error("heapwatch collect of the {build} replay exited with {status}")]
    DemoCollect {
        build: &'static str,
        status: std::process::ExitStatus,
    },
    /// A failure on one node of a cluster run, led by the node's name (exit 2).
    #[error("node {node}: {source}")]
    InNode { node: String, source: Box<CliError> },
    /// A JSON document could not be made (exit 2).
    #[error("{what}: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    /// A JSON file that cannot be read as what it should hold (exit 2).
    #[error("{path}: {source}")]
    JsonFile {
        path: String,
        source: serde_json::Error,
    },
    /// A replay's server could not serve (exit 2).
    #[error("replay on {addr}: {source}")]
    Serve { addr: String, source: io::Error },
    /// A run directory that cannot be read (exit 2, as `Store`).
    #[error(transparent)]
    Run(#[from] heapwatch::store::StoreError),
    /// A run that cannot be analysed (exit 2, as `Store`).
    #[error(transparent)]
    Scan(#[from] heapwatch::pipeline::scan::ScanError),
    /// A site index that cannot be built (exit 2, as `Store`).
    #[error(transparent)]
    Index(#[from] heapwatch::index::IndexError),
    /// A run that cannot be read or analysed, as the pipeline says it (exit 2).
    #[error(transparent)]
    Pipeline(#[from] heapwatch::pipeline::PipelineError),
    /// Nothing to draw for `flame`, as the pipeline says why (exit 2).
    #[error(transparent)]
    Flame(#[from] heapwatch::pipeline::flame::FlameError),
    /// The collector failed on its one target: its store, mostly (exit 2).
    #[error(transparent)]
    Collect(#[from] heapwatch::collect::CollectError),
    /// The collector failed on one node of a cluster run (exit 2).
    #[error("{node}: {source}")]
    Node {
        node: String,
        source: heapwatch::collect::CollectError,
    },
    /// The marks file could not be written (exit 2).
    #[error(transparent)]
    Marks(#[from] heapwatch::collect::marks::MarkError),
    /// Starting, confining or recording a child failed (exit 2).
    #[error(transparent)]
    Launch(#[from] heapwatch::launch::LaunchError),
    /// A push that could not go on (exit 2).
    #[error(transparent)]
    Push(#[from] heapwatch::push::PushError),
    /// The node watcher failed (exit 2).
    #[error(transparent)]
    Watch(#[from] heapwatch::collect::watch::WatchError),
    /// A run that cannot be replayed (exit 2).
    #[error(transparent)]
    Replay(#[from] heapwatch::replay::ReplayError),
    #[error("{0}")]
    Unreachable(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Profile { .. } | CliError::Read { .. } => 2,
            CliError::Output(_) | CliError::Container { .. } | CliError::InNode { .. } => 2,
            CliError::DiskFull { .. } | CliError::Pushed(_) | CliError::PushStart { .. } => 2,
            CliError::Panicked { .. } | CliError::DemoReplay { .. } => 2,
            CliError::DemoCollect { .. } => 2,
            CliError::Json { .. } | CliError::JsonFile { .. } | CliError::Serve { .. } => 2,
            CliError::Run(_) | CliError::Scan(_) | CliError::Index(_) => 2,
            CliError::Pipeline(_) | CliError::Collect(_) | CliError::Node { .. } => 2,
            CliError::Marks(_) | CliError::Launch(_) | CliError::Push(_) | CliError::Watch(_) => 2,
            CliError::Replay(_) | CliError::Flame(_) => 2,
            CliError::Unreachable(_) => 3,
        }
    }

    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

#[derive(Parser)]
#[command(
    name = "heapwatch",
    version,
    about = "Catch Go services running out of memory: collect heap profiles until the OOM kill, then find what grew"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Top sites of one profile (figures equal `go tool pprof -top`).
    Top(top::TopArgs),
    /// Capture profiles from a live target until stopped, making each durable on disk.
    Collect(Box<collect::CollectArgs>),
    /// Per-site change between two profiles; --proto writes a pprof diff.
    Diff(diff::DiffArgs),
    /// Per boot cycle: which sites grow, how fast and since when; storms; a verdict.
    Growth(growth::GrowthArgs),
    /// The same work on two builds: sites that grow more, or only, in B. Worst first.
    Compare(compare::CompareArgs),
    /// Flamegraph of a profile, of a run's growth, or of the difference between two.
    Flame(flame::Args),
    /// index.html, report.md, summary.json and flamegraphs for a run; --fail-on gates CI.
    Report(report::Args),
    /// Exit 1 when a run crosses a --fail-on bar (for CI).
    Check(check::Args),
    /// The whole pipeline on a bundled real recording: replay, collect, report.
    Demo(demo::Args),
    /// Kubernetes OOM triage from `kubectl get pod -o json` (and events).
    Triage(triage::Args),
    /// Serve a recorded run as a live Go pprof target, in time order, dying between boot cycles.
    Replay(replay::ReplayArgs),
    /// Send a recorded run's captures to a Pyroscope server (its push API); idempotent.
    Push(Box<push::Args>),
    /// Start a command under a memory limit and record it through the proc source from its
    /// first milliseconds, restarting it after each death: an OOM loop in one command.
    Run(Box<run::RunArgs>),
    /// Build or repair a run's site index (analyses do it themselves when it is missing).
    Index(index::IndexArgs),
    /// The Go processes on this node (or under a cgroup): pid, Go release, heap in use read
    /// from memory, memory against the container's limit, pod and container.
    Ps(ps::PsArgs),
    /// The guardian of `collect --oom-hold`: puts the cgroup back once its stdin ends
    /// (heapwatch gone, however it went): clears v1's oom_kill_disable, or writes v2's
    /// memory.high back as `--high`. Started by heapwatch itself.
    #[command(name = "oom-hold-guard", hide = true)]
    OomHoldGuard {
        cgroup: std::path::PathBuf,
        #[arg(long)]
        high: Option<String>,
    },
    /// Record every Go process on this node (or under a cgroup), one node per container, until
    /// stopped: slowly, then at the burst interval near each container's limit, across restarts
    /// and OOM kills.
    Watch(Box<watch::WatchArgs>),
}

pub fn run() -> Result<ExitCode, CliError> {
    let cli = Cli::parse();
    match cli.command {
        Command::Top(args) => top::run(args),
        Command::Collect(args) => collect::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Growth(args) => growth::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Flame(args) => flame::run(args),
        Command::Report(args) => report::run(args),
        Command::Check(args) => check::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Triage(args) => triage::run(args),
        Command::Push(args) => push::run(*args),
        Command::Run(args) => run::run(*args),
        Command::Index(args) => index::run(args),
        Command::Ps(args) => ps::run(args),
        Command::OomHoldGuard { cgroup, high } => {
            heapwatch::launch::hold::guard(&cgroup, high.as_deref())
                .map(|()| ExitCode::SUCCESS)
                .map_err(CliError::from)
        }
        Command::Watch(args) => watch::run(*args),
    }
}

/// Flags shared by every command that reads profiles.
#[derive(clap::Args, Clone)]
pub struct DecodeFlags {
    /// Largest decompressed profile accepted (a gzip bomb beyond it is refused).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = units::parse_size)]
    pub max_decompressed: u64,
}

impl DecodeFlags {
    pub fn limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_decompressed: self.max_decompressed,
        }
    }
}

/// The flag of the commands that name sites: which modules are the user's own code.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OwnFlags {
    /// Module path prefixes of your own code (repeat it, or give a comma list: `--own
    /// go.etcd.io/,github.com/openziti/`). A site is then named by its first frame in them (or
    /// in the main module), not by a guess of which modules are yours. Default: those the run
    /// recorded (`collect --own`, each run its own for `compare`); given, they replace them, and
    /// every capture is read from its profile rather than from the run's site index.
    #[arg(long = "own", value_name = "PREFIX", value_delimiter = ',', value_parser = parse_own)]
    pub own: Vec<String>,
}

/// A module path prefix, as `--own` takes it.
fn parse_own(text: &str) -> Result<String, String> {
    let prefix = text.trim();
    if prefix.is_empty() || prefix.contains(char::is_whitespace) {
        return Err(format!(
            "{text:?}: a module path prefix (go.etcd.io/, github.com/openziti/)"
        ));
    }
    Ok(prefix.to_string())
}

/// Reads and decodes one profile file; errors name the file.
pub fn load_profile(path: &Path, limits: &DecodeLimits) -> Result<Profile, CliError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CliError::Read {
        path: shown.clone(),
        source,
    })?;
    decode::decode(&bytes, limits).map_err(|source| CliError::Profile {
        path: shown,
        source,
    })
}

/// Writes a command's output to stdout in one piece.
pub fn emit(text: &str) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(CliError::Output)
}
