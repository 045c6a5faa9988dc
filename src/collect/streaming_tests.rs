//! A profile told to the collector piece by piece as it arrives: stored whole, and a body that
//! breaks, overflows or is cut off on the way never appears under a final name.

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::decode::{self, DecodeLimits};
use crate::source::{BodyTap, FailureKind, FetchError, Fetching, Reply, Want};
use crate::store::{RunDir, RunWriter};

const LATE: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-late.pb.gz");
const EARLY: &[u8] = include_bytes!("../../testdata/profiles/hiddenleak-heap-early.pb.gz");

/// What one request tells the tap, piece by piece, and what it then returns.
struct Told {
    pieces: Vec<u8>,
    reply: Result<Vec<u8>, FailureKind>,
}

/// A source that tells its bodies in pieces of 97 bytes, like a body arriving over the network.
struct Streaming {
    clock: Arc<FakeClock>,
    script: VecDeque<Told>,
    pieces_told: Arc<Mutex<usize>>,
}

impl Source for Streaming {
    fn target(&self) -> &str {
        "streaming"
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
        tap: Option<&'a mut dyn BodyTap>,
    ) -> Option<Fetching<'a>> {
        let tap = tap.expect("the collector taps a profile's body");
        let told = self.script.pop_front().expect("a step per request");
        self.clock.advance(Duration::from_millis(5));
        let counted = self.pieces_told.clone();
        Some(Box::pin(async move {
            for piece in told.pieces.chunks(97) {
                tap.piece(piece);
                *counted.lock().unwrap() += 1;
            }
            match told.reply {
                Ok(bytes) => Ok(Reply {
                    bytes,
                    pid: None,
                    made: None,
                }),
                Err(kind) => Err(FetchError::new(kind, "scripted failure mid-body")),
            }
        }))
    }
}

fn whole(bytes: &[u8]) -> Told {
    Told {
        pieces: bytes.to_vec(),
        reply: Ok(bytes.to_vec()),
    }
}

/// Runs one request per step, 500 ms apart; returns the attempts, the files in `profiles/`
/// (temporary ones included) and how many pieces were told.
fn run(
    script: Vec<Told>,
    limits: DecodeLimits,
) -> (Vec<CaptureRecord>, Vec<String>, usize, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(1_000_000));
    let steps = script.len() as u64;
    let pieces_told = Arc::new(Mutex::new(0));
    let source = Streaming {
        clock: clock.clone(),
        script: script.into(),
        pieces_told: pieces_told.clone(),
    };
    let config = CollectConfig {
        duration: Some(Duration::from_millis(500 * steps - 250)),
        memstats_interval: Duration::ZERO,
        max_duty: 1.0,
        decode: limits,
        ..CollectConfig::default()
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
    let records: Vec<CaptureRecord> = records.into_iter().filter(|r| !r.kind.is_event()).collect();
    assert_eq!(records.len() as u64, steps, "{records:?}");
    let mut files: Vec<String> = std::fs::read_dir(dir.path().join("profiles"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let told = *pieces_told.lock().unwrap();
    (records, files, told, dir)
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(raw).unwrap();
    enc.finish().unwrap()
}

/// The error the collector gave before bodies streamed: the whole body decoded at once.
fn whole_body_error(body: &[u8], limits: &DecodeLimits) -> String {
    match decode::decompress(body, limits).and_then(|raw| decode::summarize(&raw)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the body is good"),
    }
}

#[test]
fn a_profile_told_in_pieces_is_stored_whole_with_the_hash_of_its_content() {
    let (records, files, told, dir) = run(vec![whole(LATE)], DecodeLimits::default());
    assert!(told > 10, "{told} pieces");
    let record = &records[0];
    assert!(record.is_ok(), "{record:?}");
    let stored = std::fs::read(dir.path().join(record.file.as_deref().unwrap())).unwrap();
    assert_eq!(stored, LATE);
    let raw = decode::decompress(LATE, &DecodeLimits::default()).unwrap();
    let summary = decode::summarize(&raw).unwrap();
    assert_eq!(record.hash.as_deref(), Some(summary.hash.as_str()));
    assert_eq!(
        record.totals,
        summary.totals.into_iter().collect::<BTreeMap<_, _>>()
    );
    assert_eq!(files, ["000001-heap.pb.gz"]);
}

#[test]
fn gzip_broken_or_cut_off_mid_stream_is_an_error_with_its_usual_words_and_no_file() {
    let limits = DecodeLimits::default();
    let mut corrupt = LATE.to_vec();
    let middle = corrupt.len() / 2;
    for b in &mut corrupt[middle..middle + 64] {
        *b = !*b;
    }
    let cut = LATE[..LATE.len() / 2].to_vec();
    let script = vec![whole(&corrupt), whole(&cut), whole(LATE)];
    let (records, files, _, _dir) = run(script, limits);
    for (record, body) in records.iter().zip([&corrupt, &cut]) {
        assert_eq!(record.error_kind.as_deref(), Some("invalid"), "{record:?}");
        assert_eq!(
            record.error.as_deref(),
            Some(whole_body_error(body, &limits).as_str())
        );
        assert!(record.file.is_none() && record.durable_ms.is_none());
    }
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .contains("truncated gzip")
    );
    assert!(records[2].is_ok());
    // Only the good capture, and no temporary file left behind.
    assert_eq!(files, ["000003-heap.pb.gz"]);
}

#[test]
fn a_gzip_bomb_is_refused_as_it_streams_and_never_stored() {
    let bomb = gzip(&vec![0u8; 16 << 20]);
    let limits = DecodeLimits {
        max_decompressed: 1 << 20,
    };
    let (records, files, _, _dir) = run(vec![whole(&bomb), whole(LATE)], limits);
    assert_eq!(records[0].error_kind.as_deref(), Some("invalid"));
    assert_eq!(
        records[0].error.as_deref(),
        Some(whole_body_error(&bomb, &limits).as_str())
    );
    assert!(records[0].file.is_none());
    assert!(records[1].is_ok());
    assert_eq!(files, ["000002-heap.pb.gz"]);
}

#[test]
fn pieces_told_before_the_connection_broke_are_never_published() {
    let broken = Told {
        pieces: LATE[..LATE.len() - 100].to_vec(),
        reply: Err(FailureKind::Reset),
    };
    let (records, files, _, _dir) = run(vec![broken, whole(EARLY)], DecodeLimits::default());
    assert_eq!(records[0].error_kind.as_deref(), Some("reset"));
    assert!(records[0].file.is_none());
    assert!(records[1].is_ok());
    assert_eq!(files, ["000002-heap.pb.gz"]);
}

#[test]
fn pieces_of_another_body_than_the_reply_are_not_what_is_stored() {
    assert_ne!(EARLY.len(), LATE.len());
    let other = Told {
        pieces: EARLY.to_vec(),
        reply: Ok(LATE.to_vec()),
    };
    let (records, files, _, dir) = run(vec![other], DecodeLimits::default());
    assert!(records[0].is_ok(), "{:?}", records[0]);
    let stored = std::fs::read(dir.path().join(records[0].file.as_deref().unwrap())).unwrap();
    assert_eq!(stored, LATE);
    assert_eq!(files, ["000001-heap.pb.gz"]);
}
