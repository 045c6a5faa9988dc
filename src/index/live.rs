//! The collector's indexer: each stored capture's entry written on a thread of its own, after
//! the profile is durable, so it never delays a capture. An entry is made from the figures the
//! source gave with the capture (proc: [`Content::Figures`], no decode) or by decoding what the
//! collector already decompressed. Decoding is bounded: at most [`QUEUED_DECODES`] wait, and
//! a paced indexer spends at most [`INDEX_SHARE`] of a core on them ([`CaptureIndexer::
//! start_paced`]): it earns that share of the collector's clock, up to [`INDEX_ALLOWANCE`] in
//! hand (which it starts with), pays each decode's time out of it, and leaves out the captures
//! that come while it is in debt. Figures cost no decode, so they are never left out during the
//! run. At the collector's exit the indexer has [`INDEX_GRACE`] to write what waits;
//! [`CaptureIndexer::finish`] says how many captures got no entry, which the first command that
//! reads the index builds (`rebuild`): the index answers the same either way.
//!
//! # The collector builds entries off the capture path
//!
//! After a capture is durable and its manifest line written, its entry goes to this indexer
//! thread, which appends what waits with one fsync; the capture loop never waits for it. Where
//! the entry comes from:
//!
//! - **From the source, for `proc:`.** The proc encoder knows which samples it wrote again; it
//!   names each bucket's site once, when the bucket's stack is first written, and moves each
//!   site's sums by the samples whose figures moved (`source/proc/sites.rs`). The names follow
//!   the index's rules, handed down by the collector (`index::build::site_naming`, given through
//!   `Source::name_sites`): a source names no site by rules of its own, and the layers stay as
//!   they are. The figures come back in `Reply::made` and are an entry only when they were named
//!   for the boot cycle's own code (its `cycle` record's main module); otherwise the profile is
//!   decoded as for any source. No protobuf is decoded again or queued for this, so the index
//!   keeps up at any rate: a proc collect at `--interval 1ms` leaves an entry for every stored
//!   capture, byte for byte the file a rebuild from the profiles writes
//!   (tests/cli/collect_index.rs).
//! - **By decoding, for the others.** The collector already gunzips each capture for its totals
//!   and dedup hash (a one-pass summary, not the model); the indexer decodes those bytes into
//!   the model. The bounds above in figures: four decodes wait at most (each holds a whole
//!   protobuf), a tenth of a core, 500 ms in hand.
//!
//! At its exit the collector gives the indexer 2 s, and its summary line says how many stored
//! captures got no entry ("N not in the site index yet").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::build::{self, CaptureFigures};
use super::{Built, EntryKey, IndexWriter};
use crate::analyse::reduce::{OwnCode, PROFILING_SITE};
use crate::decode;
use crate::store::{CaptureRecord, RecordKind};

/// The time on the collector's clock.
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// One indexed heap capture's in-use bytes per site (the profile writer's own site left out).
#[derive(Debug, Clone, PartialEq)]
pub struct HeapSites {
    pub cycle: u32,
    pub t_ms: i64,
    pub sites: Vec<(String, i64)>,
}

/// A stored capture's content for the indexer.
pub enum Content {
    /// Decompressed pprof bytes, decoded here.
    Profile(Vec<u8>),
    /// A text goroutine dump.
    Dump(crate::decode::stackdump::StackDump),
    /// The figures the source made with the capture, and the length the stored (gzipped) file
    /// decompresses to: nothing to decode.
    Figures(CaptureFigures, u64),
}

impl Content {
    fn decodes(&self) -> bool {
        !matches!(self, Content::Figures(..))
    }
}

struct Job {
    record: CaptureRecord,
    path: PathBuf,
    content: Content,
    own: OwnCode,
    /// When it was queued, on the collector's clock (paced indexers only).
    at: Option<Duration>,
}

/// The share of one core the collector's indexer may spend decoding (see [`CaptureIndexer`]).
pub const INDEX_SHARE: f64 = 0.1;

/// How much decoding time the paced indexer may hold in hand: what it spends at once on a
/// run's first captures, or after a quiet spell.
pub const INDEX_ALLOWANCE: Duration = Duration::from_millis(500);

/// Decodes that may wait for the indexer: a decode holds a whole protobuf.
pub const QUEUED_DECODES: usize = 4;

/// How long the collector waits at its exit for its indexer to write what it was given.
pub const INDEX_GRACE: Duration = Duration::from_secs(2);

/// Entries written with one fsync, at most.
const BATCH: usize = 64;

/// What the indexer's thread and the collector share.
#[derive(Default)]
struct Shared {
    /// The newest heap capture's in-use bytes per site, for the live status line.
    latest_heap: Mutex<Option<HeapSites>>,
    /// Decodes queued and not yet taken.
    decodes: AtomicUsize,
    /// Captures given that got no entry (left out by the pacing, a full queue, a file gone,
    /// the exit's grace).
    left_out: AtomicU64,
    /// Past this instant the thread writes nothing more (set at the exit).
    stop_by: Mutex<Option<Instant>>,
}

/// See the module's head.
pub struct CaptureIndexer {
    jobs: Option<Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
    /// The collector's clock, when the indexer is paced.
    now: Option<Clock>,
}

impl CaptureIndexer {
    /// Indexes every capture it is given, unless too many decodes wait.
    pub fn start(root: &Path) -> CaptureIndexer {
        CaptureIndexer::started(root, &[], None)
    }

    /// Decodes captures within [`INDEX_SHARE`] of a core, `now` telling the time; the index
    /// names sites by the prefixes `own` the run recorded ([`IndexWriter::open`]).
    pub fn start_paced(root: &Path, own: &[String], now: Clock) -> CaptureIndexer {
        CaptureIndexer::started(root, own, Some(now))
    }

    fn started(root: &Path, own: &[String], now: Option<Clock>) -> CaptureIndexer {
        let (jobs, inbox) = std::sync::mpsc::channel::<Job>();
        let root = root.to_path_buf();
        let own = own.to_vec();
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("site-index".into())
            .spawn(move || index_until_closed(&root, &own, &inbox, &theirs))
            .ok();
        CaptureIndexer {
            jobs: thread.is_some().then_some(jobs),
            thread,
            shared,
            now,
        }
    }

    /// The newest indexed heap capture's sites, once: `None` until another is indexed.
    pub fn take_latest_heap(&self) -> Option<HeapSites> {
        self.shared.latest_heap.lock().ok()?.take()
    }

    /// Queues a durable capture (its manifest line written) for indexing, its sites named by
    /// `own`, its cycle's own code as [`super::OwnCodes`] reads it from the manifest; never
    /// blocks.
    pub fn add(&self, record: &CaptureRecord, path: PathBuf, content: Content, own: &OwnCode) {
        let decodes = content.decodes();
        let queued = self.jobs.as_ref().is_some_and(|jobs| {
            if decodes && self.shared.decodes.fetch_add(1, Ordering::SeqCst) >= QUEUED_DECODES {
                self.shared.decodes.fetch_sub(1, Ordering::SeqCst);
                return false;
            }
            let job = Job {
                record: record.clone(),
                path,
                content,
                own: own.clone(),
                at: self.now.as_ref().map(|now| now()),
            };
            jobs.send(job).is_ok()
        });
        if !queued {
            self.shared.left_out.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a stored capture whose entry the collector cannot give (figures named for
    /// another program than its boot cycle's): the first analysis builds it.
    pub fn leave_out(&self) {
        self.shared.left_out.fetch_add(1, Ordering::Relaxed);
    }

    /// Lets the thread write what waits for up to `within`, then stops it: the captures given
    /// that got no entry (the first analysis builds them).
    pub fn finish(&mut self, within: Duration) -> u64 {
        if let Ok(mut stop) = self.shared.stop_by.lock() {
            *stop = Some(Instant::now() + within);
        }
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.left_out.load(Ordering::Relaxed)
    }
}

impl Drop for CaptureIndexer {
    fn drop(&mut self) {
        self.finish(INDEX_GRACE);
    }
}

/// The thread: takes what waits, up to [`BATCH`] at a time, and appends their entries with
/// one fsync.
fn index_until_closed(root: &Path, own: &[String], inbox: &Receiver<Job>, shared: &Shared) {
    let mut writer = IndexWriter::open(root, own).ok();
    let mut pacing = Pacing::default();
    let left_out = |n: u64| shared.left_out.fetch_add(n, Ordering::Relaxed);
    while let Ok(first) = inbox.recv() {
        let mut jobs = vec![first];
        jobs.extend(inbox.try_iter().take(BATCH - 1));
        let mut built = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.content.decodes() {
                shared.decodes.fetch_sub(1, Ordering::SeqCst);
            }
            let past = shared
                .stop_by
                .lock()
                .ok()
                .and_then(|s| *s)
                .is_some_and(|by| Instant::now() >= by);
            if past || writer.is_none() {
                left_out(1);
                continue;
            }
            match entry(job, &mut pacing, shared) {
                Some(b) => built.push(b),
                None => {
                    left_out(1);
                }
            }
        }
        // The index is a cache: a failure here costs a decode later, nothing more.
        let written = writer.as_mut().is_some_and(|w| w.append(&built).is_ok());
        if !written {
            left_out(built.len() as u64);
        }
    }
}

/// The paced indexer's decoding time in hand (seconds; below zero, in debt), as of `earned_at`.
struct Pacing {
    credit: f64,
    earned_at: Option<Duration>,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            credit: INDEX_ALLOWANCE.as_secs_f64(),
            earned_at: None,
        }
    }
}

/// One capture's entry, or `None` when it is left out.
fn entry(job: Job, pacing: &mut Pacing, shared: &Shared) -> Option<Built> {
    let began = Instant::now();
    let paced = job.content.decodes().then_some(job.at).flatten();
    if let Some(at) = paced {
        let since = pacing
            .earned_at
            .map_or(0.0, |e| at.saturating_sub(e).as_secs_f64());
        pacing.credit = (pacing.credit + since * INDEX_SHARE).min(INDEX_ALLOWANCE.as_secs_f64());
        pacing.earned_at = Some(at);
        if pacing.credit <= 0.0 {
            return None;
        }
    }
    let key = EntryKey::of(&job.record, &job.path)?;
    let (figures, gunzipped) = match job.content {
        Content::Profile(raw) => {
            let p = decode::decode_protobuf(&raw).ok()?;
            let gunzipped = if stored_gzipped(&job.path) {
                raw.len() as u64
            } else {
                0
            };
            (
                build::from_profile(&p, job.record.kind, &job.own),
                gunzipped,
            )
        }
        Content::Dump(dump) => (build::from_dump(&dump, &job.own), 0),
        Content::Figures(figures, gunzipped) => (figures, gunzipped),
    };
    if job.record.kind == RecordKind::Heap {
        let sites = figures
            .site_figures(RecordKind::Heap)
            .into_iter()
            .filter(|f| f.name != PROFILING_SITE)
            .map(|f| (f.name, f.value))
            .collect();
        if let Ok(mut slot) = shared.latest_heap.lock() {
            *slot = Some(HeapSites {
                cycle: job.record.cycle,
                t_ms: job.record.t_ms,
                sites,
            });
        }
    }
    if paced.is_some() {
        pacing.credit -= began.elapsed().as_secs_f64();
    }
    Some(Built {
        seq: job.record.seq,
        kind: job.record.kind,
        key,
        gunzipped,
        figures,
    })
}

/// Whether the stored file is gzipped (what the ceiling on the decompressed size applies to).
fn stored_gzipped(path: &Path) -> bool {
    use std::io::Read as _;
    let mut magic = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| decode::is_gzip(&magic))
}
