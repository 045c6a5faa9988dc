//! The push loop against a scripted transport, on tokio's paused clock: batches and requests in
//! flight against a slow server, retries, refusals, rejections, giving up, and the live drain
//! with a request in flight, without a network and without sleeping.

use std::collections::VecDeque;

use prost::Message;

use super::*;
use crate::decode::{self, pb};
use crate::push::connect::Answer;
use crate::push::driver::CYCLE_WAIT;
use crate::push::journal::{self, Outcome};
use crate::push::wire::PushRequest;
use crate::push::{BATCH_CAPTURES, IN_FLIGHT};
use std::collections::BTreeMap;

use crate::store::{RecordKind, RunDir, RunWriter};

/// Answers from a script (then `Delivered`) after `delay`, keeping every body, when it came,
/// and the most requests it ever had in flight at once.
#[derive(Clone, Default)]
struct Scripted(Arc<Mutex<Script>>);

#[derive(Default)]
struct Script {
    answers: VecDeque<Answer>,
    sent: Vec<(Instant, PushRequest)>,
    delay: Duration,
    in_flight: usize,
    most_in_flight: usize,
}

impl Scripted {
    fn new(script: Vec<Answer>) -> Scripted {
        Scripted::slow(script, Duration::ZERO)
    }

    fn slow(script: Vec<Answer>, delay: Duration) -> Scripted {
        Scripted(Arc::new(Mutex::new(Script {
            answers: script.into(),
            delay,
            ..Script::default()
        })))
    }

    fn sent(&self) -> Vec<(Instant, PushRequest)> {
        self.0.lock().unwrap().sent.clone()
    }

    fn most_in_flight(&self) -> usize {
        self.0.lock().unwrap().most_in_flight
    }

    /// Every capture id sent, in the order sent.
    fn ids(&self) -> Vec<String> {
        self.sent()
            .iter()
            .flat_map(|(_, r)| r.series.iter().flat_map(|s| s.samples.iter()))
            .map(|s| s.id.clone())
            .collect()
    }
}

impl Transport for Scripted {
    fn send(&self, body: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send {
        let state = Arc::clone(&self.0);
        let (answer, delay) = {
            let mut s = state.lock().unwrap();
            s.sent.push((
                Instant::now(),
                PushRequest::decode(body.as_slice()).unwrap(),
            ));
            s.in_flight += 1;
            s.most_in_flight = s.most_in_flight.max(s.in_flight);
            let answer = s
                .answers
                .pop_front()
                .unwrap_or(Answer::Delivered { status: 200 });
            (answer, s.delay)
        };
        async move {
            tokio::time::sleep(delay).await;
            state.lock().unwrap().in_flight -= 1;
            answer
        }
    }
}

fn failed() -> Answer {
    Answer::Failed {
        why: "HTTP 503".into(),
        retry_after: None,
        maybe_arrived: false,
    }
}

/// What a real transport answers when its request timeout passes.
fn timed_out() -> Answer {
    Answer::Failed {
        why: "no answer within 10s".into(),
        retry_after: None,
        maybe_arrived: true,
    }
}

fn refusal(status: u16) -> Refusal {
    Refusal {
        status,
        code: Some("invalid_argument".into()),
        message: "profile is outside of ingestion window".into(),
    }
}

fn server() -> Server {
    Server {
        to: "http://127.0.0.1:4040".into(),
        tenant: None,
    }
}

/// A run of `n` heap captures in boot cycle 1, each a copy of a real profile.
fn run(n: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/profiles/steady-heap.pb.gz"),
    )
    .unwrap();
    let (mut writer, _) = RunWriter::open(dir.path()).unwrap();
    for seq in 1..=n {
        let mut record = CaptureRecord::new(seq, RecordKind::Heap, 1, seq as i64 * 250);
        record.file = Some(
            writer
                .store_profile(&format!("{seq:06}-heap.pb.gz"), &bytes)
                .unwrap(),
        );
        writer.append(&record).unwrap();
    }
    dir
}

fn fast() -> PushOptions {
    PushOptions {
        backoff: Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(1),
        },
        ..PushOptions::default()
    }
}

fn records(dir: &Path) -> Vec<journal::PushRecord> {
    journal::read(dir).unwrap().records().cloned().collect()
}

fn totals(raw: &[u8]) -> Vec<(String, i64)> {
    let bytes = decode::decompress(raw, &DecodeLimits::default()).unwrap();
    let p: pb::Profile = decode::decode_message(&bytes).unwrap();
    p.sample_type
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let sum = p.sample.iter().map(|s| s.value[i]).sum();
            (p.string_table[t.r#type as usize].clone(), sum)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_slow_server_gets_batches_several_at_a_time_and_keeps_up() {
    let n = 400;
    let dir = run(n);
    let transport = Scripted::slow(vec![], Duration::from_millis(500));
    let started = Instant::now();
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!((stats.delivered, stats.unsent), (n, 0));
    let sent = transport.sent();
    assert!(transport.most_in_flight() > 1, "requests overlap");
    assert!(transport.most_in_flight() <= IN_FLIGHT);
    assert!(
        sent.len() < n as usize / 4,
        "{} requests for {n} captures",
        sent.len()
    );
    // One request at a time, one capture each, would take n × 500 ms.
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Within a request, captures keep their order; each goes once.
    let mut ids = transport.ids();
    let seq_of: std::collections::HashMap<String, u64> = records(dir.path())
        .into_iter()
        .map(|r| (r.id, r.seq))
        .collect();
    assert_eq!(seq_of.len(), n as usize);
    for (_, request) in &sent {
        let seqs: Vec<u64> = request
            .series
            .iter()
            .flat_map(|s| s.samples.iter())
            .map(|s| seq_of[&s.id])
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n as usize, "each capture once");
    for (_, request) in &sent {
        let samples: usize = request.series.iter().map(|s| s.samples.len()).sum();
        assert!(samples <= BATCH_CAPTURES);
    }
}

#[tokio::test(start_paused = true)]
async fn every_capture_goes_with_in_use_as_captured_and_allocations_as_the_change() {
    // Four copies of one profile: the first whole, the others an empty allocation delta with
    // the same in-use figures, each at its own time.
    let dir = run(4);
    let transport = Scripted::new(vec![]);
    push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    let stored = std::fs::read(dir.path().join("profiles/000001-heap.pb.gz")).unwrap();
    let captured = totals(&stored);
    let sent = transport.sent();
    let samples: Vec<&[u8]> = sent
        .iter()
        .flat_map(|(_, r)| r.series.iter().flat_map(|s| s.samples.iter()))
        .map(|s| s.raw_profile.as_slice())
        .collect();
    assert_eq!(samples.len(), 4);
    assert_eq!(
        samples[0],
        stored.as_slice(),
        "the first of a cycle goes as stored"
    );
    for later in &samples[1..] {
        for ((name, sum), (_, whole)) in totals(later).into_iter().zip(&captured) {
            let want = if name.starts_with("alloc_") {
                0
            } else {
                *whole
            };
            assert_eq!(sum, want, "{name}");
        }
    }
    let labels = &sent[0].1.series[0].labels;
    let delta = labels.iter().find(|l| l.name == "__delta__").unwrap();
    assert_eq!(delta.value, "false");
}

#[tokio::test(start_paused = true)]
async fn failures_are_retried_with_growing_waits_then_delivered() {
    let dir = run(2);
    let transport = Scripted::new(vec![failed(), failed(), failed()]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!(stats.delivered, 2);
    assert_eq!(stats.retries, 3);
    assert_eq!(stats.unsent, 0);
    let sent = transport.sent();
    assert_eq!(sent.len(), 4, "both captures in each request");
    let gaps: Vec<Duration> = sent.windows(2).map(|w| w[1].0 - w[0].0).collect();
    // Attempt n waits between d/2 and d, d = 100 ms · 2ⁿ⁻¹.
    for (n, gap) in gaps.iter().enumerate() {
        let d = Duration::from_millis(100 << n);
        assert!(
            *gap >= d / 2 && *gap <= d,
            "wait {n}: {gap:?} for d = {d:?}"
        );
    }
    // The same ids on every attempt.
    let ids = |r: &PushRequest| -> Vec<String> {
        r.series
            .iter()
            .flat_map(|s| s.samples.iter().map(|x| x.id.clone()))
            .collect()
    };
    assert!(sent.iter().all(|(_, r)| ids(r) == ids(&sent[0].1)));
    let records = records(dir.path());
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.attempts == 4));
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_is_sent_again_one_by_one_and_only_the_refused_are_recorded_so() {
    let dir = run(3);
    // The batch of three refused, then seq 1 alone is refused and the others taken.
    let transport = Scripted::new(vec![
        Answer::Refused(refusal(400)),
        Answer::Refused(refusal(400)),
    ]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!((stats.delivered, stats.refused, stats.retries), (2, 1, 0));
    assert_eq!(stats.refusals, vec![(refusal(400), 1)]);
    assert_eq!(transport.sent().len(), 4, "the batch, then each alone");
    let records = records(dir.path());
    assert_eq!(records[0].outcome, Outcome::Refused);
    assert_eq!(records[0].seq, 1);
    assert!(
        records[0]
            .message
            .as_deref()
            .unwrap()
            .contains("ingestion window")
    );

    // Pushed again: nothing to send. With --retry-refused: only the refused one.
    let again = Scripted::new(vec![]);
    let stats = push_run(dir.path(), server(), again.clone(), fast())
        .await
        .unwrap();
    assert_eq!(again.sent().len(), 0);
    assert_eq!(stats.tally.already_delivered, 2);
    assert_eq!(stats.tally.already_refused, 1);
    let retry = PushOptions {
        retry: Retry {
            refused: true,
            ..Retry::default()
        },
        ..fast()
    };
    let stats = push_run(dir.path(), server(), again.clone(), retry)
        .await
        .unwrap();
    assert_eq!((stats.delivered, again.sent().len()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_rejection_stops_the_push_and_records_nothing() {
    let dir = run(3);
    let rejected = Refusal {
        status: 401,
        code: Some("unauthenticated".into()),
        message: "invalid token".into(),
    };
    let transport = Scripted::new(vec![Answer::Rejected(rejected.clone())]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!(stats.rejected, Some(rejected));
    assert_eq!((stats.delivered, stats.unsent), (0, 3));
    assert_eq!(transport.sent().len(), 1);
    assert!(records(dir.path()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_server_that_keeps_failing_is_given_up_on_in_bounded_time() {
    let dir = run(2);
    let transport = Scripted::new(vec![failed(); 1000]);
    let options = PushOptions {
        give_up_after: Some(Duration::from_secs(5)),
        ..fast()
    };
    let started = Instant::now();
    let stats = push_run(dir.path(), server(), transport.clone(), options)
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(stats.gave_up);
    assert_eq!((stats.delivered, stats.unsent), (0, 2));
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(7),
        "gave up after {took:?}"
    );
    assert!(records(dir.path()).is_empty(), "nothing went unanswered");
}

#[tokio::test(start_paused = true)]
async fn restamped_captures_carry_the_push_time_and_their_own_as_a_label() {
    let dir = run(1);
    let transport = Scripted::new(vec![]);
    let options = PushOptions {
        restamp: true,
        ..fast()
    };
    let before = crate::time::now_ns();
    push_run(dir.path(), server(), transport.clone(), options)
        .await
        .unwrap();
    let sent = transport.sent();
    let series = &sent[0].1.series[0];
    let time = |raw: &[u8]| {
        let bytes = decode::decompress(raw, &DecodeLimits::default()).unwrap();
        decode::decode_message(&bytes).unwrap().time_nanos
    };
    assert!(
        time(&series.samples[0].raw_profile) >= before,
        "stamped with the push time"
    );
    let stored = std::fs::read(dir.path().join("profiles/000001-heap.pb.gz")).unwrap();
    let label = series
        .labels
        .iter()
        .find(|l| l.name == "heapwatch_captured_at")
        .unwrap();
    assert_eq!(
        label.value,
        crate::time::rfc3339_ms(time(&stored).div_euclid(1_000_000))
    );
    assert!(records(dir.path())[0].restamped);
}

#[tokio::test(start_paused = true)]
async fn a_live_push_sends_what_is_enqueued_and_the_drain_is_bounded() {
    let dir = run(1);
    let transport = Scripted::new(vec![]);
    let handle = start(dir.path(), server(), transport.clone(), fast()).unwrap();
    // Enqueued records the pusher already read from the manifest go once.
    let (_, read) = RunWriter::open(dir.path()).unwrap();
    handle.enqueue(&read.records[0]);
    let mut cycle = CaptureRecord::new(2, RecordKind::Cycle, 1, 600);
    cycle.build = Some(crate::model::build::BuildInfo {
        app_id: Some("ctrl1".into()),
        ..Default::default()
    });
    handle.enqueue(&cycle);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    assert_eq!((stats.delivered, stats.unsent), (1, 0));
    assert_eq!(transport.sent().len(), 1);

    // A server that keeps failing: the drain returns at its bound, the captures unsent.
    let dir = run(2);
    let transport = Scripted::new(vec![failed(); 1000]);
    let options = PushOptions {
        give_up_after: None,
        ..fast()
    };
    let handle = start(dir.path(), server(), transport, options).unwrap();
    let started = Instant::now();
    let stats = handle.drain(Duration::from_secs(3)).await.unwrap();
    assert!(started.elapsed() <= Duration::from_millis(3100));
    assert_eq!((stats.delivered, stats.unsent, stats.unanswered), (0, 2, 0));
    assert!(stats.retries > 2);
    assert!(stats.drain.unwrap().ran_out);
}

#[tokio::test(start_paused = true)]
async fn a_request_in_flight_at_the_drain_bound_is_waited_for_not_abandoned() {
    // The server answers after 3 s; the drain's bound is 1 s: the answer is still taken.
    let dir = run(3);
    let transport = Scripted::slow(vec![], Duration::from_secs(3));
    let handle = start(dir.path(), server(), transport.clone(), fast()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(2900));
    assert_eq!((stats.delivered, stats.unsent, stats.unanswered), (3, 0, 0));
    assert_eq!(records(dir.path()).len(), 3);
    assert_eq!(transport.sent().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_never_answered_is_recorded_as_maybe_delivered_and_not_sent_again_blindly() {
    let dir = run(3);
    // The request times out (10 s) after the drain's 1 s bound.
    let transport = Scripted::slow(vec![timed_out()], Duration::from_secs(10));
    let handle = start(dir.path(), server(), transport.clone(), fast()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    assert_eq!((stats.delivered, stats.unsent, stats.unanswered), (0, 0, 3));
    let lines = records(dir.path());
    assert!(
        lines.iter().all(|r| r.outcome == Outcome::Unanswered),
        "{lines:?}"
    );
    assert!(lines[0].message.as_deref().unwrap().contains("no answer"));

    // A later push leaves them; asked to, it sends them.
    let later = Scripted::new(vec![]);
    let stats = push_run(dir.path(), server(), later.clone(), fast())
        .await
        .unwrap();
    assert_eq!(later.sent().len(), 0);
    assert_eq!(stats.tally.already_unanswered, 3);
    let asked = PushOptions {
        retry: Retry {
            unanswered: true,
            ..Retry::default()
        },
        ..fast()
    };
    let stats = push_run(dir.path(), server(), later.clone(), asked)
        .await
        .unwrap();
    assert_eq!(stats.delivered, 3);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_in_the_middle_of_a_push_is_retried_and_only_the_end_records_it_unanswered() {
    let dir = run(2);
    let transport = Scripted::new(vec![timed_out(), timed_out()]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!((stats.delivered, stats.unanswered), (2, 0));
    assert_eq!(transport.sent().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn captures_stored_while_the_server_fails_are_counted_unsent_and_left_to_the_spool() {
    let dir = run(1);
    let options = PushOptions {
        give_up_after: None,
        ..fast()
    };
    let transport = Scripted::new(vec![failed(); 1000]);
    let handle = start(dir.path(), server(), transport, options).unwrap();
    // The manifest writer of a live collector, feeding the push after each fsync.
    let (writer, _) = RunWriter::open(dir.path()).unwrap();
    let enqueuer = handle.enqueuer();
    let mut writer = writer.on_append(Box::new(move |r: &CaptureRecord| enqueuer.enqueue(r)));
    let bytes = std::fs::read(dir.path().join("profiles/000001-heap.pb.gz")).unwrap();
    tokio::time::sleep(CYCLE_WAIT + Duration::from_millis(100)).await;
    for seq in 2..=3u64 {
        let mut record = CaptureRecord::new(seq, RecordKind::Heap, 1, seq as i64 * 250);
        let name = format!("{seq:06}-heap.pb.gz");
        record.file = Some(writer.store_profile(&name, &bytes).unwrap());
        writer.append(&record).unwrap();
    }
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    assert_eq!((stats.delivered, stats.unsent), (0, 3));
    // After the drain, the writer's sends go nowhere and cost nothing.
    let mut record = CaptureRecord::new(4, RecordKind::Heap, 1, 1000);
    record.file = Some(writer.store_profile("000004-heap.pb.gz", &bytes).unwrap());
    writer.append(&record).unwrap();
    assert!(
        records(dir.path()).is_empty(),
        "nothing was recorded as sent"
    );
}

#[test]
fn backoff_stays_between_half_and_the_cap() {
    let backoff = Backoff {
        first: Duration::from_millis(250),
        max: Duration::from_secs(10),
    };
    let mut jitter = Jitter::new();
    for attempt in 1..40 {
        let full = (Duration::from_millis(250) * 2u32.pow((attempt - 1).min(20)))
            .min(Duration::from_secs(10));
        for _ in 0..50 {
            let w = backoff.wait(attempt, &mut jitter);
            assert!(w >= full / 2 && w <= full, "attempt {attempt}: {w:?}");
        }
    }
}

/// oomgrow, a real run of three boot cycles, copied with its manifest cut after seq `upto`;
/// returns the writer (opened first: one opened on files without their lines records them as
/// recovered) and the records still to append, their files in place.
fn oomgrow(upto: u64) -> (tempfile::TempDir, RunWriter, Vec<CaptureRecord>) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/runs/oomgrow");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(from.join("run.json"), dir.path().join("run.json")).unwrap();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    let copy = |records: &[CaptureRecord]| {
        for file in records.iter().filter_map(|r| r.file.as_ref()) {
            let to = dir.path().join(file);
            if !to.exists() {
                std::fs::copy(from.join(file), to).unwrap();
            }
        }
    };
    let records = RunDir::open(&from).unwrap().manifest.records;
    let (now, later): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| r.seq <= upto);
    let (mut writer, _) = RunWriter::open(dir.path()).unwrap();
    copy(&now);
    copy(&later);
    for r in &now {
        writer.append(r).unwrap();
    }
    (dir, writer, later)
}

fn alloc_totals(raw: &[u8]) -> [i64; 2] {
    let t = totals(raw);
    let get = |name: &str| t.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    [get("alloc_objects"), get("alloc_space")]
}

/// Per boot cycle, the allocation counters of its last heap capture: what the deltas pushed
/// over the cycle add up to.
fn last_of_each_cycle(run: &Path) -> BTreeMap<String, [i64; 2]> {
    let dir = RunDir::open(run).unwrap();
    let mut last = BTreeMap::new();
    for r in &dir.manifest.records {
        if r.kind == RecordKind::Heap && r.is_ok() {
            // A deleted capture is never its cycle's last here.
            if let Some(raw) = dir.file_path(r).and_then(|path| std::fs::read(path).ok()) {
                last.insert(r.cycle.to_string(), alloc_totals(&raw));
            }
        }
    }
    last
}

/// The allocation figures pushed per boot cycle, leaving out the captures in `unless`.
fn pushed_per_cycle(sent: &[Scripted], unless: &[String]) -> BTreeMap<String, [i64; 2]> {
    let mut sums: BTreeMap<String, [i64; 2]> = BTreeMap::new();
    for transport in sent {
        for (_, request) in transport.sent() {
            for series in &request.series {
                let label = |name: &str| {
                    series
                        .labels
                        .iter()
                        .find(|l| l.name == name)
                        .map(|l| l.value.clone())
                };
                if label("__name__").as_deref() != Some("memory") {
                    continue;
                }
                let cycle = label("heapwatch_boot_cycle").unwrap();
                for sample in series.samples.iter().filter(|s| !unless.contains(&s.id)) {
                    let [objects, space] = alloc_totals(&sample.raw_profile);
                    let sum = sums.entry(cycle.clone()).or_default();
                    sum[0] += objects;
                    sum[1] += space;
                }
            }
        }
    }
    sums
}

/// Retention's deletion of a stored capture, as the collector records it.
fn delete(writer: &mut RunWriter, seq: u64, file: &str) -> CaptureRecord {
    writer.delete_profile(file).unwrap();
    let mut record = CaptureRecord::new(1000 + seq, RecordKind::Delete, 1, 0);
    record.deleted_seq = Some(seq);
    record.file = Some(file.to_string());
    writer.append(&record).unwrap();
    record
}

#[tokio::test(start_paused = true)]
async fn a_capture_deleted_after_it_was_sent_is_still_the_base_of_the_next_delta() {
    // oomgrow's cycle 1: heap captures 4, 6, 8, each allocating more. 6 goes, then retention
    // deletes it, then 8 is recorded: its delta is against 6 (held), not 4 (which counts 4→6
    // twice).
    let (dir, mut writer, later) = oomgrow(6);
    let transport = Scripted::new(vec![]);
    let handle = start(dir.path(), server(), transport.clone(), fast()).unwrap();
    for _ in 0..1000 {
        let stats = handle.stats();
        if stats.delivered > 0 && stats.unsent == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(handle.stats().unsent, 0, "the first part went");
    let deletion = delete(&mut writer, 6, "profiles/000006-heap.pb.gz");
    handle.enqueue(&deletion);
    for r in &later {
        writer.append(r).unwrap();
        handle.enqueue(r);
    }
    let stats = handle.drain(Duration::from_secs(30)).await.unwrap();
    assert_eq!((stats.unsent, stats.bases_lost), (0, 0));
    let mut want = last_of_each_cycle(dir.path());
    assert_eq!(want.len(), 3);
    assert_eq!(
        pushed_per_cycle(&[transport], &[]),
        std::mem::take(&mut want)
    );
}

#[tokio::test(start_paused = true)]
async fn a_capture_refused_earlier_is_passed_over_as_the_base_of_a_later_push() {
    let (dir, mut writer, later) = oomgrow(6);
    let first = Scripted::new(vec![]);
    push_run(dir.path(), server(), first.clone(), fast())
        .await
        .unwrap();
    // The server refused 6: the journal says so (its profile is left out of the sums).
    let journal = dir.path().join(journal::PUSHES_FILE);
    let mut refused = Vec::new();
    let text: String = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["seq"] == 6 {
                v["outcome"] = "refused".into();
                refused.push(v["id"].as_str().unwrap().to_string());
            }
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&journal, text).unwrap();
    assert_eq!(refused.len(), 1);
    for r in &later {
        writer.append(r).unwrap();
    }
    let second = Scripted::new(vec![]);
    let stats = push_run(dir.path(), server(), second.clone(), fast())
        .await
        .unwrap();
    assert_eq!(stats.tally.already_refused, 1);
    assert_eq!(
        pushed_per_cycle(&[first, second], &refused),
        last_of_each_cycle(dir.path()),
        "8's delta carries 4→6, which the server never had"
    );
}

#[tokio::test(start_paused = true)]
async fn a_base_deleted_after_an_earlier_push_sent_it_is_lost_not_counted_twice() {
    let (dir, mut writer, later) = oomgrow(6);
    let first = Scripted::new(vec![]);
    push_run(dir.path(), server(), first.clone(), fast())
        .await
        .unwrap();
    let read = |seq: u64| {
        alloc_totals(
            &std::fs::read(dir.path().join(format!("profiles/{seq:06}-heap.pb.gz"))).unwrap(),
        )
    };
    let (six, eight) = (read(6), read(8));
    delete(&mut writer, 6, "profiles/000006-heap.pb.gz");
    for r in &later {
        writer.append(r).unwrap();
    }
    let second = Scripted::new(vec![]);
    let stats = push_run(dir.path(), server(), second.clone(), fast())
        .await
        .unwrap();
    assert_eq!(stats.bases_lost, 1, "8 alone");
    let mut want = last_of_each_cycle(dir.path());
    for (w, (a, b)) in want
        .get_mut("1")
        .unwrap()
        .iter_mut()
        .zip(eight.iter().zip(six))
    {
        *w -= a - b;
    }
    assert_eq!(
        pushed_per_cycle(&[first, second], &[]),
        want,
        "cycle 1 short of 6→8, never over"
    );
}

#[tokio::test(start_paused = true)]
async fn a_capture_that_may_have_arrived_stays_so_whatever_its_later_attempts_say() {
    // The first attempt times out (the server may have stored it), the next ones are refused
    // a connection; the push gives up. The capture is recorded as maybe delivered, and a
    // later push leaves it unless asked.
    let dir = run(1);
    let transport = Scripted::new(
        std::iter::once(timed_out())
            .chain(std::iter::repeat_with(failed).take(1000))
            .collect(),
    );
    let options = PushOptions {
        give_up_after: Some(Duration::from_secs(5)),
        ..fast()
    };
    let stats = push_run(dir.path(), server(), transport.clone(), options)
        .await
        .unwrap();
    assert!(stats.gave_up);
    assert!(transport.sent().len() > 2, "retried");
    assert_eq!((stats.delivered, stats.unanswered), (0, 1));
    let lines = records(dir.path());
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].outcome, Outcome::Unanswered);

    let later = Scripted::new(vec![]);
    let stats = push_run(dir.path(), server(), later.clone(), fast())
        .await
        .unwrap();
    assert_eq!(later.sent().len(), 0, "not sent blindly");
    assert_eq!(stats.tally.already_unanswered, 1);
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_ends_on_a_failed_retry_of_a_capture_that_may_have_arrived_records_it_so() {
    // Sent once the cycle wait is over (2 s), timed out at 3 s, retried by 3.1 s; the drain
    // at 3.5 s runs out with the retry in flight, which then fails outright.
    let dir = run(1);
    let transport = Scripted::slow(vec![timed_out(), failed()], Duration::from_secs(1));
    let handle = start(dir.path(), server(), transport.clone(), fast()).unwrap();
    tokio::time::sleep(CYCLE_WAIT + Duration::from_millis(1500)).await;
    assert_eq!(transport.sent().len(), 2, "the retry is in flight");
    let stats = handle.drain(Duration::from_millis(100)).await.unwrap();
    assert_eq!(transport.sent().len(), 2);
    assert_eq!((stats.delivered, stats.unanswered, stats.unsent), (0, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_request_never_answered_nor_timed_out_is_recorded_as_maybe_delivered_at_the_drains_end() {
    // A transport that neither answers nor times out: the drain waits --push-timeout past its
    // bound, then records the captures in the air as maybe delivered; none is left to be sent
    // again blindly.
    let dir = run(3);
    let transport = Scripted::slow(vec![], Duration::from_secs(3600));
    let options = PushOptions {
        request_timeout: Duration::from_secs(2),
        ..fast()
    };
    let handle = start(dir.path(), server(), transport.clone(), options).unwrap();
    tokio::time::sleep(CYCLE_WAIT + Duration::from_millis(10)).await;
    assert_eq!(transport.sent().len(), 1, "in the air");
    let started = Instant::now();
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!((stats.delivered, stats.unanswered, stats.unsent), (0, 3, 0));
    let lines = records(dir.path());
    assert_eq!(lines.len(), 3);
    assert!(
        lines.iter().all(|r| r.outcome == Outcome::Unanswered),
        "{lines:?}"
    );
    let later = Scripted::new(vec![]);
    push_run(dir.path(), server(), later.clone(), fast())
        .await
        .unwrap();
    assert!(later.sent().is_empty(), "not sent again blindly");
}
