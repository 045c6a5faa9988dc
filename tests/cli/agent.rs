//! The OpenZiti agent source against the real agent: `agentgrow` embeds the
//! `github.com/openziti/agent` module, has no HTTP pprof, and is collected through
//! `agent:auto:APP_ID` beside a decoy, across a restart, and into a real OOM kill. A fake agent
//! cut mid-reply and the agent replay cover what a real process does not do on demand.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, Reaped};

fn records(run: &Path) -> Vec<Value> {
    fs::read_to_string(run.join("manifest.jsonl"))
        .expect("manifest.jsonl")
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("manifest line {}: {e}: {l}", i + 1))
        })
        .collect()
}

fn memory(run: &Path) -> Vec<Value> {
    fs::read_to_string(run.join("memory.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ok(r: &Value) -> bool {
    r["error"].is_null()
}

fn num(r: &Value, key: &str) -> f64 {
    r[key].as_f64().unwrap_or(0.0)
}

/// Every stored capture of a run opens: heap profiles with `heapwatch top`, stack dumps as
/// text that `heapwatch growth` reads; no temporary file is left. Returns the file count.
fn every_capture_decodes(run: &Path) -> usize {
    let mut files = 0;
    for entry in fs::read_dir(run.join("profiles")).expect("profiles/") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "temporary file left: {name}");
        if name.ends_with(".txt") {
            let text = fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with("goroutine ") && text.ends_with('\n'),
                "{name}"
            );
        } else {
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(fs::File::open(&path).unwrap())
                .read_to_end(&mut raw)
                .unwrap_or_else(|e| panic!("{name}: not a complete gzip stream: {e}"));
            let top = util::run(&["top", path.to_str().unwrap()]);
            assert!(top.status.success(), "top {name}: {}", util::stderr(&top));
        }
        files += 1;
    }
    files
}

/// A started agentgrow: the process, the agent's address, and (unix ms) when it was spawned
/// and when its agent was seen listening.
struct Started {
    child: Reaped,
    addr: String,
    spawned: i64,
    ready: i64,
}

/// Starts agentgrow with its temp dir (hence its default socket) in `agents`; waits for the
/// agent to listen.
fn agentgrow(
    bin: &Path,
    agents: &Path,
    log: &Path,
    args: &[&str],
    cgroup: Option<&util::MemoryCgroup>,
) -> Started {
    let mut command = match cgroup {
        Some(cg) => cg.command(bin, args),
        None => {
            let mut c = Command::new(bin);
            c.args(args);
            c
        }
    };
    let spawned = util::unix_ms();
    let mut child = command
        .env("TMPDIR", agents)
        .stdout(fs::File::create(log).unwrap())
        .stderr(fs::File::create(log.with_extension("err")).unwrap())
        .spawn()
        .expect("start agentgrow");
    let addr = util::wait_for_line(log, "agent on ", &mut child, Duration::from_secs(10));
    Started {
        child: Reaped(child),
        addr,
        spawned,
        ready: util::unix_ms(),
    }
}

/// A pid that was just used and is gone.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn interrupt(collector: &mut Child, log: &Path) {
    util::signal(collector.id(), "INT");
    let (status, _) = util::wait_for_exit(collector, Duration::from_secs(15));
    assert!(
        status.success(),
        "the collector should exit 0 after SIGINT, not {status}: {}",
        fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn auto_follows_one_app_across_a_restart_beside_a_decoy_and_a_stale_socket() {
    let Some(bin) = util::go_fixture("agentgrow") else {
        return;
    };
    let dir = util::tempdir();
    let agents = dir.path().join("agents");
    fs::create_dir(&agents).unwrap();
    let run = dir.path().join("run");

    let decoy = agentgrow(
        &bin,
        &agents,
        &dir.path().join("decoy.out"),
        &[
            "-app-id",
            "decoy",
            "-app-type",
            "router",
            "-rate",
            "0",
            "-peers",
            "0",
        ],
        None,
    );
    let decoy_pid = decoy.child.0.id();
    // Left by a process long gone: a socket file nobody listens on.
    drop(UnixListener::bind(agents.join(format!("gops-agent.{}.sock", dead_pid()))).unwrap());

    // The collector starts first, as it would before a controller's migration is over.
    let collector_log = dir.path().join("collector.err");
    let mut collector = Reaped(
        util::heapwatch()
            .args(["collect", "agent:auto:ctrl", "--agent-dir"])
            .arg(&agents)
            .arg("--out")
            .arg(&run)
            .args(["--interval", "200ms", "--profiles", "heap,goroutine"])
            .args(["--goroutine-interval", "200ms", "--memstats-interval", "1s"])
            .args(["--timeout", "1s", "--quiet"])
            .stdout(Stdio::null())
            .stderr(fs::File::create(&collector_log).unwrap())
            .spawn()
            .expect("start the collector"),
    );
    std::thread::sleep(Duration::from_millis(500));

    let grow = ["-app-id", "ctrl", "-rate", "8MiB", "-peers", "20"];
    let mut first = agentgrow(&bin, &agents, &dir.path().join("ctrl-1.out"), &grow, None);
    let (first_spawned, first_ready) = (first.spawned, first.ready);
    let p1 = first.child.0.id();
    assert_eq!(
        first.addr,
        format!(
            "unix:{}",
            agents.join(format!("gops-agent.{p1}.sock")).display()
        )
    );
    std::thread::sleep(Duration::from_millis(2500));
    // An OOM kill: SIGKILL, the socket file stays behind.
    util::signal(p1, "KILL");
    let (status, killed_ms) = util::wait_for_exit(&mut first.child.0, Duration::from_secs(5));
    assert_eq!(status.signal(), Some(9));
    std::thread::sleep(Duration::from_millis(300));

    let second = agentgrow(&bin, &agents, &dir.path().join("ctrl-2.out"), &grow, None);
    let second_ready = second.ready;
    let p2 = second.child.0.id();
    std::thread::sleep(Duration::from_millis(2500));
    interrupt(&mut collector.0, &collector_log);
    drop(second);
    drop(decoy);
    assert!(
        agents.join(format!("gops-agent.{p1}.sock")).exists(),
        "the killed process's socket was left behind"
    );

    let records = records(&run);
    let answered: Vec<&Value> = records.iter().filter(|r| ok(r)).collect();
    let pids: BTreeSet<u64> = answered.iter().filter_map(|r| r["pid"].as_u64()).collect();
    assert!(
        !pids.contains(&u64::from(decoy_pid)),
        "the decoy (pid {decoy_pid}) was captured"
    );
    assert_eq!(
        pids,
        BTreeSet::from([u64::from(p1), u64::from(p2)]),
        "every answer names its process"
    );
    for r in &answered {
        let expected = if r["pid"].as_u64() == Some(u64::from(p1)) {
            1
        } else {
            2
        };
        assert_eq!(
            r["incarnation"].as_u64(),
            Some(expected),
            "seq {} of pid {} is in the wrong boot cycle",
            r["seq"],
            r["pid"]
        );
    }
    let before_first: Vec<&Value> = records
        .iter()
        .filter(|r| r["t_ms"].as_i64().unwrap() < first_spawned)
        .collect();
    assert!(
        before_first
            .iter()
            .all(|r| r["error_kind"] == "refused" && r["error"].as_str().unwrap().contains("ctrl")),
        "before the controller's agent exists, attempts are refused and say why: {before_first:?}"
    );

    // How long each process went unseen once its socket was there.
    let found = |pid: u32, ready: i64| {
        let first = answered
            .iter()
            .find(|r| r["pid"].as_u64() == Some(u64::from(pid)))
            .expect("captured");
        first["t_ms"].as_i64().unwrap() + num(first, "latency_ms") as i64 - ready
    };
    let (found_first, found_second) = (found(p1, first_ready), found(p2, second_ready));
    let mut kinds: BTreeMap<(u64, String), usize> = BTreeMap::new();
    for r in &answered {
        *kinds
            .entry((
                r["incarnation"].as_u64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
            ))
            .or_default() += 1;
    }
    let failed_between = records
        .iter()
        .filter(|r| !ok(r))
        .filter(|r| (killed_ms..second_ready + 1000).contains(&r["t_ms"].as_i64().unwrap()))
        .count();
    eprintln!(
        "pids {p1} then {p2} (decoy {decoy_pid}); first agent found {found_first} ms after it \
         listened, the restarted one {found_second} ms after; {failed_between} failed attempts \
         between the kill and the restart; answers per cycle and kind {kinds:?}"
    );
    // Within one interval (200 ms), plus the time to answer.
    assert!(
        found_second <= 400,
        "the new socket took {found_second} ms to find"
    );
    for cycle in [1, 2] {
        for kind in ["heap", "goroutine", "memstats", "stats"] {
            assert!(
                kinds.get(&(cycle, kind.to_string())).copied().unwrap_or(0) >= 1,
                "cycle {cycle} has no {kind} capture: {kinds:?}"
            );
        }
        assert!(kinds[&(cycle, "heap".to_string())] >= 5, "{kinds:?}");
    }

    // Real replies, fully read: every MemStats figure and every stats count.
    let memstats = answered.iter().find(|r| r["kind"] == "memstats").unwrap();
    let figures = memstats["totals"].as_object().unwrap();
    assert!(figures.len() >= 26, "{figures:?}");
    assert!(figures["HeapAlloc"].as_i64().unwrap() > 0);
    assert!(figures["Sys"].as_i64().unwrap() >= figures["HeapSys"].as_i64().unwrap());
    let stats = answered.iter().find(|r| r["kind"] == "stats").unwrap();
    let counts = stats["totals"].as_object().unwrap();
    for key in ["goroutines", "threads", "gomaxprocs", "num_cpu"] {
        assert!(counts[key].as_i64().unwrap() >= 1, "{key}: {counts:?}");
    }

    let files = every_capture_decodes(&run);
    assert!(
        records.iter().any(|r| r["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("-goroutine.txt"))),
        "stack dumps are stored as text"
    );

    // The memory sampler followed the agent's process across the restart.
    let samples = memory(&run);
    let sampled: BTreeSet<u64> = samples
        .iter()
        .filter(|s| s["alive"] == true)
        .filter_map(|s| s["pid"].as_u64())
        .collect();
    assert_eq!(sampled, BTreeSet::from([u64::from(p1), u64::from(p2)]));

    // Goroutine growth through the agent's text dumps, per boot cycle.
    let growth = util::run(&["growth", run.to_str().unwrap(), "--json"]);
    assert!(growth.status.success(), "{}", util::stderr(&growth));
    let report: Value = serde_json::from_slice(&growth.stdout).unwrap();
    let cycles = report["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 2);
    for c in cycles {
        let leak = c["goroutine_growth"]
            .as_array()
            .unwrap()
            .first()
            .map(|g| g["name"].as_str().unwrap().to_string());
        assert_eq!(
            leak.as_deref(),
            Some("main.watchPeer"),
            "{}",
            c["goroutine_growth"]
        );
        let site = c["sites"][0]["name"].as_str().unwrap_or("");
        assert_eq!(site, "main.(*raftLog).appendEntries", "{}", c["sites"]);
    }
    eprintln!(
        "{} records, {files} files, {} memory samples",
        records.len(),
        samples.len()
    );
}

const LIMIT: u64 = 256 << 20;

#[test]
fn a_real_oom_kill_through_the_agent_in_a_memory_cgroup() {
    let Some(bin) = util::go_fixture("agentgrow") else {
        return;
    };
    let started = Instant::now();
    let dir = util::tempdir();
    let agents = dir.path().join("agents");
    fs::create_dir(&agents).unwrap();
    let run = dir.path().join("run");
    let cgroup = util::memory_cgroup_or_watchdog("agent", LIMIT);
    eprintln!(
        "mode: {}",
        if cgroup.is_some() {
            "cgroup"
        } else {
            "watchdog"
        }
    );

    let mut target = agentgrow(
        &bin,
        &agents,
        &dir.path().join("oom.out"),
        &["-app-id", "oom", "-rate", "48MiB", "-peers", "5"],
        cgroup.as_ref(),
    );
    let pid = target.child.0.id();
    let born = target.spawned;
    let collector_log = dir.path().join("collector.err");
    let mut collect = util::heapwatch();
    collect
        .args(["collect", "agent:auto:oom", "--agent-dir"])
        .arg(&agents)
        .arg("--out")
        .arg(&run)
        .args([
            "--interval",
            "500ms",
            "--burst-interval",
            "100ms",
            "--burst-at",
            "0.5",
        ])
        .args(["--profiles", "heap,goroutine", "--memstats-interval", "1s"])
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

    // Without a cgroup, a watchdog plays the kernel.
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = cgroup.is_none().then(|| {
        let done = done.clone();
        // The shell became agentgrow: its pid is the child's.
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if util::process_rss(pid).is_some_and(|b| b > LIMIT) {
                    util::signal(pid, "KILL");
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
    // At its cgroup limit the target can freeze in reclaim for tens of seconds before the kill.
    let (status, killed_ms) = util::wait_for_exit(&mut target.child.0, Duration::from_secs(120));
    done.store(true, Ordering::Relaxed);
    if let Some(w) = watchdog {
        w.join().unwrap();
    }
    assert_eq!(
        status.signal(),
        Some(9),
        "agentgrow should die of SIGKILL, not {status}: {}",
        fs::read_to_string(dir.path().join("oom.err")).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_millis(1000));
    interrupt(&mut collector.0, &collector_log);

    let records = records(&run);
    let heap: Vec<&Value> = records.iter().filter(|r| r["kind"] == "heap").collect();
    let good: Vec<&&Value> = heap.iter().filter(|r| ok(r)).collect();
    assert!(good.len() >= 5, "{} heap captures", good.len());
    assert!(
        good.iter()
            .all(|r| r["pid"].as_u64() == Some(u64::from(pid)))
    );
    // Burst: the interval drops from 500 ms to 100 ms once memory passes half the limit.
    let intervals: Vec<u64> = heap
        .iter()
        .filter_map(|r| r["interval_ms"].as_u64())
        .collect();
    assert_eq!(
        intervals.len(),
        heap.len(),
        "every capture records its interval"
    );
    assert_eq!(intervals[0], 500);
    let burst_at = heap
        .iter()
        .find(|r| r["interval_ms"] == 100)
        .expect("burst mode never started");
    let burst_after = burst_at["t_ms"].as_i64().unwrap() - born;
    let in_burst = good.iter().filter(|r| r["interval_ms"] == 100).count();
    assert!(in_burst >= 5, "{in_burst} captures in burst");

    let newest = good.last().unwrap();
    let answered_until = num(newest, "t_ms") + num(newest, "latency_ms");
    let kill_age = killed_ms as f64 - answered_until;
    let after: Vec<&&Value> = heap
        .iter()
        .filter(|r| r["seq"].as_u64() > newest["seq"].as_u64())
        .collect();
    assert!(
        after.iter().all(|r| !ok(r)),
        "nothing answers after the kill"
    );
    let samples = memory(&run);
    let usage: Vec<u64> = samples
        .iter()
        .filter_map(|s| s["usage"].as_u64().or(s["rss"].as_u64()))
        .collect();
    assert!(!usage.is_empty(), "memory.jsonl has samples");
    let first_usage = usage[0];
    let peak = usage.iter().copied().max().unwrap();
    eprintln!(
        "killed {:.2}s after start; {} heap captures ({in_burst} in burst), burst from {:.2}s; \
         newest capture answered {kill_age:.0} ms before the kill; memory {} -> peak {} MiB in \
         {} samples; failures after: {:?}",
        (killed_ms - born) as f64 / 1e3,
        good.len(),
        burst_after as f64 / 1e3,
        first_usage >> 20,
        peak >> 20,
        samples.len(),
        after
            .iter()
            .map(|r| r["error_kind"].as_str().unwrap_or("?"))
            .collect::<Vec<_>>()
    );
    assert!(first_usage < LIMIT / 2, "memory starts low: {first_usage}");
    assert!(
        peak > LIMIT / 10 * 7,
        "memory climbs toward the limit: {peak}"
    );
    assert!(
        usage.windows(2).filter(|w| w[1] > w[0]).count() > usage.len() / 3,
        "memory climbs"
    );
    if let Some(cg) = &cgroup {
        let killed = samples.iter().filter(|s| s["killed"] == true).count();
        if cg.oom_kills().is_some() {
            assert_eq!(killed, 1, "the OOM kill is recorded in memory.jsonl");
        } else {
            crate::prerequisite::reduced(
                crate::prerequisite::Need::OomKillCounter,
                "memory.oom_control has no oom_kill counter",
                "the OOM kill in memory.jsonl is not asserted",
            );
        }
    }
    every_capture_decodes(&run);
    eprintln!("test took {:.1}s", started.elapsed().as_secs_f64());
}

/// A fake agent on a unix socket: answers `good` heap requests with whole profiles, then is
/// "killed" while writing the next one, half-way through, and never listens again.
fn dying_agent(path: PathBuf, good: usize) -> std::thread::JoinHandle<usize> {
    let early = fs::read(util::fixture("hiddenleak-heap-early.pb.gz")).unwrap();
    let late = fs::read(util::fixture("hiddenleak-heap-late.pb.gz")).unwrap();
    let memstats = fs::read(util::repo().join("testdata/agent/memstats.txt")).unwrap();
    let stats = fs::read(util::repo().join("testdata/agent/stats.txt")).unwrap();
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let mut heaps = 0;
        for conn in listener.incoming() {
            let mut conn = conn.unwrap();
            let mut request = [0u8; 14];
            conn.read_exact(&mut request).unwrap();
            assert_eq!(
                request[..13],
                [1, 11, 10, 13, 14, 12, 10, 15, 14, 15, 0, 0, 13]
            );
            assert!(
                !matches!(request[13], 0x06 | 0x08),
                "a blocking op was sent"
            );
            let reply: Vec<u8> = match request[13] {
                0x05 if heaps == good => {
                    conn.write_all(&late[..late.len() / 2]).unwrap();
                    return heaps; // the listener and the connection die with the "process"
                }
                0x05 => {
                    heaps += 1;
                    if heaps % 2 == 1 {
                        early.clone()
                    } else {
                        late.clone()
                    }
                }
                0x03 => memstats.clone(),
                0x07 => stats.clone(),
                _ => Vec::new(),
            };
            conn.write_all(&reply).unwrap();
        }
        heaps
    })
}

#[test]
fn a_heap_reply_cut_mid_write_is_an_error_and_never_stored() {
    let dir = util::tempdir();
    let socket = dir.path().join("ctrl.sock");
    let agent = dying_agent(socket.clone(), 4);
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("agent:unix:{}", socket.display()),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "100ms",
        "--memstats-interval",
        "100ms",
        "--until-exit",
        "--grace",
        "500ms",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert_eq!(agent.join().unwrap(), 4);
    let records = records(&run);
    let heap: Vec<&Value> = records.iter().filter(|r| r["kind"] == "heap").collect();
    let good = heap.iter().take_while(|r| ok(r)).count();
    assert_eq!(good, 4, "{heap:#?}");
    let cut = heap[4];
    assert!(cut["file"].is_null(), "{cut}");
    assert_eq!(cut["error_kind"], "invalid");
    assert!(
        cut["error"].as_str().unwrap().contains("truncated gzip"),
        "{cut}"
    );
    assert_eq!(heap[5]["error_kind"], "refused", "then nothing listens");
    let stored = every_capture_decodes(&run);
    assert_eq!(
        stored, 4,
        "the four whole profiles, and nothing of the cut one"
    );
    let answered: Vec<&Value> = records.iter().filter(|r| ok(r)).collect();
    assert!(answered.iter().any(|r| r["kind"] == "memstats"));
    assert!(answered.iter().any(|r| r["kind"] == "stats"));
    // No pid in the socket's name, but the peer of the socket is this test process.
    assert!(
        answered
            .iter()
            .all(|r| r["pid"].as_u64() == Some(u64::from(std::process::id()))),
        "{answered:#?}"
    );
}

#[test]
fn a_recorded_run_replayed_over_the_agent_is_collected_with_its_cycles_and_cuts() {
    let dir = util::tempdir();
    let socket = dir.path().join("ctrl.sock");
    let mut replay = Reaped(
        util::heapwatch()
            .args([
                "replay",
                util::repo().join("testdata/runs/oomgrow").to_str().unwrap(),
            ])
            .arg("--agent")
            .arg(format!("unix:{}", socket.display()))
            .args(["--speed", "4", "--die-mid-response"])
            .stdout(fs::File::create(dir.path().join("replay.out")).unwrap())
            .stderr(fs::File::create(dir.path().join("replay.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let run = dir.path().join("run");
    let collect = util::run(&[
        "collect",
        &format!("agent:unix:{}", socket.display()),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "100ms",
        "--profiles",
        "heap,goroutine",
        "--goroutine-interval",
        "100ms",
        "--until-exit",
        "--grace",
        "1500ms",
        "--quiet",
    ]);
    let (status, _) = util::wait_for_exit(&mut replay.0, Duration::from_secs(30));
    assert!(status.success());
    assert!(collect.status.success(), "{}", util::stderr(&collect));
    let said = fs::read_to_string(dir.path().join("replay.out")).unwrap();
    assert_eq!(said.matches("agent on unix:").count(), 3, "{said}");
    let tally = fs::read_to_string(dir.path().join("replay.err")).unwrap();
    assert!(tally.contains("3 cut mid-response"), "{tally}");
    assert!(
        !socket.exists(),
        "the replay removes its socket when it ends"
    );

    let records = records(&run);
    let cycles: BTreeSet<u64> = records
        .iter()
        .filter(|r| ok(r))
        .map(|r| r["incarnation"].as_u64().unwrap())
        .collect();
    assert_eq!(cycles, BTreeSet::from([1, 2, 3]));
    let cut: Vec<&Value> = records
        .iter()
        .filter(|r| r["error_kind"] == "invalid")
        .collect();
    assert_eq!(cut.len(), 3, "one cut answer per boot cycle: {cut:#?}");
    assert!(cut.iter().all(|r| r["file"].is_null()));
    assert!(cut.iter().all(|r| {
        let e = r["error"].as_str().unwrap();
        e.contains("truncated gzip") || e.contains("cut short")
    }));
    every_capture_decodes(&run);
    let growth = util::run(&["growth", run.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&growth.stdout).unwrap();
    for c in report["cycles"].as_array().unwrap() {
        assert_eq!(
            c["sites"][0]["name"], "main.(*routerDataModel).buildEventList",
            "{}",
            c["sites"]
        );
    }
}

#[test]
fn bad_agent_targets_are_usage_errors() {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    for (args, says) in [
        (vec!["collect", "agent:tcp:nohost"], "HOST:PORT"),
        (vec!["collect", "agent:auto:"], "empty app id"),
        (vec!["collect", "agent:pid"], "agent:auto[:APP_ID]"),
        (
            vec!["collect", "http://127.0.0.1:1", "--agent-dir", "/tmp"],
            "--agent-dir",
        ),
    ] {
        let out = util::heapwatch()
            .args(&args)
            .arg("--out")
            .arg(&run)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            util::stderr(&out)
        );
        assert!(
            util::stderr(&out).contains(says),
            "{args:?}: {}",
            util::stderr(&out)
        );
    }
    // An agent that is not there at all: the target could not be reached (exit 3).
    let out = util::run(&[
        "collect",
        &format!("agent:unix:{}", dir.path().join("none.sock").display()),
        "--out",
        run.to_str().unwrap(),
        "--duration",
        "300ms",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", util::stderr(&out));
}

#[test]
fn tcp_and_pid_targets_reach_the_real_agent() {
    let Some(bin) = util::go_fixture("agentgrow") else {
        return;
    };
    let dir = util::tempdir();
    let agents = dir.path().join("agents");
    fs::create_dir(&agents).unwrap();
    let port = util::free_port();
    let tcp = format!("tcp:127.0.0.1:{port}");
    let by_tcp = agentgrow(
        &bin,
        &agents,
        &dir.path().join("tcp.out"),
        &["-app-id", "t", "-listen-agent", &tcp],
        None,
    );
    assert_eq!(by_tcp.addr, tcp);
    let by_pid = agentgrow(
        &bin,
        &agents,
        &dir.path().join("pid.out"),
        &["-app-id", "p"],
        None,
    );
    let pid = by_pid.child.0.id();
    for (target, expect_pid) in [
        (format!("agent:{tcp}"), None),
        (format!("agent:{pid}"), Some(u64::from(pid))),
    ] {
        let run = dir.path().join(format!("run-{}", expect_pid.is_some()));
        let out = util::heapwatch()
            .args(["collect", &target, "--agent-dir"])
            .arg(&agents)
            .arg("--out")
            .arg(&run)
            .args(["--interval", "200ms", "--duration", "1s", "--quiet"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{target}: {}", util::stderr(&out));
        let records = records(&run);
        let heap: Vec<&Value> = records.iter().filter(|r| r["kind"] == "heap").collect();
        assert!(
            heap.len() >= 4 && heap.iter().all(|r| ok(r)),
            "{target}: {heap:#?}"
        );
        assert!(
            heap.iter().all(|r| r["pid"].as_u64() == expect_pid),
            "{target}"
        );
        every_capture_decodes(&run);
    }
}
