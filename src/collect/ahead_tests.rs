//! The read ahead (`ahead.rs`) against a scripted proc-like source and a fake clock: the next
//! heap read runs while the last capture is stored, never more than one capture waits, and
//! what is stored is what a read after each store would have stored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::source::{FetchError, Reply, Want};
use crate::store::{RunDir, RunWriter};

const EARLY: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-early.pb.gz");
const LATE: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-late.pb.gz");

/// What the source and the observer saw, shared between the blocking pool and the
/// collector's task.
#[derive(Default)]
struct Seen {
    /// Heap reads started.
    reads: AtomicUsize,
    /// Attempts the observer was told of (each told once recorded and stored).
    told: AtomicUsize,
    /// At each read's start, how many attempts had been told.
    told_at_read: Mutex<Vec<usize>>,
    /// Per attempt told (from the second): whether the read after it had started by then.
    next_read_under_way: Mutex<Vec<bool>>,
}

/// A source read on the blocking pool, as proc is: EARLY once, then LATE; each read takes
/// `latency` on the fake clock.
struct ProcLike {
    clock: Arc<FakeClock>,
    latency: Duration,
    seen: Arc<Seen>,
}

impl Source for ProcLike {
    fn target(&self) -> &str {
        "proc:scripted"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Proc
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _want: Want, _timeout: Duration) -> Result<Reply, FetchError> {
        let told = self.seen.told.load(Ordering::SeqCst);
        self.seen.told_at_read.lock().unwrap().push(told);
        let n = self.seen.reads.fetch_add(1, Ordering::SeqCst) + 1;
        self.clock.advance(self.latency);
        Ok(Reply {
            bytes: if n == 1 { EARLY } else { LATE }.to_vec(),
            pid: Some(4242),
            made: None,
        })
    }
}

/// Told of each attempt: from the second to the fourth, when `waits`, it waits (a bounded
/// while, which only a collector that reads after storing lets run out) for the next read to
/// have started.
struct Watching(Arc<Seen>, bool);

impl Observer for Watching {
    fn attempt(&mut self, _record: &CaptureRecord, _status: &LiveStatus) {
        let k = self.0.told.load(Ordering::SeqCst) + 1;
        if self.1 && (2..=4).contains(&k) {
            let mut under_way = false;
            for _ in 0..20_000 {
                under_way = self.0.reads.load(Ordering::SeqCst) > k;
                if under_way {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            self.0.next_read_under_way.lock().unwrap().push(under_way);
        }
        self.0.told.fetch_add(1, Ordering::SeqCst);
    }
}

fn run(interval: Duration, latency: Duration, waits: bool) -> (Arc<Seen>, Vec<CaptureRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let seen = Arc::new(Seen::default());
    let source = ProcLike {
        clock: clock.clone(),
        latency,
        seen: seen.clone(),
    };
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let config = CollectConfig {
        interval,
        duration: Some(Duration::from_millis(400)),
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    };
    let mut observer = Watching(seen.clone(), waits);
    Collector::new(
        config,
        Box::new(source),
        clock,
        writer,
        &existing,
        Stop::new(),
    )
    .run(&mut observer)
    .unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    (seen, records)
}

#[test]
fn the_next_heap_read_runs_while_the_last_capture_is_stored_and_one_waits_at_most() {
    let (seen, records) = run(Duration::from_millis(1), Duration::from_millis(20), true);
    let under_way = seen.next_read_under_way.lock().unwrap().clone();
    assert_eq!(under_way, [true, true, true], "told of attempts 2 to 4");
    // When read k starts, every capture before k - 1 is stored and told: the one read
    // before it waits, no other.
    let told_at_read = seen.told_at_read.lock().unwrap().clone();
    for (k, told) in told_at_read.iter().enumerate() {
        assert!(*told + 2 > k, "read {}: {told_at_read:?}", k + 1);
    }
    let heaps: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .collect();
    // Every read is recorded, the one begun before the end included, in seq order, each
    // with the time it was asked for and its own latency.
    assert_eq!(heaps.len(), told_at_read.len(), "{heaps:#?}");
    assert_eq!(heaps.len(), 20, "400 ms of 20 ms reads back to back");
    assert!(heaps.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(heaps.iter().all(|r| r.latency_ms == 20.0), "{heaps:#?}");
    let t: Vec<i64> = heaps.iter().map(|r| r.t_ms).collect();
    assert!(t.windows(2).all(|w| w[1] - w[0] == 20), "{t:?}");
    // The first two differ, the rest are the second again: stored once each, then marked.
    assert_eq!(heaps.iter().filter(|r| r.dup_of.is_none()).count(), 2);
    assert!(heaps.iter().all(|r| r.is_ok()));
    assert_eq!(
        records
            .iter()
            .filter(|r| r.kind == RecordKind::Cycle)
            .count(),
        1,
        "one boot cycle, its build asked for while a read was ahead"
    );
}

#[test]
fn a_capture_slower_than_its_interval_is_not_read_ahead_when_the_interval_is_longer() {
    // 100 ms apart, 20 ms each: the next read is not due when the last one is back.
    let (seen, records) = run(Duration::from_millis(100), Duration::from_millis(20), false);
    let told_at_read = seen.told_at_read.lock().unwrap().clone();
    let reads = told_at_read.len();
    assert_eq!(told_at_read, (0..reads).collect::<Vec<_>>());
    let heaps = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .count();
    assert_eq!(heaps, reads);
}
