//! A real OOM kill, three times in a row. `oomgrow` runs in a 256 MiB memory cgroup, grows its
//! heap until the kernel SIGKILLs it, and is restarted on the same port, while one collector
//! watches the whole time. The run directory must hold three boot cycles, each with captures
//! made durable until the target stopped answering, and no torn file.
//!
//! Without a writable memory cgroup (not root, no v1 memory controller) a watchdog thread plays
//! the kernel: it SIGKILLs the target once its RSS passes the limit.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, Reaped, signal};

const LIMIT: u64 = 256 << 20;
const CYCLES: u32 = 3;
const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";
/// Growth rate of the target: about four seconds from start to the limit.
const RATE: &str = "64MiB";
/// A target that is never killed fails the test instead of hanging it.
// A target at its cgroup limit can freeze in reclaim for tens of seconds before the kernel
// kills it (seen here: 22, 26 and over 40 s, against 4 s without the freeze).
const CYCLE_DEADLINE: Duration = Duration::from_secs(120);

/// A v1 memory cgroup made for one test; removed on drop, with any process left in it.
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    fn create() -> Result<Cgroup, String> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            Path::new(CGROUP_ROOT).join(format!("heapwatch-test-{}-{}", std::process::id(), n));
        fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        let cgroup = Cgroup { path };
        let limit = cgroup.path.join("memory.limit_in_bytes");
        fs::write(&limit, LIMIT.to_string())
            .map_err(|e| format!("write {}: {e}", limit.display()))?;
        // Without swap accounting this file is absent; with it, swap must not extend the limit.
        let _ = fs::write(
            cgroup.path.join("memory.memsw.limit_in_bytes"),
            LIMIT.to_string(),
        );
        Ok(cgroup)
    }

    fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// The kernel's OOM-kill counter of this cgroup, when it exposes one.
    fn oom_kills(&self) -> Option<u64> {
        let text = fs::read_to_string(self.path.join("memory.oom_control")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                signal(pid, "KILL");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for attempt in 0..20 {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if attempt == 19 => {
                    eprintln!("could not remove {}: {e}", self.path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// Kills a process once its RSS passes the limit, as the kernel would in a cgroup.
struct Watchdog {
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    fn watch(pid: u32) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let handle = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if rss(pid).is_some_and(|b| b > LIMIT) {
                    signal(pid, "KILL");
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Watchdog {
            done,
            handle: Some(handle),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn rss(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        let kb = l
            .strip_prefix("VmRSS:")?
            .trim()
            .trim_end_matches("kB")
            .trim();
        kb.parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// Waits for a child, polling so a target that is never killed fails the test. Returns the
/// status and the unix ms right after the wait returned.
fn wait_for_death(child: &mut Child, deadline: Duration) -> (ExitStatus, i64) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the target") {
            return (status, util::unix_ms());
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the target was not killed within {}s",
                deadline.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What one boot cycle of the target looked like from the test's side.
struct Life {
    started_ms: i64,
    killed_ms: i64,
}

fn num(record: &Value, key: &str) -> f64 {
    record[key].as_f64().unwrap_or(0.0)
}

fn ok(record: &Value) -> bool {
    record["error"].is_null()
}

#[test]
fn three_oom_kills_in_a_row_make_three_boot_cycles_with_fresh_durable_captures() {
    let Some(oomgrow) = util::go_fixture("oomgrow") else {
        return;
    };
    let test_started = Instant::now();
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let port = util::free_port();
    let addr = format!("127.0.0.1:{port}");
    let cgroup = match Cgroup::create() {
        Ok(c) => Some(c),
        Err(e) => {
            crate::prerequisite::reduced(
                crate::prerequisite::Need::Root,
                &format!("no writable v1 memory cgroup ({e})"),
                "a watchdog plays the kernel",
            );
            None
        }
    };
    eprintln!(
        "mode: {}",
        if cgroup.is_some() {
            "cgroup"
        } else {
            "watchdog"
        }
    );

    let collector_log = dir.path().join("collector.stderr");
    let mut collect = util::heapwatch();
    collect
        .args(["collect", &format!("http://{addr}"), "--out"])
        .arg(&run)
        .args(["--interval", "200ms", "--timeout", "1s", "--quiet"])
        // Only refusals count towards the grace period (a frozen target times out, it is not
        // gone); the test ends the collector with SIGINT.
        .args(["--until-exit", "--grace", "6s"]);
    if let Some(cg) = &cgroup {
        collect.arg("--cgroup").arg(&cg.path);
    } else {
        collect.args(["--limit", "256MiB"]);
    }
    let mut collector = Reaped(
        collect
            .stdout(Stdio::null())
            .stderr(fs::File::create(&collector_log).expect("collector log"))
            .spawn()
            .expect("start the collector"),
    );

    let mut lives = Vec::new();
    for cycle in 1..=CYCLES {
        let target_log = dir.path().join(format!("oomgrow-{cycle}.stderr"));
        let mut command = match &cgroup {
            // The shell joins the cgroup, then becomes oomgrow: it is inside before it allocates.
            Some(cg) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$1/cgroup.procs" && exec "$2" -listen "$3" -rate "$4""#)
                    .arg("sh")
                    .arg(&cg.path)
                    .arg(&oomgrow)
                    .arg(&addr)
                    .arg(RATE);
                c
            }
            None => {
                let mut c = Command::new(&oomgrow);
                c.args(["-listen", &addr, "-rate", RATE]);
                c
            }
        };
        let started_ms = util::unix_ms();
        let mut target = Reaped(
            command
                .stdout(Stdio::null())
                .stderr(fs::File::create(&target_log).expect("target log"))
                .spawn()
                .expect("start oomgrow"),
        );
        let watchdog = cgroup.is_none().then(|| Watchdog::watch(target.0.id()));
        let (status, killed_ms) = wait_for_death(&mut target.0, CYCLE_DEADLINE);
        drop(watchdog);
        assert_eq!(
            status.signal(),
            Some(9),
            "cycle {cycle}: oomgrow should die of SIGKILL, not {status}; its stderr: {}",
            fs::read_to_string(&target_log).unwrap_or_default()
        );
        eprintln!(
            "cycle {cycle}: oomgrow pid {} killed after {:.2}s",
            target.0.id(),
            (killed_ms - started_ms) as f64 / 1e3
        );
        lives.push(Life {
            started_ms,
            killed_ms,
        });
    }

    // Let the collector see the last target gone, then stop it as Ctrl-C would.
    std::thread::sleep(Duration::from_secs(1));
    signal(collector.0.id(), "INT");
    let (status, _) = wait_for_death(&mut collector.0, Duration::from_secs(15));
    let collector_stderr = fs::read_to_string(&collector_log).unwrap_or_default();
    assert!(
        status.success(),
        "the collector should exit 0 after SIGINT, not {status}: {collector_stderr}"
    );
    let lives_took = test_started.elapsed();

    let manifest = fs::read_to_string(run.join("manifest.jsonl")).expect("manifest.jsonl");
    assert!(
        manifest.ends_with('\n'),
        "a cleanly stopped collector leaves no torn line"
    );
    let records: Vec<Value> = manifest
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("manifest line {}: {e}: {l}", i + 1))
        })
        .collect();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq strictly increasing: {seqs:?}"
    );

    // Boot cycles: exactly one per process, and every answer filed under the process that gave it.
    let answered: Vec<&Value> = records
        .iter()
        .filter(|r| ok(r) && !util::is_event(r))
        .collect();
    let cycles: BTreeSet<u64> = answered
        .iter()
        .map(|r| r["incarnation"].as_u64().unwrap())
        .collect();
    assert_eq!(
        cycles,
        (1..=u64::from(CYCLES)).collect::<BTreeSet<_>>(),
        "one boot cycle per oomgrow process"
    );
    for r in &answered {
        let c = r["incarnation"].as_u64().unwrap() as usize;
        let life = &lives[c - 1];
        let t = r["t_ms"].as_i64().unwrap();
        assert!(
            t >= life.started_ms - 50 && t <= life.killed_ms + 50,
            "seq {} (t_ms {t}) is filed under cycle {c}, which lived {}..{}",
            r["seq"],
            life.started_ms,
            life.killed_ms
        );
    }

    for (i, life) in lives.iter().enumerate() {
        let c = i as u64 + 1;
        let heap: Vec<&Value> = records
            .iter()
            .filter(|r| r["kind"] == "heap" && r["incarnation"].as_u64() == Some(c))
            .collect();
        let good: Vec<&&Value> = heap.iter().filter(|r| ok(r)).collect();
        let stored = good.iter().filter(|r| r["dup_of"].is_null()).count();
        let intervals: BTreeSet<u64> = heap
            .iter()
            .filter_map(|r| r["interval_ms"].as_u64())
            .collect();
        let mut failures = std::collections::BTreeMap::<String, usize>::new();
        for r in heap.iter().filter(|r| !ok(r)) {
            *failures
                .entry(r["error_kind"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        assert!(
            good.len() >= 2,
            "cycle {c}: at least two heap captures, got {} ({failures:?})",
            good.len()
        );
        let newest = good.last().unwrap();
        let newest_seq = newest["seq"].as_u64().unwrap();
        let answered_until = num(newest, "t_ms") + num(newest, "latency_ms");
        // The first attempt of any kind that failed after the newest answer of this cycle,
        // unless the next process answered first.
        let failed_after = records
            .iter()
            .filter(|r| r["seq"].as_u64().unwrap() > newest_seq && !util::is_event(r))
            .find(|r| !ok(r) || r["incarnation"].as_u64() != Some(c))
            .filter(|r| !ok(r));
        let (stopped, slack, how) = match failed_after {
            Some(f) => {
                let interval = f["interval_ms"].as_f64().unwrap_or(200.0);
                (
                    num(f, "t_ms"),
                    interval + num(f, "latency_ms") + 300.0,
                    format!(
                        "seq {} {} after {:.0}ms, interval {interval}ms",
                        f["seq"],
                        f["error_kind"].as_str().unwrap_or("?"),
                        num(f, "latency_ms")
                    ),
                )
            }
            // It answered until the kill and came back before the collector asked again.
            None => (life.killed_ms as f64, 300.0, "no failed attempt".into()),
        };
        let age_stopped = stopped - answered_until;
        let age_killed = life.killed_ms as f64 - answered_until;
        eprintln!(
            "cycle {c}: lived {:.2}s, {} heap captures ({stored} stored, {} duplicates), \
             failures {failures:?}, intervals {intervals:?}ms; newest capture seq {newest_seq} answered {age_killed:.0}ms \
             before the kill and {age_stopped:.0}ms before the target stopped answering ({how}); \
             stopped answering {:.0}ms before the kill",
            (life.killed_ms - life.started_ms) as f64 / 1e3,
            good.len(),
            good.len() - stored,
            life.killed_ms as f64 - stopped,
        );
        assert!(stored >= 1, "cycle {c}: at least one stored profile");
        assert!(
            answered_until >= stopped - slack,
            "cycle {c}: newest capture answered at {answered_until}, {age_stopped:.0}ms before the \
             target stopped answering at {stopped} ({how}): more than the allowed {slack:.0}ms"
        );
    }

    // Every file complete, decodable, named by the manifest; no temporary file left.
    let profiles = run.join("profiles");
    let mut files = 0;
    for entry in fs::read_dir(&profiles).expect("profiles/") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".partial-"),
            "temporary file left: {name}"
        );
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(fs::File::open(&path).expect("open profile"))
            .read_to_end(&mut raw)
            .unwrap_or_else(|e| panic!("{name}: not a complete gzip stream: {e}"));
        let top = util::run(&["top", path.to_str().unwrap()]);
        assert!(
            top.status.success(),
            "heapwatch top {name}: {}",
            util::stderr(&top)
        );
        files += 1;
    }
    for r in &records {
        if let Some(file) = r["file"].as_str() {
            assert!(
                run.join(file).is_file(),
                "seq {} names {file}, which is missing",
                r["seq"]
            );
        }
    }

    // The kills, as seen from outside the target.
    if let Some(cg) = &cgroup {
        let samples: Vec<Value> = fs::read_to_string(run.join("memory.jsonl"))
            .expect("memory.jsonl")
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let killed = samples.iter().filter(|s| s["killed"] == true).count();
        let counters: Vec<u64> = samples
            .iter()
            .filter_map(|s| s["oom_kills"].as_u64())
            .collect();
        let peak = samples
            .iter()
            .filter_map(|s| s["usage"].as_u64())
            .max()
            .unwrap_or(0);
        eprintln!(
            "memory.jsonl: {} samples, {killed} marked killed, oom_kill counter {:?} -> {:?} \
             (kernel now says {:?}), peak usage {} MiB",
            samples.len(),
            counters.first(),
            counters.last(),
            cg.oom_kills(),
            peak >> 20
        );
        assert!(!samples.is_empty(), "memory.jsonl has samples");
        if cg.oom_kills().is_some() {
            let rise = counters.last().unwrap() - counters.first().unwrap();
            assert_eq!(
                rise,
                u64::from(CYCLES),
                "the oom_kill counter rose once per kill"
            );
            assert_eq!(
                killed, CYCLES as usize,
                "one sample marked killed per OOM kill"
            );
        } else {
            crate::prerequisite::reduced(
                crate::prerequisite::Need::OomKillCounter,
                "memory.oom_control has no oom_kill counter",
                "the OOM kill in memory.jsonl is not asserted",
            );
        }
    }
    eprintln!(
        "{} records, {files} profile files; three lives in {:.1}s, test {:.1}s",
        records.len(),
        lives_took.as_secs_f64(),
        test_started.elapsed().as_secs_f64()
    );
}
