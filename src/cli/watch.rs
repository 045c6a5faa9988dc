//! `heapwatch watch`: every Go container on this node recorded, each into `OUT/targets/NAME/`,
//! slowly until it nears its limit, then at the burst interval until it dies.
//!
//! **`--push`**: the push of `collect --push` (`cli/collect_push.rs`), one per container
//! directory; each container's run.json keeps its pod labels (`options.push`: `namespace`,
//! `pod`, `container`, `service_name` as `namespace/container`), which every push of the run,
//! live or later, reads. A container recorded again has its old push drained first.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use heapwatch::collect::watch::{WatchError, WatchOptions, watch};
use heapwatch::collect::{CollectConfig, Stop};
use heapwatch::model::run_options::RunOptions;
use heapwatch::node;
use heapwatch::units;

use super::CliError;
use super::collect_push::{self, CollectPushFlags, LivePush};

#[derive(clap::Args)]
pub struct WatchArgs {
    /// The run directory: a cluster run, one node per container (created, or resumed).
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// The cgroup whose subtree is watched: a directory, or a path inside the memory
    /// hierarchy (`kubepods`, also found as `kubepods.slice`). Default: the whole hierarchy.
    #[arg(long, value_name = "PATH")]
    cgroup_root: Option<PathBuf>,
    /// The kubelet's pod log directory, for namespace/pod/container names; its sibling
    /// `containers` is read for container ids.
    #[arg(long, value_name = "DIR", default_value = node::DEFAULT_PODS_DIR)]
    pods_dir: PathBuf,
    /// Time between heap captures of a process far from its limit.
    #[arg(long, default_value = "10s", value_parser = units::parse_duration_flag)]
    baseline: Duration,
    /// Time between heap captures once a container's memory passes --burst-at of its limit.
    #[arg(long, default_value = "250ms", value_parser = units::parse_duration_flag)]
    burst_interval: Duration,
    /// Fraction of the container's limit at which its burst starts.
    #[arg(long, default_value_t = 0.6)]
    burst_at: f64,
    /// Time between memory samples of each container's cgroup.
    #[arg(long, default_value = "100ms", value_parser = units::parse_duration_flag)]
    memory_interval: Duration,
    /// Time between memory samples of a container far from its limit (its anonymous memory
    /// under half of --burst-at of it, or no limit known): one reading of its cgroup, and where
    /// the memory goes every fifth; at --memory-interval again once it nears the limit or jumps.
    #[arg(long, default_value = "1s", value_parser = units::parse_duration_flag)]
    far_interval: Duration,
    /// Time between looks for processes that started or ended.
    #[arg(long, default_value = "500ms", value_parser = units::parse_duration_flag)]
    rescan: Duration,
    /// Per-capture timeout (shortened in burst mode).
    #[arg(long, default_value = "2s", value_parser = units::parse_duration_flag)]
    timeout: Duration,
    /// One disk budget for every container's stored captures (e.g. 2GiB): past it, captures of
    /// processes that never died are thinned first, oldest first; the window before each OOM
    /// kill is kept whole.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size)]
    disk_budget: Option<u64>,
    /// With --disk-budget: how long before each kill (and at the newest end of each container's
    /// recording) every capture is kept.
    #[arg(long, default_value = "5m", value_parser = units::parse_duration_flag)]
    keep_before_kill: Duration,
    /// Module path prefixes of your own code, kept in each container's run.json (see `collect
    /// --own`).
    #[command(flatten)]
    own: super::record_flags::RecordOwnFlags,
    /// No lines about containers found and processes ended.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// `--push URL` sends every container's captures to Pyroscope as they are stored, each
    /// with its pod's labels (namespace, pod, container; service_name namespace/container
    /// unless --service says another).
    #[command(flatten)]
    push: CollectPushFlags,
}

fn usage(message: String) -> CliError {
    CliError::Usage(message)
}

pub fn run(args: WatchArgs) -> Result<ExitCode, CliError> {
    for (flag, d) in [
        ("--baseline", args.baseline),
        ("--burst-interval", args.burst_interval),
        ("--memory-interval", args.memory_interval),
        ("--far-interval", args.far_interval),
        ("--rescan", args.rescan),
        ("--timeout", args.timeout),
    ] {
        if d.is_zero() {
            return Err(usage(format!("{flag} must be above zero")));
        }
    }
    if !(args.burst_at > 0.0 && args.burst_at <= 1.0) {
        return Err(usage(format!(
            "--burst-at {} must be in (0, 1]",
            args.burst_at
        )));
    }
    let push = args
        .push
        .prepare(heapwatch::decode::DecodeLimits::default())?;
    let config = CollectConfig {
        interval: args.baseline,
        burst_interval: args.burst_interval,
        burst_at: args.burst_at,
        timeout: args.timeout,
        // The proc source reads heap profiles only; nothing else is asked of a process.
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    };
    let start = heapwatch::collect::cluster::StartOptions {
        out: args.out.clone(),
        run_options: RunOptions {
            interval_ms: Some(config.interval.as_millis() as u64),
            burst_interval_ms: Some(config.burst_interval.as_millis() as u64),
            burst_at: Some(config.burst_at),
            timeout_ms: Some(config.timeout.as_millis() as u64),
            own: args.own.recorded(),
            ..Default::default()
        },
        config,
        memory_interval: args.memory_interval,
        label: None,
        logs: Vec::new(),
        marks: Vec::new(),
        retarget: true,
    };
    let options = WatchOptions {
        start,
        discovery: node::Options {
            cgroup_root: args.cgroup_root,
            pods_dir: Some(args.pods_dir),
        },
        rescan: args.rescan,
        gone_after: Duration::from_secs(60),
        disk_budget: args.disk_budget.map(|b| (b, args.keep_before_kill)),
        far: Some(heapwatch::collect::sampler::Far {
            interval: args.far_interval.max(args.memory_interval),
            detail_every: 5 * args.far_interval.max(args.memory_interval),
        }),
    };
    let stop = Stop::new();
    let on_signal = stop.clone();
    ctrlc::set_handler(move || on_signal.set())
        .map_err(|e| usage(format!("cannot install the Ctrl-C handler: {e}")))?;
    let quiet = args.quiet;
    if !quiet {
        eprintln!(
            "heapwatch: watching for Go processes; recording into {} (Ctrl-C stops)",
            args.out.display()
        );
    }
    // One live push per container directory: a container recorded again (a new cgroup for its
    // name) has its earlier push drained first, so no capture is sent twice.
    let mut pushes: BTreeMap<PathBuf, LivePush> = BTreeMap::new();
    let attach = |node: heapwatch::collect::cluster::Node| {
        let Some(push) = &push else {
            return Ok(node);
        };
        let dir = node.dir.clone();
        if let Some(line) = pushes.remove(&dir).and_then(|old| old.finish(quiet)) {
            eprintln!("{line}");
        }
        node.wrap_writer(|writer| {
            let (writer, live) = collect_push::attach(push.clone(), &dir, writer)?;
            pushes.insert(dir.clone(), live.in_watch());
            Ok::<_, CliError>(writer)
        })
        .map_err(|e| e.to_string())
    };
    let watched = watch(
        options,
        stop,
        |line| {
            if !quiet {
                eprintln!("heapwatch: {line}");
            }
        },
        attach,
    );
    for line in collect_push::finish_all(pushes.into_values().collect(), quiet) {
        eprintln!("{line}");
    }
    let outcome = watched.map_err(|e| match e {
        WatchError::Node(_) | WatchError::Out { .. } => usage(e.to_string()),
        _ => CliError::Watch(e),
    })?;
    let mut failed = Vec::new();
    for c in outcome.containers {
        let stored: u64 = c
            .sessions
            .iter()
            .filter_map(|s| s.result.as_ref().ok())
            .map(|s| s.stored)
            .sum();
        let cycles = c
            .sessions
            .iter()
            .filter_map(|s| s.result.as_ref().ok())
            .map(|s| s.cycles)
            .max()
            .unwrap_or(0);
        if !quiet {
            eprintln!(
                "heapwatch: {}: {stored} capture(s) stored, {cycles} boot cycle(s), in {}",
                c.name,
                c.dir.display()
            );
        }
        for s in c.sessions {
            if let Err(source) = s.result {
                failed.push(CliError::Container {
                    container: c.name.clone(),
                    source,
                });
            }
        }
    }
    let mut failed = failed.into_iter();
    if let Some(first) = failed.next() {
        for other in failed {
            eprintln!("heapwatch: {other}");
        }
        return Err(first);
    }
    Ok(ExitCode::SUCCESS)
}
