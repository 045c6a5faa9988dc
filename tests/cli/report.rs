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
use heapwatch::render::report::explorer;
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

/// Compares `actual` with the committed golden file, or rewrites it under HEAPWATCH_BLESS=1.
fn golden(name: &str, actual: &str) {
    util::golden(&util::repo().join("tests/golden/report").join(name), actual);
}

/// A page without its own two script elements (the explorer's data block and script), for
/// checks that nothing else in it is a script.
fn without_own_scripts(html: &str) -> String {
    html.replacen(&format!("<script>{}</script>", explorer::SCRIPT), "", 1)
        .replacen(
            "<script type=\"application/json\" id=\"explorer-data\">",
            "",
            1,
        )
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
    // The demo's memory is its cgroup's, and its facts say so.
    let html = read(&out.join("index.html"));
    assert!(
        html.contains("<dt>cgroup memory</dt>") && !html.contains("<dt>process memory</dt>"),
        "the memory fact's name"
    );

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
    // Self-contained: nothing is fetched, and the one script is the page's own, which the
    // Content-Security-Policy names by its hash.
    for banned in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!html.contains(banned), "index.html contains {banned:?}");
    }
    assert_eq!(
        html.matches("<script").count(),
        2,
        "the data block and the explorer's script"
    );
    assert!(html.contains("<script type=\"application/json\" id=\"explorer-data\">"));
    assert!(html.contains(&format!("<script>{}</script>", explorer::SCRIPT)));
    assert!(html.contains(&format!(
        "script-src {}",
        explorer::script_source().replace('\'', "&#39;")
    )));
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
        (
            &[&oom, "--fail-on", "memory>200MiB"],
            1,
            "cgroup memory reached",
        ),
        (
            &[&oom, "--baseline", &base, "--fail-on", "regression>1.5x"],
            1,
            "baseline",
        ),
        // B was OOM-killed and A was not: that trips any regression bar.
        (
            &[&oom, "--baseline", &base, "--fail-on", "regression>20x"],
            1,
            "was OOM-killed",
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
    let html = without_own_scripts(&html);
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

/// Debian's chromium, when installed; else the test is skipped, saying so (a failure under
/// CI or HEAPWATCH_REQUIRE_ROOT, as .ci/run, which installs it, sets).
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        crate::prerequisite::skip(
            crate::prerequisite::Need::Chromium,
            "neither /usr/bin/chromium nor /usr/bin/chromium-browser is there",
        );
    }
    found
}

/// Runs headless Chromium on a page with the given extra flags; its stdout.
fn headless(browser: &Path, profile: &Path, page: &Path, flags: &[&str]) -> String {
    headless_at(
        browser,
        profile,
        &format!("file://{}", page.display()),
        flags,
    )
}

/// [`headless`] on a URL (a page with a fragment).
fn headless_at(browser: &Path, profile: &Path, url: &str, flags: &[&str]) -> String {
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
        .arg(url)
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
fn the_page_renders_in_headless_chromium_and_runs_only_its_own_script() {
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
        "no script of the run's ran, and without a fragment the page keeps its title"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "the name is text in the DOM"
    );
    assert!(!dom.contains("<img"), "no element was made from a name");
    // The page's own script ran (it drew the explorer) and names the view by the site that
    // grew most: the name, as text.
    let url = format!(
        "file://{}#life=1&from=0&to=4.5",
        out.join("index.html").display()
    );
    let dom = headless_at(&browser, &profile, &url, &["--dump-dom"]);
    assert_eq!(
        title(&dom),
        "life 1, 0.0 s → 4.5 s: +54.0 MiB, 67 % &lt;script&gt;document.title='pwned'&lt;/script&gt;",
        "the view's title"
    );
    assert!(dom.contains("data-explorer-ready-ms"), "the explorer ran");
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

// ------------------------------------------------------------------ the explorer

/// The stored heap capture of a life whose data is in effect `s` seconds after the life's
/// first capture (the last stored one taken by then, else the life's first), read from the
/// manifest alone: its seq and file.
fn capture_in_effect(run: &Path, life: u64, s: f64) -> (u64, PathBuf) {
    let records: Vec<serde_json::Value> = read(&run.join("manifest.jsonl"))
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["incarnation"] == life)
        .collect();
    let ok = |r: &&serde_json::Value| r["error"].is_null() && !util::is_event(r);
    let start = records
        .iter()
        .filter(ok)
        .filter_map(|r| r["t_ms"].as_i64())
        .min()
        .expect("the life has a good capture");
    let mut stored: Vec<(i64, u64, PathBuf)> = records
        .iter()
        .filter(ok)
        .filter(|r| r["kind"] == "heap" && r["dup_of"].is_null())
        .filter_map(|r| {
            let file = run.join(r["file"].as_str()?);
            file.is_file().then(|| {
                (
                    r["t_ms"].as_i64().unwrap(),
                    r["seq"].as_u64().unwrap(),
                    file,
                )
            })
        })
        .collect();
    stored.sort();
    let at = |t: i64| (t - start) as f64 / 1000.0;
    let pick = stored
        .iter()
        .rev()
        .find(|c| at(c.0) <= s + 1e-9)
        .unwrap_or(&stored[0]);
    (pick.1, pick.2.clone())
}

/// What `heapwatch diff --json` says one capture added to another's in-use heap.
struct Added {
    from: u64,
    to: u64,
    /// The in-use total's change.
    net: i64,
    /// What the sites (leaf functions) that grew gained, together.
    gained: i64,
    /// The site that gained most, and what it gained.
    first: (String, i64),
    /// Each site's change.
    rows: Vec<(String, i64)>,
}

impl Added {
    fn flat(&self, name: &str) -> i64 {
        self.rows.iter().find(|r| r.0 == name).map_or(0, |r| r.1)
    }
}

fn added(run: &Path, life: u64, from: f64, to: f64) -> Added {
    let (a, base) = capture_in_effect(run, life, from);
    let (b, new) = capture_in_effect(run, life, to);
    let out = util::run(&[
        "diff",
        "--json",
        "--all",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let diff: serde_json::Value = serde_json::from_str(&util::stdout(&out)).unwrap();
    let rows: Vec<(String, i64)> = diff["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["flat"].as_i64().unwrap(),
            )
        })
        .collect();
    let first = rows
        .iter()
        .filter(|r| r.1 > 0)
        .max_by_key(|r| r.1)
        .cloned()
        .expect("a site grew");
    Added {
        from: a,
        to: b,
        net: diff["total_delta"].as_i64().unwrap(),
        gained: rows.iter().map(|r| r.1.max(0)).sum(),
        first,
        rows,
    }
}

/// The title the page must give a view, from heapwatch's own `diff` of the two captures.
fn title_of(life: u64, from: f64, to: f64, a: &Added) -> String {
    let sign = if a.net >= 0 { "+" } else { "" };
    format!(
        "life {life}, {from:.1} s → {to:.1} s: {sign}{}, {:.0} % {}",
        heapwatch::units::format_bytes(a.net),
        a.first.1 as f64 * 100.0 / a.gained as f64,
        a.first.0
    )
}

/// The fragment's numbers: life, from, to.
fn view_of(hash: &str) -> (u64, f64, f64) {
    let mut life = 0;
    let (mut from, mut to) = (f64::NAN, f64::NAN);
    for pair in hash.trim_start_matches('#').split('&') {
        match pair.split_once('=') {
            Some(("life", v)) => life = v.parse().unwrap(),
            Some(("from", v)) => from = v.parse().unwrap(),
            Some(("to", v)) => to = v.parse().unwrap(),
            _ => panic!("{hash}: {pair}"),
        }
    }
    (life, from, to)
}

/// The explorer on the demo's recorded OOM loop (2.1.0, three lives, each OOM-killed), in
/// headless Chromium driven over the DevTools protocol: a view opened from its fragment, a
/// frame clicked, frames searched, the site table filtered and sorted, and a span selected on
/// a timeline with the mouse. Every figure is checked against `heapwatch diff` of the
/// captures at the span's ends, picked from the manifest by the fragment's rule.
#[test]
fn the_explorer_shows_what_a_span_added_as_heapwatch_diff_does() {
    let Some(chromium) = chromium() else { return };
    let dir = util::tempdir();
    let run = PathBuf::from(demo_run("2.1.0"));
    let out = dir.path().join("report");
    let report = util::run(&["report", run.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(report.status.code(), Some(0), "{}", util::stderr(&report));
    let page = format!("file://{}", out.join("index.html").display());
    let mut b = crate::devtools::Browser::launch(
        &chromium,
        &dir.path().join("chromium-profile"),
        1200,
        900,
    );
    const READY: &str = "document.documentElement.hasAttribute('data-explorer-ready-ms')";

    // A link: the view it names, its title and its captures.
    b.open(&format!("{page}#life=2&from=1&to=6"), READY);
    let want = added(&run, 2, 1.0, 6.0);
    assert_eq!(b.eval("document.title"), title_of(2, 1.0, 6.0, &want));
    let headers = b.eval(
        "[...document.querySelectorAll('#explore-2 table.ex-sites th')].map(t => t.textContent)",
    );
    assert_eq!(
        headers[1],
        format!("at #{}", want.from),
        "the span's first capture"
    );
    assert_eq!(
        headers[2],
        format!("at #{}", want.to),
        "the span's last capture"
    );
    // The drawn flamegraph: its root is what the sites gained, its widest leaf the site
    // that gained most, by what it gained.
    let frames = b.eval(
        "[...document.querySelectorAll('#explore-2 g.frame')].map(g => [g.dataset.name, Number(g.dataset.bytes), Number(g.dataset.self)])",
    );
    let frames: Vec<(String, i64, i64)> = serde_json::from_value(frames).unwrap();
    assert_eq!(frames[0].0, "all");
    assert_eq!(frames[0].1, want.gained, "the root is what was gained");
    let top = frames.iter().max_by_key(|f| f.2).unwrap();
    assert_eq!((top.0.clone(), top.2), want.first, "the top frame");

    // A click on a narrower frame zooms into it: it takes the whole width, and the site
    // beside it is no longer drawn.
    let other = frames
        .iter()
        .filter(|f| f.2 > 0 && f.0 != want.first.0)
        .max_by_key(|f| f.2)
        .expect("a second site gained")
        .0
        .clone();
    let frame = |name: &str| {
        format!(
            "#explore-2 g.frame[data-name={}] rect",
            serde_json::to_string(name).unwrap()
        )
    };
    let width = |b: &mut crate::devtools::Browser, name: &str| {
        b.eval(&format!(
            "(() => {{ const r = document.querySelector({}); return r ? Number(r.getAttribute('width')) : null; }})()",
            serde_json::to_string(&frame(name)).unwrap()
        ))
    };
    assert!(width(&mut b, &other).as_f64().unwrap() < 900.0);
    let at = b.centre(&frame(&other));
    b.click(at);
    assert!(
        width(&mut b, &other).as_f64().unwrap() > 950.0,
        "zoomed into {other}"
    );
    assert!(
        width(&mut b, &want.first.0).is_null(),
        "{} is off the zoomed graph",
        want.first.0
    );
    let at = b.centre("#explore-2 button.ex-reset");
    b.click(at);
    assert!(
        width(&mut b, &want.first.0).as_f64().unwrap() < 950.0,
        "zoom reset"
    );

    // A search marks the frames that match and says their share.
    let at = b.centre("#explore-2 input[placeholder='search frames']");
    b.click(at);
    b.type_text("buildEventList");
    let marked = b.eval(
        "[...document.querySelectorAll('#explore-2 g.frame.match')].map(g => g.dataset.name)",
    );
    assert_eq!(
        marked,
        serde_json::json!(["main.(*routerDataModel).buildEventList"])
    );
    let found = want.flat("main.(*routerDataModel).buildEventList");
    assert_eq!(
        b.eval("document.querySelector('#explore-2 .ex-found').textContent"),
        format!(
            "1 frame match: {}, {:.0} % of what the heap gained",
            heapwatch::units::format_bytes(found),
            found as f64 * 100.0 / want.gained as f64
        )
    );

    // The site table filters and sorts.
    let at = b.centre("#explore-2 input[placeholder='filter sites']");
    b.click(at);
    b.type_text("replay");
    let sites = b.eval(
        "[...document.querySelectorAll('#explore-2 table.ex-sites td.site')].map(t => t.textContent)",
    );
    let sites: Vec<String> = serde_json::from_value(sites).unwrap();
    assert!(
        !sites.is_empty() && sites.iter().all(|s| s.contains("replay")),
        "{sites:?}"
    );
    b.eval("(() => { const f = document.querySelector('#explore-2 input[placeholder=\"filter sites\"]'); f.value = ''; f.dispatchEvent(new Event('input')); })()");
    let at = b.centre("#explore-2 table.ex-sites button[data-key=name]");
    b.click(at);
    let names = b.eval(
        "[...document.querySelectorAll('#explore-2 table.ex-sites td.site')].map(t => t.textContent)",
    );
    let names: Vec<String> = serde_json::from_value(names).unwrap();
    let mut sorted = names.clone();
    sorted.sort();
    assert!(
        names.len() > 1 && names == sorted,
        "sorted by name: {names:?}"
    );

    // A span selected with the mouse on life 1's timeline: the fragment and the title name
    // it, the figures are diff's for its ends, and the chart zooms to it.
    let chart = b.eval(
        "(() => { const c = document.querySelector('#explore-1 svg.ex-chart'); c.scrollIntoView({block: 'center'});          const r = c.getBoundingClientRect();          return [r.left, r.top, r.width, r.height, Number(c.dataset.x0), Number(c.dataset.x1), c.dataset.plot]; })()",
    );
    let n = |i: usize| chart[i].as_f64().unwrap();
    let (left, top, width_px, height_px, x0, x1) = (n(0), n(1), n(2), n(3), n(4), n(5));
    let plot: Vec<f64> = chart[6]
        .as_str()
        .unwrap()
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    // The chart's own scale: viewBox units of 960 across, its plot between plot[0] and plot[1].
    let px =
        |s: f64| left + (plot[0] + (s - x0) / (x1 - x0) * (plot[1] - plot[0])) * width_px / 960.0;
    let y = top + height_px * 0.5;
    b.drag((px(2.0), y), (px(6.0), y));
    let hash = b.eval("location.hash");
    let (life, from, to) = view_of(hash.as_str().unwrap());
    assert_eq!(life, 1, "{hash}");
    assert!(
        (from - 2.0).abs() < 0.05 && (to - 6.0).abs() < 0.05,
        "{hash}"
    );
    let want = added(&run, 1, from, to);
    assert_eq!(b.eval("document.title"), title_of(1, from, to, &want));
    let zoomed = b.eval(
        "(() => { const c = document.querySelector('#explore-1 svg.ex-chart'); return [Number(c.dataset.x0), Number(c.dataset.x1)]; })()",
    );
    let (z0, z1) = (zoomed[0].as_f64().unwrap(), zoomed[1].as_f64().unwrap());
    assert!(z0 <= from && z1 >= to, "the span is in sight: {z0} to {z1}");
    assert!(
        z1 - z0 < (to - from) * 1.25,
        "the chart zoomed to the span: {z0} to {z1}"
    );

    // A fragment set by hand (a link followed within the page) shows its view too.
    b.eval("location.hash = '#life=3&from=0.5&to=7'");
    let want = added(&run, 3, 0.5, 7.0);
    let title = title_of(3, 0.5, 7.0, &want);
    b.wait_for(&format!(
        "document.title === {}",
        serde_json::to_string(&title).unwrap()
    ));
}

// ------------------------------------------------------------------ the headline

/// Issue 35, item 4: the headline leads with one short sentence (what killed it, or what
/// regressed, and the site to look at), then the rest as a list: on the terminal, in
/// report.md, index.html and summary.json alike, and in `compare`'s verdict.
#[test]
fn the_headline_leads_with_the_cause_and_the_site_then_lists_the_rest() {
    const SITE: &str = "main.(*routerDataModel).buildEventList";
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let run = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "--baseline",
        &demo_run("2.0.2"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", util::stderr(&run));
    let summary = json_file(&out.join("summary.json"));
    let lead = summary["lead"].as_str().expect("summary.json has the lead");
    assert!(lead.len() <= 200, "a short sentence: {lead}");
    assert!(
        lead.starts_with("2.1.0 was OOM-killed") && lead.contains("2.0.2 was not"),
        "what killed it, against the baseline: {lead}"
    );
    assert!(
        lead.ends_with(&format!("the regression is in {SITE}")),
        "{lead}"
    );
    let points: Vec<&str> = summary["points"]
        .as_array()
        .expect("and its points")
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(points.len() >= 4, "{points:?}");
    assert!(
        points.iter().any(|p| p.starts_with("crash loop: ")),
        "{points:?}"
    );
    // The one-line headline is the same model: its lead, then its points.
    let line = summary["headline"].as_str().unwrap();
    assert!(line.starts_with(&format!("{lead}. ")), "{line}");
    assert!(line.ends_with(points.last().unwrap()), "{line}");

    // The terminal: the lead first, each point on a line of its own.
    let stdout = util::stdout(&run);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some(lead), "{stdout}");
    for p in &points {
        assert_eq!(lines.next(), Some(format!("  - {p}").as_str()), "{stdout}");
    }
    // report.md: the lead in bold, then the list.
    let md = read(&out.join("report.md"));
    let escaped = |t: &str| t.replace('*', "\\*");
    assert!(
        md.contains(&format!(
            "\n**{}**\n\n- {}\n",
            escaped(lead),
            escaped(points[0])
        )),
        "{md}"
    );
    // index.html: the lead, then the list.
    let html = read(&out.join("index.html"));
    assert!(
        html.contains(&format!(
            "<div class=\"headline\" id=\"headline\">\n<p class=\"lead\">{lead}</p>\n<ul>\n<li>"
        )),
        "{html}"
    );

    // `compare`: the verdict is a short sentence, its clauses listed below it.
    let compared = util::run(&["compare", &demo_run("2.0.2"), &demo_run("2.1.0")]);
    assert_eq!(
        compared.status.code(),
        Some(0),
        "{}",
        util::stderr(&compared)
    );
    let text = util::stdout(&compared);
    let verdict = text
        .lines()
        .find_map(|l| l.strip_prefix("verdict: "))
        .expect("a verdict line");
    assert!(verdict.len() <= 200, "{verdict}");
    assert!(verdict.contains(SITE), "{verdict}");
    let listed = text.lines().filter(|l| l.starts_with("  - ")).count();
    assert!(listed >= 3, "{text}");
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
    // Issue 35, item 7a: the healthy baseline went silent because its replayed recording
    // ended, and that is what its end says (it said "stopped answering, cause unknown").
    assert!(
        stdout.contains("A was not: still answering when its recording ended (ran "),
        "{stdout}"
    );
    assert!(!stdout.contains("stopped answering"), "{stdout}");
    let baseline = util::run(&["growth", demo.join("runs/2.0.2").to_str().unwrap()]);
    assert!(
        util::stdout(&baseline).contains("  end: still answering when its recording ended"),
        "{}",
        util::stdout(&baseline)
    );
    // The collector saw the recording's boot cycles through the replay.
    let summary: serde_json::Value =
        serde_json::from_str(&read(&demo.join("summary.json"))).unwrap();
    let cycles = summary["cycles"].as_array().unwrap();
    assert!(cycles.len() >= 2, "{summary}");
    assert!(cycles.iter().all(|c| c["killed"] == true), "{summary}");
}

// ------------------------------------------------------------------ Envoy and Kubernetes sections

const MIB: u64 = 1 << 20;
/// The moment the Kubernetes fixtures describe (testdata/k8s/README.md).
const K8S_AT: &str = "2024-05-02T12:00:00Z";
const ENVOY_T0: i64 = 1_714_651_200_000;

fn k8s(name: &str) -> String {
    util::repo()
        .join("testdata/k8s")
        .join(name)
        .display()
        .to_string()
}

/// The gateway's `/stats` counters (testdata/envoy/stats-gateway.txt) as manifest totals.
fn gateway_totals(uptime: u64) -> serde_json::Map<String, serde_json::Value> {
    let serde_json::Value::Object(map) = serde_json::json!({
        "server.concurrency": 16,
        "cluster_manager.active_clusters": 1564,
        "listener_manager.total_listeners_active": 4,
        "server.total_connections": 512,
        "server.uptime": uptime,
    }) else {
        unreachable!()
    };
    map
}

/// `/memory` figures as manifest totals (`memory.*`), with the `server.memory_*` gauges of
/// `/stats` that go with them.
fn memory_totals(
    memory: &[(&str, u64)],
    uptime: u64,
) -> serde_json::Map<String, serde_json::Value> {
    let mut totals = gateway_totals(uptime);
    for &(field, value) in memory {
        totals.insert(format!("memory.{field}"), value.into());
        let gauge = match field {
            "allocated" => Some("server.memory_allocated"),
            "heap_size" => Some("server.memory_heap_size"),
            "total_physical_bytes" => Some("server.memory_physical_size"),
            _ => None,
        };
        if let Some(g) = gauge {
            totals.insert(g.into(), value.into());
        }
    }
    totals
}

/// A run directory as `collect envoy:http://…` writes it: `envoy` records (file null, the
/// figures in the totals) ten seconds apart, one failed `/heap_dump` (HTTP 501), and run.json.
fn envoy_run(
    dir: &Path,
    name: &str,
    snapshots: &[serde_json::Map<String, serde_json::Value>],
    options: serde_json::Value,
    limit: Option<u64>,
) -> PathBuf {
    let run = dir.join(name);
    std::fs::create_dir_all(run.join("profiles")).unwrap();
    let mut lines = vec![
        serde_json::json!({
            "seq": 1, "kind": "heap", "file": null, "incarnation": 1, "t_ms": ENVOY_T0 - 200,
            "latency_ms": 1.5, "bytes": 0, "dup_of": null, "totals": {}, "interval_ms": 10000,
            "error": "http://127.0.0.1:15000/heap_dump: not available (HTTP 501: Heap profile is not implemented in current build); not asked again",
            "error_kind": "status",
        })
        .to_string(),
    ];
    for (i, totals) in snapshots.iter().enumerate() {
        lines.push(
            serde_json::json!({
                "seq": i + 2, "kind": "envoy", "file": null, "incarnation": 1,
                "t_ms": ENVOY_T0 + 10_000 * i as i64, "latency_ms": 3.0, "bytes": 0,
                "dup_of": null, "totals": totals, "interval_ms": 10000, "error": null,
            })
            .to_string(),
        );
    }
    std::fs::write(run.join("manifest.jsonl"), lines.join("\n") + "\n").unwrap();
    let mut info = serde_json::json!({
        "schema": 1, "tool": "heapwatch 0.1.0", "target": "envoy:http://127.0.0.1:15000",
        "source": "envoy", "started_ms": ENVOY_T0 - 250, "options": options,
        "label": "istio-ingressgateway 1.20.3",
    });
    if let Some(l) = limit {
        info["limit_bytes"] = l.into();
    }
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    run
}

/// Twelve snapshots ten seconds apart: physical memory grows 10 MiB a snapshot (60 MiB/min)
/// from 700 MiB, live data with it (the growing series of tests/cli/envoy.rs).
fn growing_gateway(dir: &Path, options: serde_json::Value) -> PathBuf {
    let snapshots: Vec<_> = (0..12u64)
        .map(|i| {
            let physical = 700 * MIB + i * 10 * MIB;
            memory_totals(
                &[
                    ("allocated", physical - 60 * MIB),
                    ("heap_size", physical + 200 * MIB),
                    ("pageheap_unmapped", 180 * MIB),
                    ("pageheap_free", 4_145_152),
                    ("total_thread_cache", 22_500_080),
                    ("total_physical_bytes", physical),
                ],
                600 + i * 10,
            )
        })
        .collect();
    envoy_run(dir, "envoy-gateway", &snapshots, options, Some(1 << 30))
}

/// Three snapshots of one of the published cases, unchanged.
fn published_case(dir: &Path, name: &str, memory: &[(&str, u64)]) -> PathBuf {
    let snapshots: Vec<_> = (0..3u64)
        .map(|i| memory_totals(memory, 1917 + 10 * i))
        .collect();
    envoy_run(
        dir,
        name,
        &snapshots,
        serde_json::json!({"interval_ms": 10000}),
        Some(4 << 30),
    )
}

/// The first published case: naive 0.67, live 0.915, mostly live data.
const LIVE_DATA: &[(&str, u64)] = &[
    ("allocated", 2_793_932_032),
    ("heap_size", 4_162_846_720),
    ("pageheap_unmapped", 1_109_401_600),
    ("pageheap_free", 4_145_152),
    ("total_thread_cache", 22_500_080),
    ("total_physical_bytes", 3_080_496_686),
];

/// The second published case: 0.006, memory held and not returned.
const HELD: &[(&str, u64)] = &[
    ("allocated", 69_132_952),
    ("heap_size", 11_276_386_304),
    ("pageheap_unmapped", 3_571_712),
    ("pageheap_free", 11_155_046_400),
    ("total_thread_cache", 24_026_688),
];

fn json_file(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn close(v: &serde_json::Value, expected: f64, within: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - expected).abs() <= within)
}

#[test]
fn an_envoy_run_gets_its_section_its_chart_and_limits_from_the_pod() {
    let dir = util::tempdir();
    // No CPU limit in run.json: the pod's istio-proxy container gives it (2 CPUs).
    let run = growing_gateway(dir.path(), serde_json::json!({"interval_ms": 10000}));
    let out = dir.path().join("report");
    let report = util::run(&[
        "report",
        run.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--pod",
        &k8s("pod-burstable.json"),
        "--at",
        K8S_AT,
        "--fail-on",
        "live-share<0.6",
    ]);
    assert_eq!(report.status.code(), Some(0), "{}", util::stderr(&report));
    assert!(
        util::stdout(&report).starts_with("Envoy live-data: mostly live data"),
        "the headline is Envoy's verdict: {}",
        util::stdout(&report)
    );
    golden("envoy/report.md", &read(&out.join("report.md")));
    golden("envoy/summary.json", &read(&out.join("summary.json")));

    let summary = json_file(&out.join("summary.json"));
    let e = &summary["envoy"];
    assert_eq!(e["verdict"]["code"], "live-data", "{e}");
    assert_eq!(e["verdict"]["growing"], true);
    assert_eq!(e["snapshots"], 12);
    // 750 MiB live of 830 MiB mapped; naive 750 of 1010.
    assert!(close(&e["heap"]["live_share"], 0.9036, 0.0001), "{e}");
    assert!(close(&e["heap"]["naive_share"], 0.7426, 0.0001), "{e}");
    assert_eq!(e["heap"]["held_not_returned"], 4_145_152 + 22_500_080);
    assert_eq!(e["growth"]["series"], "total_physical_bytes");
    assert!(close(&e["growth"]["bytes_per_sec"], MIB as f64, 1.0), "{e}");
    assert!(close(&e["growth"]["limit_in_s"], 214.0, 0.5), "{e}");
    assert_eq!(e["workers"]["multiplier"], 8.0);
    assert_eq!(e["config"]["clusters_per_listener"], 391.0);
    assert_eq!(e["config"]["whole_mesh"], true);
    assert_eq!(e["heap_dump"]["state"], "not-available");
    assert_eq!(e["memory_limit_from"], "run.json");
    assert_eq!(e["cpu_limit_from"], "pod container istio-proxy");
    assert_eq!(summary["captures"]["envoy"], 12);
    assert_eq!(summary["rules"][0]["status"], "pass");
    // The pod section sees Envoy's worker count against the pod's CPU limit.
    let c = &summary["kubernetes"]["pods"][0]["containers"][0];
    assert_eq!(c["cpu"]["workers"], 16, "{c}");
    assert_eq!(c["cpu"]["multiplied"], true, "{c}");
    assert_eq!(c["memory"]["ratio"], 8.0, "{c}");

    let html = read(&out.join("index.html"));
    assert!(html.contains("<section id=\"envoy\">"));
    assert!(html.contains("<section id=\"kubernetes\">"));
    for series in [
        "allocated (Envoy)",
        "heap_size (Envoy)",
        "total_physical_bytes (Envoy)",
        "limit 1.00 GiB",
    ] {
        assert!(html.contains(series), "the chart draws {series:?}");
    }
    assert!(html.contains("16 workers on a 2 CPU limit (8x)"));
    assert!(html.contains("not available (HTTP 501: Heap profile is not implemented"));
    assert!(
        !html.contains("no sustained in-use growth"),
        "no Go verdict"
    );
    assert!(!html.contains("<script"));
    let md = read(&out.join("report.md"));
    assert!(
        md.contains("### Envoy") && md.contains("### Kubernetes triage"),
        "{md}"
    );
}

#[test]
fn growth_on_an_envoy_run_prints_the_envoy_verdict() {
    let dir = util::tempdir();
    let run = growing_gateway(
        dir.path(),
        serde_json::json!({"interval_ms": 10000, "cpu_limit": 2}),
    );
    let run = run.to_str().unwrap();
    let out = util::run(&["growth", run]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    assert!(
        text.starts_with("envoy envoy:http://127.0.0.1:15000: 12 snapshots over 1m 50s"),
        "{text}"
    );
    assert!(
        text.contains("verdict      live-data: mostly live data"),
        "{text}"
    );
    assert!(
        text.contains("growing 60.0 MiB/min, the 1.00 GiB limit in about 3m 34s"),
        "{text}"
    );
    assert!(text.contains("16 workers on a 2 CPU limit (8x)"), "{text}");
    assert!(!text.contains("no sustained in-use growth"), "{text}");

    // --cpu-limit overrides run.json: 16 workers fit 16 CPUs.
    let out = util::run(&["growth", run, "--cpu-limit", "16"]);
    assert!(
        util::stdout(&out).contains("16 workers within a 16 CPU limit"),
        "{}",
        util::stdout(&out)
    );

    let out = util::run(&["growth", run, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["cycles"][0]["index"], 1);
    assert_eq!(doc["envoy"]["verdict"]["code"], "live-data");
    assert_eq!(doc["envoy"]["workers"]["multiplied"], true);

    // The CI gate reads Envoy's growth too.
    let out = util::run(&["check", run, "--fail-on", "time-to-limit<10m"]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stdout(&out));
    assert!(
        util::stderr(&out).contains("Envoy's total_physical_bytes reaches 1.00 GiB"),
        "{}",
        util::stderr(&out)
    );
}

#[test]
fn the_two_published_envoy_cases_get_their_verdicts_and_live_share_gates_them() {
    let dir = util::tempdir();
    let live = published_case(dir.path(), "live-data", LIVE_DATA);
    let held = published_case(dir.path(), "held", HELD);

    let out = dir.path().join("live-report");
    let r = util::run(&[
        "report",
        live.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--fail-on",
        "live-share<0.6",
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", util::stderr(&r));
    let e = &json_file(&out.join("summary.json"))["envoy"];
    assert_eq!(e["verdict"]["code"], "live-data");
    assert!(close(&e["heap"]["naive_share"], 0.67, 0.005), "{e}");
    assert!(close(&e["heap"]["live_share"], 0.915, 0.001), "{e}");
    let md = read(&out.join("report.md"));
    assert!(
        md.contains("91.5 % of the mapped heap")
            && md.contains("naive allocated / heap_size: 67.1 %"),
        "{md}"
    );

    let out = dir.path().join("held-report");
    let r = util::run(&[
        "report",
        held.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--fail-on",
        "live-share<0.6",
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", util::stderr(&r));
    let err = util::stderr(&r);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("live-share<0.6 tripped (0.6 %)"), "{err}");
    let e = &json_file(&out.join("summary.json"))["envoy"];
    assert_eq!(e["verdict"]["code"], "held-not-returned");
    assert!(close(&e["heap"]["live_share"], 0.006, 0.0005), "{e}");
    assert_eq!(
        e["heap"]["held_not_returned"],
        11_155_046_400u64 + 24_026_688
    );
    let html = read(&out.join("index.html"));
    assert!(
        html.contains("<strong>held-not-returned</strong>: memory held, not returned: only 0.6 %")
    );
    assert!(html.contains("10.4 GiB (pageheap_free"));

    // check alone, and growth, say the same.
    let c = util::run(&[
        "check",
        held.to_str().unwrap(),
        "--fail-on",
        "live-share<60%",
    ]);
    assert_eq!(c.status.code(), Some(1));
    let c = util::run(&[
        "check",
        live.to_str().unwrap(),
        "--fail-on",
        "live-share<0.6",
    ]);
    assert_eq!(c.status.code(), Some(0), "{}", util::stderr(&c));
    let g = util::run(&["growth", held.to_str().unwrap()]);
    assert!(
        util::stdout(&g).contains("verdict      held-not-returned"),
        "{}",
        util::stdout(&g)
    );

    // Only /stats gauges (a build without tcmalloc's /memory): the live share is unknown,
    // and a gate that cannot look is an input error.
    let stats_only: Vec<_> = (0..3u64)
        .map(|i| {
            let mut t = gateway_totals(100 + i);
            t.insert("memory.heap_size".into(), 0.into());
            t.insert("server.memory_allocated".into(), 673_689_312u64.into());
            t.insert("server.memory_heap_size".into(), 720_371_712u64.into());
            t
        })
        .collect();
    let run = envoy_run(
        dir.path(),
        "stats-only",
        &stats_only,
        serde_json::json!({}),
        None,
    );
    let c = util::run(&[
        "check",
        run.to_str().unwrap(),
        "--fail-on",
        "live-share<0.6",
    ]);
    assert_eq!(c.status.code(), Some(2));
    assert!(
        util::stderr(&c).contains("naive share is 93.5 %"),
        "{}",
        util::stderr(&c)
    );
}

#[test]
fn a_pod_file_adds_the_kubernetes_triage_section() {
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let r = util::run(&[
        "report",
        &testdata_run("storm"),
        "-o",
        out.to_str().unwrap(),
        "--pod",
        &k8s("gateway-replicas.json"),
        "--events",
        &k8s("events-readiness-only.json"),
        "--at",
        K8S_AT,
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", util::stderr(&r));
    let summary = json_file(&out.join("summary.json"));
    let k = &summary["kubernetes"];
    assert_eq!(k["file"], "gateway-replicas.json");
    assert_eq!(k["as_of"], K8S_AT);
    assert_eq!(k["events_given"], true);
    let pods = k["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 3);
    for pod in pods {
        let c = &pod["containers"][0];
        assert_eq!(c["verdict"]["code"], "oom", "{c}");
        assert_eq!(c["replicas"]["pattern"], "staggered", "{c}");
        assert_eq!(c["probes"]["pattern"], "readiness-only", "{c}");
    }
    assert!(
        summary.get("envoy").is_none(),
        "a Go run has no Envoy section"
    );
    // The run's own findings are unchanged by the pod file.
    let plain = json_file(&util::repo().join("tests/golden/report/storm/summary.json"));
    assert_eq!(summary["cycles"], plain["cycles"]);

    let html = read(&out.join("index.html"));
    assert!(html.contains("<section id=\"kubernetes\">"));
    assert!(html.contains("<a href=\"#kubernetes\">"));
    assert!(html.contains("istio-system/istio-ingressgateway-759b886f64-2pnzt"));
    assert!(html.contains("137 Error"));
    assert!(html.contains("readiness failures are the aftermath, not the cause"));
    let md = read(&out.join("report.md"));
    assert!(md.contains("### Kubernetes triage\n\n```text\ntriage of gateway-replicas.json as of 2024-05-02T12:00:00Z"), "{md}");
    assert!(md.contains("verdict      oom:"), "{md}");

    // Broken documents fail before anything is written, naming the file.
    for (pod, says) in [
        ("malformed.json", "not JSON"),
        ("not-a-pod.json", "not a Pod or a List of pods"),
    ] {
        let out = dir.path().join(format!("broken-{pod}"));
        let r = util::run(&[
            "report",
            &testdata_run("storm"),
            "-o",
            out.to_str().unwrap(),
            "--pod",
            &k8s(pod),
        ]);
        assert_eq!(r.status.code(), Some(2), "{pod}");
        let err = util::stderr(&r);
        assert!(err.contains(pod) && err.contains(says), "{err}");
        assert!(!out.join("index.html").exists());
    }
    let r = util::run(&[
        "report",
        &testdata_run("storm"),
        "-o",
        dir.path().join("x").to_str().unwrap(),
        "--events",
        &k8s("events-readiness-only.json"),
    ]);
    assert_eq!(r.status.code(), Some(2), "--events needs --pod");
}

#[test]
fn markup_in_a_pod_file_stays_text() {
    let dir = util::tempdir();
    let pod = serde_json::json!({
        "kind": "Pod",
        "metadata": {"name": SCRIPT_NAME, "namespace": IMG_NAME},
        "spec": {"containers": [{"name": "<img src=x onerror=alert(1)>",
            "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "128Mi"}}}]},
        "status": {"containerStatuses": [{"name": "<img src=x onerror=alert(1)>", "restartCount": 3,
            "state": {"running": {"startedAt": "2024-05-02T11:50:00Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "<b onmouseover=alert(2)>OOMKilled</b>",
                "startedAt": "2024-05-02T11:20:00Z", "finishedAt": "2024-05-02T11:49:50Z"}}}]},
    });
    let path = util::write(dir.path(), "hostile-pod.json", pod.to_string().as_bytes());
    let out = dir.path().join("report");
    let r = util::run(&[
        "report",
        &testdata_run("storm"),
        "-o",
        out.to_str().unwrap(),
        "--pod",
        path.to_str().unwrap(),
        "--at",
        K8S_AT,
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", util::stderr(&r));
    let html = without_own_scripts(&read(&out.join("index.html")));
    for raw in ["<script", "<img", "<b onmouseover"] {
        assert!(!html.contains(raw), "index.html holds {raw:?} unescaped");
    }
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    // In report.md the checklist sits in a fenced block, where markup is text.
    let md = read(&out.join("report.md"));
    let fenced: Vec<&str> = md.split("```").collect();
    for (i, part) in fenced.iter().enumerate() {
        if i % 2 == 0 {
            assert!(
                !part.contains("<img") && !part.contains("<script"),
                "outside the fence: {part}"
            );
        }
    }
}

#[test]
fn check_and_report_compare_the_boot_cycles_chosen_with_run_at_n() {
    let (new, base) = (demo_run("2.1.0"), demo_run("2.0.2"));
    let at2 = format!("{new}@2");
    let out = util::run(&[
        "check",
        &at2,
        "--baseline",
        &base,
        "--fail-on",
        "regression>1.5x",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    assert!(
        text.contains("(cycle 2 of 2.1.0)") && text.contains("(cycle 1 of 2.0.2)"),
        "{text}"
    );
    // The flag says the same as @N.
    let flag = util::run(&[
        "check",
        &new,
        "--cycle",
        "2",
        "--baseline",
        &base,
        "--fail-on",
        "regression>1.5x",
    ]);
    assert_eq!(util::stdout(&flag), text);
    // The report's headline names the chosen cycle, and only it is compared.
    let dir = util::tempdir();
    let out_dir = dir.path().join("report");
    let at1 = format!("{base}@1");
    let run = util::run(&[
        "report",
        &at2,
        "--baseline",
        &at1,
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", util::stderr(&run));
    let headline = util::stdout(&run);
    assert!(
        headline.contains("cycle 2 of 2.1.0 against cycle 1 of 2.0.2"),
        "{headline}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&read(&out_dir.join("summary.json"))).unwrap();
    assert!(
        summary["baseline"]["verdict"]
            .as_str()
            .unwrap()
            .contains("cycle 2 of 2.1.0")
    );
    // A cycle that is not there is an input error naming the run and the cycles there are.
    let bad = format!("{new}@7");
    let out = util::run(&[
        "check",
        &bad,
        "--baseline",
        &base,
        "--fail-on",
        "regression>1.5x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("boot cycle 7"),
        "{}",
        util::stderr(&out)
    );
}

#[test]
fn a_report_against_a_baseline_defines_a_and_b_and_wraps_long_site_names() {
    let dir = util::tempdir();
    let out = dir.path().join("report");
    let done = util::run(&[
        "report",
        &demo_run("2.1.0"),
        "--baseline",
        &demo_run("2.0.2"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(done.status.success(), "{}", util::stderr(&done));
    let html = read(&out.join("index.html"));
    let md = read(&out.join("report.md"));
    for text in [&html, &md] {
        assert!(
            text.contains("A = 2.0.2 (cycle") && text.contains("B = 2.1.0 (cycle"),
            "A and B are defined"
        );
    }
    // A long name in a table cell breaks anywhere rather than pushing the table off the page.
    assert!(
        html.contains("td.site { overflow-wrap: anywhere"),
        "the cell may wrap"
    );
    let check = util::run(&[
        "check",
        &demo_run("2.1.0"),
        "--baseline",
        &demo_run("2.0.2"),
        "--fail-on",
        "regression>1.5x",
    ]);
    let said = util::stderr(&check);
    assert!(
        said.contains("B (cycle") && said.contains("A, the baseline"),
        "{said}"
    );
}

/// The gate on the cgroup's memory against a baseline: the demo's 2.1.0 filled its cgroup
/// where 2.0.2 held 58.5 MiB; the recording has no memory.stat, so the anonymous gate says so.
#[test]
fn memory_regression_gates_the_cgroups_peak_against_the_baseline() {
    let check = |b: &str, a: &str| {
        util::run(&[
            "check",
            &demo_run(b),
            "--baseline",
            &demo_run(a),
            "--fail-on",
            "memory-regression>1.5x",
            "--fail-on",
            "anon-regression>1.5x",
        ])
    };
    let out = check("2.1.0", "2.0.2");
    let said = util::stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FAIL memory-regression>1.5x")
            && said.contains("4.35x")
            && said.contains("cgroup memory peaked at 254 MiB (B: cycle 1 of 2.1.0) against 58.5 MiB in the baseline (A: cycle 1 of 2.0.2)"),
        "{said}"
    );
    assert!(
        said.contains("n/a  anon-regression>1.5x")
            && said.contains("no cgroup memory.stat sampled"),
        "{said}"
    );
    // The other way round it passes.
    let out = check("2.0.2", "2.1.0");
    assert!(
        util::stdout(&out).contains("ok   memory-regression>1.5x"),
        "{}",
        util::stdout(&out)
    );
}
