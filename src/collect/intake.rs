//! A profile's body taken in as it arrives: each piece goes to the capture's temporary file
//! and to a gunzip running beside the request, both on tokio's blocking pool, so that when the
//! last byte comes only the tail is left to gunzip and sum while the file is fsynced. The
//! file gets its final name only once the collector's verdict says the capture is whole and new.
//!
//! # Why, and how
//!
//! Go's net/http/pprof gzips a profile while it writes it, so a ~1 MB body arrives over as long
//! as the target takes to render it, and the collector does not wait for the last byte to start
//! on it. `Source::fetch_async` takes a `BodyTap` (`src/source/mod.rs`) that the source tells
//! each piece of a good body as it arrives: reqwest's chunks of a 200 within
//! `--max-body` (HTTP, Envoy's `/heap_dump`), each read of the agent's reply. A source that
//! cannot tell (proc, tests' scripted sources) leaves the tap untold, and the body goes in whole
//! once it is there, by the same path.
//!
//! For each heap or goroutine attempt the collector makes an `Intake`; it passes the pieces on
//! in batches of 32 KiB (a body comes in chunks of a few KiB, and waking two threads per chunk
//! cost more than the work), and at the first batch it starts two jobs on the blocking pool,
//! fed by channels:
//! - the writer appends each piece to the capture's temporary file (`store::PartialFile`, made at
//!   the first piece), and at the end fsyncs it, then waits for the verdict and renames it and
//!   fsyncs the folder, or removes it;
//! - the gunzip runs flate2's `bufread::GzDecoder` over the pieces as one blocking stream, under
//!   `--max-decompressed`: a body that passes the ceiling is refused there and then, and the rest
//!   of it is never gunzipped. Each top-level protobuf field is summed as soon as it is whole
//!   (`decode::Summarizer`, of which `decode::summarize` is the one-piece case; a test holds the
//!   two equal on every profile in testdata, in pieces of 1, 7 and 4096 bytes); at the end it
//!   checks there is nothing after the gzip member. The protobuf bytes go on to the indexer.
//!
//! A source that makes the profile itself (`proc:`) hands the collector the protobuf it gzipped
//! beside the gzipped bytes (`Reply.raw`): the intake then only writes the file, and the
//! collector sums those bytes under the same ceiling instead of gunzipping what was just gzipped.
//! Sources that relay what the target served (HTTP, the agent, Envoy) give none.
//!
//! When the last byte comes, only the last batch is left to gunzip and sum, beside the file's
//! fsync. The bytes stored are the bytes received, and a capture appears under its final name
//! only after the verdict, so the guarantees are those of a body taken in whole: a body cut off,
//! broken or refused is removed (the collector waits for that before its manifest line), and a
//! failed or stopped request leaves nothing. Errors read as they would for a whole body: a body
//! that is not gzip, or whose gzip breaks, is checked again whole with `decode::decompress` for
//! its usual message; a protobuf error is reported once the gzip is known whole, with the words
//! `summarize` gives (the fields are taken in the same order); the ceiling's error is given by
//! the stream itself (`DecodeError::TooLarge`, the same words). The jobs start at the first piece
//! so that a request that brings nothing holds no thread (and tokio's paused clock in tests can
//! still advance while a fetch waits).

use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Clock;
use super::tasks::joined;
use crate::decode::{self, DecodeError, Summary};
use crate::source::BodyTap;
use crate::store::{PartialFile, Publisher, StoreError};

/// How much is gunzipped at a time, as the decoder does.
const WINDOW: usize = 64 << 10;

/// Pieces are passed on to the jobs in batches of about this much: a body comes in chunks of
/// a few KiB, and waking two threads for each costs more than the work. The last batch is
/// what is left to do when the last byte comes.
const BATCH: usize = 32 << 10;

/// What the gunzip beside the request made of the body.
#[derive(Debug)]
pub(super) enum Streamed {
    /// Gunzipped whole and summed: the protobuf bytes and their summary.
    Profile(Vec<u8>, Summary),
    /// Refused: its decompressed size passed the ceiling (found as it streamed, without
    /// gunzipping the rest), or its summary failed.
    Invalid(String),
    /// Not gzip, or its gzip is broken: the whole body is checked again the usual way, so the
    /// error reads as it always did.
    Recheck,
}

/// One piece of the body, or the word that it is whole. A channel closed without `End` means
/// the request was dropped: nothing is published.
enum Piece {
    Bytes(Arc<[u8]>),
    End,
}

/// A profile's body on its way in. Tell it the pieces ([`BodyTap`]), then [`Intake::end`];
/// dropped before that, the temporary file is removed and nothing is published. Its jobs
/// start with the first piece: a request that brings nothing holds no thread.
pub(super) struct Intake {
    plan: Option<Plan>,
    jobs: Option<Jobs>,
    /// Told, not passed on yet.
    batch: Vec<u8>,
    told: u64,
    ended: bool,
}

/// What the jobs need, until they start.
struct Plan {
    temp: PathBuf,
    publisher: Publisher,
    clock: Arc<dyn Clock>,
    max_decompressed: u64,
    /// False when the source hands over what the body gunzips to ([`Intake::without_gunzip`]).
    gunzip: bool,
}

struct Jobs {
    to_file: Sender<Piece>,
    /// `None` when nothing is gunzipped.
    to_gunzip: Option<Sender<Piece>>,
    writing: JoinHandle<Result<Option<Duration>, StoreError>>,
    gunzipping: Option<JoinHandle<Streamed>>,
    verdict: Option<oneshot::Sender<Option<String>>>,
}

impl Intake {
    /// A body for `temp`, which is published under the name the verdict gives as soon as its
    /// fsync is done (durable then, on `clock`); its gunzip refuses more than
    /// `max_decompressed` bytes of output.
    pub(super) fn new(
        temp: PathBuf,
        publisher: Publisher,
        clock: Arc<dyn Clock>,
        max_decompressed: u64,
    ) -> Intake {
        Intake {
            plan: Some(Plan {
                temp,
                publisher,
                clock,
                max_decompressed,
                gunzip: true,
            }),
            jobs: None,
            batch: Vec::new(),
            told: 0,
            ended: false,
        }
    }

    /// Only the file is written: the source gave the protobuf the body gunzips to, so
    /// gunzipping the body again would only repeat its work ([`Intake::gunzipped`] then answers
    /// [`Streamed::Recheck`]). Too late once pieces were told (the gunzip has started).
    pub(super) fn without_gunzip(&mut self) {
        if let Some(plan) = &mut self.plan {
            plan.gunzip = false;
        }
    }

    /// How many bytes the source told so far.
    pub(super) fn told(&self) -> u64 {
        self.told
    }

    /// The body is whole: what the source did not tell of it (all of it, from a source that
    /// tells nothing) is taken now. `body` must start with what was told.
    pub(super) fn end(&mut self, body: &Arc<[u8]>) {
        debug_assert!(self.told == 0 || self.told == body.len() as u64);
        if self.told == 0 && !body.is_empty() {
            self.pass_on(body.clone());
        } else {
            self.pass_on_batch();
        }
        let jobs = self.jobs();
        let _ = jobs.to_file.send(Piece::End);
        if let Some(to_gunzip) = &jobs.to_gunzip {
            let _ = to_gunzip.send(Piece::End);
        }
        self.told = body.len() as u64;
        self.ended = true;
    }

    /// What the gunzip made of the body, once [`Intake::end`] was called.
    pub(super) async fn gunzipped(&mut self) -> Streamed {
        match self.jobs.as_mut().and_then(|j| j.gunzipping.take()) {
            Some(job) if self.ended => joined(job.await),
            _ => Streamed::Recheck,
        }
    }

    /// The request failed or was dropped: nothing is published, and the temporary file, if
    /// one was made, is gone when this returns.
    pub(super) async fn abandon(self) {
        if let Some(jobs) = self.jobs {
            let Jobs {
                to_file,
                to_gunzip,
                verdict,
                writing,
                ..
            } = jobs;
            drop((to_file, to_gunzip, verdict));
            let _ = joined(writing.await);
        }
    }

    /// Gives the verdict (`Some(name)`: publish the file as `profiles/NAME`; `None`: remove
    /// it) and waits for the writer: when the file was durable under its name, if it was
    /// published.
    pub(super) async fn publish(
        self,
        name: Option<String>,
    ) -> Result<Option<Duration>, StoreError> {
        let Some(mut jobs) = self.jobs else {
            return Ok(None);
        };
        if let Some(verdict) = jobs.verdict.take() {
            let _ = verdict.send(name);
        }
        joined(jobs.writing.await)
    }

    fn pass_on_batch(&mut self) {
        if !self.batch.is_empty() {
            let batch = Arc::from(std::mem::take(&mut self.batch));
            self.pass_on(batch);
        }
    }

    fn pass_on(&mut self, piece: Arc<[u8]>) {
        let jobs = self.jobs();
        let Some(to_gunzip) = &jobs.to_gunzip else {
            let _ = jobs.to_file.send(Piece::Bytes(piece));
            return;
        };
        let _ = jobs.to_file.send(Piece::Bytes(piece.clone()));
        // Gone once the gunzip refused the body: the file is still written, to be removed.
        let _ = to_gunzip.send(Piece::Bytes(piece));
    }

    /// The two jobs on the blocking pool, started on first use: the writer of the temporary
    /// file, and the gunzip.
    fn jobs(&mut self) -> &mut Jobs {
        if let Some(plan) = self.plan.take() {
            self.jobs = Some(Jobs::start(plan));
        }
        self.jobs.as_mut().expect("started with the plan")
    }
}

impl Jobs {
    fn start(plan: Plan) -> Jobs {
        let Plan {
            temp,
            publisher,
            clock,
            max_decompressed,
            gunzip,
        } = plan;
        let (to_file, file_pieces) = mpsc::channel();
        let (verdict, told) = oneshot::channel::<Option<String>>();
        let writing = tokio::task::spawn_blocking(move || {
            let mut file = PartialFile::new(temp);
            if !write_pieces(&file_pieces, &mut file) {
                file.discard();
                return Ok(None);
            }
            let temp = file.path().to_path_buf();
            let written = file.sync();
            // No verdict (the attempt was dropped): nothing is published.
            match told.blocking_recv() {
                Ok(Some(name)) => {
                    written?;
                    publisher.publish(&temp, &name)?;
                    Ok(Some(clock.now()))
                }
                _ => {
                    if written.is_ok() {
                        publisher.discard(&temp);
                    }
                    Ok(None)
                }
            }
        });
        let (to_gunzip, gunzipping) = if gunzip {
            let (to_gunzip, gunzip_pieces) = mpsc::channel();
            let job = tokio::task::spawn_blocking(move || {
                self::gunzip(Pieces::new(gunzip_pieces), max_decompressed)
            });
            (Some(to_gunzip), Some(job))
        } else {
            (None, None)
        };
        Jobs {
            to_file,
            to_gunzip,
            writing,
            gunzipping,
            verdict: Some(verdict),
        }
    }
}

impl BodyTap for Intake {
    fn piece(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || self.ended {
            return;
        }
        if self.batch.capacity() == 0 {
            self.batch.reserve(BATCH + bytes.len());
        }
        self.batch.extend_from_slice(bytes);
        self.told += bytes.len() as u64;
        if self.batch.len() >= BATCH {
            self.pass_on_batch();
        }
    }
}

/// Writes the pieces as they come; true when the body ended whole, false when the request
/// was dropped.
fn write_pieces(pieces: &Receiver<Piece>, file: &mut PartialFile) -> bool {
    loop {
        match pieces.recv() {
            Ok(Piece::Bytes(bytes)) => file.write(&bytes),
            Ok(Piece::End) => return true,
            Err(_) => return false,
        }
    }
}

/// Gunzips the pieces as they come, under the ceiling, with the checks of
/// [`decode::decompress`]: the CRC and length at the end, and no data after the gzip member.
/// The protobuf is summed as it is gunzipped, as [`decode::summarize`] would sum it.
fn gunzip(pieces: Pieces, max: u64) -> Streamed {
    // The bufread decoder takes from the pieces only what the gzip member spans, so what is
    // left after its end is exactly the trailing data.
    let mut decoder = flate2::bufread::GzDecoder::new(pieces);
    let mut raw: Vec<u8> = Vec::new();
    let mut len = 0usize;
    let mut summary = decode::Summarizer::new();
    // A protobuf error is reported only once the gzip is known whole, as for a whole body.
    let mut summed = Ok(());
    loop {
        if raw.len() - len < WINDOW / 4 {
            // Memory follows the bytes that arrive, never a length the data claims.
            let grown = (raw.len() * 2).max(WINDOW);
            raw.resize(grown, 0);
        }
        // One byte past the ceiling is enough to know it is crossed.
        let allowed = max.saturating_add(1) - len as u64;
        let room = (raw.len() - len).min(usize::try_from(allowed).unwrap_or(usize::MAX));
        match decoder.read(&mut raw[len..len + room]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len as u64 > max {
                    return Streamed::Invalid(DecodeError::TooLarge { max }.to_string());
                }
                if summed.is_ok() {
                    summed = summary.advance(&raw[..len]);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Streamed::Recheck,
        }
    }
    let mut rest = decoder.into_inner();
    if !matches!(rest.fill_buf(), Ok(after) if after.is_empty()) || rest.dropped {
        return Streamed::Recheck;
    }
    raw.truncate(len);
    match summed.and_then(|()| summary.finish(&raw)) {
        Ok(summary) => Streamed::Profile(raw, summary),
        Err(e) => Streamed::Invalid(e.to_string()),
    }
}

/// The pieces of a body as one byte stream, waiting for each piece as it comes.
struct Pieces {
    from: Receiver<Piece>,
    current: Arc<[u8]>,
    at: usize,
    ended: bool,
    /// The request was dropped before its end: what was read is not a body.
    dropped: bool,
}

impl Pieces {
    fn new(from: Receiver<Piece>) -> Pieces {
        Pieces {
            from,
            current: Arc::from(&[][..]),
            at: 0,
            ended: false,
            dropped: false,
        }
    }
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Pieces {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.current.len() && !self.ended {
            match self.from.recv() {
                Ok(Piece::Bytes(bytes)) => {
                    self.current = bytes;
                    self.at = 0;
                }
                Ok(Piece::End) => self.ended = true,
                Err(_) => {
                    self.ended = true;
                    self.dropped = true;
                }
            }
        }
        Ok(&self.current[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.current.len());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn a_gzip_bomb_is_refused_before_the_rest_of_its_body_arrives() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![0u8; 32 << 20]).unwrap();
        let bomb = enc.finish().unwrap();
        let (to_gunzip, pieces) = mpsc::channel();
        let (done, verdict) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(gunzip(Pieces::new(pieces), 1 << 20));
        });
        // The first tenth of the body holds far more than 1 MiB of zeros; the rest never comes
        // and the body never ends, yet the answer is there.
        let (head, _) = bomb.split_at(bomb.len() / 10);
        for piece in head.chunks(4096) {
            let _ = to_gunzip.send(Piece::Bytes(piece.into()));
        }
        let refused = verdict
            .recv_timeout(Duration::from_secs(60))
            .expect("the gunzip waited for the rest of the body");
        assert!(
            matches!(&refused, Streamed::Invalid(m) if m.contains("larger than 1048576 bytes")),
            "{refused:?}"
        );
        drop(to_gunzip);
    }

    #[test]
    fn pieces_gunzip_to_what_the_whole_body_does() {
        let body = include_bytes!("../../testdata/profiles/hiddenleak-heap-late.pb.gz");
        let (to_gunzip, pieces) = mpsc::channel();
        for piece in body.chunks(1000) {
            to_gunzip.send(Piece::Bytes(piece.into())).unwrap();
        }
        to_gunzip.send(Piece::End).unwrap();
        let limits = decode::DecodeLimits::default();
        let raw = decode::decompress(body, &limits).unwrap();
        match gunzip(Pieces::new(pieces), limits.max_decompressed) {
            Streamed::Profile(streamed, summary) => {
                assert_eq!(streamed, *raw);
                assert_eq!(summary, decode::summarize(&raw).unwrap());
            }
            other => panic!("{other:?}"),
        }
        // Trailing bytes after the gzip member, or a body dropped before its end: checked
        // again whole.
        let (to_gunzip, pieces) = mpsc::channel();
        to_gunzip.send(Piece::Bytes(body[..].into())).unwrap();
        to_gunzip.send(Piece::Bytes(Arc::from(&b"x"[..]))).unwrap();
        to_gunzip.send(Piece::End).unwrap();
        assert!(matches!(
            gunzip(Pieces::new(pieces), 1 << 30),
            Streamed::Recheck
        ));
        let (to_gunzip, pieces) = mpsc::channel();
        to_gunzip.send(Piece::Bytes(body[..].into())).unwrap();
        drop(to_gunzip);
        assert!(matches!(
            gunzip(Pieces::new(pieces), 1 << 30),
            Streamed::Recheck
        ));
    }
}
