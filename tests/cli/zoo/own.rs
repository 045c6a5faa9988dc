//! The user's own code, as they name it (issue 33, item 6): a leak in a module of theirs that
//! lies in another organisation than the main module (testdata/go/ledger, `example.org`), on a
//! goroutine that module started, through a third-party library's decoder (`example.com/wal`).
//! Nothing in the binary says that module is the user's: heapwatch names the site by the
//! library's frame, until `--own example.org/` says it is theirs. Read twice with the same
//! flags, the same recording says the same, whichever was read first.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::record::{self, Launch, run_to_end, shared};
use crate::util;

const LEAF: &str = "example.com/wal.(*Decoder).readRecord";
const REPLAY: &str = "example.org/ledger.(*Log).replay";

fn ledger() -> Option<PathBuf> {
    if !record::ready(true) {
        return None;
    }
    let runs = shared("ledger", |dir| {
        let launch = Launch {
            name: "ledgergrow",
            program: "ledgergrow",
            args: &["-rate", "16MiB"],
            env: &[],
            limit: "96MiB",
            restarts: 0,
        };
        vec![run_to_end(dir, &launch)]
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
