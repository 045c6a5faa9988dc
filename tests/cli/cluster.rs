//! One `collect` over several targets: a cluster run. End to end, three real Go processes
//! (two `steady`, one `oomgrow` OOM-killed in a memory cgroup three times and restarted by the
//! test) are collected by one command, while the test writes a peer's log that `--log/--mark`
//! turn into events, and hangs one healthy node (SIGSTOP) to show it delays no other node.
//! Smaller tests cover the layout rules and `--log/--mark` on a single target.

use std::fs;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util;

const LIMIT: u64 = 256 << 20;
const KILLS: usize = 3;
/// A target at its cgroup limit can freeze in reclaim for tens of seconds before the kill.
const CYCLE_DEADLINE: Duration = Duration::from_secs(120);
const INTERVAL_MS: i64 = 200;
const TIMEOUT_MS: i64 = 3000;
/// How long the healthy node is kept stopped.
const HANG: Duration = Duration::from_secs(5);
const OOM_SITE: &str = "main.(*routerDataModel).buildEventList";

fn records(run: &Path) -> Vec<Value> {
    util::manifest_so_far(run)
}

fn ok_heap(r: &Value) -> bool {
    r["kind"] == "heap" && r["error"].is_null()
}

fn t_ms(r: &Value) -> i64 {
    r["t_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("no t_ms in {r}"))
}

fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A collector stopped with Ctrl-C if the test fails first.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            util::signal(self.0.id(), "INT");
            let _ = util::wait_for_exit(&mut self.0, Duration::from_secs(30));
        }
    }
}

/// A process made to run again if the test fails while it is stopped.
struct Continued(u32);

impl Drop for Continued {
    fn drop(&mut self) {
        util::signal(self.0, "CONT");
    }
}

/// Unix ms as RFC 3339 in UTC with milliseconds (`2026-12-03T10:15:02.123Z`), the way a
/// service's log lines start.
fn rfc3339(ms: i64) -> String {
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

fn log_line(path: &Path, ms: i64, text: &str) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the peer's log");
    writeln!(f, "{} INFO raft: {text}", rfc3339(ms)).expect("write the peer's log");
}

/// A `steady` process on a port of its own; its address.
fn start_steady(dir: &Path, name: &str) -> (util::Reaped, String) {
    let program = util::go_fixture("steady").expect("built");
    let out = dir.join(format!("{name}.out"));
    let mut child = util::Reaped(
        Command::new(program)
            .args([
                "-listen",
                "127.0.0.1:0",
                "-working-set",
                "8MiB",
                "-rate",
                "4MiB",
            ])
            .stdout(fs::File::create(&out).expect("steady's stdout"))
            .stderr(Stdio::null())
            .spawn()
            .expect("steady starts"),
    );
    let addr = util::wait_for_line(&out, "listening on ", &mut child.0, CYCLE_DEADLINE);
    (child, addr)
}

/// Kills a process once its RSS passes the limit, as the kernel would in a cgroup.
fn watchdog(pid: u32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if util::process_rss(pid).is_some_and(|b| b > LIMIT) {
                util::signal(pid, "KILL");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// When each life of the leaker began and ended, as the peer's log says.
struct Life {
    entered_ms: i64,
    exited_ms: i64,
}

/// Runs `oomgrow` on `addr` until it has been killed `KILLS` times, writing "entering
/// read-only mode" to the peer's log as each starts and "exiting read-only mode" as it dies.
fn leaker_lives(
    oomgrow: PathBuf,
    addr: String,
    cgroup: Option<PathBuf>,
    log: PathBuf,
    dir: PathBuf,
) -> Vec<Life> {
    let mut lives = Vec::new();
    for cycle in 1..=KILLS {
        let args = ["-listen", addr.as_str(), "-rate", "64MiB"];
        let mut command = match &cgroup {
            // The shell joins the cgroup, then becomes oomgrow: inside before it allocates.
            Some(cg) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
                    .arg("sh")
                    .arg(cg)
                    .arg(&oomgrow)
                    .args(args);
                c
            }
            None => {
                let mut c = Command::new(&oomgrow);
                c.args(args);
                c
            }
        };
        let entered_ms = util::unix_ms();
        log_line(&log, entered_ms, "entering read-only mode (peer joined)");
        let stderr = dir.join(format!("oomgrow-{cycle}.stderr"));
        let mut child = util::Reaped(
            command
                .stdout(Stdio::null())
                .stderr(fs::File::create(&stderr).expect("oomgrow's stderr"))
                .spawn()
                .expect("oomgrow starts"),
        );
        let done = Arc::new(AtomicBool::new(false));
        let dog = cgroup
            .is_none()
            .then(|| watchdog(child.0.id(), done.clone()));
        let (status, exited_ms) = util::wait_for_exit(&mut child.0, CYCLE_DEADLINE);
        done.store(true, Ordering::Relaxed);
        if let Some(d) = dog {
            let _ = d.join();
        }
        assert_eq!(
            status.signal(),
            Some(9),
            "cycle {cycle}: oomgrow should die of SIGKILL, not {status}: {}",
            fs::read_to_string(&stderr).unwrap_or_default()
        );
        log_line(&log, exited_ms, "exiting read-only mode (peer lost)");
        eprintln!(
            "leaker cycle {cycle}: killed after {:.1}s",
            (exited_ms - entered_ms) as f64 / 1e3
        );
        lives.push(Life {
            entered_ms,
            exited_ms,
        });
    }
    lives
}

fn growth(dir: &Path) -> Value {
    let out = util::run(&["growth", dir.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "growth {}: {}",
        dir.display(),
        util::stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("growth --json is JSON")
}

/// The largest gap between consecutive heap captures of a node that touch the window
/// `from..to`: the last capture before it, those inside, the first after.
fn largest_gap(captures: &[i64], from: i64, to: i64) -> i64 {
    let before = captures.iter().rev().find(|&&t| t <= from).copied();
    let after = captures.iter().find(|&&t| t >= to).copied();
    let mut points: Vec<i64> = before.into_iter().collect();
    points.extend(captures.iter().filter(|&&t| t > from && t < to));
    points.extend(after);
    assert!(
        before.is_some() && after.is_some(),
        "captures on both sides of the window"
    );
    points.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}

#[test]
fn three_nodes_one_oom_killed_three_times_each_a_run_with_events_and_no_hang_spreads() {
    let Some(oomgrow) = util::go_fixture("oomgrow") else {
        return;
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let peer_log = dir.path().join("steady1.log");
    let (steady1, addr1) = start_steady(dir.path(), "steady1");
    let (_steady2, addr2) = start_steady(dir.path(), "steady2");
    let leak_addr = format!("127.0.0.1:{}", util::free_port());
    let cgroup = util::memory_cgroup_or_watchdog("cluster", LIMIT);

    let collector_err = dir.path().join("collect.stderr");
    let mut collect = util::heapwatch();
    collect
        .args([
            "collect",
            &format!("http://{addr1}"),
            &format!("http://{addr2}"),
        ])
        .arg(format!("http://{leak_addr}"))
        .args(["--name", "steady1", "--name", "steady2", "--name", "leaker"])
        .arg("--out")
        .arg(&run)
        .args(["--interval", &format!("{INTERVAL_MS}ms")])
        .args(["--timeout", &format!("{TIMEOUT_MS}ms")])
        .args([
            "--max-duty",
            "1",
            "--idle-backoff",
            "1",
            "--progress-every",
            "1s",
        ])
        .arg("--log")
        .arg(format!("steady1={}", peer_log.display()))
        .args(["--mark", "read-only=entering read-only mode"])
        .args(["--mark", "read-write=exiting read-only mode"]);
    match &cgroup {
        Some(cg) => collect
            .arg("--cgroup")
            .arg(format!("leaker={}", cg.path.display())),
        None => collect.args(["--limit", "leaker=256MiB"]),
    };
    let mut collector = Stopped(
        collect
            .stdout(Stdio::null())
            .stderr(fs::File::create(&collector_err).expect("collector's stderr"))
            .spawn()
            .expect("collect starts"),
    );
    let node = |name: &str| run.join("targets").join(name);
    let captures = |name: &str| -> Vec<i64> {
        records(&node(name))
            .iter()
            .filter(|r| ok_heap(r))
            .map(t_ms)
            .collect()
    };
    wait_until("captures of both steady nodes", CYCLE_DEADLINE, || {
        captures("steady1").len() >= 3 && captures("steady2").len() >= 3
    });

    let leaker = {
        let (addr, cg) = (leak_addr.clone(), cgroup.as_ref().map(|c| c.path.clone()));
        let (log, dir) = (peer_log.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || leaker_lives(oomgrow, addr, cg, log, dir))
    };

    // A hang: steady1 stops answering (its requests time out) while steady2 is watched.
    let hung = steady1.0.id();
    util::signal(hung, "STOP");
    let resume = Continued(hung);
    let frozen_at = util::unix_ms();
    std::thread::sleep(HANG);
    let thawed_at = util::unix_ms();
    drop(resume);
    wait_until("steady1 answers again", CYCLE_DEADLINE, || {
        captures("steady1").iter().any(|&t| t > thawed_at)
    });
    wait_until("a steady2 capture after the window", CYCLE_DEADLINE, || {
        captures("steady2").iter().any(|&t| t >= thawed_at)
    });

    let lives = leaker.join().expect("the leaker's lives");
    // Let the collector see the last death, then stop it as Ctrl-C would.
    std::thread::sleep(Duration::from_secs(1));
    util::signal(collector.0.id(), "INT");
    let (status, _) = util::wait_for_exit(&mut collector.0, Duration::from_secs(30));
    let stderr = fs::read_to_string(&collector_err).unwrap_or_default();
    assert!(
        status.success(),
        "collect exits 0 after Ctrl-C, not {status}: {stderr}"
    );

    // The hang of one node delayed no other: steady2's captures kept their pace.
    let timed_out = records(&node("steady1"))
        .iter()
        .filter(|r| r["kind"] == "heap" && r["error_kind"] == "timeout")
        .filter(|r| (frozen_at..thawed_at).contains(&t_ms(r)))
        .count();
    assert!(
        timed_out >= 1,
        "steady1 really hung: its requests timed out"
    );
    let gap = largest_gap(&captures("steady2"), frozen_at, thawed_at);
    let normal = {
        let c = captures("steady2");
        let before: Vec<i64> = c.iter().copied().filter(|&t| t < frozen_at).collect();
        before.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
    };
    // A node waiting on the hung one would wait a whole timeout at least; the bound leaves
    // room for a loaded machine and stays well below that.
    let bound = 2 * INTERVAL_MS + TIMEOUT_MS / 2;
    eprintln!(
        "hang isolation: steady1 stopped {:.1}s ({timed_out} timeouts); steady2's largest gap \
         between captures {gap} ms in the window (before it: {normal} ms; bound {bound} ms, \
         interval {INTERVAL_MS} ms, timeout {TIMEOUT_MS} ms)",
        (thawed_at - frozen_at) as f64 / 1e3
    );
    assert!(
        gap < bound,
        "steady2's captures were {gap} ms apart while steady1 hung (bound {bound} ms)"
    );

    // The layout: run.json lists the nodes; each node's directory is a complete run.
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["kind"], "cluster");
    let names: Vec<&str> = info["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["steady1", "steady2", "leaker"]);
    assert_eq!(info["targets"][2]["dir"], "targets/leaker");
    assert_eq!(info["targets"][2]["target"], format!("http://{leak_addr}"));
    assert_eq!(info["logs"][0]["name"], "steady1");
    for name in &names {
        let node_info: Value =
            serde_json::from_slice(&fs::read(node(name).join("run.json")).unwrap()).unwrap();
        assert_eq!(node_info["source"], "http", "{name}");
        assert!(
            stderr.contains(&format!("heapwatch: {name}: ")),
            "the summary and progress name {name}: {stderr}"
        );
    }

    // growth on each node: the leak, and only on the leaker, in each of its three lives.
    let leaker_growth = growth(&node("leaker"));
    let cycles = leaker_growth["cycles"].as_array().unwrap();
    assert_eq!(
        cycles.len(),
        KILLS,
        "one boot cycle per life: {leaker_growth}"
    );
    for c in cycles {
        assert_eq!(
            c["sites"][0]["name"], OOM_SITE,
            "cycle {}: {}",
            c["index"], c["sites"]
        );
    }
    for name in ["steady1", "steady2"] {
        let doc = growth(&node(name));
        for c in doc["cycles"].as_array().unwrap() {
            let sites = c["sites"].as_array().unwrap();
            assert!(
                sites.iter().all(|s| s["name"] != OOM_SITE) && sites.is_empty(),
                "{name} grows nothing: {sites:?}"
            );
        }
    }

    // The three kills, in the leaker's run only.
    let leaker_records = records(&node("leaker"));
    if let Some(cg) = &cgroup {
        let exits: Vec<&Value> = leaker_records
            .iter()
            .filter(|r| r["kind"] == "exit")
            .collect();
        assert_eq!(exits.len(), KILLS, "one exit record per kill: {exits:?}");
        assert!(exits.iter().all(|e| e["signal"] == 9), "{exits:?}");
        let killed = fs::read_to_string(node("leaker").join("memory.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"killed\":true"))
            .count();
        eprintln!("leaker: cgroup oom_kill counter {:?}", cg.oom_kills());
        assert_eq!(killed, KILLS, "memory.jsonl saw each OOM kill");
    }
    for name in ["steady1", "steady2"] {
        assert!(
            records(&node(name)).iter().all(|r| r["kind"] != "exit"),
            "{name} never died"
        );
    }

    // events.jsonl: each marked line of the peer's log, timed by the line.
    let events: Vec<Value> = fs::read_to_string(run.join("events.jsonl"))
        .expect("events.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event per line"))
        .collect();
    let of =
        |label: &str| -> Vec<&Value> { events.iter().filter(|e| e["label"] == label).collect() };
    let (entered, exited) = (of("read-only"), of("read-write"));
    assert_eq!((entered.len(), exited.len()), (KILLS, KILLS), "{events:?}");
    for (life, (e, x)) in lives.iter().zip(entered.iter().zip(&exited)) {
        assert_eq!(e["t_ms"], life.entered_ms, "{e}");
        assert_eq!(x["t_ms"], life.exited_ms, "{x}");
        for ev in [e, x] {
            assert_eq!(ev["time_from"], "line", "{ev}");
            assert_eq!(ev["log"], "steady1", "{ev}");
        }
        assert!(
            e["line"]
                .as_str()
                .unwrap()
                .contains("entering read-only mode")
        );
    }
}

#[test]
fn layout_rules_names_and_per_target_flags_are_checked_before_anything_is_written() {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = |args: &[&str]| {
        let mut all = vec!["collect", "--out", run.to_str().unwrap()];
        all.extend_from_slice(args);
        util::run(&all)
    };
    let refused = |args: &[&str], says: &str| {
        let o = out(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", util::stderr(&o));
        assert!(
            util::stderr(&o).contains(says),
            "{args:?}: {}",
            util::stderr(&o)
        );
        assert!(!run.exists(), "{args:?} left {}", run.display());
    };
    refused(
        &["http://127.0.0.1:1", "http://127.0.0.1:1"],
        "are both named \"127.0.0.1-1\": give each target its own --name",
    );
    refused(
        &[
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "--cgroup",
            "/sys/fs/cgroup/memory",
        ],
        "with several targets, say which: --cgroup NAME=VALUE",
    );
    refused(
        &[
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "--limit",
            "nobody=1GiB",
        ],
        "no target is named \"nobody\"",
    );
    refused(
        &[
            "http://127.0.0.1:1",
            "--mark",
            "x=(unclosed",
            "--log",
            "a=/tmp/a.log",
        ],
        "--mark \"x=(unclosed\": not a valid regular expression",
    );
    refused(
        &["http://127.0.0.1:1", "--mark", "x=y"],
        "--mark needs at least one --log",
    );
    refused(&["http://127.0.0.1:1", "--name", "a/b"], "--name \"a/b\"");

    // A run of one target is never resumed as a cluster, and the other way round.
    let single = dir.path().join("single");
    fs::create_dir_all(&single).unwrap();
    fs::write(single.join("manifest.jsonl"), "").unwrap();
    let o = util::run(&[
        "collect",
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        "--out",
        single.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        util::stderr(&o).contains("a run of one target already"),
        "{}",
        util::stderr(&o)
    );
}

#[test]
fn two_unreachable_targets_make_a_cluster_run_that_resumes_and_exits_3() {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    // The same targets each time: a run is resumed only against what it recorded.
    let (a, b) = (util::free_port(), util::free_port());
    let collect = || {
        util::run(&[
            "collect",
            &format!("http://127.0.0.1:{a}"),
            &format!("http://127.0.0.1:{b}"),
            "--name",
            "a",
            "--name",
            "b",
            "--out",
            run.to_str().unwrap(),
            "--duration",
            "600ms",
            "--interval",
            "100ms",
        ])
    };
    let first = collect();
    assert_eq!(first.status.code(), Some(3), "{}", util::stderr(&first));
    let err = util::stderr(&first);
    for name in ["a", "b"] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("heapwatch: {name}: ")) && l.contains("attempts"))
            .unwrap_or_else(|| panic!("{name}'s summary in {err}"));
        assert!(
            line.contains(": 0 stored, 0 duplicates, 0 runtime figure reads, "),
            "{line}"
        );
        // Every attempt failed: the counts add up.
        let n = |word: &str| -> u64 {
            let before = line.split(word).next().unwrap();
            before.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(n(" attempts:"), n(" failed"), "{line}");
    }
    assert!(err.contains("the target never answered"), "{err}");
    let second = collect();
    assert_eq!(second.status.code(), Some(3));
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["kind"], "cluster");
    assert_eq!(info["resumed_ms"].as_array().unwrap().len(), 1, "{info}");
    assert_eq!(info["targets"].as_array().unwrap().len(), 2, "{info}");
    for name in ["a", "b"] {
        let node: Value = serde_json::from_slice(
            &fs::read(run.join("targets").join(name).join("run.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(node["resumed_ms"].as_array().unwrap().len(), 1, "{node}");
        assert!(!records(&run.join("targets").join(name)).is_empty());
    }
}

#[test]
fn agent_dir_in_a_mixed_cluster_goes_to_the_agent_targets_only() {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let o = util::run(&[
        "collect",
        &format!("agent:tcp:127.0.0.1:{}", util::free_port()),
        &format!("http://127.0.0.1:{}", util::free_port()),
        "--agent-dir",
        dir.path().to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--duration",
        "300ms",
    ]);
    // Never answered (3), not refused as a usage error (2).
    assert_eq!(o.status.code(), Some(3), "{}", util::stderr(&o));
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    let sources: Vec<&str> = info["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["agent", "http"]);
}

#[test]
fn a_single_target_collect_writes_marked_lines_to_events_jsonl() {
    let Some(_) = util::go_fixture("steady") else {
        return;
    };
    let dir = util::tempdir();
    let (_steady, addr) = start_steady(dir.path(), "steady");
    let run = dir.path().join("run");
    let log = dir.path().join("app.log");
    let mut collector = Stopped(
        util::heapwatch()
            .args([
                "collect",
                &format!("http://{addr}"),
                "-q",
                "--interval",
                "100ms",
            ])
            .arg("--out")
            .arg(&run)
            .arg("--log")
            .arg(format!("app={}", log.display()))
            .args(["--mark", "ready=server ready"])
            .spawn()
            .expect("collect starts"),
    );
    wait_until("a capture", CYCLE_DEADLINE, || {
        records(&run).iter().any(ok_heap)
    });
    // The log appears after the collector started; one line without a timestamp.
    let at = util::unix_ms() - 5_000;
    log_line(&log, at, "server ready on :8080");
    fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"server ready again\nnot marked\n")
        .unwrap();
    wait_until("two events", CYCLE_DEADLINE, || {
        fs::read_to_string(run.join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .count()
            >= 2
    });
    util::signal(collector.0.id(), "INT");
    let (status, _) = util::wait_for_exit(&mut collector.0, Duration::from_secs(30));
    assert!(status.success());
    let events: Vec<Value> = fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (events[0]["t_ms"].as_i64(), &events[0]["time_from"]),
        (Some(at), &Value::from("line"))
    );
    assert_eq!(events[1]["time_from"], "read");
    assert!(t_ms(&events[1]) >= at + 5_000 - 10);
    assert!(
        events
            .iter()
            .all(|e| e["label"] == "ready" && e["log"] == "app")
    );
    // The run itself is as it always was.
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["target"], format!("http://{addr}"));
}

#[test]
fn a_log_whose_file_never_appears_is_named_in_progress_and_summary() {
    let Some(_) = util::go_fixture("steady") else {
        return;
    };
    let dir = util::tempdir();
    let (_steady, addr) = start_steady(dir.path(), "steady");
    let run = dir.path().join("run");
    let there = dir.path().join("there.log");
    fs::write(&there, "").unwrap();
    let typo = dir.path().join("typo.log");
    let o = util::heapwatch()
        .args(["collect", &format!("http://{addr}"), "--interval", "100ms"])
        .args(["--duration", "1s"])
        .arg("--out")
        .arg(&run)
        .arg("--log")
        .arg(format!("app={}", there.display()))
        .arg("--log")
        .arg(format!("ctrl={}", typo.display()))
        .args(["--mark", "ready=server ready"])
        .output()
        .expect("collect runs");
    let err = util::stderr(&o);
    assert!(o.status.success(), "{err}");
    // stderr is not a terminal here: the plain progress line says it while it is missing.
    assert!(
        err.contains(&format!("--log ctrl={}: not there yet", typo.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "--log ctrl={}: the file never appeared",
            typo.display()
        )),
        "{err}"
    );
    assert!(err.contains("0 event(s) marked"), "{err}");
    // The log that was there is not named.
    assert!(!err.contains("--log app="), "{err}");
}
