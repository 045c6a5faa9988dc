//! The GC clock of a proc heap capture against the runtime's own count: the gcclock fixture
//! (testdata/go/procheap/gcclock) runs N GC cycles when told, prints `runtime.ReadMemStats`'s
//! NumGC, and waits; a capture taken while it waits carries that NumGC, and its profile cycle
//! moved by as many cycles (each `runtime.GC` publishes one). For the installed Go and the
//! oldest release read (whose MemStats sit elsewhere), plain and stripped; then through
//! `collect`, in the manifest.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use heapwatch::model::capture::GcClock;
use heapwatch::source::proc::ProcSource;
use heapwatch::source::{Source as _, Want};

use crate::proc::build;
use crate::util::{self, Reaped};

/// The fixture, running and waiting for its first line.
struct Fixture {
    child: Reaped,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Fixture {
    fn start(binary: &std::path::Path) -> Fixture {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gcclock");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Fixture {
            child: Reaped(child),
            stdin,
            stdout,
        }
    }

    /// Runs `n` GC cycles in the fixture: its NumGC after them.
    fn gc(&mut self, n: u32) -> u32 {
        writeln!(self.stdin, "{n}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix("numgc ")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("gcclock said {line:?}"))
    }
}

fn clock(source: &mut ProcSource) -> GcClock {
    let reply = source.fetch(Want::Heap, Duration::from_secs(5)).unwrap();
    reply
        .made
        .and_then(|m| m.gc)
        .expect("a heap capture carries the GC clock")
}

fn check_gc_clock(variant: &str, toolchain: &str, flags: &[&str]) {
    let Some(binary) = build(variant, "./gcclock", toolchain, flags) else {
        return;
    };
    let mut fixture = Fixture::start(&binary);
    let pid = fixture.child.0.id();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    let mut last: Option<(u32, GcClock)> = None;
    for n in [0, 1, 3, 7, 2] {
        let theirs = fixture.gc(n);
        let ours = clock(&mut source);
        assert_eq!(ours.num_gc, theirs, "{variant}: after {n} more GC cycles");
        let cycle = ours.profile_cycle.expect("the profile cycle");
        if let Some((before, was)) = last {
            assert_eq!(
                cycle - was.profile_cycle.unwrap(),
                theirs - before,
                "{variant}: each runtime.GC publishes one profile cycle"
            );
        }
        // Read again while nothing runs: the same clock.
        assert_eq!(clock(&mut source), ours);
        last = Some((theirs, ours));
    }
}

#[test]
fn proc_heap_captures_carry_the_runtimes_gc_clock() {
    check_gc_clock("gcclock", "local", &[]);
    check_gc_clock("gcclock-stripped", "local", &["-ldflags=-s -w"]);
}

#[test]
fn proc_heap_captures_carry_the_runtimes_gc_clock_go1_23() {
    check_gc_clock("gcclock-go1.23.12", "go1.23.12", &[]);
    check_gc_clock(
        "gcclock-go1.23.12-stripped",
        "go1.23.12",
        &["-ldflags=-s -w"],
    );
}

#[test]
fn a_proc_collect_records_the_gc_clock_of_each_heap_capture() {
    let Some(binary) = build("gcclock", "./gcclock", "local", &[]) else {
        return;
    };
    let mut fixture = Fixture::start(&binary);
    let theirs = fixture.gc(4);
    let pid = fixture.child.0.id();
    let dir = util::tempdir();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        run.to_str().unwrap(),
        "--interval",
        "50ms",
        "--duration",
        "300ms",
        "-q",
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let heaps: Vec<serde_json::Value> = std::fs::read_to_string(run.join("manifest.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "heap" && r["error"].is_null())
        .collect();
    assert!(heaps.len() >= 2, "{heaps:?}");
    for h in &heaps {
        assert_eq!(h["gc"]["num_gc"], theirs, "{h}");
        assert!(h["gc"]["profile_cycle"].as_u64().is_some(), "{h}");
    }
}
