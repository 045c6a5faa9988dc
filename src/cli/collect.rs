//! `heapwatch collect TARGET --out RUN`: flags become a `CollectConfig`, then the collector
//! runs until stopped, with a live status line on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use heapwatch::collect::Clock as _;
use heapwatch::collect::sampler::Sampler;
use heapwatch::collect::{
    CollectConfig, Collector, LiveStatus, Observer, OutsideMemory, Stop, StopReason, SystemClock,
};
use heapwatch::source::Source;
use heapwatch::source::agent::{AgentOptions, AgentSource};
use heapwatch::source::envoy::EnvoySource;
use heapwatch::source::http::{HttpOptions, HttpSource};
use heapwatch::source::proc::follow::{Attacher, FollowSource};
use heapwatch::source::proc::{ProcError, ProcSource};
use heapwatch::source::procfind::ProcSelector;
use heapwatch::source::procmem::{CgroupMemory, MemoryProbe};
use heapwatch::source::{FailureKind, FetchError};
use heapwatch::store::{CaptureRecord, RunInfo, RunWriter};
use heapwatch::units::{self, format_bytes};

use super::{CliError, DecodeFlags};

#[derive(clap::Args)]
pub struct CollectArgs {
    /// http://HOST:PORT (Go net/http/pprof) or a URL naming a profile path; or the OpenZiti
    /// agent: agent:unix:/path.sock, agent:tcp:HOST:PORT, agent:PID, agent:auto[:APP_ID]; or
    /// an Envoy admin port: envoy:http://HOST:PORT (/memory, /stats, /heap_dump); or a local
    /// Go process read from outside through its memory: proc:PID (needs ptrace rights), or
    /// proc:exe:NAME / proc:cgroup:PATH, which follow the process across restarts.
    target: String,
    /// The run directory (created, or resumed when it exists).
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Time between heap captures.
    #[arg(long, default_value = "500ms", value_parser = units::parse_duration)]
    interval: Duration,
    /// The target's memory limit: enables time-to-limit and burst mode.
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// Interval once memory passes --burst-at of the limit.
    #[arg(long, default_value = "100ms", value_parser = units::parse_duration)]
    burst_interval: Duration,
    /// Fraction of the limit at which burst mode starts.
    #[arg(long, default_value_t = 0.6)]
    burst_at: f64,
    /// Profiles to capture: heap, goroutine (comma-separated).
    #[arg(long, default_value = "heap", value_delimiter = ',')]
    profiles: Vec<String>,
    /// Time between goroutine captures (never faster than --interval).
    #[arg(long, default_value = "1s", value_parser = units::parse_duration)]
    goroutine_interval: Duration,
    /// Time between runtime figure reads: MemStats, and the agent's stats (0 turns them off).
    #[arg(long, default_value = "5s", value_parser = units::parse_duration)]
    memstats_interval: Duration,
    /// Where agent:PID and agent:auto look for gops-agent.<pid>.sock (default: the temp dir),
    /// e.g. a volume shared with the target's container.
    #[arg(long)]
    agent_dir: Option<PathBuf>,
    /// Sample this process's RSS into memory.jsonl (with an agent target and neither --pid nor
    /// --cgroup, the RSS of the agent's process is sampled, following it across restarts).
    #[arg(long)]
    pid: Option<u32>,
    /// Sample this memory cgroup (v1 or v2 directory) into memory.jsonl.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Time between process / cgroup memory samples.
    #[arg(long, default_value = "50ms", value_parser = units::parse_duration)]
    memory_interval: Duration,
    /// Per-request timeout (shortened in burst mode).
    #[arg(long, default_value = "2s", value_parser = units::parse_duration)]
    timeout: Duration,
    /// Stop after this long.
    #[arg(long, value_parser = units::parse_duration)]
    duration: Option<Duration>,
    /// Stop once the target has been gone for --grace.
    #[arg(long)]
    until_exit: bool,
    #[arg(long, default_value = "5s", value_parser = units::parse_duration)]
    grace: Duration,
    /// Disk budget for stored profiles; older boot cycles are thinned first.
    #[arg(long, value_parser = units::parse_size)]
    max_disk: Option<u64>,
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
    /// Extra request header, e.g. "Authorization: Bearer TOKEN" (repeatable).
    #[arg(long = "header", short = 'H')]
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
    /// A label for this build (e.g. 2.1.0), kept in run.json for reports and comparisons.
    #[arg(long)]
    label: Option<String>,
    /// No status line, no progress lines and no summary.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// With stderr not a terminal, a plain progress line this often.
    #[arg(long, default_value = "10s", value_parser = units::parse_duration, hide = true)]
    progress_every: Duration,
    #[command(flatten)]
    decode: DecodeFlags,
    #[command(flatten)]
    push: super::collect_push::CollectPushFlags,
}

fn usage(message: String) -> CliError {
    CliError::Usage(message)
}

impl CollectArgs {
    fn config(&self) -> Result<CollectConfig, CliError> {
        if self.interval.is_zero() || self.burst_interval.is_zero() {
            return Err(usage(
                "--interval and --burst-interval must be above zero".into(),
            ));
        }
        if !(self.max_duty > 0.0 && self.max_duty <= 1.0) {
            return Err(usage(format!(
                "--max-duty {} must be in (0, 1]",
                self.max_duty
            )));
        }
        if !(self.burst_at > 0.0 && self.burst_at <= 1.0) {
            return Err(usage(format!(
                "--burst-at {} must be in (0, 1]",
                self.burst_at
            )));
        }
        let mut heap = false;
        let mut goroutine = false;
        for p in &self.profiles {
            match p.trim() {
                "heap" => heap = true,
                "goroutine" => goroutine = true,
                other => {
                    return Err(usage(format!(
                        "--profiles: unknown profile {other:?} (heap, goroutine)"
                    )));
                }
            }
        }
        Ok(CollectConfig {
            interval: self.interval,
            burst_interval: self.burst_interval,
            burst_at: self.burst_at,
            limit: self.limit,
            timeout: self.timeout,
            heap: heap || !goroutine,
            goroutine,
            goroutine_interval: self.goroutine_interval,
            memstats_interval: self.memstats_interval,
            duration: self.duration,
            until_exit: self.until_exit.then_some(self.grace),
            max_disk: self.max_disk,
            max_duty: self.max_duty,
            idle_backoff: self.idle_backoff.max(1),
            decode: self.decode.limits(),
        })
    }

    fn http_options(&self) -> Result<HttpOptions, CliError> {
        let mut headers = Vec::new();
        for h in &self.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| usage(format!("--header {h:?}: expected \"Name: value\"")))?;
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        Ok(HttpOptions {
            headers,
            cacert: self.cacert.clone(),
            client_cert: self.cert.clone(),
            client_key: self.key.clone(),
            insecure: self.insecure,
            force_gc: self.gc,
            max_body: self.max_body,
        })
    }

    fn probe(&self) -> Result<Option<MemoryProbe>, CliError> {
        match (&self.cgroup, self.pid) {
            (Some(path), _) => CgroupMemory::open(path)
                .map(|c| Some(MemoryProbe::Cgroup(c)))
                .map_err(usage),
            (None, Some(pid)) => Ok(Some(MemoryProbe::Pid(pid))),
            (None, None) => Ok(None),
        }
    }
}

/// Draws the live status line on a terminal; elsewhere (a CI log, a file) prints it as a
/// plain line every `progress_every`.
struct StatusLine {
    bar: Option<ProgressBar>,
    /// Off the terminal: how often, and when the last plain line was printed.
    plain: Option<(Duration, Option<std::time::Instant>)>,
}

impl StatusLine {
    fn new(quiet: bool, progress_every: Duration) -> StatusLine {
        if quiet {
            return StatusLine {
                bar: None,
                plain: None,
            };
        }
        if !std::io::stderr().is_terminal() {
            return StatusLine {
                bar: None,
                plain: Some((progress_every, None)),
            };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("static template"));
        bar.enable_steady_tick(Duration::from_millis(200));
        StatusLine {
            bar: Some(bar),
            plain: None,
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn describe(status: &LiveStatus) -> String {
    let mut parts = vec![format!("{} captures", status.captures)];
    if let Some(h) = status.heap_inuse {
        parts.push(format!("heap {}", format_bytes(h)));
    }
    if let Some(rate) = status.growth_bps {
        parts.push(format!("{}/s", format_bytes(rate as i64)));
    }
    let total = status
        .memory_total
        .map(|t| format!(" (all charged {})", format_bytes(t as i64)))
        .unwrap_or_default();
    match (status.memory, status.limit) {
        (Some(m), Some(l)) => parts.push(format!(
            "memory {} of {}{total}",
            format_bytes(m as i64),
            format_bytes(l as i64)
        )),
        (Some(m), None) => parts.push(format!("memory {}{total}", format_bytes(m as i64))),
        _ => {}
    }
    if status.at_limit() {
        parts.push("AT THE LIMIT".into());
    } else if let Some(secs) = status.time_to_limit() {
        parts.push(format!("limit in {secs:.1}s"));
    }
    if let Some(g) = status.goroutines {
        parts.push(format!("{g} goroutines"));
    }
    parts.push(format!("cycle {}", status.incarnation));
    if status.bursting {
        parts.push("BURST".into());
    }
    if status.errors > 0 {
        parts.push(format!("{} errors", status.errors));
    }
    if let Some(e) = &status.last_error {
        let short: String = e.chars().take(60).collect();
        parts.push(format!("last error: {short}"));
    }
    parts.join(" | ")
}

impl Observer for StatusLine {
    fn attempt(&mut self, _record: &CaptureRecord, status: &LiveStatus) {
        if let Some(bar) = &self.bar {
            bar.set_message(describe(status));
        }
        if let Some((every, last)) = &mut self.plain {
            let now = std::time::Instant::now();
            if last.is_none_or(|t| now.duration_since(t) >= *every) {
                *last = Some(now);
                eprintln!("heapwatch: {}", describe(status));
            }
        }
    }
}

pub fn run(args: CollectArgs) -> Result<ExitCode, CliError> {
    let config = args.config()?;
    let push = args.push.prepare(args.decode.limits())?;
    let mut probe = args.probe()?;
    if args.agent_dir.is_some() && !args.target.starts_with("agent:") {
        return Err(usage(format!(
            "--agent-dir is for agent:PID and agent:auto targets, not {}",
            args.target
        )));
    }
    let source: Box<dyn Source> = if args.target.starts_with("http://")
        || args.target.starts_with("https://")
    {
        Box::new(
            HttpSource::new(&args.target, &args.http_options()?).map_err(|e| usage(e.message))?,
        )
    } else if args.target.starts_with("envoy:") {
        Box::new(
            EnvoySource::new(&args.target, &args.http_options()?).map_err(|e| usage(e.message))?,
        )
    } else if args.target.starts_with("agent:") {
        let agent = AgentSource::new(
            &args.target,
            &AgentOptions {
                dir: args.agent_dir.clone(),
                max_body: args.max_body,
            },
        )
        .map_err(|e| usage(e.message))?;
        if probe.is_none() {
            probe = Some(MemoryProbe::Follow(agent.pid_cell()));
        }
        Box::new(agent)
    } else if let Some(selector) = ProcSelector::parse(&args.target) {
        // proc:exe:NAME, proc:cgroup:PATH: whichever process that is now, across restarts.
        let follow = FollowSource::new(
            &args.target,
            selector.map_err(usage)?,
            proc_attacher(&args.target),
            config.interval,
        );
        if probe.is_none() {
            let cgroup = follow.finder().cgroup_dir();
            probe = Some(match cgroup.and_then(|d| CgroupMemory::open(&d).ok()) {
                Some(cg) => MemoryProbe::Cgroup(cg),
                None => MemoryProbe::Follow(follow.pid_cell()),
            });
        }
        Box::new(follow)
    } else if let Some(pid) = heapwatch::source::proc::parse_target(&args.target) {
        let pid = pid.map_err(usage)?;
        let proc = ProcSource::attach(pid, args.target.clone())
            .map_err(|e| CliError::Unreachable(e.to_string()))?;
        if probe.is_none() {
            probe = Some(MemoryProbe::Pid(pid));
        }
        Box::new(proc)
    } else {
        return Err(usage(format!(
            "{}: unknown target (expected http://HOST:PORT, https://…, envoy:http://HOST:PORT, \
             agent:unix:/path.sock, agent:tcp:HOST:PORT, agent:PID, agent:auto[:APP_ID], proc:PID, \
             proc:exe:NAME or proc:cgroup:PATH)",
            args.target
        )));
    };
    let (writer, existing) =
        RunWriter::open(&args.out).map_err(|e| CliError::Store(e.to_string()))?;
    let clock = SystemClock::new();
    let mut info = RunInfo {
        schema: heapwatch::render::SCHEMA,
        tool: concat!("heapwatch ", env!("CARGO_PKG_VERSION")).to_string(),
        target: args.target.clone(),
        source: source.kind().as_str().to_string(),
        started_ms: clock.unix_ms(),
        resumed_ms: Vec::new(),
        options: serde_json::json!({
            "interval_ms": config.interval.as_millis() as u64,
            "burst_interval_ms": config.burst_interval.as_millis() as u64,
            "burst_at": config.burst_at,
            "max_duty": config.max_duty,
            "idle_backoff": config.idle_backoff,
            "cpu_limit": args.cpu_limit,
            "timeout_ms": config.timeout.as_millis() as u64,
            "profiles": args.profiles,
            "memstats_interval_ms": config.memstats_interval.as_millis() as u64,
            "pid": args.pid,
            "cgroup": args.cgroup,
            "agent_dir": args.agent_dir,
            "max_disk": config.max_disk,
            "gc": args.gc,
        }),
        limit_bytes: config.limit,
        label: args.label.clone(),
    };
    if let Ok(previous) = heapwatch::store::RunDir::open(&args.out) {
        if let Some(mut old) = previous.info {
            old.resumed_ms.push(info.started_ms);
            if info.limit_bytes.is_some() {
                old.limit_bytes = info.limit_bytes;
            }
            info = old;
        }
    }
    let outside = Arc::new(OutsideMemory::default());
    if let Some(MemoryProbe::Cgroup(cg)) = &probe {
        if info.limit_bytes.is_none() {
            info.limit_bytes = cg.limit();
        }
    }
    writer
        .write_info(&info)
        .map_err(|e| CliError::Store(e.to_string()))?;
    let (writer, push) = super::collect_push::attach(push, &args.out, writer)?;
    // A reply that does not name its process (HTTP, Envoy) is filed under the process the
    // probe sees, so a new pid opens a new boot cycle.
    let pid_probe = probe
        .clone()
        .filter(|p| !matches!(p, MemoryProbe::Follow(_)));
    // How watched processes end (exit code or signal), where the kernel tells (root).
    let exits = heapwatch::collect::exits::ExitWatcher::start()
        .ok()
        .map(Arc::new);
    let sampler = match probe {
        Some(p) => Some(Sampler::start(
            p,
            args.memory_interval,
            writer
                .memory_log()
                .map_err(|e| CliError::Store(e.to_string()))?,
            outside.clone(),
            exits.clone(),
        )),
        None => None,
    };

    let stop = Stop::new();
    let on_interrupt = stop.clone();
    ctrlc::set_handler(move || on_interrupt.set())
        .map_err(|e| usage(format!("cannot install the Ctrl-C handler: {e}")))?;

    let mut status_line = StatusLine::new(args.quiet, args.progress_every);
    let mut collector = Collector::new(config, source, Arc::new(clock), writer, &existing, stop)
        .with_outside_memory(outside);
    if let Some(probe) = pid_probe {
        collector = collector.with_pid_probe(probe);
    }
    if let Some(exits) = &exits {
        collector = collector.with_exits(exits.clone());
    }
    let result = collector.run(&mut status_line);
    status_line.finish();
    let tally = sampler.map(Sampler::finish);
    let pushed = push.and_then(|p| p.finish(args.quiet));
    if let Some(exits) = &exits {
        exits.finish();
    }
    let summary = result.map_err(|e| CliError::Store(e.to_string()))?;

    if !args.quiet {
        let mut line = format!(
            "heapwatch: {} captures ({} stored, {} duplicates, {} errors) over {} boot cycle(s) in {}",
            summary.captures,
            summary.stored,
            summary.duplicates,
            summary.errors,
            summary.incarnations,
            args.out.display()
        );
        if summary.deleted > 0 {
            line.push_str(&format!("; {} thinned for --max-disk", summary.deleted));
        }
        if let Some(t) = tally.as_ref().filter(|t| t.samples > 0) {
            line.push_str(&format!("; memory peak {}", format_bytes(t.peak as i64)));
            if t.kills > 0 {
                line.push_str(&format!(", {} OOM kill(s)", t.kills));
            }
        }
        eprintln!("{line}");
    }
    if let Some(line) = pushed {
        eprintln!("{line}");
    }
    if summary.reason == StopReason::DiskFull {
        return Err(CliError::Store(format!(
            "stopped: {}",
            summary.disk_error.unwrap_or_else(|| "disk full".into())
        )));
    }
    if !summary.reached && summary.responded {
        return Err(CliError::Usage(format!(
            "{}: the target answered but never with a valid profile ({} attempts; last: {}); see {}/manifest.jsonl",
            args.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            args.out.display()
        )));
    }
    if !summary.reached {
        return Err(CliError::Unreachable(format!(
            "{}: the target never answered ({} attempts; last: {}); see {}/manifest.jsonl",
            args.target,
            summary.attempts,
            summary.last_error.as_deref().unwrap_or("?"),
            args.out.display()
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Attaches the proc source to each process a following target finds; a process that is
/// gone by then is refused (gone), anything else an error for that attempt.
pub(super) fn proc_attacher(target: &str) -> Attacher {
    let target = target.to_string();
    Box::new(move |pid| {
        ProcSource::attach(pid, target.clone())
            .map(|s| Box::new(s) as Box<dyn Source>)
            .map_err(|e| {
                let kind = match e {
                    ProcError::NoProcess { .. } => FailureKind::Refused,
                    _ => FailureKind::Other,
                };
                FetchError::new(kind, e.to_string())
            })
    })
}
