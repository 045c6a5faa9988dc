//! The site index keeps up with the collector: a `proc:` collect at 1 ms of a Go target whose
//! profile changes at every capture (testdata/go/cmd/bigprofile, churning) leaves an entry for
//! every stored capture, so the first analysis after it decodes no profile, and what it reads
//! from those entries is what decoding every profile gives.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::util;

fn run_json(args: &[&str]) -> Value {
    let out = util::run(args);
    assert!(out.status.success(), "{args:?}: {}", util::stderr(&out));
    serde_json::from_str(&util::stdout(&out)).unwrap()
}

fn stored_captures(run: &Path) -> usize {
    fs::read_to_string(run.join("manifest.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "heap" && r["error"].is_null() && r["dup_of"].is_null())
        .count()
}

#[test]
fn a_proc_collect_at_1ms_leaves_every_stored_capture_in_the_site_index() {
    let Some(program) = util::go_fixture("bigprofile") else {
        return;
    };
    let (target, _addr) = util::start_listening(
        &program,
        &[
            "-listen",
            "127.0.0.1:0",
            "-stacks",
            "3000",
            "-churn",
            "8MiB",
        ],
    );
    let pid = target.0.id();
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "1ms",
        "--duration",
        "10s",
        "--memstats-interval",
        "0",
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let said = util::stderr(&out);
    assert!(!said.contains("not in the site index"), "{said}");
    // A few hundred on a quiet machine (260 in 8 s at a load of 6, this debug build); the
    // floor leaves room for a machine busy with other builds, the index must cover them all.
    let stored = stored_captures(&run);
    assert!(stored >= 100, "{stored} captures stored in 10 s at 1 ms");

    // Every stored capture has a fresh entry: `index` builds nothing, so neither would the
    // first analysis (it decodes exactly the captures without one).
    let target = run.to_str().unwrap();
    let index = run_json(&["index", target, "--json"]);
    assert_eq!(index["captures"], stored, "{index}");
    assert_eq!(index["fresh"], stored, "{index}");
    assert_eq!(index["rebuilt"], 0, "{index}");
    assert_eq!(index["repaired_bytes"], 0, "{index}");
    let size = fs::metadata(run.join("sites.idx")).unwrap().len();
    let from_index = run_json(&["growth", target, "--json"]);
    assert_eq!(
        fs::metadata(run.join("sites.idx")).unwrap().len(),
        size,
        "growth appended entries: it decoded profiles"
    );

    // The collector's entries (made by the encoder, no profile decoded) are what decoding
    // every profile gives: the index rebuilt from the profiles is the same file, byte for
    // byte, and so is what growth reads from it.
    let collected = fs::read(run.join("sites.idx")).unwrap();
    fs::remove_file(run.join("sites.idx")).unwrap();
    let rebuilt = run_json(&["index", target, "--json"]);
    assert_eq!(rebuilt["rebuilt"], stored, "{rebuilt}");
    assert!(
        fs::read(run.join("sites.idx")).unwrap() == collected,
        "the collector's index differs from the one decoding builds"
    );
    fs::remove_file(run.join("sites.idx")).unwrap();
    assert_eq!(run_json(&["growth", target, "--json"]), from_index);
}
