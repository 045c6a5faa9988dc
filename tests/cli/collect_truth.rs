//! What the collector records so a run can tell the truth about each boot cycle: its build
//! and process (`cycle` records), how it ended (`exit` records from the kernel, the cgroup's
//! OOM-kill counter, a new pid in the same cgroup, a `stop` record), and where the memory went
//! (`memory.stat` and `smaps_rollup` in memory.jsonl), with burst mode on the memory that can
//! kill, not on reclaimable page cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, Reaped};

const LIMIT: u64 = 256 << 20;

fn lines(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn records(run: &Path) -> Vec<Value> {
    lines(&run.join("manifest.jsonl"))
}

fn memory(run: &Path) -> Vec<Value> {
    lines(&run.join("memory.jsonl"))
}

fn pid_of(v: &Value) -> Option<u32> {
    v["pid"].as_u64().map(|p| p as u32)
}

/// Waits until `check` holds for the run's manifest, failing the test after `timeout`.
fn wait_for_manifest(run: &Path, what: &str, timeout: Duration, check: impl Fn(&[Value]) -> bool) {
    let started = Instant::now();
    while !check(&records(run)) {
        assert!(
            started.elapsed() < timeout,
            "no {what} in the manifest within {timeout:?}: {:#?}",
            records(run)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// Starts agentgrow in the cgroup (when there is one) with its default socket in `agents`.
fn agentgrow(
    bin: &Path,
    agents: &Path,
    log: &Path,
    args: &[&str],
    cgroup: Option<&util::MemoryCgroup>,
) -> Reaped {
    let mut command = match cgroup {
        Some(cg) => cg.command(bin, args),
        None => {
            let mut c = Command::new(bin);
            c.args(args);
            c
        }
    };
    let mut child = command
        .env("TMPDIR", agents)
        .stdout(fs::File::create(log).unwrap())
        .stderr(fs::File::create(log.with_extension("err")).unwrap())
        .spawn()
        .expect("start agentgrow");
    util::wait_for_line(log, "agent on ", &mut child, Duration::from_secs(10));
    Reaped(child)
}

fn stop_collector(collector: &mut Child, log: &Path) {
    util::signal(collector.id(), "INT");
    let (status, _) = util::wait_for_exit(collector, Duration::from_secs(15));
    assert!(
        status.success(),
        "the collector should exit 0 after SIGINT, not {status}: {}",
        fs::read_to_string(log).unwrap_or_default()
    );
}

/// A recorded run of two builds: one `agent:auto:truth` collector watches four processes in
/// one 256 MiB cgroup: 2.0.2 stopped with SIGINT; 2.1.0 restarting itself; its successor
/// OOM-killed (or, without a cgroup, killed by the test); 2.1.0 again, alive when the
/// collector is stopped (and until this is dropped), whose agent opens 2 s after it starts.
/// For the tests that analyse such a run.
pub struct MixedBuilds {
    pub run: PathBuf,
    /// 2.0.2, stopped with SIGINT.
    pub p1: u32,
    /// 2.1.0, restarted itself.
    pub p2: u32,
    /// 2.1.0, the successor, OOM-killed.
    pub p2b: u32,
    /// 2.1.0, alive when the collector stopped; its agent opened 2 s after it started.
    pub p3: u32,
    /// Whether a real cgroup (and root) was there: then the kill was the kernel's.
    pub in_cgroup: bool,
    _last: Reaped,
    _cgroup: Option<util::MemoryCgroup>,
    _dir: tempfile::TempDir,
}

/// Records [`MixedBuilds`]; `None` without Go (skipped, or a failure under
/// HEAPWATCH_REQUIRE_GO).
pub fn record_mixed_builds() -> Option<MixedBuilds> {
    let bin = util::go_fixture("agentgrow")?;
    let dir = util::tempdir();
    let agents = dir.path().join("agents");
    fs::create_dir(&agents).unwrap();
    let run = dir.path().join("run");
    let cgroup = util::memory_cgroup_or_watchdog("truth", LIMIT);

    let collector_log = dir.path().join("collector.err");
    let mut collect = util::heapwatch();
    collect
        .args(["collect", "agent:auto:truth", "--agent-dir"])
        .arg(&agents)
        .arg("--out")
        .arg(&run)
        .args(["--interval", "200ms", "--memstats-interval", "1s"])
        .args(["--timeout", "1s", "--quiet"]);
    match &cgroup {
        Some(cg) => collect.arg("--cgroup").arg(&cg.path),
        None => collect.args(["--limit", "256MiB"]),
    };
    let mut collector = Reaped(
        collect
            .stdout(Stdio::null())
            .stderr(fs::File::create(&collector_log).unwrap())
            .spawn()
            .expect("start the collector"),
    );
    let cycle_of = |pid: u32| {
        move |records: &[Value]| {
            records
                .iter()
                .any(|r| r["kind"] == "cycle" && pid_of(r) == Some(pid))
        }
    };
    let quiet = ["-app-id", "truth", "-rate", "0", "-peers", "0"];

    // 1. Build 2.0.2, stopped with SIGINT once it has been seen.
    let mut old = agentgrow(
        &bin,
        &agents,
        &dir.path().join("p1.out"),
        &[&quiet[..], &["-app-version", "2.0.2"]].concat(),
        cgroup.as_ref(),
    );
    let p1 = old.0.id();
    wait_for_manifest(&run, "cycle of p1", Duration::from_secs(15), cycle_of(p1));
    util::signal(p1, "INT");
    let (status, _) = util::wait_for_exit(&mut old.0, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "agentgrow exits 0 on SIGINT");

    // 2. Build 2.1.0, which restarts itself after 1.5 s; its successor grows until killed.
    let restarting_log = dir.path().join("p2.out");
    let mut restarting = agentgrow(
        &bin,
        &agents,
        &restarting_log,
        &[
            "-app-id",
            "truth",
            "-app-version",
            "2.1.0",
            "-rate",
            "48MiB",
            "-peers",
            "0",
            "-restart-after",
            "1500ms",
        ],
        cgroup.as_ref(),
    );
    let p2 = restarting.0.id();
    let p2b: u32 = util::wait_for_line(
        &restarting_log,
        "restarting as pid ",
        &mut restarting.0,
        Duration::from_secs(10),
    )
    .trim()
    .parse()
    .expect("the successor's pid");
    let (status, _) = util::wait_for_exit(&mut restarting.0, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "the restart exits 0");
    wait_for_manifest(&run, "cycle of p2'", Duration::from_secs(15), cycle_of(p2b));
    let deadline = Instant::now() + Duration::from_secs(120);
    while alive(p2b) {
        if cgroup.is_none() && util::process_rss(p2b).is_some_and(|b| b > LIMIT / 2) {
            util::signal(p2b, "KILL");
        }
        assert!(
            Instant::now() < deadline,
            "p2' {p2b} was not killed in 120 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // 3. Build 2.1.0 again, alive when the collector is stopped. The kernel frees a killed
    // process's memory after it is gone: a process started into the cgroup at once can meet
    // the limit still charged and be OOM-killed before it prints a line (seen once under a
    // load of 8). Wait, a few seconds at most, for the charge to fall below half the limit.
    if let Some(cg) = cgroup.as_ref() {
        let settle = Instant::now() + Duration::from_secs(5);
        while Instant::now() < settle && cg.usage().is_some_and(|u| u > LIMIT / 2) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let last = agentgrow(
        &bin,
        &agents,
        &dir.path().join("p3.out"),
        // Its agent opens 2 s after start (a datastore migration): only memory is seen then.
        &[&quiet[..], &["-app-version", "2.1.0", "-delay", "2s"]].concat(),
        cgroup.as_ref(),
    );
    let p3 = last.0.id();
    wait_for_manifest(&run, "cycle of p3", Duration::from_secs(15), cycle_of(p3));
    std::thread::sleep(Duration::from_millis(500));
    stop_collector(&mut collector.0, &collector_log);
    assert!(alive(p3), "the last process outlives the collector");
    Some(MixedBuilds {
        run,
        p1,
        p2,
        p2b,
        p3,
        in_cgroup: cgroup.is_some(),
        _last: last,
        _cgroup: cgroup,
        _dir: dir,
    })
}

/// The mixed-builds run: each cycle's build and pid, and how each process ended.
#[test]
fn one_agent_collector_records_each_cycles_build_and_how_it_ended() {
    let started = Instant::now();
    let Some(mixed) = record_mixed_builds() else {
        return;
    };
    let MixedBuilds {
        p1, p2, p2b, p3, ..
    } = mixed;
    let run = mixed.run.clone();
    let cgroup = mixed._cgroup.as_ref();

    let records = records(&run);
    let cycles: Vec<&Value> = records.iter().filter(|r| r["kind"] == "cycle").collect();
    let seen: Vec<(u64, Option<u32>, &str)> = cycles
        .iter()
        .map(|r| {
            (
                r["incarnation"].as_u64().unwrap(),
                pid_of(r),
                r["build"]["version"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    eprintln!("cycles: {seen:?}; p1 {p1}, p2 {p2}, p2' {p2b}, p3 {p3}");
    assert_eq!(
        seen,
        vec![
            (1, Some(p1), "2.0.2"),
            (2, Some(p2), "2.1.0"),
            (3, Some(p2b), "2.1.0"),
            (4, Some(p3), "2.1.0"),
        ],
        "one cycle record per process, with its own build"
    );
    for c in &cycles {
        assert_eq!(c["build"]["app_id"], "truth", "{c}");
        let go = c["build"]["go_version"].as_str().unwrap_or("");
        assert!(go.starts_with("go1"), "the agent's Go version: {c}");
        // Every capture of the cycle came from its process.
        let inc = c["incarnation"].as_u64();
        for r in records.iter().filter(|r| {
            r["incarnation"].as_u64() == inc && r["kind"] == "heap" && r["error"].is_null()
        }) {
            assert_eq!(pid_of(r), pid_of(c), "{r}");
        }
    }
    // Existing readers take the new records in their stride.
    for command in [&["growth"][..], &["growth", "--json"]] {
        let out = util::run(&[command, &[run.to_str().unwrap()]].concat());
        assert!(out.status.success(), "{command:?}: {}", util::stderr(&out));
    }
    let report = run.with_file_name("report");
    let out = util::run(&[
        "report",
        run.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "report: {}", util::stderr(&out));

    let last = records.last().unwrap();
    assert_eq!(last["kind"], "stop", "the collector was stopped: {last}");
    assert_eq!(pid_of(last), Some(p3));

    let exits: Vec<&Value> = records.iter().filter(|r| r["kind"] == "exit").collect();
    let samples = memory(&run);
    eprintln!(
        "exits: {exits:?}; {} memory samples; took {:.1}s",
        samples.len(),
        started.elapsed().as_secs_f64()
    );
    // Root (a cgroup could be made): the kernel told how each process ended.
    if mixed.in_cgroup {
        let end = |pid: u32| {
            exits
                .iter()
                .find(|r| pid_of(r) == Some(pid))
                .map(|r| (r["exit_code"].as_i64(), r["signal"].as_i64()))
        };
        assert_eq!(end(p1), Some((Some(0), None)), "p1 exited 0 after SIGINT");
        assert_eq!(end(p2), Some((Some(0), None)), "p2 exited 0 to restart");
        assert_eq!(end(p2b), Some((None, Some(9))), "p2' was SIGKILLed");
        assert_eq!(end(p3), None, "p3 outlived the collector");
        for e in &exits {
            let pid = pid_of(e).unwrap();
            let cycle = cycles.iter().find(|c| pid_of(c) == Some(pid)).unwrap();
            assert_eq!(e["incarnation"], cycle["incarnation"], "{e}");
        }
    }
    // From outside: the cgroup's samples name each process, and only p2' was OOM-killed.
    if let Some(cg) = &cgroup {
        let pids: std::collections::BTreeSet<u32> = samples.iter().filter_map(pid_of).collect();
        for pid in [p1, p2, p2b, p3] {
            assert!(pids.contains(&pid), "no memory sample names pid {pid}");
        }
        // Before p3's agent opened, the cgroup's samples already named it: the memory of the
        // gap can be filed under the cycle p3 opened.
        let p3_cycle_ms = cycles[3]["t_ms"].as_i64().unwrap();
        let early = samples
            .iter()
            .filter(|s| pid_of(s) == Some(p3) && s["t_ms"].as_i64().unwrap() < p3_cycle_ms - 1000)
            .count();
        assert!(
            early >= 3,
            "{early} samples of p3 before its agent answered"
        );
        let killed: Vec<&Value> = samples.iter().filter(|s| s["killed"] == true).collect();
        if cg.oom_kills().is_some() {
            assert_eq!(killed.len(), 1, "one OOM kill: {killed:?}");
            let kill_ms = killed[0]["t_ms"].as_i64().unwrap();
            // The last process seen before the kill was p2'.
            let before = samples
                .iter()
                .filter(|s| s["t_ms"].as_i64().unwrap() < kill_ms && s["alive"] == true)
                .filter_map(pid_of)
                .next_back();
            assert_eq!(before, Some(p2b));
        }
        // The OOM-killed process's memory is anonymous: its split says so.
        let anon_peak = samples
            .iter()
            .filter(|s| pid_of(s) == Some(p2b))
            .filter_map(|s| s["cgroup"]["anon"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(anon_peak > LIMIT / 2, "anonymous peak {anon_peak}");
    }
}

/// A process that fills its 256 MiB cgroup with page cache (a 400 MiB file written and reread)
/// keeps a small heap and is not killed: memory.jsonl tells file from anonymous memory, and
/// the collector never enters burst mode for it. Off the terminal, the collector prints a
/// plain progress line.
#[test]
fn page_cache_at_the_cgroup_limit_is_recorded_and_does_not_start_burst_mode() {
    let Some(bin) = util::go_fixture("pagecache") else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    // On the disk the build uses (never tmpfs, whose pages would be shared memory).
    let data = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "pagecache-{}-{}.bin",
        std::process::id(),
        util::unix_ms()
    ));
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }
    let _remove = Remove(data.clone());
    let cgroup = util::memory_cgroup_or_watchdog("pagecache", LIMIT);
    let args = ["-file", data.to_str().unwrap(), "-size", "400MiB"];
    let mut command = match &cgroup {
        Some(cg) => cg.command(&bin, &args),
        None => {
            let mut c = Command::new(&bin);
            c.args(args);
            c
        }
    };
    let log = dir.path().join("pagecache.out");
    let mut target = Reaped(
        command
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .expect("start pagecache"),
    );
    let addr = util::wait_for_line(
        &log,
        "listening on ",
        &mut target.0,
        Duration::from_secs(10),
    );
    let pid = target.0.id();

    let collector_log = dir.path().join("collector.err");
    let mut collect = util::heapwatch();
    collect
        .args(["collect", &format!("http://{}", addr.trim()), "--out"])
        .arg(&run)
        .args(["--interval", "200ms", "--burst-interval", "50ms"])
        .args(["--duration", "12s", "--progress-every", "2s"]);
    match &cgroup {
        Some(cg) => collect.arg("--cgroup").arg(&cg.path),
        None => collect.args(["--pid", &pid.to_string(), "--limit", "256MiB"]),
    };
    let out = collect
        .stdout(Stdio::null())
        .stderr(fs::File::create(&collector_log).unwrap())
        .status()
        .expect("run the collector");
    let stderr = fs::read_to_string(&collector_log).unwrap_or_default();
    assert!(out.success(), "collect: {stderr}");
    assert!(
        matches!(target.0.try_wait(), Ok(None)),
        "pagecache is still alive (not killed): {:?}",
        fs::read_to_string(log.with_extension("err"))
    );
    assert!(
        fs::read_to_string(&log).unwrap().contains("written"),
        "the file was written in time"
    );

    // Progress, off the terminal: a plain line every 2 s, then the summary.
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("heapwatch: ") && l.contains("cycle "))
        .collect();
    eprintln!("collector stderr:\n{stderr}");
    assert!(progress.len() >= 4, "progress lines: {progress:?}");
    // The cgroup's usage is set against its limit, page cache and all, with the part that
    // cannot be reclaimed beside it; a process's RSS says it is RSS.
    let memory_word = if cgroup.is_some() { "cgroup " } else { "RSS " };
    assert!(
        progress
            .iter()
            .all(|l| l.contains("captures") && l.contains(memory_word)),
        "{progress:?}"
    );
    if cgroup.is_some() {
        assert!(
            progress.iter().any(|l| l.contains("of it not reclaimable")),
            "the page cache is charged, not the heap: {progress:?}"
        );
    }

    // Plain HTTP names no process: the cgroup's (or --pid's) is the one its answers are
    // filed under, and memory.jsonl says which process each sample measured.
    let cycles: Vec<Value> = records(&run)
        .into_iter()
        .filter(|r| r["kind"] == "cycle")
        .collect();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(pid_of(&cycles[0]), Some(pid));
    // Plain HTTP tells no build, but the process the cgroup names is this machine's: its
    // executable's build info says which build it is.
    let build = &cycles[0]["build"];
    assert!(
        build["go_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("go1.")),
        "{build}"
    );
    assert!(
        build["build_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{build}"
    );
    assert!(memory(&run).iter().all(|s| pid_of(s) == Some(pid)));
    let heap: Vec<Value> = records(&run)
        .into_iter()
        .filter(|r| r["kind"] == "heap" && r["error"].is_null())
        .collect();
    assert!(heap.len() >= 5, "{} heap captures", heap.len());
    let intervals: Vec<u64> = heap
        .iter()
        .filter_map(|r| r["interval_ms"].as_u64())
        .collect();
    assert!(
        intervals.iter().all(|&i| i != 50),
        "burst mode started for page cache: {intervals:?}"
    );
    let heap_peak = heap
        .iter()
        .filter_map(|r| r["totals"]["inuse_space"].as_i64())
        .max()
        .unwrap();
    assert!(heap_peak < 32 << 20, "the heap stays small: {heap_peak}");

    let samples = memory(&run);
    let detailed: Vec<&Value> = samples
        .iter()
        .filter(|s| s["process"].is_object())
        .collect();
    assert!(detailed.len() >= 10, "{} detailed samples", detailed.len());
    let max = |key: &str, field: &str| {
        samples
            .iter()
            .filter_map(|s| s[key][field].as_u64())
            .max()
            .unwrap_or(0)
    };
    let anon_process = max("process", "rss_anon");
    assert!(
        anon_process > 0 && anon_process < 64 << 20,
        "{anon_process}"
    );
    if let Some(cg) = &cgroup {
        let usage_peak = samples
            .iter()
            .filter_map(|s| s["usage"].as_u64())
            .max()
            .unwrap();
        let (file, anon) = (max("cgroup", "file"), max("cgroup", "anon"));
        eprintln!(
            "usage peak {} MiB, cache peak {} MiB, anonymous peak {} MiB, failcnt {}",
            usage_peak >> 20,
            file >> 20,
            anon >> 20,
            max("cgroup", "failcnt")
        );
        // Without the split, usage alone would have started burst mode (0.6 of the limit).
        assert!(usage_peak as f64 > 0.6 * LIMIT as f64, "usage {usage_peak}");
        assert!(file > 128 << 20, "page cache {file}");
        assert!(anon < 64 << 20, "anonymous {anon}");
        assert_eq!(cg.oom_kills().unwrap_or(0), 0, "no OOM kill");
        assert!(samples.iter().all(|s| s["killed"] != true));
    }
}

/// Issue 14's mixed builds, analysed: the run of one `agent:auto` collector that first saw a
/// 2.0.2 process and then three 2.1.0 ones is compared with a run of 2.0.2 alone. The
/// comparison takes B's newest build (2.1.0) against A's build, never the 2.0.2 process B
/// was attached to first, names the site that only 2.1.0 grows, and says which cycles and
/// builds it compared; `report --baseline` agrees.
#[test]
fn mixed_builds_compare_the_new_build_cycles_with_the_baseline_build() {
    let Some(mixed) = record_mixed_builds() else {
        return;
    };
    let bin = util::go_fixture("agentgrow").expect("built above");
    let dir = util::tempdir();
    let agents = dir.path().join("agents");
    fs::create_dir(&agents).unwrap();
    let base_run = dir.path().join("base");
    let _base = agentgrow(
        &bin,
        &agents,
        &dir.path().join("base.out"),
        &[
            "-app-id",
            "base",
            "-app-version",
            "2.0.2",
            "-rate",
            "0",
            "-peers",
            "0",
        ],
        None,
    );
    let out = util::heapwatch()
        .args(["collect", "agent:auto:base", "--agent-dir"])
        .arg(&agents)
        .arg("--out")
        .arg(&base_run)
        .args(["--interval", "200ms", "--duration", "4s", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", util::stderr(&out));

    let base = base_run.to_str().unwrap();
    let new = mixed.run.to_str().unwrap();
    let out = util::run(&["compare", base, new, "--json"]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let json: Value = serde_json::from_str(&util::stdout(&out)).unwrap();
    assert_eq!(json["a"], "2.0.2", "{json}");
    assert_eq!(json["b"], "2.1.0", "{json}");
    assert_eq!(json["same_build"], false);
    let b_cycle = json["b_cycle"].as_u64().unwrap();
    assert!(
        (2..=4).contains(&b_cycle),
        "B's 2.1.0 cycles are 2-4; cycle 1 is the 2.0.2 process: {b_cycle}"
    );
    let worst = json["regressions"][0]["name"].as_str().unwrap_or_default();
    assert_eq!(worst, "main.(*raftLog).appendEntries", "{json}");
    let compared = json["compared"].as_str().unwrap();
    eprintln!("compare: {compared}\n  verdict: {}", json["verdict"]);
    assert!(
        compared.contains("2.1.0") && compared.contains("2.0.2"),
        "the headline names both builds: {compared}"
    );
    assert!(
        compared.contains(&format!("cycle {b_cycle}")),
        "and B's cycle: {compared}"
    );

    let report = dir.path().join("report");
    let out = util::run(&[
        "report",
        new,
        "--baseline",
        base,
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let md = fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("appendEntries"), "{md}");
    assert!(md.contains("2.0.2") && md.contains("2.1.0"), "{md}");
    let summary: Value =
        serde_json::from_str(&fs::read_to_string(report.join("summary.json")).unwrap()).unwrap();
    let text = summary.to_string();
    assert!(
        text.contains("main.(*raftLog).appendEntries"),
        "summary.json names the regression: {text}"
    );
}
