//! The flags of `collect` and `run` refused before anything is recorded: each ends with exit
//! code 2 and a line that says what is wrong, and no run directory is left behind.

use crate::util::{run, stderr, tempdir};

fn refused(args: &[&str], expect: &[&str]) {
    let out = run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for e in expect {
        assert!(err.contains(e), "{args:?}: {e:?} not in {err}");
    }
}

#[test]
fn collect_flags_a_bare_number_for_a_duration_asks_for_a_unit() {
    let dir = tempdir();
    let out = dir.path().join("run");
    let out = out.to_str().unwrap();
    for flag in [
        "--interval",
        "--burst-interval",
        "--memory-interval",
        "--timeout",
        "--duration",
    ] {
        refused(
            &["collect", "http://127.0.0.1:9/", "--out", out, flag, "5"],
            &["\"5\" has no unit", "5s", "5ms"],
        );
    }
    refused(
        &["run", "--out", out, "--interval", "2", "--", "true"],
        &["\"2\" has no unit", "2s"],
    );
    assert!(!dir.path().join("run").exists());
}

#[test]
fn collect_flags_an_existing_run_of_another_target_is_refused_without_retarget() {
    let dir = tempdir();
    let out = dir.path().join("run");
    let out = out.to_str().unwrap();
    // Nothing listens on the discard port: each run is recorded, unreached (exit 3).
    let first = "http://127.0.0.1:9/debug/pprof/heap";
    let other = "http://127.0.0.1:7/debug/pprof/heap";
    let collect = |target: &str, extra: &[&str]| {
        let mut args = vec!["collect", target, "--out", out, "-q", "--duration", "300ms"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let info = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.path().join("run/run.json")).unwrap()).unwrap()
    };
    assert_eq!(collect(first, &[]).status.code(), Some(3));
    // The same target again resumes the run.
    assert_eq!(collect(first, &[]).status.code(), Some(3));
    let lines = || {
        std::fs::read_to_string(dir.path().join("run/manifest.jsonl"))
            .unwrap()
            .lines()
            .count()
    };
    let before = lines();
    refused(
        &["collect", other, "--out", out, "-q", "--duration", "300ms"],
        &[
            "this run recorded http://127.0.0.1:9/debug/pprof/heap",
            "not http://127.0.0.1:7/debug/pprof/heap",
            "--retarget",
        ],
    );
    assert_eq!(lines(), before, "nothing recorded into it");
    assert_eq!(info()["target"], first);
    assert_eq!(collect(other, &["--retarget"]).status.code(), Some(3));
    assert!(lines() > before);
    assert_eq!(
        info()["target"],
        other,
        "run.json names the target now recorded"
    );
}

#[test]
fn collect_flags_a_pid_of_no_process_is_refused() {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let pid = gone.id().to_string();
    let dir = tempdir();
    let out = dir.path().join("run");
    refused(
        &[
            "collect",
            "http://127.0.0.1:9/",
            "--out",
            out.to_str().unwrap(),
            "--pid",
            &pid,
        ],
        &[&format!("--pid {pid}: there is no process {pid}")],
    );
    assert!(!out.exists());
}

/// A copy of the `steady` fixture under a name only this test uses, two processes of it.
fn two_of(dir: &std::path::Path, tag: &str) -> Option<(String, Vec<crate::util::Reaped>)> {
    let built = crate::util::go_fixture("steady")?;
    let name = format!("steady-{tag}-{}", std::process::id());
    let path = dir.join(&name);
    std::fs::copy(&built, &path).unwrap();
    let mut perms = std::fs::metadata(dir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir, perms).unwrap();
    let started = (0..2)
        .map(|_| crate::util::start_listening(&path, &["-rate", "256KiB"]).0)
        .collect();
    Some((name, started))
}

#[test]
fn collect_flags_two_processes_of_one_name_are_refused_naming_both() {
    let dir = tempdir();
    let Some((name, started)) = two_of(dir.path(), "two") else {
        return;
    };
    let out = dir.path().join("run");
    let target = format!("proc:exe:{name}");
    let pids: Vec<String> = started.iter().map(|p| p.0.id().to_string()).collect();
    refused(
        &["collect", &target, "--out", out.to_str().unwrap()],
        &[
            &format!("2 processes run an executable named {name:?}"),
            &format!("pids {}, {}", pids[0], pids[1]),
            "proc:PID",
        ],
    );
    assert!(!out.exists());
}

#[test]
fn collect_flags_proc_exe_as_a_user_without_rights_says_rights_are_missing() {
    if !nix_is_root() {
        crate::prerequisite::skip(
            crate::prerequisite::Need::Root,
            "the target runs as root and heapwatch as nobody",
        );
        return;
    }
    let dir = tempdir();
    let Some((name, mut started)) = two_of(dir.path(), "rights") else {
        return;
    };
    // One process of the name, root's; heapwatch as nobody cannot read its executable.
    drop(started.pop());
    let pid = started[0].0.id();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_heapwatch"))
        .args([
            "collect",
            &format!("proc:exe:{name}"),
            "--out",
            "/tmp/never",
        ])
        .output()
        .expect("setpriv runs");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("process {pid} is named")) && err.contains("may not read"),
        "{err}"
    );
    assert!(err.contains("run heapwatch as root"), "{err}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn collect_flags_a_proc_pid_alone_in_its_cgroup_is_measured_by_the_cgroups_charge() {
    let Some(fixture) = crate::util::go_fixture("steady") else {
        return;
    };
    let Some(cgroup) = crate::util::memory_cgroup_or_skip("ownpid", 512 << 20) else {
        return;
    };
    let mut child = cgroup
        .command(&fixture, &["-working-set", "16MiB", "-rate", "256KiB"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid = child.id();
    let _reaped = crate::util::Reaped(child);
    let dir = tempdir();
    let out = dir.path().join("run");
    let ran = run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "--duration",
        "2s",
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let samples: Vec<serde_json::Value> = std::fs::read_to_string(out.join("memory.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(samples.len() >= 10);
    for s in &samples {
        // The cgroup's charge and limit beside the process's RSS.
        assert_eq!(s["limit"], 512u64 << 20, "{s}");
        let usage = s["usage"].as_u64().unwrap_or_else(|| panic!("{s}"));
        // The 16 MiB working set, less what reclaim took back at that moment (seen once at
        // 15.7 MiB on a loaded machine).
        assert!((12 << 20..512 << 20).contains(&usage), "{s}");
        assert!(s["rss"].as_u64().is_some(), "{s}");
    }
}
