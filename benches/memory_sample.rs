//! What one memory sample costs the collector's sampler thread: the cheap one taken every tick
//! (usage, limit, OOM-kill count, the pid and its RSS) against the detailed one taken every
//! 500 ms (plus `memory.stat`, failcnt, events, and the process's `smaps_rollup`).
//!
//! Beside them, what noting the files a process holds costs (`source::procfiles`): listed
//! at each detailed sample, with 4,000 descriptors as well as a few, and their resident pages
//! counted (`mincore`) over a file of 256 MiB in the page cache.
//!
//! `cargo bench --bench memory_sample`, as root: a v1 memory cgroup is made for the bench under
//! /sys/fs/cgroup/memory with one `sleep` in it (the process measured), and removed after;
//! HEAPWATCH_BENCH_CGROUP names another cgroup to read instead.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use heapwatch::source::procmem::{self, CgroupMemory, Detail, MemoryProbe};

/// A cgroup made for the bench with one process in it; both gone on drop.
struct Made {
    path: PathBuf,
    child: std::process::Child,
}

impl Made {
    fn new() -> Option<Made> {
        let path = PathBuf::from(format!(
            "/sys/fs/cgroup/memory/heapwatch-bench-{}",
            std::process::id()
        ));
        std::fs::create_dir(&path).ok()?;
        let child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .ok()?;
        let made = Made { path, child };
        std::fs::write(made.path.join("cgroup.procs"), made.child.id().to_string()).ok()?;
        Some(made)
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir(&self.path);
    }
}

fn bench(c: &mut Criterion) {
    let made = match std::env::var_os("HEAPWATCH_BENCH_CGROUP") {
        Some(_) => None,
        None => Made::new(),
    };
    let path = std::env::var_os("HEAPWATCH_BENCH_CGROUP")
        .map(PathBuf::from)
        .or_else(|| made.as_ref().map(|m| m.path.clone()))
        .unwrap_or_default();
    let Ok(cgroup) = CgroupMemory::open(&path) else {
        eprintln!("{}: not a memory cgroup; nothing measured", path.display());
        return;
    };
    let probe = MemoryProbe::Cgroup(cgroup.clone());
    let me = MemoryProbe::Pid(std::process::id());
    let mut group = c.benchmark_group("memory_sample");
    group.bench_function("cgroup every tick", |b| {
        b.iter(|| black_box(probe.sample(0, Some(0), Detail::Usage)))
    });
    group.bench_function("cgroup detailed", |b| {
        b.iter(|| black_box(probe.sample(0, Some(0), Detail::Full)))
    });
    group.bench_function("memory.stat and events alone", |b| {
        b.iter(|| black_box(cgroup.breakdown()))
    });
    group.bench_function("pid every tick", |b| {
        b.iter(|| black_box(me.sample(0, None, Detail::Usage)))
    });
    group.bench_function("smaps_rollup alone", |b| {
        b.iter(|| black_box(procmem::process_breakdown(std::process::id())))
    });
    group.finish();
    held_files(c);
}

/// This process's own files, as the sampler reads another's: first as it is, then with 2,000
/// regular files and 2,000 sockets open beside one file of 256 MiB just written.
fn held_files(c: &mut Criterion) {
    use heapwatch::source::procfiles::{FileBudget, held_files};
    use std::io::Write as _;
    let me = std::process::id();
    let budget = FileBudget::default();
    let mut group = c.benchmark_group("held_files");
    group.bench_function("listed, a few descriptors", |b| {
        b.iter(|| black_box(held_files(me, &budget, false)))
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut big = std::fs::File::create(dir.path().join("big")).expect("create");
    let chunk = vec![1u8; 1 << 20];
    for _ in 0..256 {
        big.write_all(&chunk).expect("write");
    }
    let files: Vec<std::fs::File> = (0..2000)
        .map(|i| std::fs::File::create(dir.path().join(i.to_string())).expect("create"))
        .collect();
    let sockets: Vec<std::net::UdpSocket> = (0..2000)
        .filter_map(|_| std::net::UdpSocket::bind("127.0.0.1:0").ok())
        .collect();
    group.bench_function("listed, 4000 descriptors", |b| {
        b.iter(|| black_box(held_files(me, &budget, false)))
    });
    group.bench_function(
        "listed and counted, 4000 descriptors and 256 MiB resident",
        |b| b.iter(|| black_box(held_files(me, &budget, true))),
    );
    group.finish();
    drop((files, sockets, big));
}

criterion_group!(benches, bench);
criterion_main!(benches);
