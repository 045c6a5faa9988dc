//! The end of a live push and what it leaves: the drain (what it sends, what it waits for,
//! what it records as maybe delivered), the labels kept for the push that finishes the run,
//! each node of a cluster with its name, and the collector's rate against a server that
//! answers as Pyroscope v2 does.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::live::{
    Collect, Target, assert_live_delivery, assert_live_delivery_with, new_run, percentiles,
    push_args, push_line, timings,
};
use super::receiver::Receiver;
use super::{assert_all_delivered_once, lines, pushable};
use crate::util;

/// A receiver that holds every push: the collector stores at its own pace, the drain at exit
/// is bounded and says in one line what it left, and `heapwatch push` sends it all once the
/// receiver answers again. Prints the capture-to-durable time with and without the push.
#[test]
fn live_hanging_receiver_delays_no_capture_and_what_is_left_is_sent_later() {
    let Some(target) = Target::start() else {
        return;
    };
    let mut receiver = Receiver::start(&["-fault", "hang all"]).unwrap();
    // Segments without the push and with it, alternating on the same run and target, so a
    // change in the machine's load falls on both.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (seconds, rounds) = (
        env("HEAPWATCH_PUSH_LATENCY_SECS", 2),
        env("HEAPWATCH_PUSH_LATENCY_ROUNDS", 2),
    );
    let duration = format!("{seconds}s");
    let (_dir, run) = new_run();
    let url = receiver.url.clone();
    let plain = ["--duration", duration.as_str(), "--label", "9.9.9"];
    let pushing = push_args(
        &url,
        &[
            "--duration",
            duration.as_str(),
            "--label",
            "9.9.9",
            "--push-timeout",
            "1s",
            "--push-drain",
            "1500ms",
        ],
    );
    let last_seq = |run: &Path| {
        lines(&run.join("manifest.jsonl"))
            .iter()
            .map(|r| r["seq"].as_u64().unwrap())
            .max()
            .unwrap_or(0)
    };
    let (mut lat_plain, mut dur_plain, mut lat_push, mut dur_push) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut took = Vec::new();
    let mut stderr = String::new();
    for _ in 0..rounds {
        let from = last_seq(&run) + 1;
        Collect::spawn(&run, &target.url, &plain).finish();
        let (latency, durable) = timings(&run, from..=u64::MAX);
        lat_plain.extend(latency);
        dur_plain.extend(durable);

        let from = last_seq(&run) + 1;
        let started = Instant::now();
        stderr = Collect::spawn(&run, &target.url, &pushing).finish();
        took.push(format!("{:.2}s", started.elapsed().as_secs_f64()));
        let (latency, durable) = timings(&run, from..=u64::MAX);
        lat_push.extend(latency);
        dur_push.extend(durable);
    }
    assert!(!receiver.faults().is_empty(), "pushes were held");
    assert!(receiver.accepted().is_empty());
    let line = push_line(&stderr);
    // What was in flight at the drain's end was waited for, went unanswered, and is recorded
    // as maybe delivered; the rest is unsent.
    let unanswered = lines(&run.join("pushes.jsonl"))
        .iter()
        .filter(|r| r["outcome"] == "unanswered")
        .count();
    assert!(unanswered > 0, "{line}");
    assert!(line.contains("sent without an answer"), "{line}");
    assert!(
        stderr.contains("may be in the store") && stderr.contains("--retry-unanswered"),
        "{stderr}"
    );
    eprintln!(
        "capture to durable, {rounds} × ({duration} without, {duration} with --push) at \
         --interval 100ms, the receiver hanging every push (ms):"
    );
    eprintln!("  durable_ms without --push: {}", percentiles(dur_plain));
    eprintln!("  durable_ms with --push:    {}", percentiles(dur_push));
    eprintln!("  latency_ms without --push: {}", percentiles(lat_plain));
    eprintln!("  latency_ms with --push:    {}", percentiles(lat_push));
    eprintln!(
        "  each collect --push {duration} took {} in all (drain bound 1.5s)",
        took.join(", ")
    );

    // Back: what the drain left is sent by `heapwatch push`, the captures before the push
    // included, each once; it says the unanswered ones wait to be asked for (exit 2), and
    // --retry-unanswered sends them (the hanging receiver stored none of them).
    receiver.command("ok");
    let out = util::run(&["push", run.to_str().unwrap(), "--to", &receiver.url]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--retry-unanswered"), "{stderr}");
    let out = util::run(&[
        "push",
        run.to_str().unwrap(),
        "--to",
        &receiver.url,
        "--retry-unanswered",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_live_delivery(&run, &receiver, &target.url);
}

/// `--service`, `--push-label` and the build label are kept in the run: after a drain cut
/// short by a server that holds every request, a later `heapwatch push` without them sends
/// the rest under the same labels.
#[test]
fn live_labels_survive_a_drain_cut_and_a_later_push() {
    let Some(target) = Target::start() else {
        return;
    };
    let mut receiver = Receiver::start(&["-fault", "hang all"]).unwrap();
    let (_dir, run) = new_run();
    let url = receiver.url.clone();
    let args = push_args(
        &url,
        &[
            "--duration",
            "2s",
            "--label",
            "9.9.9",
            "--service",
            "gateway",
            "--push-label",
            "cluster=eu-1",
            "--push-label",
            "pod=gateway-0",
            "--push-timeout",
            "500ms",
            "--push-drain",
            "300ms",
        ],
    );
    let stderr = Collect::spawn(&run, &target.url, &args).finish();
    let line = push_line(&stderr);
    assert!(
        line.contains("sent without an answer"),
        "the drain was cut: {line}"
    );
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["options"]["push"]["service"], "gateway", "{info}");

    receiver.command("ok");
    let out = util::run(&[
        "push",
        run.to_str().unwrap(),
        "--to",
        &receiver.url,
        "--retry-unanswered",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert!(
        // Given to the collect that recorded it, not to this push: kept in run.json.
        util::stdout(&out).contains("\"gateway\" (as kept in the run's run.json"),
        "{}",
        util::stdout(&out)
    );
    assert_live_delivery_with(
        &run,
        &receiver,
        &target.url,
        "gateway",
        &[("cluster", "eu-1"), ("pod", "gateway-0")],
    );
}

/// The collector's rate against a server that answers as Pyroscope v2 does, once its segment
/// is flushed (500 ms a request): `collect --push` at `--interval 100ms` with a GC per
/// capture, heap and goroutine profiles, for 60 s (HEAPWATCH_PUSH_KEEPUP_SECS), leaves nothing
/// unsent after a 10 s drain. One request at a time, one capture each, took 2 a second.
#[test]
fn live_push_keeps_up_with_the_collector_against_a_server_that_answers_in_500ms() {
    let Some(target) = Target::start() else {
        return;
    };
    let receiver = Receiver::start(&["-delay", "500ms"]).unwrap();
    let seconds: u64 = std::env::var("HEAPWATCH_PUSH_KEEPUP_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let duration = format!("{seconds}s");
    let (_dir, run) = new_run();
    let args = push_args(
        &receiver.url,
        &[
            "--duration",
            &duration,
            "--gc",
            "--profiles",
            "heap,goroutine",
            "--goroutine-interval",
            "100ms",
            "--push-drain",
            "10s",
            "--label",
            "9.9.9",
        ],
    );
    let started = Instant::now();
    let stderr = Collect::spawn(&run, &target.url, &args).finish();
    let took = started.elapsed();
    let line = push_line(&stderr);
    assert!(!line.contains("unsent"), "{line}");
    assert!(!line.contains("without an answer"), "{line}");
    let events = assert_all_delivered_once(&run, &receiver, &[]);
    assert!(super::assert_allocations_add_up(&run, &events) >= 1);
    let stored = pushable(&run).len();
    let rate = stored as f64 / seconds as f64;
    assert!(
        rate > 3.0,
        "the collector stored {stored} captures in {seconds}s: not the load this is about"
    );
    let arrived = receiver.arrived();
    let most = arrived
        .iter()
        .map(|e| e["in_flight"].as_i64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    eprintln!(
        "{stored} captures in {seconds}s ({rate:.1}/s) delivered in {} requests (at most {most} \
         in flight, 500 ms each); collect with its drain took {:.1}s: {line}",
        arrived.len(),
        took.as_secs_f64()
    );
}

/// A drain that runs out with requests in flight, against a receiver that stores each push at
/// once and answers late (as a server flushing a segment may, after the client gave up): the
/// requests are waited for within `--push-timeout`, never cancelled and sent again. Answered
/// in time, they are delivered; not answered, they are recorded as maybe delivered and a later
/// `heapwatch push` does not send them again. Either way no capture is stored twice.
#[test]
fn live_drain_that_expires_with_requests_in_flight_stores_no_capture_twice() {
    let Some(target) = Target::start() else {
        return;
    };
    // The request timeout is longer than the collection, so no request times out (and is sent
    // again, as any push does with a timeout) before the drain: this is about the drain.
    for (answer_after, timeout, answered) in [("2s", "10s", true), ("6s", "3s", false)] {
        let receiver = Receiver::start(&["-answer-after", answer_after]).unwrap();
        let (_dir, run) = new_run();
        let args = push_args(
            &receiver.url,
            &[
                "--duration",
                "1500ms",
                "--label",
                "9.9.9",
                "--push-timeout",
                timeout,
                "--push-drain",
                "200ms",
            ],
        );
        let stderr = Collect::spawn(&run, &target.url, &args).finish();
        let line = push_line(&stderr);
        assert_eq!(line.contains("sent without an answer"), !answered, "{line}");
        // A later push sends what is left, never what may be in the store already.
        let out = util::run(&["push", run.to_str().unwrap(), "--to", &receiver.url]);
        let later = util::stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(if answered { 0 } else { 2 }),
            "{later}"
        );
        let outcomes = lines(&run.join("pushes.jsonl"));
        let ids: std::collections::HashMap<u64, String> = outcomes
            .iter()
            .map(|r| {
                (
                    r["seq"].as_u64().unwrap(),
                    r["id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let mut stored: std::collections::HashMap<String, usize> = Default::default();
        for e in receiver.accepted() {
            *stored
                .entry(e["id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        let captures = pushable(&run);
        for record in &captures {
            let seq = record["seq"].as_u64().unwrap();
            let id = ids
                .get(&seq)
                .unwrap_or_else(|| panic!("seq {seq}: no outcome"));
            assert_eq!(
                stored.get(id),
                Some(&1),
                "seq {seq} stored {:?} times",
                stored.get(id)
            );
        }
        assert_eq!(stored.len(), captures.len());
        let unanswered = outcomes
            .iter()
            .filter(|r| r["outcome"] == "unanswered")
            .count();
        assert_eq!(unanswered > 0, !answered, "{outcomes:?}");
    }
}

/// A cluster collect (two targets) pushes each node's run live, each capture with its node's
/// name, and one line per node at exit.
#[test]
fn live_cluster_collect_pushes_every_node_with_its_name() {
    let (Some(first), Some(second)) = (Target::start(), Target::start()) else {
        return;
    };
    let receiver = Receiver::start(&["-delay", "500ms"]).unwrap();
    let dir = util::tempdir();
    let run = dir.path().join("cluster");
    let stderr_file = dir.path().join("stderr");
    let mut child = util::heapwatch()
        .args(["collect", &first.url, &second.url, "--out"])
        .arg(&run)
        .args(["--name", "ctrl1", "--name", "ctrl2", "--interval", "100ms"])
        .args([
            "--duration",
            "2s",
            "--label",
            "9.9.9",
            "--push",
            &receiver.url,
        ])
        .args(["--push-label", "cluster=eu-1"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_file).unwrap())
        .spawn()
        .unwrap();
    let (status, _) = util::wait_for_exit(&mut child, Duration::from_secs(120));
    let stderr = std::fs::read_to_string(&stderr_file).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("heapwatch: push ") && l.contains(" → "))
        .collect();
    assert_eq!(lines.len(), 2, "one line per node: {stderr}");
    for (node, target) in [("ctrl1", &first.url), ("ctrl2", &second.url)] {
        let node_run = run.join("targets").join(node);
        let ids: std::collections::HashSet<String> = lines_of_ids(&node_run);
        let mine: Vec<Value> = receiver
            .accepted()
            .into_iter()
            .filter(|e| ids.contains(e["id"].as_str().unwrap()))
            .collect();
        let distinct: std::collections::HashSet<&str> =
            mine.iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(
            distinct.len(),
            pushable(&node_run).len(),
            "{node}: every capture arrived"
        );
        // A request that failed after it was sent (a reset, say) may have arrived, and within
        // a push it is tried again (only a push's end records it as maybe delivered): the one
        // way a capture is stored twice, and the push says it retried.
        if mine.len() > distinct.len() {
            let line = lines
                .iter()
                .find(|l| l.contains(node))
                .map_or_else(|| lines.join("\n"), |l| l.to_string());
            assert!(
                line.contains(" retries)"),
                "{node}: a capture stored twice without a retry: {line}"
            );
            eprintln!(
                "{node}: {} captures stored twice after a retry: {line}",
                mine.len() - distinct.len()
            );
        }
        for event in &mine {
            assert_eq!(event["labels"]["heapwatch_node"], node);
            assert_eq!(event["labels"]["heapwatch_target"], target.as_str());
            assert_eq!(event["labels"]["cluster"], "eu-1");
            assert_eq!(event["labels"]["service_name"], "steady");
        }
    }
}

fn lines_of_ids(run: &Path) -> std::collections::HashSet<String> {
    lines(&run.join("pushes.jsonl"))
        .iter()
        .filter(|r| r["outcome"] == "delivered")
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}
