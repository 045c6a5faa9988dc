//! Goroutines read out of a live process's memory against the process's own
//! /debug/pprof/goroutine: the goleak fixture (testdata/go/procheap/goleak) parks 100
//! goroutines in one function created by one site, 20 in a generic select, one asleep, one in
//! a system call, and keeps one spinning. Per creation site, the counts must equal those of
//! its `debug=2` dump; per stack, the parked goroutines' traces must equal those of its pprof
//! profile (`go tool pprof -traces` as the judge); the spinning one is counted as running. For
//! the installed Go and older releases, plain, stripped and PIE.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use heapwatch::decode;
use heapwatch::source::proc::ProcSource;
use heapwatch::source::{Source as _, Want};

use crate::proc::{Running, build, installed_go_version, pprof, start};
use crate::util;

fn http_get(port: u16, path: &str) -> Vec<u8> {
    let mut reply = ureq::get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .expect("the fixture answers");
    reply
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .expect("the body reads")
}

/// `-traces` output as (frames, labels) → goroutines.
fn traces(text: &str) -> BTreeMap<(String, String), i64> {
    let mut out = BTreeMap::new();
    for block in text.split("-----------+-------------------------------------------------------") {
        let mut count = None;
        let mut frames = Vec::new();
        let mut labels = Vec::new();
        for line in block.lines().map(str::trim) {
            if line.is_empty() {
                continue;
            }
            let first = line.split_whitespace().next().unwrap_or("");
            if first.ends_with(':') {
                labels.push(line.to_string());
                continue;
            }
            match (count, first.parse::<i64>()) {
                (None, Ok(n)) => {
                    count = Some(n);
                    frames.push(line[first.len()..].trim().to_string());
                }
                _ => frames.push(line.to_string()),
            }
        }
        if let Some(n) = count {
            *out.entry((frames.join("\n"), labels.join("\n")))
                .or_default() += n;
        }
    }
    out
}

/// Goroutines per `created by` site in a `debug=2` dump: "FUNC FILE:LINE".
fn dump_sites(text: &str) -> BTreeMap<String, i64> {
    let mut sites = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("created by ") else {
            continue;
        };
        let func = rest.split(" in goroutine ").next().unwrap_or(rest).trim();
        let at = lines.next().unwrap_or("").trim();
        let file_line = at.split(" +0x").next().unwrap_or(at);
        *sites.entry(format!("{func} {file_line}")).or_default() += 1;
    }
    sites
}

/// Our profile's goroutines per `created_by` label, and how many are labelled running per
/// `go_func`.
fn our_sites(gz: &[u8]) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
    let raw = decode::gunzip(gz, 1 << 28).expect("gzipped");
    let p = decode::decode_message(&raw).expect("a pprof profile");
    let s = |i: i64| p.string_table[i as usize].clone();
    assert_eq!(p.sample_type.len(), 1);
    assert_eq!(
        (s(p.sample_type[0].r#type), s(p.sample_type[0].unit)),
        ("goroutine".into(), "count".into())
    );
    let (mut sites, mut running) = (BTreeMap::new(), BTreeMap::new());
    for sample in &p.sample {
        let label = |k: &str| {
            sample
                .label
                .iter()
                .find(|l| s(l.key) == k)
                .map(|l| s(l.str))
        };
        if let Some(site) = label("created_by") {
            *sites.entry(site).or_default() += sample.value[0];
        }
        if label("state").as_deref() == Some("running") {
            *running
                .entry(label("go_func").unwrap_or_default())
                .or_default() += sample.value[0];
        }
    }
    (sites, running)
}

/// One variant: our capture first (no HTTP request has started a goroutine yet), then the
/// fixture's own profile and dump.
fn check_goroutines(variant: &str, toolchain: &str, flags: &[&str], go_version: &str) {
    let Some(binary) = build(&format!("goleak-{variant}"), "./goleak", toolchain, flags) else {
        return;
    };
    let running: Running = start(&binary);
    let pid = running.child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    assert!(
        source.go_version().starts_with(go_version),
        "{variant}: built with {}",
        source.go_version()
    );
    assert!(source.supports(Want::Goroutine), "{variant}");
    // The spinner is on a thread nearly always, but the scheduler preempts it now and then,
    // and a read in that moment finds it runnable with a saved stack: then it is read like
    // any parked goroutine. Read until one capture finds it running (each capture is checked
    // whole below either way).
    let mut ours = Vec::new();
    for _ in 0..10 {
        ours = source
            .fetch(Want::Goroutine, Duration::from_secs(5))
            .expect("a goroutine capture")
            .bytes;
        if our_sites(&ours).1.contains_key("main.spin") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let theirs = http_get(running.port, "/debug/pprof/goroutine");
    let dump = String::from_utf8(http_get(running.port, "/debug/pprof/goroutine?debug=2")).unwrap();

    let dir = util::tempdir();
    let our_file = util::write(dir.path(), "proc.pb.gz", &ours);
    let their_file = util::write(dir.path(), "http.pb.gz", &theirs);
    let go = util::go().expect("go is there when the fixture was built");
    let ours_t = traces(&pprof(&go, &our_file, &["-traces"]));
    let theirs_t = traces(&pprof(&go, &their_file, &["-traces"]));
    // Their stacks, labels aside (runtime/pprof puts none on these goroutines).
    let their_stacks: BTreeMap<&str, i64> = theirs_t
        .iter()
        .map(|((frames, _), n)| (frames.as_str(), *n))
        .collect();
    let mut parked = 0;
    let mut ours_by_stack: BTreeMap<&str, i64> = BTreeMap::new();
    for ((frames, labels), n) in &ours_t {
        if labels.contains("state:") {
            assert!(labels.contains("running"), "{variant}: {labels}");
            continue;
        }
        *ours_by_stack.entry(frames.as_str()).or_default() += n;
    }
    for (frames, n) in &ours_by_stack {
        assert_eq!(
            their_stacks.get(frames),
            Some(n),
            "{variant}: our trace of {n} goroutines is not in the fixture's profile:\n{frames}\n\
             theirs:\n{their_stacks:#?}\nours:\n{ours_t:#?}"
        );
        parked += n;
    }
    // What theirs has beyond ours: the goroutine serving the request, and the spinner,
    // stopped for their profile where ours found it running.
    for (frames, n) in &their_stacks {
        if ours_by_stack.get(frames) != Some(n) {
            assert!(
                frames.contains("net/http.(*conn).serve") || frames.contains("main.spin"),
                "{variant}: the fixture's trace of {n} is missing from ours:\n{frames}\n\
                 ours:\n{ours_t:#?}"
            );
        }
    }
    for expected in [
        "runtime.gopark\nruntime.chanrecv\nruntime.chanrecv1\nmain.park (inline)\nmain.worker",
        "runtime.gopark\nruntime.selectgo\nmain.waitOn[go.shape.string]",
        "time.Sleep\nmain.sleeper",
        "main.reader",
    ] {
        assert!(
            ours_by_stack.keys().any(|f| f.contains(expected)),
            "{variant}: no trace with\n{expected}\nin\n{ours_t:#?}"
        );
    }
    assert!(parked >= 123, "{variant}: {parked} parked goroutines");

    // Per creation site, against the dump (which names no site for goroutine 1).
    let (sites, running_funcs) = our_sites(&ours);
    let theirs_sites = dump_sites(&dump);
    let leak = theirs_sites
        .iter()
        .find(|(k, _)| k.starts_with("main.startLeak "))
        .map(|(k, v)| (k.clone(), *v));
    assert_eq!(
        leak.as_ref().map(|l| l.1),
        Some(100),
        "{variant}: {theirs_sites:#?}"
    );
    for (site, n) in &theirs_sites {
        // The requests made for the oracle start goroutines of net/http.
        if site.starts_with("net/http.") {
            continue;
        }
        assert_eq!(
            sites.get(site),
            Some(n),
            "{variant}: site {site}: ours {sites:#?}"
        );
    }
    // And the other way: every site we name is one the dump names, as often (the main
    // goroutine, goid 1, has none in either).
    for (site, n) in &sites {
        assert_eq!(
            theirs_sites.get(site),
            Some(n),
            "{variant}: our site {site} is not the dump's: {theirs_sites:#?}"
        );
    }
    assert_eq!(
        running_funcs.get("main.spin"),
        Some(&1),
        "{variant}: the spinner is not counted as running in ten captures: {running_funcs:#?}"
    );
}

fn local(variant: &str, flags: &[&str]) {
    if let Some(v) = installed_go_version() {
        check_goroutines(variant, "local", flags, &v);
    }
}

#[test]
fn proc_goroutines_equal_pprof_plain() {
    local("plain", &[]);
}

#[test]
fn proc_goroutines_equal_pprof_stripped() {
    local("stripped", &["-ldflags=-s -w"]);
}

#[test]
fn proc_goroutines_equal_pprof_pie() {
    local("pie", &["-buildmode=pie"]);
}

/// Each older release plain, stripped and PIE.
fn older(toolchain: &str) {
    check_goroutines(toolchain, toolchain, &[], toolchain);
    check_goroutines(
        &format!("{toolchain}-stripped"),
        toolchain,
        &["-ldflags=-s -w"],
        toolchain,
    );
    check_goroutines(
        &format!("{toolchain}-pie"),
        toolchain,
        &["-buildmode=pie"],
        toolchain,
    );
}

#[test]
fn proc_goroutines_equal_pprof_go1_25() {
    older("go1.25.5");
}

#[test]
fn proc_goroutines_equal_pprof_go1_24() {
    older("go1.24.6");
}

#[test]
fn proc_goroutines_equal_pprof_go1_23() {
    older("go1.23.12");
}

/// The `g` offsets heapwatch reads, against the DWARF of a binary of each release
/// (testdata/go/procheap/layouts prints them).
#[test]
fn proc_goroutine_layouts_match_each_release_s_dwarf() {
    let Some(go) = util::go() else { return };
    let dir = util::tempdir();
    let dumper = dir.path().join("layouts");
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&dumper)
        .arg("./layouts")
        .current_dir(util::repo().join("testdata/go/procheap"))
        .env("GOFLAGS", "-buildvcs=false")
        .output()
        .expect("go build runs");
    assert!(out.status.success(), "{}", util::stderr(&out));
    for (toolchain, release) in [
        ("local", None),
        ("go1.25.5", Some((1, 25))),
        ("go1.24.6", Some((1, 24))),
        ("go1.23.12", Some((1, 23))),
    ] {
        let Some(binary) = build(&format!("goleak-{toolchain}"), "./goleak", toolchain, &[]) else {
            return;
        };
        let release = release.unwrap_or((1, 26));
        let layout = heapwatch::source::proc::goroutines::g_layout_for(release).unwrap();
        let text = util::stdout(&Command::new(&dumper).arg(&binary).output().unwrap());
        let offset = |field: &str| -> u64 {
            text.lines()
                .find_map(|l| {
                    let mut w = l.split_whitespace();
                    (w.next() == Some(field)).then(|| w.next().unwrap().parse().unwrap())
                })
                .unwrap_or_else(|| panic!("{toolchain}: no {field} in\n{text}"))
        };
        let sched = offset("runtime.g.sched");
        assert_eq!(
            layout.sched_sp,
            sched + offset("runtime.gobuf.sp"),
            "{toolchain}"
        );
        assert_eq!(
            layout.sched_pc,
            sched + offset("runtime.gobuf.pc"),
            "{toolchain}"
        );
        for (ours, field) in [
            (layout.syscallsp, "runtime.g.syscallsp"),
            (layout.syscallpc, "runtime.g.syscallpc"),
            (layout.atomicstatus, "runtime.g.atomicstatus"),
            (layout.goid, "runtime.g.goid"),
            (layout.gopc, "runtime.g.gopc"),
            (layout.startpc, "runtime.g.startpc"),
        ] {
            assert_eq!(ours, offset(field), "{toolchain}: {field}");
        }
        assert_eq!(offset("runtime.g.stack"), 0, "{toolchain}");
    }
}

/// `collect --profiles heap,goroutine proc:PID` records goroutine captures beside the heap
/// ones, as it does for the agent and HTTP sources: `NNNNNN-goroutine.pb.gz` files whose
/// profile counts the fixture's leak.
#[test]
fn collect_proc_pid_records_goroutine_captures() {
    let Some(binary) = build("goleak-plain", "./goleak", "local", &[]) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        run.to_str().unwrap(),
        "--profiles",
        "heap,goroutine",
        // Long enough for two goroutine captures on a loaded machine: each is paced by what
        // the last one cost, and a whole suite on 2 cores makes that cost long.
        "--duration",
        "4s",
        "--interval",
        "200ms",
        "--goroutine-interval",
        "200ms",
        "-q",
    ]);
    assert!(
        out.status.success(),
        "collect failed: {}",
        util::stderr(&out)
    );
    let manifest = std::fs::read_to_string(run.join("manifest.jsonl")).unwrap();
    let goroutine: Vec<serde_json::Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["kind"] == "goroutine")
        .collect();
    assert!(goroutine.len() >= 2, "{manifest}");
    let file = goroutine
        .iter()
        .find_map(|r| r["file"].as_str())
        .unwrap_or_else(|| panic!("no goroutine capture stored:\n{manifest}"));
    assert!(file.ends_with("-goroutine.pb.gz"), "{file}");
    let go = util::go().expect("go built the fixture");
    let top = pprof(&go, &run.join(file), &["-top", "-nodefraction=0"]);
    let worker = top
        .lines()
        .find(|l| l.trim_end().ends_with(" main.worker"))
        .unwrap_or_else(|| panic!("no main.worker in\n{top}"));
    assert_eq!(worker.split_whitespace().nth(3), Some("100"), "{worker}");
}

/// A process whose `runtime.allgs` is damaged (testdata/go/procheap/corrupt): a length far
/// beyond its array's mapping, and a goroutine listed twice. Each goroutine attempt is a
/// failed attempt saying what is wrong, with the address in hex, within its timeout; the
/// heap (undamaged) is captured all along.
#[test]
fn a_damaged_allgs_is_a_failed_goroutine_attempt_and_the_heap_goes_on() {
    let Some(corrupt) = build(
        "corrupt",
        "./corrupt",
        "local",
        &["-ldflags=-checklinkname=0"],
    ) else {
        return;
    };
    let kinds: [(&str, &[&str]); 2] = [
        (
            "allgs-len",
            &["runtime.allgs is corrupt", "4294967296 goroutines", "at 0x"],
        ),
        (
            "allgs-loop",
            &["runtime.allgs is corrupt", "already listed", "(at 0x"],
        ),
    ];
    let damaged: Vec<_> = kinds
        .iter()
        .map(|&(how, words)| (crate::proc::start_corrupt(&corrupt, how), how, words))
        .collect();
    for (child, how, words) in &damaged {
        let pid = child.0.id();
        let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
        let began = std::time::Instant::now();
        let err = source
            .fetch(Want::Goroutine, Duration::from_millis(500))
            .expect_err("a damaged allgs is no capture");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{how}: {:?}",
            began.elapsed()
        );
        for w in *words {
            assert!(err.message.contains(w), "{how}: no {w:?} in {err}");
        }
        assert!(
            !err.message.contains("GoroutineRepeat"),
            "{how}: a debug form: {err}"
        );
    }
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let mut args = vec![
        "collect".to_string(),
        "--out".into(),
        run.to_str().unwrap().into(),
        "--profiles".into(),
        "heap,goroutine".into(),
        "--duration".into(),
        "2s".into(),
        "--interval".into(),
        "300ms".into(),
        "--goroutine-interval".into(),
        "300ms".into(),
        "--timeout".into(),
        "500ms".into(),
        "-q".into(),
    ];
    for (child, _, _) in &damaged {
        args.push(format!("proc:{}", child.0.id()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = util::run(&args);
    for (child, how, words) in &damaged {
        let path = run.join(format!("targets/pid-{}/manifest.jsonl", child.0.id()));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), util::stderr(&out)));
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let goroutine: Vec<_> = records
            .iter()
            .filter(|r| r["kind"] == "goroutine")
            .collect();
        assert!(goroutine.len() >= 2, "{how}: {text}");
        for r in &goroutine {
            assert!(r["file"].is_null(), "{how}: a capture was stored: {r}");
            let error = r["error"].as_str().unwrap_or_default();
            for w in *words {
                assert!(error.contains(w), "{how}: no {w:?} in {error:?}");
            }
        }
        let heap_ok = records
            .iter()
            .filter(|r| r["kind"] == "heap" && r["error"].is_null())
            .count();
        assert!(heap_ok >= 2, "{how}: {heap_ok} heap captures:\n{text}");
    }
}
