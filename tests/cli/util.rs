//! Helpers shared by the integration tests: running the binary, finding fixtures and Go,
//! processes and cgroups, `go tool pprof -top` as the oracle, the bits of a small HTTP/1.1
//! server, and golden files.
//!
//! Golden files: `golden(path, actual)` compares byte for byte; run the tests with
//! `HEAPWATCH_BLESS=1` to rewrite them after a deliberate change (the one bless switch).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::prerequisite::{self, Need};

/// The heapwatch binary built for these tests.
pub fn heapwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heapwatch"))
}

pub fn run(args: &[&str]) -> Output {
    heapwatch()
        .args(args)
        .output()
        .expect("heapwatch binary runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A committed capture under testdata/profiles.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("testdata/profiles").join(name)
}

/// Every committed capture whose name contains `part`.
pub fn fixtures_matching(part: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("testdata/profiles"))
        .expect("testdata/profiles exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".pb.gz") && name.contains(part)
        })
        .collect();
    files.sort();
    files
}

/// The Go toolchain, when installed; else the test is skipped, saying so (a failure under CI
/// or HEAPWATCH_REQUIRE_GO: see [`prerequisite`]).
/// The program `name` as found on PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

pub fn go() -> Option<PathBuf> {
    let found = on_path("go");
    if found.is_none() {
        prerequisite::skip(Need::Go, "`go` is not on PATH");
    }
    found
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("heapwatch-test-")
        .tempdir()
        .expect("temp dir")
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write test file");
    p
}

/// Unix time in milliseconds.
pub fn unix_ms() -> i64 {
    heapwatch::time::now_ms()
}

/// A loopback TCP port that was free a moment ago (bound to port 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free loopback port")
        .port()
}

static GO_FIXTURES: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();

/// The folder holding every program of testdata/go/cmd, built once per test process with
/// `go build -trimpath` (CGO off) into the Cargo target dir. `None` when Go is missing (with
/// [`go`]'s rules: skipped locally, a failure under HEAPWATCH_REQUIRE_GO).
pub fn go_fixtures() -> Option<PathBuf> {
    let go = go()?;
    let built = GO_FIXTURES.get_or_init(|| {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let bin = tmp.join("go-fixtures");
        // Go's work dir on the same file system as `bin`: the linked binaries are renamed into
        // place, so another test process never runs a half-copied one.
        let work = tmp.join("go-work");
        for dir in [&bin, &work] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let started = std::time::Instant::now();
        let out = Command::new(&go)
            .args(["build", "-trimpath", "-o"])
            .arg(&bin)
            .arg("./cmd/...")
            .current_dir(repo().join("testdata/go"))
            .env("CGO_ENABLED", "0")
            .env("GOTMPDIR", &work)
            .output()
            .map_err(|e| format!("{}: {e}", go.display()))?;
        if !out.status.success() {
            return Err(format!(
                "go build ./cmd/... failed ({}): {}",
                out.status,
                stderr(&out)
            ));
        }
        eprintln!(
            "built the Go fixtures into {} in {:.1}s",
            bin.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(bin)
    });
    match built {
        Ok(dir) => Some(dir.clone()),
        Err(e) => panic!("{e}"),
    }
}

/// One Go fixture program (`oomgrow`, `steady`, …), built by [`go_fixtures`].
pub fn go_fixture(name: &str) -> Option<PathBuf> {
    let path = go_fixtures()?.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    Some(path)
}

// ---------------------------------------------------------------- processes and cgroups

/// A child process killed (and reaped) if the test ends before it does.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends a signal with kill(1): libc is not a dependency.
pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Resident set of a process in bytes, `None` once it is gone.
pub fn process_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        let kb = l
            .strip_prefix("VmRSS:")?
            .trim()
            .trim_end_matches("kB")
            .trim();
        kb.parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// Waits for a child, polling, and fails the test past `deadline`. Returns the status and the
/// unix ms right after the wait returned.
pub fn wait_for_exit(
    child: &mut std::process::Child,
    deadline: std::time::Duration,
) -> (std::process::ExitStatus, i64) {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return (status, unix_ms());
        }
        if started.elapsed() > deadline {
            // Where it and its children were stuck, before they are killed: a collector that
            // hangs beside a target at its limit is a bug to find, not a slow machine.
            let stuck = where_stuck(child.id());
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not exit within {deadline:?}; where it was:\n{stuck}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Each thread of `pid` and of its children (one level), with its state and kernel wait
/// channel, and its kernel stack where this user may read it.
fn where_stuck(pid: u32) -> String {
    let read = |p: String| std::fs::read_to_string(p).unwrap_or_default();
    let mut pids = vec![pid.to_string()];
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let children = read(format!("{}/children", t.path().display()));
            pids.extend(children.split_whitespace().map(str::to_string));
        }
    }
    let mut out = String::new();
    for p in pids {
        let comm = read(format!("/proc/{p}/comm"));
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let stat = read(format!("{}/stat", dir.display()));
            // The state is the field after the command's closing parenthesis.
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            let wchan = read(format!("{}/wchan", dir.display()));
            let stack = read(format!("{}/stack", dir.display()));
            out.push_str(&format!(
                "{p} {} thread {:?}: state {} wchan {wchan}\n{stack}",
                comm.trim(),
                t.file_name(),
                state.unwrap_or("?")
            ));
        }
    }
    out
}

/// Polls a child's output file until a line starting with `prefix` appears; returns the rest
/// of that line. Fails the test if the child exits first or `timeout` passes.
pub fn wait_for_line(
    file: &Path,
    prefix: &str,
    child: &mut std::process::Child,
    timeout: std::time::Duration,
) -> String {
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(rest) = text.lines().find_map(|l| l.strip_prefix(prefix)) {
            return rest.to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            // What it said on the way out (its stderr, when kept beside as NAME.err).
            let said = std::fs::read_to_string(file.with_extension("err")).unwrap_or_default();
            panic!(
                "{} exited ({status}) before printing {prefix:?}; it printed {text:?}, \
                 and on stderr {said:?}",
                file.display()
            );
        }
        assert!(
            started.elapsed() < timeout,
            "no {prefix:?} line in {} within {timeout:?}",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A v1 memory cgroup made for one test under /sys/fs/cgroup/memory; removed on drop, with any
/// process left in it.
pub struct MemoryCgroup {
    pub path: PathBuf,
}

impl MemoryCgroup {
    pub fn create(tag: &str, limit: u64) -> Result<MemoryCgroup, String> {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = Path::new("/sys/fs/cgroup/memory")
            .join(format!("heapwatch-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        let cgroup = MemoryCgroup { path };
        let file = cgroup.path.join("memory.limit_in_bytes");
        std::fs::write(&file, limit.to_string())
            .map_err(|e| format!("write {}: {e}", file.display()))?;
        // With swap accounting, swap must not extend the limit.
        let _ = std::fs::write(
            cgroup.path.join("memory.memsw.limit_in_bytes"),
            limit.to_string(),
        );
        Ok(cgroup)
    }

    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// The kernel's OOM-kill counter of this cgroup, when it exposes one.
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.path.join("memory.oom_control")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    /// The memory charged to this cgroup now (`memory.usage_in_bytes`).
    pub fn usage(&self) -> Option<u64> {
        std::fs::read_to_string(self.path.join("memory.usage_in_bytes"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// A command that joins this cgroup, then becomes `program`: inside before it allocates.
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
            .arg("sh")
            .arg(&self.path)
            .arg(program)
            .args(args);
        c
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                signal(pid, "KILL");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        for attempt in 0..20 {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if attempt == 19 => {
                    eprintln!("could not remove {}: {e}", self.path.display())
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
    }
}

/// A memory cgroup for a test that kills a process, or `None` (the caller falls back to a
/// watchdog, saying so) when this machine cannot make one; a failure under CI.
pub fn memory_cgroup_or_watchdog(tag: &str, limit: u64) -> Option<MemoryCgroup> {
    MemoryCgroup::create(tag, limit)
        .map_err(|e| {
            let why = format!("no writable v1 memory cgroup ({e})");
            prerequisite::reduced(Need::Root, &why, "a watchdog plays the kernel");
        })
        .ok()
}

/// A memory cgroup for a test that cannot run without one, or `None` (the test is skipped,
/// saying so); a failure under CI.
pub fn memory_cgroup_or_skip(tag: &str, limit: u64) -> Option<MemoryCgroup> {
    MemoryCgroup::create(tag, limit)
        .map_err(|e| prerequisite::skip(Need::Root, &format!("no writable v1 memory cgroup ({e})")))
        .ok()
}

/// A manifest line that notes an event (a deletion, a boot cycle's start, a process's end, the
/// collector stopping) rather than an attempt to capture something.
pub fn is_event(record: &serde_json::Value) -> bool {
    ["delete", "cycle", "stop", "exit"].contains(&record["kind"].as_str().unwrap_or(""))
}

/// Spawns `command`, whose program a test may have just copied: while another test's thread
/// forks, the child holds the copy's write descriptor until it execs, and exec'ing the copy
/// then fails with "Text file busy" (ETXTBSY); that passes within moments, so it is tried again.
pub fn spawn_fresh_copy(command: &mut Command, program: &Path) -> std::process::Child {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match command.spawn() {
            Ok(child) => return child,
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("start {}: {e}", program.display()),
        }
    }
}

/// Starts a Go fixture that prints `listening on ADDR` first (`steady`, `spike`, …), with its
/// stdout read for that line and its stderr dropped; returns the process and ADDR. It starts
/// with SIGINT and SIGHUP at their defaults: a runner that starts the tests as a background job
/// hands them down ignored, and a Go program keeps an inherited ignore, so a test's Ctrl-C
/// (`signal(pid, "INT")`) would never stop it.
pub fn start_listening(program: &Path, args: &[&str]) -> (Reaped, String) {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut target = Reaped(spawn_fresh_copy(&mut command, program));
    let mut first = String::new();
    BufReader::new(target.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap_or_else(|e| panic!("{} prints its address: {e}", program.display()));
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| {
            panic!(
                "unexpected first line from {}: {first:?}",
                program.display()
            )
        })
        .to_string();
    (target, addr)
}

// ---------------------------------------------------------------- the pprof oracle

/// What `go tool pprof -top` printed, every node kept.
pub struct PprofTop {
    /// Function names in pprof's order.
    pub order: Vec<String>,
    /// "Showing nodes accounting for X": the flat sum of the nodes shown.
    pub accounted: i64,
    /// "of T total": what percentages are relative to.
    pub total: i64,
    /// flat and cum of each function.
    pub rows: BTreeMap<String, (i64, i64)>,
}

/// Runs `go tool pprof -top -nodefraction=0` on `files` (several are merged, as pprof does)
/// for one sample type, in bytes, and reads its table.
pub fn pprof_top(go: &Path, sample: &str, files: &[OsString]) -> PprofTop {
    let out = Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-unit=B",
            "-nodefraction=0",
            "-edgefraction=0",
            "-nodecount=1000000",
        ])
        .arg(format!("-sample_index={sample}"))
        .args(files)
        .output()
        .expect("go tool pprof runs");
    assert!(
        out.status.success(),
        "pprof failed on {files:?}: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    let mut legend = None;
    let mut rows = BTreeMap::new();
    let mut order = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Showing nodes accounting for ") {
            let (accounted, rest) = rest.split_once(',').expect("a comma in the legend");
            let total = rest
                .split(" of ")
                .nth(1)
                .and_then(|t| t.strip_suffix(" total"))
                .expect("'of T total' in the legend");
            legend = Some((parse_pprof_value(accounted), parse_pprof_value(total)));
        }
        if line.trim_start().starts_with("flat") {
            in_table = true;
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !in_table || fields.len() < 6 {
            continue;
        }
        let mut name = fields[5..].join(" ");
        for marker in [" (inline)", " (partial-inline)"] {
            if let Some(stripped) = name.strip_suffix(marker) {
                name = stripped.to_string();
            }
        }
        let figures = (parse_pprof_value(fields[0]), parse_pprof_value(fields[3]));
        order.push(name.clone());
        let previous = rows.insert(name.clone(), figures);
        assert!(
            previous.is_none(),
            "pprof printed {name} twice for {files:?}"
        );
    }
    let (accounted, total) =
        legend.unwrap_or_else(|| panic!("no legend in pprof's output:\n{text}"));
    PprofTop {
        order,
        accounted,
        total,
        rows,
    }
}

fn parse_pprof_value(text: &str) -> i64 {
    let number = text.trim().trim_end_matches('B');
    number
        .parse::<i64>()
        .or_else(|_| number.parse::<f64>().map(|v| v.round() as i64))
        .unwrap_or_else(|_| panic!("unexpected pprof figure {text:?}"))
}

// ---------------------------------------------------------------- small HTTP servers

/// Reads a request head; returns the path, or None if the client went away first.
pub fn read_request_path(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return None;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next()?;
    Some(line.split_whitespace().nth(1)?.to_string())
}

/// A response head promising `length` bytes; the connection closes after the body.
pub fn http_head(status: &str, content_type: &str, length: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// A complete response; the connection closes after it.
pub fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let mut bytes = http_head(status, content_type, body.len());
    bytes.extend_from_slice(body);
    let _ = stream.write_all(&bytes);
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

// ---------------------------------------------------------------- golden files

/// True when the tests run to rewrite their golden files (`HEAPWATCH_BLESS=1`).
pub fn blessing() -> bool {
    std::env::var_os("HEAPWATCH_BLESS").is_some_and(|v| v == "1")
}

/// Compares `actual` with the committed golden file at `path`, byte for byte, naming the first
/// line that differs; under `HEAPWATCH_BLESS=1` rewrites the file instead.
pub fn golden(path: &Path, actual: &str) {
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        eprintln!("blessed {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
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
            expected.lines().nth(first).unwrap_or(""),
            actual.lines().nth(first).unwrap_or("")
        );
    }
}

/// The manifest records of a run as far as they are written: a run still being collected may
/// have a torn last line, which is skipped; a run with no manifest yet has none.
pub fn manifest_so_far(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("manifest.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
