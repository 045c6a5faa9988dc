//! `growth`, `check`, `compare`, `report` and `flame` on cluster runs (issue 11): each built
//! from recorded runs of testdata/runs copied into `targets/NAME/` beside a run.json of kind
//! "cluster" and an events.jsonl, as `collect` with several targets writes them.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util;

const LEAK: &str = "main.(*routerDataModel).buildEventList";

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

fn started_ms(recorded: &str) -> i64 {
    let run = util::repo().join("testdata/runs").join(recorded);
    let info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    info["started_ms"].as_i64().unwrap()
}

/// A cluster run at `root` of the named recorded runs, one node each, with `events`.
fn cluster(root: &Path, nodes: &[(&str, &str)], events: &[Value]) -> PathBuf {
    let mut targets = Vec::new();
    for (name, recorded) in nodes {
        let dir = format!("targets/{name}");
        copy_dir(
            &util::repo().join("testdata/runs").join(recorded),
            &root.join(&dir),
        );
        targets.push(json!({"name": name, "target": format!("agent:auto:{name}"),
                            "source": "agent", "dir": dir}));
    }
    let started = nodes.iter().map(|(_, r)| started_ms(r)).min().unwrap();
    let info = json!({"schema": 1, "tool": "heapwatch test", "kind": "cluster",
                      "started_ms": started, "resumed_ms": [], "label": null,
                      "targets": targets,
                      "logs": [{"name": "ctrl1", "path": "/var/log/ctrl1.log"}],
                      "marks": [{"label": "read-only", "regex": "entering read-only mode"}]});
    fs::write(
        root.join("run.json"),
        serde_json::to_vec_pretty(&info).unwrap(),
    )
    .unwrap();
    let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    fs::write(root.join("events.jsonl"), lines.join("\n") + "\n").unwrap();
    root.to_path_buf()
}

/// ctrl1 steady, ctrl2 leaking until OOM-killed, ctrl3 steady on another build; ctrl1's log
/// marked entering and leaving read-only mode while ctrl2 leaks.
fn three_nodes(root: &Path) -> PathBuf {
    let leak_start = started_ms("oomgrow");
    cluster(
        root,
        &[
            ("ctrl1", "steady"),
            ("ctrl2", "oomgrow"),
            ("ctrl3", "controller-2.0.2"),
        ],
        &[
            json!({"t_ms": leak_start + 3000, "label": "read-only", "log": "ctrl1",
                   "line": "2026-12-03T12:00:03Z entering read-only mode", "time_from": "line"}),
            json!({"t_ms": leak_start + 7600, "label": "read-write", "log": "deployer",
                   "line": "exiting read-only mode <b>now</b>", "time_from": "read"}),
        ],
    )
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_str(&util::stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", util::stdout(out), util::stderr(out)))
}

#[test]
fn growth_names_the_leak_under_the_leaking_node_only() {
    let dir = util::tempdir();
    let run = three_nodes(&dir.path().join("cluster"));

    let out = util::run(&["growth", arg(&run), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc = json_of(&out);
    assert_eq!(doc["kind"], "cluster");
    let nodes = doc["nodes"].as_object().unwrap();
    assert_eq!(
        nodes.keys().collect::<Vec<_>>(),
        ["ctrl1", "ctrl2", "ctrl3"]
    );
    let sites = |node: &str| -> Vec<String> {
        nodes[node]["cycles"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["sites"].as_array().unwrap().iter())
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(sites("ctrl2").first().map(String::as_str), Some(LEAK));
    assert_eq!(sites("ctrl1"), Vec::<String>::new());
    assert_eq!(sites("ctrl3"), Vec::<String>::new());
    assert_eq!(nodes["ctrl2"]["cycles"][0]["killed"], true);

    let out = util::run(&["growth", arg(&run)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    let heads: Vec<usize> = ["ctrl1", "ctrl2", "ctrl3"]
        .iter()
        .map(|n| {
            text.find(&format!("== node {n} (targets/{n}) =="))
                .unwrap_or_else(|| panic!("no section for {n}:\n{text}"))
        })
        .collect();
    assert!(heads[0] < heads[1] && heads[1] < heads[2], "{text}");
    let section = |i: usize| &text[heads[i]..heads.get(i + 1).copied().unwrap_or(text.len())];
    assert!(section(1).contains("growing sites"), "{text}");
    assert!(!section(0).contains("growing sites"), "{text}");
    assert!(!section(2).contains("growing sites"), "{text}");
}

#[test]
fn check_fails_naming_the_node_that_crossed_the_bar() {
    let dir = util::tempdir();
    let run = three_nodes(&dir.path().join("cluster"));

    let out = util::run(&["check", arg(&run), "--fail-on", "growth>5MiB/s"]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(
        err.contains("check failed: ctrl2: growth>5MiB/s tripped"),
        "{err}"
    );
    assert!(err.contains(LEAK), "{err}");
    assert!(!err.contains("ctrl1:") && !err.contains("ctrl3:"), "{err}");
    let text = util::stdout(&out);
    let line = |node: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(node))
            .unwrap_or_else(|| panic!("no line for {node}:\n{text}"))
            .to_string()
    };
    assert!(line("ctrl2").starts_with("FAIL"), "{text}");
    assert!(line("ctrl1").starts_with("ok"), "{text}");
    assert!(line("ctrl3").starts_with("ok"), "{text}");

    let out = util::run(&["check", arg(&run), "--fail-on", "kills>0"]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains("ctrl2: kills>0 tripped"),
        "{}",
        util::stderr(&out)
    );

    let out = util::run(&["check", arg(&run), "--fail-on", "growth>500MiB/s"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
}

#[test]
fn compare_matches_nodes_by_name_and_lists_the_rest() {
    let dir = util::tempdir();
    let a = cluster(
        &dir.path().join("a"),
        &[("ctrl3", "controller-2.0.2"), ("gone", "steady")],
        &[],
    );
    let b = cluster(
        &dir.path().join("b"),
        &[("ctrl1", "steady"), ("ctrl3", "controller-2.1.0")],
        &[],
    );
    let out = util::run(&["compare", arg(&a), arg(&b), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc = json_of(&out);
    let nodes = doc["nodes"].as_object().unwrap();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["ctrl3"]);
    assert_eq!(nodes["ctrl3"]["regressions"][0]["name"], LEAK);
    assert_eq!(doc["only_a"], json!(["gone"]));
    assert_eq!(doc["only_b"], json!(["ctrl1"]));

    let out = util::run(&["compare", arg(&a), arg(&b)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let text = util::stdout(&out);
    assert!(text.contains("== node ctrl3 ("), "{text}");
    assert!(!text.contains("== node ctrl1"), "{text}");
    assert!(text.contains("only in A (not compared): gone"), "{text}");
    assert!(text.contains("only in B (not compared): ctrl1"), "{text}");

    // A single run against a cluster: every node is compared with it.
    let single = util::repo().join("testdata/runs/controller-2.0.2");
    let out = util::run(&["compare", arg(&single), arg(&b), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let doc = json_of(&out);
    let nodes = doc["nodes"].as_object().unwrap();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["ctrl1", "ctrl3"]);
    assert_eq!(nodes["ctrl3"]["regressions"][0]["name"], LEAK);
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_report_has_one_timeline_of_every_node_with_kills_and_events() {
    let dir = util::tempdir();
    let run = three_nodes(&dir.path().join("cluster"));
    let out_dir = dir.path().join("report");
    let out = util::run(&[
        "report",
        arg(&run),
        "-o",
        arg(&out_dir),
        "--fail-on",
        "growth>5MiB/s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains("check failed: ctrl2: growth>5MiB/s tripped"),
        "{}",
        util::stderr(&out)
    );

    let html = read(&out_dir.join("index.html"));
    assert_eq!(
        html.matches("<figure class=\"chart\">").count(),
        1,
        "one shared chart"
    );
    let chart_at = html
        .find("<section id=\"timeline\">")
        .expect("a timeline section");
    let chart = &html[chart_at..html[chart_at..].find("</section>").unwrap() + chart_at];
    for node in ["ctrl1", "ctrl2", "ctrl3"] {
        assert!(
            chart.contains(&format!("{node} heap in use")),
            "{node} not on the chart"
        );
        assert!(
            html.contains(&format!("id=\"node-{node}\"")),
            "no section for {node}"
        );
    }
    assert!(chart.contains("ctrl2 OOM kill"), "the kill is not marked");
    assert!(!chart.contains("ctrl1 OOM kill"));
    assert!(chart.contains("read-only (ctrl1)"), "event marker missing");
    assert!(
        chart.contains("read-write (deployer)"),
        "event marker missing"
    );
    // The events table: time, label, log and the line, escaped.
    let events = &html[html.find("<section id=\"events\">").unwrap()..];
    assert!(events.contains("<td>read-only</td><td>ctrl1</td><td><code>2026-12-03T12:00:03Z entering read-only mode</code>"), "{events}");
    assert!(
        events.contains("exiting read-only mode &lt;b&gt;now&lt;/b&gt;"),
        "{events}"
    );
    assert!(!html.contains("<b>now</b>"));
    assert!(!html.contains("<script"));

    let md = read(&out_dir.join("report.md"));
    assert!(md.contains("## Events"), "{md}");
    assert!(md.contains("## Node ctrl2"), "{md}");

    let summary: Value = serde_json::from_str(&read(&out_dir.join("summary.json"))).unwrap();
    assert_eq!(summary["kind"], "cluster");
    assert_eq!(summary["node_order"], json!(["ctrl1", "ctrl2", "ctrl3"]));
    assert_eq!(summary["failed"], true);
    let node = |n: &str| &summary["nodes"][n];
    assert_eq!(node("ctrl2")["failed"], true);
    assert_eq!(node("ctrl1")["failed"], false);
    assert_eq!(node("ctrl2")["summary"]["cycles"][0]["killed"], true);
    assert_eq!(
        node("ctrl2")["summary"]["cycles"][0]["top_sites"][0]["name"],
        LEAK
    );
    assert_eq!(
        node("ctrl1")["summary"]["cycles"][0]["top_sites"],
        json!([])
    );
    assert_eq!(summary["events"].as_array().unwrap().len(), 2);
    assert_eq!(summary["events"][0]["label"], "read-only");

    // Each node's own report, the node's own log lines in it.
    for n in ["ctrl1", "ctrl2", "ctrl3"] {
        let page = read(&out_dir.join("nodes").join(n).join("index.html"));
        assert!(page.contains("<figure class=\"chart\">"), "{n}");
        let link = format!("href=\"nodes/{n}/index.html\"");
        assert!(html.contains(&link), "{link}");
    }
    let ctrl1 = read(&out_dir.join("nodes/ctrl1/index.html"));
    assert!(ctrl1.contains("<section id=\"events\">"));
    assert!(!read(&out_dir.join("nodes/ctrl2/index.html")).contains("<section id=\"events\">"));
}

#[test]
fn a_single_run_with_events_gets_the_markers_and_the_table() {
    let dir = util::tempdir();
    let run = dir.path().join("oomgrow");
    copy_dir(&util::repo().join("testdata/runs/oomgrow"), &run);
    let start = started_ms("oomgrow");
    let event = json!({"t_ms": start + 2500, "label": "read-only", "log": "ctrl2",
                       "line": "entering read-only mode", "time_from": "line"});
    fs::write(run.join("events.jsonl"), format!("{event}\n")).unwrap();
    let out_dir = dir.path().join("report");
    let out = util::run(&["report", arg(&run), "-o", arg(&out_dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let html = read(&out_dir.join("index.html"));
    assert!(html.contains("read-only (ctrl2)"), "no marker on the chart");
    assert!(html.contains("<td>2.5 s into the run</td><td>read-only</td><td>ctrl2</td>"));
    let summary: Value = serde_json::from_str(&read(&out_dir.join("summary.json"))).unwrap();
    assert_eq!(summary["events"][0]["label"], "read-only");
    assert!(read(&out_dir.join("report.md")).contains("## Events"));
}

#[test]
fn flame_draws_a_node_and_asks_for_one_at_a_cluster_root() {
    let dir = util::tempdir();
    let run = three_nodes(&dir.path().join("cluster"));
    let svg = dir.path().join("out.svg");
    let out = util::run(&["flame", arg(&run), "--growth", "-o", arg(&svg)]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(
        err.contains("is a cluster run; draw one of its nodes"),
        "{err}"
    );
    assert!(err.contains("targets/ctrl2"), "{err}");

    let node = run.join("targets/ctrl2");
    let out = util::run(&["flame", arg(&node), "--growth", "-o", arg(&svg)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert!(read(&svg).contains(LEAK) || read(&svg).contains("buildEventList"));
}

#[test]
fn a_cluster_baseline_pairs_nodes_by_name_and_a_single_run_refuses_one() {
    let dir = util::tempdir();
    let old = cluster(
        &dir.path().join("old"),
        &[("ctrl1", "steady"), ("ctrl3", "controller-2.0.2")],
        &[],
    );
    let new = cluster(
        &dir.path().join("new"),
        &[("ctrl1", "steady"), ("ctrl3", "controller-2.1.0")],
        &[],
    );
    let out = util::run(&[
        "check",
        arg(&new),
        "--baseline",
        arg(&old),
        "--fail-on",
        "regression>1.5x",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(err.contains("ctrl3: regression>1.5x tripped"), "{err}");
    assert!(!err.contains("ctrl1:"), "{err}");

    // One run against a whole cluster: refused, naming the way to pick a node.
    let single = util::repo().join("testdata/runs/controller-2.1.0");
    let out = util::run(&[
        "check",
        arg(&single),
        "--baseline",
        arg(&old),
        "--fail-on",
        "regression>1.5x",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(err.contains("is a cluster run (ctrl1, ctrl3)"), "{err}");
    assert!(err.contains("targets/NAME"), "{err}");
}

#[test]
fn a_node_without_its_directory_is_named_in_the_error() {
    let dir = util::tempdir();
    let run = three_nodes(&dir.path().join("cluster"));
    fs::remove_dir_all(run.join("targets/ctrl3")).unwrap();
    for command in ["growth", "check"] {
        let mut args = vec![command, arg(&run)];
        if command == "check" {
            args.extend(["--fail-on", "kills>0"]);
        }
        let out = util::run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{command}: {}",
            util::stderr(&out)
        );
        let err = util::stderr(&out);
        assert!(err.contains("node ctrl3"), "{command}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A node whose process had no heap profiling linked in (every heap capture refused, as the
/// proc source refuses one) is listed with its reason; every other node is reported.
#[test]
fn a_node_with_no_heap_profiling_is_listed_with_why_and_the_others_are_reported() {
    let dir = util::tempdir();
    let run = cluster(
        &dir.path().join("node"),
        &[
            ("infra_etcd-0_etcd", "steady"),
            ("infra_plain-1_app", "steady"),
        ],
        &[],
    );
    let plain = run.join("targets/infra_plain-1_app");
    fs::remove_dir_all(plain.join("profiles")).unwrap();
    let start = started_ms("steady");
    let why = "proc:4242: process 4242 has heap profiling disabled by the linker \
               (runtime.disableMemoryProfiling: nothing in the program calls runtime.MemProfile \
               or imports runtime/pprof), so it keeps no heap profile to read";
    let lines: Vec<String> = (1..=3)
        .map(|seq| {
            json!({"seq": seq, "kind": "heap", "file": null, "incarnation": 1,
                   "t_ms": start + seq * 250, "latency_ms": 1.0, "bytes": 0, "dup_of": null,
                   "totals": {}, "interval_ms": 250, "error": why, "error_kind": "refused"})
            .to_string()
        })
        .collect();
    fs::write(plain.join("manifest.jsonl"), lines.join("\n") + "\n").unwrap();

    let out_dir = dir.path().join("report");
    let out = util::run(&["report", arg(&run), "-o", arg(&out_dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains("node infra_plain-1_app not reported: "),
        "{}",
        util::stderr(&out)
    );
    let md = read(&out_dir.join("report.md"));
    let row = md
        .lines()
        .find(|l| l.starts_with("| `infra_plain-1_app` |"))
        .unwrap_or_else(|| panic!("no row for the node left out: {md}"));
    assert!(row.contains("not reported: "), "{row}");
    assert!(
        row.contains("heap profiling disabled by the linker"),
        "{row}"
    );
    // The other node has its section, its name as written (no escapes in running text).
    assert!(md.contains("\n## Node infra_etcd-0_etcd\n"), "{md}");
    assert!(out_dir.join("nodes/infra_etcd-0_etcd/index.html").is_file());
    let html = read(&out_dir.join("index.html"));
    assert!(html.contains("<td>infra_plain-1_app</td>"), "{html}");
    let summary: Value = serde_json::from_str(&read(&out_dir.join("summary.json"))).unwrap();
    assert_eq!(
        summary["left_out"][0]["node"], "infra_plain-1_app",
        "{summary:#}"
    );
    assert!(
        summary["left_out"][0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("runtime.MemProfile")),
        "{summary:#}"
    );
    assert_eq!(summary["node_order"], json!(["infra_etcd-0_etcd"]));
}

/// Issue 35, item 6: the report of a `watch` directory gives each container's own report its
/// name as the kubelet's files give it (not its directory's), in plain text wherever the
/// output is not markdown, and no build it does not know: the node directory's name ("node")
/// named each container's build.
#[test]
fn a_watched_containers_report_is_titled_with_its_name_and_names_no_build_it_does_not_know() {
    let dir = util::tempdir();
    let run = cluster(
        &dir.path().join("node"),
        &[("infra_etcd-0_etcd", "steady")],
        &[],
    );
    // As `watch` writes them: the container's name, its directory, its cgroup as the target.
    let target = "proc:cgroup:/sys/fs/cgroup/kubepods/pod1234/etcd";
    let mut info: Value = serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
    info["targets"][0]["name"] = json!("infra/etcd-0/etcd");
    info["targets"][0]["target"] = json!(target);
    info["targets"][0]["source"] = json!("proc");
    fs::write(run.join("run.json"), serde_json::to_vec(&info).unwrap()).unwrap();
    let node_json = run.join("targets/infra_etcd-0_etcd/run.json");
    let mut node: Value = serde_json::from_slice(&fs::read(&node_json).unwrap()).unwrap();
    node["target"] = json!(target);
    node["source"] = json!("proc");
    fs::write(&node_json, serde_json::to_vec(&node).unwrap()).unwrap();

    let out_dir = dir.path().join("report");
    let out = util::run(&["report", arg(&run), "-o", arg(&out_dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let own = out_dir.join("nodes/infra_etcd-0_etcd");
    let html = read(&own.join("index.html"));
    assert!(
        html.contains("<title>heapwatch report: infra/etcd-0/etcd</title>"),
        "the page's title"
    );
    assert!(
        html.contains("<h1>heapwatch report <small>infra/etcd-0/etcd</small></h1>"),
        "the heading"
    );
    assert!(!html.contains("\\_"), "no markdown escape in the page");
    let md = read(&own.join("report.md"));
    assert!(
        md.starts_with("## heapwatch report: infra/etcd-0/etcd\n"),
        "{md}"
    );
    let row = md
        .lines()
        .find(|l| l.starts_with("| 1 |"))
        .unwrap_or_else(|| panic!("no boot-cycle row: {md}"));
    assert!(
        row.starts_with("| 1 | - |"),
        "no build known, none named: {row}"
    );
    let summary: Value = serde_json::from_str(&read(&own.join("summary.json"))).unwrap();
    assert_eq!(summary["cycles"][0]["build"], "", "{summary:#}");
    // growth on the node: no build named after the directory either.
    let node_dir = run.join("targets/infra_etcd-0_etcd");
    let growth = util::run(&["growth", arg(&node_dir)]);
    let text = util::stdout(&growth);
    assert!(!text.contains("build node"), "{text}");
    // The terminal and the cluster page name the container as written.
    assert!(
        util::stdout(&out).contains("infra/etcd-0/etcd: "),
        "{}",
        util::stdout(&out)
    );
}
