//! MemStats read out of a live process's memory against the process's own
//! `runtime.ReadMemStats`: the memstats fixture (testdata/go/procheap/memstats) prints its
//! figures and then allocates nothing itself, so every figure must be equal, but two that
//! move: `HeapReleased`, which the background scavenger raises (its sum with the free heap,
//! `HeapIdle`, it does not change), and the allocation counters, which the runtime itself may
//! raise once as it restarts the world after `ReadMemStats` (seen: one 16-byte object on
//! go1.24, in one run of three; our later reads all agree): at most [`RUNTIME_OBJECTS`]
//! objects of at most [`RUNTIME_BYTES`] bytes, and the span they took: one 8 KiB page from
//! the idle heap to the heap in use, and its `mspan` record. For the installed Go and older
//! releases, plain, PIE and stripped (the runtime's variables recovered from its code). Then
//! the offsets read, against each release's DWARF.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use heapwatch::source::memstats::parse_debug_heap;
use heapwatch::source::proc::ProcSource;
use heapwatch::source::proc::memstats::{gc, mem_layout_for};
use heapwatch::source::{Source as _, Want};

use crate::proc::{build, installed_go_version};
use crate::util::{self, Reaped};

/// Figures the scavenger moves while the process is frozen.
const MOVING: &[&str] = &["HeapReleased"];
/// Counters of objects and of bytes that an allocation by the runtime after the fixture's
/// read raises, and by how much at most.
const OBJECTS: &[&str] = &["Mallocs", "HeapObjects"];
const BYTES: &[&str] = &["Alloc", "HeapAlloc", "TotalAlloc"];
const RUNTIME_OBJECTS: i64 = 4;
const RUNTIME_BYTES: i64 = 256;
/// One span of one page, and the `mspan` that describes it (160 bytes in go1.26).
const SPAN: i64 = 8192;
const MSPAN: i64 = 256;

fn check_memstats(variant: &str, toolchain: &str, flags: &[&str], go_version: &str) {
    let Some(binary) = build(
        &format!("memstats-{variant}"),
        "./memstats",
        toolchain,
        flags,
    ) else {
        return;
    };
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let mut child = Command::new(&binary)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the memstats fixture");
    util::wait_for_line(&log, "ready", &mut child, Duration::from_secs(30));
    let child = Reaped(child);
    let pid = child.0.id();
    let theirs: BTreeMap<String, i64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    assert!(
        source.go_version().starts_with(go_version),
        "{variant}: built with {}",
        source.go_version()
    );
    assert!(source.supports(Want::MemStats), "{variant}");
    let reply = source
        .fetch(Want::MemStats, Duration::from_secs(5))
        .expect("memstats");
    let text = String::from_utf8(reply.bytes).unwrap();
    let ours = parse_debug_heap(&text).expect("a # runtime.MemStats block");
    assert_eq!(theirs.len(), 25, "{variant}: {theirs:#?}");
    let mut wrong = Vec::new();
    for (name, value) in &theirs {
        let got = ours.get(name).copied();
        if MOVING.contains(&name.as_str()) {
            let got = got.unwrap_or_else(|| panic!("{variant}: no {name} in\n{text}"));
            assert!(
                got >= *value && got - value <= theirs["HeapIdle"] - value,
                "{variant}: {name} {got} against {value}"
            );
            continue;
        }
        let (down, up) = match name.as_str() {
            n if OBJECTS.contains(&n) => (0, RUNTIME_OBJECTS),
            n if BYTES.contains(&n) => (0, RUNTIME_BYTES),
            "HeapInuse" => (0, SPAN),
            "HeapIdle" => (SPAN, 0),
            "MSpanInuse" => (0, MSPAN),
            _ => (0, 0),
        };
        if !got.is_some_and(|g| g >= value - down && g <= value + up) {
            wrong.push(format!("{name}: ours {got:?}, theirs {value}"));
        }
    }
    assert!(wrong.is_empty(), "{variant}:\n{}\n{text}", wrong.join("\n"));
    assert_eq!(ours.get("GOGC"), Some(&150), "{variant}:\n{text}");
    assert_eq!(
        ours.get("GOMEMLIMIT"),
        Some(&(300 << 20)),
        "{variant}:\n{text}"
    );
}

fn local(variant: &str, flags: &[&str]) {
    if let Some(v) = installed_go_version() {
        check_memstats(variant, "local", flags, &v);
    }
}

#[test]
fn proc_memstats_equal_read_mem_stats_plain() {
    local("plain", &[]);
}

#[test]
fn proc_memstats_equal_read_mem_stats_pie() {
    local("pie", &["-buildmode=pie"]);
}

#[test]
fn proc_memstats_equal_read_mem_stats_older_releases() {
    for toolchain in ["go1.25.5", "go1.24.6", "go1.23.12"] {
        check_memstats(toolchain, toolchain, &[], toolchain);
        check_memstats(
            &format!("{toolchain}-pie"),
            toolchain,
            &["-buildmode=pie"],
            toolchain,
        );
    }
}

/// Stripped (no symbol table): the four variables recovered from the runtime's code.
#[test]
fn proc_memstats_equal_read_mem_stats_stripped() {
    local("stripped", &["-ldflags=-s -w"]);
    local("stripped-pie", &["-ldflags=-s -w", "-buildmode=pie"]);
    for toolchain in ["go1.25.5", "go1.24.6", "go1.23.12"] {
        check_memstats(
            &format!("{toolchain}-stripped"),
            toolchain,
            &["-ldflags=-s -w"],
            toolchain,
        );
    }
}

/// The offsets read, against the DWARF of a binary of each release.
#[test]
fn proc_memstats_layouts_match_each_release_s_dwarf() {
    let Some(go) = util::go() else { return };
    let dir = util::tempdir();
    let dumper = dir.path().join("layouts");
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&dumper)
        .arg("./layouts")
        .current_dir(util::repo().join("testdata/go/procheap"))
        .env("GOFLAGS", "-buildvcs=false")
        .output()
        .expect("go build runs");
    assert!(out.status.success(), "{}", util::stderr(&out));
    for (toolchain, release) in [
        ("local", (1, 26)),
        ("go1.25.5", (1, 25)),
        ("go1.24.6", (1, 24)),
        ("go1.23.12", (1, 23)),
    ] {
        let Some(binary) = build(
            &format!("memstats-{toolchain}"),
            "./memstats",
            toolchain,
            &[],
        ) else {
            return;
        };
        let l = mem_layout_for(release).unwrap();
        let text = util::stdout(
            &Command::new(&dumper)
                .arg(&binary)
                .args([
                    "runtime.mstats",
                    "runtime.heapStatsDelta",
                    "runtime.gcControllerState",
                    "runtime.mheap",
                    "runtime.fixalloc",
                    "runtime.mcache",
                    "runtime.mspan",
                    "runtime.p",
                ])
                .output()
                .unwrap(),
        );
        let field = |name: &str| -> Option<u64> {
            text.lines().find_map(|line| {
                let mut w = line.split_whitespace();
                (w.next() == Some(name)).then(|| w.next().unwrap().parse().unwrap())
            })
        };
        let offset = |name: &str| field(name).unwrap_or_else(|| panic!("{toolchain}: {name}"));
        let delta = |f: &str| offset(&format!("runtime.heapStatsDelta.{f}"));
        assert_eq!(
            l.delta_size,
            offset("runtime.heapStatsDelta"),
            "{toolchain}"
        );
        for (ours, name) in [
            (l.tiny_alloc_count, "tinyAllocCount"),
            (l.large_alloc, "largeAlloc"),
            (l.large_alloc_count, "largeAllocCount"),
            (l.small_alloc_count, "smallAllocCount"),
            (l.large_free, "largeFree"),
            (l.large_free_count, "largeFreeCount"),
            (l.small_free_count, "smallFreeCount"),
        ] {
            assert_eq!(ours, delta(name), "{toolchain}: {name}");
        }
        assert_eq!(
            (delta("inStacks"), delta("inWorkBufs")),
            (24, 32),
            "{toolchain}"
        );
        assert_eq!(
            l.in_ptr_scalar_bits,
            field("runtime.heapStatsDelta.inPtrScalarBits"),
            "{toolchain}"
        );
        let ms = |f: &str| offset(&format!("runtime.mstats.{f}"));
        assert_eq!(ms("heapStats"), 0, "{toolchain}");
        for (i, name) in [
            "stacks_sys",
            "mspan_sys",
            "mcache_sys",
            "buckhash_sys",
            "gcMiscSys",
            "other_sys",
            "last_gc_unix",
            "pause_total_ns",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(l.stacks_sys + 8 * i as u64, ms(name), "{toolchain}: {name}");
        }
        assert_eq!(l.stacks_sys + 4160, ms("numgc"), "{toolchain}");
        assert_eq!(l.stacks_sys + 4164, ms("numforcedgc"), "{toolchain}");
        let g = |f: &str| offset(&format!("runtime.gcControllerState.{f}"));
        for (ours, name) in [
            (gc::GC_PERCENT, "gcPercent"),
            (gc::MEMORY_LIMIT, "memoryLimit"),
            (gc::GC_PERCENT_HEAP_GOAL, "gcPercentHeapGoal"),
            (gc::SWEEP_DIST_MIN_TRIGGER, "sweepDistMinTrigger"),
            (gc::TRIGGERED, "triggered"),
            (gc::HEAP_MARKED, "heapMarked"),
            (gc::HEAP_IN_USE, "heapInUse"),
            (gc::HEAP_RELEASED, "heapReleased"),
            (gc::HEAP_FREE, "heapFree"),
            (gc::TOTAL_ALLOC, "totalAlloc"),
            (gc::TOTAL_FREE, "totalFree"),
            (gc::MAPPED_READY, "mappedReady"),
        ] {
            assert_eq!(ours, g(name), "{toolchain}: {name}");
        }
        let inuse = offset("runtime.fixalloc.inuse");
        assert_eq!(l.spanalloc_inuse, offset("runtime.mheap.spanalloc") + inuse);
        assert_eq!(
            l.cachealloc_inuse,
            offset("runtime.mheap.cachealloc") + inuse
        );
        assert_eq!(
            l.mcache_tiny,
            offset("runtime.mcache.tinyAllocs"),
            "{toolchain}"
        );
        assert_eq!(
            l.mcache_alloc,
            offset("runtime.mcache.alloc"),
            "{toolchain}"
        );
        assert_eq!(offset("runtime.p.mcache"), 56, "{toolchain}");
        assert_eq!(offset("runtime.mspan.allocCount"), 96, "{toolchain}");
        assert_eq!(
            offset("runtime.mspan.allocCountBeforeCache"),
            102,
            "{toolchain}"
        );
    }
}

/// `collect proc:PID` records MemStats like the agent's `memstats` records, and the growth
/// report splits the memory with them ("where the memory went").
#[test]
fn collect_proc_pid_records_memstats_and_the_report_splits_memory_with_them() {
    let Some(binary) = build("memstats-plain", "./memstats", "local", &[]) else {
        return;
    };
    let dir = util::tempdir();
    let log = dir.path().join("out.txt");
    let mut child = Command::new(&binary)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the memstats fixture");
    util::wait_for_line(&log, "ready", &mut child, Duration::from_secs(30));
    let child = Reaped(child);
    let pid = child.0.id();
    let run = dir.path().join("run");
    let out = util::run(&[
        "collect",
        &format!("proc:{pid}"),
        "--out",
        run.to_str().unwrap(),
        // Long enough for two MemStats reads on a loaded machine, where the attach alone (the
        // binary's symbols and layouts) may take a second.
        "--duration",
        "3s",
        "--interval",
        "200ms",
        "--memstats-interval",
        "200ms",
        "-q",
    ]);
    assert!(out.status.success(), "collect: {}", util::stderr(&out));
    let manifest = std::fs::read_to_string(run.join("manifest.jsonl")).unwrap();
    let memstats: Vec<serde_json::Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["kind"] == "memstats" && r["error"].is_null())
        .collect();
    assert!(memstats.len() >= 2, "{manifest}");
    let theirs: BTreeMap<String, i64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let totals = &memstats[0]["totals"];
    for key in ["HeapSys", "NumGC", "NextGC", "StackInuse", "BuckHashSys"] {
        assert_eq!(
            totals[key].as_i64(),
            theirs.get(key).copied(),
            "{key}: {totals}"
        );
    }
    let growth = util::run(&["growth", run.to_str().unwrap()]);
    let text = util::stdout(&growth);
    let went = text
        .lines()
        .find(|l| l.contains("where the memory went"))
        .unwrap_or_else(|| panic!("no memory split in\n{text}"));
    for part in ["Go heap allocated (HeapAlloc)", "held free", "runtime"] {
        assert!(went.contains(part), "no {part:?} in {went}");
    }
    // The MemStats line says when its figures were read.
    assert!(
        text.lines()
            .any(|l| l.starts_with("  memstats (read at ") && l.contains(" s): HeapAlloc ")),
        "{text}"
    );
}
