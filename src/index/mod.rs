//! The site index of a run (`sites.idx`): each stored capture's figures per site, every sample
//! type, names interned once for the whole run, so an analysis reads a few kilobytes a capture
//! instead of decoding megabytes. Derived: the profiles and the manifest stay the truth, and an
//! entry is used only while it matches both (see [`EntryKey`]).
//!
//! What an analysis needs from a capture is small: per site, a value of each sample type.
//! Decoding 1.8 MB of protobuf to get 700 bytes of site figures was most of the cost of `growth`,
//! and a CI job running `growth`, `check` and `report` paid it three times. `sites.idx` keeps
//! those figures, built once per capture.
//!
//! # One file per run, appended a frame per capture
//!
//! - **Interned across the run.** A capture's frame defines only the names no earlier frame did;
//!   every site row refers to them by id. Across 1,000 captures of the same service almost every
//!   name is defined once, in the first frame. One file per capture could not share them without
//!   a second file, and 1,000 small files cost 1,000 opens and fsyncs.
//! - **Sites only**, a few hundred bytes a capture (`format.rs`'s doc).
//! - **Durable like the manifest.** A writer takes an exclusive `flock`, reads what other writers
//!   appended since it last looked (the collector and an analysis of the live run may both
//!   write), cuts a torn or damaged tail (a frame whose length runs past the end or whose checksum
//!   fails, and everything after it), appends its frames with one `write`, fsyncs, unlocks.
//!   Readers take no lock: a frame being written reads as torn, and is ignored.
//! - **Keyed, so stale entries are never used.** An entry records the manifest's content `hash`
//!   and the file's size, mtime (ns) and inode when it was built; it stands for the capture only
//!   while all of them match. A profile replaced on disk (restored from a backup, copied over)
//!   changes the mtime or inode and is decoded again. An entry also records the profile's
//!   gunzipped length, so an analysis with a lower `--max-decompressed` refuses the capture as
//!   decoding it would. The header holds the format's version (`HWSITES3`) and a hash of the
//!   format's and the reduction's sources (format.rs, build.rs, analyse/reduce.rs): a change to
//!   how sites are named rebuilds every index instead of being misread.
//! - **Derived.** Any analysis builds the entries it is missing (a run recorded before the index,
//!   a capture the collector's indexer skipped) and appends them; a run it cannot write to is
//!   analysed all the same. `heapwatch index RUN` does it ahead of time and repairs the file.
//!   Deleting `sites.idx` loses nothing.
//!
//! The collector builds entries off the capture path: `live.rs`'s doc.

pub mod build;
mod format;
mod live;

pub use live::{
    CaptureIndexer, Clock, Content, HeapSites, INDEX_ALLOWANCE, INDEX_GRACE, INDEX_SHARE,
};

/// A quick hash for the index's own keys (names): SipHash was a tenth of building an entry. The keys come from profiles, not from an adversary choosing collisions
/// against a server.
#[derive(Default, Clone, Copy)]
pub struct QuickHasher(u64);

impl std::hash::Hasher for QuickHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(last) ^ bytes.len() as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl QuickHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

pub type QuickMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<QuickHasher>>;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::analyse::reduce::{OwnCode, SiteFigures};
use crate::decode::{self, DecodeError, DecodeLimits};
use crate::store::{CaptureRecord, RecordKind, RunDir};
pub use build::CaptureFigures;
use format::{Entry, FRAME_HEADER, HEADER_LEN, Head};

pub const INDEX_FILE: &str = "sites.idx";

#[derive(Debug, Error)]
pub enum IndexError {
    #[error(
        "{path}: {source}; the index is only a cache of the profiles: remove it and run `heapwatch index` again"
    )]
    Io { path: PathBuf, source: io::Error },
}

/// What an entry must match to stand for a capture: the manifest's content hash, and the
/// file's size, modification time and inode as the entry was built (a profile replaced on
/// disk changes at least one of them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntryKey {
    pub hash: String,
    pub len: u64,
    pub mtime_ns: u64,
    pub ino: u64,
}

impl EntryKey {
    /// The key of `record`'s file as it is on disk now; None when it is not a file.
    pub fn of(record: &CaptureRecord, path: &Path) -> Option<EntryKey> {
        let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
        Some(EntryKey {
            hash: record.hash.clone().unwrap_or_default(),
            len: meta.len(),
            mtime_ns: (meta.mtime() as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(meta.mtime_nsec() as u64),
            ino: meta.ino(),
        })
    }
}

/// A capture's figures built by decoding its file, to be appended to the index.
#[derive(Debug, Clone)]
pub struct Built {
    pub seq: u64,
    pub kind: RecordKind,
    pub key: EntryKey,
    /// The gzipped file's decompressed length (0 when it is not gzipped): an analysis run with
    /// a lower `--max-decompressed` refuses the capture as decoding it would.
    pub gunzipped: u64,
    pub figures: CaptureFigures,
}

/// Where one entry's head sits in the file, and what it was built for.
#[derive(Debug, Clone)]
struct Located {
    offset: u64,
    head_len: u32,
    key: EntryKey,
    kind: RecordKind,
    gunzipped: u64,
}

/// The index of a run opened for reading: the names and where each capture's entry is. Holds
/// one short record per capture and the names (which grow with the sites); site rows are read
/// from the file when asked for.
#[derive(Default)]
pub struct RunIndex {
    file: Option<File>,
    names: Vec<String>,
    entries: HashMap<u64, Located>,
    /// Bytes past the last good frame: a torn or damaged tail the next writer cuts off.
    pub damaged_tail: u64,
}

/// The header of an index whose entries name sites by the own-code prefixes `own` (those the
/// run recorded, `collect --own`): the format's when none, else its rules mixed with the
/// prefixes. An index named otherwise (before run.json named them, or by a heapwatch that did
/// not read them) is then outdated, and rebuilt rather than misread.
fn header_for(own: &[String]) -> [u8; HEADER_LEN as usize] {
    let mut header = format::header();
    let own = crate::model::run_options::canonical_prefixes(own);
    if !own.is_empty() {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&header[8..]);
        for prefix in &own {
            h.update(prefix.as_bytes());
            h.update(b"\n");
        }
        header[8..].copy_from_slice(&h.digest().to_le_bytes());
    }
    header
}

impl RunIndex {
    /// Reads the index of the run at `root`, its sites named by the prefixes `own` the run
    /// recorded. A missing, unreadable or outdated index reads as empty: every capture is then
    /// decoded, as before there was an index.
    pub fn open(root: &Path, own: &[String]) -> RunIndex {
        let Ok(file) = File::open(root.join(INDEX_FILE)) else {
            return RunIndex::default();
        };
        let mut index = RunIndex::default();
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return index;
        };
        // Small reads: heads are short.
        let mut reader = io::BufReader::with_capacity(8 << 10, &file);
        let mut header = [0u8; HEADER_LEN as usize];
        if reader.read_exact(&mut header).is_err() || header != header_for(own) {
            return index;
        }
        let mut offset = HEADER_LEN;
        let mut head = Vec::new();
        while let Some((frame, body_len)) = format::read_frame_header(&mut reader, offset, len) {
            head.resize(frame.head_len as usize, 0);
            if reader.read_exact(&mut head).is_err() || !frame.head_ok(&head) {
                break;
            }
            let Ok(parsed) = Head::parse(&head) else {
                break;
            };
            index.names.extend(parsed.new_names);
            index.entries.insert(
                parsed.seq,
                Located {
                    offset: offset + FRAME_HEADER,
                    head_len: frame.head_len,
                    key: parsed.key,
                    kind: parsed.kind,
                    gunzipped: parsed.gunzipped,
                },
            );
            offset += body_len;
        }
        index.damaged_tail = len.saturating_sub(offset);
        index.file = Some(file);
        index
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The site figures of `record` from its entry, when there is one built for the file as
    /// it is now (`key`); the error decoding would give when the profile gunzips to more than
    /// `limits` allow.
    pub fn sites(
        &self,
        record: &CaptureRecord,
        key: &EntryKey,
        limits: &DecodeLimits,
    ) -> Option<Result<Vec<SiteFigures>, DecodeError>> {
        let located = self.entries.get(&record.seq)?;
        if located.key != *key || located.kind != record.kind {
            return None;
        }
        if located.gunzipped > limits.max_decompressed {
            return Some(Err(DecodeError::TooLarge {
                max: limits.max_decompressed,
            }));
        }
        let mut head = vec![0; located.head_len as usize];
        self.file
            .as_ref()?
            .read_exact_at(&mut head, located.offset)
            .ok()?;
        let entry = Entry::parse_sites(&head, &self.names).ok()?;
        Some(Ok(build::site_figures(
            record.kind,
            &entry.sample_types,
            entry.default_type,
            entry.sites.iter().map(|(n, v)| (*n, v.as_slice())),
        )))
    }
}

/// Decodes a capture's file into its figures: a gzipped pprof profile, or a goroutine text
/// dump (the agent's op 0x01); with them its decompressed length when it can be known without
/// gunzipping again (see `gunzipped_len`). The error names the file.
pub fn build_file(
    path: &Path,
    kind: RecordKind,
    limits: &DecodeLimits,
    own: &OwnCode,
) -> Result<(CaptureFigures, Option<u64>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if kind == RecordKind::Goroutine && !decode::is_gzip(&bytes) && bytes.starts_with(b"goroutine ")
    {
        let dump =
            decode::stackdump::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok((build::from_dump(&dump, own), Some(0)));
    }
    // One thread a capture: a rebuild already decodes captures on every core, and a gunzip
    // thread per capture beside that only adds hand-offs (CPU 1.47x `gzip -dc` against 1.02x
    // without, bench/growth-live.sh).
    let profile = decode::decode_on_one_thread(&bytes, limits)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((
        build::from_profile(&profile, kind, own),
        gunzipped_len(&bytes, limits),
    ))
}

/// The decompressed length of a file that has just decoded under `limits`: 0 when it is not
/// gzipped (the ceiling holds only for gzip), else its gzip trailer's ISIZE, the length mod
/// 2^32, which the gunzip checked. Exact while the ceiling is under 4 GiB; None above it.
fn gunzipped_len(bytes: &[u8], limits: &DecodeLimits) -> Option<u64> {
    if !decode::is_gzip(bytes) {
        return Some(0);
    }
    if limits.max_decompressed > u64::from(u32::MAX) {
        return None;
    }
    let trailer: [u8; 4] = bytes.get(bytes.len().checked_sub(4)?..)?.try_into().ok()?;
    Some(u64::from(u32::from_le_bytes(trailer)))
}

/// Which code is each boot cycle's own ([`OwnCode`]): the main module its `cycle` record names,
/// else the guess. The live indexer and every later analysis read it from the same records, so
/// an entry names its sites as a rebuild would.
#[derive(Debug, Clone, Default)]
pub struct OwnCodes {
    cycles: HashMap<u32, OwnCode>,
    guess: OwnCode,
    /// The prefixes a user named (`--own`), beside each cycle's main module.
    named: Vec<String>,
}

impl OwnCodes {
    /// Each cycle's own code as the collector's index names it: its main module, with the
    /// prefixes the run recorded as the user's own (`collect --own`, run.json's `options.own`).
    pub fn of(records: &[CaptureRecord], named: &[String]) -> OwnCodes {
        let mut own = OwnCodes {
            named: named.to_vec(),
            guess: OwnCode::guess().named(named),
            ..OwnCodes::default()
        };
        for r in records {
            own.note(r);
        }
        own
    }

    /// Each cycle's own code as an analysis of `run` names it: its main module, with the
    /// prefixes recorded with the run or given to the analysis ([`RunDir::own_named`]).
    pub fn of_run(run: &RunDir) -> OwnCodes {
        OwnCodes::of(&run.manifest.records, &run.own_named)
    }

    /// Takes a `cycle` record's main module, when it names one.
    pub fn note(&mut self, record: &CaptureRecord) {
        if record.kind != RecordKind::Cycle {
            return;
        }
        if let Some(module) = record.build.as_ref().and_then(|b| b.module.as_deref()) {
            let code = OwnCode::module(module).named(&self.named);
            self.cycles.insert(record.cycle, code);
        }
    }

    pub fn of_cycle(&self, cycle: u32) -> &OwnCode {
        self.cycles.get(&cycle).unwrap_or(&self.guess)
    }
}

/// Where an analysis gets a capture's site figures: the index when its entry is fresh, else
/// the profile, decoded (and the figures kept, to be appended with [`SiteSource::keep`]).
pub struct SiteSource<'r> {
    run: &'r RunDir,
    index: RunIndex,
    limits: &'r DecodeLimits,
    /// Opened at the first entry to keep, then kept: it reads the file once, then only what
    /// others append.
    writer: std::sync::Mutex<Option<IndexWriter>>,
    /// Each boot cycle's own code, from its `cycle` record.
    own: OwnCodes,
    /// Whether the index's entries name sites as this analysis does: not when it was told
    /// other own code (`--own`) than the prefixes the run recorded, by which the collector
    /// and every rebuild name them; its captures are then decoded, and nothing is kept.
    indexed: bool,
}

/// A capture's figures, and the entry to append when they came from decoding.
pub type Sites = (Vec<SiteFigures>, Option<Built>);

/// Why a capture's site figures cannot be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SitesError {
    /// Its profile is not on disk (thinned by `--max-disk`, or a name that cannot be a file).
    Missing,
    /// Its profile cannot be decoded; the words name the file.
    Unreadable(String),
}

impl<'r> SiteSource<'r> {
    pub fn open(run: &'r RunDir, limits: &'r DecodeLimits) -> SiteSource<'r> {
        SiteSource {
            run,
            index: RunIndex::open(&run.root, run.own_recorded()),
            limits,
            writer: std::sync::Mutex::new(None),
            own: OwnCodes::of_run(run),
            indexed: run.named_as_recorded(),
        }
    }

    /// The capture's site figures, from the index or its profile.
    pub fn sites(&self, record: &CaptureRecord) -> Result<Sites, SitesError> {
        let path = self.run.file_path(record).ok_or(SitesError::Missing)?;
        let key = EntryKey::of(record, &path).ok_or(SitesError::Missing)?;
        let indexed = self
            .indexed
            .then(|| self.index.sites(record, &key, self.limits))
            .flatten();
        match indexed {
            Some(Ok(sites)) => return Ok((sites, None)),
            // Refused as decoding would refuse it, without reading the profile.
            Some(Err(e)) => return Err(SitesError::Unreadable(format!("{}: {e}", path.display()))),
            None => {}
        }
        let own = self.own.of_cycle(record.cycle);
        let (figures, gunzipped) =
            build_file(&path, record.kind, self.limits, own).map_err(SitesError::Unreadable)?;
        let sites = figures.site_figures(record.kind);
        Ok((
            sites,
            gunzipped.filter(|_| self.indexed).map(|gunzipped| Built {
                seq: record.seq,
                kind: record.kind,
                key,
                gunzipped,
                figures,
            }),
        ))
    }

    /// Appends what was decoded to the index. A run that cannot be written to (read-only, a
    /// full disk) is analysed all the same, only without keeping the index.
    pub fn keep(&self, built: Vec<Built>) {
        if built.is_empty() {
            return;
        }
        let Ok(mut writer) = self.writer.lock() else {
            return;
        };
        if writer.is_none() {
            *writer = IndexWriter::open(&self.run.root, self.run.own_recorded()).ok();
        }
        if let Some(w) = writer.as_mut() {
            let _ = w.append(&built);
        }
    }
}

/// Appends entries to a run's index under an exclusive lock, interning names
/// against everything already in the file (including what another writer added meanwhile).
pub struct IndexWriter {
    path: PathBuf,
    /// The header of an index named as this writer names sites ([`header_for`]).
    header: [u8; HEADER_LEN as usize],
    file: File,
    names: QuickMap<String, u32>,
    /// Bytes of the file this writer has read and checked.
    known: u64,
    /// Bytes cut off the end by the last catch-up: a torn or damaged tail.
    pub repaired: u64,
}

impl IndexWriter {
    /// The index of the run at `root`, whose entries name sites by the prefixes `own` the run
    /// recorded: one named otherwise is started over ([`header_for`]).
    pub fn open(root: &Path, own: &[String]) -> Result<IndexWriter, IndexError> {
        let path = root.join(INDEX_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| IndexError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(IndexWriter {
            path,
            header: header_for(own),
            file,
            names: QuickMap::default(),
            known: 0,
            repaired: 0,
        })
    }

    fn io(&self, source: io::Error) -> IndexError {
        IndexError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends one frame per entry and fsyncs once. Under the lock it first reads what other
    /// writers appended, and cuts a torn or damaged tail or an index of another format.
    pub fn append(&mut self, built: &[Built]) -> Result<(), IndexError> {
        let _lock = Lock::exclusive(&self.file).map_err(|e| self.io(e))?;
        self.catch_up().map_err(|e| self.io(e))?;
        let mut bytes = Vec::new();
        for b in built {
            format::encode_frame(&mut bytes, b, &mut self.names);
        }
        self.file
            .write_all_at(&bytes, self.known)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| {
                let _ = self.file.set_len(self.known);
                self.io(e)
            })?;
        self.known += bytes.len() as u64;
        Ok(())
    }

    /// Repairs the file (header, torn tail) without adding to it.
    pub fn repair(&mut self) -> Result<(), IndexError> {
        self.append(&[])
    }

    fn catch_up(&mut self) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        let mut header = [0u8; HEADER_LEN as usize];
        let fresh = len < HEADER_LEN
            || len < self.known
            || self.file.read_exact_at(&mut header, 0).is_err()
            || header != self.header;
        if fresh {
            // Absent, shrunk by someone else, or from another format or reduction: start over.
            self.names.clear();
            self.repaired = len;
            self.file.set_len(0)?;
            self.file.write_all_at(&self.header, 0)?;
            self.file.sync_data()?;
            self.known = HEADER_LEN;
            return Ok(());
        }
        if self.known == 0 {
            self.known = HEADER_LEN;
        }
        self.file.seek(SeekFrom::Start(self.known))?;
        let mut reader = io::BufReader::with_capacity(1 << 16, &self.file);
        let mut offset = self.known;
        let mut head = Vec::new();
        while let Some((frame, body_len)) = format::read_frame_header(&mut reader, offset, len) {
            head.resize(frame.head_len as usize, 0);
            if reader.read_exact(&mut head).is_err()
                || !frame.head_ok(&head)
                || format::learn(&head, &mut self.names).is_err()
            {
                break;
            }
            offset += body_len;
        }
        self.known = offset;
        self.repaired = len - offset;
        if offset < len {
            self.file.set_len(offset)?;
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// An exclusive `flock` on the index, released when dropped (the file outlives it).
struct Lock(std::os::fd::RawFd);

impl Lock {
    fn exclusive(file: &File) -> io::Result<Lock> {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: flock on a file descriptor this process holds open.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Lock(file.as_raw_fd()));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as above; unlocking cannot fail in a way that matters here.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// The captures an analysis reads: stored heap and goroutine profiles, once each (a duplicate
/// names the earlier file), not deleted since.
pub fn indexed_captures(run: &RunDir) -> Vec<&CaptureRecord> {
    run.manifest.counted()
}

/// What `heapwatch index` did.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Rebuild {
    /// Captures with a stored profile.
    pub captures: usize,
    /// Entries that were already fresh.
    pub fresh: usize,
    /// Entries built now: missing, or stale (the profile or its manifest hash changed).
    pub rebuilt: usize,
    /// Bytes of a torn or damaged tail cut off.
    pub repaired_bytes: u64,
    /// Profiles that could not be decoded, each naming its file.
    pub unreadable: Vec<String>,
}

/// Brings the index of a run up to date: repairs it, and builds every missing or stale entry,
/// decoding on `workers` threads.
pub fn rebuild(run: &RunDir, limits: &DecodeLimits) -> Result<Rebuild, IndexError> {
    let mut writer = IndexWriter::open(&run.root, run.own_recorded())?;
    writer.repair()?;
    let mut done = Rebuild {
        repaired_bytes: writer.repaired,
        ..Rebuild::default()
    };
    let source = SiteSource::open(run, limits);
    let captures: Vec<&CaptureRecord> = indexed_captures(run)
        .into_iter()
        .filter(|r| run.file_path(r).is_some_and(|p| p.is_file()))
        .collect();
    done.captures = captures.len();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    for batch in captures.chunks(16) {
        let results: Vec<Result<Sites, SitesError>> = std::thread::scope(|scope| {
            let chunk = batch.len().div_ceil(workers).max(1);
            let handles: Vec<_> = batch
                .chunks(chunk)
                .map(|records| {
                    let source = &source;
                    scope.spawn(move || records.iter().map(|r| source.sites(r)).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let mut built = Vec::new();
        for result in results {
            match result {
                Ok((_, None)) => done.fresh += 1,
                Ok((_, Some(b))) => built.push(b),
                Err(SitesError::Missing) => {}
                Err(SitesError::Unreadable(e)) => done.unreadable.push(e),
            }
        }
        done.rebuilt += built.len();
        writer.append(&built)?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests;
