//! What is still to send to one server. Not a folder of copies: the stored captures of the
//! manifest less those with an outcome in `pushes.jsonl`, rebuilt on every start, so it never
//! doubles the disk a run takes (`--max-disk` bounds the profiles alone) and costs the
//! collector nothing on the capture path. The one file it writes is the journal. It also keeps
//! each boot cycle's heap captures in order, sent or not: the allocation delta of a capture is
//! taken against the one before it, whichever push sent that one.
//!
//! # The spool is derived, not a folder of copies
//!
//! What is still to send is the manifest's stored captures less those with an outcome for that
//! server and tenant in `RUN/pushes.jsonl` since its last resend mark, rebuilt on every start. A folder of copies would
//! double the disk a run takes (and `--max-disk` bounds only the profiles); a folder of marker
//! files would put a create and an fsync per capture beside the collector's own, or duplicate the
//! manifest. The file the push writes is the journal, a request's outcomes in one `write`
//! on tokio's blocking pool (file I/O never stalls another task), with a torn last line cut on
//! open, like the manifest. Resuming after a kill is therefore the same code path as a first
//! start. `--resend` appends a mark that forgets the earlier outcomes for that server, so a
//! resend cut short resumes rather than looking done, and nobody deletes the journal by hand.
//!
//! The journal is fsynced at most a second after a line (at the next outcome a second on, when
//! the push goes idle, and at its end), not at every line. A kill of heapwatch loses no line
//! (the `write` is done before the next push starts); only a crash of the machine can lose the
//! last second, and that only re-sends those captures. An fsync per line made `heapwatch push` of
//! a run on disk 4.6× slower when it was measured (48dda87 against its successor), and beside a live collector it would queue
//! behind — and in front of — the fsyncs that make captures durable.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::PushError;
use super::journal::{Journal, JournalLine, Outcome, PushRecord, ResendMark};
use super::labels::ProfileName;
use crate::store::{CaptureRecord, RecordKind};

/// The server a spool sends to, as `pushes.jsonl` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The base URL without credentials.
    pub to: String,
    pub tenant: Option<String>,
}

/// Which captures with an earlier outcome are sent again.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retry {
    /// `--retry-refused`: every capture refused before.
    pub refused: bool,
    /// `--restamp`: captures refused when they went with their own time (the request differs).
    pub restamping: bool,
    /// `--retry-unanswered`: captures sent without an answer before a push ended.
    pub unanswered: bool,
    /// `--resend`: everything, as if the server had never had the run (a resend mark goes in
    /// the journal, so a resend cut short resumes as one).
    pub everything: bool,
}

/// A capture waiting to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub seq: u64,
    pub file: String,
    pub name: ProfileName,
    pub cycle: u32,
    pub t_ms: i64,
    /// A duplicate's own time (unix ms, when its answer came): its file is the earlier
    /// capture's, stamped with that one's time.
    pub dup_at_ms: Option<i64>,
    /// When the spool was offered it: a live capture may wait a moment for its cycle record.
    pub offered: tokio::time::Instant,
}

/// An earlier heap capture of a boot cycle, as the base of a later one's allocation delta.
#[derive(Debug, Clone, PartialEq)]
pub struct Earlier {
    pub seq: u64,
    pub file: String,
    /// Settled as delivered or maybe delivered: the server has (or may have) it.
    pub sent: bool,
    /// Retention deleted its file.
    pub deleted: bool,
}

/// How the captures offered so far were counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub already_delivered: u64,
    pub already_refused: u64,
    /// Sent before without an answer: may be in the store.
    pub already_unanswered: u64,
    /// `dup_of` records not sent (`--skip-duplicates`).
    pub duplicates: u64,
    /// Stored files that are not pprof (goroutine stack-dump text from the agent).
    pub not_pprof: u64,
    /// Deleted by retention (`--max-disk`) before they were sent.
    pub deleted: u64,
}

pub struct Spool {
    root: PathBuf,
    server: Server,
    /// Not yet taken by the pusher, by seq.
    queue: BTreeMap<u64, Pending>,
    /// Taken (being prepared or in flight), not yet settled.
    taken: BTreeSet<u64>,
    /// Every seq offered, so a record offered twice (read at start, then enqueued) goes once.
    seen: HashSet<u64>,
    /// The outcome recorded per seq, and whether it went restamped.
    settled: HashMap<u64, (Outcome, bool)>,
    retry: Retry,
    skip_duplicates: bool,
    journal: Arc<Mutex<Journal>>,
    highest_cycle: u32,
    /// Per boot cycle, its heap captures (seq, file) in seq order, duplicates and deleted
    /// ones included: where a capture's allocation delta starts.
    history: HashMap<u32, Vec<(u64, String)>>,
    /// Files deleted by retention.
    deleted_files: HashSet<String>,
    /// When the journal was last fsynced, and whether lines were written since.
    synced: tokio::time::Instant,
    dirty: bool,
    pub tally: Tally,
}

/// The longest a recorded outcome waits for its fsync.
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Spool {
    /// Opens the journal of `root` and takes the outcomes recorded for `server` since its last
    /// resend mark; with `retry.everything`, writes a new mark first.
    pub fn open(
        root: &Path,
        server: Server,
        retry: Retry,
        skip_duplicates: bool,
    ) -> Result<Spool, PushError> {
        let (mut journal, read) = Journal::open(root)?;
        let mut settled = HashMap::new();
        let ours = |to: &str, tenant: &Option<String>| to == server.to && *tenant == server.tenant;
        for line in read.lines {
            match line {
                JournalLine::Outcome(r) if ours(&r.to, &r.tenant) => {
                    // A delivery is final whatever came after; otherwise the last word counts.
                    let entry = settled.entry(r.seq).or_insert((r.outcome, r.restamped));
                    if entry.0 != Outcome::Delivered {
                        *entry = (r.outcome, r.restamped);
                    }
                }
                JournalLine::Resend(m) if ours(&m.to, &m.tenant) => settled.clear(),
                _ => {}
            }
        }
        if retry.everything {
            let mark = ResendMark {
                resend: true,
                to: server.to.clone(),
                tenant: server.tenant.clone(),
                t_ms: crate::time::now_ms(),
            };
            journal.append(&[JournalLine::Resend(mark)])?;
            journal.sync()?;
            settled.clear();
        }
        Ok(Spool {
            root: root.to_path_buf(),
            server,
            queue: BTreeMap::new(),
            taken: BTreeSet::new(),
            seen: HashSet::new(),
            settled,
            retry,
            skip_duplicates,
            journal: Arc::new(Mutex::new(journal)),
            highest_cycle: 0,
            history: HashMap::new(),
            deleted_files: HashSet::new(),
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

    /// Takes one manifest record: a stored pprof capture not yet settled is queued (and a heap
    /// capture joins its cycle's history); a deletion takes its capture (and the duplicates
    /// that name its file) out; anything else is counted or ignored.
    pub fn offer(&mut self, record: &CaptureRecord) {
        if !self.seen.insert(record.seq) {
            return;
        }
        self.highest_cycle = self.highest_cycle.max(record.cycle);
        if record.kind == RecordKind::Delete {
            self.deleted(record);
            return;
        }
        let Some(name) = ProfileName::of(record) else {
            let stored_text = record.file.is_some() && record.is_ok() && record.dup_of.is_none();
            if stored_text && matches!(record.kind, RecordKind::Heap | RecordKind::Goroutine) {
                self.tally.not_pprof += 1;
            }
            return;
        };
        let file = record.file.clone().expect("ProfileName::of needs a file");
        if self.deleted_files.contains(&file) {
            self.tally.deleted += 1;
            return;
        }
        if name == ProfileName::Memory {
            let history = self.history.entry(record.cycle).or_default();
            // Recovered files are recorded late, with a seq past later captures: keep order.
            let at = history.partition_point(|(seq, _)| *seq < record.seq);
            history.insert(at, (record.seq, file.clone()));
        }
        if record.dup_of.is_some() && self.skip_duplicates {
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
            Some((Outcome::Unanswered, _)) if !self.retry.unanswered => {
                self.tally.already_unanswered += 1;
                return;
            }
            _ => {}
        }
        let dup_at_ms = record
            .dup_of
            .map(|_| record.t_ms + record.latency_ms.max(0.0).round() as i64);
        self.queue.insert(
            record.seq,
            Pending {
                seq: record.seq,
                file,
                name,
                cycle: record.cycle,
                t_ms: record.t_ms,
                dup_at_ms,
                offered: tokio::time::Instant::now(),
            },
        );
    }

    fn deleted(&mut self, record: &CaptureRecord) {
        let file = record.file.clone();
        if let Some(seq) = record.deleted_seq {
            // A capture already taken is left to the pusher: it may have read it already.
            if self.queue.remove(&seq).is_some() {
                self.tally.deleted += 1;
            }
        }
        let Some(file) = file else { return };
        let before = self.queue.len();
        self.queue.retain(|_, p| p.file != file);
        self.tally.deleted += (before - self.queue.len()) as u64;
        // The history keeps it: a capture sent before its file was deleted is still the base
        // of the next one's delta (the pusher may hold its figures).
        self.deleted_files.insert(file);
    }

    /// The oldest capture not yet taken.
    pub fn front(&self) -> Option<&Pending> {
        self.queue.values().next()
    }

    /// Takes the capture out of the queue for sending; it counts as unsent until settled.
    pub fn take(&mut self, seq: u64) -> Option<Pending> {
        let pending = self.queue.remove(&seq)?;
        self.taken.insert(seq);
        Some(pending)
    }

    /// The heap captures of `cycle` before `seq` that the server has or will have, newest
    /// first: the candidates for the base of its allocation delta. The deltas of what the
    /// server has add up to the last capture's counters only when each is taken against the
    /// one the server had before it, so a capture never sent (refused and not retried,
    /// deleted before it went, a duplicate skipped, unreadable) is passed over, and one sent
    /// whose file is gone since stays (its figures may still be held; if not, the delta is
    /// lost, not taken against an older capture to count its change twice).
    pub fn earlier(&self, cycle: u32, seq: u64) -> Vec<Earlier> {
        let Some(history) = self.history.get(&cycle) else {
            return Vec::new();
        };
        let end = history.partition_point(|(s, _)| *s < seq);
        history[..end]
            .iter()
            .rev()
            .filter_map(|(seq, file)| {
                let sent = matches!(
                    self.settled.get(seq),
                    Some((Outcome::Delivered | Outcome::Unanswered, _))
                );
                (sent || self.contains(*seq)).then(|| Earlier {
                    seq: *seq,
                    file: file.clone(),
                    sent,
                    deleted: self.deleted_files.contains(file),
                })
            })
            .collect()
    }

    /// Whether a later boot cycle than `cycle` has shown up.
    pub fn saw_later_cycle(&self, cycle: u32) -> bool {
        self.highest_cycle > cycle
    }

    /// Whether `seq` is still to be sent (queued or taken).
    pub fn contains(&self, seq: u64) -> bool {
        self.queue.contains_key(&seq) || self.taken.contains(&seq)
    }

    /// Captures not yet settled: queued and taken.
    pub fn len(&self) -> usize {
        self.queue.len() + self.taken.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Captures still queued (not taken).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Records outcomes in one write (on the blocking pool: file I/O never stalls the
    /// runtime's other tasks) and takes the captures out. The journal is fsynced when the last
    /// sync is [`SYNC_EVERY`] old; see `journal.rs` for why not at every line.
    pub async fn settle(&mut self, records: Vec<PushRecord>) -> Result<(), PushError> {
        if records.is_empty() {
            return Ok(());
        }
        let journal = Arc::clone(&self.journal);
        let entries: Vec<(u64, (Outcome, bool))> = records
            .iter()
            .map(|r| (r.seq, (r.outcome, r.restamped)))
            .collect();
        let sync = self.synced.elapsed() >= SYNC_EVERY;
        let lines: Vec<JournalLine> = records.into_iter().map(JournalLine::Outcome).collect();
        tokio::task::spawn_blocking(move || {
            let mut journal = journal
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            journal.append(&lines)?;
            if sync { journal.sync() } else { Ok(()) }
        })
        .await
        .map_err(|e| PushError::Config(format!("the journal writer stopped: {e}")))??;
        if sync {
            self.synced = tokio::time::Instant::now();
        }
        self.dirty = !sync;
        for (seq, entry) in entries {
            self.settled.insert(seq, entry);
            self.queue.remove(&seq);
            self.taken.remove(&seq);
        }
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

    /// A taken capture whose file is gone: true (and counted, and forgotten) when retention
    /// deleted it, false when nothing says why.
    pub fn gone(&mut self, seq: u64, file: &str) -> bool {
        if !self.deleted_files.contains(file) {
            return false;
        }
        self.forget(seq);
        self.tally.deleted += 1;
        true
    }

    /// Takes a capture out without an outcome (its file cannot be read, or was deleted).
    pub fn forget(&mut self, seq: u64) {
        self.queue.remove(&seq);
        self.taken.remove(&seq);
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

    fn open(retry: Retry, dir: &Path) -> Spool {
        Spool::open(dir, server(), retry, false).unwrap()
    }

    async fn settle(spool: &mut Spool, seq: u64, o: Outcome) {
        spool
            .settle(vec![outcome(seq, o, "http://127.0.0.1:4040")])
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn settled_captures_are_skipped_per_server() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut spool = open(Retry::default(), dir.path());
            spool.offer(&heap(1));
            spool.offer(&heap(2));
            settle(&mut spool, 1, Outcome::Delivered).await;
            settle(&mut spool, 2, Outcome::Refused).await;
            assert!(spool.is_empty());
        }
        let mut again = open(Retry::default(), dir.path());
        for seq in 1..=3 {
            again.offer(&heap(seq));
        }
        again.offer(&heap(3));
        assert_eq!(again.len(), 1, "only the new capture, once");
        assert_eq!(again.tally.already_delivered, 1);
        assert_eq!(again.tally.already_refused, 1);

        let restamping = Retry {
            restamping: true,
            ..Retry::default()
        };
        let mut restamp = open(restamping, dir.path());
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
        let mut elsewhere = Spool::open(dir.path(), other, Retry::default(), false).unwrap();
        elsewhere.offer(&heap(1));
        assert_eq!(elsewhere.len(), 1, "another server has had nothing");
    }

    #[tokio::test]
    async fn unanswered_captures_wait_to_be_asked_for_and_a_resend_forgets_everything() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut spool = open(Retry::default(), dir.path());
            for seq in 1..=3 {
                spool.offer(&heap(seq));
            }
            settle(&mut spool, 1, Outcome::Delivered).await;
            settle(&mut spool, 2, Outcome::Unanswered).await;
        }
        let mut plain = open(Retry::default(), dir.path());
        for seq in 1..=3 {
            plain.offer(&heap(seq));
        }
        assert_eq!(plain.front().map(|p| p.seq), Some(3));
        assert_eq!(plain.tally.already_unanswered, 1);
        let asked = Retry {
            unanswered: true,
            ..Retry::default()
        };
        let mut asked = open(asked, dir.path());
        for seq in 1..=3 {
            asked.offer(&heap(seq));
        }
        assert_eq!(asked.len(), 2, "the unanswered one and the new one");

        // A resend, cut after one delivery: the next plain push resumes it.
        {
            let resend = Retry {
                everything: true,
                ..Retry::default()
            };
            let mut resend = open(resend, dir.path());
            for seq in 1..=3 {
                resend.offer(&heap(seq));
            }
            assert_eq!(resend.len(), 3);
            settle(&mut resend, 1, Outcome::Delivered).await;
        }
        let mut resumed = open(Retry::default(), dir.path());
        for seq in 1..=3 {
            resumed.offer(&heap(seq));
        }
        assert_eq!(resumed.len(), 2, "what the resend has not sent yet");
        assert_eq!(resumed.tally.already_delivered, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_are_fsynced_at_most_a_second_late() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = open(Retry::default(), dir.path());
        assert_eq!(spool.sync_due(), None);
        for seq in 1..=3 {
            spool.offer(&heap(seq));
        }
        let opened = tokio::time::Instant::now();
        settle(&mut spool, 1, Outcome::Delivered).await;
        assert_eq!(
            spool.sync_due(),
            Some(opened + SYNC_EVERY),
            "written, not yet synced"
        );
        tokio::time::advance(SYNC_EVERY).await;
        settle(&mut spool, 2, Outcome::Delivered).await;
        assert_eq!(spool.sync_due(), None, "a second on: synced with the line");
        settle(&mut spool, 3, Outcome::Delivered).await;
        assert!(spool.sync_due().is_some());
        spool.sync().await.unwrap();
        assert_eq!(spool.sync_due(), None);
        assert_eq!(
            crate::push::journal::read(dir.path())
                .unwrap()
                .records()
                .count(),
            3
        );
    }

    #[tokio::test]
    async fn duplicates_are_sent_at_their_own_time_unless_skipped_text_and_deleted_never() {
        let dir = tempfile::tempdir().unwrap();
        let records = {
            let mut dup = heap(2);
            dup.dup_of = Some(1);
            dup.file = heap(1).file;
            dup.latency_ms = 3.4;
            let mut text = CaptureRecord::new(3, RecordKind::Goroutine, 1, 3);
            text.file = Some("profiles/000003-goroutine.txt".into());
            let mut delete = CaptureRecord::new(5, RecordKind::Delete, 1, 5);
            delete.deleted_seq = Some(4);
            delete.file = heap(4).file;
            vec![heap(1), dup, text, heap(4), delete, heap(6)]
        };
        let mut spool = open(Retry::default(), dir.path());
        for r in &records {
            spool.offer(r);
        }
        assert_eq!(spool.len(), 3);
        let seqs: Vec<u64> = std::iter::from_fn(|| {
            let seq = spool.front()?.seq;
            spool.take(seq)
        })
        .map(|p| {
            if p.seq == 2 {
                assert_eq!(p.dup_at_ms, Some(2 + 3), "its own time");
            }
            p.seq
        })
        .collect();
        assert_eq!(seqs, [1, 2, 6]);
        assert_eq!(
            spool.tally,
            Tally {
                not_pprof: 1,
                deleted: 1,
                ..Tally::default()
            }
        );
        // The base of 6's delta: 2 (the same data as 1), then 1; 4 was deleted before it went.
        let earlier: Vec<u64> = spool.earlier(1, 6).into_iter().map(|e| e.seq).collect();
        assert_eq!(earlier, [2, 1]);

        let mut thin = Spool::open(dir.path(), server(), Retry::default(), true).unwrap();
        for r in &records {
            thin.offer(r);
        }
        assert_eq!((thin.len(), thin.tally.duplicates), (2, 1));
    }
}
