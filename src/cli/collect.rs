//! `heapwatch collect TARGET --out RUN`: the flags (here) become a checked plan (`config`:
//! the collector's `CollectConfig`, each target's spec, the run's options), then the collector
//! runs until stopped, with a live status line on a terminal.
//!
//! **Progress off the terminal** is the status line printed plainly every 10 s (a hidden
//! `--progress-every` sets it for tests); `--quiet` silences it. `run` has the same line as
//! `collect`, its starts and ends printed above it. What the line says, and how it is fitted to
//! the terminal (`fit`), is `src/collect/status.rs`'s doc.

mod config;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use heapwatch::collect::cluster::{NodeOutcome, StartError};
use heapwatch::collect::marks::{self, MarkError};
use heapwatch::collect::targets::TargetError;
use heapwatch::collect::{CollectSummary, LiveStatus, Observer, StopReason};
use heapwatch::launch::hold;
use heapwatch::render::ends::{ProcessEnd, process_end_words};
use heapwatch::source::Target;
use heapwatch::store::CaptureRecord;
use heapwatch::store::cluster::EVENTS_FILE;
use heapwatch::units::{self, format_bytes};

use self::config::Plan;
use super::record_flags::{RecordFlags, help_order};
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

/// One node's row of the live status: a spinner on a terminal; elsewhere (a CI log, a file)
/// a plain line every `progress_every`, naming the node in a cluster run.
struct StatusLine {
    /// The node's name in a cluster run (none for a single target).
    name: Option<String>,
    bar: Option<ProgressBar>,
    /// Off the terminal: how often, and when the last plain line was printed.
    plain: Option<(Duration, Option<std::time::Instant>)>,
    /// The `--log` files not there yet, said with the plain line (by the first row only).
    awaited: Option<marks::AwaitedLogs>,
    /// Each process end gets a line of its own that stays (`run` says them itself).
    tell_ends: bool,
    quiet: bool,
}

/// The status rows of every node.
pub(super) struct Status {
    rows: Vec<StatusLine>,
    /// Every bar, to clear at the end.
    bars: Vec<ProgressBar>,
}

impl Status {
    pub(super) fn new(quiet: bool, progress_every: Duration, names: &[String]) -> Status {
        let cluster = names.len() > 1;
        let name = |n: &String| cluster.then(|| n.clone());
        if quiet || !std::io::stderr().is_terminal() {
            let plain = (!quiet).then_some((progress_every, None));
            let rows = names
                .iter()
                .map(|n| StatusLine {
                    name: name(n),
                    bar: None,
                    plain,
                    awaited: None,
                    tell_ends: true,
                    quiet,
                })
                .collect();
            return Status {
                rows,
                bars: Vec::new(),
            };
        }
        let multi = MultiProgress::new();
        let width = names.iter().map(String::len).max().unwrap_or(0);
        let mut rows = Vec::new();
        let mut bars = Vec::new();
        for n in names {
            let template = if cluster {
                "{spinner} {prefix} {msg}"
            } else {
                "{spinner} {msg}"
            };
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template(template).expect("static template"));
            bar.set_prefix(format!("{n:width$}"));
            let bar = if cluster { multi.add(bar) } else { bar };
            bar.enable_steady_tick(Duration::from_millis(200));
            bars.push(bar.clone());
            rows.push(StatusLine {
                name: name(n),
                bar: Some(bar),
                plain: None,
                awaited: None,
                tell_ends: true,
                quiet,
            });
        }
        Status { rows, bars }
    }

    fn await_logs(&mut self, logs: marks::AwaitedLogs) {
        if let Some(row) = self.rows.first_mut().filter(|r| r.plain.is_some()) {
            row.awaited = Some(logs);
        }
    }

    /// A line that stays, printed above the status rows (never through them).
    pub(super) fn println(&self, line: &str) {
        match self.bars.first() {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// The rows leave process ends to whoever prints them (`run`'s supervisor).
    pub(super) fn ends_told_elsewhere(&mut self) {
        for row in &mut self.rows {
            row.tell_ends = false;
        }
    }

    pub(super) fn observers(&mut self) -> Vec<Box<dyn Observer + Send>> {
        std::mem::take(&mut self.rows)
            .into_iter()
            .map(|r| Box::new(r) as Box<dyn Observer + Send>)
            .collect()
    }

    pub(super) fn finish(&self) {
        for bar in &self.bars {
            bar.finish_and_clear();
        }
    }
}

/// The status line's parts in the order shown, each with its rank: when the line must be
/// shortened to fit the terminal, the highest ranks go first.
fn status_parts(status: &LiveStatus) -> Vec<(u8, String)> {
    let mut parts = vec![(0, format!("{} captures", status.captures))];
    if status.gone {
        parts.push((0, "target gone".into()));
    }
    if let Some(h) = status.heap_inuse {
        parts.push((1, format!("heap {}", format_bytes(h))));
    }
    if let Some(rate) = status.growth_bps {
        parts.push((4, format!("{}/s", format_bytes(rate as i64))));
    }
    let fmt = |b: u64| format_bytes(b as i64);
    match (status.cgroup_usage(), status.memory_total, status.limit) {
        // The cgroup's usage is what its limit counts; the part that cannot be reclaimed is
        // said only when it is a part (smaller than the whole).
        (Some(charged), _, limit) => {
            let mut s = format!("cgroup {}", fmt(charged));
            if let Some(l) = limit {
                s.push_str(&format!(" of {}", fmt(l)));
            }
            parts.push((1, s));
            if let Some(m) = status.memory.filter(|&m| m + (1 << 20) <= charged) {
                parts.push((4, format!("{} of it not reclaimable", fmt(m))));
            }
        }
        // A process's RSS holds its binary's mapped text: said as RSS, not set against a
        // limit that counts a cgroup.
        (None, Some(rss), limit) => parts.push((
            1,
            match limit {
                Some(l) => format!("RSS {}, limit {}", fmt(rss), fmt(l)),
                None => format!("RSS {}", fmt(rss)),
            },
        )),
        (None, None, limit) => {
            if let Some(m) = status.memory {
                parts.push((
                    1,
                    match limit {
                        Some(l) => format!("memory {} of {}", fmt(m), fmt(l)),
                        None => format!("memory {}", fmt(m)),
                    },
                ));
            }
        }
    }
    if status.at_limit() {
        parts.push((0, "at limit".into()));
    } else if let Some(secs) = status.time_to_limit() {
        parts.push((2, format!("limit in {secs:.0}s")));
    }
    if let Some((site, rate)) = &status.top_site {
        parts.push((
            4,
            format!("top {} +{}/s", short_site(site), format_bytes(*rate as i64)),
        ));
    }
    if let Some(g) = status.goroutines {
        parts.push((5, format!("{g} goroutines")));
    }
    parts.push((3, format!("cycle {}", status.cycle)));
    if status.bursting {
        parts.push((2, "BURST".into()));
    }
    if status.errors > 0 {
        parts.push((3, format!("{} errors", status.errors)));
    }
    if let Some(e) = &status.last_error {
        parts.push((6, format!("last error: {}", cut_at_word(e, 60))));
    }
    parts
}

/// A site's name as short as a status line needs: without its import path and the leaf
/// named beside it (`…/server.(*client).queueOutbound (leaf …)` is `server.(*client).queueOutbound`).
fn short_site(site: &str) -> &str {
    let own = site.split(" (leaf ").next().unwrap_or(site);
    // The import path ends at the last '/' before the package's name (not one inside it).
    let name_start = own.find(".(").or_else(|| own.rfind('.')).unwrap_or(0);
    own[..name_start]
        .rfind('/')
        .map_or(own, |slash| &own[slash + 1..])
}

/// At most `max` characters of `text`, cut at a word's end with `…` when cut.
fn cut_at_word(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    let cut = head
        .rfind(' ')
        .filter(|&at| at > max / 2)
        .unwrap_or(head.len());
    format!("{}…", head[..cut].trim_end())
}

/// The parts joined, dropping the highest ranks until the line fits `width` characters (a
/// line that fits never wraps, so a redraw or a resize leaves nothing behind).
fn fit(parts: &[(u8, String)], width: Option<usize>) -> String {
    let join = |keep: &dyn Fn(u8) -> bool| {
        parts
            .iter()
            .filter(|(rank, _)| keep(*rank))
            .map(|(_, p)| p.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let Some(width) = width else {
        return join(&|_| true);
    };
    let mut worst = parts.iter().map(|(r, _)| *r).max().unwrap_or(0);
    loop {
        let line = join(&|r| r <= worst);
        if line.chars().count() <= width || worst == 0 {
            return if line.chars().count() <= width {
                line
            } else {
                line.chars().take(width).collect()
            };
        }
        worst -= 1;
    }
}

fn describe(status: &LiveStatus) -> String {
    fit(&status_parts(status), None)
}

/// The columns of the terminal stderr is, when it is one.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize on a valid descriptor and fails on any other.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// A process end as a line that stays: `cycle 3: pid 4242 OOM-killed (signal 9)`.
fn describe_end(record: &CaptureRecord) -> String {
    let pid = record
        .pid
        .map_or("the process".into(), |p| format!("pid {p}"));
    let how = process_end_words(&ProcessEnd::of_record(record));
    format!("cycle {}: {pid} {how}", record.cycle)
}

impl Observer for StatusLine {
    fn ended(&mut self, record: &CaptureRecord) {
        if self.quiet || !self.tell_ends {
            return;
        }
        let who = self
            .name
            .as_ref()
            .map(|n| format!("{n}: "))
            .unwrap_or_default();
        let line = format!("heapwatch: {who}{}", describe_end(record));
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn attempt(&mut self, _record: &CaptureRecord, status: &LiveStatus) {
        if let Some(bar) = &self.bar {
            // The spinner, the node's name and their spaces take the rest.
            let used = 2 + self.name.as_ref().map_or(0, |n| n.len() + 1);
            let width = terminal_width().map(|w| w.saturating_sub(used + 1));
            bar.set_message(fit(&status_parts(status), width));
        }
        if let Some((every, last)) = &mut self.plain {
            let now = std::time::Instant::now();
            if last.is_none_or(|t| now.duration_since(t) >= *every) {
                *last = Some(now);
                match &self.name {
                    Some(name) => eprintln!("heapwatch: {name}: {}", describe(status)),
                    None => eprintln!("heapwatch: {}", describe(status)),
                }
                for missing in self.awaited.iter_mut().flat_map(|a| a.missing_now()) {
                    eprintln!("heapwatch: {missing}");
                }
            }
        }
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

/// The summary of one node: as it always was for a single target, with the node's name in a
/// cluster run.
fn summary_line(node: &NodeOutcome, summary: &CollectSummary, cluster: bool) -> String {
    let who = if cluster {
        format!("{}: ", node.name)
    } else {
        String::new()
    };
    let mut line = format!(
        "heapwatch: {who}{} over {} boot cycle(s) in {}",
        attempts_line(summary),
        summary.cycles,
        node.dir.display()
    );
    if summary.deleted > 0 {
        line.push_str(&format!("; {} thinned for --max-disk", summary.deleted));
    }
    if summary.unindexed > 0 {
        line.push_str(&format!(
            "; {} not in the site index yet (the first analysis indexes them)",
            summary.unindexed
        ));
    }
    if let Some(t) = node.memory.as_ref().filter(|t| t.samples > 0) {
        line.push_str(&format!("; memory peak {}", format_bytes(t.peak as i64)));
        if t.kills > 0 {
            line.push_str(&format!(", {} OOM kill(s)", t.kills));
        }
    }
    line
}

/// Every attempt counted once: `N attempts: S stored, D duplicate(s), F runtime figure read(s),
/// E failed`, which add up to N.
pub(super) fn attempts_line(s: &CollectSummary) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{}: {} stored, {}, {}, {} failed",
        plural(s.attempts, "attempt", "attempts"),
        s.stored,
        plural(s.duplicates, "duplicate", "duplicates"),
        plural(s.figures, "runtime figure read", "runtime figure reads"),
        s.errors
    )
}

/// Today's rules for how a node's collection went: a full disk, a target that answered only
/// with garbage, a target that never answered.
fn verdict(node: &NodeOutcome, summary: CollectSummary) -> Result<(), CliError> {
    if summary.reason == StopReason::DiskFull {
        return Err(CliError::DiskFull {
            why: summary.disk_error,
        });
    }
    if !summary.reached && summary.responded {
        return Err(CliError::Usage(format!(
            "{}: the target answered but never with a valid profile ({} attempts; last: {}); see {}/manifest.jsonl",
            node.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            node.dir.display()
        )));
    }
    if !summary.reached {
        return Err(CliError::Unreachable(format!(
            "{}: the target never answered ({} attempts; last: {}); see {}/manifest.jsonl",
            node.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            node.dir.display()
        )));
    }
    Ok(())
}

/// Kept here for `heapwatch run`, which follows the processes it starts the same way.
pub(super) use heapwatch::collect::targets::proc_attacher;

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> LiveStatus {
        let mut s = LiveStatus::default();
        s.captures = 1234;
        s.heap_inuse = Some(105 << 20);
        s.growth_bps = Some(3.0 * (1 << 20) as f64);
        s.memory = Some(180 << 20);
        s.memory_total = Some(250 << 20);
        s.limit = Some(256 << 20);
        s.goroutines = Some(3165);
        s.top_site = Some((
            "github.com/nats-io/nats-server/v2/server.(*client).queueOutbound (leaf \
             github.com/nats-io/nats-server/v2/server.init.func3)"
                .into(),
            2.5 * (1 << 20) as f64,
        ));
        s.cycle = 3;
        s.bursting = true;
        s.errors = 2;
        s.last_error = Some(
            "http://127.0.0.1:8222/debug/pprof/heap: connection refused while the target \
             restarted after its OOM kill"
                .into(),
        );
        s
    }

    #[test]
    fn the_status_line_fits_the_terminal_dropping_the_least_needed_parts() {
        let parts = status_parts(&busy());
        let full = fit(&parts, None);
        assert!(full.chars().count() > 80, "{full}");
        for width in [40, 60, 80, 120] {
            let line = fit(&parts, Some(width));
            assert!(line.chars().count() <= width, "{width}: {line}");
            assert!(line.starts_with("1234 captures"), "{line}");
        }
        let at_80 = fit(&parts, Some(80));
        assert!(at_80.contains("cgroup 250 MiB of 256 MiB"), "{at_80}");
        assert!(!at_80.contains("last error"), "{at_80}");
    }

    #[test]
    fn the_status_line_names_the_top_growing_site_briefly() {
        let line = fit(&status_parts(&busy()), None);
        assert!(
            line.contains("top server.(*client).queueOutbound +2.50 MiB/s"),
            "{line}"
        );
        assert_eq!(short_site("main.grow"), "main.grow");
        assert_eq!(short_site("example.com/a/b.(*T).m"), "b.(*T).m");
        assert_eq!(short_site("example.com/a/b.f (leaf runtime.x)"), "b.f");
    }

    #[test]
    fn an_oom_kill_gets_a_line_of_its_own() {
        let mut r = CaptureRecord::new(9, heapwatch::store::RecordKind::Exit, 3, 0);
        r.pid = Some(4242);
        r.signal = Some(9);
        r.totals.insert("oom_kill".into(), 1);
        assert_eq!(
            describe_end(&r),
            "cycle 3: pid 4242 OOM-killed (signal 9, the cgroup's oom_kill rose)"
        );
        r.totals.clear();
        assert_eq!(
            describe_end(&r),
            "cycle 3: pid 4242 killed by signal 9 (SIGKILL)"
        );
        r.signal = None;
        r.exit_code = Some(0);
        assert_eq!(describe_end(&r), "cycle 3: pid 4242 exited with code 0");
    }

    #[test]
    fn off_the_terminal_nothing_is_cut_mid_word() {
        let line = describe(&busy());
        let error = line.split("last error: ").nth(1).unwrap();
        assert!(error.ends_with('…'), "{error}");
        let kept = error.trim_end_matches('…');
        assert!(
            busy().last_error.unwrap().starts_with(kept) && kept.ends_with("refused"),
            "cut after a whole word: {kept:?}"
        );
        assert!(
            line.contains("cgroup 250 MiB of 256 MiB | 180 MiB of it not reclaimable"),
            "{line}"
        );
    }

    /// Issue 35, items 5a and 7b: "memory 277 MiB of 256 MiB … at limit" set a process's RSS
    /// (or the heap) against the cgroup's limit, and "memory 114 MiB (all charged 111 MiB)"
    /// gave a part larger than its whole. The cgroup's usage is what its limit counts; RSS is
    /// said as RSS and set against nothing.
    #[test]
    fn the_cgroups_usage_is_set_against_the_limit_and_rss_says_it_is_rss() {
        let mib = 1u64 << 20;
        let mut s = LiveStatus::default();
        s.captures = 10;
        s.heap_inuse = Some(114 << 20);
        s.memory = Some(114 * mib);
        s.memory_total = Some(111 * mib);
        s.limit = Some(256 * mib);
        let line = describe(&s);
        assert!(line.contains("cgroup 111 MiB of 256 MiB"), "{line}");
        assert!(
            !line.contains("of it not reclaimable"),
            "no part larger than its whole: {line}"
        );
        assert!(!line.contains("memory 114 MiB"), "{line}");
        // A process's RSS past the limit, its binary's text included: RSS, and not at the limit
        // while what can kill is under it.
        s.memory = Some(200 * mib);
        s.memory_total = Some(277 * mib);
        s.memory_total_is_rss = true;
        let line = describe(&s);
        assert!(line.contains("RSS 277 MiB, limit 256 MiB"), "{line}");
        assert!(!line.contains("277 MiB of 256 MiB"), "{line}");
        assert!(!line.contains("at limit"), "{line}");
        // Nothing from outside: the Go runtime's own figure against the limit.
        s.memory_total = None;
        s.memory_total_is_rss = false;
        assert!(describe(&s).contains("memory 200 MiB of 256 MiB"));
    }
}
