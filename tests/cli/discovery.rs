//! Node discovery across rescans, on a node laid out as a kubelet lays one out: a process that
//! execs into another program (Go into not Go, and back), a cgroup that vanishes between the
//! walk and the read, and `ps` run again and again while containers come and go. Each is
//! reported and none stops discovery.

use std::path::Path;
use std::time::{Duration, Instant};

use heapwatch::node::{Discovery, NodeError, NoteKind, Options};

use crate::kubenode::{KubeNode, Layout, Qos};
use crate::ps::{by_name, ps_json};
use crate::util::{self, signal};

const MIB: u64 = 1 << 20;
const STARTUP: Duration = Duration::from_secs(30);

fn discovery(node: &KubeNode) -> Discovery {
    Discovery::new(&Options {
        cgroup_root: Some(node.cgroup_root().to_path_buf()),
        pods_dir: Some(node.pods_dir().to_path_buf()),
    })
    .expect("the node's kubepods is a memory cgroup")
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn exe_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[test]
fn a_process_that_execs_into_another_program_is_seen_to_change() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let pod = node.pod("ops", "wrapper-1", Qos::Burstable, Some(128 * MIB));
    let go_first = node.container(&pod, "self-update", Some(64 * MIB));
    let pid = node.start(&go_first, &fixtures.join("execinto"), &["sleep", "600"]);
    node.wait_for_line(&go_first, "listening on ", STARTUP);
    let shell_first = node.container(&pod, "launcher", Some(64 * MIB));
    let gate = util::tempdir();
    let gate_file = gate.path().join("open");
    let script = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; exec {steady} -working-set 2MiB",
        gate = gate_file.display(),
        steady = fixtures.join("steady").display()
    );
    let shell_pid = node.start(&shell_first, Path::new("/bin/sh"), &["-c", &script]);
    // In its cgroup, and waiting at the gate, before the first rescan.
    wait_until("the shell joined its cgroup", STARTUP, || {
        shell_first.pids().contains(&shell_pid)
    });

    let mut d = discovery(&node);
    let scan = d.rescan();
    let pids: Vec<u32> = scan.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [pid], "only the Go program, not the shell: {scan:#?}");
    assert_eq!(
        scan.appeared.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [pid]
    );
    assert_eq!(scan.processes[0].name(), "ops/wrapper-1/self-update");

    // Go execs into sleep: same pid, same start time, no longer Go.
    signal(pid, "USR1");
    wait_until("execinto became sleep", Duration::from_secs(10), || {
        exe_of(pid).ends_with("/sleep")
    });
    // The shell execs into Go.
    std::fs::write(&gate_file, "").unwrap();
    node.wait_for_line(&shell_first, "listening on ", STARTUP);

    let scan = d.rescan();
    let pids: Vec<u32> = scan.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [shell_pid], "{scan:#?}");
    assert_eq!(scan.processes[0].name(), "ops/wrapper-1/launcher");
    assert_eq!(scan.ended.iter().map(|p| p.pid).collect::<Vec<_>>(), [pid]);
    assert_eq!(
        scan.appeared.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [shell_pid]
    );
    let execs: Vec<&str> = scan
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Exec)
        .map(|n| n.message.as_str())
        .collect();
    assert_eq!(execs.len(), 2, "{execs:#?}");
    assert!(
        execs
            .iter()
            .any(|n| n.contains(&format!("process {pid} ")) && n.contains("no longer")),
        "{execs:#?}"
    );
    assert!(
        execs
            .iter()
            .any(|n| n.contains(&format!("process {shell_pid} ")) && n.contains("now watched")),
        "{execs:#?}"
    );
    // A third rescan: nothing new, nothing said again.
    let scan = d.rescan();
    assert!(
        scan.appeared.is_empty() && scan.ended.is_empty(),
        "{scan:#?}"
    );
    assert!(
        scan.notes.iter().all(|n| n.kind != NoteKind::Exec),
        "{scan:#?}"
    );
}

#[test]
fn a_cgroup_that_vanishes_between_the_walk_and_the_read_is_reported() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let steady = fixtures.join("steady");
    let pod = node.pod("shop", "cart-2", Qos::Burstable, Some(256 * MIB));
    let stays = node.container(&pod, "api", Some(128 * MIB));
    node.start(&stays, &steady, &["-working-set", "2MiB"]);
    let goes = node.container(&pod, "batch", Some(128 * MIB));
    let gone_pid = node.start(&goes, &steady, &["-working-set", "2MiB"]);
    for c in [&stays, &goes] {
        node.wait_for_line(c, "listening on ", STARTUP);
    }
    let mut d = discovery(&node);
    let first = d.rescan();
    assert_eq!(first.processes.len(), 2, "{first:#?}");
    let old = first
        .processes
        .iter()
        .find(|p| p.pid == gone_pid)
        .expect("the doomed one")
        .container
        .clone();
    assert!(old.memory(d.hierarchy()).is_ok());

    let walk = d.walk();
    node.remove(&goes);
    let scan = d.settle(walk);
    assert_eq!(
        scan.processes.iter().map(|p| p.name()).collect::<Vec<_>>(),
        ["shop/cart-2/api"]
    );
    assert_eq!(
        scan.ended.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [gone_pid]
    );
    let vanished: Vec<&str> = scan
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Vanished)
        .map(|n| n.message.as_str())
        .collect();
    assert_eq!(vanished.len(), 1, "{scan:#?}");
    assert!(vanished[0].contains(&goes.id), "{vanished:?}");
    // A figure asked of it afterwards says it vanished, naming it.
    match old.memory(d.hierarchy()) {
        Err(e @ NodeError::Vanished { .. }) => assert!(e.to_string().contains(&goes.id)),
        other => panic!("expected Vanished, got {other:?}"),
    }
}

#[test]
fn ps_keeps_answering_while_containers_come_and_go() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let Some(node) = KubeNode::new(Layout::Cgroupfs) else {
        return;
    };
    let steady = fixtures.join("steady");
    let pod = node.pod("shop", "cart-3", Qos::Burstable, Some(512 * MIB));
    let stays = node.container(&pod, "api", Some(128 * MIB));
    node.start(&stays, &steady, &["-working-set", "2MiB"]);
    node.wait_for_line(&stays, "listening on ", STARTUP);
    let churn = node.pod("jobs", "cron-9", Qos::Burstable, Some(512 * MIB));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = std::sync::atomic::AtomicUsize::new(0);
    /// Stops the churn however the scope ends: a failed assertion must not leave the scope
    /// waiting for a thread that never stops.
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let c = node.container(&churn, "tick", Some(64 * MIB));
                node.start(&c, &steady, &["-working-set", "1MiB"]);
                std::thread::sleep(Duration::from_millis(30));
                node.remove(&c);
                rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        for _ in 0..15 {
            let json = ps_json(&node, &[]);
            let found = by_name(&json);
            assert!(found.contains_key("shop/cart-3/api"), "{json:#}");
            for name in found.keys() {
                assert!(
                    name == "shop/cart-3/api" || name == "jobs/cron-9/tick",
                    "{name} in {json:#}"
                );
            }
        }
    });
    assert!(
        rounds.into_inner() >= 3,
        "containers came and went meanwhile"
    );
}
