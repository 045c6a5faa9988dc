//! `heapwatch watch --disk-budget`: one budget for every container recorded on a node, a seam
//! opened in the collector for `watch` (unused by `collect` and `run`): deletions from outside.
//! `NodeBudget` follows each node's `manifest.jsonl` incrementally (only the bytes appended since
//! its last look) and, while the captures kept pass the budget, sends the seqs to delete on the
//! node's channel; the collector takes them at the top of its loop (`Retention::take`) and
//! deletes each exactly as its own thinning does (a `delete` record, then the file), so the
//! manifest keeps one writer.
//!
//! Order: captures of nodes with no kill recorded first (processes that never died), oldest
//! first, then those of processes that did. Never deleted: the first capture of each boot cycle
//! (what growth is measured from), the `--keep-before-kill` window before each kill (an `exit`
//! with signal 9; `keep_before_kill`), nor each node's newest window of that length (a process
//! recorded now may be killed next).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tokio::sync::mpsc::UnboundedSender;

use crate::store::{CaptureRecord, MANIFEST_FILE};

#[derive(Debug, Clone, Copy)]
struct Capture {
    t_ms: i64,
    bytes: u64,
    cycle: u32,
}

/// One node's manifest, followed.
struct Followed {
    manifest: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    kept: BTreeMap<u64, Capture>,
    /// The first capture of each boot cycle.
    first_of_cycle: BTreeMap<u32, u64>,
    /// Times of the kills (SIGKILL ends) recorded.
    kills: Vec<i64>,
    newest_t_ms: i64,
    /// Asked to be deleted, not yet seen deleted.
    asked: BTreeSet<u64>,
    send: UnboundedSender<u64>,
}

impl Followed {
    /// Reads what the manifest gained since the last look; a torn last line waits.
    fn follow(&mut self) {
        let Ok(mut file) = File::open(&self.manifest) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut more = Vec::new();
        if file.read_to_end(&mut more).is_err() {
            return;
        }
        self.offset += more.len() as u64;
        self.partial.extend_from_slice(&more);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let whole: Vec<u8> = self.partial.drain(..=end).collect();
        for line in whole.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if let Ok(record) = serde_json::from_slice::<CaptureRecord>(line) {
                self.note(&record);
            }
        }
    }

    fn note(&mut self, r: &CaptureRecord) {
        if let Some(seq) = r.deleted_seq {
            self.kept.remove(&seq);
            self.asked.remove(&seq);
            return;
        }
        if r.kind == crate::store::RecordKind::Exit && r.signal == Some(9) {
            self.kills.push(r.t_ms);
            return;
        }
        if r.kind.is_event() || r.file.is_none() || r.dup_of.is_some() || !r.is_ok() {
            return;
        }
        self.first_of_cycle.entry(r.cycle).or_insert(r.seq);
        self.newest_t_ms = self.newest_t_ms.max(r.t_ms);
        self.kept.insert(
            r.seq,
            Capture {
                t_ms: r.t_ms,
                bytes: r.bytes,
                cycle: r.cycle,
            },
        );
    }

    fn protected(&self, seq: u64, c: &Capture, window_ms: i64) -> bool {
        self.first_of_cycle.get(&c.cycle) == Some(&seq)
            || c.t_ms >= self.newest_t_ms - window_ms
            || self
                .kills
                .iter()
                .any(|&k| c.t_ms <= k && c.t_ms >= k - window_ms)
    }

    fn used(&self) -> u64 {
        self.kept
            .iter()
            .filter(|(s, _)| !self.asked.contains(s))
            .map(|(_, c)| c.bytes)
            .sum()
    }
}

pub struct NodeBudget {
    budget: u64,
    window_ms: i64,
    nodes: BTreeMap<String, Followed>,
}

impl NodeBudget {
    pub fn new(budget: u64, keep_before_kill: std::time::Duration) -> NodeBudget {
        NodeBudget {
            budget,
            window_ms: keep_before_kill.as_millis() as i64,
            nodes: BTreeMap::new(),
        }
    }

    /// A node whose collector takes deletions on `send`; a node added again (a new session)
    /// is followed from the start of its manifest.
    pub fn add(&mut self, name: &str, dir: &Path, send: UnboundedSender<u64>) {
        self.nodes.insert(
            name.to_string(),
            Followed {
                manifest: dir.join(MANIFEST_FILE),
                offset: 0,
                partial: Vec::new(),
                kept: BTreeMap::new(),
                first_of_cycle: BTreeMap::new(),
                kills: Vec::new(),
                newest_t_ms: i64::MIN / 2,
                asked: BTreeSet::new(),
                send,
            },
        );
    }

    /// Bytes of captures kept on the node, those asked to go not counted.
    pub fn used(&self) -> u64 {
        self.nodes.values().map(Followed::used).sum()
    }

    /// Reads what every manifest gained, then asks for deletions until the captures kept fit
    /// the budget (or nothing more may go). Returns how many were asked for.
    pub fn enforce(&mut self) -> usize {
        for f in self.nodes.values_mut() {
            f.follow();
        }
        let mut used = self.used();
        if used <= self.budget {
            return 0;
        }
        // Quiet nodes (no kill recorded) first, each oldest first.
        let mut candidates: Vec<(bool, i64, String, u64, u64)> = Vec::new();
        for (name, f) in &self.nodes {
            if f.send.is_closed() {
                continue;
            }
            for (&seq, c) in &f.kept {
                if f.asked.contains(&seq) || f.protected(seq, c, self.window_ms) {
                    continue;
                }
                candidates.push((!f.kills.is_empty(), c.t_ms, name.clone(), seq, c.bytes));
            }
        }
        candidates.sort();
        let mut asked = 0;
        for (_, _, name, seq, bytes) in candidates {
            if used <= self.budget {
                break;
            }
            let Some(f) = self.nodes.get_mut(&name) else {
                continue;
            };
            if f.send.send(seq).is_ok() {
                f.asked.insert(seq);
                used = used.saturating_sub(bytes);
                asked += 1;
            }
        }
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RecordKind;

    fn heap(seq: u64, cycle: u32, t_ms: i64) -> CaptureRecord {
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, cycle, t_ms);
        r.file = Some(format!("profiles/{seq:06}-heap.pb.gz"));
        r.bytes = 100;
        r
    }

    fn write(dir: &Path, records: &[CaptureRecord]) {
        let mut text = String::new();
        for r in records {
            text.push_str(&serde_json::to_string(r).unwrap());
            text.push('\n');
        }
        std::fs::write(dir.join(MANIFEST_FILE), text).unwrap();
    }

    #[test]
    fn the_quiet_node_is_thinned_oldest_first_and_the_window_before_a_kill_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (quiet, killed) = (dir.path().join("quiet"), dir.path().join("killed"));
        std::fs::create_dir_all(&quiet).unwrap();
        std::fs::create_dir_all(&killed).unwrap();
        // Quiet: one cycle, a capture a second for 20 s.
        write(
            &quiet,
            &(1..=20)
                .map(|s| heap(s, 1, s as i64 * 1000))
                .collect::<Vec<_>>(),
        );
        // Killed at 10.5 s after ten captures; its second life has five more.
        let mut k: Vec<CaptureRecord> = (1..=10).map(|s| heap(s, 1, s as i64 * 1000)).collect();
        let mut exit = CaptureRecord::new(11, RecordKind::Exit, 1, 10_500);
        exit.signal = Some(9);
        k.push(exit);
        k.extend((12..=16).map(|s| heap(s, 2, s as i64 * 1000)));
        write(&killed, &k);

        let mut budget = NodeBudget::new(1_400, std::time::Duration::from_secs(3));
        let (qs, mut qr) = tokio::sync::mpsc::unbounded_channel();
        let (ks, mut kr) = tokio::sync::mpsc::unbounded_channel();
        budget.add("quiet", &quiet, qs);
        budget.add("killed", &killed, ks);
        assert_eq!(budget.used(), 0, "nothing read before enforce");
        let asked = budget.enforce();
        let mut from_quiet = Vec::new();
        while let Ok(s) = qr.try_recv() {
            from_quiet.push(s);
        }
        let mut from_killed = Vec::new();
        while let Ok(s) = kr.try_recv() {
            from_killed.push(s);
        }
        assert_eq!(asked, from_quiet.len() + from_killed.len());
        // 35 captures of 100 bytes against 1400: quiet's 2..=16 go first (its first and its
        // newest 3 s are kept), oldest first; then the killed node's, never 8..=10 (the 3 s
        // before its kill), 1 and 12 (first of each cycle), nor 13..=16 (its newest 3 s).
        assert_eq!(from_quiet, (2..=16).collect::<Vec<u64>>());
        assert_eq!(from_killed, [2, 3, 4, 5, 6, 7]);
        assert_eq!(budget.used(), 1_400);
        // Seen deleted: no longer asked, not asked again.
        let mut more = k.clone();
        let mut del = CaptureRecord::new(17, RecordKind::Delete, 1, 20_000);
        del.deleted_seq = Some(2);
        more.push(del);
        write(&killed, &more);
        assert_eq!(budget.enforce(), 0);
    }
}
