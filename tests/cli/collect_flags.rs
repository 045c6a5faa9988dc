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
