//! The user's own code, as they name it (issue 33, item 6): a leak in a module of theirs that
//! lies in another organisation than the main module (testdata/go/ledger, `example.org`), on a
//! goroutine that module started, through a third-party library's decoder (`example.com/wal`).
//! Nothing in the binary says that module is the user's: heapwatch names the site by the
//! library's frame, until `--own example.org/` says it is theirs. Read twice with the same
//! flags, the same recording says the same, whichever was read first. Said at record time
//! (`run --own`), it is kept in run.json and every analysis names by it without being told.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::record::{self, Launch, run_to_end, run_to_end_with, shared};
use crate::util;

const LEAF: &str = "example.com/wal.(*Decoder).readRecord";
const REPLAY: &str = "example.org/ledger.(*Log).replay";

const LEDGER: Launch<'static> = Launch {
    name: "ledgergrow",
    program: "ledgergrow",
    args: &["-rate", "16MiB"],
    env: &[],
    limit: "96MiB",
    restarts: 0,
};

fn ledger() -> Option<PathBuf> {
    if !record::ready(true) {
        return None;
    }
    let runs = shared("ledger", |dir| vec![run_to_end(dir, &LEDGER)]);
    Some(runs[0].clone())
}

/// The ledger recorded by `heapwatch run --own example.org/`.
fn ledger_recorded_own() -> Option<PathBuf> {
    if !record::ready(true) {
        return None;
    }
    let runs = shared("ledger-own", |dir| {
        vec![run_to_end_with(dir, &LEDGER, &["--own", "example.org/"])]
    });
    Some(runs[0].clone())
}

/// `growth --json RUN` with `flags`, as printed.
fn growth(run: &Path, flags: &[&str]) -> String {
    let mut args = vec!["growth", run.to_str().unwrap(), "--json"];
    args.extend_from_slice(flags);
    let out = util::run(&args);
    assert!(
        out.status.success(),
        "growth {flags:?}: {}",
        util::stderr(&out)
    );
    util::stdout(&out)
}

/// The site the reading of the first life names first.
fn top_site(growth: &str) -> Value {
    let v: Value = serde_json::from_str(growth).unwrap();
    v["cycles"][0]["reading"]["sites"][0].clone()
}

#[test]
fn own_names_a_site_by_the_users_module_where_the_library_named_it() {
    let Some(run) = ledger() else {
        return;
    };
    let guessed = growth(&run, &[]);
    let top = top_site(&guessed);
    assert_eq!(top["site"], LEAF, "without --own, in {}", run.display());
    let named = growth(&run, &["--own", "example.org/"]);
    let top = top_site(&named);
    assert_eq!(
        top["site"],
        format!("{REPLAY} (leaf {LEAF})"),
        "with --own example.org/, in {}",
        run.display()
    );
    assert_eq!(top["own"], REPLAY);
    assert_eq!(top["name"], LEAF);
    // The same flags, the same words: a comma list, repeated, is the same prefix; and a read
    // without the flag after one with it is the first read again (the index kept the
    // recording's names).
    assert_eq!(
        growth(
            &run,
            &["--own", "example.org,example.org/", "--own", "example.org"]
        ),
        named
    );
    assert_eq!(growth(&run, &[]), guessed);
    // Every command that names the site names it so: check's line, and compare.
    let out = util::run(&[
        "check",
        run.to_str().unwrap(),
        "--fail-on",
        "growth>1MiB/s",
        "--own",
        "example.org/",
    ]);
    let said = util::stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(REPLAY),
        "check --own names the ledger: {said}"
    );
    let out = util::run(&["check", run.to_str().unwrap(), "--fail-on", "growth>1MiB/s"]);
    let said = util::stdout(&out);
    assert!(!said.contains(REPLAY), "check without --own: {said}");
}

#[test]
fn own_given_to_run_names_every_analysis_of_the_run_until_another_is_given() {
    let Some(run) = ledger_recorded_own() else {
        return;
    };
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["options"]["own"], json!(["example.org/"]), "run.json");
    // growth without --own reads as growth --own example.org/: the same site, the same
    // reading; only whence the prefixes came differs.
    let recorded: Value = serde_json::from_str(&growth(&run, &[])).unwrap();
    let given: Value = serde_json::from_str(&growth(&run, &["--own", "example.org/"])).unwrap();
    let top = &recorded["cycles"][0]["reading"]["sites"][0];
    assert_eq!(
        top["site"],
        format!("{REPLAY} (leaf {LEAF})"),
        "recorded with --own example.org/, in {}",
        run.display()
    );
    assert_eq!(
        recorded["own"],
        json!({"prefixes": ["example.org/"], "from": "recorded"})
    );
    assert_eq!(
        given["own"],
        json!({"prefixes": ["example.org/"], "from": "given"})
    );
    let without_whence = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("own");
        v
    };
    assert_eq!(without_whence(&recorded), without_whence(&given));
    // An --own given to the analysis replaces the recorded one: the codec's module named as
    // the user's own names the site by its leaf, the ledger no longer.
    let other = growth(&run, &["--own", "example.com/"]);
    let top = top_site(&other);
    assert_eq!(
        top["site"],
        LEAF,
        "with --own example.com/, in {}",
        run.display()
    );
    assert!(!other.contains(REPLAY), "{other}");
    // The words say which prefixes named the sites, and whence.
    let out = util::run(&["growth", run.to_str().unwrap()]);
    let said = util::stdout(&out);
    assert!(
        said.contains("own code: example.org/, the main module and package main (recorded with the run; --own replaces it)"),
        "{said}"
    );
    // check, without --own, names the ledger as growth does.
    let out = util::run(&["check", run.to_str().unwrap(), "--fail-on", "growth>1MiB/s"]);
    let said = util::stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(REPLAY), "check names the ledger: {said}");
    // A resumed recording may not name other prefixes: its captures so far are named by these.
    let program = util::go_fixture("ledgergrow").unwrap();
    let out = util::heapwatch()
        .args([
            "run",
            "-q",
            "--limit",
            "96MiB",
            "--own",
            "example.com/",
            "--out",
        ])
        .arg(&run)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let said = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("recorded with --own example.org/, not --own example.com/"),
        "{said}"
    );
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(again, info, "run.json unchanged by a refused start");
}
