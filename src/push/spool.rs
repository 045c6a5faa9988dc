//! What is still to send to one server. Not a folder of copies: the stored captures of the
//! manifest less those with a final outcome in `pushes.jsonl`, rebuilt on every start, so it
//! never doubles the disk a run takes (`--max-disk` bounds the profiles alone) and costs the
//! collector nothing on the capture path. The one file it writes is the journal.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::PushError;
use super::journal::{Journal, Outcome, PushRecord};
use super::labels::ProfileName;
use crate::store::{CaptureRecord, RecordKind};

/// The server a spool sends to, as `pushes.jsonl` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The base URL without credentials.
    pub to: String,
    pub tenant: Option<String>,
}

/// Which earlier refusals are tried again.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retry {
    /// `--retry-refused`: every capture refused before.
    pub refused: bool,
    /// `--restamp`: captures refused when they went with their own time (the request differs).
    pub restamping: bool,
}

/// A capture waiting to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub seq: u64,
    pub file: String,
    pub name: ProfileName,
    pub cycle: u32,
    pub t_ms: i64,
    /// When the spool was offered it: a live capture may wait a moment for its cycle record.
    pub offered: tokio::time::Instant,
}

/// How the captures offered so far were counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub already_delivered: u64,
    pub already_refused: u64,
    /// `dup_of` records: the same data as an earlier capture, which goes once.
    pub duplicates: u64,
    /// Stored files that are not pprof (goroutine stack-dump text from the agent).
    pub not_pprof: u64,
    /// Deleted by retention (`--max-disk`) before they were sent.
    pub deleted: u64,
}

pub struct Spool {
    root: PathBuf,
    server: Server,
    queue: BTreeMap<u64, Pending>,
    /// Every seq offered, so a record offered twice (read at start, then enqueued) goes once.
    seen: HashSet<u64>,
    /// The final outcome already recorded per seq, and whether it went restamped.
    settled: HashMap<u64, (Outcome, bool)>,
    retry: Retry,
    journal: Arc<Mutex<Journal>>,
    highest_cycle: u32,
    /// When the journal was last fsynced, and whether lines were written since.
    synced: tokio::time::Instant,
    dirty: bool,
    pub tally: Tally,
}

/// The longest a recorded outcome waits for its fsync.
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Spool {
    /// Opens the journal of `root` and takes the outcomes recorded for `server`.
    pub fn open(root: &Path, server: Server, retry: Retry) -> Result<Spool, PushError> {
        let (journal, read) = Journal::open(root)?;
        let mut settled = HashMap::new();
        for r in read.records {
            if r.to == server.to && r.tenant == server.tenant {
                // A delivery is final whatever came after; otherwise the last word counts.
                let entry = settled.entry(r.seq).or_insert((r.outcome, r.restamped));
                if entry.0 != Outcome::Delivered {
                    *entry = (r.outcome, r.restamped);
                }
            }
        }
        Ok(Spool {
            root: root.to_path_buf(),
            server,
            queue: BTreeMap::new(),
            seen: HashSet::new(),
            settled,
            retry,
            journal: Arc::new(Mutex::new(journal)),
            highest_cycle: 0,
            synced: tokio::time::Instant::now(),
            dirty: false,
            tally: Tally::default(),
        })
    }

    pub fn server(&self) -> &Server {
        &self.server
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes one manifest record: a stored pprof capture not yet settled is queued; a
    /// deletion takes its capture out of the queue; anything else is counted or ignored.
    pub fn offer(&mut self, record: &CaptureRecord) {
        if !self.seen.insert(record.seq) {
            return;
        }
        self.highest_cycle = self.highest_cycle.max(record.cycle);
        if record.kind == RecordKind::Delete {
            if let Some(seq) = record.deleted_seq {
                if self.queue.remove(&seq).is_some() {
                    self.tally.deleted += 1;
                }
            }
            return;
        }
        let Some(name) = ProfileName::of(record) else {
            let stored_text = record.file.is_some() && record.is_ok() && record.dup_of.is_none();
            if stored_text && matches!(record.kind, RecordKind::Heap | RecordKind::Goroutine) {
                self.tally.not_pprof += 1;
            }
            return;
        };
        if record.dup_of.is_some() {
            self.tally.duplicates += 1;
            return;
        }
        match self.settled.get(&record.seq) {
            Some((Outcome::Delivered, _)) => {
                self.tally.already_delivered += 1;
                return;
            }
            Some((Outcome::Refused, restamped))
                if !(self.retry.refused || (self.retry.restamping && !restamped)) =>
            {
                self.tally.already_refused += 1;
                return;
            }
            _ => {}
        }
        let file = record.file.clone().expect("ProfileName::of needs a file");
        self.queue.insert(
            record.seq,
            Pending {
                seq: record.seq,
                file,
                name,
                cycle: record.cycle,
                t_ms: record.t_ms,
                offered: tokio::time::Instant::now(),
            },
        );
    }

    /// The oldest capture still to send. Captures go in seq order, one at a time: Pyroscope
    /// derives allocation deltas between consecutive profiles of a series.
    pub fn front(&self) -> Option<&Pending> {
        self.queue.values().next()
    }

    /// Whether a later boot cycle than `cycle` has shown up.
    pub fn saw_later_cycle(&self, cycle: u32) -> bool {
        self.highest_cycle > cycle
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.queue.contains_key(&seq)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Records a final outcome (on the blocking pool: file I/O never stalls the runtime's
    /// other tasks) and takes the capture out of the queue. The journal is fsynced when the
    /// last sync is [`SYNC_EVERY`] old; see `journal.rs` for why not at every line.
    pub async fn settle(&mut self, record: PushRecord) -> Result<(), PushError> {
        let journal = Arc::clone(&self.journal);
        let seq = record.seq;
        let entry = (record.outcome, record.restamped);
        let sync = self.synced.elapsed() >= SYNC_EVERY;
        tokio::task::spawn_blocking(move || {
            let mut journal = journal
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            journal.append(&record)?;
            if sync { journal.sync() } else { Ok(()) }
        })
        .await
        .map_err(|e| PushError::Config(format!("the journal writer stopped: {e}")))??;
        if sync {
            self.synced = tokio::time::Instant::now();
        }
        self.dirty = !sync;
        self.settled.insert(seq, entry);
        self.queue.remove(&seq);
        Ok(())
    }

    /// When the lines written since the last fsync are due for theirs, if any are.
    pub fn sync_due(&self) -> Option<tokio::time::Instant> {
        self.dirty.then_some(self.synced + SYNC_EVERY)
    }

    /// Makes every outcome recorded so far durable (the end of a push, a drain).
    pub async fn sync(&mut self) -> Result<(), PushError> {
        if !self.dirty {
            return Ok(());
        }
        let journal = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || {
            journal
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .sync()
        })
        .await
        .map_err(|e| PushError::Config(format!("the journal writer stopped: {e}")))??;
        self.synced = tokio::time::Instant::now();
        self.dirty = false;
        Ok(())
    }

    /// Takes a capture out of the queue without an outcome (its file cannot be read).
    pub fn forget(&mut self, seq: u64) {
        self.queue.remove(&seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(seq: u64) -> CaptureRecord {
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, 1, seq as i64);
        r.file = Some(format!("profiles/{seq:06}-heap.pb.gz"));
        r
    }

    fn server() -> Server {
        Server {
            to: "http://127.0.0.1:4040".into(),
            tenant: None,
        }
    }

    fn outcome(seq: u64, outcome: Outcome, to: &str) -> PushRecord {
        PushRecord {
            seq,
            file: format!("profiles/{seq:06}-heap.pb.gz"),
            to: to.into(),
            tenant: None,
            id: String::new(),
            outcome,
            status: 200,
            code: None,
            message: None,
            attempts: 1,
            t_ms: 0,
            restamped: false,
        }
    }

    #[tokio::test]
    async fn settled_captures_are_skipped_per_server() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut spool = Spool::open(dir.path(), server(), Retry::default()).unwrap();
            spool.offer(&heap(1));
            spool.offer(&heap(2));
            spool
                .settle(outcome(1, Outcome::Delivered, "http://127.0.0.1:4040"))
                .await
                .unwrap();
            spool
                .settle(outcome(2, Outcome::Refused, "http://127.0.0.1:4040"))
                .await
                .unwrap();
            assert!(spool.is_empty());
        }
        let mut again = Spool::open(dir.path(), server(), Retry::default()).unwrap();
        for seq in 1..=3 {
            again.offer(&heap(seq));
        }
        again.offer(&heap(3));
        assert_eq!(again.len(), 1, "only the new capture, once");
        assert_eq!(again.tally.already_delivered, 1);
        assert_eq!(again.tally.already_refused, 1);

        let restamping = Retry {
            refused: false,
            restamping: true,
        };
        let mut restamp = Spool::open(dir.path(), server(), restamping).unwrap();
        restamp.offer(&heap(1));
        restamp.offer(&heap(2));
        assert_eq!(
            restamp.front().map(|p| p.seq),
            Some(2),
            "refused unrestamped: retried"
        );

        let other = Server {
            to: "https://profiles.example.net".into(),
            tenant: None,
        };
        let mut elsewhere = Spool::open(dir.path(), other, Retry::default()).unwrap();
        elsewhere.offer(&heap(1));
        assert_eq!(elsewhere.len(), 1, "another server has had nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_are_fsynced_at_most_a_second_late() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), server(), Retry::default()).unwrap();
        assert_eq!(spool.sync_due(), None);
        for seq in 1..=3 {
            spool.offer(&heap(seq));
        }
        let opened = tokio::time::Instant::now();
        spool
            .settle(outcome(1, Outcome::Delivered, "http://127.0.0.1:4040"))
            .await
            .unwrap();
        assert_eq!(
            spool.sync_due(),
            Some(opened + SYNC_EVERY),
            "written, not yet synced"
        );
        tokio::time::advance(SYNC_EVERY).await;
        spool
            .settle(outcome(2, Outcome::Delivered, "http://127.0.0.1:4040"))
            .await
            .unwrap();
        assert_eq!(spool.sync_due(), None, "a second on: synced with the line");
        spool
            .settle(outcome(3, Outcome::Delivered, "http://127.0.0.1:4040"))
            .await
            .unwrap();
        assert!(spool.sync_due().is_some());
        spool.sync().await.unwrap();
        assert_eq!(spool.sync_due(), None);
        assert_eq!(
            crate::push::journal::read(dir.path())
                .unwrap()
                .records
                .len(),
            3
        );
    }

    #[tokio::test]
    async fn duplicates_text_dumps_and_deleted_captures_are_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), server(), Retry::default()).unwrap();
        spool.offer(&heap(1));
        let mut dup = heap(2);
        dup.dup_of = Some(1);
        dup.file = heap(1).file;
        spool.offer(&dup);
        let mut text = CaptureRecord::new(3, RecordKind::Goroutine, 1, 3);
        text.file = Some("profiles/000003-goroutine.txt".into());
        spool.offer(&text);
        spool.offer(&heap(4));
        let mut delete = CaptureRecord::new(5, RecordKind::Delete, 1, 5);
        delete.deleted_seq = Some(4);
        spool.offer(&delete);
        assert_eq!(spool.len(), 1);
        assert_eq!(
            spool.tally,
            Tally {
                duplicates: 1,
                not_pprof: 1,
                deleted: 1,
                ..Tally::default()
            }
        );
    }
}
