//! `heapwatch watch` on a node laid out as a kubelet lays one out (tests/cli/kubenode.rs):
//! real cgroups, real Go fixtures, real kernel OOM kills, a supervisor restarting the grower as
//! a kubelet would. Nothing is arranged with heapwatch in advance: it finds every Go container,
//! names it, never touches the non-Go one, records each of the grower's lives at the burst
//! interval until the kernel kills it, and stops cleanly on SIGTERM with everything durable.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kubenode::{KubeNode, Layout, Life, Qos, Supervised};
use crate::util::{self, Reaped};

mod bad_input;
mod push;

const MIB: u64 = 1 << 20;
const STARTUP: Duration = Duration::from_secs(30);
const OOM_SITE: &str = "main.(*routerDataModel).buildEventList";
const BURST_MS: i64 = 200;
/// Lives of the grower: the first and two restarts, each ended by the kernel.
const LIVES: usize = 3;

fn records(dir: &Path) -> Vec<Value> {
    util::manifest_so_far(dir)
}

fn ok_heap(r: &Value) -> bool {
    r["kind"] == "heap" && r["error"].is_null() && r["file"].is_string()
}

fn t_ms(r: &Value) -> i64 {
    r["t_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("no t_ms in {r}"))
}

fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < deadline, "{what} within {deadline:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `heapwatch watch` over the node, its stderr in `log`.
fn start_watch(node: &KubeNode, out: &Path, log: &Path, extra: &[&str]) -> Reaped {
    let err = fs::File::create(log).expect("watch's log");
    let child: Child = util::heapwatch()
        .arg("watch")
        .arg("--out")
        .arg(out)
        .arg("--cgroup-root")
        .arg(node.cgroup_root())
        .arg("--pods-dir")
        .arg(node.pods_dir())
        .args(if extra.contains(&"--baseline") {
            &[][..]
        } else {
            &["--baseline", "10s"][..]
        })
        .args(["--burst-interval", "200ms"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("heapwatch watch starts");
    Reaped(child)
}

/// SIGTERM, then the exit status (the test fails if it does not come within 20 s).
fn stop_watch(watch: &mut Reaped, log: &Path) {
    util::signal(watch.0.id(), "TERM");
    let (status, _) = util::wait_for_exit(&mut watch.0, Duration::from_secs(20));
    let said = fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "watch ended {status}: {said}");
}

fn target_dir(out: &Path, name: &str) -> PathBuf {
    out.join("targets").join(name.replace('/', "_"))
}

/// The growth report of one node.
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

#[test]
fn watch_records_every_go_container_of_a_node_and_each_oom_killed_life_to_its_end() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let grower_pod = node.pod("jobs", "grower-0", Qos::Guaranteed, Some(64 * MIB));
    let grower = node.container(&grower_pod, "grow", Some(64 * MIB));
    let api_pod = node.pod("shop", "cart-1", Qos::Burstable, Some(256 * MIB));
    let api = node.container(&api_pod, "api", Some(128 * MIB));
    let leak_pod = node.pod("shop", "notify-2", Qos::Burstable, None);
    let leak = node.container(&leak_pod, "worker", Some(96 * MIB));
    let shell_pod = node.pod("tools", "debug-0", Qos::BestEffort, None);
    let shell = node.container(&shell_pod, "shell", None);
    let late_pod = node.pod("web", "late-3", Qos::Burstable, Some(128 * MIB));
    let late = node.container(&late_pod, "app", Some(96 * MIB));

    node.start(&api, &fixtures.join("steady"), &["-working-set", "8MiB"]);
    node.start(&leak, &fixtures.join("goroutineleak"), &[]);
    let shell_pid = node.start(&shell, Path::new("/bin/sleep"), &["600"]);
    for c in [&api, &leak] {
        node.wait_for_line(c, "listening on ", STARTUP);
    }

    let dir = util::tempdir();
    let out = dir.path().join("node-run");
    let log = dir.path().join("watch.err");
    let mut watch = start_watch(&node, &out, &log, &[]);
    let watch_started = util::unix_ms();
    // The grower starts once watch runs (as any pod may); the late one 10 s after.
    let grows = node.supervise(
        grower.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "16MiB".into()],
            restarts: (LIVES - 1) as u32,
            delay: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            new_container: false,
        },
    );
    let arrives = node.supervise(
        late.clone(),
        Supervised {
            program: fixtures.join("steady"),
            args: vec!["-working-set".into(), "4MiB".into()],
            restarts: 0,
            delay: Duration::from_secs(10),
            backoff: Duration::ZERO,
            new_container: false,
        },
    );

    // Every kill comes when the kernel decides: waited for, never assumed quick.
    grows.wait_ended(LIVES, Duration::from_secs(180));
    arrives.wait_started(1, Duration::from_secs(60));
    node.wait_for_line(&late, "listening on ", STARTUP);
    let late_dir = target_dir(&out, &late.full_name());
    wait_until(
        "a capture of the late container",
        Duration::from_secs(30),
        || records(&late_dir).iter().any(ok_heap),
    );
    stop_watch(&mut watch, &log);
    let said = fs::read_to_string(&log).unwrap_or_default();

    // The node's run lists the four Go containers by their Kubernetes names, and nothing else.
    let info: Value = serde_json::from_slice(&fs::read(out.join("run.json")).expect("run.json"))
        .expect("run.json is JSON");
    assert_eq!(info["kind"], "cluster", "{info:#}");
    let names: BTreeSet<&str> = info["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "jobs/grower-0/grow",
            "shop/cart-1/api",
            "shop/notify-2/worker",
            "web/late-3/app"
        ]),
        "{info:#}\n{said}"
    );
    let dirs: BTreeSet<String> = fs::read_dir(out.join("targets"))
        .expect("targets/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        dirs,
        BTreeSet::from([
            "jobs_grower-0_grow".to_string(),
            "shop_cart-1_api".into(),
            "shop_notify-2_worker".into(),
            "web_late-3_app".into()
        ])
    );
    // The non-Go process: never a target, never attached to (its cgroup appears nowhere).
    let everything = format!("{info}{said}");
    assert!(!everything.contains(&shell.id), "{everything}");
    assert!(!said.contains(&format!("pid {shell_pid}")), "{said}");

    // The late container: found by a rescan once it started, not before.
    let late_records = records(&late_dir);
    let first_late = late_records.iter().filter(|r| ok_heap(r)).map(t_ms).min();
    let late_life = arrives.lives()[0].clone();
    assert!(
        first_late.is_some_and(|t| t >= late_life.started_ms && t >= watch_started + 9_000),
        "first capture {first_late:?}, started {} (watch at {watch_started})",
        late_life.started_ms
    );

    // The grower: one boot cycle per life, its growing site first in each.
    let grower_dir = target_dir(&out, &grower.full_name());
    let doc = growth(&grower_dir);
    let cycles = doc["cycles"].as_array().expect("cycles");
    assert_eq!(cycles.len(), LIVES, "one boot cycle per life: {doc:#}");
    for c in cycles {
        assert_eq!(
            c["sites"][0]["name"], OOM_SITE,
            "cycle {}: {}",
            c["index"], c["sites"]
        );
    }
    // Each kill, from the container's cgroup: an exit record with SIGKILL, and the sampler's
    // `killed` from the cgroup's oom_kill counter.
    let grower_records = records(&grower_dir);
    let exits: Vec<&Value> = grower_records
        .iter()
        .filter(|r| r["kind"] == "exit")
        .collect();
    assert_eq!(
        exits.len(),
        LIVES,
        "one exit record per kill: {exits:#?}\n{said}"
    );
    assert!(exits.iter().all(|e| e["signal"] == 9), "{exits:#?}");
    // Each exit record carries the kernel's count, read when the exit is heard: the sampler's
    // own sample of the kill may come after the restart and be filed under the next life.
    assert!(
        exits.iter().all(|e| e["totals"]["oom_kill"] == 1),
        "{exits:#?}"
    );
    // Issue 35, item 5c: watch's own line for each end reads as run's and collect's, from the
    // same exit record: an OOM kill, not "killed by signal 9".
    let oom_lines = said
        .lines()
        .filter(|l| {
            l.contains("jobs/grower-0/grow: cycle ")
                && l.contains("OOM-killed (signal 9, the cgroup's oom_kill rose)")
        })
        .count();
    assert_eq!(oom_lines, LIVES, "{said}");
    assert!(!said.contains("killed by signal 9"), "{said}");
    let killed = fs::read_to_string(grower_dir.join("memory.jsonl"))
        .expect("memory.jsonl")
        .lines()
        .filter(|l| l.contains("\"killed\":true"))
        .count();
    assert_eq!(killed, LIVES, "memory.jsonl saw each OOM kill");
    let lives: Vec<Life> = grows.lives();
    for (n, life) in lives.iter().enumerate() {
        assert_eq!(
            life.oom_kills_after,
            Some(n as u64 + 1),
            "life {n}: {life:?}"
        );
    }

    // The last second of each life at the burst interval, the newest capture ending at most
    // one burst interval before the kill (the kill seen by the supervisor within a few ms).
    for (n, life) in lives.iter().enumerate() {
        let (end_ms, _) = life.ended.expect("ended");
        let caps: Vec<(i64, i64)> = grower_records
            .iter()
            .filter(|r| ok_heap(r) && r["pid"] == life.pid)
            .map(|r| {
                let t = t_ms(r);
                (t, t + r["latency_ms"].as_f64().unwrap_or(0.0).ceil() as i64)
            })
            .collect();
        let newest_end = caps
            .iter()
            .map(|c| c.1)
            .max()
            .expect("captures of the life");
        eprintln!(
            "life {n}: pid {} {} captures, kill at {end_ms}, newest ended {} ms before",
            life.pid,
            caps.len(),
            end_ms - newest_end
        );
        assert!(
            end_ms - newest_end <= BURST_MS + 50,
            "life {n}: the newest capture ended {} ms before the kill: {caps:?}",
            end_ms - newest_end
        );
        let last_second: Vec<i64> = caps
            .iter()
            .map(|c| c.0)
            .filter(|&t| t >= end_ms - 1000)
            .collect();
        assert!(
            last_second.len() >= 3,
            "life {n}: captures in its last second {last_second:?} of {caps:?}"
        );
        for w in last_second.windows(2) {
            assert!(
                w[1] - w[0] <= 2 * BURST_MS,
                "life {n}: a gap of {} ms in its last second: {last_second:?}",
                w[1] - w[0]
            );
        }
    }

    // The steady ones: recorded, never ended, nothing growing like the grower.
    for c in [&api, &leak] {
        let d = target_dir(&out, &c.full_name());
        let rs = records(&d);
        assert!(rs.iter().any(ok_heap), "{}: {rs:#?}", c.full_name());
        assert!(rs.iter().all(|r| r["kind"] != "exit"), "{}", c.full_name());
    }
    // Stopped cleanly: each node ends with a stop record, every manifest line whole.
    for name in &names {
        let d = target_dir(&out, name);
        let text = fs::read_to_string(d.join("manifest.jsonl")).expect("manifest");
        for line in text.lines() {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("{name}: a torn line {line:?}: {e}"));
        }
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "stop", "{name}: {last}");
    }

    // `report DIR` on the watch run: the grower died in each life, with its verdict; the others
    // lived.
    let report_dir = dir.path().join("report");
    let rep = util::run(&[
        "report",
        out.to_str().unwrap(),
        "-o",
        report_dir.to_str().unwrap(),
    ]);
    assert!(rep.status.success(), "report: {}", util::stderr(&rep));
    let md = fs::read_to_string(report_dir.join("report.md")).expect("report.md");
    let row = md
        .lines()
        .find(|l| l.starts_with("| `jobs/grower-0/grow` |"))
        .unwrap_or_else(|| panic!("no row for the grower: {md}"));
    // The table gives each node's lead; its section below, the rest.
    assert!(row.contains("OOM-killed"), "{row}");
    assert!(row.contains(OOM_SITE.replace('*', "\\*").as_str()), "{row}");
    assert!(md.contains("3 boot cycles: 3 OOM-killed"), "{md}");
    // Issue 35, item 6: each container's own report is titled with its name, and its build
    // column never names the node directory.
    let grower_report = report_dir
        .join("nodes")
        .join(grower_dir.file_name().unwrap());
    let own_md = fs::read_to_string(grower_report.join("report.md")).expect("the node's report");
    assert!(
        own_md.starts_with("## heapwatch report: jobs/grower-0/grow\n"),
        "{own_md}"
    );
    assert!(
        !own_md.lines().any(|l| l.starts_with("| 1 | node-run |")),
        "{own_md}"
    );
    let own_html = fs::read_to_string(grower_report.join("index.html")).unwrap();
    assert!(own_html.contains("<title>heapwatch report: jobs/grower-0/grow</title>"));
    let summary: Value =
        serde_json::from_slice(&fs::read(report_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["kind"], "cluster");
    let node_summary = |n: &str| summary["nodes"][n]["summary"].clone();
    let grower_cycles = node_summary("jobs/grower-0/grow")["cycles"].clone();
    let grower_cycles = grower_cycles.as_array().expect("the grower's cycles");
    assert_eq!(grower_cycles.len(), LIVES, "{summary:#}");
    for c in grower_cycles {
        assert_eq!(c["killed"], true, "{c:#}");
        assert_eq!(c["top_sites"][0]["name"], OOM_SITE, "{c:#}");
    }
    for n in ["shop/cart-1/api", "shop/notify-2/worker", "web/late-3/app"] {
        let cycles = node_summary(n)["cycles"].clone();
        assert!(
            cycles
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["killed"] == false)),
            "{n}: {cycles:#}"
        );
    }
}

/// The kept captures of a node (stored, not deleted) and the deleted ones, by seq.
fn kept_and_deleted(dir: &Path) -> (Vec<Value>, Vec<Value>) {
    let rs = records(dir);
    let deleted: BTreeSet<u64> = rs
        .iter()
        .filter_map(|r| r["deleted_seq"].as_u64())
        .collect();
    let stored = rs
        .iter()
        .filter(|r| ok_heap(r) && r["dup_of"].is_null())
        .cloned();
    stored.partition(|r| !deleted.contains(&r["seq"].as_u64().unwrap()))
}

/// `--disk-budget` far below what a run stores: the steady container, which never dies, is
/// thinned oldest first; every capture of the grower's last 2 s before each kill stays.
#[test]
fn watch_disk_budget_thins_the_quiet_container_and_keeps_every_pre_kill_window() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let grower_pod = node.pod("jobs", "grower-1", Qos::Guaranteed, Some(64 * MIB));
    let grower = node.container(&grower_pod, "grow", Some(64 * MIB));
    let api_pod = node.pod("shop", "cart-2", Qos::Burstable, None);
    let api = node.container(&api_pod, "api", Some(128 * MIB));
    node.start(&api, &fixtures.join("steady"), &["-working-set", "8MiB"]);
    node.wait_for_line(&api, "listening on ", STARTUP);

    let dir = util::tempdir();
    let out = dir.path().join("node-run");
    let log = dir.path().join("watch.err");
    let mut watch = start_watch(
        &node,
        &out,
        &log,
        &[
            "--baseline",
            "250ms",
            "--disk-budget",
            "16KiB",
            "--keep-before-kill",
            "2s",
        ],
    );
    let grows = node.supervise(
        grower.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "16MiB".into()],
            restarts: (LIVES - 1) as u32,
            delay: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            new_container: false,
        },
    );
    grows.wait_ended(LIVES, Duration::from_secs(180));
    // A rescan or two after the last kill, so the budget has looked at everything.
    std::thread::sleep(Duration::from_secs(2));
    stop_watch(&mut watch, &log);

    let api_dir = target_dir(&out, &api.full_name());
    let grower_dir = target_dir(&out, &grower.full_name());
    let (api_kept, api_deleted) = kept_and_deleted(&api_dir);
    assert!(
        !api_deleted.is_empty(),
        "the quiet container was thinned: kept {} ({} bytes); watch said {}",
        api_kept.len(),
        api_kept
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap_or(0))
            .sum::<u64>(),
        fs::read_to_string(&log).unwrap_or_default()
    );
    // Oldest first: every capture deleted is older than every one kept but the first.
    let first_t = api_kept.iter().map(t_ms).min().unwrap();
    let oldest_kept = api_kept
        .iter()
        .map(t_ms)
        .filter(|&t| t != first_t)
        .min()
        .unwrap();
    let newest_deleted = api_deleted.iter().map(t_ms).max().unwrap();
    assert!(
        newest_deleted < oldest_kept,
        "deleted up to {newest_deleted}, kept from {oldest_kept}"
    );
    // Every pre-kill window whole.
    let (grower_kept, grower_deleted) = kept_and_deleted(&grower_dir);
    for (n, life) in grows.lives().iter().enumerate() {
        let (end_ms, _) = life.ended.expect("ended");
        let window = |r: &&Value| t_ms(r) >= end_ms - 2000 && t_ms(r) <= end_ms;
        assert!(
            grower_deleted.iter().filter(window).count() == 0,
            "life {n}: a capture of its last 2 s was deleted: {grower_deleted:#?}"
        );
        assert!(
            grower_kept.iter().filter(window).count() >= 1,
            "life {n} (pid {}, ended {end_ms}): kept {:?}, deleted {:?}",
            life.pid,
            grower_kept
                .iter()
                .map(|r| (t_ms(r), r["pid"].clone()))
                .collect::<Vec<_>>(),
            grower_deleted.iter().map(t_ms).collect::<Vec<_>>()
        );
    }
    // The files on disk are what the manifests keep.
    for (d, kept, deleted) in [
        (&api_dir, &api_kept, &api_deleted),
        (&grower_dir, &grower_kept, &grower_deleted),
    ] {
        for r in kept {
            assert!(d.join(r["file"].as_str().unwrap()).is_file(), "{r}");
        }
        for r in deleted {
            assert!(!d.join(r["file"].as_str().unwrap()).exists(), "{r}");
        }
    }
}

/// A kubelet's restart makes a new container (new id, new cgroup) under the same name, here in
/// the systemd driver's layout: the same node, a session per container, one boot cycle per
/// life, each kill recorded from its own cgroup before the kubelet removed it.
#[test]
fn watch_follows_a_container_restarted_by_a_kubelet_into_a_new_cgroup() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(mut node) = KubeNode::new(Layout::Systemd) else {
        return;
    };
    let pod = node.pod("jobs", "grower-2", Qos::Burstable, None);
    let grower = node.container(&pod, "grow", Some(64 * MIB));
    let dir = util::tempdir();
    let out = dir.path().join("node-run");
    let log = dir.path().join("watch.err");
    let mut watch = start_watch(&node, &out, &log, &[]);
    let grows = node.supervise(
        grower.clone(),
        Supervised {
            program: fixtures.join("oomgrow"),
            args: vec!["-rate".into(), "16MiB".into()],
            restarts: 1,
            delay: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            new_container: true,
        },
    );
    grows.wait_ended(2, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    stop_watch(&mut watch, &log);
    let said = fs::read_to_string(&log).unwrap_or_default();
    let lives = grows.lives();
    assert_ne!(lives[0].cgroup, lives[1].cgroup, "a new container");

    let targets: Vec<String> = fs::read_dir(out.join("targets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(targets, ["jobs_grower-2_grow"], "{said}");
    let d = target_dir(&out, "jobs/grower-2/grow");
    let doc = growth(&d);
    let cycles = doc["cycles"].as_array().expect("cycles");
    assert_eq!(cycles.len(), 2, "{doc:#}\n{said}");
    for c in cycles {
        assert_eq!(c["sites"][0]["name"], OOM_SITE, "{c:#}");
    }
    let rs = records(&d);
    let exits: Vec<&Value> = rs.iter().filter(|r| r["kind"] == "exit").collect();
    assert_eq!(exits.len(), 2, "{exits:#?}\n{said}");
    assert!(exits.iter().all(|e| e["signal"] == 9), "{exits:#?}");
    assert!(
        exits.iter().all(|e| e["totals"]["oom_kill"] == 1),
        "{exits:#?}"
    );
    let killed = fs::read_to_string(d.join("memory.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"killed\":true"))
        .count();
    assert_eq!(killed, 2, "each kill read from its own cgroup\n{said}");
    let info: Value = serde_json::from_slice(&fs::read(d.join("run.json")).unwrap()).unwrap();
    assert!(
        info["target"]
            .as_str()
            .is_some_and(|t| t.contains(&lives[1].container_id)),
        "the node's run.json names its newest container: {info:#}"
    );
}
