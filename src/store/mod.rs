//! The run directory: where captures become durable. A profile appears under its final name
//! only once complete and fsynced (temporary name, fsync, rename, fsync the folder); its
//! manifest line is appended and fsynced after that. Readers never see a torn file.

pub mod cluster;
mod failure;
pub mod manifest;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use failure::{FailureKind, NOT_SERVED};
pub use manifest::{CaptureRecord, ManifestRead, RecordKind};

use crate::model::run_options::RunOptions;

pub const RUN_FILE: &str = "run.json";
pub const MANIFEST_FILE: &str = "manifest.jsonl";
pub const MEMORY_FILE: &str = "memory.jsonl";
pub const PROFILES_DIR: &str = "profiles";
const TEMP_PREFIX: &str = ".partial-";

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: the disk is full ({source}); every capture made before this one is intact")]
    DiskFull { path: PathBuf, source: io::Error },
    #[error("{0}: not a heapwatch run directory (no manifest.jsonl)")]
    NotARun(PathBuf),
    #[error("{path}: {why}")]
    Corrupt { path: PathBuf, why: String },
}

impl StoreError {
    pub(crate) fn io(path: &Path, source: io::Error) -> StoreError {
        // ENOSPC and EDQUOT: the collector must stop cleanly rather than retry.
        if matches!(source.raw_os_error(), Some(28) | Some(122)) {
            StoreError::DiskFull {
                path: path.to_path_buf(),
                source,
            }
        } else {
            StoreError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }

    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull { .. })
    }
}

/// `run.json`: what was collected from where, with which options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub schema: u32,
    pub tool: String,
    /// The target as the user gave it, its secrets hidden (a password as `***`).
    #[serde(with = "crate::source::target::shown")]
    pub target: String,
    /// `http`, `agent` or `envoy`.
    pub source: String,
    pub started_ms: i64,
    /// Unix ms of every later start of a collector on this run.
    #[serde(default)]
    pub resumed_ms: Vec<i64>,
    #[serde(default, deserialize_with = "RunOptions::tolerant")]
    pub options: RunOptions,
    /// The target's memory limit in bytes, from `--limit` or the cgroup.
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// A free-form build label (`--label 2.1.0`) used by reports and comparisons.
    #[serde(default)]
    pub label: Option<String>,
}

impl RunInfo {
    /// This start's `run.json` over a run that already has one (the one rule for resuming,
    /// `collect` and `run` alike): the first start is kept and this one noted after the
    /// earlier ones; the target, source, tool and options are this start's; a label, a limit
    /// and push settings this start does not give are kept from before (a run's push labels
    /// may have been set after it began, by `heapwatch push --service`), and so are the own-code
    /// prefixes (`--own`), which a start may not change ([`RunInfo::own_conflict`]).
    pub fn continuing(mut self, previous: RunInfo) -> RunInfo {
        let this_start = self.started_ms;
        self.started_ms = previous.started_ms;
        self.resumed_ms = previous.resumed_ms;
        self.resumed_ms.push(this_start);
        self.label = self.label.or(previous.label);
        self.limit_bytes = self.limit_bytes.or(previous.limit_bytes);
        self.options.push = self.options.push.or(previous.options.push);
        self.options.own = self.options.own.or(previous.options.own);
        self
    }

    /// Why a run that recorded this `run.json` cannot be resumed with `--own given`: its
    /// captures so far, and their site index, are named by the prefixes it recorded (none, or
    /// others). None: the same prefixes, or none given (the recorded ones are kept).
    pub fn own_conflict(&self, given: &[String]) -> Option<String> {
        let recorded = self.options.own.as_deref().unwrap_or_default();
        if given.is_empty() || crate::model::run_options::same_prefixes(recorded, given) {
            return None;
        }
        let was = if recorded.is_empty() {
            "no --own".to_string()
        } else {
            format!("--own {}", recorded.join(","))
        };
        Some(format!(
            "this run was recorded with {was}, not --own {}: its sites are named by it; resume \
             it with the same --own (or none), give a new --out, or name other prefixes on \
             each analysis (growth --own …)",
            given.join(",")
        ))
    }
}

/// A run directory opened for writing by one collector.
pub struct RunWriter {
    root: PathBuf,
    profiles: PathBuf,
    manifest: File,
    /// Length of the manifest's complete lines: a failed append is cut back to it.
    manifest_len: u64,
    temp_counter: u64,
    /// Told about each record once its line is durable (`collect --push`).
    listener: Option<AppendListener>,
}

/// Called with each manifest record right after its line is fsynced; it must not block.
pub type AppendListener = Box<dyn FnMut(&CaptureRecord) + Send>;

impl RunWriter {
    /// Creates the run directory, or opens an existing one to resume it: a torn last manifest
    /// line is cut off and left-over temporary files are removed.
    pub fn open(root: &Path) -> Result<(RunWriter, ManifestRead), StoreError> {
        let profiles = root.join(PROFILES_DIR);
        fs::create_dir_all(&profiles).map_err(|e| StoreError::io(&profiles, e))?;
        let manifest_path = root.join(MANIFEST_FILE);
        let existing = match fs::read(&manifest_path) {
            Ok(bytes) => manifest::parse(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => ManifestRead::default(),
            Err(e) => return Err(StoreError::io(&manifest_path, e)),
        };
        let manifest = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&manifest_path)
            .map_err(|e| StoreError::io(&manifest_path, e))?;
        if existing.torn_tail.is_some() {
            manifest
                .set_len(existing.good_len)
                .map_err(|e| StoreError::io(&manifest_path, e))?;
            manifest
                .sync_all()
                .map_err(|e| StoreError::io(&manifest_path, e))?;
        }
        for entry in fs::read_dir(&profiles).map_err(|e| StoreError::io(&profiles, e))? {
            let entry = entry.map_err(|e| StoreError::io(&profiles, e))?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                let _ = fs::remove_file(entry.path());
            }
        }
        sync_dir(root)?;
        let mut writer = RunWriter {
            root: root.to_path_buf(),
            profiles,
            manifest,
            temp_counter: 0,
            listener: None,
            manifest_len: 0,
        };
        writer.manifest_len = writer
            .manifest
            .metadata()
            .map_err(|e| StoreError::io(&root.join(MANIFEST_FILE), e))?
            .len();
        let mut existing = existing;
        writer.recover(&mut existing)?;
        Ok((writer, existing))
    }

    /// Records the profiles a killed collector made durable but never wrote a manifest line
    /// for, so their seq numbers are never handed out again and their names never reused.
    fn recover(&mut self, existing: &mut ManifestRead) -> Result<(), StoreError> {
        let named: std::collections::BTreeSet<String> = existing
            .records
            .iter()
            .filter_map(|r| r.file.clone())
            .collect();
        let mut orphans = Vec::new();
        for entry in fs::read_dir(&self.profiles).map_err(|e| StoreError::io(&self.profiles, e))? {
            let entry = entry.map_err(|e| StoreError::io(&self.profiles, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = format!("{PROFILES_DIR}/{name}");
            if name.starts_with('.') || named.contains(&relative) {
                continue;
            }
            let Some(seq) = name.split('-').next().and_then(|d| d.parse::<u64>().ok()) else {
                continue;
            };
            orphans.push((seq, relative, entry));
        }
        orphans.sort_by_key(|o| o.0);
        let mut next = existing.records.iter().map(|r| r.seq).max().unwrap_or(0) + 1;
        let cycle = existing.records.iter().map(|r| r.cycle).max().unwrap_or(1);
        for (seq, relative, entry) in orphans {
            let meta = entry
                .metadata()
                .map_err(|e| StoreError::io(&entry.path(), e))?;
            let t_ms = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            let mut record = CaptureRecord::new(seq.max(next), RecordKind::Recovered, cycle, t_ms);
            record.file = Some(relative);
            record.bytes = meta.len();
            self.append(&record)?;
            next = record.seq + 1;
            existing.records.push(record);
        }
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `run.json` atomically.
    pub fn write_info(&self, info: &RunInfo) -> Result<(), StoreError> {
        write_info(&self.root, info)
    }

    /// Makes a profile durable under `profiles/NAME` and returns its relative path.
    pub fn store_profile(&mut self, name: &str, bytes: &[u8]) -> Result<String, StoreError> {
        let temp = self.temp_path(name)?;
        write_synced(&temp, bytes)?;
        self.publish(&temp, name)
    }

    /// A fresh temporary name in `profiles/` for a profile that will be called `name`. Write
    /// it with [`write_synced`] (on any thread), then [`RunWriter::publish`] or
    /// [`RunWriter::discard`] it.
    pub fn temp_path(&mut self, name: &str) -> Result<PathBuf, StoreError> {
        manifest::check_file_name(Some(&format!("{PROFILES_DIR}/{name}"))).map_err(|why| {
            StoreError::Corrupt {
                path: self.profiles.join(name),
                why,
            }
        })?;
        self.temp_counter += 1;
        Ok(self.profiles.join(format!(
            "{TEMP_PREFIX}{}-{}-{name}",
            std::process::id(),
            self.temp_counter
        )))
    }

    /// Gives a written and fsynced temporary file its final name and fsyncs the folder: from
    /// here on a reader sees it, whole.
    pub fn publish(&self, temp: &Path, name: &str) -> Result<String, StoreError> {
        self.publisher().publish(temp, name)
    }

    /// Removes a temporary file that will not be published (a duplicate or an invalid reply).
    pub fn discard(&self, temp: &Path) {
        self.publisher().discard(temp);
    }

    /// What publishes and discards temporary files, to hand to another thread: the one that
    /// wrote a profile names it as soon as its fsync is done.
    pub fn publisher(&self) -> Publisher {
        Publisher {
            profiles: self.profiles.clone(),
        }
    }

    /// Removes a stored profile (retention); the caller records the deletion.
    pub fn delete_profile(&self, relative: &str) -> Result<(), StoreError> {
        manifest::check_file_name(Some(relative)).map_err(|why| StoreError::Corrupt {
            path: self.root.join(relative),
            why,
        })?;
        let path = self.root.join(relative);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.profiles),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&path, e)),
        }
    }

    /// Appends one record and fsyncs it. One `write` call per line, so a crash leaves at most
    /// one torn line at the end.
    pub fn append(&mut self, record: &CaptureRecord) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(record).expect("records are plain data");
        line.push(b'\n');
        let path = self.root.join(MANIFEST_FILE);
        let written = self
            .manifest
            .write_all(&line)
            .and_then(|_| self.manifest.sync_data());
        if let Err(e) = written {
            // A full disk can take half a line: cut it so the manifest stays whole lines.
            let _ = self.manifest.set_len(self.manifest_len);
            let _ = self.manifest.sync_data();
            return Err(StoreError::io(&path, e));
        }
        self.manifest_len += line.len() as u64;
        if let Some(listener) = &mut self.listener {
            listener(record);
        }
        Ok(())
    }

    /// Tells `listener` about every record appended from now on, once it is durable.
    pub fn on_append(mut self, listener: AppendListener) -> RunWriter {
        self.listener = Some(listener);
        self
    }

    /// Opens `memory.jsonl` for appending.
    pub fn memory_log(&self) -> Result<MemoryLog, StoreError> {
        let path = self.root.join(MEMORY_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        Ok(MemoryLog { file, path })
    }
}

/// Publishes or discards the temporary files of one run's `profiles/` ([`RunWriter::temp_path`]).
#[derive(Debug, Clone)]
pub struct Publisher {
    profiles: PathBuf,
}

impl Publisher {
    /// See [`RunWriter::publish`].
    pub fn publish(&self, temp: &Path, name: &str) -> Result<String, StoreError> {
        let target = self.profiles.join(name);
        let result = fs::rename(temp, &target)
            .map_err(|e| StoreError::io(&target, e))
            .and_then(|()| sync_dir(&self.profiles));
        if result.is_err() {
            let _ = fs::remove_file(temp);
        }
        result.map(|()| format!("{PROFILES_DIR}/{name}"))
    }

    /// See [`RunWriter::discard`].
    pub fn discard(&self, temp: &Path) {
        let _ = fs::remove_file(temp);
    }
}

/// Appends process / cgroup memory samples, one JSON object a line.
pub struct MemoryLog {
    file: File,
    path: PathBuf,
}

impl MemoryLog {
    pub fn append<T: Serialize>(&mut self, sample: &T, sync: bool) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(sample).expect("memory samples are plain data");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(|e| StoreError::io(&self.path, e))?;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| StoreError::io(&self.path, e))?;
        }
        Ok(())
    }
}

/// Writes a file and fsyncs it; removes it again when that fails.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let result = (|| {
        let mut f = File::create(path).map_err(|e| StoreError::io(path, e))?;
        f.write_all(bytes).map_err(|e| StoreError::io(path, e))?;
        f.sync_all().map_err(|e| StoreError::io(path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(path);
    }
    result
}

/// A temporary file written piece by piece as a body arrives, then fsynced: what
/// [`write_synced`] does for bytes already whole. The file is made at the first piece, so a
/// request that brings nothing leaves nothing; the first failure is kept and reported by
/// [`PartialFile::sync`], and the file is removed then.
pub struct PartialFile {
    path: PathBuf,
    file: Option<File>,
    failed: Option<io::Error>,
}

impl PartialFile {
    pub fn new(path: PathBuf) -> PartialFile {
        PartialFile {
            path,
            file: None,
            failed: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let written = match &mut self.file {
            Some(f) => f.write_all(bytes),
            None => File::create(&self.path).and_then(|mut f| {
                let written = f.write_all(bytes);
                self.file = Some(f);
                written
            }),
        };
        if let Err(e) = written {
            self.failed = Some(e);
        }
    }

    /// Fsyncs what was written (an empty file when nothing was); on any failure so far the
    /// file is removed and the failure returned.
    pub fn sync(mut self) -> Result<(), StoreError> {
        let synced = match (self.failed.take(), self.file.take()) {
            (Some(e), _) => Err(e),
            (None, Some(f)) => f.sync_all(),
            (None, None) => File::create(&self.path).and_then(|f| f.sync_all()),
        };
        synced.map_err(|e| {
            let _ = fs::remove_file(&self.path);
            StoreError::io(&self.path, e)
        })
    }

    /// Removes the file, if it was made.
    pub fn discard(mut self) {
        if self.file.take().is_some() || self.failed.is_some() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes `RUN/run.json` atomically and durably (temporary name, fsync, rename, fsync of the
/// folder), pretty, with a last newline: the one writer of run.json, for a target's `RunInfo`,
/// a cluster's `ClusterInfo`, and a run.json as read and changed (a `serde_json::Value`, so
/// fields this version does not know are kept; a run's push labels are changed after it began).
pub fn write_info(root: &Path, info: &impl serde::Serialize) -> Result<(), StoreError> {
    let mut text = serde_json::to_vec_pretty(info).map_err(|e| StoreError::Corrupt {
        path: root.join(RUN_FILE),
        why: e.to_string(),
    })?;
    text.push(b'\n');
    write_durable(root, RUN_FILE, &text, &mut 0)
}

/// Temporary name in the same folder, write, fsync, rename, fsync the folder.
fn write_durable(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    counter: &mut u64,
) -> Result<(), StoreError> {
    *counter += 1;
    let temp = dir.join(format!(
        "{TEMP_PREFIX}{}-{}-{name}",
        std::process::id(),
        counter
    ));
    write_synced(&temp, bytes)?;
    let target = dir.join(name);
    let result = fs::rename(&temp, &target)
        .map_err(|e| StoreError::io(&target, e))
        .and_then(|()| sync_dir(dir));
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
}

/// A run directory opened for reading.
pub struct RunDir {
    pub root: PathBuf,
    pub info: Option<RunInfo>,
    pub manifest: ManifestRead,
    /// The module prefixes that name its sites as the user's own code (`analyse::reduce`'s
    /// doc): those recorded with the run (run.json's `options.own`) unless an analysis was given
    /// its own (`--own`, [`RunDir::naming_own`]); empty: none.
    pub own_named: Vec<String>,
    /// Whether `own_named` was given to the analysis rather than recorded.
    pub own_given: bool,
}

impl RunDir {
    pub fn open(root: &Path) -> Result<RunDir, StoreError> {
        let manifest_path = root.join(MANIFEST_FILE);
        let bytes = match fs::read(&manifest_path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotARun(root.to_path_buf()));
            }
            Err(e) => return Err(StoreError::io(&manifest_path, e)),
        };
        let info_path = root.join(RUN_FILE);
        let info = match fs::read(&info_path) {
            Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| StoreError::Corrupt {
                path: info_path.clone(),
                why: e.to_string(),
            })?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(&info_path, e)),
        };
        let mut run = RunDir {
            root: root.to_path_buf(),
            info,
            manifest: manifest::parse(&bytes),
            own_named: Vec::new(),
            own_given: false,
        };
        run.own_named = run.own_recorded().to_vec();
        Ok(run)
    }

    /// This run read with `prefixes` named as the user's own code (`--own`), in place of those
    /// it recorded; none given: as recorded.
    pub fn naming_own(mut self, prefixes: &[String]) -> RunDir {
        if !prefixes.is_empty() {
            self.own_named = prefixes.to_vec();
            self.own_given = true;
        }
        self
    }

    /// The own-code prefixes recorded with the run (`collect --own`); empty: none.
    pub fn own_recorded(&self) -> &[String] {
        self.info
            .as_ref()
            .and_then(|i| i.options.own.as_deref())
            .unwrap_or_default()
    }

    /// The prefixes that name its sites, and whence; None when none are named.
    pub fn own_naming(&self) -> Option<crate::model::run_options::OwnNamed> {
        use crate::model::run_options::{OwnFrom, OwnNamed};
        let prefixes = crate::model::run_options::canonical_prefixes(&self.own_named);
        (!prefixes.is_empty()).then_some(OwnNamed {
            prefixes,
            from: if self.own_given {
                OwnFrom::Given
            } else {
                OwnFrom::Recorded
            },
        })
    }

    /// Whether its sites are named as its recording named them (and its index entries): by the
    /// prefixes it recorded, or by the same ones given again.
    pub fn named_as_recorded(&self) -> bool {
        crate::model::run_options::same_prefixes(&self.own_named, self.own_recorded())
    }

    /// Path of a record's file, checked again to lie inside `profiles/`.
    pub fn file_path(&self, record: &CaptureRecord) -> Option<PathBuf> {
        let file = record.file.as_deref()?;
        manifest::check_file_name(Some(file)).ok()?;
        Some(self.root.join(file))
    }

    /// Reads `memory.jsonl`, skipping a torn last line.
    pub fn memory_samples<T: for<'de> Deserialize<'de>>(&self) -> Vec<T> {
        let Ok(bytes) = fs::read(self.root.join(MEMORY_FILE)) else {
            return Vec::new();
        };
        bytes
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_file_is_its_pieces_once_synced_and_nothing_once_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        let mut file = PartialFile::new(path.clone());
        for piece in [&b"pro"[..], b"", b"file"] {
            file.write(piece);
        }
        file.sync().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"profile");
        let mut file = PartialFile::new(dir.path().join("b"));
        file.write(b"torn");
        file.discard();
        PartialFile::new(dir.path().join("c")).discard();
        // A failure to make the file is reported at the sync, naming it.
        let mut file = PartialFile::new(dir.path().join("no-such-dir/d"));
        file.write(b"x");
        let err = file.sync().unwrap_err().to_string();
        assert!(err.contains("no-such-dir/d"), "{err}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn a_resumed_run_cuts_the_torn_line_and_removes_partial_files() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut w, read) = RunWriter::open(dir.path()).unwrap();
            assert!(read.records.is_empty());
            let file = w.store_profile("000001-heap.pb.gz", b"abc").unwrap();
            let mut r = CaptureRecord::new(1, RecordKind::Heap, 1, 5);
            r.file = Some(file);
            w.append(&r).unwrap();
        }
        let manifest = dir.path().join(MANIFEST_FILE);
        let mut f = OpenOptions::new().append(true).open(&manifest).unwrap();
        f.write_all(b"{\"seq\":2,\"ki").unwrap();
        fs::write(
            dir.path().join("profiles/.partial-1-1-000002-heap.pb.gz"),
            b"ab",
        )
        .unwrap();
        let (_w, read) = RunWriter::open(dir.path()).unwrap();
        assert_eq!(read.records.len(), 1);
        assert!(read.torn_tail.is_some());
        let text = fs::read_to_string(&manifest).unwrap();
        assert!(text.ends_with("}\n"), "torn line removed: {text:?}");
        let names: Vec<_> = fs::read_dir(dir.path().join("profiles")).unwrap().collect();
        assert_eq!(names.len(), 1);
        let run = RunDir::open(dir.path()).unwrap();
        assert_eq!(run.manifest.records.len(), 1);
        assert_eq!(
            fs::read(run.file_path(&run.manifest.records[0]).unwrap()).unwrap(),
            b"abc"
        );
    }

    /// A run recorded by a version that kept a target's password gives it up on read, and
    /// none is ever written.
    #[test]
    fn run_json_holds_a_target_only_in_its_shown_form() {
        let old = br#"{"schema":1,"tool":"x","target":"http://alice:pw123@h:1/x?token=t0k","source":"http","started_ms":1}"#;
        let info: RunInfo = serde_json::from_slice(old).unwrap();
        assert_eq!(info.target, "http://alice:***@h:1/x?token=***");
        let written = RunInfo {
            target: "envoy:http://admin:pw123@h:1".into(),
            ..info
        };
        let text = serde_json::to_string(&written).unwrap();
        assert!(
            text.contains(r#""target":"envoy:http://admin:***@h:1""#),
            "{text}"
        );
    }

    #[test]
    fn a_resumed_run_keeps_its_first_start_and_what_this_start_does_not_give() {
        let info = |started_ms, label: Option<&str>, limit, interval_ms| RunInfo {
            schema: 1,
            tool: "heapwatch".into(),
            target: "proc:1".into(),
            source: "proc".into(),
            started_ms,
            resumed_ms: vec![],
            options: crate::model::run_options::RunOptions {
                interval_ms,
                ..Default::default()
            },
            limit_bytes: limit,
            label: label.map(str::to_string),
        };
        let mut first = info(100, Some("2.0.2"), Some(256 << 20), Some(500));
        first.options.push = Some(crate::model::run_options::PushSettings {
            service: Some("ctrl".into()),
            ..Default::default()
        });
        let second = info(200, None, None, Some(100)).continuing(first.clone());
        assert_eq!(
            (second.started_ms, second.resumed_ms.as_slice()),
            (100, &[200][..])
        );
        assert_eq!(second.label.as_deref(), Some("2.0.2"));
        assert_eq!(second.limit_bytes, Some(256 << 20));
        assert_eq!(
            second.options.interval_ms,
            Some(100),
            "this start's options"
        );
        assert_eq!(
            second.options.push, first.options.push,
            "push labels set later are kept"
        );
        let third = info(300, Some("2.1.0"), Some(128 << 20), None).continuing(second);
        assert_eq!(third.resumed_ms, [200, 300]);
        assert_eq!(third.options.own, None);
        assert_eq!(
            (third.label.as_deref(), third.limit_bytes),
            (Some("2.1.0"), Some(128 << 20))
        );
    }

    #[test]
    fn own_prefixes_are_kept_by_run_json_and_by_a_resumed_start() {
        let mut first = RunInfo {
            schema: 1,
            tool: "heapwatch".into(),
            target: "proc:1".into(),
            source: "proc".into(),
            started_ms: 100,
            resumed_ms: vec![],
            options: Default::default(),
            limit_bytes: None,
            label: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let (writer, _) = RunWriter::open(dir.path()).unwrap();
        // Without the field (an older run.json): none recorded, none named.
        writer.write_info(&first).unwrap();
        let text = fs::read_to_string(dir.path().join(RUN_FILE)).unwrap();
        assert!(!text.contains("\"own\""), "{text}");
        let run = RunDir::open(dir.path()).unwrap();
        assert!(run.own_recorded().is_empty() && run.own_named.is_empty() && !run.own_given);
        assert!(run.named_as_recorded());
        // With it: read back as written, and the analysis names by it unless given others.
        let own = vec!["go.etcd.io/".to_string()];
        first.options.own = Some(own.clone());
        writer.write_info(&first).unwrap();
        let run = RunDir::open(dir.path()).unwrap();
        assert_eq!(run.info.as_ref().unwrap(), &first);
        assert_eq!(
            (run.own_recorded(), run.own_named.as_slice()),
            (&own[..], &own[..])
        );
        let run = run.naming_own(&[]);
        assert!(!run.own_given && run.named_as_recorded());
        let run = run.naming_own(&["go.etcd.io".to_string()]);
        assert!(
            run.own_given && run.named_as_recorded(),
            "the same prefixes given again"
        );
        let run = run.naming_own(&["github.com/openziti/".to_string()]);
        assert_eq!(run.own_named, ["github.com/openziti/"]);
        assert!(!run.named_as_recorded());
        // A start that names none keeps them; one that names others is refused.
        let plain = RunInfo {
            started_ms: 200,
            options: Default::default(),
            ..first.clone()
        };
        assert!(plain.own_conflict(&[]).is_none());
        assert_eq!(
            plain.continuing(first.clone()).options.own,
            Some(own.clone())
        );
        assert!(first.own_conflict(&["go.etcd.io".to_string()]).is_none());
        let why = first
            .own_conflict(&["github.com/openziti/".to_string()])
            .unwrap();
        assert!(why.contains("recorded with --own go.etcd.io/"), "{why}");
        let unnamed = RunInfo {
            options: Default::default(),
            ..first
        };
        let why = unnamed.own_conflict(&own).unwrap();
        assert!(why.contains("recorded with no --own"), "{why}");
    }
}
