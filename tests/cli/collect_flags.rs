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
