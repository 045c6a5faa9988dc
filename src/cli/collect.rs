//! `heapwatch collect TARGET --out RUN`: the flags (here) become a checked plan (`config`:
//! the collector's `CollectConfig`, each target's spec, the run's options), then the collector
//! runs until stopped, with a live status line (`status_line`), and says how it went
//! (`summary`: a line per node, and the verdict that decides the exit status).

mod config;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use heapwatch::collect::cluster::StartError;
use heapwatch::collect::marks::{self, MarkError};
use heapwatch::collect::targets::TargetError;
use heapwatch::launch::hold;
use heapwatch::source::Target;
use heapwatch::store::cluster::EVENTS_FILE;
use heapwatch::units;

use self::config::Plan;
use self::summary::{summary_line, verdict};
use super::record_flags::{RecordFlags, help_order};
use super::status_line::Status;
use super::{CliError, DecodeFlags};

/// Collect's own and shared flags in the order its help shows them (the decoding and pushing
/// flags follow).
pub(super) const HELP_ORDER: &[&str] = &[
    "out",
    "retarget",
    "names",
    "interval",
    "limit",
    "burst_interval",
    "burst_at",
    "profiles",
    "goroutine_interval",
    "memstats_interval",
    "agent_dir",
    "pid",
    "cgroup",
    "oom_hold",
    "memory_interval",
    "timeout",
    "duration",
    "until_exit",
    "grace",
    "max_disk",
    "cpu_limit",
    "max_duty",
    "idle_backoff",
    "max_body",
    "headers",
    "cacert",
    "cert",
    "key",
    "insecure",
    "gc",
    "label",
    "own",
    "logs",
    "marks",
    "quiet",
    "progress_every",
];

#[derive(clap::Args)]
#[command(
    mut_args(help_order(HELP_ORDER)),
    after_help = "Several targets: one collector each, into RUN/targets/NAME/, named by \
--name (in order), else by the agent's app id, the proc:exe: name, the proc:cgroup: folder or \
host-port. Per-target flags take NAME=VALUE: --cgroup ctrl3=/sys/fs/cgroup/memory/ctrl3, \
--pid ctrl1=4242, --limit ctrl2=512MiB (a plain --limit applies to every target)."
)]
pub struct CollectArgs {
    /// http://HOST:PORT (Go net/http/pprof) or a URL naming a profile path; or the OpenZiti
    /// agent: agent:unix:/path.sock, agent:tcp:HOST:PORT, agent:PID, agent:auto[:APP_ID]; or
    /// an Envoy admin port: envoy:http://HOST:PORT (/memory, /stats, /heap_dump); or a local
    /// Go process read from outside through its memory: proc:PID (needs ptrace rights), or
    /// proc:exe:NAME / proc:cgroup:PATH, which follow the process across restarts. Several
    /// targets make a cluster run, one node each.
    /// Credentials in a URL (http://USER:PASSWORD@HOST:PORT) are sent as Basic auth and never
    /// kept: the run and every message show the password as ***.
    #[arg(value_name = "TARGET", required = true, num_args = 1..)]
    targets: Vec<Target>,
    #[command(flatten)]
    record: RecordFlags,
    /// Resume an existing --out run against another target than the one it recorded (its
    /// captures then follow as further boot cycles); without it, that is refused.
    #[arg(long)]
    retarget: bool,
    /// A node's name, for each target in order (repeatable; default: from the target).
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// The target's memory limit: enables time-to-limit and burst mode. With several
    /// targets, NAME=SIZE for one node (repeatable); a plain SIZE applies to all.
    #[arg(long, value_name = "[NAME=]SIZE")]
    limit: Vec<String>,
    /// Profiles to capture: heap, goroutine (comma-separated).
    #[arg(long, default_value = "heap", value_delimiter = ',')]
    profiles: Vec<String>,
    /// Time between goroutine captures (never faster than --interval; further apart when a
    /// goroutine capture takes longer than a heap capture, by that ratio, up to 60s).
    #[arg(long, default_value = "1s", value_parser = units::parse_duration_flag)]
    goroutine_interval: Duration,
    /// Time between runtime figure reads: MemStats, and the agent's stats (0 turns them off).
    #[arg(long, default_value = "5s", value_parser = units::parse_duration_flag)]
    memstats_interval: Duration,
    /// Where agent:PID and agent:auto look for gops-agent.<pid>.sock (default: the temp dir),
    /// e.g. a volume shared with the target's container.
    #[arg(long)]
    agent_dir: Option<PathBuf>,
    /// Sample this process's RSS into memory.jsonl (with an agent target and neither --pid nor
    /// --cgroup, the RSS of the agent's process is sampled, following it across restarts).
    /// With several targets: NAME=PID (repeatable).
    #[arg(long, value_name = "[NAME=]PID")]
    pid: Vec<String>,
    /// Sample this memory cgroup (v1 or v2 directory) into memory.jsonl. With several
    /// targets: NAME=PATH (repeatable).
    #[arg(long, value_name = "[NAME=]PATH")]
    cgroup: Vec<String>,
    /// At the kernel's OOM kill in the target's memory cgroup (--cgroup, or a proc:cgroup:
    /// target), hold the process at its limit until a capture is taken, at most this long,
    /// then let the kernel kill it (v1; on v2 the process is slowed at memory.high, a 16th of
    /// memory.max below it, instead). A guardian process puts the cgroup back should
    /// heapwatch die. One target only.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration_flag)]
    oom_hold: Option<Duration>,
    /// Per-request timeout (shortened in burst mode).
    #[arg(long, default_value = "2s", value_parser = units::parse_duration_flag)]
    timeout: Duration,
    /// Stop after this long.
    #[arg(long, value_parser = units::parse_duration_flag)]
    duration: Option<Duration>,
    /// Stop once the target has been gone for --grace.
    #[arg(long)]
    until_exit: bool,
    #[arg(long, default_value = "5s", value_parser = units::parse_duration_flag)]
    grace: Duration,
    /// The target's CPU limit in cores (e.g. the container's limits.cpu): growth compares
    /// GOMAXPROCS with it (a hidden multiplier of per-P memory).
    #[arg(long)]
    cpu_limit: Option<f64>,
    /// Largest share of time the target may spend rendering profiles for us (0.25: after a
    /// 100 ms render, wait at least 300 ms); doubled in burst mode; 1 removes the cap.
    #[arg(long, default_value_t = 0.25)]
    max_duty: f64,
    /// While the heap stays flat (identical captures, unchanged in-use figures and memory),
    /// the interval doubles up to this many times itself; any movement restores it (1: off).
    #[arg(long, default_value_t = heapwatch::collect::IDLE_BACKOFF)]
    idle_backoff: u32,
    /// Largest response body accepted.
    #[arg(long, default_value = "512MiB", value_parser = units::parse_size)]
    max_body: u64,
    /// Extra request header, e.g. "Authorization: Bearer TOKEN" (repeatable). @FILE reads
    /// such lines from FILE, which keeps a token out of the process list and shell history.
    /// Sent, never written to the run or printed.
    #[arg(long = "header", short = 'H', value_name = "HEADER")]
    headers: Vec<String>,
    /// PEM CA certificate for an https target.
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// PEM client certificate (mutual TLS).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// PEM client key (mutual TLS).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Accept any server certificate.
    #[arg(long)]
    insecure: bool,
    /// Force a GC before each heap profile (?gc=1): fresher in-use figures, perturbs the target.
    #[arg(long)]
    gc: bool,
    /// Tail this log file (NAME=PATH, repeatable) for lines that --mark picks; NAME is a
    /// node's name when the log is that node's. Followed across rotation and truncation.
    #[arg(long = "log", value_name = "NAME=PATH")]
    logs: Vec<String>,
    /// A log line matching REGEX becomes an event LABEL in RUN/events.jsonl, timed by the
    /// timestamp it starts with, else when it was read (LABEL=REGEX, repeatable).
    #[arg(long = "mark", value_name = "LABEL=REGEX")]
    marks: Vec<String>,
    /// With stderr not a terminal, a plain progress line this often.
    #[arg(long, default_value = "10s", value_parser = units::parse_duration_flag, hide = true)]
    progress_every: Duration,
    #[command(flatten)]
    decode: DecodeFlags,
    #[command(flatten)]
    push: super::collect_push::CollectPushFlags,
}

fn usage(message: String) -> CliError {
    CliError::Usage(message)
}

fn start_error(e: StartError) -> CliError {
    match e {
        StartError::Target(TargetError::Unreachable(m)) => CliError::Unreachable(m),
        StartError::Target(TargetError::Usage(m)) | StartError::Layout(m) => usage(m),
        StartError::Marks(e @ MarkError::Write { .. }) => CliError::Marks(e),
        StartError::Marks(e) => usage(e.to_string()),
        StartError::Store(e) => CliError::Run(e),
    }
}

pub fn run(args: CollectArgs) -> Result<ExitCode, CliError> {
    let Plan {
        names,
        specs,
        options,
        oom_hold,
        push,
    } = args.plan()?;
    let cluster = names.len() > 1;
    let logged = !options.logs.is_empty();
    let awaited = marks::AwaitedLogs::new(&options.logs);
    let mut collection = heapwatch::collect::start(specs, options).map_err(start_error)?;
    let mut live_pushes = Vec::new();
    if let Some(push) = push {
        // Each node's run pushes on its own, labelled with its node's name.
        for node in std::mem::take(&mut collection.nodes) {
            let dir = node.dir.clone();
            let node = node.wrap_writer(|writer| {
                let (writer, pushing) = super::collect_push::attach(push.clone(), &dir, writer)?;
                live_pushes.push(pushing);
                Ok::<_, CliError>(writer)
            })?;
            collection.nodes.push(node);
        }
    }

    let stop = collection.stop_flag();
    ctrlc::set_handler(move || stop.set())
        .map_err(|e| usage(format!("cannot install the Ctrl-C handler: {e}")))?;

    let mut status = Status::new(args.record.quiet, args.progress_every, &names);
    status.await_logs(awaited);
    // The OOM hold, started last: nothing is held before the collector runs.
    let held = match oom_hold {
        Some((dir, max)) => {
            let captured = Arc::new(AtomicI64::new(i64::MIN));
            let holder = hold::Holder::start(&dir, max, captured.clone()).map_err(usage)?;
            Some((holder, captured))
        }
        None => None,
    };
    let mut observers = status.observers();
    if let Some((_, captured)) = &held {
        let first = observers.remove(0);
        observers.insert(
            0,
            Box::new(hold::HoldObserver {
                inner: first,
                captured_ms: captured.clone(),
            }),
        );
    }
    let outcome = collection.run(observers);
    drop(held);
    status.finish();
    let pushed = super::collect_push::finish_all(live_pushes, args.record.quiet);

    let mut failures = Vec::new();
    for node in outcome.nodes {
        let summary = match node.result {
            Ok(ref summary) => summary.clone(),
            Err(e) if !cluster => return Err(e.into()),
            Err(e) => {
                failures.push(CliError::Node {
                    node: node.name,
                    source: e,
                });
                continue;
            }
        };
        if !args.record.quiet {
            eprintln!("{}", summary_line(&node, &summary, cluster));
        }
        if let Err(e) = verdict(&node, summary) {
            failures.push(e);
        }
    }
    for line in pushed {
        eprintln!("{line}");
    }
    if let Some(tally) = outcome.events.filter(|_| logged) {
        if let Some(e) = &tally.error {
            eprintln!("heapwatch: events: {e}");
        } else if !args.record.quiet {
            eprintln!(
                "heapwatch: {} event(s) marked in {}",
                tally.events,
                args.record.out.join(EVENTS_FILE).display()
            );
        }
        for log in tally.never_appeared.iter().filter(|_| !args.record.quiet) {
            eprintln!("heapwatch: {}", marks::never_appeared(log));
        }
    }
    // The worst node decides: the store first, then a target that answered garbage, then
    // one that never answered; the others are said here.
    let rank = |e: &CliError| match e {
        CliError::DiskFull { .. } | CliError::Run(_) | CliError::Scan(_) => 0,
        CliError::Index(_) => 0,
        CliError::Collect(_) | CliError::Node { .. } | CliError::Marks(_) => 0,
        CliError::Unreachable(_) => 2,
        _ => 1,
    };
    failures.sort_by_key(rank);
    let mut failures = failures.into_iter();
    let Some(worst) = failures.next() else {
        return Ok(ExitCode::SUCCESS);
    };
    for other in failures {
        eprintln!("heapwatch: {other}");
    }
    Err(worst)
}
