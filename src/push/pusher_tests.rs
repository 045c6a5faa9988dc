//! The push loop against a scripted transport, on tokio's paused clock: retries, refusals,
//! rejections, giving up and the live drain, without a network and without sleeping.

use std::collections::VecDeque;

use prost::Message;

use super::*;
use crate::push::journal;
use crate::push::wire::PushRequest;
use crate::store::{RecordKind, RunWriter};

/// Answers from a script (then `Delivered`), keeping every body and when it came.
#[derive(Clone, Default)]
struct Scripted(Arc<Mutex<Script>>);

/// What is left to answer, and what was sent when.
type Script = (VecDeque<Answer>, Vec<(Instant, PushRequest)>);

impl Scripted {
    fn new(script: Vec<Answer>) -> Scripted {
        Scripted(Arc::new(Mutex::new((script.into(), Vec::new()))))
    }

    fn sent(&self) -> Vec<(Instant, PushRequest)> {
        self.0.lock().unwrap().1.clone()
    }
}

impl Transport for Scripted {
    fn send(&self, body: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send {
        let mut state = self.0.lock().unwrap();
        state.1.push((
            Instant::now(),
            PushRequest::decode(body.as_slice()).unwrap(),
        ));
        let answer = state
            .0
            .pop_front()
            .unwrap_or(Answer::Delivered { status: 200 });
        async move { answer }
    }
}

fn failed() -> Answer {
    Answer::Failed {
        why: "HTTP 503".into(),
        retry_after: None,
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

/// A run of `n` heap captures, each a copy of a real profile.
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
    assert_eq!(sent.len(), 5);
    let gaps: Vec<Duration> = sent.windows(2).map(|w| w[1].0 - w[0].0).collect();
    // Attempt n waits between d/2 and d, d = 100 ms · 2ⁿ⁻¹.
    for (n, gap) in gaps.iter().take(3).enumerate() {
        let d = Duration::from_millis(100 << n);
        assert!(
            *gap >= d / 2 && *gap <= d,
            "wait {n}: {gap:?} for d = {d:?}"
        );
    }
    // The same id on every attempt; one series with one sample each time.
    let ids: Vec<&str> = sent[..4]
        .iter()
        .map(|(_, r)| r.series[0].samples[0].id.as_str())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert!(sent.iter().all(|(_, r)| r.series.len() == 1));
    let records = journal::read(dir.path()).unwrap().records;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].attempts, 4);
    assert_eq!(records[1].attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_recorded_once_and_the_push_goes_on() {
    let dir = run(3);
    let transport = Scripted::new(vec![Answer::Refused(refusal(400))]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!((stats.delivered, stats.refused, stats.retries), (2, 1, 0));
    assert_eq!(stats.refusals, vec![(refusal(400), 1)]);
    assert_eq!(
        transport.sent().len(),
        3,
        "the refused capture is not sent again"
    );
    let records = journal::read(dir.path()).unwrap().records;
    assert_eq!(records[0].outcome, Outcome::Refused);
    assert_eq!(records[0].status, 400);
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
        retry_refused: true,
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
    let transport = Scripted::new(vec![
        Answer::Delivered { status: 200 },
        Answer::Rejected(rejected.clone()),
    ]);
    let stats = push_run(dir.path(), server(), transport.clone(), fast())
        .await
        .unwrap();
    assert_eq!(stats.rejected, Some(rejected));
    assert_eq!((stats.delivered, stats.unsent), (1, 2));
    assert_eq!(transport.sent().len(), 2);
    assert_eq!(journal::read(dir.path()).unwrap().records.len(), 1);
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
    assert!(journal::read(dir.path()).unwrap().records.is_empty());
}

#[tokio::test(start_paused = true)]
async fn restamped_captures_carry_the_push_time_and_their_own_as_a_label() {
    let dir = run(1);
    let transport = Scripted::new(vec![]);
    let options = PushOptions {
        restamp: true,
        ..fast()
    };
    let before = unix_ns();
    push_run(dir.path(), server(), transport.clone(), options)
        .await
        .unwrap();
    let sent = transport.sent();
    let series = &sent[0].1.series[0];
    let limits = DecodeLimits::default();
    let sent_time = restamp::time_nanos(&series.samples[0].raw_profile, &limits).unwrap();
    assert!(sent_time >= before, "stamped with the push time");
    let stored = std::fs::read(dir.path().join("profiles/000001-heap.pb.gz")).unwrap();
    let own = restamp::time_nanos(&stored, &limits).unwrap();
    let label = series
        .labels
        .iter()
        .find(|l| l.name == "heapwatch_captured_at")
        .unwrap();
    assert_eq!(label.value, crate::push::labels::rfc3339_ms(own));
    let records = journal::read(dir.path()).unwrap().records;
    assert!(records[0].restamped);
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

    // A server that keeps failing: the drain returns at its bound, the capture unsent.
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
    assert_eq!((stats.delivered, stats.unsent), (0, 2));
    assert!(stats.retries > 2);
}

/// A server that never answers.
struct Hanging;

impl Transport for Hanging {
    fn send(&self, _: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send {
        std::future::pending()
    }
}

#[tokio::test(start_paused = true)]
async fn captures_stored_while_a_push_hangs_are_counted_unsent_and_left_to_the_spool() {
    let dir = run(1);
    let options = PushOptions {
        give_up_after: None,
        ..fast()
    };
    let handle = start(dir.path(), server(), Hanging, options).unwrap();
    // The manifest writer of a live collector, feeding the push after each fsync.
    let (writer, _) = RunWriter::open(dir.path()).unwrap();
    let enqueuer = handle.enqueuer();
    let mut writer = writer.on_append(Box::new(move |r: &CaptureRecord| enqueuer.enqueue(r)));
    let bytes = std::fs::read(dir.path().join("profiles/000001-heap.pb.gz")).unwrap();
    // Past the wait for a cycle record: seq 1 is in flight, and hangs.
    tokio::time::sleep(CYCLE_WAIT + Duration::from_millis(100)).await;
    for seq in 2..=3u64 {
        let mut record = CaptureRecord::new(seq, RecordKind::Heap, 1, seq as i64 * 250);
        let name = format!("{seq:06}-heap.pb.gz");
        record.file = Some(writer.store_profile(&name, &bytes).unwrap());
        writer.append(&record).unwrap();
    }
    // Seq 1 hangs in flight; 2 and 3 were never taken from the queue.
    let stats = handle.drain(Duration::from_secs(1)).await.unwrap();
    assert_eq!((stats.delivered, stats.unsent), (0, 3));
    // After the drain, the writer's sends go nowhere and cost nothing.
    let mut record = CaptureRecord::new(4, RecordKind::Heap, 1, 1000);
    record.file = Some(writer.store_profile("000004-heap.pb.gz", &bytes).unwrap());
    writer.append(&record).unwrap();
    assert!(
        lines_of(dir.path()).is_empty(),
        "nothing was recorded as sent"
    );
}

fn lines_of(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join(journal::PUSHES_FILE))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
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
