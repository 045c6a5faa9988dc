//! `go tool pprof` is the oracle: for every committed capture and each of its sample types, the
//! flat and cum figure of every function printed by `heapwatch top --json` equals the one
//! `go tool pprof -top` prints for the same file, computed here at test time.

use std::collections::BTreeMap;
use std::path::Path;

use crate::util;

type Figures = BTreeMap<String, (i64, i64)>;

fn heapwatch_top(file: &Path, sample: &str) -> (i64, Figures) {
    let out = util::run(&[
        "top",
        "--json",
        "-n",
        "1000000",
        "--sample",
        sample,
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "heapwatch top failed: {}",
        util::stderr(&out)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("top --json is JSON");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["sample"], sample);
    let rows = doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().expect("name").to_string(),
                (
                    r["flat"].as_i64().expect("flat"),
                    r["cum"].as_i64().expect("cum"),
                ),
            )
        })
        .collect();
    (doc["total"].as_i64().expect("total"), rows)
}

fn sample_types(file: &Path) -> Vec<String> {
    // An unknown sample name makes heapwatch list the real ones.
    let out = util::run(&["top", "--sample", "no-such-sample", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = util::stderr(&out);
    let list = err
        .rsplit("this profile has ")
        .next()
        .expect("a list of sample types");
    list.trim().split(", ").map(str::to_string).collect()
}

fn nonzero(figures: Figures) -> Figures {
    figures
        .into_iter()
        .filter(|(_, (flat, cum))| *flat != 0 || *cum != 0)
        .collect()
}

fn assert_agree(go: &Path, file: &Path, sample: &str) -> usize {
    let top = util::pprof_top(go, sample, &[file.into()]);
    let (pprof_total, pprof_rows) = (top.total, top.rows);
    let (our_total, our_rows) = heapwatch_top(file, sample);
    assert_eq!(
        our_total,
        pprof_total,
        "total of {sample} in {}",
        file.display()
    );
    let (pprof_rows, our_rows) = (nonzero(pprof_rows), nonzero(our_rows));
    for (name, figures) in &pprof_rows {
        assert_eq!(
            our_rows.get(name),
            Some(figures),
            "{name} ({sample}) in {}: pprof says (flat, cum) = {figures:?}",
            file.display()
        );
    }
    let extra: Vec<&String> = our_rows
        .keys()
        .filter(|k| !pprof_rows.contains_key(*k))
        .collect();
    assert!(
        extra.is_empty(),
        "sites pprof does not show in {}: {extra:?}",
        file.display()
    );
    pprof_rows.len()
}

#[test]
fn heap_figures_equal_pprof_for_every_sample_type() {
    let Some(go) = util::go() else { return };
    let files = util::fixtures_matching("-heap");
    assert!(
        files.len() >= 5,
        "expected the committed heap captures, found {files:?}"
    );
    let mut compared = 0;
    for file in &files {
        let types = sample_types(file);
        assert_eq!(
            types,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ],
            "{} is a Go heap profile",
            file.display()
        );
        for sample in &types {
            compared += assert_agree(&go, file, sample);
        }
    }
    eprintln!(
        "compared {compared} (function, sample type) figures over {} files",
        files.len()
    );
}

#[test]
fn allocs_and_goroutine_figures_equal_pprof() {
    let Some(go) = util::go() else { return };
    let mut files = util::fixtures_matching("-goroutine");
    files.extend(util::fixtures_matching("-allocs"));
    assert!(
        files.len() >= 2,
        "expected goroutine and allocs captures, found {files:?}"
    );
    for file in &files {
        for sample in sample_types(file) {
            assert_agree(&go, file, &sample);
        }
    }
}
