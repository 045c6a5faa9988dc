//! `heapwatch watch` on a node that misbehaves: containers whose cgroups are removed while
//! they are read, a Go process that execs into another program, garbage in the kubelet's
//! pods directory, a process in a PID namespace of its own. Each is handled and said, the
//! other containers are recorded throughout, and watch stops cleanly on SIGTERM.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{
    MIB, STARTUP, ok_heap, records, start_watch, stop_watch, t_ms, target_dir, wait_until,
};
use crate::kubenode::{KubeNode, Layout, Qos};
use crate::util;

fn exe_of(pid: u32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[test]
fn watch_handles_vanishing_cgroups_execs_garbage_names_and_pid_namespaces_and_keeps_recording() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    // The control: recorded before, during and after everything else.
    let api_pod = node.pod("shop", "cart-1", Qos::Burstable, Some(256 * MIB));
    let api = node.container(&api_pod, "api", Some(128 * MIB));
    node.start(&api, &fixtures.join("steady"), &["-working-set", "4MiB"]);
    // A Go program that will exec into `sleep`, keeping its pid.
    let ex_pod = node.pod("ops", "wrapper-1", Qos::Burstable, Some(128 * MIB));
    let ex = node.container(&ex_pod, "self-update", Some(64 * MIB));
    let ex_pid = node.start(&ex, &fixtures.join("execinto"), &["sleep", "600"]);
    // pid 1 of a PID namespace of its own, as a container runtime starts it.
    let iso_pod = node.pod("iso", "ns-1", Qos::Burstable, Some(128 * MIB));
    let iso = node.container(&iso_pod, "app", Some(128 * MIB));
    node.start_wrapped(
        &iso,
        &["unshare", "--pid", "--fork", "--kill-child"],
        &fixtures.join("steady"),
        &["-working-set", "2MiB"],
    );
    for c in [&api, &ex, &iso] {
        node.wait_for_line(c, "listening on ", STARTUP);
    }
    // Garbage beside the kubelet's own entries.
    let pods = node.pods_dir();
    fs::create_dir(pods.join("not-a-pod")).unwrap();
    fs::create_dir(pods.join("shop_cart-9_not-a-uid")).unwrap();
    fs::write(pods.join(format!("shop_file-1_{}", api_pod.uid)), "a file").unwrap();
    std::os::unix::fs::symlink("/nonexistent", node.containers_dir().join("dangling.log")).unwrap();

    let dir = util::tempdir();
    let out = dir.path().join("node-run");
    let log = dir.path().join("watch.err");
    let mut watch = start_watch(
        &node,
        &out,
        &log,
        &["--baseline", "500ms", "--rescan", "200ms"],
    );
    let api_dir = target_dir(&out, &api.full_name());
    let ex_dir = target_dir(&out, &ex.full_name());
    let iso_dir = target_dir(&out, &iso.full_name());
    wait_until("captures of the three containers", STARTUP, || {
        [&api_dir, &ex_dir, &iso_dir]
            .iter()
            .all(|d| records(d).iter().any(ok_heap))
    });

    // Containers that come and go at once, their cgroups removed while watch may be reading
    // them (its rescan, its sampler, its collector), each at another moment of its life.
    let churn_pod = node.pod("batch", "churn-0", Qos::Burstable, Some(128 * MIB));
    for (n, after_ms) in [0u64, 50, 150, 300, 600, 1000].into_iter().enumerate() {
        let c = node.container(&churn_pod, &format!("job{n}"), Some(64 * MIB));
        let pid = node.start(&c, &fixtures.join("steady"), &["-working-set", "2MiB"]);
        wait_until("the job joined its cgroup", STARTUP, || {
            c.pids().contains(&pid)
        });
        std::thread::sleep(Duration::from_millis(after_ms));
        node.remove(&c);
    }
    // The Go program becomes `sleep`.
    util::signal(ex_pid, "USR1");
    wait_until("execinto became sleep", Duration::from_secs(10), || {
        exe_of(ex_pid).ends_with("/sleep")
    });
    let exec_ms = util::unix_ms();
    let churned_ms = util::unix_ms();
    wait_until(
        "the api recorded after the churn",
        Duration::from_secs(20),
        || {
            records(&api_dir)
                .iter()
                .filter(|r| ok_heap(r) && t_ms(r) > churned_ms)
                .count()
                >= 3
        },
    );
    assert!(
        watch.0.try_wait().unwrap().is_none(),
        "watch still runs: {}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    stop_watch(&mut watch, &log);
    let said = fs::read_to_string(&log).unwrap_or_default();
    assert!(!said.contains("panicked"), "{said}");

    // Garbage: each entry named in a note; the good names stay.
    for name in [
        "not-a-pod",
        "shop_cart-9_not-a-uid",
        "shop_file-1_",
        "dangling.log",
    ] {
        assert!(
            said.lines()
                .any(|l| l.contains("note: ") && l.contains(name)),
            "no note names {name:?}:\n{said}"
        );
    }
    // The exec: said, and nothing read from the process once it is `sleep`.
    assert!(
        said.lines().any(|l| l.contains("note: ")
            && l.contains(&format!("process {ex_pid} "))
            && l.contains("no longer")),
        "{said}"
    );
    let ex_records = records(&ex_dir);
    let late: Vec<&Value> = ex_records
        .iter()
        .filter(|r| ok_heap(r) && t_ms(r) > exec_ms + 1000)
        .collect();
    assert!(late.is_empty(), "heap captures after the exec: {late:#?}");
    // The kernel reports the end of the thread that was the process's first, under its pid,
    // when another thread execs: not an end of the process, which lives on as `sleep`.
    let exits: Vec<&Value> = ex_records.iter().filter(|r| r["kind"] == "exit").collect();
    assert!(
        exits.is_empty(),
        "no exit recorded for an exec: {exits:#?}\n{said}"
    );
    // The process in its own namespace: recorded under its node pid, its heap read.
    let iso_heaps: Vec<Value> = records(&iso_dir).into_iter().filter(ok_heap).collect();
    assert!(!iso_heaps.is_empty());
    let iso_pid = iso_heaps[0]["pid"].as_u64().expect("a pid");
    assert_ne!(
        iso_pid, 1,
        "the node's pid, not the namespace's: {:#}",
        iso_heaps[0]
    );
    // The churned containers: any that was recorded ends with whole lines, its last record
    // saying how it ended; none brought watch down (it stopped cleanly above).
    for entry in fs::read_dir(out.join("targets")).unwrap() {
        let d = entry.unwrap().path();
        let text = fs::read_to_string(d.join("manifest.jsonl")).unwrap_or_default();
        for line in text.lines() {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("{}: a torn line {line:?}: {e}", d.display()));
        }
        let last: Option<Value> = text
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap());
        if let Some(last) = last {
            assert!(
                last["kind"] == "stop" || last["kind"] == "exit",
                "{}: {last}",
                d.display()
            );
        }
    }
    assert!(Path::new(&api_dir).is_dir());
}
