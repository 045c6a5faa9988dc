//! `heapwatch demo`: the whole pipeline on a real recording carried in the binary. Two builds
//! of the controller fixture (2.0.2 and 2.1.0, the latter OOM-killed by the kernel in a
//! 256 MiB cgroup, three times) are replayed on loopback, each watched by a real
//! `heapwatch collect`, then reported with 2.0.2 as the baseline into ./heapwatch-demo/.

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use heapwatch::analyse::rules::{self, Rule};
use heapwatch::replay::server::{self, ReplayOptions};
use heapwatch::replay::{self, Timeline};
use heapwatch::source::procmem::MemorySample;
use heapwatch::store::RunDir;
use heapwatch::units::format_bytes;

use super::{CliError, DecodeFlags};

include!(concat!(env!("OUT_DIR"), "/demo_recording.rs"));

/// The builds of the recording, baseline first.
const BUILDS: [&str; 2] = ["2.0.2", "2.1.0"];
/// The bars the demo checks, to show what CI would say.
const RULES: [&str; 3] = ["growth>5MiB/s", "time-to-limit<60s", "regression>1.5x"];

#[derive(clap::Args)]
pub struct Args {
    /// Where the report and the collected runs go.
    #[arg(long, short = 'o', default_value = "heapwatch-demo")]
    out: PathBuf,
    /// Replay speed. Above 1 the demo is quicker, and every rate it finds is that much faster
    /// than the real one.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
}

fn io_error(path: &Path, source: std::io::Error) -> CliError {
    CliError::Read {
        path: path.display().to_string(),
        source,
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Writes the embedded recording under `dir`, refusing any path that would leave it.
fn unpack(dir: &Path) -> Result<(), CliError> {
    if RECORDING.is_empty() {
        return Err(CliError::Usage(
            "this heapwatch was built without demo/recording/; rebuild from the repository".into(),
        ));
    }
    for (relative, bytes) in RECORDING {
        if relative
            .split('/')
            .any(|part| part == ".." || part.is_empty())
        {
            continue;
        }
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        std::fs::write(&path, bytes).map_err(|e| io_error(&path, e))?;
    }
    Ok(())
}

/// A loopback address that was free a moment ago; the replay keeps it across boot cycles.
fn free_loopback() -> Result<SocketAddr, CliError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| CliError::Usage(format!("cannot bind a loopback port: {e}")))
}

/// One build being replayed and collected.
struct Lane {
    build: &'static str,
    recording: RunDir,
    collected: PathBuf,
    listen: SocketAddr,
}

/// What the replay of one lane reports back: when it started (unix ms) and how it went.
struct Played {
    started_ms: i64,
    lives: usize,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        return Err(CliError::Usage(format!(
            "--speed {}: must be above zero",
            args.speed
        )));
    }
    let started = Instant::now();
    let scratch = std::env::temp_dir().join(format!("heapwatch-demo-{}", std::process::id()));
    let result = demo(&args, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    say(&format!(
        "\n(the demo took {:.0} s)",
        started.elapsed().as_secs_f64()
    ));
    Ok(ExitCode::SUCCESS)
}

fn demo(args: &Args, scratch: &Path) -> Result<(), CliError> {
    let recording = scratch.join("recording");
    unpack(&recording)?;
    let runs = args.out.join("runs");
    if runs.exists() {
        // A collector resumes an existing run directory: start these afresh.
        std::fs::remove_dir_all(&runs).map_err(|e| io_error(&runs, e))?;
    }
    std::fs::create_dir_all(&runs).map_err(|e| io_error(&runs, e))?;

    let mut lanes = Vec::new();
    for build in BUILDS {
        let dir = recording.join(build);
        let run = RunDir::open(&dir)?;
        lanes.push(Lane {
            build,
            recording: run,
            collected: runs.join(build),
            listen: free_loopback()?,
        });
    }
    describe_recording(&lanes);

    let exe = std::env::current_exe()
        .map_err(|e| CliError::Usage(format!("cannot find the heapwatch binary: {e}")))?;
    let played: Vec<Result<Played, CliError>> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for lane in &lanes {
            let exe = &exe;
            let speed = args.speed;
            handles.push(scope.spawn(move || play_and_collect(lane, exe, speed)));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or(Err(CliError::Panicked {
                    what: "a replay thread",
                }))
            })
            .collect()
    });
    for (lane, played) in lanes.iter().zip(played) {
        let played = played?;
        replay::carry_memory_over(
            &lane.recording,
            &lane.collected,
            played.started_ms,
            args.speed,
        )?;
        // A build that lived to the end of its recording went silent when the replay ran out:
        // that is the recording's end, not the process's.
        if !recording_killed(&lane.recording) {
            replay::note_recording_ended(&lane.collected)?;
        }
    }

    say("\nwriting the report (2.1.0, with 2.0.2 as the baseline)");
    let rules_given: Vec<Rule> = RULES
        .iter()
        .map(|r| rules::parse(r).expect("the demo's rules parse"))
        .collect();
    let decode = DecodeFlags {
        max_decompressed: 1 << 30,
    };
    let written = super::report_folder::write_report(
        &runs.join("2.1.0"),
        Some(&runs.join("2.0.2")),
        &args.out,
        &rules_given,
        None,
        &decode,
    )?;
    tell(args, &written.headline.text("    "))?;
    Ok(())
}

fn describe_recording(lanes: &[Lane]) {
    say("heapwatch demo: a real recording of two builds of one Go service doing the same work");
    for lane in lanes {
        let run = &lane.recording;
        let cycles: std::collections::BTreeSet<u32> = run
            .manifest
            .records
            .iter()
            .filter(|r| r.is_ok())
            .map(|r| r.cycle)
            .collect();
        let memory: Vec<MemorySample> = run.memory_samples();
        let kills = memory.iter().filter(|m| m.killed).count();
        let limit = run
            .info
            .as_ref()
            .and_then(|i| i.limit_bytes)
            .map_or("no".into(), |l| format_bytes(l as i64));
        let mut line = format!(
            "  {}: {} capture attempts over {} boot cycle(s) in a {limit} memory cgroup",
            lane.build,
            run.manifest.records.len(),
            cycles.len()
        );
        if kills > 0 {
            line.push_str(&format!(", OOM-killed by the kernel {kills} time(s)"));
        }
        say(&line);
    }
    say("replaying both on loopback, each watched by `heapwatch collect` (about 30 s)…");
}

/// Whether the kernel killed the recorded process (its memory samples saw the OOM kill).
fn recording_killed(recording: &RunDir) -> bool {
    recording
        .memory_samples::<MemorySample>()
        .iter()
        .any(|m| m.killed)
}

/// Replays one recording in a thread of this process and collects it with a child
/// `heapwatch collect`, as a user would.
fn play_and_collect(lane: &Lane, exe: &Path, speed: f64) -> Result<Played, CliError> {
    let timeline = Timeline::from_run(&lane.recording)?;
    let info = lane.recording.info.as_ref();
    // The build that was OOM-killed dies mid-answer, as the kill cut it; the other one lived.
    let options = ReplayOptions {
        listen: lane.listen,
        speed,
        die_mid_response: recording_killed(&lane.recording),
    };
    let replay_stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let replay = scope.spawn(|| {
            let started_ms = heapwatch::time::now_ms();
            let build = lane.build;
            let mut announce = |line: String| {
                if line.contains("died") {
                    say(&format!("  {build}: {line}"));
                }
            };
            server::serve(&timeline, &options, &replay_stop, &mut announce)
                .map(|tally| Played {
                    started_ms,
                    lives: tally.cycles,
                })
                .map_err(|source| CliError::DemoReplay { build, source })
        });
        let mut collect = Command::new(exe);
        collect
            .arg("collect")
            .arg(format!("http://{}", lane.listen))
            .arg("--out")
            .arg(&lane.collected)
            .args(["--interval", "250ms", "--burst-interval", "100ms"])
            // A replay cannot show the collector the cgroup, so burst mode goes by the heap
            // profile alone, which lags: start it earlier than the default 0.6 of the limit.
            .args(["--burst-at", "0.3"])
            .args(["--profiles", "heap,goroutine", "--goroutine-interval", "1s"])
            .args([
                "--timeout",
                "1s",
                "--until-exit",
                "--grace",
                "2s",
                "--quiet",
            ])
            .args(["--label", lane.build]);
        if let Some(limit) = info.and_then(|i| i.limit_bytes) {
            collect.args(["--limit", &limit.to_string()]);
        }
        let status = collect
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status();
        // The collector returns once the last boot cycle has been gone for its grace period,
        // by which time the replay is over; stop it anyway if the collector failed early.
        replay_stop.store(true, Ordering::Relaxed);
        let played = replay.join().unwrap_or(Err(CliError::Panicked {
            what: "the replay thread",
        }));
        let status = status.map_err(|e| io_error(exe, e))?;
        if !status.success() {
            return Err(CliError::DemoCollect {
                build: lane.build,
                status,
            });
        }
        let played = played?;
        say(&format!(
            "  {}: collected {} boot cycle(s) into {}",
            lane.build,
            played.lives,
            lane.collected.display()
        ));
        Ok(played)
    })
}

/// What the demo found and where to look.
fn tell(args: &Args, headline: &str) -> Result<(), CliError> {
    let summary_path = args.out.join("summary.json");
    let text = std::fs::read(&summary_path).map_err(|e| io_error(&summary_path, e))?;
    let summary: serde_json::Value =
        serde_json::from_slice(&text).map_err(|source| CliError::JsonFile {
            path: summary_path.display().to_string(),
            source,
        })?;
    say("\nwhat it found:");
    say(&format!("  {}", headline.trim_end()));
    if let Some(site) = summary["baseline"]["regressions"][0]["name"].as_str() {
        say(&format!("  the regressed site: {site}"));
    }
    let tripped: Vec<&str> = summary["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter(|r| r["status"] == "fail")
                .filter_map(|r| r["rule"].as_str())
                .collect()
        })
        .unwrap_or_default();
    if !tripped.is_empty() {
        say(&format!(
            "  in CI, `heapwatch check --fail-on {}` would fail this build (exit 1)",
            tripped.join(" --fail-on ")
        ));
    }
    let out = args.out.display();
    say("\nwhere to look:");
    say(&format!(
        "  {out}/index.html          the report: open it in a browser"
    ));
    say(&format!(
        "  {out}/report.md           the short version CI puts in a job summary"
    ));
    say(&format!(
        "  {out}/flamegraphs/        growth per boot cycle, and 2.1.0 against 2.0.2"
    ));
    say(&format!(
        "  {out}/runs/2.1.0          the collected run: try `heapwatch growth {out}/runs/2.1.0`"
    ));
    Ok(())
}
