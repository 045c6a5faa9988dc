//! `heapwatch flame`: golden SVGs of committed fixtures (re-bless with HEAPWATCH_BLESS=1),
//! markup in function names escaped, shrunk sites kept in a diff, one-line errors.

use std::path::{Path, PathBuf};

use prost::Message as _;

use heapwatch::decode::pb;

use crate::util;

fn run_dir(name: &str) -> PathBuf {
    util::repo().join("testdata/runs").join(name)
}

fn golden_path(name: &str) -> PathBuf {
    util::repo()
        .join("tests/golden/flame")
        .join(format!("{name}.svg"))
}

/// Runs `heapwatch flame ARGS -o OUT` in a temp dir and returns the SVG.
fn flame(args: &[&str]) -> String {
    let dir = util::tempdir();
    let out = dir.path().join("out.svg");
    let mut all: Vec<&str> = vec!["flame"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let run = util::run(&all);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{all:?}: {}",
        util::stderr(&run)
    );
    std::fs::read_to_string(&out).expect("the SVG was written")
}

/// Compares an SVG with its committed golden file, byte for byte; HEAPWATCH_BLESS=1 rewrites
/// the golden file instead.
fn assert_golden(name: &str, svg: &str) {
    util::golden(&golden_path(name), svg);
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Every frame's tooltip, in order.
fn titles(svg: &str) -> Vec<String> {
    svg.split("<title>")
        .skip(1)
        .map(|t| t[..t.find("</title>").expect("closed title")].to_string())
        .collect()
}

fn subtitle(svg: &str) -> String {
    let at = svg.find("id=\"subtitle\"").expect("a subtitle");
    let text = &svg[at..];
    let start = text.find('>').unwrap() + 1;
    text[start..start + text[start..].find('<').unwrap()].to_string()
}

// ---- golden files ----

#[test]
fn golden_heap_profile() {
    let svg = flame(&[p(&util::fixture("steady-heap.pb.gz"))]);
    assert!(svg.contains("Heap in use — steady-heap.pb.gz"));
    assert!(svg.contains("main.loadConfigIndex ("));
    assert_golden("steady-heap", &svg);
}

#[test]
fn golden_goroutine_profile_counts_goroutines() {
    let svg = flame(&[p(&util::fixture("goroutineleak-goroutine.pb.gz"))]);
    assert!(svg.contains("Goroutines — goroutineleak-goroutine.pb.gz"));
    assert!(
        titles(&svg)
            .iter()
            .any(|t| t.starts_with("main.watchSubscription (") && t.contains(" goroutines, ")),
        "{:?}",
        titles(&svg)
    );
    assert_golden("goroutineleak-goroutine", &svg);
}

#[test]
fn golden_alloc_space_of_a_storm() {
    let svg = flame(&[
        p(&util::fixture("storm-heap.pb.gz")),
        "--sample",
        "alloc_space",
    ]);
    assert!(svg.contains("Bytes allocated since start — storm-heap.pb.gz"));
    assert!(svg.contains("main.encodeSnapshot ("));
    assert_golden("storm-alloc-space", &svg);
}

#[test]
fn golden_diff_of_two_controller_builds() {
    let svg = flame(&[
        p(&util::fixture("controller-2.1.0-heap.pb.gz")),
        "--diff",
        p(&util::fixture("controller-2.0.2-heap.pb.gz")),
    ]);
    assert!(svg.contains("controller-2.1.0-heap.pb.gz against controller-2.0.2-heap.pb.gz"));
    let t = titles(&svg);
    assert!(
        t.iter()
            .any(|t| t.starts_with("main.(*raftReadOnly).replayPeerLog (base 0 B, new ")),
        "{t:?}"
    );
    assert!(
        t.iter().any(
            |t| t.starts_with("main.(*routerDataModel).buildEventList (base ") && t.contains(", +")
        ),
        "{t:?}"
    );
    assert_golden("controller-diff", &svg);
}

#[test]
fn golden_growth_of_a_leaking_run() {
    let svg = flame(&[p(&run_dir("hiddenleak")), "--growth"]);
    assert!(svg.contains("Growth of heap in use, boot cycle 1 of hiddenleak"));
    // Default: the first and the last stored heap capture of the cycle.
    assert!(subtitle(&svg).starts_with("added from capture #1 (0.0 s) to #96 ("));
    assert!(svg.contains("main.(*sessionTable).remember ("));
    assert_golden("hiddenleak-growth", &svg);
}

#[test]
fn golden_diff_of_two_runs_names_both_builds() {
    let svg = flame(&[
        p(&run_dir("controller-2.1.0")),
        "--diff",
        p(&run_dir("controller-2.0.2")),
    ]);
    assert!(svg.contains("Heap in use: build 2.1.0 against build 2.0.2"));
    let sub = subtitle(&svg);
    assert!(
        sub.starts_with("base #") && sub.contains("(cycle 1, "),
        "{sub}"
    );
    assert_golden("controller-runs-diff", &svg);
}

#[test]
fn the_same_input_draws_the_same_bytes() {
    let heap = util::fixture("hiddenleak-heap-late.pb.gz");
    assert_eq!(flame(&[p(&heap)]), flame(&[p(&heap)]));
    let run = run_dir("oomgrow");
    assert_eq!(flame(&[p(&run), "--growth"]), flame(&[p(&run), "--growth"]));
}

// ---- what the graphs show ----

#[test]
fn a_site_only_in_base_stays_in_the_diff() {
    // replayPeerLog exists only in 2.1.0: with 2.1.0 as the base it is what shrank to nothing.
    let svg = flame(&[
        p(&util::fixture("controller-2.0.2-heap.pb.gz")),
        "--diff",
        p(&util::fixture("controller-2.1.0-heap.pb.gz")),
    ]);
    let t = titles(&svg);
    let gone = t
        .iter()
        .find(|t| t.starts_with("main.(*raftReadOnly).replayPeerLog ("))
        .unwrap_or_else(|| panic!("replayPeerLog missing from {t:?}"));
    assert!(gone.contains(", new 0 B, -"), "{gone}");
    // Drawn, with a width, in a shrinking (blue) colour.
    let at = svg.find(&format!("<title>{gone}</title>")).unwrap();
    let rect = &svg[at..at + svg[at..].find("/>").unwrap()];
    assert!(!rect.contains("fg:w=\"0\""), "{rect}");
    let fill = &rect[rect.find("fill=\"rgb(").unwrap() + 10..];
    let rgb: Vec<u32> = fill[..fill.find(')').unwrap()]
        .split(',')
        .map(|c| c.parse().unwrap())
        .collect();
    assert!(rgb[2] == 255 && rgb[0] < 255, "blue for shrunk: {rect}");
}

#[test]
fn growth_between_chosen_captures_of_a_chosen_cycle() {
    let run = run_dir("oomgrow");
    let svg = flame(&[p(&run), "--growth", "--cycle", "2"]);
    assert!(svg.contains("Growth of heap in use, boot cycle 2 of oomgrow<"));
    assert!(
        subtitle(&svg).starts_with("added from capture #79 "),
        "{}",
        subtitle(&svg)
    );
    assert!(svg.contains("main.(*routerDataModel).buildEventList ("));

    let svg = flame(&[p(&run), "--growth", "--from", "79", "--to", "143"]);
    let sub = subtitle(&svg);
    assert!(
        sub.contains("capture #79 (") && sub.contains("to #143 ("),
        "{sub}"
    );
    // One end given: the other is the cycle's first or last.
    let svg = flame(&[p(&run), "--growth", "--to", "143"]);
    assert!(subtitle(&svg).starts_with("added from capture #79 "));
}

#[test]
fn a_run_draws_one_capture_by_default() {
    let svg = flame(&[p(&run_dir("oomgrow"))]);
    assert!(svg.contains("Heap in use — run oomgrow, capture #231 (cycle 3, "));
    let svg = flame(&[p(&run_dir("oomgrow")), "--to", "2"]);
    assert!(
        svg.contains("Goroutines — run oomgrow, capture #2 (cycle 1, "),
        "{svg}"
    );
}

/// A small heap profile whose function names are markup.
fn hostile_profile(names: &[&str]) -> Vec<u8> {
    let mut strings = vec![String::new()];
    let mut intern = |s: &str| {
        strings.push(s.to_string());
        strings.len() as i64 - 1
    };
    let bytes = intern("bytes");
    let sample_type = vec![pb::ValueType {
        r#type: intern("inuse_space"),
        unit: bytes,
    }];
    let function: Vec<pb::Function> = names
        .iter()
        .enumerate()
        .map(|(i, n)| pb::Function {
            id: i as u64 + 1,
            name: intern(n),
            filename: intern("main.go"),
            ..Default::default()
        })
        .collect();
    let location: Vec<pb::Location> = (0..names.len())
        .map(|i| pb::Location {
            id: i as u64 + 1,
            address: 0x401000 + i as u64 * 16,
            line: vec![pb::Line {
                function_id: i as u64 + 1,
                line: 10,
                column: 0,
            }],
            ..Default::default()
        })
        .collect();
    // One stack through every function, leaf first, and one with the first alone.
    let all: Vec<u64> = (1..=names.len() as u64).rev().collect();
    let sample = vec![
        pb::Sample {
            location_id: all,
            value: vec![4096],
            label: vec![],
        },
        pb::Sample {
            location_id: vec![1],
            value: vec![1024],
            label: vec![],
        },
    ];
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

#[test]
fn markup_in_function_names_is_escaped() {
    let dir = util::tempdir();
    let evil = "<script>alert(1)</script>";
    let names = [
        "main.main",
        evil,
        "main.\"quoted\" & <b>bold</b>",
        "main.cdata]]><script>alert(2)</script>",
    ];
    let profile = util::write(dir.path(), "evil.pb", &hostile_profile(&names));
    let other = util::write(dir.path(), "other.pb", &hostile_profile(&names[..2]));
    for svg in [
        flame(&[p(&profile)]),
        flame(&[p(&profile), "--diff", p(&other)]),
        flame(&[p(&other), "--diff", p(&profile)]),
    ] {
        assert!(!svg.contains("<script>alert"), "raw markup in the SVG");
        assert!(!svg.contains("<b>bold"), "raw markup in the SVG");
        assert_eq!(
            svg.matches("<script").count(),
            1,
            "only inferno's own script"
        );
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(svg.contains("&lt;b&gt;bold&lt;/b&gt;"));
    }
}

// ---- errors: exit 2, one line ----

fn assert_fails(args: &[&str], names: &[&str]) {
    let dir = util::tempdir();
    let out_path = dir.path().join("out.svg");
    let mut all: Vec<&str> = vec!["flame"];
    all.extend_from_slice(args);
    if !args.contains(&"-o") {
        all.extend_from_slice(&["-o", p(&out_path)]);
    }
    let out = util::run(&all);
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{all:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for name in names {
        assert!(err.contains(name), "{name:?} not named in {err:?}");
    }
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    assert!(!out_path.exists(), "no SVG written when failing");
}

#[test]
fn a_missing_file_is_named() {
    let dir = util::tempdir();
    let missing = dir.path().join("no-such.pb.gz");
    let heap = util::fixture("steady-heap.pb.gz");
    assert_fails(&[p(&missing)], &[p(&missing)]);
    assert_fails(&[p(&heap), "--diff", p(&missing)], &[p(&missing)]);
}

#[test]
fn a_run_without_stored_captures_is_refused() {
    // Every attempt failed.
    let dir = util::tempdir();
    let record = r#"{"seq":1,"kind":"heap","file":null,"incarnation":1,"t_ms":1000,"latency_ms":1.0,"bytes":0,"dup_of":null,"error":"connection refused"}"#;
    util::write(
        dir.path(),
        "manifest.jsonl",
        format!("{record}\n").as_bytes(),
    );
    let run = dir.path();
    assert_fails(&[p(run), "--growth"], &[p(run), "no stored heap captures"]);
    assert_fails(&[p(run)], &[p(run), "no stored heap captures"]);

    // The manifest names profiles that are not on disk.
    let copy = util::tempdir();
    std::fs::copy(
        run_dir("hiddenleak").join("manifest.jsonl"),
        copy.path().join("manifest.jsonl"),
    )
    .unwrap();
    assert_fails(&[p(copy.path()), "--growth"], &["no stored heap captures"]);
}

#[test]
fn a_folder_that_is_no_run_is_refused() {
    let dir = util::tempdir();
    assert_fails(&[p(dir.path())], &[p(dir.path()), "not a heapwatch run"]);
}

#[test]
fn flags_that_do_not_fit_the_input_are_refused() {
    let heap = util::fixture("steady-heap.pb.gz");
    let oom = run_dir("oomgrow");
    assert_fails(&[p(&heap), "--growth"], &[p(&heap), "--growth"]);
    assert_fails(&[p(&heap), "--cycle", "1"], &[p(&heap), "--cycle"]);
    assert_fails(&[p(&oom), "--diff", p(&heap)], &[p(&heap), "run"]);
    assert_fails(&[p(&heap), "--diff", p(&oom)], &[p(&oom), "run"]);
    assert_fails(&[p(&heap), "--sample", "no_such"], &["no_such"]);
    // Growth is measured within one boot cycle, forwards.
    assert_fails(
        &[p(&oom), "--growth", "--from", "1", "--to", "231"],
        &["#1", "#231", "boot cycle"],
    );
    assert_fails(
        &[p(&oom), "--growth", "--from", "143", "--to", "79"],
        &["#143", "#79"],
    );
    assert_fails(&[p(&oom), "--growth", "--cycle", "9"], &["boot cycle 9"]);
    assert_fails(&[p(&oom), "--to", "99999"], &["#99999", "no such capture"]);
}

#[test]
fn an_unwritable_output_is_named() {
    let dir = util::tempdir();
    let out = dir.path().join("no-such-dir/out.svg");
    let heap = util::fixture("steady-heap.pb.gz");
    assert_fails(&[p(&heap), "-o", p(&out)], &[p(&out)]);
}

#[test]
fn the_profile_writer_is_left_out_of_growth_flamegraphs_unless_kept() {
    // What the storm run allocated includes the profile writer answering the collector.
    let run = run_dir("storm");
    let writer = |svg: &str| {
        titles(svg)
            .iter()
            .filter(|t| t.starts_with("runtime/pprof.") || t.starts_with("compress/flate."))
            .count()
    };
    let default = flame(&[p(&run), "--growth", "--sample", "alloc_space"]);
    assert_eq!(writer(&default), 0, "{:?}", titles(&default));
    assert!(
        subtitle(&default).contains("the profile writer&apos;s")
            && subtitle(&default).contains("left out"),
        "{}",
        subtitle(&default)
    );
    assert!(
        titles(&default)
            .iter()
            .any(|t| t.starts_with("main.encodeSnapshot ("))
    );
    let kept = flame(&[
        p(&run),
        "--growth",
        "--sample",
        "alloc_space",
        "--keep-profiler",
    ]);
    assert!(
        writer(&kept) > 0,
        "--keep-profiler keeps the writer's stacks"
    );
}

/// A heap profile with the four heap sample types and no sample: what a life's first capture
/// holds before its runtime has published anything.
fn empty_heap_profile() -> Vec<u8> {
    let mut strings = vec![String::new()];
    let mut intern = |s: &str| {
        strings.push(s.to_string());
        strings.len() as i64 - 1
    };
    let (count, bytes) = (intern("count"), intern("bytes"));
    let sample_type = [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| pb::ValueType {
        r#type: intern(t),
        unit: if i % 2 == 0 { count } else { bytes },
    })
    .collect();
    let period_type = Some(pb::ValueType {
        r#type: intern("space"),
        unit: bytes,
    });
    pb::Profile {
        sample_type,
        period_type,
        period: 512 * 1024,
        string_table: strings,
        ..Default::default()
    }
    .encode_to_vec()
}

/// Issue 35, item 7b: the growth flamegraph of a life whose first capture held nothing yet
/// draws everything the life kept; its title, and the report's caption, say it starts from the
/// life's start rather than "from capture #157".
#[test]
fn a_growth_from_a_first_capture_that_held_nothing_says_it_is_since_the_cycle_began() {
    let (_dir, run) = crate::push::copy_run("oomgrow");
    // Cycle 3's first stored heap capture (the cycle `--growth` draws: the last that died).
    std::fs::write(run.join("profiles/000157-heap.pb.gz"), empty_heap_profile()).unwrap();
    let svg = flame(&[p(&run), "--growth"]);
    let sub = subtitle(&svg);
    assert!(
        sub.starts_with(
            "added since the cycle began (its capture #157 at 0.0 s held nothing yet) to #"
        ),
        "{sub}"
    );
    let report = run.with_file_name("report");
    let out = util::run(&["report", p(&run), "-o", p(&report)]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(
        html.contains(
            "What boot cycle 3 added to the in-use heap since it began (capture #157 at 0.0 s \
             held nothing yet) to capture #"
        ),
        "the caption"
    );
    // The other lives start from what their first capture held, as before.
    assert!(
        html.contains("What boot cycle 2 added to the in-use heap from capture #79 at 0.0 s"),
        "cycle 2's caption"
    );
}
