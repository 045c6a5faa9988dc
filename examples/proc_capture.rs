//! Measures the proc source alone against a live Go process: attach (cold, then from the
//! per-build-id cache), one first capture (it symbolises every PC), then N heap captures back
//! to back. Prints one JSON line with the
//! capture rate, wall and CPU time per capture, the profile's size and the peak RSS. Only
//! successful captures count as captures: a failed attempt (the profile changed under the
//! reader in every try) is counted apart, and its time is charged to the captures that did
//! succeed, since that is what a capture costs.
//! `cargo run --release --example proc_capture -- PID [N [OUT]]` (OUT: the last capture); bench/proc-capture.sh runs it.

use std::time::{Duration, Instant};

use heapwatch::source::proc::ProcSource;
use heapwatch::source::{Source as _, Want};

#[path = "support/measure.rs"]
mod measure;
use measure::{cpu_seconds, peak_rss_kib};

fn main() {
    let mut args = std::env::args().skip(1);
    let pid: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("usage: proc_capture PID [N]");
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    // Optional: where to write the last capture (checking a cached capture against pprof).
    let keep = args.next();

    let started = Instant::now();
    let _cold = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    let attach_cold = started.elapsed();
    let started = Instant::now();
    let mut source = ProcSource::attach(pid, format!("proc:{pid}")).expect("attach");
    let attach_warm = started.elapsed();

    let (mut bytes, mut captured, mut failed) = (0usize, 0usize, 0usize);
    let mut first_failure = String::new();
    // The first capture symbolises every PC; later ones reuse that, so it is timed apart.
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let first = source.fetch(Want::Heap, Duration::from_secs(5));
    let first_wall = started.elapsed();
    let first_cpu = cpu_seconds() - cpu0;
    if let Err(e) = &first {
        first_failure = format!("first capture: {e}");
    }
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    for _ in 0..n {
        match source.fetch(Want::Heap, Duration::from_secs(5)) {
            Ok(reply) => {
                captured += 1;
                bytes = reply.bytes.len();
                if let Some(path) = &keep {
                    std::fs::write(path, &reply.bytes).expect("write the capture");
                }
            }
            Err(e) => {
                failed += 1;
                if first_failure.is_empty() {
                    first_failure = e.to_string();
                }
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let per = captured.max(1) as f64;
    println!(
        "{{\"attempts\":{n},\"captures\":{captured},\"failed\":{failed},\"captures_per_s\":{:.1},\"wall_ms_per_capture\":{:.2},\
         \"cpu_ms_per_capture\":{:.2},\"profile_bytes\":{bytes},\"attach_cold_ms\":{:.1},\
         \"attach_cached_ms\":{:.2},\"first_capture_wall_ms\":{:.1},\"first_capture_cpu_ms\":{:.1},\"peak_rss_kib\":{},\"first_failure\":{:?}}}",
        captured as f64 / wall,
        wall * 1e3 / per,
        cpu * 1e3 / per,
        attach_cold.as_secs_f64() * 1e3,
        attach_warm.as_secs_f64() * 1e3,
        first_wall.as_secs_f64() * 1e3,
        first_cpu * 1e3,
        peak_rss_kib(),
        first_failure
    );
}
