//! `heapwatch collect` against purpose-built misbehaving HTTP targets: refused connections,
//! stalls, error statuses, HTML, bodies cut mid-way, truncated gzip, oversized bodies, a full
//! disk, and all of them mixed. Every test also checks the run directory's invariants: each
//! manifest line is JSON with a strictly increasing `seq`, no stored file is invalid, no
//! temporary file is left behind, and requests never overlapped.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util;

// ---------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 server whose every answer is decided by the test.

/// What the server saw.
#[derive(Default)]
struct Stats {
    /// Requests whose head was read completely.
    requests: AtomicUsize,
    /// Requests being served, by the client's port: from the end of the head until the
    /// server is done with the connection or the client closed it.
    open: Mutex<Vec<u16>>,
    max_active: AtomicUsize,
    /// Requests that have been counted into `max_active`.
    started: AtomicUsize,
    paths: Mutex<Vec<String>>,
}

/// A request being served; listed in `open` while it lives.
struct InFlight {
    stats: Arc<Stats>,
    peer: u16,
}

/// How long an earlier connection may outlive the head of a new request before the two count
/// as an overlap. A client that gives up on connection A and opens B at once may have B's head
/// read before A is closed: hyper closes an abandoned connection from its own task, which a
/// loaded machine runs a little later (CI once saw A still established as B arrived). Without
/// /proc/net/tcp, it also covers A's thread not having seen the end of A yet. A request the
/// collector really sends beside one it still waits for keeps both open far longer.
const OVERLAP_GRACE: Duration = Duration::from_millis(50);

impl InFlight {
    /// Counts the requests in flight when this one starts, this one included, into
    /// `max_active`. A request counts while its connection is established in the kernel
    /// (neither side has closed it), [`OVERLAP_GRACE`] after this one's head was read, so
    /// this does not depend on when the server's threads get to run.
    fn start(stats: &Arc<Stats>, local: u16, peer: u16) -> InFlight {
        let deadline = Instant::now() + OVERLAP_GRACE;
        loop {
            // Check and register under one lock, so two requests starting together see
            // each other.
            let mut open = stats.open.lock().unwrap();
            let others = match established_peers(local) {
                // Already closed by the client (this thread ran late): not in flight now.
                Some(live) if !live.contains(&peer) => 0,
                Some(live) => {
                    let others = open.iter().filter(|p| live.contains(p)).count();
                    if others > 0 && Instant::now() < deadline {
                        drop(open);
                        thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    others
                }
                None if Instant::now() < deadline && !open.is_empty() => {
                    drop(open);
                    thread::sleep(Duration::from_millis(2));
                    continue;
                }
                None => open.len(),
            };
            stats.max_active.fetch_max(others + 1, Ordering::SeqCst);
            open.push(peer);
            stats.started.fetch_add(1, Ordering::SeqCst);
            break;
        }
        InFlight {
            stats: stats.clone(),
            peer,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.stats.open.lock().unwrap().retain(|&p| p != self.peer);
    }
}

/// The client ports of the established connections to local port `local`, from
/// /proc/net/tcp (Linux); None where that file is not available.
fn established_peers(local: u16) -> Option<Vec<u16>> {
    let table = fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|h| u16::from_str_radix(h, 16).ok())
    };
    Some(
        table
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // local_address rem_address st; 01 is ESTABLISHED.
                let (l, r, st) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
                (port(l)? == local && *st == "01").then(|| port(r))?
            })
            .collect(),
    )
}

type Handler = dyn Fn(usize, &mut TcpStream) + Send + Sync;

struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves every request with `handler(n, stream)`, `n` counting requests from 0. The
    /// connection is closed when the handler returns.
    fn start(handler: impl Fn(usize, &mut TcpStream) + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = {
            let stats = stats.clone();
            let stop = stop.clone();
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut stream) = stream else { continue };
                    let stats = stats.clone();
                    let handler = handler.clone();
                    thread::spawn(move || {
                        // No connection thread outlives a broken test by much.
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                        let Some(path) = util::read_request_path(&mut stream) else {
                            return;
                        };
                        let n = stats.requests.fetch_add(1, Ordering::SeqCst);
                        stats.paths.lock().unwrap().push(path);
                        let peer = stream.peer_addr().map_or(0, |a| a.port());
                        let _guard = InFlight::start(&stats, addr.port(), peer);
                        handler(n, &mut stream);
                    });
                }
            })
        };
        Server {
            addr,
            stats,
            stop,
            accept: Some(accept),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }

    fn max_in_flight(&self) -> usize {
        self.stats.max_active.load(Ordering::SeqCst)
    }

    /// Asserts every request went to the heap endpoint (MemStats are turned off).
    fn assert_paths_are_heap(&self) {
        for p in self.stats.paths.lock().unwrap().iter() {
            assert_eq!(p, "/debug/pprof/heap", "unexpected request path");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve_profile(stream: &mut TcpStream, body: &[u8]) {
    util::respond(stream, "200 OK", "application/octet-stream", body);
}

/// Never answers: holds the connection until the client gives up and closes it.
fn hang(stream: &mut TcpStream) {
    let mut buf = [0u8; 256];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Promises the whole body, sends half of it, then drops the connection.
fn cut_mid_body(stream: &mut TcpStream, body: &[u8]) {
    let mut bytes = util::http_head("200 OK", "application/octet-stream", body.len());
    bytes.extend_from_slice(&body[..body.len() / 2]);
    let _ = stream.write_all(&bytes);
    let _ = stream.flush();
    // Returning drops the stream: the client sees EOF before Content-Length bytes.
}

fn html() -> &'static [u8] {
    b"<!DOCTYPE html>\n<html><head><title>Login</title></head><body><h1>Please sign in</h1></body></html>\n"
}

fn server_error(stream: &mut TcpStream) {
    util::respond(
        stream,
        "500 Internal Server Error",
        "text/plain; charset=utf-8",
        b"internal error: profile writer panicked\n",
    );
}

/// The committed real profile served by the well-behaved answers.
fn good_profile() -> Vec<u8> {
    fs::read(util::fixture("hiddenleak-heap-late.pb.gz")).expect("fixture")
}

/// The profile cut to 60% and served completely (the gzip stream ends early).
fn truncated_profile() -> Vec<u8> {
    let mut p = good_profile();
    p.truncate(p.len() * 6 / 10);
    p
}

// ---------------------------------------------------------------------------------------------
// Running the collector and checking the run directory.

struct Ran {
    code: Option<i32>,
    stderr: String,
    wall: Duration,
}

/// Runs `heapwatch collect TARGET --out RUN --quiet --memstats-interval 0 EXTRA…`, killing it
/// (and failing the test) if it has not exited after `kill_after`. Logs go to `logs`.
fn collect(target: &str, run: &Path, logs: &Path, extra: &[&str], kill_after: Duration) -> Ran {
    fs::create_dir_all(logs).unwrap();
    let stdout = fs::File::create(logs.join("stdout")).unwrap();
    let stderr = fs::File::create(logs.join("stderr")).unwrap();
    let began = Instant::now();
    let mut child = util::heapwatch()
        .arg("collect")
        .arg(target)
        .arg("--out")
        .arg(run)
        .args(["--quiet", "--memstats-interval", "0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("heapwatch collect starts");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if began.elapsed() > kill_after {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "heapwatch collect {target} did not exit within {kill_after:?}; stderr: {}",
                fs::read_to_string(logs.join("stderr")).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    let wall = began.elapsed();
    Ran {
        code: status.code(),
        stderr: fs::read_to_string(logs.join("stderr")).unwrap_or_default(),
        wall,
    }
}

/// The invariants every run directory keeps whatever the target did. Returns the capture
/// attempts.
fn check_run(run: &Path) -> Vec<Value> {
    let manifest = run.join("manifest.jsonl");
    let text =
        fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the manifest ends with a torn line: {:?}",
        text.lines().last()
    );
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("manifest line {} is not JSON ({e}): {line}", i + 1));
        assert!(v.is_object(), "manifest line {} is not an object", i + 1);
        for field in [
            "seq",
            "kind",
            "file",
            "incarnation",
            "t_ms",
            "latency_ms",
            "bytes",
            "dup_of",
            "error",
        ] {
            assert!(
                v.get(field).is_some(),
                "manifest line {} lacks {field}: {line}",
                i + 1
            );
        }
        records.push(v);
    }
    for pair in records.windows(2) {
        let (a, b) = (seq(&pair[0]), seq(&pair[1]));
        assert!(a < b, "seq not strictly increasing: {a} then {b}");
    }
    // One request at a time, as seen by the collector's own clock.
    let attempts: Vec<&Value> = records.iter().filter(|r| r["kind"] != "delete").collect();
    for pair in attempts.windows(2) {
        let end = pair[0]["t_ms"].as_f64().unwrap() + pair[0]["latency_ms"].as_f64().unwrap();
        let next = pair[1]["t_ms"].as_f64().unwrap();
        assert!(
            next + 2.0 >= end,
            "attempt seq {} started at {next} before seq {} ended at {end}",
            seq(pair[1]),
            seq(pair[0])
        );
    }
    for r in &records {
        if r["error"].is_null() {
            assert!(r["error_kind"].is_null(), "error_kind without error: {r}");
        } else {
            assert!(r["file"].is_null(), "a failed attempt names a file: {r}");
            assert!(
                r["error_kind"].is_string(),
                "a failed attempt has no error_kind: {r}"
            );
        }
        if r["kind"] == "heap" && r["error"].is_null() && r["dup_of"].is_null() {
            let file = r["file"].as_str().expect("a stored capture names its file");
            assert!(
                run.join(file).is_file(),
                "{file} is in the manifest but not on disk"
            );
        }
    }
    for path in profile_files(run) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".partial-"),
            "temporary file left behind: {name}"
        );
        let out = util::run(&["top", path.to_str().unwrap(), "-n", "1"]);
        assert!(
            out.status.success(),
            "stored file {name} does not decode: {}",
            util::stderr(&out)
        );
    }
    // The capture attempts; event records (a cycle's start, the collector's stop) are checked
    // above with the rest.
    records.retain(|r| !util::is_event(r));
    records
}

fn seq(r: &Value) -> u64 {
    r["seq"].as_u64().expect("seq is a number")
}

fn profile_files(run: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match fs::read_dir(run.join("profiles")) {
        Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

fn error_kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter(|r| !r["error"].is_null())
        .map(|r| r["error_kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Asserts at least one attempt was made and every attempt failed with `kind`, its message
/// containing `mentions` (case-insensitive).
fn assert_all_failed(records: &[Value], kind: &str, mentions: &str) {
    assert!(!records.is_empty(), "no attempt was recorded");
    for r in records {
        assert_eq!(r["kind"], "heap", "unexpected record: {r}");
        assert_eq!(r["error_kind"], kind, "wrong error class: {r}");
        let error = r["error"].as_str().expect("an error message");
        assert!(
            error.to_lowercase().contains(&mentions.to_lowercase()),
            "error {error:?} does not mention {mentions:?}"
        );
    }
}

/// Every request the target saw is in the manifest. The manifest may hold more: on a loaded
/// machine the collector can reach its deadline before its request reached the target, and
/// such an attempt can only end as a timeout.
fn assert_requests_recorded(server: &Server, records: &[Value]) {
    let seen = server.requests();
    let timeouts = records
        .iter()
        .filter(|r| r["error_kind"] == "timeout")
        .count();
    assert!(
        seen <= records.len() && records.len() - seen <= timeouts,
        "the target saw {seen} requests but the manifest has {} records ({timeouts} timeouts)",
        records.len()
    );
}

/// Runs the collector for `duration` against a server that always does `fault`, and checks
/// what every such test checks. Returns the records.
fn run_against_fault(
    fault: impl Fn(&mut TcpStream) + Send + Sync + 'static,
    interval: &str,
    timeout: &str,
    duration: &str,
    extra: &[&str],
) -> (Vec<Value>, Ran, Server) {
    let server = Server::start(move |_, s| fault(s));
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let mut args = vec![
        "--interval",
        interval,
        "--timeout",
        timeout,
        "--duration",
        duration,
    ];
    args.extend_from_slice(extra);
    let ran = collect(
        &server.url(),
        &run,
        &dir.path().join("logs"),
        &args,
        Duration::from_secs(20),
    );
    assert!(
        run.join("manifest.jsonl").is_file(),
        "no manifest; exit {:?}: {}",
        ran.code,
        ran.stderr
    );
    let records = check_run(&run);
    assert!(
        profile_files(&run).is_empty(),
        "nothing valid was served, yet files were stored: {:?}",
        profile_files(&run)
    );
    // A target that answered, just never with a valid profile (a status, an HTML page, a bad
    // or oversized body) is an input error (2) that says so; one that only timed out or broke
    // the connection never answered (3).
    let answered_badly = records.iter().any(|r| {
        matches!(
            r["error_kind"].as_str(),
            Some("status" | "invalid" | "too-large" | "other")
        )
    });
    let (code, says) = if answered_badly {
        (2, "never with a valid profile")
    } else {
        (3, "never answered")
    };
    assert_eq!(ran.code, Some(code), "{}", ran.stderr);
    assert!(ran.stderr.contains(says), "{}", ran.stderr);
    assert_eq!(
        server.max_in_flight(),
        1,
        "requests overlapped at the target"
    );
    assert_requests_recorded(&server, &records);
    server.assert_paths_are_heap();
    (records, ran, server)
}

// ---------------------------------------------------------------------------------------------
// The faults, one test each.

#[test]
fn collect_faults_connection_refused() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let ran = collect(
        &format!("http://127.0.0.1:{port}"),
        &run,
        &dir.path().join("logs"),
        &[
            "--interval",
            "100ms",
            "--timeout",
            "300ms",
            "--duration",
            "1s",
        ],
        Duration::from_secs(20),
    );
    let records = check_run(&run);
    eprintln!("refused: {} attempts in {:?}", records.len(), ran.wall);
    assert_eq!(
        ran.code,
        Some(3),
        "a target that never answered exits 3: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("never answered"),
        "stderr: {}",
        ran.stderr
    );
    assert!(records.len() >= 3, "only {} attempts in 1 s", records.len());
    assert_all_failed(&records, "refused", "refused");
    assert!(profile_files(&run).is_empty());
}

#[test]
fn collect_faults_target_that_never_answers_times_out_without_overlap() {
    let (records, ran, server) = run_against_fault(hang, "200ms", "300ms", "2s", &[]);
    eprintln!(
        "timeout: {} attempts, exit {:?}, in {:?}",
        records.len(),
        ran.code,
        ran.wall
    );
    assert!(
        ran.wall < Duration::from_secs(6),
        "the collector took {:?} to stop after --duration 2s",
        ran.wall
    );
    // 2 s of 300 ms timeouts, back to back.
    assert!(records.len() >= 4, "only {} attempts", records.len());
    assert_all_failed(&records, "timeout", "");
    for r in &records {
        let latency = r["latency_ms"].as_f64().unwrap();
        assert!(
            (250.0..1500.0).contains(&latency),
            "an attempt took {latency} ms with --timeout 300ms: {r}"
        );
    }
    assert_eq!(server.max_in_flight(), 1);
}

#[test]
fn collect_faults_http_500_is_a_status_error() {
    let (records, _, _) = run_against_fault(server_error, "100ms", "2s", "1s", &[]);
    assert_all_failed(&records, "status", "500");
    // The body's text helps: it is quoted in the error.
    assert!(
        records[0]["error"]
            .as_str()
            .unwrap()
            .contains("profile writer panicked"),
        "{}",
        records[0]
    );
}

#[test]
fn collect_faults_html_page_is_invalid_and_not_stored() {
    let (records, _, _) = run_against_fault(
        |s| util::respond(s, "200 OK", "text/html; charset=utf-8", html()),
        "100ms",
        "2s",
        "1s",
        &[],
    );
    assert_all_failed(&records, "invalid", "HTML");
}

#[test]
fn collect_faults_connection_dropped_mid_body_is_a_reset() {
    let body = good_profile();
    let (records, _, _) =
        run_against_fault(move |s| cut_mid_body(s, &body), "100ms", "2s", "1s", &[]);
    assert_all_failed(&records, "reset", "");
}

#[test]
fn collect_faults_truncated_gzip_is_invalid_and_not_stored() {
    let body = truncated_profile();
    let (records, _, _) =
        run_against_fault(move |s| serve_profile(s, &body), "100ms", "2s", "1s", &[]);
    assert_all_failed(&records, "invalid", "truncated gzip");
}

#[test]
fn collect_faults_body_over_max_body_is_too_large() {
    let body = good_profile();
    assert!(body.len() > 1024, "the fixture must exceed 1 KiB");
    let (records, _, _) = run_against_fault(
        move |s| serve_profile(s, &body),
        "100ms",
        "2s",
        "1s",
        &["--max-body", "1KiB"],
    );
    assert_all_failed(&records, "too-large", "1024");
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of `size` at `dir`; None (the test is skipped, saying so; a failure
    /// under CI) when not permitted.
    fn tmpfs(dir: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Mount(dir.to_path_buf())),
            other => {
                let why = match other {
                    Ok(o) => util::stderr(&o),
                    Err(e) => e.to_string(),
                };
                crate::prerequisite::skip(
                    crate::prerequisite::Need::Root,
                    &format!("mounting a tmpfs failed: {}", why.trim()),
                );
                None
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Runs the collector with its run directory on a tmpfs of `size`, against a well-behaved
/// server answering request `n` with `bodies[n % len]`, until the disk fills. Checks that it
/// stops by itself (exit 2, a message naming the full disk) leaving only intact files.
/// Returns the records and the stored files, or None when the test is skipped.
fn fill_the_disk(size: &str, bodies: Vec<Vec<u8>>) -> Option<(Vec<Value>, Vec<PathBuf>)> {
    let dir = util::tempdir();
    let _mount = Mount::tmpfs(&dir.path().join("small"), size)?;
    let server = Server::start(move |n, s| serve_profile(s, &bodies[n % bodies.len()]));
    let run = dir.path().join("small/run");
    let ran = collect(
        &server.url(),
        &run,
        &dir.path().join("logs"),
        &[
            "--interval",
            "100ms",
            "--timeout",
            "1s",
            "--duration",
            "20s",
        ],
        Duration::from_secs(30),
    );
    eprintln!(
        "disk full ({size}): exit {:?} after {:?}; stderr: {}",
        ran.code,
        ran.wall,
        ran.stderr.trim()
    );
    assert_eq!(
        ran.code,
        Some(2),
        "a full disk stops the collector with exit 2: {}",
        ran.stderr
    );
    assert!(
        ran.wall < Duration::from_secs(15),
        "the collector did not stop by itself"
    );
    assert!(
        ran.stderr.to_lowercase().contains("disk is full"),
        "the message names the full disk: {}",
        ran.stderr
    );
    let records = check_run(&run);
    let files = profile_files(&run);
    eprintln!(
        "disk full ({size}): {} records, {} files",
        records.len(),
        files.len()
    );
    assert!(!files.is_empty(), "captures made before the disk filled");
    let stored = records
        .iter()
        .filter(|r| r["error"].is_null() && r["dup_of"].is_null())
        .count();
    assert!(stored >= 1, "no stored capture recorded");
    // Every file on disk is a recorded capture (the manifest line follows the file); only
    // the newest may lack its line, when appending that line is what failed.
    for f in &files {
        let rel = format!("profiles/{}", f.file_name().unwrap().to_string_lossy());
        if !records.iter().any(|r| r["file"] == rel.as_str()) {
            assert_eq!(
                Some(f),
                files.last(),
                "{rel} is on disk but not in the manifest"
            );
        }
    }
    server.assert_paths_are_heap();
    assert_eq!(server.max_in_flight(), 1);
    Some((records, files))
}

#[test]
fn collect_faults_full_disk_stops_cleanly_with_intact_files() {
    // A different valid profile every time, so none is a duplicate of the one before: each
    // capture takes a page of the tmpfs until a profile no longer fits.
    let bodies: Vec<Vec<u8>> = util::fixtures_matching("-heap")
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect();
    assert!(bodies.len() >= 3, "need several heap fixtures");
    let Some((records, _)) = fill_the_disk("64k", bodies) else {
        return;
    };
    assert!(
        records.iter().any(|r| r["error_kind"] == "disk"),
        "the failed capture is recorded as a disk error"
    );
}

#[test]
fn collect_faults_full_disk_while_appending_the_manifest() {
    // The same profile every time: one file, then duplicates, so only the manifest grows and
    // its append is the write that meets the full disk. The manifest must not be left with a
    // torn line (check_run asserts every line is complete JSON).
    let Some((records, files)) = fill_the_disk("16k", vec![good_profile()]) else {
        return;
    };
    assert_eq!(files.len(), 1, "duplicates are not stored again");
    assert!(
        records.iter().filter(|r| !r["dup_of"].is_null()).count() >= 2,
        "duplicates recorded"
    );
}

/// The faults the mixed server cycles through, with the error class each must be given.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Status500,
    Html,
    Hang,
    CutMidBody,
    TruncatedGzip,
    TooLarge,
    CloseWithoutAnswer,
}

const FAULTS: [Fault; 7] = [
    Fault::Status500,
    Fault::Html,
    Fault::Hang,
    Fault::CutMidBody,
    Fault::TruncatedGzip,
    Fault::TooLarge,
    Fault::CloseWithoutAnswer,
];

impl Fault {
    fn expected_kind(self) -> &'static str {
        match self {
            Fault::Status500 => "status",
            Fault::Html | Fault::TruncatedGzip => "invalid",
            Fault::Hang => "timeout",
            Fault::CutMidBody | Fault::CloseWithoutAnswer => "reset",
            Fault::TooLarge => "too-large",
        }
    }
}

#[test]
fn collect_faults_mixed_keeps_going_between_faults() {
    // Good answers (all under --max-body) alternate with faults.
    let good: Vec<Vec<u8>> = util::fixtures_matching("-heap")
        .iter()
        .map(|p| fs::read(p).unwrap())
        .filter(|b| b.len() < 2048)
        .collect();
    let big = fs::read(util::fixture("hiddenleak-heap-rate4k.pb.gz")).unwrap();
    assert!(big.len() > 2048 && good.len() >= 2);
    let full = good_profile();
    let truncated = truncated_profile();
    let server = Server::start(move |n, s| {
        if n % 2 == 0 {
            return serve_profile(s, &good[(n / 2) % good.len()]);
        }
        match FAULTS[(n / 2) % FAULTS.len()] {
            Fault::Status500 => server_error(s),
            Fault::Html => util::respond(s, "200 OK", "text/html", html()),
            Fault::Hang => hang(s),
            Fault::CutMidBody => cut_mid_body(s, &full),
            Fault::TruncatedGzip => serve_profile(s, &truncated),
            Fault::TooLarge => serve_profile(s, &big),
            Fault::CloseWithoutAnswer => {}
        }
    });
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let ran = collect(
        &server.url(),
        &run,
        &dir.path().join("logs"),
        &[
            "--interval",
            "100ms",
            "--timeout",
            "1s",
            "--duration",
            "3s",
            "--max-body",
            "2KiB",
        ],
        Duration::from_secs(20),
    );
    let records = check_run(&run);
    eprintln!(
        "mixed: exit {:?} after {:?}, {} records, kinds {:?}",
        ran.code,
        ran.wall,
        records.len(),
        error_kinds(&records)
    );
    let summary: Vec<String> = records
        .iter()
        .map(|r| format!("{} {} {}", r["seq"], r["error_kind"], r["error"]))
        .collect();
    let summary = summary.join("\n");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(server.max_in_flight(), 1, "requests overlapped");
    server.assert_paths_are_heap();
    assert_requests_recorded(&server, &records);
    // Walk the manifest beside what the server answered: request n got a good profile when
    // n is even, else fault n/2. An attempt whose request never reached the server (a
    // client-side timeout on a loaded machine) matches no request and is skipped.
    let expected = |n: usize| {
        if n % 2 == 0 {
            None
        } else {
            Some(FAULTS[(n / 2) % FAULTS.len()])
        }
    };
    let mut n = 0;
    let mut unseen = 0;
    for r in &records {
        let matches = match expected(n) {
            None => r["error"].is_null() && r["file"].is_string(),
            Some(fault) => r["error_kind"] == fault.expected_kind(),
        };
        if matches {
            n += 1;
        } else {
            assert_eq!(
                r["error_kind"],
                "timeout",
                "request {n} ({:?}) was recorded as {r}; records:\n{summary}",
                expected(n)
            );
            unseen += 1;
        }
    }
    assert_eq!(
        n,
        server.requests(),
        "records do not follow the server's answers; records:\n{summary}"
    );
    assert!(unseen <= 2, "{unseen} attempts never reached the server");
    // Every fault was met, with good captures before and after it.
    assert!(
        n > 2 * FAULTS.len(),
        "only {n} requests: not every fault was served"
    );
    let stored = records
        .iter()
        .filter(|r| r["error"].is_null() && r["dup_of"].is_null())
        .count();
    assert_eq!(profile_files(&run).len(), stored);
}

/// The overlap counter itself: two requests held open together are two in flight (or the
/// `max_in_flight == 1` assertions above would prove nothing), and a request sent right after
/// the previous connection was closed is not an overlap (or they would be flaky).
#[test]
fn collect_faults_harness_counts_overlap_exactly() {
    let send = |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /debug/pprof/heap HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        c
    };
    let wait_for = |server: &Server, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.stats.started.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "the server never read request {n}"
            );
            thread::sleep(Duration::from_millis(2));
        }
    };
    // Back to back: close, then at once the next request, many times.
    let server = Server::start(|_, s| hang(s));
    for n in 1..=20 {
        let c = send(server.addr);
        wait_for(&server, n);
        drop(c);
    }
    assert_eq!(
        server.max_in_flight(),
        1,
        "back-to-back requests are not overlaps"
    );
    // Overlapping.
    let server = Server::start(|_, s| hang(s));
    let a = send(server.addr);
    wait_for(&server, 1);
    let b = send(server.addr);
    wait_for(&server, 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.max_in_flight() < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        server.max_in_flight(),
        2,
        "two open requests are an overlap"
    );
    drop((a, b));
}
