//! `collect … --push URL` against a live Go target (testdata/go/cmd/steady over HTTP pprof on
//! loopback) and the real push receiver, through each of the receiver's faults: down at the
//! start, 500s for a while, hanging, restarted mid-run, and the collector itself SIGKILLed and
//! resumed. Each ends with every stored capture delivered exactly once, with its labels and
//! the manifest's totals; each checks that the fault really happened. The capture-to-durable
//! time is printed with and without the push (no timed assertion: see docs/benchmarks.md).

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
struct Target {
    url: String,
    _process: Reaped,
}

impl Target {
    fn start() -> Option<Target> {
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
struct Collect {
    child: Reaped,
    stderr: PathBuf,
}

impl Collect {
    fn spawn(run: &Path, target: &str, extra: &[&str]) -> Collect {
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
    fn finish(mut self) -> String {
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
fn wait_until(what: &str, collect: &mut Collect, mut done: impl FnMut() -> bool) {
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

fn push_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--push", url];
    args.extend_from_slice(FAST);
    args.extend_from_slice(extra);
    args
}

/// Everything the run stored arrived once, each at its own time with its figures (see
/// `assert_all_delivered_once`), and the labels of a live `collect` of `target` with `--label
/// 9.9.9`: `service_name` the executable's name, `steady`.
fn assert_live_delivery(run: &Path, receiver: &Receiver, target: &str) -> usize {
    assert_live_delivery_as(run, receiver, target, "steady")
}

/// [`assert_live_delivery`] with `service` as `service_name`.
fn assert_live_delivery_as(run: &Path, receiver: &Receiver, target: &str, service: &str) -> usize {
    assert_live_delivery_with(run, receiver, target, service, &[])
}

/// [`assert_live_delivery_as`] with more labels.
fn assert_live_delivery_with(
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
fn push_line(stderr: &str) -> &str {
    let found: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("heapwatch: push ") && l.contains(" → "))
        .collect();
    assert_eq!(found.len(), 1, "one push line: {stderr}");
    found[0]
}

fn new_run() -> (tempfile::TempDir, PathBuf) {
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

/// Manifest figures of the stored captures of `run` with a seq in `seqs`: per-capture
/// request latency and time from the last byte to durable (fsynced and named), in ms.
fn timings(run: &Path, seqs: std::ops::RangeInclusive<u64>) -> (Vec<f64>, Vec<f64>) {
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

fn percentiles(mut ms: Vec<f64>) -> String {
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
/// the rest under the same labels, and a push that names another value changes the kept one.
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
        util::stdout(&out).contains("\"gateway\" (as chosen with --service)"),
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
    assert!(stderr.contains("no colon here"), "{stderr}");
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
        assert_eq!(
            mine.len(),
            pushable(&node_run).len(),
            "{node}: every capture once"
        );
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
