//! The OOM hold on cgroup v2, against a real v2 memory controller: this machine's memory
//! controller is bound to v1, so the test boots a VM (testdata/vm/run-in-vm.sh: Debian's
//! kernel in qemu, cgroup2 the only hierarchy) and runs testdata/vm/v2-hold.sh in it, which
//! leaves a `heapwatch run` and the traces of a `collect --oom-hold` killed while it held.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::prerequisite::{self, Need};
use crate::util;

fn records(run: &Path) -> Vec<Value> {
    fs::read_to_string(run.join("manifest.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn int(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Under `run --oom-hold` on v2 the process is slowed at `memory.high`, a 16th of the limit
/// below `memory.max`, until a capture is in; then the kernel kills it at `memory.max`: the
/// exit is its OOM kill, and the last capture's in-use heap with what was allocated since
/// accounts for at least 80 % of the anonymous memory at the kill. Killed while it holds a
/// cgroup it did not make, heapwatch's guardian puts `memory.high` back and the kernel kills
/// the grower at its limit as it would have: never left held.
#[test]
fn on_cgroup_v2_the_process_is_slowed_below_its_limit_for_a_capture_and_never_left_held() {
    let Some(replay) = util::go_fixture("replay") else {
        return;
    };
    // SAFETY: geteuid reads the calling process's credentials; it cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        prerequisite::skip(Need::Vm, "the VM's set-up installs packages as root");
        return;
    }
    let dir = util::tempdir();
    // Copies with their own names: run-in-vm.sh puts each file at its own path in the VM.
    let hw = dir.path().join("heapwatch");
    let grower = dir.path().join("replay");
    fs::copy(env!("CARGO_BIN_EXE_heapwatch"), &hw).unwrap();
    fs::copy(&replay, &grower).unwrap();
    let script = util::repo().join("testdata/vm/v2-hold.sh");
    let out = dir.path().join("out");
    let vm = Command::new("bash")
        .arg(util::repo().join("testdata/vm/run-in-vm.sh"))
        .arg("--out")
        .arg(&out)
        .args(["--timeout", "600"])
        .args(["--file".as_ref(), hw.as_os_str()])
        .args(["--file".as_ref(), grower.as_os_str()])
        .args(["--file".as_ref(), script.as_os_str()])
        .args(["--".as_ref(), "/bin/sh".as_ref(), script.as_os_str()])
        .arg(&hw)
        .arg(&grower)
        .output()
        .expect("run-in-vm.sh runs");
    let said = format!("{}\n{}", util::stdout(&vm), util::stderr(&vm));
    if matches!(vm.status.code(), Some(124 | 125)) && !out.join("exit_code").exists() {
        prerequisite::skip(Need::Vm, &format!("the VM did not run: {said}"));
        return;
    }
    assert!(vm.status.success(), "{said}");

    let run = out.join("run");
    let info: Value =
        serde_json::from_str(&fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["options"]["confinement"], "cgroup-v2", "{info}");
    let hold = info["options"]["oom_hold"].as_str().unwrap();
    assert!(
        hold.starts_with("slowed at memory.high 6.00 MiB below memory.max"),
        "{hold}"
    );

    let records = records(&run);
    let memory: Vec<Value> = fs::read_to_string(run.join("memory.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let exits: Vec<&Value> = records.iter().filter(|r| r["kind"] == "exit").collect();
    assert_eq!(exits.len(), 2, "{said}");
    let mut held = 0;
    for exit in &exits {
        let totals = &exit["totals"];
        assert_eq!(totals["oom_kill"], 1, "the kernel's kill: {exit}");
        assert_eq!(exit["signal"], 9, "{exit}");
        if let Some(ms) = totals["oom_held_ms"].as_i64() {
            held += 1;
            assert!((0..=2_100).contains(&ms), "{exit}");
            assert_eq!(totals["oom_held_below_bytes"], 6 << 20, "{exit}");
        }
        let cycle = int(exit, "incarnation");
        let kill = int(exit, "t_ms");
        let heaps: Vec<&Value> = records
            .iter()
            .filter(|r| r["kind"] == "heap" && r["error"].is_null())
            .filter(|r| int(r, "incarnation") == cycle)
            .collect();
        let last = heaps.iter().max_by_key(|r| int(r, "t_ms")).unwrap();
        let from = heaps.iter().map(|r| int(r, "t_ms")).min().unwrap();
        let anon = memory
            .iter()
            .filter(|m| (from..=kill).contains(&m["t_ms"].as_i64().unwrap_or(0)))
            .filter_map(|m| m["cgroup"]["anon"].as_i64())
            .max()
            .expect("cgroup samples in the cycle");
        let seen = int(&last["totals"], "inuse_space") + int(&last["totals"], "recent_space");
        assert!(
            seen * 100 >= anon * 80,
            "cycle {cycle}: the last capture saw {seen} B of {anon} B anonymous at the kill"
        );
    }
    // Throttled over memory.high, the grower takes seconds to reach memory.max: each life is
    // held (a kill whose freed memory was taken for a process that backed off lost its hold).
    assert_eq!(held, 2, "lives held: {exits:?}");
    let growth = util::run(&["growth", run.to_str().unwrap()]);
    assert!(
        util::stdout(&growth).contains("below its limit for a last capture (cgroup v2"),
        "{}",
        util::stdout(&growth)
    );

    let guard = out.join("guard");
    let read = |name: &str| fs::read_to_string(guard.join(name)).unwrap_or_default();
    assert!(!guard.join("failed").exists(), "{}", read("failed"));
    assert_eq!(read("high_while_held").trim(), (60u64 << 20).to_string());
    assert_eq!(
        read("high_after_kill").trim(),
        "max",
        "the guardian put it back"
    );
    assert_eq!(read("grower_exit").trim(), "137");
    assert!(
        read("events_after").lines().any(|l| l == "oom_kill 1"),
        "{}",
        read("events_after")
    );
}
