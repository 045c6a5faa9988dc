//! `collect … --push URL` against a live Go target (testdata/go/cmd/steady over HTTP pprof on
//! loopback) and the real push receiver, through each of the receiver's faults: down at the
//! start, 500s for a while, restarted mid-run, and the collector itself SIGKILLed and resumed;
//! then credentials, usage errors and `--max-disk`. Each ends with every stored capture
//! delivered exactly once, with its labels and figures; each checks that the fault really
//! happened. The drain and what it leaves are in `live_drain.rs`; helpers for both are here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::receiver::Receiver;
use super::{assert_all_delivered_once, lines, pushable};
use crate::util::{self, Reaped};

/// Quick retries, so a fault costs the test a second, not a minute.
const FAST: &[&str] = &["--retry-max", "300ms"];

/// testdata/go/cmd/steady serving net/http/pprof on loopback. A small working set and fast
/// churn: the GC (and so the heap profile) moves every ~100 ms, so most captures are new.
pub(super) struct Target {
    pub(super) url: String,
    _process: Reaped,
}

impl Target {
    pub(super) fn start() -> Option<Target> {
        let steady = util::go_fixture("steady")?;
        let (process, addr) = util::start_listening(
            &steady,
            &[
                "-listen",
                "127.0.0.1:0",
                "-working-set",
                "4MiB",
                "-rate",
                "48MiB",
            ],
        );
        Some(Target {
            url: format!("http://{addr}"),
            _process: process,
        })
    }
}

/// A `heapwatch collect` running in the background, its stderr in a file.
pub(super) struct Collect {
    child: Reaped,
    stderr: PathBuf,
}

impl Collect {
    pub(super) fn spawn(run: &Path, target: &str, extra: &[&str]) -> Collect {
        let stderr = run.with_extension(format!("stderr.{}", util::unix_ms()));
        let child = util::heapwatch()
            .args(["collect", target, "--out"])
            .arg(run)
            .args(["--interval", "100ms"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("heapwatch collect starts");
        Collect {
            child: Reaped(child),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for a clean exit; returns stderr.
    pub(super) fn finish(mut self) -> String {
        let (status, _) = util::wait_for_exit(&mut self.child.0, Duration::from_secs(120));
        let text = self.stderr();
        assert_eq!(status.code(), Some(0), "heapwatch collect: {text}");
        text
    }

    fn kill(mut self) {
        util::signal(self.child.0.id(), "KILL");
        util::wait_for_exit(&mut self.child.0, Duration::from_secs(10));
    }

    fn child(&mut self) -> &mut Child {
        &mut self.child.0
    }
}

/// Polls until `done`, failing after 60 s or if the collector exits first.
pub(super) fn wait_until(what: &str, collect: &mut Collect, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        if let Some(status) = collect.child().try_wait().unwrap() {
            panic!(
                "collect exited ({status}) before {what}: {}",
                collect.stderr()
            );
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(super) fn push_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--push", url];
    args.extend_from_slice(FAST);
    args.extend_from_slice(extra);
    args
}

/// Everything the run stored arrived once, each at its own time with its figures (see
/// `assert_all_delivered_once`), and the labels of a live `collect` of `target` with `--label
/// 9.9.9`: `service_name` the executable's name, `steady`.
pub(super) fn assert_live_delivery(run: &Path, receiver: &Receiver, target: &str) -> usize {
    assert_live_delivery_as(run, receiver, target, "steady")
}

/// [`assert_live_delivery`] with `service` as `service_name`.
pub(super) fn assert_live_delivery_as(
    run: &Path,
    receiver: &Receiver,
    target: &str,
    service: &str,
) -> usize {
    assert_live_delivery_with(run, receiver, target, service, &[])
}

/// [`assert_live_delivery_as`] with more labels.
pub(super) fn assert_live_delivery_with(
    run: &Path,
    receiver: &Receiver,
    target: &str,
    service: &str,
    extra: &[(&str, &str)],
) -> usize {
    let events = assert_all_delivered_once(run, receiver, &[]);
    assert!(!events.is_empty(), "the run stored captures");
    let manifest: BTreeMap<u64, Value> = pushable(run)
        .into_iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    for (seq, event) in &events {
        let labels: BTreeMap<String, String> =
            serde_json::from_value(event["labels"].clone()).unwrap();
        let cycle = manifest[seq]["incarnation"].to_string();
        let want: BTreeMap<String, String> = [
            ("__name__", "memory"),
            ("__delta__", "false"),
            ("service_name", service),
            ("service_version", "9.9.9"),
            ("heapwatch_target", target),
            ("heapwatch_boot_cycle", &cycle),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, want, "seq {seq}");
    }
    events.len()
}

/// The one line a collect prints about its push at exit ("heapwatch: push RUN → URL: …", not
/// the "heapwatch: push: URL: why; retrying" notices).
pub(super) fn push_line(stderr: &str) -> &str {
    let found: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("heapwatch: push ") && l.contains(" → "))
        .collect();
    assert_eq!(found.len(), 1, "one push line: {stderr}");
    found[0]
}

pub(super) fn new_run() -> (tempfile::TempDir, PathBuf) {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    (dir, run)
}

#[test]
fn a_live_collect_pushes_every_stored_capture_once_with_its_labels_and_totals() {
    let Some(target) = Target::start() else {
        return;
    };
    let receiver = Receiver::start(&[]).unwrap();
    let (_dir, run) = new_run();
    let args = push_args(&receiver.url, &["--label", "9.9.9"]);
    let mut collect = Collect::spawn(&run, &target.url, &args);
    wait_until("5 captures pushed", &mut collect, || {
        receiver.accepted().len() >= 5
    });
    // A few more intervals, so captures are stored while the first pushes go.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // Ctrl-C: the collector stops, the push drains what is queued, the exit is 0.
    util::signal(collect.child().id(), "INT");
    let stderr = collect.finish();
    let sent = assert_live_delivery(&run, &receiver, &target.url);
    assert!(
        sent > 5,
        "captures stored after the first pushes went too: {sent}"
    );
    let line = push_line(&stderr);
    assert!(
        line.contains(&format!("{sent} delivered, 0 refused")),
        "{line}"
    );
    assert!(!line.contains("unsent"), "{line}");
    let (latency, durable) = timings(&run, 0..=u64::MAX);
    eprintln!("{sent} captures pushed live: {line}");
    eprintln!(
        "  durable_ms pushing to an answering receiver: {}",
        percentiles(durable)
    );
    eprintln!(
        "  latency_ms pushing to an answering receiver: {}",
        percentiles(latency)
    );
}

#[test]
fn live_receiver_down_at_the_start_gets_everything_once_it_is_up() {
    let Some(target) = Target::start() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", util::free_port());
    let url = format!("http://{addr}");
    let (_dir, run) = new_run();
    let args = push_args(
        &url,
        &[
            "--duration",
            "4s",
            "--label",
            "9.9.9",
            "--push-drain",
            "30s",
        ],
    );
    let mut collect = Collect::spawn(&run, &target.url, &args);
    let log = collect.stderr.clone();
    wait_until("a retry notice", &mut collect, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("cannot connect") && text.contains("retrying")
    });
    let stored_before = pushable(&run).len();
    let receiver = Receiver::start_at(&addr, &[]).unwrap();
    collect.finish();
    assert!(
        stored_before > 0,
        "captures were stored while the receiver was down"
    );
    assert_live_delivery(&run, &receiver, &target.url);
}

#[test]
fn live_five_hundreds_for_a_while_are_retried_until_delivered() {
    let Some(target) = Target::start() else {
        return;
    };
    let receiver = Receiver::start(&["-fault", "fail 500 6"]).unwrap();
    let (_dir, run) = new_run();
    let args = push_args(&receiver.url, &["--duration", "3s", "--label", "9.9.9"]);
    let stderr = Collect::spawn(&run, &target.url, &args).finish();
    let faults = receiver.faults();
    assert_eq!(faults.len(), 6, "{faults:?}");
    assert!(faults.iter().all(|f| f["status"] == 500));
    assert!(stderr.contains("HTTP 500"), "{stderr}");
    assert_live_delivery(&run, &receiver, &target.url);
    assert!(
        lines(&run.join("pushes.jsonl"))[0]["attempts"]
            .as_u64()
            .unwrap()
            > 1
    );
}

#[test]
fn live_receiver_restarted_mid_run_misses_nothing_and_sees_nothing_twice() {
    let Some(target) = Target::start() else {
        return;
    };
    let mut receiver = Receiver::start(&[]).unwrap();
    let (_dir, run) = new_run();
    let url = receiver.url.clone();
    let args = push_args(&url, &["--duration", "6s", "--label", "9.9.9"]);
    let mut collect = Collect::spawn(&run, &target.url, &args);
    wait_until("3 captures pushed", &mut collect, || {
        receiver.accepted().len() >= 3
    });
    receiver.restart(Duration::from_millis(1500));
    let during = receiver.accepted().len();
    collect.finish();
    let sent = assert_live_delivery(&run, &receiver, &target.url);
    assert!(
        during < sent,
        "the restart came mid-run: {during} of {sent}"
    );
    let retried = lines(&run.join("pushes.jsonl"))
        .iter()
        .filter(|r| r["attempts"].as_u64().unwrap() > 1)
        .count();
    assert!(retried >= 1, "the push met the restart");
}

#[test]
fn live_collector_killed_and_resumed_delivers_everything_once_overall() {
    let Some(target) = Target::start() else {
        return;
    };
    let mut receiver = Receiver::start(&[]).unwrap();
    let (_dir, run) = new_run();
    let url = receiver.url.clone();
    let args = push_args(&url, &["--label", "9.9.9"]);
    let mut collect = Collect::spawn(&run, &target.url, &args);
    wait_until("3 captures pushed", &mut collect, || {
        receiver.accepted().len() >= 3
    });
    // Killed while a push hangs at the receiver: that one was never taken, and the captures
    // stored meanwhile are in the manifest but not in pushes.jsonl.
    receiver.command("hang all");
    wait_until("a push held", &mut collect, || {
        !receiver.faults().is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    collect.kill();
    let before = receiver.accepted().len();
    let stored = pushable(&run).len();
    assert!(
        before < stored,
        "killed with captures unsent: {before} of {stored}"
    );
    assert_eq!(lines(&run.join("pushes.jsonl")).len(), before);
    // A kill between a profile's rename and its manifest line leaves it unrecorded; the
    // resumed collector records it as `recovered`, and the push sends it like any other.
    // Planted here so every run of the test has one (the kill above may have made one too).
    let planted = plant_unrecorded_profile(&run);

    receiver.command("ok");
    let resumed = push_args(&receiver.url, &["--duration", "2s", "--label", "9.9.9"]);
    let stderr = Collect::spawn(&run, &target.url, &resumed).finish();
    let recovered = lines(&run.join("manifest.jsonl"))
        .into_iter()
        .find(|r| r["file"] == planted.as_str())
        .expect("the planted profile is recorded");
    assert_eq!(recovered["kind"], "recovered", "{recovered}");
    let sent = assert_live_delivery(&run, &receiver, &target.url);
    assert!(sent > stored, "the resumed collect stored and pushed more");
    let line = push_line(&stderr);
    assert!(
        line.contains(&format!("{} delivered", sent - before)),
        "{line}"
    );
    assert!(line.contains(&format!("{before} already sent")), "{line}");
}

/// Copies a stored heap profile under the next free seq without a manifest line, as a
/// collector killed between storing it and recording it leaves it; returns its `file`.
fn plant_unrecorded_profile(run: &Path) -> String {
    let profiles = run.join("profiles");
    let mut names: Vec<String> = std::fs::read_dir(&profiles)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-heap.pb.gz"))
        .collect();
    names.sort();
    let manifest_max = lines(&run.join("manifest.jsonl"))
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .max()
        .unwrap();
    let files_max = names
        .iter()
        .filter_map(|n| n.split('-').next()?.parse::<u64>().ok())
        .max()
        .unwrap();
    let name = format!("{:06}-heap.pb.gz", manifest_max.max(files_max) + 1);
    std::fs::copy(profiles.join(&names[0]), profiles.join(&name)).unwrap();
    format!("profiles/{name}")
}

/// The auth and TLS flags of `heapwatch push` work the same on `collect --push`: a wrong
/// token is said in the one line at exit while the collection goes on unharmed, and the
/// resumed collect with the token, tenant, CA and `--service` sends everything.
#[test]
fn live_push_takes_the_same_credentials_tls_and_service_flags() {
    let Some(target) = Target::start() else {
        return;
    };
    let certs = util::tempdir();
    let tls = certs.path().to_str().unwrap();
    let receiver = Receiver::start(&[
        "-tls",
        tls,
        "-require-header",
        "Authorization: Bearer s3cret",
    ])
    .unwrap();
    let url = receiver.url.replace("http://", "https://");
    let cacert = certs.path().join("ca.pem");
    let cacert = cacert.to_str().unwrap();
    let token = util::write(certs.path(), "token", b"Authorization: Bearer s3cret\n");
    let token = format!("@{}", token.display());
    let (_dir, run) = new_run();

    let wrong = push_args(
        &url,
        &[
            "--duration",
            "1s",
            "--label",
            "9.9.9",
            "--push-cacert",
            cacert,
        ],
    );
    let stderr = Collect::spawn(&run, &target.url, &wrong).finish();
    let line = push_line(&stderr);
    assert!(
        line.contains("HTTP 401") && line.contains("--push-header"),
        "{line}"
    );
    assert!(line.contains("left unsent"), "{line}");
    assert_eq!(receiver.requests(), 1, "a rejection stops the push at once");
    assert!(!pushable(&run).is_empty(), "the collection went on");

    let right = push_args(
        &url,
        &[
            "--duration",
            "1s",
            "--label",
            "9.9.9",
            "--push-cacert",
            cacert,
            "--push-header",
            &token,
            "--push-tenant",
            "acme",
            "--service",
            "gateway",
        ],
    );
    Collect::spawn(&run, &target.url, &right).finish();
    let events = assert_live_delivery_as(&run, &receiver, &target.url, "gateway");
    assert!(events > 0);
    for event in receiver.accepted() {
        assert_eq!(event["tenant"], "acme");
    }
}

#[test]
fn push_flags_without_push_and_a_bad_push_url_are_usage_errors_before_the_run_is_made() {
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let run_arg = run.to_str().unwrap();
    let out = util::run(&[
        "collect",
        "http://127.0.0.1:1",
        "--out",
        run_arg,
        "--push-tenant",
        "acme",
    ]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--push-tenant") && stderr.contains("--push URL"),
        "{stderr}"
    );
    for stray in [["--push-drain", "30s"], ["--retry-max", "1s"]] {
        let mut args = vec!["collect", "http://127.0.0.1:1", "--out", run_arg];
        args.extend(stray);
        let out = util::run(&args);
        let stderr = util::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(stray[0]), "{stderr}");
    }
    let out = util::run(&[
        "collect",
        "http://127.0.0.1:1",
        "--out",
        run_arg,
        "--push",
        "ftp://pyroscope:4040",
    ]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ftp://pyroscope:4040"), "{stderr}");
    let out = util::run(&[
        "collect",
        "http://127.0.0.1:1",
        "--out",
        run_arg,
        "--push",
        "http://127.0.0.1:1",
        "--push-header",
        "no colon here",
    ]);
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // Which flag, never the value: a header without its name may be a bare token.
    assert!(
        stderr.contains("--push-header (the 1st given): expected \"Name: value\"")
            && !stderr.contains("no colon here"),
        "{stderr}"
    );
    assert!(!run.exists(), "nothing was created");
}

/// `--max-disk` thins captures while the push is held: one deleted before it was sent is
/// skipped (its `delete` record reaches the pusher through the same manifest hook), never
/// reported unreadable; every other stored capture arrives once. While the server fails the
/// pusher reads nothing new from disk, so a capture stored after the first request timed out
/// stays in the spool until then: the test waits until retention has thinned one of those.
#[test]
fn live_push_skips_captures_thinned_for_max_disk_before_they_were_sent() {
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
            "8s",
            "--label",
            "9.9.9",
            "--max-disk",
            "48KiB",
            "--push-timeout",
            "300ms",
        ],
    );
    let mut collect = Collect::spawn(&run, &target.url, &args);
    let manifest = run.join("manifest.jsonl");
    wait_until(
        "a capture stored while the push failed, thinned",
        &mut collect,
        || {
            let Some(held) = receiver
                .faults()
                .first()
                .and_then(|f| f["unix_ms"].as_i64())
            else {
                return false;
            };
            // The first request held, its timeout passed, a margin for a loaded machine.
            let failing_from = held + 300 + 500;
            let records = lines(&manifest);
            let stored_at: std::collections::HashMap<u64, i64> = records
                .iter()
                .map(|r| (r["seq"].as_u64().unwrap(), r["t_ms"].as_i64().unwrap()))
                .collect();
            records
                .iter()
                .filter_map(|r| r["deleted_seq"].as_u64())
                .any(|seq| stored_at.get(&seq).is_some_and(|&t| t > failing_from))
        },
    );
    receiver.command("ok");
    let stderr = collect.finish();
    let line = push_line(&stderr);
    assert!(!line.contains("unreadable"), "{line}");
    assert!(line.contains("deleted by --max-disk"), "{line}");

    let deleted: std::collections::HashSet<String> = lines(&manifest)
        .iter()
        .filter(|r| r["kind"] == "delete")
        .filter_map(|r| r["file"].as_str().map(str::to_string))
        .collect();
    let delivered: BTreeMap<u64, Value> = lines(&run.join("pushes.jsonl"))
        .into_iter()
        .map(|r| {
            assert_eq!(r["outcome"], "delivered", "{r}");
            (r["seq"].as_u64().unwrap(), r)
        })
        .collect();
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), delivered.len(), "each delivered once");
    let by_id: BTreeMap<&str, &Value> = accepted
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    assert_eq!(by_id.len(), accepted.len(), "no capture arrived twice");
    let mut skipped = 0;
    for record in pushable(&run) {
        let seq = record["seq"].as_u64().unwrap();
        match delivered.get(&seq) {
            Some(outcome) => {
                let event = by_id[outcome["id"].as_str().unwrap()];
                for name in ["inuse_space", "inuse_objects"] {
                    assert_eq!(event["totals"][name], record["totals"][name], "seq {seq}");
                }
            }
            None => {
                assert!(
                    deleted.contains(record["file"].as_str().unwrap()),
                    "seq {seq}: neither sent nor thinned"
                );
                skipped += 1;
            }
        }
    }
    assert!(
        skipped > 0,
        "some captures were thinned before they were sent"
    );
}

/// Manifest figures of the stored captures of `run` with a seq in `seqs`: per-capture
/// request latency and time from the last byte to durable (fsynced and named), in ms.
pub(super) fn timings(run: &Path, seqs: std::ops::RangeInclusive<u64>) -> (Vec<f64>, Vec<f64>) {
    let mut latency = Vec::new();
    let mut durable = Vec::new();
    for r in lines(&run.join("manifest.jsonl")) {
        if !seqs.contains(&r["seq"].as_u64().unwrap()) {
            continue;
        }
        if let Some(d) = r["durable_ms"].as_f64() {
            durable.push(d);
            latency.push(r["latency_ms"].as_f64().unwrap());
        }
    }
    (latency, durable)
}

pub(super) fn percentiles(mut ms: Vec<f64>) -> String {
    assert!(!ms.is_empty());
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    format!(
        "n={:3} p50 {:6.2} p90 {:6.2} p99 {:6.2} max {:6.2}",
        ms.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        ms[ms.len() - 1]
    )
}
