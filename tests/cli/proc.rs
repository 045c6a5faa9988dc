//! `proc:PID` against the target's own pprof: the procheap fixture freezes its published heap
//! profile, and the profile heapwatch reads out of its memory must equal the one it serves at
//! /debug/pprof/heap, figure for figure (`go tool pprof -top` and `-traces` as the judge), for
//! the installed Go and older releases, plain, PIE and stripped. Then the ways it must refuse.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use heapwatch::source::proc::{ProcError, ProcSource};
use heapwatch::source::{FailureKind, Source as _, Want};

use crate::prerequisite::{self, Need};
use crate::util::{self, Reaped};

const SAMPLE_TYPES: [&str; 4] = [
    "alloc_objects",
    "alloc_space",
    "inuse_objects",
    "inuse_space",
];

/// Builds testdata/go/procheap (or its `noprofile` package) with a toolchain and flags, once
/// per variant. `toolchain` is a GOTOOLCHAIN value (`local` for the installed Go): older ones
/// come through the module proxy the first time. Variants named `cgo…` or `ext…` are built
/// with cgo on (the system linker, gcc, links them).
pub(crate) fn build(
    variant: &str,
    package: &str,
    toolchain: &str,
    flags: &[&str],
) -> Option<PathBuf> {
    let go = util::go()?;
    let cgo = variant.contains("cgo") || variant.contains("ext");
    if cgo && util::on_path("gcc").is_none() {
        prerequisite::skip(Need::CCompiler, "`gcc` is not on PATH");
        return None;
    }
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(variant) {
        return Some(path.clone());
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("procheap");
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join(variant);
    let out = Command::new(&go)
        .args(["build", "-trimpath"])
        .args(flags)
        .arg("-o")
        .arg(&out_path)
        .arg(package)
        .current_dir(util::repo().join("testdata/go/procheap"))
        .env("CGO_ENABLED", if cgo { "1" } else { "0" })
        .env("GOTOOLCHAIN", toolchain)
        .env("GOFLAGS", "-buildvcs=false")
        .env(
            "GOEXPERIMENT",
            ["nospinbitmutex", "staticlockranking"]
                .into_iter()
                .find(|x| variant.contains(x))
                .unwrap_or(""),
        )
        .output()
        .expect("go build runs");
    assert!(
        out.status.success(),
        "building procheap {variant} with {toolchain} failed: {}",
        util::stderr(&out)
    );
    built.insert(variant.to_string(), out_path.clone());
    Some(out_path)
}

/// A running fixture: the child and the port of its pprof endpoint.
pub(crate) struct Running {
    pub(crate) child: Reaped,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

pub(crate) fn start(binary: &Path) -> Running {
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let mut child = Command::new(binary)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the fixture");
    let addr = util::wait_for_line(&log, "listening on ", &mut child, Duration::from_secs(30));
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .expect("a port");
    Running {
        child: Reaped(child),
        port,
        _dir: dir,
    }
}

fn http_heap(port: u16) -> Vec<u8> {
    let mut reply = ureq::get(&format!("http://127.0.0.1:{port}/debug/pprof/heap"))
        .call()
        .expect("the fixture serves its heap profile");
    reply
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .expect("the body reads")
}

/// `go tool pprof` output with its header (file, build id, type, time) cut off.
pub(crate) fn pprof(go: &Path, file: &Path, args: &[&str]) -> String {
    let out = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .expect("go tool pprof runs");
    assert!(
        out.status.success(),
        "pprof on {}: {}",
        file.display(),
        util::stderr(&out)
    );
    let text = util::stdout(&out);
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| {
            ["File:", "Build ID:", "Type:", "Time:"]
                .iter()
                .any(|h| l.starts_with(h))
        })
        .collect();
    body.join("\n")
}

/// `-traces` output without the traces whose value is 0.
fn nonzero_traces(text: &str) -> String {
    let blocks: Vec<&str> = text
        .split("-----------+-------------------------------------------------------")
        .collect();
    blocks
        .into_iter()
        .filter(|block| {
            let value = block.lines().map(str::trim_start).find(|l| {
                !l.is_empty()
                    && !l
                        .split_whitespace()
                        .next()
                        .is_some_and(|w| w.ends_with(':'))
            });
            value.is_some_and(|l| l.split_whitespace().next() != Some("0"))
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The judge: per function (`-top`) on all four sample types, and per stack (`-traces`).
fn assert_same_profile(proc_file: &Path, http_file: &Path, what: &str) {
    let go = util::go().expect("go is there when the fixture was built");
    for sample in SAMPLE_TYPES {
        let args = [
            "-top",
            "-nodefraction=0",
            "-nodecount=100000",
            &format!("-sample_index={sample}"),
        ];
        let ours = pprof(&go, proc_file, &args);
        let theirs = pprof(&go, http_file, &args);
        assert_eq!(ours, theirs, "{what}: -top -sample_index={sample} differs");
        assert!(
            ours.lines().count() > 8,
            "{what}: a trivial profile:\n{ours}"
        );
    }
    // Per stack, for every sample type. A bucket the runtime creates between the two reads
    // (the HTTP request allocates, sampled into a cycle no GC will publish) is an all-zero
    // sample in one of them only, so zero-valued traces are left out on both sides.
    let mut ours = String::new();
    for sample in SAMPLE_TYPES {
        let args = ["-traces", &format!("-sample_index={sample}")];
        ours = nonzero_traces(&pprof(&go, proc_file, &args));
        let theirs = nonzero_traces(&pprof(&go, http_file, &args));
        assert_eq!(
            ours, theirs,
            "{what}: -traces -sample_index={sample} differs"
        );
    }
    for site in [
        "main.newNode",
        "main.makeSlice[go.shape.int]",
        "main.deep",
        "main.retainLarge",
    ] {
        assert!(ours.contains(site), "{what}: no {site} in\n{ours}");
    }
}

/// Runs one variant: the proc capture through the library, the target's own through HTTP.
fn check_variant(variant: &str, toolchain: &str, flags: &[&str], go_version: &str) {
    let Some(binary) = build(variant, ".", toolchain, flags) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    assert!(
        source.go_version().starts_with(go_version),
        "{variant}: built with {}",
        source.go_version()
    );
    let reply = source
        .fetch(Want::Heap, Duration::from_secs(5))
        .expect("capture");
    assert_eq!(reply.pid, Some(pid));
    let theirs = http_heap(running.port);
    let dir = util::tempdir();
    let proc_file = util::write(dir.path(), "proc.pb.gz", &reply.bytes);
    let http_file = util::write(dir.path(), "http.pb.gz", &theirs);
    assert_same_profile(&proc_file, &http_file, variant);
}

pub(crate) fn installed_go_version() -> Option<String> {
    let out = Command::new(util::go()?)
        .args(["env", "GOVERSION"])
        .output()
        .ok()?;
    Some(util::stdout(&out).trim().to_string())
}

#[test]
fn proc_capture_equals_pprof_pie() {
    if let Some(v) = installed_go_version() {
        check_variant("pie", "local", &["-buildmode=pie"], &v);
    }
}

/// Stripped: no .symtab, the runtime's variables recovered from its code, `go:func.*` from
/// its module data.
#[test]
fn proc_capture_equals_pprof_stripped() {
    if let Some(v) = installed_go_version() {
        check_variant("stripped", "local", &["-ldflags=-s -w"], &v);
    }
}

#[test]
fn proc_capture_equals_pprof_stripped_pie() {
    if let Some(v) = installed_go_version() {
        check_variant(
            "stripped-pie",
            "local",
            &["-ldflags=-s -w", "-buildmode=pie"],
            &v,
        );
    }
}

/// Go 1.23 keeps the PIE pclntab in RELRO and has no `.go.module` section.
#[test]
fn proc_capture_equals_pprof_go1_23_stripped_pie() {
    check_variant(
        "go1.23.12-stripped-pie",
        "go1.23.12",
        &["-ldflags=-s -w", "-buildmode=pie"],
        "go1.23.12",
    );
}

#[test]
fn proc_capture_equals_pprof_go1_25() {
    check_variant("go1.25.5", "go1.25.5", &[], "go1.25.5");
}

#[test]
fn proc_capture_equals_pprof_go1_24() {
    check_variant("go1.24.6", "go1.24.6", &[], "go1.24.6");
}

#[test]
fn proc_capture_equals_pprof_go1_23() {
    check_variant("go1.23.12", "go1.23.12", &[], "go1.23.12");
}

/// The system linker: a cgo program (its own C code), and a pure Go one linked with
/// `-linkmode=external`, each plain, stripped and PIE. The C start-up code comes before Go's in
/// `.text`, so only `runtime.firstmoduledata` says where function offsets count from.
fn check_system_linked(toolchain: &str) {
    let tag = if toolchain == "local" { "" } else { toolchain };
    let ext = ["-tags=procheap_nocgo", "-ldflags=-linkmode=external"];
    let ext_stripped = ["-tags=procheap_nocgo", "-ldflags=-linkmode=external -s -w"];
    let ext_pie = [
        "-tags=procheap_nocgo",
        "-ldflags=-linkmode=external",
        "-buildmode=pie",
    ];
    let variants: [(&str, &[&str]); 6] = [
        ("cgo", &[]),
        ("cgo-stripped", &["-ldflags=-s -w"]),
        ("cgo-pie", &["-buildmode=pie"]),
        ("ext", &ext),
        ("ext-stripped", &ext_stripped),
        ("ext-pie", &ext_pie),
    ];
    let version = if toolchain == "local" {
        installed_go_version()
    } else {
        Some(toolchain.to_string())
    };
    let Some(version) = version else { return };
    for (name, flags) in variants {
        check_variant(&format!("{name}{tag}"), toolchain, flags, &version);
    }
}

#[test]
fn proc_capture_equals_pprof_system_linked() {
    check_system_linked("local");
}

#[test]
fn proc_capture_equals_pprof_go1_25_system_linked() {
    check_system_linked("go1.25.5");
}

#[test]
fn proc_capture_equals_pprof_go1_24_system_linked() {
    check_system_linked("go1.24.6");
}

#[test]
fn proc_capture_equals_pprof_go1_23_system_linked() {
    check_system_linked("go1.23.12");
}

/// Each older release stripped and as PIE, beside its plain build above: the runtime
/// variables recovered from the code, and the load bias, per release.
fn check_older(toolchain: &str) {
    check_variant(
        &format!("{toolchain}-stripped"),
        toolchain,
        &["-ldflags=-s -w"],
        toolchain,
    );
    check_variant(
        &format!("{toolchain}-pie"),
        toolchain,
        &["-buildmode=pie"],
        toolchain,
    );
}

#[test]
fn proc_capture_equals_pprof_go1_25_stripped_and_pie() {
    check_older("go1.25.5");
}

#[test]
fn proc_capture_equals_pprof_go1_24_stripped_and_pie() {
    check_older("go1.24.6");
}

#[test]
fn proc_capture_equals_pprof_go1_23_stripped_and_pie() {
    check_older("go1.23.12");
}

/// End to end through the command: `collect proc:PID` stores a capture equal to the target's.
#[test]
fn collect_proc_pid_stores_what_pprof_serves() {
    let Some(binary) = build("plain", ".", "local", &[]) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        run.to_str().unwrap(),
        "--duration",
        "600ms",
        "--interval",
        "100ms",
        "-q",
    ]);
    assert!(
        out.status.success(),
        "collect failed: {}",
        util::stderr(&out)
    );
    let info = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(
        info.contains(r#""source": "proc""#) || info.contains(r#""source":"proc""#),
        "{info}"
    );
    let manifest = std::fs::read_to_string(run.join("manifest.jsonl")).unwrap();
    assert!(manifest.contains(&format!("\"pid\":{pid}")), "{manifest}");
    let first = run.join("profiles/000001-heap.pb.gz");
    assert!(first.is_file(), "no capture stored:\n{manifest}");
    let http_file = util::write(dir.path(), "http.pb.gz", &http_heap(running.port));
    assert_same_profile(&first, &http_file, "collect proc:PID");
}

/// go1.24 with the futex lock back (`GOEXPERIMENT=nospinbitmutex`): read with its own lock
/// layout, and equal to pprof's.
#[test]
fn proc_capture_equals_pprof_go1_24_nospinbitmutex() {
    check_variant(
        "go1.24.6-nospinbitmutex",
        "go1.24.6",
        &[],
        "go1.24.6 X:nospinbitmutex",
    );
}

/// `GOEXPERIMENT=staticlockranking` moves every mutex's key: refused, naming the experiment.
#[test]
fn a_build_with_static_lock_ranking_is_refused_by_name() {
    let Some(binary) = build("staticlockranking", ".", "local", &[]) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let err = ProcSource::attach(pid, format!("proc:{pid}"))
        .err()
        .expect("refused");
    assert!(
        matches!(err, ProcError::UnsupportedExperiment { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("GOEXPERIMENT=staticlockranking"),
        "{err}"
    );
}

#[test]
fn heap_profiling_disabled_by_the_linker_is_refused() {
    let Some(binary) = build("noprofile", "./noprofile", "local", &[]) else {
        return;
    };
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let mut child = Command::new(&binary)
        .stdout(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    util::wait_for_line(&log, "ready", &mut child, Duration::from_secs(30));
    let child = Reaped(child);
    let err = ProcSource::attach(child.0.id(), "proc:np")
        .err()
        .expect("refused");
    assert!(matches!(err, ProcError::ProfilingDisabled { .. }), "{err}");
    assert!(err.to_string().contains("disabled by the linker"), "{err}");
}

#[test]
fn a_process_that_is_not_go_or_not_there_gets_a_clear_error() {
    let sleeper = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = sleeper.0.id();
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        "/nonexistent/run",
        "-q",
    ]);
    let text = util::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("not a Go program") && text.contains(&format!("proc:{pid}")),
        "{text}"
    );

    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let err = ProcSource::attach(gone_pid, "proc:gone")
        .err()
        .expect("refused");
    assert!(matches!(err, ProcError::NoProcess { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("no process {gone_pid}")),
        "{err}"
    );

    let out = util::run(&["collect", "proc:abc", "--out", "/nonexistent/run", "-q"]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains("expected proc:PID"),
        "{}",
        util::stderr(&out)
    );
}

#[test]
fn a_process_that_vanishes_after_attach_is_a_failed_attempt_meaning_gone() {
    let Some(binary) = build("plain", ".", "local", &[]) else {
        return;
    };
    let mut running = start(&binary);
    let pid = running.child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    running.child.0.kill().unwrap();
    running.child.0.wait().unwrap();
    let err = source
        .fetch(Want::Heap, Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Refused, "{err}");
    assert!(err.to_string().contains("exited"), "{err}");
}

/// An exec keeps the pid and the start time: the next capture says the program changed,
/// rather than reading the new program's memory at the old one's addresses.
#[test]
fn a_process_that_execs_into_another_program_is_a_failed_attempt_naming_the_exec() {
    let Some(fixtures) = util::go_fixtures() else {
        return;
    };
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let child = Command::new(fixtures.join("execinto"))
        .args(["sleep", "600"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start execinto");
    let mut child = Reaped(child);
    util::wait_for_line(&log, "listening on ", &mut child.0, Duration::from_secs(30));
    let pid = child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    let first = source.fetch(Want::Heap, Duration::from_secs(5));
    assert!(
        first.is_ok(),
        "a capture before the exec: {:?}",
        first.err()
    );
    let usr1 = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status();
    assert!(usr1.is_ok_and(|s| s.success()));
    let started = std::time::Instant::now();
    while !std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p.ends_with("sleep")) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "execinto became sleep"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = source
        .fetch(Want::Heap, Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Refused, "{err}");
    assert!(err.to_string().contains("an exec"), "{err}");
    assert!(
        !err.to_string().contains("  "),
        "one sentence, single-spaced: {err}"
    );
    assert!(err.to_string().contains(&format!("process {pid}")), "{err}");
}

/// Without ptrace rights (here: uid nobody against a root-owned target), the message names
/// what is needed.
#[test]
fn missing_ptrace_rights_name_what_is_needed() {
    let Some(binary) = build("plain", ".", "local", &[]) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_heapwatch"))
        .args([
            "collect",
            &format!("proc:{pid}"),
            "--out",
            "/tmp/heapwatch-never",
            "-q",
        ])
        .output()
        .expect("setpriv runs");
    let text = util::stderr(&out);
    assert!(!out.status.success());
    for needed in ["CAP_SYS_PTRACE", "root", "ptrace_scope", "SYS_PTRACE"] {
        assert!(text.contains(needed), "no {needed} in: {text}");
    }
}

/// A corrupting fixture (testdata/go/procheap/corrupt) damaging its own profile one way.
pub(crate) fn start_corrupt(binary: &Path, how: &str) -> Reaped {
    let dir = util::tempdir();
    let log = dir.path().join(format!("{how}.txt"));
    let mut child = Command::new(binary)
        .arg(how)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the corrupt fixture");
    util::wait_for_line(&log, "ready", &mut child, Duration::from_secs(30));
    Reaped(child)
}

/// Runs `heapwatch ARGS` to its end; (exit code, stderr, its peak RSS in KiB).
///
/// The peak is its own address space's high-water mark (`VmHWM`), read from /proc every 5 ms
/// while it lives, not wait4's `ru_maxrss`: Linux counts into that the resident size of the
/// address space an exec replaced, which for a process spawned from this test binary is the
/// test binary's own (hundreds of MiB while other tests run beside it). A rise within its
/// last 5 ms would be missed.
fn run_measured(args: &[&str]) -> (Option<i32>, String, i64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_heapwatch"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("heapwatch starts");
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).ok();
        text
    });
    // Until it has exited: a zombie, not yet reaped, keeps its pid but shows no VmHWM.
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    while let Some(kib) = std::fs::read_to_string(&status).ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse::<i64>().ok()
    }) {
        peak_kib = peak_kib.max(kib);
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = child.wait().expect("wait for heapwatch");
    (status.code(), reader.join().unwrap(), peak_kib)
}

/// Real Go processes that damage their own heap profile through `unsafe` (GC off, so their
/// runtime never walks it): a bucket list that loops, a bucket claiming 2^40 frames, a list
/// pointer into unmapped memory, and one into pages a userfaultfd never serves (a read that
/// blocks for good). One collect reads them beside a healthy target: each attempt on a damaged
/// one is a failed attempt whose reason says what is wrong in words with the address in hex,
/// ends within the timeout, and the healthy target is captured all along, in under 200 MiB.
#[test]
fn damaged_profiles_are_failed_attempts_with_reasons_and_the_collect_goes_on() {
    let Some(corrupt) = build(
        "corrupt",
        "./corrupt",
        "local",
        &["-ldflags=-checklinkname=0"],
    ) else {
        return;
    };
    let Some(healthy) = build("plain", ".", "local", &[]) else {
        return;
    };
    let kinds: [(&str, &[&str]); 4] = [
        (
            "loop",
            &["bucket list loops", "is one it already passed", "(at 0x"],
        ),
        (
            "nstk",
            &["claims 1099511627776 stack frames", "bucket at 0x"],
        ),
        (
            "unmapped",
            &["reading a bucket header: 48 bytes at 0x", "unmapped memory"],
        ),
        ("uffd", &["blocked"]),
    ];
    let damaged: Vec<(Reaped, &str, &[&str])> = kinds
        .iter()
        .map(|&(how, words)| (start_corrupt(&corrupt, how), how, words))
        .collect();
    let good = start(&healthy);
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let mut args = vec![
        "collect".to_string(),
        "--out".into(),
        run.to_str().unwrap().into(),
        "--duration".into(),
        "4s".into(),
        "--interval".into(),
        "500ms".into(),
        "--timeout".into(),
        "500ms".into(),
        "-q".into(),
    ];
    for (child, _, _) in &damaged {
        args.push(format!("proc:{}", child.0.id()));
    }
    args.push(format!("proc:{}", good.child.0.id()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_code, stderr, peak_kib) = run_measured(&args);
    assert!(
        peak_kib < 200 * 1024,
        "the collector peaked at {peak_kib} KiB:\n{stderr}"
    );

    let records = |pid: u32| -> Vec<serde_json::Value> {
        let path = run.join(format!("targets/pid-{pid}/manifest.jsonl"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", path.display()));
        text.lines()
            .map(|l| serde_json::from_str(l).expect("a manifest line"))
            .filter(|r: &serde_json::Value| r["kind"] == "heap")
            .collect()
    };
    for (child, how, words) in &damaged {
        let heap = records(child.0.id());
        assert!(heap.len() >= 3, "{how}: {} attempts only", heap.len());
        let slowest = heap
            .iter()
            .filter_map(|r| r["latency_ms"].as_f64())
            .fold(0.0, f64::max);
        eprintln!(
            "{how}: {} failed attempts, the slowest {slowest:.1} ms; collector peak {peak_kib} KiB",
            heap.len()
        );
        for r in &heap {
            let error = r["error"].as_str().unwrap_or_default();
            assert!(r["file"].is_null(), "{how}: a capture was stored: {r}");
            for w in *words {
                assert!(error.contains(w), "{how}: no {w:?} in {error:?}");
            }
            assert!(
                !error.contains("{ addr") && !error.contains("Unmapped"),
                "{how}: a debug form: {error}"
            );
            let latency = r["latency_ms"].as_f64().unwrap_or(f64::MAX);
            assert!(
                latency < 2000.0,
                "{how}: an attempt took {latency} ms against a 500 ms timeout"
            );
        }
    }
    let uffd = records(damaged[3].0.0.id());
    assert_eq!(uffd[0]["error_kind"], "timeout", "{}", uffd[0]);
    let stored = records(good.child.0.id())
        .iter()
        .filter(|r| r["error"].is_null())
        .count();
    assert!(
        stored >= 4,
        "the healthy target was captured {stored} times in 4 s at 500 ms"
    );
}

/// Per site line of `main.alloc` in a gcloop capture: (alloc_objects, inuse_objects).
fn gcloop_sites(gz: &[u8]) -> std::collections::BTreeMap<i64, (i64, i64)> {
    use heapwatch::decode;
    let raw = decode::gunzip(gz, 1 << 28).expect("a gzipped capture");
    let p = decode::decode_message(&raw).expect("a pprof profile");
    let s = |i: i64| p.string_table[i as usize].as_str();
    let index = |name: &str| {
        p.sample_type
            .iter()
            .position(|t| s(t.r#type) == name)
            .expect("a sample type")
    };
    let (allocs, inuse) = (index("alloc_objects"), index("inuse_objects"));
    let locations: HashMap<u64, _> = p.location.iter().map(|l| (l.id, l)).collect();
    let functions: HashMap<u64, _> = p.function.iter().map(|f| (f.id, f)).collect();
    let mut sites = std::collections::BTreeMap::new();
    for sample in &p.sample {
        let Some(leaf) = sample.location_id.first().and_then(|id| locations.get(id)) else {
            continue;
        };
        let Some(line) = leaf.line.first() else {
            continue;
        };
        let function = functions.get(&line.function_id);
        if function.is_some_and(|f| s(f.name) == "main.alloc") {
            let e = sites.entry(line.line).or_insert((0, 0));
            e.0 += sample.value[allocs];
            e.1 += sample.value[inuse];
        }
    }
    sites
}

/// A sweep's flush rewrites every bucket's record under the profile lock without moving the
/// cycle counter, and can start and end inside one walk. The gcloop fixture runs GC cycles
/// back to back with one allocation at each of 16 sites in between, every allocation sampled,
/// so every state the runtime publishes has the same allocation and free counts at all 16
/// sites, and a capture that mixes records from before and after a flush has sites that
/// disagree. 500 captures: each has all 16 sites equal (frees no more than allocations), and
/// the counts never go back from one capture to the next. Attempts that met a flush are
/// failed attempts (counted), never a capture.
#[test]
fn every_capture_of_a_gc_loop_is_a_state_the_runtime_published() {
    let Some(binary) = build("gcloop", "./gcloop", "local", &[]) else {
        return;
    };
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let mut child = Command::new(&binary)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start gcloop");
    util::wait_for_line(&log, "ready", &mut child, Duration::from_secs(30));
    let child = Reaped(child);
    let pid = child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}"))
        .expect("attach")
        .with_limits(heapwatch::source::proc::walk::Limits {
            attempts: 64,
            ..Default::default()
        });
    let (mut consistent, mut busy, mut last) = (0, 0, 0);
    for attempt in 0..5000 {
        if consistent >= 500 {
            break;
        }
        let reply = match source.fetch(Want::Heap, Duration::from_secs(5)) {
            Ok(reply) => reply,
            Err(e) if e.kind == FailureKind::Timeout => {
                busy += 1;
                continue;
            }
            Err(e) => panic!("attempt {attempt}: {e}"),
        };
        let sites = gcloop_sites(&reply.bytes);
        // Before the first loop's GC, a site may not exist yet: skip such early captures.
        if sites.len() < 16 {
            assert!(
                consistent == 0,
                "capture {attempt}: sites went away: {sites:?}"
            );
            continue;
        }
        assert_eq!(sites.len(), 16, "capture {attempt}: {sites:?}");
        let first = *sites.values().next().unwrap();
        for (line, counts) in &sites {
            assert_eq!(
                *counts, first,
                "capture {attempt}: line {line} disagrees with the first site, a mix of two \
                 published states: {sites:?}"
            );
        }
        assert!(first.1 >= 0 && first.1 <= first.0, "{first:?}");
        assert!(first.0 >= last, "capture {attempt}: allocations went back");
        last = first.0;
        consistent += 1;
    }
    assert!(
        consistent >= 500,
        "{consistent} consistent captures, {busy} failed attempts"
    );
    eprintln!("gcloop: {consistent} consistent captures; {busy} attempts met a flush");
}

/// Per sample type, the values at samples whose leaf is `function`.
fn at_leaf(gz: &[u8], function: &str) -> HashMap<String, i64> {
    use heapwatch::decode;
    let raw = decode::gunzip(gz, 1 << 28).expect("a gzipped capture");
    let p = decode::decode_message(&raw).expect("a pprof profile");
    let s = |i: i64| p.string_table[i as usize].clone();
    let locations: HashMap<u64, _> = p.location.iter().map(|l| (l.id, l)).collect();
    let functions: HashMap<u64, _> = p.function.iter().map(|f| (f.id, f)).collect();
    let mut out = HashMap::new();
    for sample in &p.sample {
        let leaf = sample
            .location_id
            .first()
            .and_then(|id| locations.get(id))
            .and_then(|l| l.line.first())
            .and_then(|line| functions.get(&line.function_id));
        if leaf.is_some_and(|f| s(f.name) == function) {
            for (t, v) in p.sample_type.iter().zip(&sample.value) {
                *out.entry(s(t.r#type)).or_default() += v;
            }
        }
    }
    out
}

/// What the heap profile has not published yet: procheap allocates at `main.recentSite` after
/// its last GC. The proc capture reports those allocations as `recent_objects` and
/// `recent_space` (the four standard types there are zero, as in /debug/pprof/heap), and once
/// two GCs have published them, the fixture's own profile shows exactly those as
/// `alloc_objects` and `alloc_space`. `inuse_space` stays the type pprof shows by default.
#[test]
fn proc_capture_reports_unpublished_allocations_as_recent_types() {
    let Some(binary) = build("plain", ".", "local", &[]) else {
        return;
    };
    let running = start(&binary);
    let pid = running.child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    let ours = source
        .fetch(Want::Heap, Duration::from_secs(5))
        .expect("capture")
        .bytes;
    let recent = at_leaf(&ours, "main.recentSite");
    for standard in SAMPLE_TYPES {
        assert_eq!(recent.get(standard), Some(&0), "{standard}: {recent:?}");
    }
    let (objects, space) = (recent["recent_objects"], recent["recent_space"]);
    assert!(objects > 0 && space >= objects * 512, "{recent:?}");
    let theirs_before = at_leaf(&http_heap(running.port), "main.recentSite");
    assert_eq!(
        theirs_before.get("alloc_objects"),
        Some(&0),
        "{theirs_before:?}"
    );

    let mut reply = ureq::get(&format!("http://127.0.0.1:{}/publish", running.port))
        .call()
        .expect("the fixture publishes");
    let _ = reply.body_mut().read_to_string();
    let theirs = at_leaf(&http_heap(running.port), "main.recentSite");
    assert_eq!(
        (theirs["alloc_objects"], theirs["alloc_space"]),
        (objects, space),
        "what was recent is what the two GCs published: {theirs:?}"
    );

    let dir = util::tempdir();
    let file = util::write(dir.path(), "proc.pb.gz", &ours);
    let go = util::go().expect("go built the fixture");
    let out = Command::new(&go)
        .args(["tool", "pprof", "-top", "-nodecount=1"])
        .arg(&file)
        .output()
        .expect("pprof runs");
    let text = util::stdout(&out);
    assert!(text.contains("Type: inuse_space"), "{text}");
}
