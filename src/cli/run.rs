//! `heapwatch run --out RUN [--limit SIZE] [--restarts N] -- CMD ARGS…`: flags become a
//! `launch::Recording`; the launcher starts, records and restarts the command.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use heapwatch::collect::{Clock as _, CollectConfig, Stop, SystemClock};
use heapwatch::launch::{
    self, Confinement, Ending, Launch, LifeEvent, RestartOn, RestartPolicy, SubRun,
};
use heapwatch::render::ends::{ProcessEnd, process_end_words};
use heapwatch::source::agent::{AgentOptions, AgentSource};
use heapwatch::source::cgroup::CgroupRoots;
use heapwatch::source::envoy::EnvoySource;
use heapwatch::source::http::{HttpOptions, HttpSource};
use heapwatch::source::proc::follow::FollowSource;
use heapwatch::source::procfind::{ProcSelector, SharedPid};
use heapwatch::source::{Source, Target};
use heapwatch::store::RunInfo;
use heapwatch::units::{self, format_bytes};

use super::CliError;
use super::record_flags::{RecordFlags, help_order};
use super::status_line::{Status, attempts_line};
use heapwatch::collect::targets::proc_attacher;

/// Run's flags in the order its help shows them.
pub(super) const HELP_ORDER: &[&str] = &[
    "out",
    "retarget",
    "limit",
    "restarts",
    "restart_policy",
    "oom_hold",
    "backoff",
    "kubelet_backoff",
    "also",
    "interval",
    "burst_interval",
    "burst_at",
    "memory_interval",
    "timeout",
    "max_disk",
    "label",
    "own",
    "quiet",
];

#[derive(clap::Args)]
#[command(mut_args(help_order(HELP_ORDER)))]
pub struct RunArgs {
    #[command(flatten)]
    record: RecordFlags,
    /// Resume an existing --out run with another program than the one it recorded (its
    /// cycles then follow as further boot cycles); without it, that is refused.
    #[arg(long)]
    retarget: bool,
    /// Memory limit: a fresh memory cgroup with this limit (as root), else a watchdog that
    /// SIGKILLs the command once its RSS passes it.
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// Restarts after the first start (default: as many as --restart-policy asks for, until
    /// Ctrl-C).
    #[arg(long)]
    restarts: Option<u32>,
    /// At the kernel's OOM kill, hold the command at its limit until a capture is taken, at
    /// most this long, then let the kernel kill it (cgroup v1; on cgroup v2 the command is
    /// slowed at memory.high, a 16th of the limit below it, instead). Off by default: a held
    /// Go process may see ENOMEM and exit 2 itself instead of being killed.
    #[arg(long, default_value = "0s", value_parser = units::parse_duration_flag)]
    oom_hold: Duration,
    /// Which ends are restarted, as a Pod's restartPolicy: Always (a clean exit too, the
    /// kubelet's default), OnFailure (all but exit code 0) or Never.
    #[arg(long, default_value = "Always", value_parser = RestartOn::parse)]
    restart_policy: RestartOn,
    /// Wait before the first restart, doubled for each quick death in a row (up to 10s; a
    /// minute running resets it): quicker than the kubelet, to see a crash loop in seconds.
    #[arg(long, default_value = "250ms", value_parser = units::parse_duration_flag)]
    backoff: Duration,
    /// Back off as the kubelet does instead (CrashLoopBackOff: 10s doubling to 5m, reset
    /// after 10m running).
    #[arg(long, conflicts_with = "backoff")]
    kubelet_backoff: bool,
    /// Another target to record beside the proc source (e.g. the command's agent or its
    /// http://… pprof port), into RUN/also-N/, a run of its own (repeatable). A URL's
    /// password is sent as Basic auth and never kept.
    #[arg(long, value_name = "TARGET")]
    also: Vec<Target>,
    /// Per-request timeout of the --also targets.
    #[arg(long, default_value = "2s", value_parser = units::parse_duration_flag)]
    timeout: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn usage(message: String) -> CliError {
    CliError::Usage(message)
}

impl RunArgs {
    fn policy(&self) -> RestartPolicy {
        let policy = RestartPolicy {
            on: self.restart_policy,
            restarts: self.restarts,
            backoff: self.backoff,
            ..RestartPolicy::default()
        };
        if self.kubelet_backoff {
            policy.kubelet_backoff()
        } else {
            policy
        }
    }

    fn config(&self) -> Result<CollectConfig, CliError> {
        self.record.check_intervals()?;
        self.record.check_burst_at()?;
        let r = &self.record;
        Ok(CollectConfig {
            interval: r.interval,
            burst_interval: r.burst_interval,
            burst_at: r.burst_at,
            limit: self.limit,
            timeout: self.timeout,
            max_disk: r.max_disk,
            ..CollectConfig::default()
        })
    }

    /// `run.json` for a run directory; a run resumed continues the one it had
    /// (`RunInfo::continuing`).
    fn info(
        &self,
        out: &Path,
        target: &str,
        source: &str,
        (mode, hold): (&str, Option<&str>),
        started_ms: i64,
    ) -> RunInfo {
        let previous = heapwatch::store::RunDir::open(out)
            .ok()
            .and_then(|r| r.info);
        let info = RunInfo {
            schema: heapwatch::model::SCHEMA,
            tool: concat!("heapwatch ", env!("CARGO_PKG_VERSION")).to_string(),
            target: target.to_string(),
            source: source.to_string(),
            started_ms,
            resumed_ms: Vec::new(),
            options: heapwatch::model::run_options::RunOptions {
                command: Some(
                    self.command
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect(),
                ),
                confinement: Some(mode.to_string()),
                oom_hold: hold.map(str::to_string),
                restarts: self.restarts,
                restart_policy: Some(self.restart_policy.as_str().to_string()),
                backoff_ms: Some(self.policy().backoff.as_millis() as u64),
                interval_ms: Some(self.record.interval.as_millis() as u64),
                burst_interval_ms: Some(self.record.burst_interval.as_millis() as u64),
                burst_at: Some(self.record.burst_at),
                memory_interval_ms: Some(self.record.memory_interval.as_millis() as u64),
                also: Some(self.also.iter().map(Target::to_string).collect()),
                max_disk: self.record.max_disk,
                own: self.record.own.recorded(),
                ..Default::default()
            },
            limit_bytes: self.limit,
            label: self.record.label.clone(),
        };
        // A new cgroup each time, so the target is this start's.
        match previous {
            Some(old) => info.continuing(old),
            None => info,
        }
    }
}

/// An `--also` target with the collector's default options.
fn also_source(given: &Target) -> Result<Box<dyn Source>, CliError> {
    let http = HttpOptions {
        max_body: 512 << 20,
        ..HttpOptions::default()
    };
    let target = given.as_str();
    let source: Box<dyn Source> = if target.starts_with("http://") || target.starts_with("https://")
    {
        Box::new(HttpSource::new(given, &http).map_err(|e| usage(e.message))?)
    } else if target.starts_with("envoy:") {
        Box::new(EnvoySource::new(given, &http).map_err(|e| usage(e.message))?)
    } else if target.starts_with("agent:") {
        let options = AgentOptions {
            dir: None,
            max_body: 512 << 20,
        };
        Box::new(AgentSource::new(target, &options).map_err(|e| usage(e.message))?)
    } else {
        return Err(usage(format!(
            "--also {target}: expected http://HOST:PORT, https://…, envoy:http://HOST:PORT or \
             agent:… (the command itself is already read through the proc source)"
        )));
    };
    Ok(source)
}

fn describe(event: &LifeEvent) -> String {
    match event {
        LifeEvent::Started { pid, .. } => format!("heapwatch run: started pid {pid}"),
        LifeEvent::Died(d) => {
            let how = process_end_words(&ProcessEnd {
                exit_code: d.exit_code,
                signal: d.signal,
                oom_killed: d.oom_killed,
                watchdog_killed: d.watchdog_killed,
            });
            format!(
                "heapwatch run: pid {} {how} after {:.1}s",
                d.pid,
                d.lived.as_secs_f64()
            )
        }
        LifeEvent::Interrupted { .. } => "heapwatch run: stopping (Ctrl-C)".to_string(),
    }
}

/// A run resumed names its sites by the own-code prefixes it recorded (`--own`); another start
/// may not name others (`RunInfo::own_conflict`).
fn check_same_own(out: &Path, given: &[String]) -> Result<(), CliError> {
    let old = heapwatch::store::RunDir::open(out)
        .ok()
        .and_then(|r| r.info);
    match old.and_then(|i| i.own_conflict(given)) {
        None => Ok(()),
        Some(why) => Err(usage(format!("{}: {why}", out.display()))),
    }
}

/// A run resumed records the program it recorded before: another one (an etcd run given a
/// NATS server) would file its cycles as more boot cycles of the first. The same program is its
/// file's name: `./v2/ziti` after `./v1/ziti` is a new build of it, which its cycles record.
fn check_same_program(out: &Path, program: &std::ffi::OsStr) -> Result<(), CliError> {
    let Some(old) = heapwatch::store::RunDir::open(out)
        .ok()
        .and_then(|r| r.info)
        .and_then(|i| i.options.command)
    else {
        return Ok(());
    };
    let Some(old_program) = old.first() else {
        return Ok(());
    };
    let name = |p: &Path| p.file_name().map(|n| n.to_os_string());
    let new = Path::new(program);
    if name(Path::new(old_program)) == name(new) {
        return Ok(());
    }
    Err(usage(format!(
        "{}: this run recorded {}, not {}; give a new --out, or --retarget to add its cycles \
         to it as further boot cycles",
        out.display(),
        old.join(" "),
        new.display()
    )))
}

pub fn run(args: RunArgs) -> Result<ExitCode, CliError> {
    let config = args.config()?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| usage("heapwatch run: no command given after --".into()))?;
    if !args.retarget {
        check_same_program(&args.record.out, program)?;
    }
    check_same_own(&args.record.out, &args.record.own.own)?;
    for i in 0..args.also.len() {
        let out = heapwatch::pipeline::scan::also_dir(&args.record.out, i + 1);
        check_same_own(&out, &args.record.own.own)?;
    }
    let mut also = Vec::new();
    for target in &args.also {
        also.push(also_source(target)?);
    }

    let name = format!("heapwatch-run-{}", std::process::id());
    let confinement = Confinement::for_limit(&CgroupRoots::default(), &name, args.limit);
    if !args.record.quiet {
        let limit = args.limit.map(|l| format_bytes(l as i64));
        match &confinement {
            Confinement::Cgroup(cg) => eprintln!(
                "heapwatch run: memory cgroup {} ({}) with a {} limit",
                cg.path.display(),
                confinement.mode(),
                limit.unwrap_or_default()
            ),
            Confinement::Watchdog { why, .. } => eprintln!(
                "heapwatch run: watchdog mode, SIGKILL once RSS passes {} (no memory cgroup: {why})",
                limit.unwrap_or_default()
            ),
            Confinement::None => eprintln!("heapwatch run: no --limit, no memory cgroup"),
        }
    }
    let pid = SharedPid::default();
    let (target, selector) = match confinement.cgroup() {
        Some(cg) => (
            format!("proc:cgroup:{}", cg.path.display()),
            ProcSelector::Cgroup(cg.path.clone()),
        ),
        None => (
            "proc:launched".to_string(),
            ProcSelector::Launched(pid.clone()),
        ),
    };
    let source = FollowSource::new(&target, selector, proc_attacher(&target), config.interval);
    let started_ms = SystemClock::new().unix_ms();
    let mode = confinement.mode();
    let hold_mode = launch::hold::describe(&confinement, args.oom_hold);
    let main = SubRun {
        out: args.record.out.clone(),
        source: Box::new(source),
        info: args.info(
            &args.record.out,
            &target,
            "proc",
            (mode, Some(&hold_mode)),
            started_ms,
        ),
    };
    let also = also
        .into_iter()
        .zip(&args.also)
        .enumerate()
        .map(|(i, (source, target))| {
            let out = heapwatch::pipeline::scan::also_dir(&args.record.out, i + 1);
            SubRun {
                info: args.info(
                    &out,
                    target.as_str(),
                    source.kind().as_str(),
                    (mode, None),
                    started_ms,
                ),
                out,
                source,
            }
        })
        .collect();

    let interrupt = Stop::new();
    let on_interrupt = interrupt.clone();
    ctrlc::set_handler(move || on_interrupt.set())
        .map_err(|e| usage(format!("cannot install the Ctrl-C handler: {e}")))?;
    let quiet = args.record.quiet;
    // The live status line (a spinner on a terminal, a plain line every 10 s elsewhere); each
    // start and end is a line of its own above it.
    let mut status = Status::new(quiet, Duration::from_secs(10), &["run".to_string()]);
    status.ends_told_elsewhere();
    let mut observers = status.observers();
    let status = &status;
    let notify = move |event: &LifeEvent| {
        if !quiet {
            status.println(&describe(event));
        }
    };
    let recording = launch::Recording {
        launch: Launch {
            program: program.clone(),
            args: rest.to_vec(),
            join: None,
        },
        policy: args.policy(),
        confinement: &confinement,
        collect: config,
        memory_interval: args.record.memory_interval,
        main,
        also,
        interrupt: &interrupt,
        pid: Arc::clone(&pid.0),
        notify: &notify,
        oom_hold: args.oom_hold,
    };
    let outcome = launch::record(recording, &mut *observers[0]);
    status.finish();
    // The cgroup goes in every case; an error in removing it is said, after the run's own.
    let released = confinement.release();
    let outcome = outcome?;
    released?;

    if !quiet {
        let kills = outcome
            .deaths
            .iter()
            .filter(|d| d.oom_killed || d.watchdog_killed)
            .count();
        let ended = match outcome.ending {
            Ending::CleanExit => {
                "the command exited cleanly (not restarted under --restart-policy OnFailure or Never)"
            }
            Ending::NotRestarted => {
                "the command ended (not restarted under --restart-policy Never)"
            }
            Ending::RestartsUsed => "the restarts were used",
            Ending::Interrupted => "interrupted",
        };
        eprintln!(
            "heapwatch run: {ended}; {} death(s), {kills} at the limit; {} over {} boot \
             cycle(s); memory peak {} in {}",
            outcome.deaths.len(),
            attempts_line(&outcome.main),
            outcome.main.cycles,
            format_bytes(outcome.memory.peak as i64),
            args.record.out.display()
        );
        for (i, result) in outcome.also.iter().enumerate() {
            match result {
                Ok(s) => eprintln!(
                    "heapwatch run: --also {}: {} in {}",
                    args.also[i],
                    attempts_line(s),
                    heapwatch::pipeline::scan::also_dir(&args.record.out, i + 1).display()
                ),
                Err(e) => eprintln!("heapwatch run: --also {}: {e}", args.also[i]),
            }
        }
    }
    if !outcome.main.reached {
        return Err(CliError::Unreachable(format!(
            "{}: the proc source never read the command ({} attempts; last: {}); see {}/manifest.jsonl",
            Path::new(program).display(),
            outcome.main.attempts,
            outcome.main.last_error.as_deref().unwrap_or("?"),
            args.record.out.display()
        )));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use heapwatch::launch::Death;
    use heapwatch::store::{CaptureRecord, RecordKind};

    /// `run` and `collect`/`watch` see one OOM kill through different evidence (the supervisor's
    /// own, an exit record); the line they print is the same.
    #[test]
    fn runs_line_for_an_oom_kill_reads_as_the_exit_records() {
        let death = Death {
            pid: 4242,
            t_ms: 0,
            exit_code: None,
            signal: Some(9),
            oom_killed: true,
            watchdog_killed: false,
            oom_held: None,
            oom_held_below: None,
            lived: Duration::from_millis(2500),
        };
        let mut record = CaptureRecord::new(0, RecordKind::Exit, 1, 0);
        record.signal = Some(9);
        record.totals.insert("oom_kill".into(), 1);
        let recorded = process_end_words(&ProcessEnd::of_record(&record));
        assert_eq!(
            describe(&LifeEvent::Died(death)),
            format!("heapwatch run: pid 4242 {recorded} after 2.5s")
        );
        assert!(recorded.starts_with("OOM-killed (signal 9"), "{recorded}");
    }
}
