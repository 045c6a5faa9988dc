//! Measures node discovery alone: the first scan (every executable judged), then N rescans of
//! a steady node (the incremental case `watch` pays every second), then N reads of every
//! container's memory. Prints one JSON line: processes and Go processes found, wall and CPU
//! time of the first scan and per rescan (median and 90th percentile), per memory read, and
//! the peak RSS. bench/node-discovery.sh runs it.
//! `cargo run --release --example node_rescan -- CGROUP_ROOT PODS_DIR [N]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use heapwatch::node::{Discovery, Options};

#[path = "support/measure.rs"]
mod measure;
use measure::{cpu_seconds, peak_rss_kib};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and 90th percentile, in ms.
fn spread(mut walls: Vec<Duration>) -> (f64, f64) {
    walls.sort();
    let at = |q: f64| ms(walls[((walls.len() - 1) as f64 * q).round() as usize]);
    (at(0.5), at(0.9))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: node_rescan CGROUP_ROOT PODS_DIR [N]";
    let root = PathBuf::from(args.next().expect(usage));
    let pods = PathBuf::from(args.next().expect(usage));
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);

    let mut discovery = Discovery::new(&Options {
        cgroup_root: Some(root),
        pods_dir: Some(pods),
    })
    .expect("the cgroup root");
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let first = discovery.rescan();
    let first_wall = started.elapsed();
    let first_cpu = cpu_seconds() - cpu0;

    let mut walls = Vec::with_capacity(n);
    let mut changed = 0;
    let cpu0 = cpu_seconds();
    for _ in 0..n {
        let started = Instant::now();
        let scan = discovery.rescan();
        walls.push(started.elapsed());
        changed += scan.appeared.len() + scan.ended.len();
    }
    let rescan_cpu = (cpu_seconds() - cpu0) / n as f64;
    let (median, p90) = spread(walls);

    let hierarchy = discovery.hierarchy().clone();
    let mut reads = Vec::with_capacity(n);
    let cpu0 = cpu_seconds();
    for _ in 0..n {
        let started = Instant::now();
        for p in &first.processes {
            let _ = p.container.memory(&hierarchy);
        }
        reads.push(started.elapsed());
    }
    let memory_cpu = (cpu_seconds() - cpu0) / n as f64;
    let (memory_median, _) = spread(reads);

    println!(
        "{{\"processes_seen\": {}, \"go_processes\": {}, \"first_scan_ms\": {:.2}, \
         \"first_scan_cpu_ms\": {:.2}, \"rescans\": {n}, \"rescan_median_ms\": {median:.3}, \
         \"rescan_p90_ms\": {p90:.3}, \"rescan_cpu_ms\": {:.3}, \"changes_during_rescans\": \
         {changed}, \"memory_reads_all_median_ms\": {memory_median:.3}, \"memory_reads_all_cpu_ms\": \
         {:.3}, \"peak_rss_kib\": {}}}",
        first.seen,
        first.processes.len(),
        ms(first_wall),
        first_cpu * 1e3,
        rescan_cpu * 1e3,
        memory_cpu * 1e3,
        peak_rss_kib()
    );
}
