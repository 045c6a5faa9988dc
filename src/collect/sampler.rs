//! A thread that samples process / cgroup memory at a high rate into `memory.jsonl`,
//! independent of the profile requests, and feeds burst mode through [`OutsideMemory`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::OutsideMemory;
use crate::source::procmem::MemoryProbe;
use crate::store::MemoryLog;

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<SamplerTally>>,
}

/// What the sampler saw over the run.
#[derive(Debug, Clone, Default)]
pub struct SamplerTally {
    pub samples: u64,
    pub kills: u64,
    pub peak: u64,
    pub error: Option<String>,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Sampler {
    pub fn start(
        probe: MemoryProbe,
        interval: Duration,
        mut log: MemoryLog,
        outside: Arc<OutsideMemory>,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        let handle = std::thread::Builder::new()
            .name("heapwatch-memory".into())
            .spawn(move || {
                let mut tally = SamplerTally::default();
                let mut kills = None;
                let mut last_sync = Instant::now();
                while !stop_thread.load(Ordering::Relaxed) {
                    if !probe.ready() {
                        std::thread::sleep(interval);
                        continue;
                    }
                    let sample = probe.sample(unix_ms(), kills);
                    kills = sample.oom_kills.or(kills);
                    if sample.killed {
                        tally.kills += 1;
                    }
                    let bytes = sample.bytes().unwrap_or(0);
                    tally.peak = tally.peak.max(bytes);
                    outside.bytes.store(bytes, Ordering::Relaxed);
                    if let Some(limit) = sample.limit {
                        outside.limit.store(limit, Ordering::Relaxed);
                    }
                    // A kill or a quarter second since the last fsync: make it durable.
                    let sync = sample.killed || last_sync.elapsed() >= Duration::from_millis(250);
                    if let Err(e) = log.append(&sample, sync) {
                        tally.error = Some(e.to_string());
                        break;
                    }
                    if sync {
                        last_sync = Instant::now();
                    }
                    tally.samples += 1;
                    std::thread::sleep(interval);
                }
                if probe.ready() {
                    let _ = log.append(&probe.sample(unix_ms(), kills), true);
                }
                tally
            })
            .expect("spawn the memory sampler thread");
        Sampler {
            stop,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> SamplerTally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}
