//! `heapwatch growth RUN` over real recordings: the run directories under testdata/runs were
//! written by the real collector watching the Go programs of testdata/go/cmd (see
//! testdata/record-runs.sh and testdata/runs/README.md). Each test checks that the analysis
//! names what the program is known to do, and only that: the slow leak under a large stable
//! heap, the site that grows to the OOM kill in every boot cycle, the transient storm with a
//! flat in-use heap, the goroutine leak, and no growth where memory is flat or bounded.

use std::path::PathBuf;

use serde_json::Value;

use crate::util;

const MIB: f64 = 1024.0 * 1024.0;

const LEAK: &str = "main.(*sessionTable).remember";
const CATALOG: &str = "main.loadCatalog";
const STORM_SITE: &str = "main.encodeSnapshot";
const OOM_SITE: &str = "main.(*routerDataModel).buildEventList";
const GOROUTINE_LEAK: &str = "main.watchSubscription";
const NO_GROWTH: &str = "no sustained in-use growth";

fn run_dir(name: &str) -> PathBuf {
    let dir = util::repo().join("testdata/runs").join(name);
    assert!(
        dir.join("manifest.jsonl").is_file(),
        "{} is missing: record it with testdata/record-runs.sh {name}",
        dir.display()
    );
    dir
}

/// `heapwatch growth testdata/runs/NAME --json`, which must succeed.
fn growth(name: &str) -> Value {
    let dir = run_dir(name);
    let out = util::run(&["growth", dir.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "growth {name} --json: {}",
        util::stderr(&out)
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("growth {name} --json is not JSON: {e}"));
    assert_eq!(doc["schema"], 1, "{name}");
    doc
}

fn cycles(doc: &Value) -> &Vec<Value> {
    doc["cycles"].as_array().expect("cycles[]")
}

fn list<'a>(cycle: &'a Value, field: &str) -> &'a Vec<Value> {
    cycle[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field}[] in {cycle}"))
}

fn names(cycle: &Value, field: &str) -> Vec<String> {
    list(cycle, field)
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect()
}

fn num(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

fn verdict(cycle: &Value) -> &str {
    cycle["verdict"].as_str().expect("verdict")
}

/// A short account of a cycle for assertion messages: the verdict and the ranked names.
fn summary(cycle: &Value) -> String {
    format!(
        "cycle {}: verdict {:?}; sites {:?}; storms {:?}; goroutines {:?}",
        cycle["index"],
        verdict(cycle),
        list(cycle, "sites")
            .iter()
            .map(|s| format!(
                "{} {:.2} MiB/s R² {:.2}",
                s["name"].as_str().unwrap_or("?"),
                s["bytes_per_sec"].as_f64().unwrap_or(f64::NAN) / MIB,
                s["fit_r2"].as_f64().unwrap_or(f64::NAN)
            ))
            .collect::<Vec<_>>(),
        names(cycle, "alloc_storms"),
        names(cycle, "goroutine_growth"),
    )
}

fn only_cycle(doc: &Value, name: &str) -> Value {
    let cycles = cycles(doc);
    assert_eq!(cycles.len(), 1, "{name}: one boot cycle");
    cycles[0].clone()
}

#[test]
fn hiddenleak_ranks_the_slow_leak_first_and_not_the_large_stable_catalog() {
    let doc = growth("hiddenleak");
    let c = only_cycle(&doc, "hiddenleak");
    let sites = list(&c, "sites");
    assert!(!sites.is_empty(), "no growing site: {}", summary(&c));
    let top = &sites[0];
    assert_eq!(top["name"], LEAK, "{}", summary(&c));
    assert!(
        !names(&c, "sites").iter().any(|n| n == CATALOG),
        "{CATALOG} is large but stable: {}",
        summary(&c)
    );
    // Recorded with -rate 2MiB. Sampling (512 KiB) and the GC-paced publication of in-use
    // figures make the profile's view noisy, but it must be the same order.
    let rate = num(top, "bytes_per_sec");
    eprintln!(
        "hiddenleak: {LEAK} {:.2} MiB/s (configured 2 MiB/s), R² {:.2}",
        rate / MIB,
        num(top, "fit_r2")
    );
    assert!(
        (1.0 * MIB..=3.0 * MIB).contains(&rate),
        "{LEAK} at {:.2} MiB/s, configured 2 MiB/s",
        rate / MIB
    );
    // Hidden: the leak is a small part of a heap held mostly by the catalog.
    let heap_last = num(&c, "heap_last");
    assert!(
        num(top, "inuse_last") < heap_last / 2.0,
        "the leak should be hidden under a larger heap: {top} of {heap_last}"
    );
    assert!(verdict(&c).contains(LEAK), "{}", summary(&c));
}

#[test]
fn oomgrow_names_the_same_growing_site_in_each_of_three_boot_cycles() {
    let doc = growth("oomgrow");
    let cs = cycles(&doc);
    let all: Vec<String> = cs.iter().map(summary).collect();
    assert_eq!(cs.len(), 3, "three boot cycles:\n{}", all.join("\n"));
    assert!(
        doc["limit_bytes"].as_u64() == Some(256 << 20),
        "the limit is recorded: {}",
        doc["limit_bytes"]
    );
    for c in cs {
        assert_eq!(
            names(c, "sites").first().map(String::as_str),
            Some(OOM_SITE),
            "{}",
            summary(c)
        );
        assert!(verdict(c).contains(OOM_SITE), "{}", summary(c));
        assert!(
            !verdict(c).starts_with(NO_GROWTH),
            "a heap growing to the OOM kill: {}",
            summary(c)
        );
    }
    assert_eq!(
        doc["across"]["same_top_site"],
        OOM_SITE,
        "across: {}\n{}",
        doc["across"],
        all.join("\n")
    );
    assert_eq!(doc["across"]["died"], 3, "{}", doc["across"]);
}

#[test]
fn oomgrow_a_cycle_that_died_is_measured_not_forecast() {
    let doc = growth("oomgrow");
    for c in cycles(&doc) {
        let died = c["died_after_s"].as_f64();
        eprintln!(
            "oomgrow cycle {}: limit_at_s {}, died_after_s {died:?}, killed {}",
            c["index"], c["limit_at_s"], c["killed"]
        );
        let died = died.unwrap_or_else(|| panic!("cycle {}: died_after_s known", c["index"]));
        assert_eq!(c["killed"], true, "{}", summary(c));
        // It died: the time to the limit is its death, never a forecast beside it.
        assert!(c["limit_at_s"].is_null(), "{}", summary(c));
        assert!(c["reading"]["forecast"].is_null(), "{}", summary(c));
        assert_eq!(c["reading"]["ongoing"], true, "{}", summary(c));
        assert!(!verdict(c).contains("would be reached"), "{}", summary(c));
        assert!(
            (3.0..=20.0).contains(&died),
            "cycle {}: died after {died:.1} s",
            c["index"]
        );
    }
}

#[test]
fn oomgrow_steady_growth_is_not_an_allocation_storm() {
    // buildEventList allocates (and retains) at one constant rate from start to kill: the
    // steps in its cumulative alloc_space come from the GC publishing the profile ever more
    // rarely as the heap doubles, not from a change of rate.
    let doc = growth("oomgrow");
    for c in cycles(&doc) {
        assert!(
            !names(c, "alloc_storms").iter().any(|n| n == OOM_SITE),
            "{}: {}",
            summary(c),
            c["alloc_storms"]
        );
    }
}

#[test]
fn storm_is_found_in_its_window_with_a_flat_heap() {
    let doc = growth("storm");
    let c = only_cycle(&doc, "storm");
    let storms = list(&c, "alloc_storms");
    assert!(!storms.is_empty(), "no storm: {}", summary(&c));
    let storm = &storms[0];
    assert_eq!(storm["name"], STORM_SITE, "{}", summary(&c));
    assert_eq!(storm["inuse_flat"], true, "{storm}");
    let windows = list(storm, "windows");
    eprintln!(
        "storm: {STORM_SITE} peak {:.0} MiB/s, typical {:.1} MiB/s, windows {}",
        num(storm, "peak_bytes_per_sec") / MIB,
        num(storm, "typical_bytes_per_sec") / MIB,
        storm["windows"]
    );
    // Recorded with -storm-start 3s -storm-end 6s (after program start; the first capture is
    // a few ms after it). Allow one second of slack for the GC-paced publication.
    let main = windows
        .iter()
        .find(|w| num(w, "start_s") < 6.0 && num(w, "end_s") > 3.0)
        .unwrap_or_else(|| panic!("no window overlaps 3–6 s: {windows:?}"));
    let (start, end) = (num(main, "start_s"), num(main, "end_s"));
    assert!(
        (2.0..=4.0).contains(&start) && (5.0..=7.0).contains(&end),
        "storm window {start:.2}–{end:.2} s, configured 3–6 s"
    );
    let peak = num(storm, "peak_bytes_per_sec");
    assert!(
        peak > 50.0 * MIB && peak > 10.0 * num(storm, "typical_bytes_per_sec"),
        "configured 200 MiB/s against 1 MiB/s: {storm}"
    );
    assert!(
        !names(&c, "sites").iter().any(|n| n == STORM_SITE),
        "the storm is freed at once, not growth: {}",
        summary(&c)
    );
    assert!(verdict(&c).contains(STORM_SITE), "{}", summary(&c));
}

#[test]
fn goroutineleak_names_the_leaking_goroutine() {
    let doc = growth("goroutineleak");
    let c = only_cycle(&doc, "goroutineleak");
    let growth = list(&c, "goroutine_growth");
    assert!(!growth.is_empty(), "no goroutine growth: {}", summary(&c));
    assert_eq!(growth[0]["name"], GOROUTINE_LEAK, "{}", summary(&c));
    let rate = num(&growth[0], "per_sec");
    eprintln!("goroutineleak: {GOROUTINE_LEAK} {rate:.1}/s (configured 50/s)");
    assert!((25.0..=75.0).contains(&rate), "{}", growth[0]);
    assert!(
        !names(&c, "goroutine_growth")
            .iter()
            .any(|n| n == "main.worker"),
        "the fixed worker pool does not grow: {}",
        summary(&c)
    );
    assert!(verdict(&c).contains(GOROUTINE_LEAK), "{}", summary(&c));
}

fn assert_no_growth(name: &str) {
    let doc = growth(name);
    let c = only_cycle(&doc, name);
    assert!(
        list(&c, "sites").is_empty(),
        "{name} has no growing site: {}",
        summary(&c)
    );
    assert!(
        verdict(&c).starts_with(NO_GROWTH),
        "{name}: {}",
        summary(&c)
    );
    assert!(
        list(&c, "goroutine_growth").is_empty(),
        "{name}: {}",
        summary(&c)
    );
}

#[test]
fn steady_shows_no_growth() {
    assert_no_growth("steady");
}

#[test]
fn a_bounded_cache_that_filled_up_is_not_growth() {
    assert_no_growth("boundedcache");
}

#[test]
fn the_regressed_controller_grows_in_two_sites_and_the_good_one_not_at_all() {
    let good = growth("controller-2.0.2");
    let good = only_cycle(&good, "controller-2.0.2");
    assert!(list(&good, "sites").is_empty(), "{}", summary(&good));
    assert!(verdict(&good).starts_with(NO_GROWTH), "{}", summary(&good));

    let bad = growth("controller-2.1.0");
    let bad = only_cycle(&bad, "controller-2.1.0");
    assert_eq!(
        names(&bad, "sites"),
        [OOM_SITE, "main.(*raftReadOnly).replayPeerLog"],
        "{}",
        summary(&bad)
    );
    // Both builds allocate at constant rates: nothing in either is a storm.
    for c in [&good, &bad] {
        assert!(
            list(c, "alloc_storms").is_empty(),
            "{}: {}",
            summary(c),
            c["alloc_storms"]
        );
    }
}

/// The storm's episode is two publications: a line through two points has R² 1 whatever they
/// are, so the text gives none.
#[test]
fn an_episode_of_two_points_is_a_chord_with_no_r2() {
    let dir = run_dir("storm");
    let text = util::stdout(&util::run(&["growth", dir.to_str().unwrap()]));
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("growth episode:"))
        .unwrap_or_else(|| panic!("no episode in\n{text}"));
    assert!(
        line.contains("(2 points: a chord, no fit to judge; GC moments estimated, the source gives no GC count)") && !line.contains("R²"),
        "{line}"
    );
}

#[test]
fn the_text_output_carries_each_verdict() {
    for name in ["hiddenleak", "oomgrow", "storm", "steady"] {
        let doc = growth(name);
        let dir = run_dir(name);
        let out = util::run(&["growth", dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", util::stderr(&out));
        let text = util::stdout(&out);
        for c in cycles(&doc) {
            assert!(
                text.contains(verdict(c)),
                "{name}: verdict {:?} missing from\n{text}",
                verdict(c)
            );
        }
        assert!(text.contains("across cycles:"), "{name}:\n{text}");
    }
}

// ---- errors: exit 2, one line naming the path ----

fn assert_fails_naming(args: &[&str], path: &str) {
    let out = util::run(args);
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(path), "{path:?} not named in {err:?}");
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
}

#[test]
fn a_run_directory_that_does_not_exist_is_named() {
    let dir = util::tempdir();
    let missing = dir.path().join("no-such-run");
    let missing = missing.to_str().unwrap();
    assert_fails_naming(&["growth", missing], missing);
    assert_fails_naming(&["growth", missing, "--json"], missing);
}

#[test]
fn a_directory_without_a_manifest_is_named() {
    let dir = util::tempdir();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    let path = dir.path().to_str().unwrap();
    assert_fails_naming(&["growth", path], path);
    assert_fails_naming(&["growth", path, "--json"], path);
}

#[test]
fn a_run_without_captures_is_named() {
    let dir = util::tempdir();
    util::write(dir.path(), "manifest.jsonl", b"");
    let path = dir.path().to_str().unwrap();
    assert_fails_naming(&["growth", path, "--json"], path);
}

fn compare_json(a: &str, b: &str) -> serde_json::Value {
    let (a, b) = (
        util::repo().join("testdata/runs").join(a),
        util::repo().join("testdata/runs").join(b),
    );
    let out = util::run(&[
        "compare",
        "--json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    serde_json::from_slice(&out.stdout).expect("compare --json is JSON")
}

#[test]
fn compare_names_the_regressed_site_of_the_bad_build_first() {
    let doc = compare_json("controller-2.0.2", "controller-2.1.0");
    assert_eq!(doc["schema"], 1);
    assert_eq!(
        (doc["a"].as_str(), doc["b"].as_str()),
        (Some("2.0.2"), Some("2.1.0"))
    );
    let regressions = doc["regressions"].as_array().unwrap();
    let names: Vec<&str> = regressions
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.first(),
        Some(&"main.(*routerDataModel).buildEventList"),
        "{names:?}"
    );
    let replay = regressions
        .iter()
        .find(|r| r["name"] == "main.(*raftReadOnly).replayPeerLog")
        .expect("the site that exists only in 2.1.0 is a regression");
    assert_eq!(replay["new_in_b"], true);
    // Sites both builds share and hold alike are neither worse nor better.
    let flat = [
        "main.(*routerDataModel).load",
        "main.(*raftReadOnly).serveRead",
    ];
    for list in ["regressions", "improvements"] {
        for r in doc[list].as_array().unwrap() {
            assert!(!flat.contains(&r["name"].as_str().unwrap()), "{list}: {r}");
        }
    }
}

#[test]
fn compare_is_quiet_when_nothing_changed_and_reverses_with_its_arguments() {
    let same = compare_json("controller-2.1.0", "controller-2.1.0");
    assert!(same["regressions"].as_array().unwrap().is_empty(), "{same}");
    assert!(
        same["improvements"].as_array().unwrap().is_empty(),
        "{same}"
    );
    let back = compare_json("controller-2.1.0", "controller-2.0.2");
    assert!(back["regressions"].as_array().unwrap().is_empty(), "{back}");
    let better: Vec<&str> = back["improvements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        better.first(),
        Some(&"main.(*routerDataModel).buildEventList")
    );
}

#[test]
fn compare_run_at_n_chooses_the_boot_cycles_and_the_headline_names_them() {
    // oomgrow was OOM-killed three times: its cycles compared with each other by RUN@N.
    let oom = util::repo().join("testdata/runs/oomgrow");
    let (a, b) = (
        format!("{}@1", oom.display()),
        format!("{}@3", oom.display()),
    );
    let out = util::run(&["compare", "--json", &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (doc["a_cycle"].as_u64(), doc["b_cycle"].as_u64()),
        (Some(1), Some(3))
    );
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("cycle 3 of oomgrow against cycle 1 of oomgrow"),
        "{verdict}"
    );
    assert!(doc["same_build"].as_bool().unwrap(), "{doc}");
    // The flags say the same.
    let p = oom.to_str().unwrap();
    let flags = util::run(&[
        "compare",
        "--json",
        p,
        p,
        "--baseline-cycle",
        "1",
        "--cycle",
        "3",
    ]);
    assert_eq!(util::stdout(&flags), util::stdout(&out));
    // By default a run of one build against itself pairs cycle k with cycle k: nothing regressed.
    let same = util::run(&["compare", "--json", p, p]);
    let same: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert!(same["regressions"].as_array().unwrap().is_empty(), "{same}");
    assert_eq!(same["other_pairs"].as_array().unwrap().len(), 2, "{same}");
    // A cycle that is not there is named, with the ones that are.
    let bad = format!("{p}@9");
    let out = util::run(&["compare", p, &bad]);
    assert_eq!(out.status.code(), Some(2));
    let err = util::stderr(&out);
    assert!(
        err.contains("boot cycle 9") && err.contains("1, 2, 3"),
        "{err}"
    );
}

#[test]
fn compare_reports_what_b_does_after_a_data_ends() {
    // steady's captures end at 7.8 s, hiddenleak's at 11.8 s: its leak goes on growing after
    // A's data ends, and that is reported, with its peak, not dropped.
    let base = util::repo().join("testdata/runs/steady");
    let leak = util::repo().join("testdata/runs/hiddenleak");
    let args = ["compare", base.to_str().unwrap(), leak.to_str().unwrap()];
    let out = util::run(&[&args[..], &["--json"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let after = &doc["after_a"];
    assert!((7.0..9.0).contains(&num(after, "a_last_s")), "{after}");
    assert!(num(after, "b_last_s") > 11.0, "{after}");
    assert!(num(after, "b_heap_peak") > 100.0 * MIB, "{after}");
    assert_eq!(after["sites"][0]["name"], LEAK, "{after}");
    assert!(num(&after["sites"][0], "after_at_s") > num(after, "a_last_s"));
    let text = util::stdout(&util::run(&args));
    assert!(text.contains("after A's last capture at 7."), "{text}");
    assert!(text.contains(&format!("{LEAK} rose to")), "{text}");
}

#[test]
fn every_cycle_names_its_build() {
    // Recorded before processes reported their build: the run's label stands for every cycle.
    let doc = growth("controller-2.1.0");
    for c in cycles(&doc) {
        assert_eq!(c["build"], "2.1.0", "{c}");
    }
    let dir = run_dir("controller-2.1.0");
    let text = util::stdout(&util::run(&["growth", dir.to_str().unwrap()]));
    assert!(text.contains("boot cycle 1 (build 2.1.0"), "{text}");
}

// ---- a spike, recorded live ----

/// Starts the `spike` fixture and records it over HTTP pprof for `secs` seconds, with its
/// process memory. `None` without Go (a failure under HEAPWATCH_REQUIRE_GO).
fn record_spike(dir: &std::path::Path, secs: u32) -> Option<PathBuf> {
    let program = util::go_fixture("spike")?;
    let (target, addr) = util::start_listening(&program, &["-listen", "127.0.0.1:0"]);
    let run = dir.join("spike-run");
    let out = util::run(&[
        "collect",
        &format!("http://{addr}"),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "250ms",
        "--duration",
        &format!("{secs}s"),
        "--pid",
        &target.0.id().to_string(),
        "--limit",
        "256MiB",
        "--label",
        "spike-1.0",
        "--quiet",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "collect: {}",
        util::stderr(&out)
    );
    Some(run)
}

#[test]
fn a_startup_spike_is_a_finding_with_its_site_peak_and_time() {
    let dir = util::tempdir();
    let Some(run) = record_spike(dir.path(), 11) else {
        return;
    };
    let path = run.to_str().unwrap();
    let out = util::run(&["growth", path, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &cycles(&doc)[0];
    let e = &c["episode"];
    assert_eq!(e["transient"], true, "{}", summary(c));
    // About 150 MiB built from 2 s after start, held until about 6 s.
    assert!(num(e, "peak_bytes") > 120.0 * MIB, "{e}");
    assert!(num(e, "base_bytes") < 40.0 * MIB, "{e}");
    let peak_s = num(e, "peak_s");
    assert!((1.5..8.0).contains(&peak_s), "{e}");
    assert!(num(e, "fell_s") > peak_s, "{e}");
    assert_eq!(e["sites"][0]["name"], "main.buildStartupIndex", "{e}");
    assert!(num(&e["sites"][0], "at_peak") > 120.0 * MIB, "{e}");
    assert!(num(&c["peaks"]["heap"], "bytes") >= num(e, "peak_bytes"));
    assert!(num(&c["peaks"]["process"], "bytes") > 120.0 * MIB, "{c}");
    // The verdict says it, and does not call it "no growth": half the limit was reached.
    let v = verdict(c);
    assert!(!v.contains(NO_GROWTH), "{v}");
    assert!(
        v.contains("spiked") && v.contains("main.buildStartupIndex"),
        "{v}"
    );
    let text = util::stdout(&util::run(&["growth", path]));
    assert!(text.contains("transient episode"), "{text}");

    // The report's headline and its flamegraph show it.
    let report = dir.path().join("report");
    let out = util::run(&["report", path, "-o", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let headline = util::stdout(&out);
    assert!(
        headline.contains("spiked") && headline.contains("main.buildStartupIndex"),
        "{headline}"
    );
    let svg = std::fs::read_to_string(report.join("flamegraphs/cycle-1-growth.svg")).unwrap();
    assert!(
        svg.contains("main.buildStartupIndex"),
        "the rise into the peak is drawn"
    );
    // And so does `flame --growth` on its own: the rise into the peak, with no sustained growth.
    let flame = dir.path().join("spike.svg");
    let out = util::run(&["flame", path, "--growth", "-o", flame.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let svg = std::fs::read_to_string(&flame).unwrap();
    assert!(
        svg.contains("main.buildStartupIndex ("),
        "flame --growth draws the rise"
    );
    assert!(
        svg.contains("rise into the peak"),
        "the subtitle says what is drawn"
    );
}

#[test]
fn a_process_stopped_with_sigint_is_never_called_killed_or_dead() {
    let Some(program) = util::go_fixture("steady") else {
        return;
    };
    let (target, addr) = util::start_listening(&program, &["-listen", "127.0.0.1:0"]);
    let pid = target.0.id();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(2));
        util::signal(pid, "INT");
    });
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("http://{addr}"),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "250ms",
        "--duration",
        "4s",
        "--quiet",
    ]);
    stopper.join().unwrap();
    assert!(out.status.code().is_some(), "{}", util::stderr(&out));
    let out = util::run(&["growth", run.to_str().unwrap(), "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &cycles(&doc)[0];
    // Nothing recorded why it went away: the words say exactly that.
    assert_eq!(c["end"]["kind"], "stopped-answering", "{c}");
    assert_eq!(c["killed"], false, "{c}");
    let v = verdict(c);
    assert!(v.contains("stopped answering, cause unknown"), "{v}");
    assert!(!v.contains("killed") && !v.contains("death"), "{v}");
}

#[test]
fn a_process_that_restarts_itself_in_its_cgroup_is_said_to_have_restarted_itself() {
    let Some(program) = util::go_fixture("spike") else {
        return;
    };
    let Some(cg) = util::memory_cgroup_or_skip("restart-itself", 512 << 20) else {
        return;
    };
    let port = util::free_port();
    let listen = format!("127.0.0.1:{port}");
    let small = [
        "-spike", "8MiB", "-rise", "100ms", "-build", "100ms", "-hold", "100ms",
    ];
    let start = |exit_after: &str, listen_after: &str| {
        let mut args = vec![
            "-listen",
            listen.as_str(),
            "-exit-after",
            exit_after,
            "-listen-after",
            listen_after,
            "-settings",
            "32MiB",
        ];
        args.extend_from_slice(&small);
        util::Reaped(
            cg.command(&program, &args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start spike"),
        )
    };
    // The first process exits by itself after 3 s; a second starts in the same cgroup 1 s later
    // and loads 32 MiB for 3 s before its endpoint opens.
    let mut first = start("3s", "0s");
    let second = std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| {
            let status = first.0.wait().expect("wait for the first process");
            assert!(
                status.success(),
                "the first process exits by itself: {status}"
            );
            std::thread::sleep(std::time::Duration::from_secs(1));
            start("0s", "3s")
        });
        let dir = util::tempdir();
        let run = dir.path().join("run");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = util::run(&[
            "collect",
            &format!("http://{listen}"),
            "--out",
            run.to_str().unwrap(),
            "--cgroup",
            cg.path.to_str().unwrap(),
            "--interval",
            "250ms",
            "--duration",
            "11s",
            "--quiet",
        ]);
        assert!(out.status.code().is_some(), "{}", util::stderr(&out));
        let second = supervisor.join().unwrap();
        let out = util::run(&["growth", run.to_str().unwrap(), "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let all = cycles(&doc);
        assert!(all.len() >= 2, "a second boot cycle: {doc:#}");
        let c = &all[0];
        assert_eq!(c["end"]["kind"], "restarted-itself", "{}", summary(c));
        assert_eq!(c["killed"], false);
        assert!(verdict(c).contains("restarted itself"), "{}", verdict(c));
        let across = doc["across"]["summary"].as_str().unwrap();
        assert!(
            across.contains("1 restarted itself") && !across.contains("death"),
            "{across}"
        );
        second
    });
    drop(second);
}

#[test]
fn a_run_whose_every_attempt_failed_says_why_and_fails() {
    let dir = util::tempdir();
    let failed = |seq: u64, t_ms: i64| {
        format!(
            "{{\"seq\":{seq},\"kind\":\"heap\",\"file\":null,\"incarnation\":1,\"t_ms\":{t_ms},\
             \"latency_ms\":1.0,\"bytes\":0,\"dup_of\":null,\"totals\":{{}},\
             \"error\":\"connection refused (os error 111)\",\"error_kind\":\"refused\"}}\n"
        )
    };
    let manifest = failed(1, 1_000_000) + &failed(2, 1_001_000);
    util::write(dir.path(), "manifest.jsonl", manifest.as_bytes());
    let path = dir.path().to_str().unwrap();
    assert_fails_naming(&["growth", path], path);
    let err = util::stderr(&util::run(&["growth", path]));
    assert!(
        err.contains("no good capture") && err.contains("2 refused"),
        "{err}"
    );
}

#[test]
fn top_on_a_run_directory_says_to_give_one_capture() {
    let run = util::repo().join("testdata/runs/oomgrow");
    let path = run.to_str().unwrap();
    let out = util::run(&["top", path]);
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is a run directory") && err.contains("heapwatch growth"),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
}

#[test]
fn the_capture_counts_add_up() {
    let out = util::run(&[
        "growth",
        util::repo().join("testdata/runs/oomgrow").to_str().unwrap(),
    ]);
    let text = util::stdout(&out);
    for line in text.lines().filter(|l| l.starts_with("boot cycle")) {
        let numbers: Vec<usize> = line
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .filter_map(|w| w.parse().ok())
            .collect();
        // boot cycle N (…, pid P): ATTEMPTS capture attempts over S s: GOOD good (STORED …,
        // DUP …, OTHER goroutine profiles and runtime figures), FAILED failed
        let tail = &numbers[numbers.len() - 6..];
        let (attempts, good, stored, dup, other, failed) =
            (tail[0], tail[1], tail[2], tail[3], tail[4], tail[5]);
        assert_eq!(good + failed, attempts, "{line}");
        assert_eq!(stored + dup + other, good, "{line}");
    }
}

#[test]
fn compare_says_first_which_side_died_and_what_the_cgroup_did() {
    let demo = |b: &str| util::repo().join("demo/recording").join(b);
    let (good, bad) = (demo("2.0.2"), demo("2.1.0"));
    let out = util::run(&[
        "compare",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = doc["verdict"].as_str().unwrap();
    assert!(
        v.starts_with("A = 2.0.2 (cycle"),
        "A and B are defined: {v}"
    );
    let died = v.find("B was OOM-killed").expect("B's death is said");
    assert!(v.contains("and A was not"), "{v}");
    let cgroup = v
        .find("cgroup memory peaked at")
        .expect("the cgroup picture");
    let site = v
        .find("regressed in B")
        .expect("the site after the picture");
    assert!(died < site && cgroup < site, "{v}");
    // Both sides died: said as such, never "regressed" against a side that died too.
    let out = util::run(&[
        "compare",
        bad.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--json",
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = doc["verdict"].as_str().unwrap();
    assert!(v.contains("both sides died of memory"), "{v}");
    assert!(!v.contains("regressed in B:"), "{v}");
}

/// oomgrow's memory was sampled from its cgroup: the rate is the cgroup's and says so, and the
/// process's peak is its RSS (the binary's file pages included, 5 MiB above the limit's
/// 256 MiB) and says so, in the terminal and in the report alike.
#[test]
fn each_memory_figure_says_whether_it_is_the_cgroups_or_the_processs_rss() {
    let out = util::run(&["growth", run_dir("oomgrow").to_str().unwrap()]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    assert!(text.contains("; cgroup memory 33.7 MiB/s"), "{text}");
    assert!(text.contains(", process RSS 261 MiB at 7.3 s"), "{text}");
    assert!(!text.contains("process memory"), "{text}");
    let dir = util::tempdir();
    let report = dir.path().join("report");
    let out = util::run(&[
        "report",
        run_dir("oomgrow").to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(html.contains("process RSS 261 MiB at 7.3 s"), "the peaks");
    assert!(html.contains("<dt>cgroup memory</dt>"), "the rate's name");
    // Issue 35, item 5a: the charts set the cgroup's usage against the limit; the process's
    // RSS (above the limit line) is not drawn there, in the static charts or the explorer.
    assert!(
        html.contains("memory (what its limit counts) sampled from outside"),
        "the caption"
    );
    assert!(
        !html.contains("stroke=\"#FF7F0E\""),
        "no RSS line in a chart"
    );
    assert!(
        html.contains("\"rss\":[]") && !html.contains("\"rss\":[["),
        "none in the explorer"
    );
}

/// A copy of testdata/runs/NAME whose run.json records `own` as `collect --own` would. Its
/// site index is left behind: one the other tests built names sites without `own`, where a
/// recording with it builds its index by it.
fn recorded_with_own(dir: &std::path::Path, name: &str, own: &[&str]) -> PathBuf {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.file_name().is_some_and(|n| n == "sites.idx") {
                continue;
            }
            if path.is_dir() {
                copy(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    let run = dir.join(name);
    copy(&run_dir(name), &run);
    let path = run.join("run.json");
    let mut info: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    info["options"]["own"] = serde_json::json!(own);
    std::fs::write(&path, serde_json::to_vec_pretty(&info).unwrap()).unwrap();
    run
}

#[test]
fn own_recorded_with_the_run_names_every_analysis_as_the_flag_would() {
    // oomgrow's site is a callback of its fixture module: a library once the user names their
    // own code, so named by the main.main frame that called it.
    let dir = util::tempdir();
    let run = recorded_with_own(dir.path(), "oomgrow", &["github.com/openziti/"]);
    let plain = run_dir("oomgrow");
    let growth = |run: &std::path::Path, flags: &[&str]| -> Value {
        let mut args = vec!["growth", run.to_str().unwrap(), "--json"];
        args.extend_from_slice(flags);
        let out = util::run(&args);
        assert!(out.status.success(), "{}", util::stderr(&out));
        serde_json::from_str(&util::stdout(&out)).unwrap()
    };
    let top = |v: &Value| v["cycles"][0]["reading"]["sites"][0]["site"].clone();
    let recorded = growth(&run, &[]);
    let given = growth(&run, &["--own", "github.com/openziti/"]);
    let named = format!("main.main (leaf {OOM_SITE})");
    assert_eq!(top(&recorded), named.as_str());
    assert_eq!(top(&given), named.as_str());
    assert_eq!(
        top(&growth(&plain, &[])),
        OOM_SITE,
        "none recorded, none named"
    );
    assert_eq!(recorded["own"]["from"], "recorded");
    assert_eq!(given["own"]["from"], "given");
    assert_eq!(
        recorded["own"]["prefixes"],
        serde_json::json!(["github.com/openziti/"])
    );
    let mut same = given.clone();
    same["own"]["from"] = "recorded".into();
    assert_eq!(same, recorded, "the same reading, but for whence");
    // Given another, the analysis says that one.
    let other = growth(&run, &["--own", "example.org/"]);
    assert_eq!(
        other["own"],
        serde_json::json!({"prefixes": ["example.org/"], "from": "given"})
    );
    // compare: each side by its own, and said so.
    let out = util::run(&["compare", run.to_str().unwrap(), plain.to_str().unwrap()]);
    let said = util::stdout(&out);
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert!(
        said.contains(
            "own code beside the main module: A github.com/openziti/ (recorded with the run); \
             B none named"
        ),
        "{said}"
    );
    // report: summary.json and report.md say it.
    let report = dir.path().join("report");
    let out = util::run(&[
        "report",
        run.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(report.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["run"]["own"], recorded["own"]);
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("own code: github.com/openziti/"), "{md}");
    assert!(md.contains("main.main"), "{md}");
}
