//! `heapwatch push` through the receiver's faults: down at the start, 500s for a while, hung
//! requests, a restart mid-run, and the pusher itself killed and run again. Each ends with
//! every capture delivered and nothing lost; each checks the fault really happened.

use std::process::{Child, Stdio};
use std::time::Duration;

use super::receiver::Receiver;
use super::{assert_all_delivered_once, copy_run, lines, pushable};
use crate::util;

/// Quick retries, so a fault costs the test a second, not a minute.
const FAST: &[&str] = &["--retry-max", "300ms"];

fn spawn_push(run: &std::path::Path, url: &str, extra: &[&str]) -> (Child, std::path::PathBuf) {
    let stderr = run.with_extension("push-stderr");
    let child = util::heapwatch()
        .args(["push", run.to_str().unwrap(), "--to", url])
        .args(FAST)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("heapwatch push starts");
    (child, stderr)
}

fn finish(child: &mut Child, stderr: &std::path::Path) {
    let (status, _) = util::wait_for_exit(child, Duration::from_secs(120));
    let text = std::fs::read_to_string(stderr).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "heapwatch push: {text}");
}

#[test]
fn a_receiver_down_at_the_start_gets_everything_once_it_is_up() {
    if util::go().is_none() {
        return;
    }
    let (_dir, run) = copy_run("steady");
    let addr = format!("127.0.0.1:{}", util::free_port());
    let (mut child, stderr) = spawn_push(&run, &format!("http://{addr}"), &[]);
    // The push has met the refused connection before the receiver comes up.
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&stderr)
        .unwrap_or_default()
        .contains("retrying")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no retry notice"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let notice = std::fs::read_to_string(&stderr).unwrap();
    assert!(notice.contains("cannot connect"), "{notice}");
    let receiver = Receiver::start_at(&addr, &["-reject-older-than", "0"]).unwrap();
    finish(&mut child, &stderr);
    assert_all_delivered_once(&run, &receiver, &[]);
    let first = &lines(&run.join("pushes.jsonl"))[0];
    assert!(first["attempts"].as_u64().unwrap() > 1, "{first}");
}

#[test]
fn five_hundreds_for_a_while_are_retried_until_delivered() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0", "-fault", "fail 500 5"])
    else {
        return;
    };
    let (_dir, run) = copy_run("steady");
    let (mut child, stderr) = spawn_push(&run, &receiver.url, &[]);
    finish(&mut child, &stderr);
    let faults = receiver.faults();
    assert_eq!(faults.len(), 5, "{faults:?}");
    assert!(faults.iter().all(|f| f["status"] == 500));
    assert_all_delivered_once(&run, &receiver, &[]);
    // The run fits one request: each 500 met all of it.
    assert_eq!(lines(&run.join("pushes.jsonl"))[0]["attempts"], 6);
}

#[test]
fn a_hanging_receiver_costs_a_timeout_per_attempt_and_nothing_else() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0", "-fault", "hang 2"]) else {
        return;
    };
    let (_dir, run) = copy_run("steady");
    let (mut child, stderr) = spawn_push(&run, &receiver.url, &["--push-timeout", "500ms"]);
    finish(&mut child, &stderr);
    assert_eq!(receiver.faults().len(), 2);
    assert_all_delivered_once(&run, &receiver, &[]);
    assert_eq!(lines(&run.join("pushes.jsonl"))[0]["attempts"], 3);
    let text = std::fs::read_to_string(&stderr).unwrap();
    assert!(text.contains("no answer within"), "{text}");
}

#[test]
fn connections_reset_mid_push_are_retried() {
    let Some(receiver) = Receiver::start(&["-reject-older-than", "0", "-fault", "reset 3"]) else {
        return;
    };
    let (_dir, run) = copy_run("steady");
    let (mut child, stderr) = spawn_push(&run, &receiver.url, &[]);
    finish(&mut child, &stderr);
    assert_eq!(receiver.faults().len(), 3);
    assert_all_delivered_once(&run, &receiver, &[]);
}

/// Waits until a push has reached the receiver's handler.
fn wait_arrived(receiver: &Receiver, child: &mut Child) {
    let started = std::time::Instant::now();
    while receiver.arrived().is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the push ended before a request arrived"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no request arrived"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_receiver_restarted_mid_run_misses_nothing_and_sees_nothing_twice() {
    // 3 s per push, longer than the receiver's 2 s of grace at SIGTERM: the requests in flight
    // at the restart are cut unanswered and unstored, as a server killed mid-flush.
    let Some(mut receiver) = Receiver::start(&["-reject-older-than", "0", "-delay", "3s"]) else {
        return;
    };
    let (_dir, run) = copy_run("oomgrow");
    let (mut child, stderr) = spawn_push(&run, &receiver.url, &[]);
    wait_arrived(&receiver, &mut child);
    receiver.restart(Duration::from_millis(700));
    let during = receiver.accepted().len();
    finish(&mut child, &stderr);
    assert!(during < pushable(&run).len(), "the restart came mid-run");
    assert_all_delivered_once(&run, &receiver, &[]);
    let retried = lines(&run.join("pushes.jsonl"))
        .iter()
        .filter(|r| r["attempts"].as_u64().unwrap() > 1)
        .count();
    assert!(retried >= 1, "the push met the restart");
}

#[test]
fn a_killed_push_resumes_where_it_stopped_and_only_what_was_in_flight_can_arrive_twice() {
    let Some(mut receiver) = Receiver::start(&[
        "-reject-older-than",
        "0",
        "-delay",
        "300ms",
        "-fault",
        "hang all",
    ]) else {
        return;
    };
    let (_dir, run) = copy_run("oomgrow");
    let total = pushable(&run).len();
    // Killed while its pushes hang at the receiver: they were never taken.
    let (mut child, stderr) = spawn_push(&run, &receiver.url, &[]);
    let held = std::time::Instant::now();
    while receiver.faults().is_empty() {
        assert!(
            held.elapsed() < Duration::from_secs(30),
            "no push reached the hang"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    util::signal(child.id(), "KILL");
    util::wait_for_exit(&mut child, Duration::from_secs(10));
    assert!(receiver.accepted().is_empty());
    assert!(lines(&run.join("pushes.jsonl")).is_empty());
    let _ = stderr;

    // Killed while requests are in flight at a receiver that stores them anyway: those may
    // arrive twice (the push is at-least-once across a kill); nothing it recorded goes again.
    receiver.command("ok");
    let (mut child, _stderr2) = spawn_push(&run, &receiver.url, &[]);
    wait_arrived(&receiver, &mut child);
    util::signal(child.id(), "KILL");
    util::wait_for_exit(&mut child, Duration::from_secs(10));
    let recorded: std::collections::HashSet<u64> = lines(&run.join("pushes.jsonl"))
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();

    let (mut child, stderr3) = spawn_push(&run, &receiver.url, &[]);
    finish(&mut child, &stderr3);
    let outcomes = lines(&run.join("pushes.jsonl"));
    let seq_of: std::collections::HashMap<&str, u64> = outcomes
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["seq"].as_u64().unwrap()))
        .collect();
    let mut arrivals: std::collections::HashMap<&str, usize> = Default::default();
    let accepted = receiver.accepted();
    for e in &accepted {
        *arrivals.entry(e["id"].as_str().unwrap()).or_default() += 1;
    }
    assert_eq!(arrivals.len(), total, "every capture arrived");
    for (id, n) in &arrivals {
        let seq = seq_of[id];
        assert!(
            *n == 1 || (*n == 2 && !recorded.contains(&seq)),
            "seq {seq} arrived {n} times; recorded before the kill: {}",
            recorded.contains(&seq)
        );
    }
    // The journal has one delivery per capture, whatever the kills cut.
    let mut seqs: Vec<u64> = outcomes
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    seqs.sort();
    let n = seqs.len();
    seqs.dedup();
    assert_eq!((n, seqs.len()), (total, total));
}

#[test]
fn a_server_down_for_good_is_given_up_on_with_exit_3() {
    if util::go().is_none() {
        return;
    }
    let (_dir, run) = copy_run("steady");
    let url = format!("http://127.0.0.1:{}", util::free_port());
    let out = util::heapwatch()
        .args([
            "push",
            run.to_str().unwrap(),
            "--to",
            &url,
            "--retry-for",
            "2s",
        ])
        .args(FAST)
        .output()
        .unwrap();
    let stderr = util::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no capture delivered for 2s"), "{stderr}");
    assert!(
        stderr.contains(&format!("{} captures of", pushable(&run).len())),
        "{stderr}"
    );
    assert!(util::stdout(&out).contains("left unsent"));
    assert!(lines(&run.join("pushes.jsonl")).is_empty());
}
