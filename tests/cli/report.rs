//! `heapwatch report`, `check` and `demo`: golden report.md and summary.json for committed
//! runs (HEAPWATCH_BLESS=1 rewrites them), the --fail-on gate's exit codes and one-line
//! reasons, markup in function names staying text, the page in headless Chromium, and the
//! demo end to end.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use heapwatch::decode::pb;
use prost::Message as _;

use crate::util;

fn demo_run(build: &str) -> String {
    util::repo()
        .join("demo/recording")
        .join(build)
        .display()
        .to_string()
}

fn testdata_run(name: &str) -> String {
    util::repo()
        .join("testdata/runs")
        .join(name)
        .display()
        .to_string()
}

/// Compares `actual` with the committed golden file, or rewrites it under HEAPWATCH_BLESS.
fn golden(name: &str, actual: &str) {
    let path = util::repo().join("tests/golden/report").join(name);
    if std::env::var_os("HEAPWATCH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with HEAPWATCH_BLESS=1 to write it)",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  expected: {:?}\n  actual:   {:?}\n(HEAPWATCH_BLESS=1 rewrites it after a deliberate change)",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_report_of_the_demo_recording_matches_its_golden_files() {
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let run = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "--baseline",
        &demo_run("2.0.2"),
        "-o",
        out.to_str().unwrap(),
        "--fail-on",
        "time-to-limit<60s",
        "--fail-on",
        "regression>1.5x",
        "--fail-on",
        "goroutines>10/s",
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", util::stderr(&run));
    golden("demo/report.md", &read(&out.join("report.md")));
    golden("demo/summary.json", &read(&out.join("summary.json")));

    let summary: serde_json::Value =
        serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    assert_eq!(summary["schema"], 1);
    let cycles = summary["cycles"].as_array().unwrap();
    assert!(cycles.len() >= 2, "the 2.1.0 recording restarts");
    for c in cycles {
        assert_eq!(c["killed"], true, "{c}");
        assert_eq!(
            c["top_sites"][0]["name"], "main.(*routerDataModel).buildEventList",
            "{c}"
        );
    }
    assert_eq!(
        summary["baseline"]["regressions"][0]["name"],
        "main.(*routerDataModel).buildEventList"
    );
    let html = read(&out.join("index.html"));
    // One chart per boot cycle and every flamegraph, inline.
    assert_eq!(
        html.matches("<figure class=\"chart\">").count(),
        cycles.len()
    );
    let flames = summary["files"]["flamegraphs"].as_array().unwrap();
    assert_eq!(flames.len(), cycles.len() + 1, "{flames:?}");
    assert_eq!(
        html.matches("<figure class=\"flame\">").count(),
        flames.len()
    );
    for f in flames {
        let file = out.join(f.as_str().unwrap());
        assert!(read(&file).contains("<svg"), "{}", file.display());
    }
    // Self-contained: nothing is fetched and nothing runs.
    for banned in [
        "<script",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(http",
    ] {
        assert!(!html.contains(banned), "index.html contains {banned:?}");
    }
    assert!(html.contains("Content-Security-Policy"));
}

#[test]
fn the_report_of_a_run_without_baseline_matches_its_golden_files() {
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let run = util::run(&[
        "report",
        &testdata_run("storm"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", util::stderr(&run));
    golden("storm/report.md", &read(&out.join("report.md")));
    golden("storm/summary.json", &read(&out.join("summary.json")));
    assert!(read(&out.join("report.md")).contains("main.encodeSnapshot"));
}

#[test]
fn a_tripped_rule_exits_1_with_one_line_naming_rule_cycle_and_site() {
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let run = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "-o",
        out.to_str().unwrap(),
        "--fail-on",
        "growth>5MiB/s",
        "--fail-on",
        "storm>10GiB/s",
    ]);
    assert_eq!(run.status.code(), Some(1));
    let err = util::stderr(&run);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("heapwatch: check failed: growth>5MiB/s tripped"),
        "{err}"
    );
    assert!(err.contains("boot cycle"), "{err}");
    assert!(
        err.contains("main.(*routerDataModel).buildEventList"),
        "{err}"
    );
    assert!(
        !err.contains("storm>"),
        "the rule that held is not named: {err}"
    );
    // The report is written all the same, and says what failed.
    assert!(read(&out.join("report.md")).contains("**FAIL**"));

    let passing = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "-o",
        out.to_str().unwrap(),
        "--fail-on",
        "growth>500MiB/s",
    ]);
    assert_eq!(passing.status.code(), Some(0), "{}", util::stderr(&passing));
}

#[test]
fn check_alone_gates_on_each_rule() {
    let oom = demo_run("2.1.0");
    let base = demo_run("2.0.2");
    let cases: &[(&[&str], i32, &str)] = &[
        (&[&oom, "--fail-on", "time-to-limit<60s"], 1, "OOM-killed"),
        (&[&oom, "--fail-on", "time-to-limit<2s"], 0, ""),
        (&[&oom, "--fail-on", "kills>0"], 1, "OOM kill"),
        (&[&oom, "--fail-on", "restarts>1"], 1, "restart"),
        (&[&oom, "--fail-on", "memory>200MiB"], 1, "process memory"),
        (
            &[&oom, "--baseline", &base, "--fail-on", "regression>1.5x"],
            1,
            "baseline",
        ),
        (
            &[&oom, "--baseline", &base, "--fail-on", "regression>20x"],
            0,
            "",
        ),
        (
            &[&base, "--fail-on", "growth>5MiB/s", "--fail-on", "kills>0"],
            0,
            "",
        ),
    ];
    for (args, code, says) in cases {
        let mut all = vec!["check"];
        all.extend_from_slice(args);
        let out = util::run(&all);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{all:?}: {}",
            util::stderr(&out)
        );
        if *code == 1 {
            let err = util::stderr(&out);
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(says), "{all:?}: {err}");
        }
        assert!(util::stdout(&out).contains(args.last().unwrap()), "{all:?}");
    }
}

#[test]
fn bad_rules_and_rules_that_cannot_be_checked_are_input_errors() {
    let oom = demo_run("2.1.0");
    let dir = util::tempdir();
    let out = dir.path().join("r");
    let cases: &[(&[&str], &str)] = &[
        (
            &["check", &oom, "--fail-on", "growth<5MiB/s"],
            "growth>5MiB/s",
        ),
        (&["check", &oom, "--fail-on", "speed>1"], "unknown rule"),
        (&["check", &oom, "--fail-on", "growth>fast"], "not a size"),
        (&["check", &oom], "--fail-on"),
        (
            &["check", &oom, "--fail-on", "regression>1.5x"],
            "--baseline",
        ),
        (
            &[
                "report",
                &oom,
                "-o",
                out.to_str().unwrap(),
                "--fail-on",
                "heap>>1",
            ],
            "no >=",
        ),
        // The steady run was collected without a limit or a pid: nothing to check these on.
        (
            &[
                "check",
                &testdata_run("steady"),
                "--fail-on",
                "time-to-limit<60s",
            ],
            "no memory limit",
        ),
        (
            &["check", &testdata_run("steady"), "--fail-on", "memory>1GiB"],
            "no process memory",
        ),
        (
            &["check", "/nonexistent/run", "--fail-on", "kills>0"],
            "/nonexistent/run",
        ),
    ];
    for (args, says) in cases {
        let run = util::run(args);
        assert_eq!(
            run.status.code(),
            Some(2),
            "{args:?}: {}",
            util::stderr(&run)
        );
        assert!(
            util::stderr(&run).contains(says),
            "{args:?}: {}",
            util::stderr(&run)
        );
    }
}

// ------------------------------------------------------------------ markup in profiles

/// What a function named like this would do to the page if it ever ran: change the title.
const SCRIPT_NAME: &str = "<script>document.title='pwned'</script>";
const IMG_NAME: &str = "\"><img src=x onerror=\"document.title='pwned-img'\">";

/// A gzipped heap profile whose two growing sites are named by `SCRIPT_NAME` and `IMG_NAME`.
fn hostile_profile(inuse: i64) -> Vec<u8> {
    let mut strings: Vec<String> = ["", "alloc_objects", "count", "alloc_space", "bytes"]
        .iter()
        .chain(&["inuse_objects", "inuse_space", "space", "main.main", "x.go"])
        .map(|s| s.to_string())
        .collect();
    strings.push(SCRIPT_NAME.into()); // 10
    strings.push(IMG_NAME.into()); // 11
    let vt = |t: i64, u: i64| pb::ValueType { r#type: t, unit: u };
    let function = |id: u64, name: i64| pb::Function {
        id,
        name,
        system_name: name,
        filename: 9,
        start_line: 1,
    };
    let location = |id: u64, function_id: u64| pb::Location {
        id,
        mapping_id: 0,
        address: 0x1000 * id,
        line: vec![pb::Line {
            function_id,
            line: 3,
            column: 0,
        }],
        is_folded: false,
    };
    let sample = |leaf: u64, v: i64| pb::Sample {
        location_id: vec![leaf, 1],
        value: vec![v / 4096, v, v / 4096, v],
        label: vec![],
    };
    let profile = pb::Profile {
        sample_type: vec![vt(1, 2), vt(3, 4), vt(5, 2), vt(6, 4)],
        sample: vec![sample(2, inuse), sample(3, inuse / 2)],
        mapping: vec![],
        location: vec![location(1, 1), location(2, 2), location(3, 3)],
        function: vec![function(1, 8), function(2, 10), function(3, 11)],
        string_table: strings,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: 1_800_000_000_000_000_000,
        duration_nanos: 0,
        period_type: Some(vt(7, 4)),
        period: 512 * 1024,
        comment: vec![],
        default_sample_type: 0,
        doc_url: 0,
    };
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec()).unwrap();
    gz.finish().unwrap()
}

/// A run of one boot cycle whose heap grows 8 MiB a second in the hostile sites, labelled
/// with markup too.
fn hostile_run(dir: &Path) -> PathBuf {
    let run = dir.join("hostile-run");
    std::fs::create_dir_all(run.join("profiles")).unwrap();
    let t0 = 1_800_000_000_000i64;
    let mut lines = Vec::new();
    for k in 0..10i64 {
        let inuse = (4 + 4 * k) << 20;
        let file = format!("profiles/{:06}-heap.pb.gz", k + 1);
        let bytes = hostile_profile(inuse);
        std::fs::write(run.join(&file), &bytes).unwrap();
        let total = inuse + inuse / 2;
        lines.push(
            serde_json::json!({
                "seq": k + 1, "kind": "heap", "file": file, "incarnation": 1, "t_ms": t0 + 500 * k,
                "latency_ms": 2.0, "bytes": bytes.len(), "dup_of": null, "interval_ms": 500,
                "error": null,
                "totals": {"alloc_space": total, "inuse_space": total,
                            "alloc_objects": total / 4096, "inuse_objects": total / 4096},
            })
            .to_string(),
        );
    }
    std::fs::write(run.join("manifest.jsonl"), lines.join("\n") + "\n").unwrap();
    let info = serde_json::json!({
        "schema": 1, "tool": "heapwatch 0.1.0", "target": "http://127.0.0.1:1/<script>x</script>",
        "source": "http", "started_ms": t0, "options": {"interval_ms": 500},
        "limit_bytes": 268435456u64, "label": "<b onmouseover=alert(3)>build</b>",
    });
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    run
}

#[test]
fn function_names_with_markup_stay_text_in_every_output() {
    let dir = util::tempdir();
    let run = hostile_run(dir.path());
    let out = dir.path().join("report");
    let report = util::run(&[
        "report",
        run.to_str().unwrap(),
        "--baseline",
        run.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(report.status.code(), Some(0), "{}", util::stderr(&report));
    let html = read(&out.join("index.html"));
    assert!(
        html.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"),
        "the name is shown, escaped"
    );
    for raw in [SCRIPT_NAME, IMG_NAME, "<script", "<img", "<b onmouseover"] {
        assert!(!html.contains(raw), "index.html holds {raw:?} unescaped");
    }
    let md = read(&out.join("report.md"));
    assert!(
        md.contains("main.main") || md.contains("document.title"),
        "{md}"
    );
    // Outside code spans every `<` is backslash-escaped, but for the report's own <sub>.
    let outside_code: String = md.split('`').step_by(2).collect::<Vec<_>>().join("");
    for (at, _) in outside_code.match_indices('<') {
        let escaped = outside_code[..at].ends_with('\\');
        let own =
            outside_code[at..].starts_with("<sub>") || outside_code[at..].starts_with("</sub>");
        assert!(
            escaped || own,
            "report.md has raw markup: {:?}",
            &outside_code[at..]
        );
    }
    // The flamegraphs name it too, escaped by their writer.
    for entry in std::fs::read_dir(out.join("flamegraphs")).unwrap() {
        let svg = read(&entry.unwrap().path());
        assert!(
            !svg.contains(SCRIPT_NAME) && !svg.contains("<img"),
            "flamegraph holds markup"
        );
    }
}

// ------------------------------------------------------------------ in a browser

/// Debian's chromium, when installed. Under CI (or HEAPWATCH_REQUIRE_ROOT, as .ci/run sets)
/// a missing browser fails the test instead of skipping it.
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var_os("HEAPWATCH_REQUIRE_ROOT").is_some() || std::env::var_os("CI").is_some()
        {
            panic!("chromium is missing (apt-get install -y chromium); .ci/run installs it");
        }
        eprintln!("SKIPPED: this test needs headless Chromium (/usr/bin/chromium)");
    }
    found
}

/// Runs headless Chromium on a page with the given extra flags; its stdout.
fn headless(browser: &Path, profile: &Path, page: &Path, flags: &[&str]) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(flags)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut stdout = stdout;
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

fn title(dom: &str) -> &str {
    dom.split("<title>")
        .nth(1)
        .and_then(|rest| rest.split("</title>").next())
        .unwrap_or("")
}

#[test]
fn the_page_renders_in_headless_chromium_and_runs_no_script() {
    let Some(browser) = chromium() else { return };
    let dir = util::tempdir();
    let profile = dir.path().join("chromium-profile");

    // The check itself works: a page whose script runs does change its title.
    let control = dir.path().join("control.html");
    std::fs::write(
        &control,
        "<!DOCTYPE html><html><head><title>before</title></head><body><script>document.title='pwned'</script></body></html>",
    )
    .unwrap();
    let dom = headless(&browser, &profile, &control, &["--dump-dom"]);
    assert_eq!(title(&dom), "pwned", "a running script is seen: {dom}");

    let run = hostile_run(dir.path());
    let out = dir.path().join("hostile");
    let report = util::run(&[
        "report",
        run.to_str().unwrap(),
        "--baseline",
        run.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(report.status.code(), Some(0), "{}", util::stderr(&report));
    let dom = headless(&browser, &profile, &out.join("index.html"), &["--dump-dom"]);
    assert_eq!(
        title(&dom),
        "heapwatch report: &lt;b onmouseover=alert(3)&gt;build&lt;/b&gt;",
        "no script ran"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "the name is text in the DOM"
    );
    assert!(!dom.contains("<img"), "no element was made from a name");

    // The demo recording's report: every chart and flamegraph is in the DOM as SVG.
    let out = dir.path().join("demo");
    let report = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "--baseline",
        &demo_run("2.0.2"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(report.status.code(), Some(0), "{}", util::stderr(&report));
    let page = out.join("index.html");
    let dom = headless(&browser, &profile, &page, &["--dump-dom"]);
    let charts = dom.matches("viewBox=\"0 0 960 340\"").count();
    assert!(charts >= 2, "a chart per boot cycle in the DOM ({charts})");
    assert!(
        dom.contains("cgroup memory") && dom.contains("OOM kill"),
        "the chart's marks"
    );
    let flames = dom.matches("<svg class=\"fg").count();
    assert!(flames >= 3, "the flamegraphs are in the DOM ({flames})");
    assert!(dom.contains("main.(*routerDataModel).buildEventList"));

    // A screenshot for CI to keep.
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("ci-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("report.png");
    let _ = std::fs::remove_file(&png);
    headless(
        &browser,
        &profile,
        &page,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,2600",
        ],
    );
    let bytes = std::fs::read(&png).expect("chromium wrote the screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 50_000,
        "{} bytes",
        bytes.len()
    );
}

// ------------------------------------------------------------------ the demo

#[test]
fn the_demo_replays_collects_and_reports_the_regression() {
    let dir = util::tempdir();
    let out = util::heapwatch()
        .arg("demo")
        .current_dir(dir.path())
        .output()
        .expect("heapwatch demo runs");
    let stdout = util::stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        util::stderr(&out)
    );
    let demo = dir.path().join("heapwatch-demo");
    for file in [
        "index.html",
        "report.md",
        "summary.json",
        "flamegraphs/diff-vs-baseline.svg",
        "flamegraphs/cycle-1-growth.svg",
        "runs/2.1.0/manifest.jsonl",
        "runs/2.1.0/memory.jsonl",
        "runs/2.0.2/manifest.jsonl",
    ] {
        assert!(
            demo.join(file).is_file(),
            "{file} missing; the demo said:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("the regressed site: main.(*routerDataModel).buildEventList"),
        "{stdout}"
    );
    assert!(stdout.contains("heapwatch-demo/index.html"), "{stdout}");
    // The collector saw the recording's boot cycles through the replay.
    let summary: serde_json::Value =
        serde_json::from_str(&read(&demo.join("summary.json"))).unwrap();
    let cycles = summary["cycles"].as_array().unwrap();
    assert!(cycles.len() >= 2, "{summary}");
    assert!(cycles.iter().all(|c| c["killed"] == true), "{summary}");
}
