//! `heapwatch diff BASE NEW`. `go tool pprof -diff_base=BASE NEW` is the oracle for the
//! per-function changes, and `go tool pprof` must read the `--proto` output as the same diff.
//! Random small profiles, built here, pin the invariants: a profile diffed with itself is
//! empty, swapping the sides negates every change, flat changes add up to the total change.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use proptest::prelude::*;
use prost::Message as _;

use heapwatch::decode::pb;

use crate::util;

/// name -> (flat, cum)
type Figures = BTreeMap<String, (i64, i64)>;

const HEAP_TYPES: [&str; 4] = [
    "alloc_objects",
    "alloc_space",
    "inuse_objects",
    "inuse_space",
];

/// Pairs of committed captures: one process early and late, two builds doing the same work,
/// and two unrelated programs.
const PAIRS: [(&str, &str); 3] = [
    ("hiddenleak-heap-early.pb.gz", "hiddenleak-heap-late.pb.gz"),
    ("controller-2.0.2-heap.pb.gz", "controller-2.1.0-heap.pb.gz"),
    ("steady-heap.pb.gz", "hiddenleak-heap-rate4k.pb.gz"),
];

fn nonzero(figures: Figures) -> Figures {
    figures
        .into_iter()
        .filter(|(_, (flat, cum))| *flat != 0 || *cum != 0)
        .collect()
}

/// `heapwatch diff --json` with every row, extra arguments appended.
fn heapwatch_diff(base: &Path, new: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "diff",
        "--json",
        "-n",
        "1000000",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = util::run(&args);
    assert!(
        out.status.success(),
        "heapwatch diff {args:?} failed: {}",
        util::stderr(&out)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("diff --json is JSON");
    assert_eq!(doc["schema"], 1);
    doc
}

/// name -> (flat change, cum change) of a `diff --json` document.
fn changes(doc: &serde_json::Value) -> Figures {
    rows(doc)
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
        .collect()
}

fn rows(doc: &serde_json::Value) -> &Vec<serde_json::Value> {
    doc["rows"].as_array().expect("rows")
}

fn int(doc: &serde_json::Value, field: &str) -> i64 {
    doc[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} in {doc}"))
}

fn assert_same_figures(ours: Figures, theirs: Figures, what: &str) -> usize {
    let (ours, theirs) = (nonzero(ours), nonzero(theirs));
    for (name, figures) in &theirs {
        assert_eq!(
            ours.get(name),
            Some(figures),
            "{name} in {what}: pprof says (flat, cum) change = {figures:?}"
        );
    }
    let extra: Vec<&String> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    assert!(
        extra.is_empty(),
        "sites pprof does not show in {what}: {extra:?}"
    );
    theirs.len() * 2
}

#[test]
fn function_changes_equal_pprof_diff_base() {
    let Some(go) = util::go() else { return };
    let mut compared = 0;
    for (base, new) in PAIRS {
        let (base, new) = (util::fixture(base), util::fixture(new));
        for sample in HEAP_TYPES {
            let what = format!("{sample} of {} -> {}", base.display(), new.display());
            let mut diff_base = OsString::from("-diff_base=");
            diff_base.push(&base);
            let pprof = util::pprof_top(&go, sample, &[diff_base, new.clone().into()]);
            let doc = heapwatch_diff(&base, &new, &["--sample", sample]);
            assert_eq!(doc["sample"], sample);
            // pprof's legend: the flat sum of every node shown is the net change, and the
            // total it divides by is the base's (the samples labelled pprof::base).
            assert_eq!(int(&doc, "total_delta"), pprof.accounted, "{what}");
            assert_eq!(int(&doc, "total_base"), pprof.total, "{what}");
            assert_eq!(
                int(&doc, "total_delta"),
                int(&doc, "total_new") - int(&doc, "total_base")
            );
            // Same ranking: size of the flat change, then name.
            let ours: Vec<&str> = rows(&doc)
                .iter()
                .map(|r| r["name"].as_str().unwrap())
                .collect();
            let theirs: Vec<&str> = pprof
                .order
                .iter()
                .map(String::as_str)
                .filter(|n| pprof.rows[*n] != (0, 0))
                .collect();
            assert_eq!(ours, theirs, "row order of {what}");
            compared += assert_same_figures(changes(&doc), pprof.rows, &what) + 2;
        }
    }
    eprintln!(
        "compared {compared} figures with pprof -diff_base over {} pairs",
        PAIRS.len()
    );
    assert!(compared > 100, "only {compared} figures compared");
}

#[test]
fn the_proto_output_is_the_same_diff_for_pprof() {
    let Some(go) = util::go() else { return };
    let dir = util::tempdir();
    let mut compared = 0;
    for (i, (base, new)) in PAIRS.iter().enumerate() {
        let (base, new) = (util::fixture(base), util::fixture(new));
        let out = dir.path().join(format!("diff-{i}.pb.gz"));
        let doc = heapwatch_diff(&base, &new, &["--proto", out.to_str().unwrap()]);
        assert!(out.is_file(), "--proto wrote nothing");
        for sample in HEAP_TYPES {
            let what = format!("{sample} of {}", out.display());
            let mut diff_base = OsString::from("-diff_base=");
            diff_base.push(&base);
            let oracle = util::pprof_top(&go, sample, &[diff_base, new.clone().into()]);
            let merged = util::pprof_top(&go, sample, &[out.clone().into()]);
            assert_eq!(merged.accounted, oracle.accounted, "{what}");
            assert_eq!(merged.total, oracle.total, "{what}");
            compared += assert_same_figures(merged.rows, oracle.rows, &what) + 2;

            // heapwatch reads it back: its top of the merged profile is the diff.
            let top = util::run(&[
                "top",
                "--json",
                "-n",
                "1000000",
                "--sample",
                sample,
                out.to_str().unwrap(),
            ]);
            assert!(
                top.status.success(),
                "top on {what}: {}",
                util::stderr(&top)
            );
            let top: serde_json::Value = serde_json::from_slice(&top.stdout).expect("JSON");
            let diff = heapwatch_diff(&base, &new, &["--sample", sample]);
            assert_eq!(int(&top, "total"), int(&diff, "total_delta"), "{what}");
            let top_rows: Figures = rows(&top)
                .iter()
                .map(|r| {
                    (
                        r["name"].as_str().unwrap().to_string(),
                        (int(r, "flat"), int(r, "cum")),
                    )
                })
                .collect();
            assert_same_figures(top_rows, changes(&diff), &what);
        }
        // The default sample type of NEW (inuse_space for a Go heap profile).
        assert_eq!(doc["sample"], "inuse_space");
    }
    eprintln!("compared {compared} figures of --proto output with pprof -diff_base");
}

#[test]
fn heapwatch_top_decodes_the_proto_output() {
    let dir = util::tempdir();
    let out = dir.path().join("diff.pb.gz");
    let (base, new) = (
        util::fixture("controller-2.0.2-heap.pb.gz"),
        util::fixture("controller-2.1.0-heap.pb.gz"),
    );
    let run = util::run(&[
        "diff",
        "--proto",
        out.to_str().unwrap(),
        base.to_str().unwrap(),
        new.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", util::stderr(&run));
    let top = util::run(&["top", out.to_str().unwrap()]);
    assert_eq!(top.status.code(), Some(0), "{}", util::stderr(&top));
    assert!(util::stdout(&top).contains("main.(*raftReadOnly).replayPeerLog"));
}

#[test]
fn the_table_names_what_grew() {
    let out = util::run(&[
        "diff",
        util::fixture("controller-2.0.2-heap.pb.gz")
            .to_str()
            .unwrap(),
        util::fixture("controller-2.1.0-heap.pb.gz")
            .to_str()
            .unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    let line = |site: &str| {
        text.lines()
            .find(|l| l.ends_with(site))
            .unwrap_or_else(|| panic!("no row for {site}:\n{text}"))
            .to_string()
    };
    let grown = line("main.(*routerDataModel).buildEventList");
    assert!(
        grown.contains("grown") && grown.trim_start().starts_with('+'),
        "{grown}"
    );
    let fresh = line("main.(*raftReadOnly).replayPeerLog");
    assert!(fresh.contains(" new "), "{fresh}");
    assert!(text.contains("inuse_space (bytes)"), "{text}");
}

#[test]
fn stack_level_rows_are_whole_stacks() {
    let doc = heapwatch_diff(
        &util::fixture("controller-2.0.2-heap.pb.gz"),
        &util::fixture("controller-2.1.0-heap.pb.gz"),
        &["--granularity", "stack"],
    );
    assert_eq!(doc["granularity"], "stack");
    let rows = rows(&doc);
    assert!(!rows.is_empty());
    let top = &rows[0];
    let name = top["name"].as_str().unwrap();
    assert!(name.starts_with("runtime.main;"), "{name}");
    assert!(
        name.ends_with(";main.(*routerDataModel).buildEventList"),
        "{name}"
    );
    for r in rows {
        assert_eq!(r["flat"], r["cum"], "{r}");
    }
    let sum: i64 = rows.iter().map(|r| int(r, "flat")).sum();
    assert_eq!(sum, int(&doc, "total_delta"));
}

// ---- errors: exit 2, one line naming the file and the problem ----

fn assert_fails_naming(args: &[&str], names: &[&str]) {
    let out = util::run(args);
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for name in names {
        assert!(err.contains(name), "{name:?} not named in {err:?}");
    }
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
}

#[test]
fn a_missing_file_is_named() {
    let dir = util::tempdir();
    let missing = dir.path().join("no-such.pb.gz");
    let heap = util::fixture("steady-heap.pb.gz");
    let (missing, heap) = (missing.to_str().unwrap(), heap.to_str().unwrap());
    assert_fails_naming(&["diff", missing, heap], &[missing]);
    assert_fails_naming(&["diff", heap, missing], &[missing]);
}

#[test]
fn a_file_that_is_no_profile_is_named() {
    let dir = util::tempdir();
    let text = util::write(dir.path(), "notes.txt", b"this is not a profile\n");
    let heap = util::fixture("steady-heap.pb.gz");
    let (text, heap) = (text.to_str().unwrap(), heap.to_str().unwrap());
    assert_fails_naming(&["diff", text, heap], &[text, "not a pprof profile"]);
    assert_fails_naming(&["diff", heap, text], &[text, "not a pprof profile"]);
}

#[test]
fn a_sample_type_missing_from_one_side_names_that_file() {
    let goroutine = util::fixture("steady-goroutine.pb.gz");
    let heap = util::fixture("steady-heap.pb.gz");
    let (goroutine, heap) = (goroutine.to_str().unwrap(), heap.to_str().unwrap());
    // Default: NEW's default (inuse_space), which the goroutine profile lacks.
    assert_fails_naming(&["diff", goroutine, heap], &[goroutine, "inuse_space"]);
    assert_fails_naming(
        &["diff", "--sample", "goroutine", goroutine, heap],
        &[heap, "\"goroutine\"", "inuse_space"],
    );
    assert_fails_naming(
        &["diff", "--sample", "no_such", heap, heap],
        &[heap, "no_such"],
    );
}

#[test]
fn an_unwritable_proto_path_is_named() {
    let dir = util::tempdir();
    let out = dir.path().join("no-such-dir/diff.pb.gz");
    let heap = util::fixture("steady-heap.pb.gz");
    let (out, heap) = (out.to_str().unwrap(), heap.to_str().unwrap());
    assert_fails_naming(&["diff", "--proto", out, heap, heap], &[out]);
}

#[test]
fn an_unknown_granularity_is_a_usage_error() {
    let heap = util::fixture("steady-heap.pb.gz");
    let heap = heap.to_str().unwrap();
    let out = util::run(&["diff", "--granularity", "address", heap, heap]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
}

// ---- invariants over random profiles ----

const NAMES: [&str; 5] = [
    "main.main",
    "main.load",
    "main.(*cache).put",
    "pkg.Encode",
    "runtime.mallocgc",
];

/// A small Go-like heap profile: `functions` are indices into NAMES, each location holds one
/// or two of them (inlining), each sample a stack of locations and two values. `build` spreads
/// ids and addresses, as two builds of one program would.
#[derive(Debug, Clone)]
struct Spec {
    build: u64,
    functions: Vec<usize>,
    locations: Vec<Vec<usize>>,
    samples: Vec<(Vec<usize>, [i64; 2])>,
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    (
        0u64..4,
        prop::collection::vec(0..NAMES.len(), 1..6),
        prop::collection::vec(prop::collection::vec(0usize..6, 1..3), 1..8),
        prop::collection::vec(
            (
                prop::collection::vec(0usize..8, 1..5),
                [0i64..10_000, 0i64..10_000],
            ),
            0..10,
        ),
    )
        .prop_map(|(build, functions, locations, samples)| Spec {
            build,
            functions,
            locations,
            samples,
        })
}

fn encode(spec: &Spec) -> Vec<u8> {
    let mut strings = vec![String::new()];
    let mut intern = |s: &str| {
        strings.push(s.to_string());
        strings.len() as i64 - 1
    };
    let ids = spec.build * 100 + 1;
    let bytes = intern("bytes");
    let sample_type = vec![
        pb::ValueType {
            r#type: intern("alloc_space"),
            unit: bytes,
        },
        pb::ValueType {
            r#type: intern("inuse_space"),
            unit: bytes,
        },
    ];
    let function = spec
        .functions
        .iter()
        .enumerate()
        .map(|(i, &n)| pb::Function {
            id: ids + i as u64,
            name: intern(NAMES[n]),
            filename: intern("main.go"),
            ..Default::default()
        })
        .collect();
    let location = spec
        .locations
        .iter()
        .enumerate()
        .map(|(i, lines)| pb::Location {
            id: ids + i as u64,
            address: 0x401000 * (spec.build + 1) + i as u64 * 16,
            line: lines
                .iter()
                .map(|&f| pb::Line {
                    function_id: ids + (f % spec.functions.len()) as u64,
                    line: 10 + f as i64,
                    column: 0,
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    let sample = spec
        .samples
        .iter()
        .map(|(stack, values)| pb::Sample {
            location_id: stack
                .iter()
                .map(|&l| ids + (l % spec.locations.len()) as u64)
                .collect(),
            value: values.to_vec(),
            label: vec![],
        })
        .collect();
    pb::Profile {
        sample_type,
        sample,
        location,
        function,
        string_table: strings,
        ..Default::default()
    }
    .encode_to_vec()
}

fn mirrored(status: &str) -> &str {
    match status {
        "grown" => "shrunk",
        "shrunk" => "grown",
        "new" => "gone",
        "gone" => "new",
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn a_profile_diffed_with_itself_shows_no_change(a in arb_spec()) {
        let dir = util::tempdir();
        let file = util::write(dir.path(), "a.pb", &encode(&a));
        for level in ["function", "line", "stack"] {
            let doc = heapwatch_diff(&file, &file, &["--granularity", level]);
            prop_assert_eq!(int(&doc, "total_delta"), 0);
            prop_assert_eq!(int(&doc, "sites"), 0);
            prop_assert!(rows(&doc).is_empty());
            let all = heapwatch_diff(&file, &file, &["--granularity", level, "--all"]);
            for r in rows(&all) {
                prop_assert_eq!(&r["status"], "same");
                prop_assert_eq!((int(r, "flat"), int(r, "cum")), (0, 0));
            }
        }
        let text = util::run(&["diff", file.to_str().unwrap(), file.to_str().unwrap()]);
        prop_assert!(util::stdout(&text).contains("no site changed"));
    }

    #[test]
    fn swapping_base_and_new_negates_every_change(a in arb_spec(), b in arb_spec()) {
        let dir = util::tempdir();
        let fa = util::write(dir.path(), "a.pb", &encode(&a));
        let fb = util::write(dir.path(), "b.pb", &encode(&b));
        let ab = heapwatch_diff(&fa, &fb, &["--sample", "alloc_space"]);
        let ba = heapwatch_diff(&fb, &fa, &["--sample", "alloc_space"]);
        prop_assert_eq!(int(&ab, "total_delta"), -int(&ba, "total_delta"));
        let flat_sum: i64 = rows(&ab).iter().map(|r| int(r, "flat")).sum();
        prop_assert_eq!(flat_sum, int(&ab, "total_new") - int(&ab, "total_base"));
        let back: BTreeMap<&str, &serde_json::Value> = rows(&ba)
            .iter()
            .map(|r| (r["name"].as_str().unwrap(), r))
            .collect();
        prop_assert_eq!(rows(&ab).len(), back.len());
        for r in rows(&ab) {
            let name = r["name"].as_str().unwrap();
            let s = back[name];
            prop_assert_eq!(int(r, "flat"), -int(s, "flat"), "{}", name);
            prop_assert_eq!(int(r, "cum"), -int(s, "cum"), "{}", name);
            prop_assert_eq!(int(r, "base_flat"), int(s, "new_flat"), "{}", name);
            prop_assert_eq!(
                mirrored(r["status"].as_str().unwrap()),
                s["status"].as_str().unwrap()
            );
        }
    }
}
