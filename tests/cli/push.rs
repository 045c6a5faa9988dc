//! `heapwatch push` against a real receiver of Pyroscope's push API
//! (testdata/go/pyroscope-receiver: Pyroscope's generated connect handler, every profile decoded
//! with github.com/google/pprof/profile). Recorded runs of testdata/runs are pushed from a copy
//! (a push writes RUN/pushes.jsonl); what arrived is checked against the run's own manifest.

mod check;
mod faults;
mod live;
mod live_drain;
mod proto_check;
pub(crate) mod receiver;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util;
pub use check::{
    assert_all_delivered_once, assert_all_delivered_once_among, assert_allocations_add_up, pushable,
};
use receiver::Receiver;

/// A copy of testdata/runs/NAME in a fresh temp dir.
pub fn copy_run(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = util::tempdir();
    let to = dir.path().join(name);
    copy_dir(&util::repo().join("testdata/runs").join(name), &to);
    (dir, to)
}

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

pub fn lines(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

fn label<'a>(event: &'a Value, name: &str) -> Option<&'a str> {
    event["labels"][name].as_str()
}

#[test]
fn every_capture_of_a_recorded_run_arrives_once_as_a_point_with_its_labels_and_figures() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0"]) else {
        return;
    };
    // Three boot cycles, OOM kills, failed attempts and duplicates.
    let (_dir, run) = copy_run("oomgrow");
    let out = util::run(&["push", run.to_str().unwrap(), "--to", &receiver.url]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let stdout = util::stdout(&out);
    let sent = pushable(&run).len();
    let duplicates = pushable(&run)
        .iter()
        .filter(|r| !r["dup_of"].is_null())
        .count();
    assert!(duplicates > 0, "the run has duplicates, and they are sent");
    assert!(
        stdout.contains(&format!("{sent} delivered, 0 refused")),
        "{stdout}"
    );
    assert!(
        stdout.contains("as service_name \"oomgrow\" (the executable's name"),
        "{stdout}"
    );

    let events = assert_all_delivered_once(&run, &receiver, &[]);
    assert_eq!(
        assert_allocations_add_up(&run, &events),
        3,
        "all three cycles add up"
    );
    let info: Value =
        serde_json::from_str(&fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let target = info["target"].as_str().unwrap().to_string();
    let manifest: HashMap<u64, Value> = pushable(&run)
        .into_iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    let mut cycles = std::collections::BTreeSet::new();
    for (seq, event) in &events {
        let record = &manifest[seq];
        let heap = record["kind"] == "heap";
        let labels: BTreeMap<String, String> =
            serde_json::from_value(event["labels"].clone()).unwrap();
        let cycle = record["incarnation"].to_string();
        let mut want: BTreeMap<String, String> = [
            ("__name__", if heap { "memory" } else { "goroutine" }),
            ("service_name", "oomgrow"),
            ("heapwatch_target", &target),
            ("heapwatch_boot_cycle", &cycle),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if heap {
            want.insert("__delta__".into(), "false".into());
        }
        assert_eq!(
            labels, want,
            "seq {seq}: no build known, so no service_version"
        );
        cycles.insert(cycle);
        assert_eq!(event["headers"]["Content-Type"], "application/proto");
        assert_eq!(event["headers"]["Connect-Protocol-Version"], "1");
    }
    assert_eq!(cycles.len(), 3, "all three boot cycles: {cycles:?}");
    let requests: std::collections::BTreeSet<i64> = receiver
        .accepted()
        .iter()
        .map(|e| e["request"].as_i64().unwrap())
        .collect();
    assert!(
        requests.len() * 4 < sent,
        "{sent} captures in {} requests: batched",
        requests.len()
    );

    // A second push sends nothing.
    let before = receiver.accepted().len();
    let events_before = receiver.requests();
    let again = util::run(&["push", run.to_str().unwrap(), "--to", &receiver.url]);
    assert_eq!(again.status.code(), Some(0), "{}", util::stderr(&again));
    assert!(
        util::stdout(&again).contains(&format!(
            "0 delivered, 0 refused; skipped {sent} already sent"
        )),
        "{}",
        util::stdout(&again)
    );
    assert_eq!(receiver.accepted().len(), before, "nothing sent twice");
    assert_eq!(receiver.requests(), events_before, "not even a request");

    // --skip-duplicates: fewer points, allocations the same over each cycle.
    let (_dir2, thin) = copy_run("oomgrow");
    let out = util::run(&[
        "push",
        thin.to_str().unwrap(),
        "--to",
        &receiver.url,
        "--skip-duplicates",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert!(
        util::stdout(&out).contains(&format!("{} delivered, 0 refused", sent - duplicates)),
        "{}",
        util::stdout(&out)
    );
}

/// Appends a `cycle` record as the collector writes one, naming the boot cycle's build.
fn add_cycle_record(run: &Path, incarnation: u32, app_id: &str, version: &str) {
    let manifest = run.join("manifest.jsonl");
    let next = lines(&manifest)
        .iter()
        .filter_map(|r| r["seq"].as_u64())
        .max()
        .unwrap()
        + 1;
    let record = serde_json::json!({
        "seq": next, "kind": "cycle", "file": null, "incarnation": incarnation, "t_ms": 0,
        "latency_ms": 0.0, "bytes": 0, "dup_of": null, "error": null,
        "build": {"app_id": app_id, "version": version},
    });
    let mut text = fs::read_to_string(&manifest).unwrap();
    text.push_str(&format!("{record}\n"));
    fs::write(manifest, text).unwrap();
}

#[test]
fn tls_credentials_tenant_and_the_build_labels_reach_the_server() {
    let certs = util::tempdir();
    let tls = certs.path().to_str().unwrap();
    let Some(receiver) = Receiver::start(&[
        "-reject-older-than",
        "0",
        "-tls",
        tls,
        "-require-header",
        "Authorization: Bearer s3cret",
    ]) else {
        return;
    };
    let url = receiver.url.replace("http://", "https://");
    let cacert = certs.path().join("ca.pem");
    let token = util::write(certs.path(), "token", b"Authorization: Bearer s3cret\n");
    let (_dir, run) = copy_run("controller-2.1.0");
    let run_arg = run.to_str().unwrap();

    // The bundled roots do not know the test CA: a clear TLS error, nothing recorded.
    let out = util::run(&["push", run_arg, "--to", &url]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TLS") && stderr.contains("--push-cacert"),
        "{stderr}"
    );

    // The right CA, no token: refused as unauthenticated, once, and nothing recorded.
    let out = util::run(&[
        "push",
        run_arg,
        "--to",
        &url,
        "--push-cacert",
        cacert.to_str().unwrap(),
    ]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("--push-header"),
        "{stderr}"
    );
    assert_eq!(receiver.requests(), 1, "a rejection stops the push at once");
    assert!(lines(&run.join("pushes.jsonl")).is_empty());

    // With the token from a file, a tenant, and the build named by a cycle record.
    add_cycle_record(&run, 1, "ctrl1", "v2.1.0-rc1");
    let out = util::run(&[
        "push",
        run_arg,
        "--to",
        &url,
        "--push-cacert",
        cacert.to_str().unwrap(),
        "--push-header",
        &format!("@{}", token.display()),
        "--push-tenant",
        "acme",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    let events = assert_all_delivered_once(&run, &receiver, &[]);
    for event in events.values() {
        assert_eq!(event["tenant"], "acme");
        assert_eq!(label(event, "service_name"), Some("ctrl1"), "the app id");
        assert_eq!(
            label(event, "service_version"),
            Some("v2.1.0-rc1"),
            "the cycle's build over the run's --label 2.1.0"
        );
    }
    let to = &lines(&run.join("pushes.jsonl"))[0]["to"];
    assert_eq!(to.as_str(), Some(url.as_str()));
}

#[test]
fn the_run_label_is_the_version_and_the_labels_given_are_kept_for_every_later_push() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0"]) else {
        return;
    };
    let (_dir, run) = copy_run("controller-2.0.2");
    let run_arg = run.to_str().unwrap();
    // Fields this version does not know, or reads as absent: the rewrite keeps them as written.
    let mut before: Value =
        serde_json::from_str(&fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    before["from_a_later_version"] = serde_json::json!({"x": [1, 2]});
    before["options"]["gc"] = "not a bool".into();
    before["options"]["later_option"] = 7.into();
    fs::write(run.join("run.json"), before.to_string()).unwrap();
    let out = util::run(&[
        "push",
        run_arg,
        "--to",
        &receiver.url,
        "--service",
        "ziti-controller",
        "--push-label",
        "cluster=eu-1",
        "--push-label",
        "env=staging",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert!(util::stdout(&out).contains("as given with --service"));
    let check = |events: &BTreeMap<u64, Value>, env: &str| {
        for event in events.values() {
            assert_eq!(label(event, "service_name"), Some("ziti-controller"));
            assert_eq!(label(event, "service_version"), Some("2.0.2"));
            assert_eq!(label(event, "cluster"), Some("eu-1"));
            assert_eq!(label(event, "env"), Some(env));
        }
    };
    check(&assert_all_delivered_once(&run, &receiver, &[]), "staging");
    let info: Value =
        serde_json::from_str(&fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["options"]["push"]["service"], "ziti-controller");
    assert_eq!(info["options"]["push"]["labels"]["cluster"], "eu-1");
    let mut kept = info.clone();
    kept["options"]
        .as_object_mut()
        .unwrap()
        .remove("push")
        .unwrap();
    assert_eq!(kept, before, "run.json as it was, the push settings added");

    // The server wiped (restarted empty at the same URL): pushes.jsonl says everything was
    // delivered, so a plain push sends nothing; --resend sends the run again with the labels
    // it keeps, one changed by the flag, without touching pushes.jsonl by hand.
    let mut receiver = receiver;
    receiver.restart(std::time::Duration::from_millis(100));
    let before = receiver.accepted().len();
    let out = util::run(&["push", run_arg, "--to", &receiver.url]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_eq!(
        receiver.accepted().len(),
        before,
        "nothing without --resend"
    );
    let resent = util::run(&[
        "push",
        run_arg,
        "--to",
        &receiver.url,
        "--resend",
        "--push-label",
        "env=prod",
    ]);
    assert_eq!(resent.status.code(), Some(0), "{}", util::stderr(&resent));
    let again: Vec<Value> = receiver.accepted().split_off(before);
    assert_eq!(again.len(), pushable(&run).len(), "the whole run again");
    let by_seq: BTreeMap<u64, Value> = again
        .into_iter()
        .enumerate()
        .map(|(i, e)| (i as u64, e))
        .collect();
    check(&by_seq, "prod");
    let after = util::run(&["push", run_arg, "--to", &receiver.url]);
    assert!(
        util::stdout(&after).contains("0 delivered"),
        "the resend is complete: {}",
        util::stdout(&after)
    );
}

#[test]
fn old_captures_are_refused_once_reported_in_one_line_and_restamp_sends_them() {
    let (_dir, run) = copy_run("steady");
    let captures = pushable(&run);
    // The ingestion window starts at the request of a capture in the middle of the run.
    let middle = &captures[captures.len() / 2];
    let window_start = middle["t_ms"].as_i64().unwrap();
    let middle_seq = middle["seq"].as_u64().unwrap();
    let old: Vec<u64> = captures
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .filter(|&s| s < middle_seq)
        .collect();
    let Some(receiver) = Receiver::start(&["-window-start", &window_start.to_string()]) else {
        return;
    };
    let run_arg = run.to_str().unwrap();
    let out = util::run(&["push", run_arg, "--to", &receiver.url]);
    let stderr = util::stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "partly refused is exit 2: {stderr}"
    );
    // First what happened and what to do, then the server's words.
    let at = stderr
        .lines()
        .position(|l| l.contains("refused by"))
        .unwrap_or_else(|| panic!("no refusal line: {stderr}"));
    let all: Vec<&str> = stderr.lines().collect();
    let (line, words) = (all[at], all[at + 1]);
    let count = format!("{} captures of", old.len());
    for part in [
        count.as_str(),
        "older than its ingestion window",
        "--restamp",
        "pushes.jsonl",
    ] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
    assert!(line.len() < 300, "a line to read: {line}");
    for part in [
        "the server said: HTTP 400 invalid_argument",
        "outside of ingestion window",
    ] {
        assert!(words.contains(part), "{part:?} not in {words}");
    }
    // Each refused capture was refused alone once (after its batch was refused).
    let refused_alone = receiver.refused().len();
    assert!(
        refused_alone >= old.len(),
        "{refused_alone} refusals for {}",
        old.len()
    );
    let outcomes = lines(&run.join("pushes.jsonl"));
    let mut refused: Vec<u64> = outcomes
        .iter()
        .filter(|r| r["outcome"] == "refused")
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    refused.sort();
    assert_eq!(refused, old);
    assert!(
        outcomes
            .iter()
            .filter(|r| r["outcome"] == "refused")
            .all(|r| r["attempts"].as_u64().unwrap() <= 2),
        "never retried: once in a batch, once alone"
    );
    assert_eq!(
        receiver.accepted().len(),
        captures.len() - old.len(),
        "the rest delivered"
    );

    // Again as it was: nothing is sent, the refusals stand and are said again.
    let requests = receiver.requests();
    let again = util::run(&["push", run_arg, "--to", &receiver.url]);
    let stderr = util::stderr(&again);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(util::stdout(&again).contains(&format!("{} refused before", old.len())));
    assert!(
        stderr.contains("in an earlier push") && stderr.contains("--restamp"),
        "{stderr}"
    );
    assert_eq!(receiver.requests(), requests);

    // --restamp: the refused captures go stamped with the push time, their own in a label.
    let pushed_at = util::unix_ms();
    let restamped = util::run(&["push", run_arg, "--to", &receiver.url, "--restamp"]);
    assert_eq!(
        restamped.status.code(),
        Some(0),
        "{}",
        util::stderr(&restamped)
    );
    let events = assert_all_delivered_once(&run, &receiver, &old);
    let manifest: HashMap<u64, Value> = captures
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r.clone()))
        .collect();
    for seq in &old {
        let event = &events[seq];
        let at = event["time_nanos"].as_i64().unwrap() / 1_000_000;
        assert!(
            at >= pushed_at,
            "seq {seq} stamped {at}, pushed from {pushed_at}"
        );
        let captured = label(event, "heapwatch_captured_at").expect("heapwatch_captured_at");
        let t_ms = manifest[seq]["t_ms"].as_i64().unwrap();
        assert!(
            captured.starts_with(&utc_prefix(t_ms)),
            "seq {seq}: captured_at {captured} against the request at {t_ms}"
        );
    }
}

/// `YYYY-MM-DDTHH:MM` of unix ms, to hold a label against the manifest's time.
fn utc_prefix(ms: i64) -> String {
    heapwatch::time::rfc3339(ms)[..16].to_string()
}

#[test]
fn bad_input_names_what_is_wrong() {
    let dir = util::tempdir();
    let missing = dir.path().join("no-such-run");
    let out = util::run(&[
        "push",
        missing.to_str().unwrap(),
        "--to",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("no-such-run"),
        "{}",
        util::stderr(&out)
    );
    assert!(util::stderr(&out).contains("not a heapwatch run"));

    let (_dir, run) = copy_run("steady");
    let out = util::run(&["push", run.to_str().unwrap(), "--to", "127.0.0.1:4040"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("--to 127.0.0.1:4040: no scheme: write http://127.0.0.1:4040"),
        "{}",
        util::stderr(&out)
    );
    let out = util::run(&[
        "push",
        run.to_str().unwrap(),
        "--to",
        "http://127.0.0.1:9",
        "--push-label",
        "heapwatch_node=x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("set by heapwatch or Pyroscope itself"),
        "{}",
        util::stderr(&out)
    );
    let out = util::run(&["push", run.to_str().unwrap(), "--to", "ftp://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("http:// or https://"),
        "{}",
        util::stderr(&out)
    );

    let out = util::run(&[
        "push",
        run.to_str().unwrap(),
        "--to",
        "http://127.0.0.1:9",
        "--push-header",
        "no colon",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("--push-header"),
        "{}",
        util::stderr(&out)
    );
    let out = util::run(&[
        "push",
        run.to_str().unwrap(),
        "--to",
        "http://127.0.0.1:9",
        "--push-header",
        "@/no/such/token-file",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("/no/such/token-file"),
        "{}",
        util::stderr(&out)
    );

    // A profile file gone from the run: named, the rest still delivered.
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0"]) else {
        return;
    };
    let victim = pushable(&run)[3]["file"].as_str().unwrap().to_string();
    // Duplicates name the same file: they go with it.
    let with_it = pushable(&run)
        .iter()
        .filter(|r| r["file"] == victim.as_str())
        .count();
    fs::remove_file(run.join(&victim)).unwrap();
    let out = util::run(&["push", run.to_str().unwrap(), "--to", &receiver.url]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains(&victim),
        "{}",
        util::stderr(&out)
    );
    assert_eq!(receiver.accepted().len(), pushable(&run).len() - with_it);
}

#[test]
fn a_cluster_run_pushes_every_target_with_its_node_name_and_target_label() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0"]) else {
        return;
    };
    let dir = util::tempdir();
    let cluster = dir.path().join("cluster");
    let mut nodes = Vec::new();
    for (node, run) in [("ctrl1", "steady"), ("ctrl2", "storm")] {
        copy_dir(
            &util::repo().join("testdata/runs").join(run),
            &cluster.join("targets").join(node),
        );
        nodes.push(serde_json::json!({
            "name": node, "target": format!("http://{node}:6060"), "source": "http",
            "dir": format!("targets/{node}"),
        }));
    }
    // The cluster's run.json names its nodes, as `collect A B --name …` writes it.
    let info = serde_json::json!({
        "schema": 1, "tool": "heapwatch", "kind": "cluster", "started_ms": 1,
        "targets": nodes,
    });
    fs::write(cluster.join("run.json"), info.to_string()).unwrap();
    let out = util::run(&["push", cluster.to_str().unwrap(), "--to", &receiver.url]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_eq!(
        util::stdout(&out).lines().count(),
        2,
        "one summary per target"
    );
    let mut targets = std::collections::BTreeSet::new();
    for node in ["ctrl1", "ctrl2"] {
        let run = cluster.join("targets").join(node);
        let events = assert_all_delivered_once_among(&run, &receiver);
        targets.extend(
            events
                .values()
                .map(|e| label(e, "heapwatch_target").unwrap().to_string()),
        );
        assert!(
            events
                .values()
                .all(|e| label(e, "heapwatch_node") == Some(node)),
            "{node}: each capture carries its node's name"
        );
    }
    assert_eq!(targets.len(), 2, "{targets:?}");
}

#[test]
fn credentials_in_the_url_become_basic_auth_and_are_never_recorded() {
    // "user:pa ss" in base64, as the receiver must see it.
    let Some(receiver) = Receiver::start(&[
        "-reject-older-than",
        "0",
        "-require-header",
        "Authorization: Basic dXNlcjpwYSBzcw==",
    ]) else {
        return;
    };
    let (_dir, run) = copy_run("steady");
    let url = receiver.url.replace("http://", "http://user:pa%20ss@");
    let out = util::run(&["push", run.to_str().unwrap(), "--to", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_all_delivered_once(&run, &receiver, &[]);
    let journal = fs::read_to_string(run.join("pushes.jsonl")).unwrap();
    let printed = util::stdout(&out) + &util::stderr(&out);
    for shown in [journal.as_str(), printed.as_str()] {
        assert!(
            !shown.contains("pa%20ss") && !shown.contains("user:"),
            "{shown}"
        );
        assert!(shown.contains(&receiver.url), "{shown}");
    }
}
