//! The pacing, burst, dedup and restart logic against a scripted source and a fake clock:
//! no sleeping, no luck.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::decode::{self, DecodeLimits};
use crate::source::{FailureKind, FetchError, Reply, Want};
use crate::store::{RunDir, RunWriter};

const EARLY: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-early.pb.gz");
const LATE: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-late.pb.gz");

enum Step {
    Ok(&'static [u8], Duration),
    Fail(FailureKind, Duration),
}

/// Plays a script of replies, each taking its latency on the fake clock; repeats the last.
struct ScriptedSource {
    clock: Arc<FakeClock>,
    script: VecDeque<Step>,
    last: Option<Step>,
    timeouts: Vec<Duration>,
}

impl ScriptedSource {
    fn new(clock: Arc<FakeClock>, script: Vec<Step>) -> Self {
        ScriptedSource {
            clock,
            script: script.into(),
            last: None,
            timeouts: Vec::new(),
        }
    }
}

impl Source for ScriptedSource {
    fn target(&self) -> &str {
        "scripted"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Http
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        self.timeouts.push(timeout);
        if let Some(step) = self.script.pop_front() {
            self.last = Some(step);
        }
        match self.last.as_ref().expect("a script with at least one step") {
            Step::Ok(bytes, latency) => {
                self.clock.advance(*latency);
                Ok(Reply {
                    bytes: bytes.to_vec(),
                    pid: None,
                    made: None,
                })
            }
            Step::Fail(kind, latency) => {
                self.clock.advance(*latency);
                Err(FetchError::new(
                    *kind,
                    format!("scripted {}", kind.as_str()),
                ))
            }
        }
    }
}

/// A test source the test keeps a hand on: the collector owns its box, the test reads what
/// the source saw once the run is over.
struct Shared<S> {
    target: String,
    inner: Arc<Mutex<S>>,
}

fn shared<S: Source + 'static>(source: &Arc<Mutex<S>>) -> Box<dyn Source> {
    let target = source.lock().unwrap().target().to_string();
    Box::new(Shared {
        target,
        inner: source.clone(),
    })
}

impl<S: Source> Source for Shared<S> {
    fn target(&self) -> &str {
        &self.target
    }
    fn kind(&self) -> SourceKind {
        self.inner.lock().unwrap().kind()
    }
    fn supports(&self, want: Want) -> bool {
        self.inner.lock().unwrap().supports(want)
    }
    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        self.inner.lock().unwrap().fetch(want, timeout)
    }
    fn build_info(&mut self, timeout: Duration) -> Option<crate::model::build::BuildInfo> {
        self.inner.lock().unwrap().build_info(timeout)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn collect(
    config: CollectConfig,
    script: Vec<Step>,
) -> (CollectSummary, Vec<CaptureRecord>, Vec<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let source = Arc::new(Mutex::new(ScriptedSource::new(clock.clone(), script)));
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let stop = Stop::new();
    let summary = Collector::new(config, shared(&source), clock, writer, &existing, stop)
        .run(&mut NoObserver)
        .unwrap();
    let run = RunDir::open(dir.path()).unwrap();
    let timeouts = source.lock().unwrap().timeouts.clone();
    (summary, attempts(run.manifest.records), timeouts)
}

/// The capture attempts of a manifest, without the event records (`cycle`, `stop`).
fn attempts(records: Vec<CaptureRecord>) -> Vec<CaptureRecord> {
    records.into_iter().filter(|r| !r.kind.is_event()).collect()
}

fn heap_only(duration: Duration) -> CollectConfig {
    CollectConfig {
        duration: Some(duration),
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    }
}

#[test]
fn captures_are_paced_at_the_interval() {
    let (summary, records, _) = collect(heap_only(ms(5000)), vec![Step::Ok(LATE, ms(20))]);
    assert_eq!(summary.attempts, 10);
    let starts: Vec<i64> = records.iter().map(|r| r.t_ms).collect();
    for pair in starts.windows(2) {
        assert_eq!(pair[1] - pair[0], 500, "{starts:?}");
    }
    // The same bytes every time: stored once, the rest are duplicates of it.
    assert_eq!(summary.stored, 1);
    assert_eq!(summary.duplicates, 9);
    assert!(
        records[1..]
            .iter()
            .all(|r| r.dup_of == Some(1) && r.file == records[0].file)
    );
}

#[test]
fn a_slow_target_delays_the_next_capture_and_never_piles_requests_up() {
    let uncapped = CollectConfig {
        max_duty: 1.0,
        ..heap_only(ms(5000))
    };
    let (_, records, _) = collect(uncapped, vec![Step::Ok(LATE, ms(800))]);
    for pair in records.windows(2) {
        let end_of_first = pair[0].t_ms + pair[0].latency_ms as i64;
        assert!(pair[1].t_ms >= end_of_first, "overlap: {pair:?}");
        assert_eq!(pair[1].t_ms - pair[0].t_ms, 800);
    }
}

#[test]
fn the_duty_cap_keeps_a_slow_render_from_taking_the_target_over() {
    // A 600 ms render at a 500 ms interval would keep the target busy all the time; at the
    // default cap of a quarter, 1.8 s of rest follow each render.
    let (_, records, _) = collect(heap_only(ms(10_000)), vec![Step::Ok(LATE, ms(600))]);
    for pair in records.windows(2) {
        assert_eq!(pair[1].t_ms - pair[0].t_ms, 2400, "{pair:?}");
    }
    // Fast renders are not slowed: 20 ms at 500 ms is well under the cap.
    let (_, records, _) = collect(heap_only(ms(2000)), vec![Step::Ok(LATE, ms(20))]);
    assert!(records.windows(2).all(|p| p[1].t_ms - p[0].t_ms == 500));
    // Near the limit the cap doubles: 600 ms of render, 600 ms of rest.
    let bursting = CollectConfig {
        limit: Some(128 << 20),
        ..heap_only(ms(10_000))
    };
    let (_, records, _) = collect(bursting, vec![Step::Ok(LATE, ms(600))]);
    assert!(
        records[1..]
            .windows(2)
            .all(|p| p[1].t_ms - p[0].t_ms == 1200),
        "{records:?}"
    );
}

#[test]
fn refused_then_back_is_a_new_boot_cycle() {
    let script = vec![
        Step::Ok(EARLY, ms(5)),
        Step::Ok(LATE, ms(5)),
        Step::Fail(FailureKind::Refused, ms(1)),
        Step::Fail(FailureKind::Refused, ms(1)),
        Step::Ok(LATE, ms(5)),
    ];
    let (summary, records, _) = collect(heap_only(ms(3000)), script);
    assert_eq!(summary.cycles, 2);
    let cycles: Vec<u32> = records.iter().map(|r| r.cycle).collect();
    assert_eq!(&cycles[..5], &[1, 1, 1, 1, 2]);
    // A new cycle stores its first capture even if it equals the last one of the old cycle.
    assert!(records[4].dup_of.is_none() && records[4].file.is_some());
    assert_eq!(records[2].error_kind.as_deref(), Some("refused"));
}

#[test]
fn a_drop_in_cumulative_allocation_is_a_new_boot_cycle_without_any_error() {
    let script = vec![Step::Ok(LATE, ms(5)), Step::Ok(EARLY, ms(5))];
    let (summary, records, _) = collect(heap_only(ms(1000)), script);
    assert_eq!(summary.cycles, 2);
    assert_eq!(records[1].cycle, 2);
}

#[test]
fn burst_mode_starts_above_the_threshold_and_shortens_the_timeout() {
    // The late capture holds ~110 MiB in use: above 0.6 of 128 MiB, below 0.6 of 1 GiB.
    let config = CollectConfig {
        limit: Some(128 << 20),
        ..heap_only(ms(2000))
    };
    let (_, records, timeouts) = collect(config, vec![Step::Ok(LATE, ms(5))]);
    assert_eq!(
        records[0].interval_ms,
        Some(500),
        "before the first capture nothing is known"
    );
    assert!(records[1..].iter().all(|r| r.interval_ms == Some(100)));
    assert!(
        records.len() >= 15,
        "{} captures in 2 s of burst",
        records.len()
    );
    assert_eq!(timeouts[0], Duration::from_secs(2));
    assert!(timeouts[1..].iter().all(|&t| t <= ms(400)), "{timeouts:?}");

    let calm = CollectConfig {
        limit: Some(1 << 30),
        ..heap_only(ms(2000))
    };
    let (_, records, _) = collect(calm, vec![Step::Ok(LATE, ms(5))]);
    assert!(records.iter().all(|r| r.interval_ms == Some(500)));
}

#[test]
fn until_exit_stops_once_the_target_is_gone_for_the_grace_period() {
    let config = CollectConfig {
        until_exit: Some(ms(2000)),
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    };
    let script = vec![
        Step::Ok(LATE, ms(5)),
        Step::Fail(FailureKind::Refused, ms(1)),
    ];
    let (summary, records, _) = collect(config, script);
    assert_eq!(summary.reason, StopReason::TargetExited);
    let last = records.last().unwrap();
    assert!(last.t_ms - records[1].t_ms >= 1500 && last.t_ms - records[1].t_ms <= 2500);
}

#[test]
fn a_target_that_never_answers_is_reported_unreached() {
    let config = CollectConfig {
        until_exit: Some(ms(1000)),
        ..heap_only(ms(5000))
    };
    let (summary, records, _) = collect(config, vec![Step::Fail(FailureKind::Refused, ms(1))]);
    assert!(!summary.reached);
    assert_eq!(summary.reason, StopReason::TargetExited);
    assert!(records.iter().all(|r| r.file.is_none()));
}

#[test]
fn garbage_is_recorded_as_an_error_and_never_stored() {
    const HTML: &[u8] = b"<html><body>upstream connect error</body></html>";
    let truncated: &'static [u8] = &LATE[..LATE.len() / 2];
    let script = vec![
        Step::Ok(HTML, ms(5)),
        Step::Ok(truncated, ms(5)),
        Step::Ok(LATE, ms(5)),
    ];
    let (summary, records, _) = collect(heap_only(ms(1500)), script);
    assert_eq!(records[0].error_kind.as_deref(), Some("invalid"));
    assert!(records[0].error.as_deref().unwrap().contains("HTML"));
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .contains("truncated gzip")
    );
    assert!(records[0].file.is_none() && records[1].file.is_none());
    assert!(records[2].is_ok());
    assert_eq!(summary.stored, 1);
}

const REAL_MEMSTATS: &str = include_str!("../../testdata/agent/memstats.txt");
const REAL_STATS: &str = include_str!("../../testdata/agent/stats.txt");
const REAL_DUMP: &[u8] = include_bytes!("../../testdata/agent/goroutine-stack.txt");

/// Answers like an agent: a reply per kind of request, each taking 2 ms.
struct AgentLike {
    clock: Arc<FakeClock>,
    wants: Vec<Want>,
    heap: &'static [u8],
    goroutine: Vec<&'static [u8]>,
    memstats: String,
    calls: Vec<Want>,
}

impl AgentLike {
    fn new(clock: Arc<FakeClock>, wants: &[Want]) -> Self {
        AgentLike {
            clock,
            wants: wants.to_vec(),
            heap: EARLY,
            goroutine: vec![REAL_DUMP],
            memstats: REAL_MEMSTATS.to_string(),
            calls: Vec::new(),
        }
    }
}

impl Source for AgentLike {
    fn target(&self) -> &str {
        "agent-like"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Agent
    }
    fn supports(&self, want: Want) -> bool {
        self.wants.contains(&want)
    }
    fn fetch(&mut self, want: Want, _timeout: Duration) -> Result<Reply, FetchError> {
        self.clock.advance(ms(2));
        let n = self.calls.iter().filter(|w| **w == want).count();
        self.calls.push(want);
        let bytes = match want {
            Want::Heap => self.heap.to_vec(),
            Want::Goroutine => self.goroutine[n.min(self.goroutine.len() - 1)].to_vec(),
            Want::MemStats => self.memstats.clone().into_bytes(),
            Want::Stats => REAL_STATS.as_bytes().to_vec(),
        };
        Ok(Reply {
            bytes,
            pid: Some(4242),
            made: None,
        })
    }
}

fn collect_from(
    config: CollectConfig,
    source: AgentLike,
    clock: &Arc<FakeClock>,
) -> (CollectSummary, Vec<CaptureRecord>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let stop = Stop::new();
    let summary = Collector::new(
        config,
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    let run = RunDir::open(dir.path()).unwrap();
    (summary, attempts(run.manifest.records), dir)
}

#[test]
fn stack_dumps_and_stats_are_captured_like_profiles_and_memstats() {
    let clock = Arc::new(FakeClock::new(1_000_000));
    let all = [Want::Heap, Want::Goroutine, Want::MemStats, Want::Stats];
    let mut source = AgentLike::new(clock.clone(), &all);
    let cut: &'static [u8] = &REAL_DUMP[..REAL_DUMP.len() / 2];
    source.goroutine = vec![REAL_DUMP, REAL_DUMP, cut, REAL_DUMP];
    let config = CollectConfig {
        goroutine: true,
        goroutine_interval: ms(500),
        memstats_interval: ms(1000),
        duration: Some(ms(2000)),
        ..CollectConfig::default()
    };
    let (summary, records, dir) = collect_from(config, source, &clock);
    let dumps: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Goroutine)
        .collect();
    assert_eq!(dumps.len(), 4, "{records:#?}");
    let first = dumps[0];
    // Seq 1 is the first heap capture, 2 the `cycle` record its answer opened.
    assert_eq!(first.file.as_deref(), Some("profiles/000003-goroutine.txt"));
    assert_eq!(first.totals["goroutine"], 25);
    assert_eq!(
        std::fs::read(dir.path().join(first.file.as_ref().unwrap())).unwrap(),
        REAL_DUMP,
        "stored as served"
    );
    assert_eq!(
        dumps[1].dup_of,
        Some(first.seq),
        "the same stacks: a duplicate"
    );
    assert!(dumps[2].file.is_none() && dumps[2].error_kind.as_deref() == Some("invalid"));
    assert!(dumps[2].error.as_deref().unwrap().contains("cut short"));
    assert_eq!(
        dumps[3].dup_of,
        Some(first.seq),
        "a bad reply is no restart"
    );
    let stats: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Stats)
        .collect();
    assert_eq!(stats.len(), 2);
    assert_eq!(stats[0].totals["threads"], 7);
    assert!(
        stats
            .iter()
            .all(|r| r.pid == Some(4242) && r.interval_ms.is_some())
    );
    let mem = records
        .iter()
        .find(|r| r.kind == RecordKind::Memstats)
        .unwrap();
    assert_eq!(mem.totals["HeapAlloc"], 50496024);
    assert_eq!(summary.cycles, 1);
    // Every attempt counted once in the summary, as the manifest has them.
    let ok = |r: &&CaptureRecord| r.is_ok();
    assert_eq!(summary.attempts, records.len() as u64);
    assert_eq!(
        summary.stored,
        records
            .iter()
            .filter(ok)
            .filter(|r| r.file.is_some() && r.dup_of.is_none())
            .count() as u64
    );
    assert_eq!(
        summary.duplicates,
        records.iter().filter(|r| r.dup_of.is_some()).count() as u64
    );
    assert_eq!(
        summary.figures,
        records
            .iter()
            .filter(ok)
            .filter(|r| r.file.is_none())
            .count() as u64
    );
    assert_eq!(
        summary.errors,
        records.iter().filter(|r| !r.is_ok()).count() as u64
    );
    assert!(summary.duplicates > 0 && summary.figures > 0 && summary.errors > 0);
    assert_eq!(
        summary.attempts,
        summary.stored + summary.duplicates + summary.figures + summary.errors
    );
}

#[test]
fn memstats_alone_can_start_burst_mode() {
    // The heap capture is small; the MemStats say the process holds 120 MiB of a 128 MiB limit.
    let clock = Arc::new(FakeClock::new(1_000_000));
    let mut source = AgentLike::new(clock.clone(), &[Want::Heap, Want::MemStats]);
    source.memstats =
        "heap-alloc: 5.00MB (5242880 bytes)\nsys: 120.00MB (125829120 bytes)\n".into();
    let config = CollectConfig {
        limit: Some(128 << 20),
        memstats_interval: ms(5000),
        duration: Some(ms(2000)),
        ..CollectConfig::default()
    };
    let (_, records, _) = collect_from(config, source, &clock);
    let heap: Vec<Option<u64>> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .map(|r| r.interval_ms)
        .collect();
    assert_eq!(heap[0], Some(500), "before the MemStats nothing is known");
    assert!(heap[1..].iter().all(|&i| i == Some(100)), "{heap:?}");
    // Bursting, MemStats come at least every normal interval instead of every 5 s.
    let memstats = records
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats)
        .count();
    assert!(memstats >= 4, "{memstats} MemStats reads in 2 s of burst");
}

#[test]
fn goroutines_alone_still_probe_a_target_that_went_away() {
    let clock = Arc::new(FakeClock::new(1_000_000));
    let mut source = AgentLike::new(clock.clone(), &[Want::Goroutine, Want::MemStats]);
    source.goroutine = vec![b"connection refused"];
    let config = CollectConfig {
        heap: false,
        goroutine: true,
        duration: Some(ms(3000)),
        ..CollectConfig::default()
    };
    let (summary, records, _) = collect_from(config, source, &clock);
    // One probe a second once the target looks gone, and nothing else asked meanwhile.
    assert_eq!(summary.attempts, 3, "{records:#?}");
    assert_eq!(records[1].kind, RecordKind::Goroutine);
    assert!(
        records
            .iter()
            .filter(|r| r.kind == RecordKind::Goroutine)
            .all(|r| !r.is_ok())
    );
}

#[test]
fn a_target_frozen_at_its_limit_is_not_gone() {
    // Timeouts for longer than the grace period, then the kill (refused): only the refusals
    // count towards --until-exit.
    let config = CollectConfig {
        until_exit: Some(ms(2000)),
        timeout: ms(1000),
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    };
    let mut script = vec![Step::Ok(LATE, ms(5))];
    script.extend((0..8).map(|_| Step::Fail(FailureKind::Timeout, ms(1000))));
    script.push(Step::Fail(FailureKind::Refused, ms(1)));
    let (summary, records, _) = collect(config, script);
    assert_eq!(summary.reason, StopReason::TargetExited);
    let timeouts = records
        .iter()
        .filter(|r| r.error_kind.as_deref() == Some("timeout"))
        .count();
    assert_eq!(timeouts, 8, "every timeout of the freeze was waited out");
    let first_refusal = records
        .iter()
        .find(|r| r.error_kind.as_deref() == Some("refused"))
        .unwrap();
    let last = records.last().unwrap();
    assert!(
        last.t_ms - first_refusal.t_ms >= 1500,
        "grace counted from the refusal"
    );
}

/// Answers like an agent of a given build and process; the pid changes on request.
struct Versioned {
    clock: Arc<FakeClock>,
    pid: u32,
    version: &'static str,
    builds_asked: usize,
}

impl Source for Versioned {
    fn target(&self) -> &str {
        "versioned"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Agent
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _want: Want, _timeout: Duration) -> Result<Reply, FetchError> {
        self.clock.advance(ms(2));
        if self.clock.now() >= ms(1000) && self.pid == 10 {
            // A restart on a new build.
            self.pid = 11;
            self.version = "2.1.0";
        }
        Ok(Reply {
            bytes: LATE.to_vec(),
            pid: Some(self.pid),
            made: None,
        })
    }
    fn build_info(&mut self, _timeout: Duration) -> Option<crate::model::build::BuildInfo> {
        self.builds_asked += 1;
        Some(crate::model::build::BuildInfo {
            version: Some(self.version.into()),
            go_version: Some("go1.26.8".into()),
            ..Default::default()
        })
    }
}

#[test]
fn each_boot_cycle_gets_one_cycle_record_with_its_pid_and_build_and_a_stop_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let source = Arc::new(Mutex::new(Versioned {
        clock: clock.clone(),
        pid: 10,
        version: "2.0.2",
        builds_asked: 0,
    }));
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let stop = Stop::new();
    let summary = Collector::new(
        heap_only(ms(2000)),
        shared(&source),
        clock.clone(),
        writer,
        &existing,
        stop.clone(),
    )
    .run(&mut NoObserver)
    .unwrap();
    let source = source.lock().unwrap();
    assert_eq!(summary.reason, StopReason::DurationReached);
    assert_eq!(source.builds_asked, 2, "asked once per boot cycle");
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let cycles: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Cycle)
        .collect();
    assert_eq!(cycles.len(), 2, "{records:#?}");
    let seen: Vec<(u32, Option<u32>, Option<String>)> = cycles
        .iter()
        .map(|r| {
            let version = r.build.as_ref().and_then(|b| b.version.clone());
            (r.cycle, r.pid, version)
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, Some(10), Some("2.0.2".to_string())),
            (2, Some(11), Some("2.1.0".to_string()))
        ]
    );
    // Each cycle record follows its cycle's first answer.
    for c in &cycles {
        let first = records
            .iter()
            .find(|r| r.cycle == c.cycle && r.kind == RecordKind::Heap)
            .unwrap();
        assert_eq!(c.seq, first.seq + 1);
    }
    let last = records.last().unwrap();
    assert_eq!(last.kind, RecordKind::Stop);
    assert_eq!((last.cycle, last.pid), (2, Some(11)));

    // Resumed, the same run gets no second record for the cycle it is in.
    let again = Arc::new(Mutex::new(Versioned {
        clock: clock.clone(),
        pid: 11,
        version: "2.1.0",
        builds_asked: 0,
    }));
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    Collector::new(
        heap_only(ms(3000)),
        shared(&again),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    let again = again.lock().unwrap();
    assert_eq!(again.builds_asked, 0);
}

#[test]
fn a_target_that_exits_by_itself_gets_no_stop_record() {
    let config = CollectConfig {
        until_exit: Some(ms(1000)),
        memstats_interval: Duration::ZERO,
        ..CollectConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let script = vec![
        Step::Ok(LATE, ms(5)),
        Step::Fail(FailureKind::Refused, ms(1)),
    ];
    let source = ScriptedSource::new(clock.clone(), script);
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let stop = Stop::new();
    Collector::new(
        config,
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    assert!(records.iter().all(|r| r.kind != RecordKind::Stop));
    let cycle = records
        .iter()
        .find(|r| r.kind == RecordKind::Cycle)
        .unwrap();
    assert_eq!(
        (cycle.pid, &cycle.build),
        (None, &None),
        "plain HTTP knows neither"
    );
}

fn gaps(records: &[CaptureRecord]) -> Vec<i64> {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|p| p[1].t_ms - p[0].t_ms)
        .collect()
}

fn backing_off(duration: Duration) -> CollectConfig {
    CollectConfig {
        idle_backoff: 4,
        ..heap_only(duration)
    }
}

#[test]
fn an_idle_heap_is_asked_less_often_up_to_four_times_the_interval() {
    let (summary, records, _) = collect(backing_off(ms(12_000)), vec![Step::Ok(LATE, ms(5))]);
    // Flat for ten intervals (5 s), then 1 s, then 2 s.
    let mut expected = vec![500; 10];
    expected.extend([1000, 2000, 2000]);
    assert_eq!(gaps(&records), expected);
    // The interval in force is recorded with each capture.
    let intervals: Vec<Option<u64>> = records.iter().map(|r| r.interval_ms).collect();
    assert_eq!(
        intervals[10..],
        [Some(500), Some(1000), Some(2000), Some(2000)]
    );
    assert_eq!(summary.attempts, 14);
    // Off, the same target is asked every interval.
    let (off, _, _) = collect(heap_only(ms(12_000)), vec![Step::Ok(LATE, ms(5))]);
    assert_eq!(off.attempts, 24);
}

#[test]
fn a_heap_that_moves_brings_the_interval_back_at_once() {
    // Flat for a while, then a new profile (the heap moved), then flat again.
    let mut script: Vec<Step> = (0..13).map(|_| Step::Ok(EARLY, ms(5))).collect();
    script.push(Step::Ok(LATE, ms(5)));
    let (_, records, _) = collect(backing_off(ms(20_000)), script);
    let gaps = gaps(&records);
    assert_eq!(gaps[..10], [500; 10], "{gaps:?}");
    // Backed off; LATE (the 14th) moved: the next comes after 500 ms, and for ten intervals.
    assert_eq!(gaps[10..13], [1000, 2000, 2000], "{gaps:?}");
    assert_eq!(gaps[13..23], [500; 10], "{gaps:?}");
    assert_eq!(gaps[23], 1000, "{gaps:?}");
}

#[test]
fn a_failed_capture_ends_the_back_off() {
    let mut script: Vec<Step> = (0..12).map(|_| Step::Ok(LATE, ms(5))).collect();
    script.push(Step::Fail(FailureKind::Timeout, ms(5)));
    script.push(Step::Ok(LATE, ms(5)));
    let (_, records, _) = collect(backing_off(ms(12_000)), script);
    // Backed off to 2 s, then the timeout brings the interval back.
    assert_eq!(gaps(&records)[10..13], [1000, 2000, 500]);
}

#[test]
fn memory_half_way_to_the_burst_threshold_keeps_the_interval() {
    // ~110 MiB in use of a 256 MiB limit: above half of 0.6 of it, below burst.
    let config = CollectConfig {
        limit: Some(256 << 20),
        ..backing_off(ms(10_000))
    };
    let (_, records, _) = collect(config, vec![Step::Ok(LATE, ms(5))]);
    assert!(gaps(&records).iter().all(|&g| g == 500));
    // With 1 GiB, the same heap is far from it and backs off.
    let config = CollectConfig {
        limit: Some(1 << 30),
        ..backing_off(ms(10_000))
    };
    let (_, records, _) = collect(config, vec![Step::Ok(LATE, ms(5))]);
    assert!(gaps(&records).contains(&2000));
}

#[test]
fn burst_mode_never_backs_off() {
    // ~110 MiB in use of a 128 MiB limit: burst, even though every capture is the same.
    let config = CollectConfig {
        limit: Some(128 << 20),
        ..backing_off(ms(2000))
    };
    let (_, records, _) = collect(config, vec![Step::Ok(LATE, ms(5))]);
    assert!(records[1..].iter().all(|r| r.interval_ms == Some(100)));
    assert!(gaps(&records)[1..].iter().all(|&g| g == 100));
}

#[test]
fn memory_that_moves_from_outside_keeps_the_interval_while_the_profile_is_flat() {
    // The heap profile is as of the last GC; growth seen from outside counts as movement.
    struct Growing {
        clock: Arc<FakeClock>,
        outside: Arc<OutsideMemory>,
        /// Anonymous memory added before each capture.
        step: u64,
    }
    impl Source for Growing {
        fn target(&self) -> &str {
            "growing"
        }
        fn kind(&self) -> SourceKind {
            SourceKind::Http
        }
        fn supports(&self, want: Want) -> bool {
            want == Want::Heap
        }
        fn fetch(&mut self, _want: Want, _timeout: Duration) -> Result<Reply, FetchError> {
            self.clock.advance(ms(5));
            self.outside
                .killable
                .fetch_add(self.step, Ordering::Relaxed);
            Ok(Reply {
                bytes: LATE.to_vec(),
                pid: None,
                made: None,
            })
        }
    }
    let clock = Arc::new(FakeClock::new(1_000_000));
    let run = |step: u64, duration: Duration| {
        let dir = tempfile::tempdir().unwrap();
        let outside = Arc::new(OutsideMemory::default());
        let source = Growing {
            clock: clock.clone(),
            outside: outside.clone(),
            step,
        };
        // Above the ~110 MiB the profile holds in use, so the outside figure is the one seen.
        outside.killable.store(120 << 20, Ordering::Relaxed);
        let (writer, existing) = RunWriter::open(dir.path()).unwrap();
        let stop = Stop::new();
        let config = backing_off(duration);
        Collector::new(
            config,
            Box::new(source),
            clock.clone(),
            writer,
            &existing,
            stop,
        )
        .with_outside_memory(outside)
        .run(&mut NoObserver)
        .unwrap();
        gaps(&attempts(
            RunDir::open(dir.path()).unwrap().manifest.records,
        ))
    };
    // 8 MiB a capture: moving all the time.
    let fast = run(8 << 20, ms(3000));
    assert!(fast.iter().all(|&g| g == 500), "{fast:?}");
    // 512 KiB a capture: under the threshold each time, but it adds up from where the heap
    // last moved: backed off, then back to the interval when the sum passes 8 MiB and 5 %.
    let slow = run(512 << 10, ms(40_000));
    let backed_off = slow.iter().position(|&g| g == 2000).expect("backs off");
    assert!(slow[backed_off..].contains(&500), "{slow:?}");
}

#[test]
fn a_flat_heap_under_heavy_churn_is_busy_and_keeps_the_interval() {
    // testdata/runs/steady: in-use flat (13.9–14.5 MiB) while 32 MiB/s churn goes through
    // main.handleRequest, ~10–20 MiB allocated between these captures.
    macro_rules! steady {
        ($($seq:literal),*) => {
            [$(include_bytes!(concat!("../../testdata/runs/steady/profiles/0000", $seq, "-heap.pb.gz")) as &'static [u8]),*]
        };
    }
    let captures = steady!(
        "14", "16", "20", "26", "28", "32", "38", "45", "51", "55", "59", "61"
    );
    // What the test stands on, checked, so a re-recorded run that breaks it says so.
    let totals: Vec<(i64, i64)> = captures
        .iter()
        .map(|b| {
            let raw = decode::decompress(b, &DecodeLimits::default()).unwrap();
            let t: BTreeMap<String, i64> = decode::summarize(&raw)
                .unwrap()
                .totals
                .into_iter()
                .collect();
            (t["inuse_space"], t["alloc_space"])
        })
        .collect();
    let (low, high) = totals
        .iter()
        .fold((i64::MAX, 0), |(l, h), t| (l.min(t.0), h.max(t.0)));
    assert!(high - low < 2 << 20, "in-use not flat: {totals:?}");
    assert!(
        totals.windows(2).all(|w| w[1].1 - w[0].1 > 4 << 20),
        "{totals:?}"
    );

    let script: Vec<Step> = captures.iter().map(|b| Step::Ok(b, ms(5))).collect();
    let (_, records, _) = collect(backing_off(ms(7000)), script);
    assert!(
        gaps(&records).iter().all(|&g| g == 500),
        "{:?}",
        gaps(&records)
    );
}

/// Sends an event record through the collector's inbox during its `at`-th fetch, as
/// `heapwatch run` does when its child dies while the collector is busy.
struct EventDuringFetch {
    inner: ScriptedSource,
    fetches: usize,
    at: usize,
    event: Option<(std::sync::mpsc::Sender<CaptureRecord>, CaptureRecord)>,
}

impl Source for EventDuringFetch {
    fn target(&self) -> &str {
        "scripted"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Proc
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        self.fetches += 1;
        if self.fetches == self.at {
            if let Some((tx, record)) = self.event.take() {
                tx.send(record).unwrap();
            }
        }
        let mut reply = self.inner.fetch(want, timeout)?;
        // Two processes: pid 100 for the early profile, 200 for the late one.
        reply.pid = Some(if reply.bytes == EARLY { 100 } else { 200 });
        Ok(reply)
    }
}

#[test]
fn event_records_get_their_seq_and_the_boot_cycle_their_pid_answered_in() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let (tx, rx) = std::sync::mpsc::channel();
    let mut exit = CaptureRecord::new(0, RecordKind::Exit, 0, 1_001_200);
    exit.pid = Some(100);
    exit.signal = Some(9);
    // pid 100 dies during the 4th fetch, which already reads its successor (pid 200): the
    // exit still belongs to cycle 1.
    let source = EventDuringFetch {
        inner: ScriptedSource::new(
            clock.clone(),
            vec![
                Step::Ok(EARLY, ms(5)),
                Step::Ok(EARLY, ms(5)),
                Step::Fail(FailureKind::Refused, ms(5)),
                Step::Ok(LATE, ms(5)),
            ],
        ),
        fetches: 0,
        at: 4,
        event: Some((tx.clone(), exit)),
    };
    let mut stop = CaptureRecord::new(0, RecordKind::Stop, 0, 1_004_000);
    stop.pid = Some(200);
    let stop_flag = Stop::new();
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let collector = Collector::new(
        heap_only(ms(3000)),
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop_flag,
    )
    .with_events(rx);
    // Sent before the end: written when the collector stops, after everything else.
    tx.send(stop).unwrap();
    collector.run(&mut NoObserver).unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(
        seqs,
        (1..=records.len() as u64).collect::<Vec<_>>(),
        "one numbering"
    );
    let stop = records.iter().find(|r| r.kind == RecordKind::Stop).unwrap();
    assert_eq!(
        stop.seq, 1,
        "an event waiting at the start is written first"
    );
    let exit = records.iter().find(|r| r.kind == RecordKind::Exit).unwrap();
    assert_eq!(
        (exit.cycle, exit.signal, exit.t_ms),
        (1, Some(9), 1_001_200)
    );
    let late = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap && r.pid == Some(200));
    assert!(late.clone().count() >= 2);
    assert!(late.clone().all(|r| r.cycle == 2), "{records:#?}");
    assert!(
        exit.seq > late.clone().next().unwrap().seq,
        "written after the 4th fetch"
    );
}

#[test]
fn a_death_told_during_a_sleep_makes_the_next_attempt_at_once() {
    struct Ends(Vec<CaptureRecord>);
    impl Observer for Ends {
        fn attempt(&mut self, _: &CaptureRecord, _: &LiveStatus) {}
        fn ended(&mut self, record: &CaptureRecord) {
            self.0.push(record.clone());
        }
    }
    let mut ends = Ends(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let (tx, rx) = std::sync::mpsc::channel();
    let mut exit = CaptureRecord::new(0, RecordKind::Exit, 0, 1_000_010);
    exit.pid = Some(100);
    let source = EventDuringFetch {
        inner: ScriptedSource::new(clock.clone(), vec![Step::Ok(EARLY, ms(5))]),
        fetches: 0,
        at: 2,
        event: Some((tx.clone(), exit)),
    };
    let stop = Stop::new();
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    Collector::new(
        heap_only(ms(2000)),
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .with_events(rx)
    .run(&mut ends)
    .unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    drop(tx);
    // The observer (the status line) was told of the end once, as written.
    let written: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Exit)
        .collect();
    assert_eq!(ends.0.len(), 1);
    assert_eq!((ends.0[0].seq, ends.0[0].pid), (written[0].seq, Some(100)));
    let starts: Vec<(RecordKind, i64)> = records.iter().map(|r| (r.kind, r.t_ms)).collect();
    // Attempts at 0 and 500 ms; the exit, told during the second, is seen within one look
    // into the inbox (20 ms) and the next attempt follows, not at 1000 ms.
    let heaps: Vec<i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .map(|r| r.t_ms - 1_000_000)
        .collect();
    assert_eq!(&heaps[..2], &[0, 500], "{starts:?}");
    assert!(heaps[2] <= 500 + 5 + 20, "{starts:?}");
    assert!(records.iter().any(|r| r.kind == RecordKind::Exit));
}

#[test]
fn when_the_inbox_closes_the_collector_ends_with_no_stop_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let (tx, rx) = std::sync::mpsc::channel();
    let mut exit = CaptureRecord::new(0, RecordKind::Exit, 0, 1_000_010);
    exit.pid = Some(100);
    // The last death is told, then the teller is gone (heapwatch run's restarts are used).
    let source = EventDuringFetch {
        inner: ScriptedSource::new(clock.clone(), vec![Step::Ok(EARLY, ms(5))]),
        fetches: 0,
        at: 3,
        event: Some((tx, exit)),
    };
    let stop = Stop::new();
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let summary = Collector::new(
        heap_only(ms(60_000)),
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .with_events(rx)
    .run(&mut NoObserver)
    .unwrap();
    assert_eq!(summary.reason, StopReason::TargetExited);
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    assert_eq!(
        records.last().unwrap().kind,
        RecordKind::Exit,
        "{records:#?}"
    );
    assert!(records.iter().all(|r| r.kind != RecordKind::Stop));
    assert!(clock.now() < ms(60_000), "ended long before its duration");
}

#[test]
fn a_source_that_costs_the_target_nothing_never_backs_off_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let source = EventDuringFetch {
        inner: ScriptedSource::new(clock.clone(), vec![Step::Ok(EARLY, ms(5))]),
        fetches: 0,
        at: 0,
        event: None,
    };
    let stop = Stop::new();
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let config = CollectConfig {
        idle_backoff: 4,
        ..heap_only(ms(5000))
    };
    Collector::new(
        config,
        Box::new(source),
        clock.clone(),
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let heaps: Vec<i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Heap)
        .map(|r| r.t_ms)
        .collect();
    assert_eq!(
        heaps.len(),
        10,
        "the same heap every time, read at the interval"
    );
    assert!(heaps.windows(2).all(|w| w[1] - w[0] == 500), "{heaps:?}");
}

#[test]
fn every_stored_capture_gets_its_site_index_entry_from_the_collector() {
    let clock = Arc::new(FakeClock::new(1_000_000));
    let source = AgentLike::new(clock.clone(), &[Want::Heap, Want::Goroutine]);
    let config = CollectConfig {
        goroutine: true,
        goroutine_interval: ms(500),
        memstats_interval: Duration::ZERO,
        duration: Some(ms(2000)),
        ..CollectConfig::default()
    };
    let (summary, records, dir) = collect_from(config, source, &clock);
    assert_eq!(summary.stored, 2, "{records:#?}");
    let run = RunDir::open(dir.path()).unwrap();
    // The collector has exited, so its indexer has written everything it was given.
    let done = crate::index::rebuild(&run, &DecodeLimits::default()).unwrap();
    assert_eq!(
        (done.captures, done.fresh, done.rebuilt),
        (2, 2, 0),
        "{done:?}"
    );
}

/// Answers natively async (as HTTP and the agent do), each reply taking `latency` on tokio's
/// clock; from the `hang_at`-th request on, it sets the stop and never answers, and says when
/// the request was dropped.
struct Native {
    latency: Duration,
    requests: usize,
    hang_at: usize,
    stop: Stop,
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped: the request it sits in was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Source for Native {
    fn target(&self) -> &str {
        "native"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Http
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _: Want, _: Duration) -> Result<Reply, FetchError> {
        unreachable!("the collector uses fetch_async when a source has it")
    }
    fn fetch_async<'a>(
        &'a mut self,
        _: Want,
        _: Duration,
        _: Option<&'a mut dyn crate::source::BodyTap>,
    ) -> Option<crate::source::Fetching<'a>> {
        self.requests += 1;
        let hang = self.requests >= self.hang_at;
        let (latency, stop) = (self.latency, self.stop.clone());
        let guard = DropFlag(self.dropped.clone());
        Some(Box::pin(async move {
            if hang {
                stop.set();
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(latency).await;
            // Answered: the guard goes without a cancellation to report.
            std::mem::forget(guard);
            Ok(Reply {
                bytes: LATE.to_vec(),
                pid: None,
                made: None,
            })
        }))
    }
}

use std::sync::atomic::AtomicBool;

#[test]
fn a_stop_during_a_hanging_request_cancels_it_and_the_run_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    let dropped = Arc::new(AtomicBool::new(false));
    let source = Native {
        latency: ms(5),
        requests: 0,
        hang_at: 3,
        stop: stop.clone(),
        dropped: dropped.clone(),
    };
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let clock = Arc::new(SystemClock::new());
    let summary = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(
            Collector::new(
                heap_only(ms(60_000)),
                Box::new(source),
                clock,
                writer,
                &existing,
                stop,
            )
            .run_async(NoObserver),
        )
        .unwrap();
    assert_eq!(summary.reason, StopReason::Interrupted);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the request in flight was dropped"
    );
    assert_eq!((summary.attempts, summary.captures), (2, 2));
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let kinds: Vec<RecordKind> = records.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RecordKind::Heap,
            RecordKind::Cycle,
            RecordKind::Heap,
            RecordKind::Stop
        ]
    );
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4], "no seq taken by the cancelled request");
    let stored = records[0].file.as_ref().unwrap();
    assert_eq!(std::fs::read(dir.path().join(stored)).unwrap(), LATE);
}

/// A blocking source (as proc is) whose second fetch sets the stop and then blocks until the
/// test lets it go.
struct Stuck {
    fetches: usize,
    stop: Stop,
    release: Option<std::sync::mpsc::Receiver<()>>,
}

impl Source for Stuck {
    fn target(&self) -> &str {
        "stuck"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Proc
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _: Want, _: Duration) -> Result<Reply, FetchError> {
        self.fetches += 1;
        if self.fetches == 2 {
            self.stop.set();
            if let Some(release) = self.release.take() {
                let _ = release.recv();
            }
        }
        Ok(Reply {
            bytes: EARLY.to_vec(),
            pid: Some(7),
            made: None,
        })
    }
}

#[test]
fn a_stop_during_a_blocking_fetch_ends_the_run_without_waiting_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    let (release, held) = std::sync::mpsc::channel();
    let source = Stuck {
        fetches: 0,
        stop: stop.clone(),
        release: Some(held),
    };
    let clock = Arc::new(FakeClock::new(1_000_000));
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let summary = Collector::new(
        heap_only(ms(60_000)),
        Box::new(source),
        clock,
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    // The fetch is still blocked on its thread: the run ended all the same.
    assert_eq!(summary.reason, StopReason::Interrupted);
    assert_eq!(summary.attempts, 1);
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    assert_eq!(records.last().unwrap().kind, RecordKind::Stop);
    release.send(()).unwrap();
}

#[tokio::test(start_paused = true)]
async fn on_tokio_time_paused_captures_are_paced_at_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    let source = Native {
        latency: ms(20),
        requests: 0,
        hang_at: usize::MAX,
        stop: stop.clone(),
        dropped: Arc::new(AtomicBool::new(false)),
    };
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let collector = Collector::new(
        heap_only(ms(5000)),
        Box::new(source),
        Arc::new(SystemClock::new()),
        writer,
        &existing,
        stop,
    );
    // Each target's collector can be a task of its own.
    let summary = tokio::spawn(collector.run_async(NoObserver))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary.attempts, 10);
    let records = attempts(RunDir::open(dir.path()).unwrap().manifest.records);
    assert_eq!(gaps(&records), [500; 9]);
    assert!(records.iter().all(|r| r.latency_ms == 20.0), "{records:#?}");
}

/// A blocking source whose build look-up (the first answer's `cycle` record) sets the stop and
/// then blocks until the test lets it go: the source is away on its thread when the stop lands.
struct StuckInBuild {
    stop: Stop,
    release: Option<std::sync::mpsc::Receiver<()>>,
}

impl Source for StuckInBuild {
    fn target(&self) -> &str {
        "stuck in build"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Agent
    }
    fn supports(&self, want: Want) -> bool {
        want == Want::Heap
    }
    fn fetch(&mut self, _: Want, _: Duration) -> Result<Reply, FetchError> {
        Ok(Reply {
            bytes: EARLY.to_vec(),
            pid: Some(7),
            made: None,
        })
    }
    fn build_info(&mut self, _: Duration) -> Option<crate::model::build::BuildInfo> {
        self.stop.set();
        if let Some(release) = self.release.take() {
            // Bounded: were the collector to panic, its runtime would wait for this thread.
            let _ = release.recv_timeout(Duration::from_secs(10));
        }
        None
    }
}

#[test]
fn a_stop_during_a_blocking_build_look_up_ends_the_run_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    let (release, held) = std::sync::mpsc::channel();
    let source = StuckInBuild {
        stop: stop.clone(),
        release: Some(held),
    };
    let clock = Arc::new(FakeClock::new(1_000_000));
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let summary = Collector::new(
        backing_off(ms(60_000)),
        Box::new(source),
        clock,
        writer,
        &existing,
        stop,
    )
    .run(&mut NoObserver)
    .unwrap();
    assert_eq!(summary.reason, StopReason::Interrupted);
    assert_eq!(summary.attempts, 1);
    assert_eq!(summary.stored, 1);
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let kinds: Vec<RecordKind> = records.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [RecordKind::Heap, RecordKind::Cycle, RecordKind::Stop],
        "the capture kept, the cycle noted without its build, then the stop"
    );
    release.send(()).unwrap();
}

#[test]
fn once_the_target_is_gone_the_status_shows_no_figures_of_the_process_that_was() {
    struct Last(Vec<LiveStatus>);
    impl Observer for Last {
        fn attempt(&mut self, _: &CaptureRecord, status: &LiveStatus) {
            self.0.push(status.clone());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let script = vec![
        Step::Ok(EARLY, ms(5)),
        Step::Ok(LATE, ms(5)),
        Step::Fail(FailureKind::Refused, ms(1)),
    ];
    let source = ScriptedSource::new(clock.clone(), script);
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    let mut seen = Last(Vec::new());
    Collector::new(
        heap_only(ms(2000)),
        Box::new(source),
        clock,
        writer,
        &existing,
        Stop::new(),
    )
    .run(&mut seen)
    .unwrap();
    assert!(seen.0[1].heap_inuse.is_some() && !seen.0[1].gone);
    let after = seen.0.last().unwrap();
    assert!(after.gone, "{after:?}");
    assert_eq!(after.heap_inuse, None, "no heap of a process that is gone");
    assert_eq!(after.memory, None, "no memory figure from its last capture");
    assert_eq!(after.time_to_limit(), None);
}

/// An agent whose goroutine dumps take `goroutine_ms` to answer and heap profiles 2 ms.
struct CostlyGoroutines {
    clock: Arc<FakeClock>,
    goroutine_ms: u64,
}

impl Source for CostlyGoroutines {
    fn target(&self) -> &str {
        "costly"
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Agent
    }
    fn supports(&self, want: Want) -> bool {
        matches!(want, Want::Heap | Want::Goroutine)
    }
    fn fetch(&mut self, want: Want, _: Duration) -> Result<Reply, FetchError> {
        let (took, bytes) = match want {
            Want::Goroutine => (self.goroutine_ms, REAL_DUMP),
            _ => (2, LATE),
        };
        self.clock.advance(ms(took));
        Ok(Reply {
            bytes: bytes.to_vec(),
            pid: Some(7),
            made: None,
        })
    }
}

fn goroutine_gaps(goroutine_ms: u64) -> Vec<i64> {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let source = CostlyGoroutines {
        clock: clock.clone(),
        goroutine_ms,
    };
    let config = CollectConfig {
        goroutine: true,
        goroutine_interval: ms(1000),
        max_duty: 1.0,
        ..heap_only(ms(60_000))
    };
    let (writer, existing) = RunWriter::open(dir.path()).unwrap();
    Collector::new(
        config,
        Box::new(source),
        clock,
        writer,
        &existing,
        Stop::new(),
    )
    .run(&mut NoObserver)
    .unwrap();
    let records = RunDir::open(dir.path()).unwrap().manifest.records;
    let starts: Vec<i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Goroutine)
        .map(|r| r.t_ms)
        .collect();
    starts.windows(2).map(|p| p[1] - p[0]).collect()
}

#[test]
fn goroutine_captures_are_spread_apart_by_what_they_cost_next_to_heap_captures() {
    // As quick as a heap capture: every --goroutine-interval.
    let cheap = goroutine_gaps(2);
    assert!(cheap.iter().all(|&g| g == 1000), "{cheap:?}");
    // 40 times a heap capture's time: 40 heap intervals (20 s) apart once measured, so
    // goroutine profiles take no more of the target's time than heap profiles do.
    let costly = goroutine_gaps(80);
    assert_eq!(costly[0], 20_000, "{costly:?}");
    assert!(costly.iter().all(|&g| g >= 20_000), "{costly:?}");
    // Never further apart than a minute.
    let huge = goroutine_gaps(5_000);
    assert!(huge.iter().all(|&g| g <= 60_000 + 5_000), "{huge:?}");
}

/// Tells a nudge during its first fetch: a container's memory crossing into burst mode while
/// its collector is paced by a slow baseline.
struct NudgeDuringFetch {
    inner: ScriptedSource,
    nudge: super::Nudge,
    fetches: u32,
}

impl Source for NudgeDuringFetch {
    fn target(&self) -> &str {
        self.inner.target()
    }
    fn kind(&self) -> SourceKind {
        self.inner.kind()
    }
    fn supports(&self, want: Want) -> bool {
        self.inner.supports(want)
    }
    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        self.fetches += 1;
        if self.fetches == 1 {
            self.nudge.nudge();
        }
        self.inner.fetch(want, timeout)
    }
}

#[test]
fn a_nudge_brings_the_next_capture_one_burst_interval_after_the_last_not_a_baseline_later() {
    let run = |nudged: bool| {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(FakeClock::new(1_000_000));
        let nudge = super::Nudge::new();
        let source = NudgeDuringFetch {
            inner: ScriptedSource::new(clock.clone(), vec![Step::Ok(EARLY, ms(5))]),
            nudge: if nudged {
                nudge.clone()
            } else {
                super::Nudge::new()
            },
            fetches: 0,
        };
        let config = CollectConfig {
            interval: ms(10_000),
            burst_interval: ms(100),
            ..heap_only(ms(5000))
        };
        let (writer, existing) = RunWriter::open(dir.path()).unwrap();
        Collector::new(
            config,
            Box::new(source),
            clock,
            writer,
            &existing,
            Stop::new(),
        )
        .with_nudge(nudge)
        .run(&mut NoObserver)
        .unwrap();
        attempts(RunDir::open(dir.path()).unwrap().manifest.records)
            .iter()
            .map(|r| r.t_ms - 1_000_000)
            .collect::<Vec<i64>>()
    };
    assert_eq!(run(true), [0, 100]);
    assert_eq!(run(false), [0]);
}
