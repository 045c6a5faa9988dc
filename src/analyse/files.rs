//! The files that held a cycle's page cache and shared memory at its peak: the sampler's
//! listings (`memory.jsonl` `files`) read back, each file with its pages as counted nearest the
//! peak, and the span over which its length grew (when it was written).

use serde::Serialize;

use crate::model::memory::{HeldFiles, MemorySample};

/// The files of a cycle's process near its peak, most resident first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilesAtPeak {
    /// Seconds since the cycle's first capture of the listing (when its pages were counted).
    pub at_s: f64,
    /// Whether their resident pages were counted then (`mincore`), else only their lengths
    /// are known.
    pub counted: bool,
    /// The listing stopped at its cap or its time budget: files may be missing.
    pub incomplete: bool,
    pub files: Vec<FileAtPeak>,
}

/// One file a process held at the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileAtPeak {
    pub path: String,
    /// Its length.
    pub size: u64,
    /// Its pages in memory, when counted.
    pub resident: Option<u64>,
    /// Dirty pages of its shared mappings, when counted and mapped shared.
    pub dirty: Option<u64>,
    /// On tmpfs or shared memory: reclaim cannot drop it.
    pub shmem: bool,
    pub open: bool,
    pub mapped: bool,
    /// Seconds since the cycle's first capture from the first listing that saw it shorter
    /// than at the peak to the first that saw it at that length: when it was written.
    pub written_s: Option<(f64, f64)>,
}

/// A listing of the process `pid` at `t_ms`.
struct Listing<'a> {
    t_ms: i64,
    files: &'a HeldFiles,
}

/// The files the process `pid` held nearest `peak_ms`: the listing with counted pages nearest
/// it, else the last listing at or before it (the first after when none was before).
pub fn at_peak(
    memory: &[&MemorySample],
    pid: Option<u32>,
    peak_ms: i64,
    start_ms: i64,
) -> Option<FilesAtPeak> {
    let pid = pid?;
    let listings: Vec<Listing> = memory
        .iter()
        .filter_map(|m| {
            let files = m.files.as_ref().filter(|f| f.pid == pid)?;
            Some(Listing {
                t_ms: m.t_ms,
                files,
            })
        })
        .collect();
    let chosen = listings
        .iter()
        .filter(|l| l.files.measured)
        .min_by_key(|l| (l.t_ms - peak_ms).abs())
        .or_else(|| listings.iter().rev().find(|l| l.t_ms <= peak_ms))
        .or_else(|| listings.first())?;
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    let mut files: Vec<FileAtPeak> = chosen
        .files
        .files
        .iter()
        .map(|f| {
            let sightings = listings
                .iter()
                .filter(|l| l.t_ms <= chosen.t_ms)
                .filter_map(|l| {
                    let seen = l.files.files.iter().find(|g| g.path == f.path)?;
                    Some((l.t_ms, seen.size))
                });
            FileAtPeak {
                path: f.path.clone(),
                size: f.size,
                resident: f.resident,
                dirty: f.dirty,
                shmem: f.shmem,
                open: f.open,
                mapped: f.mapped,
                written_s: written(sightings, f.size).map(|(a, b)| (secs(a), secs(b))),
            }
        })
        .collect();
    files.sort_by(|a, b| {
        let weight = |f: &FileAtPeak| f.resident.unwrap_or(f.size);
        weight(b).cmp(&weight(a)).then_with(|| a.path.cmp(&b.path))
    });
    Some(FilesAtPeak {
        at_s: secs(chosen.t_ms),
        counted: chosen.files.measured,
        incomplete: chosen.files.incomplete,
        files,
    })
}

/// From the first sighting shorter than `size` to the first at `size` (time, length in time
/// order): when a file was written up to its length at the peak. `None` when it was seen at
/// that length from the first.
fn written(sightings: impl Iterator<Item = (i64, u64)>, size: u64) -> Option<(i64, i64)> {
    let mut first_shorter = None;
    for (t, len) in sightings {
        if len >= size {
            return first_shorter.map(|from| (from, t));
        }
        first_shorter.get_or_insert(t);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::memory::HeldFile;

    const MIB: u64 = 1 << 20;

    fn listing(t_ms: i64, pid: u32, sizes: &[(&str, u64)], resident: bool) -> MemorySample {
        MemorySample {
            t_ms,
            pid: Some(pid),
            alive: true,
            files: Some(HeldFiles {
                pid,
                files: sizes
                    .iter()
                    .map(|&(path, size)| HeldFile {
                        path: path.into(),
                        size,
                        open: true,
                        resident: resident.then_some(size),
                        ..HeldFile::default()
                    })
                    .collect(),
                measured: resident,
                ..HeldFiles::default()
            }),
            ..MemorySample::default()
        }
    }

    #[test]
    fn the_files_at_the_peak_say_when_they_were_written() {
        let db = "/data/ctrl-ha.db-20261207-031333";
        let memory = [
            listing(1_000, 7, &[("/bin/ctrl", 40 * MIB)], false),
            listing(1_300, 7, &[(db, 10 * MIB), ("/bin/ctrl", 40 * MIB)], false),
            MemorySample {
                t_ms: 1_400,
                alive: true,
                ..MemorySample::default()
            },
            listing(1_600, 7, &[(db, 400 * MIB), ("/bin/ctrl", 40 * MIB)], false),
            listing(2_900, 7, &[(db, 854 * MIB), ("/bin/ctrl", 40 * MIB)], true),
            listing(3_500, 7, &[(db, 854 * MIB), ("/bin/ctrl", 40 * MIB)], false),
            // Another process's listing is no part of it.
            listing(3_000, 8, &[("/other", 900 * MIB)], true),
        ];
        let refs: Vec<&MemorySample> = memory.iter().collect();
        let f = at_peak(&refs, Some(7), 3_500, 1_000).unwrap();
        assert_eq!((f.at_s, f.counted), (1.9, true));
        assert_eq!(f.files[0].path, db);
        assert_eq!(f.files[0].resident, Some(854 * MIB));
        assert_eq!(f.files[0].written_s, Some((0.3, 1.9)));
        assert_eq!(f.files[1].written_s, None, "open from the first");
        // Nothing counted: the last listing before the peak, lengths only.
        let f = at_peak(&refs[..4], Some(7), 1_650, 1_000).unwrap();
        assert_eq!((f.at_s, f.counted), (0.6, false));
        assert_eq!(f.files[0].size, 400 * MIB);
        assert!(at_peak(&refs, None, 3_500, 1_000).is_none());
        assert!(at_peak(&refs, Some(9), 3_500, 1_000).is_none());
    }
}
