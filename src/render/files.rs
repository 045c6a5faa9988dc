//! The words naming the files that held a cycle's shared memory and page cache at its peak,
//! largest first, a few at most, said where that memory mattered.

use crate::analyse::breakdown::MemoryBreakdown;
use crate::analyse::files::FileAtPeak;
use crate::units::format_bytes;

/// Files said, at most.
const FILES_SAID: usize = 3;
/// Files holding less than this are not said.
const FILE_WORTH_SAYING: u64 = 1 << 20;
/// Paths longer than this are shortened to their last components.
const PATH_CHARS: usize = 64;

/// "files in memory at 1.9 s (mincore): 886 MiB of shared memory and tmpfs, 854 MiB of it
/// /data/ctrl-ha.db-20261207-031333 (open, written 0.3–1.9 s); 40.0 MiB of page cache, 38.0 MiB
/// of it /var/lib/x.db (open, mapped, dirty 1.00 MiB in its mappings)". `None` when the page
/// cache and shared memory were under a quarter of the peak, or no file of them was listed.
pub fn files_words(b: &MemoryBreakdown) -> Option<String> {
    let listing = b.files.as_ref()?;
    let cache = page_cache(b)?;
    if cache.saturating_mul(4) < b.total {
        return None;
    }
    let held = |f: &FileAtPeak| {
        if listing.counted {
            f.resident
        } else {
            Some(f.size)
        }
    };
    let shmem = b.shmem.unwrap_or(0);
    let kinds = [
        (true, "shared memory and tmpfs", b.shmem),
        (false, "page cache", Some(cache.saturating_sub(shmem))),
    ];
    let total_of = |file: &FileAtPeak| kinds.iter().find(|k| k.0 == file.shmem).and_then(|k| k.2);
    // mincore counts a file's pages whoever they are charged to: a file holding more than its
    // kind in this cgroup (the binary, cached before the process started) is charged elsewhere.
    // Within the lag of the cgroup's counters (read a moment before the count, batched per
    // CPU) it may hold all of it.
    let slack = |t: u64| (t / 64).max(FILE_WORTH_SAYING);
    let fits = |file: &FileAtPeak, h: u64| total_of(file).is_none_or(|t| h <= t + slack(t));
    let said: Vec<&FileAtPeak> = listing
        .files
        .iter()
        .filter(|f| held(f).is_some_and(|h| h >= FILE_WORTH_SAYING && fits(f, h)))
        .take(FILES_SAID)
        .collect();
    if said.is_empty() {
        return None;
    }
    let f = |v: u64| format_bytes(v as i64);
    let mut groups = Vec::new();
    let mut dirty_unknown = false;
    for (on_tmpfs, name, total) in kinds {
        let mut entries = Vec::new();
        for file in said.iter().filter(|f| f.shmem == on_tmpfs) {
            dirty_unknown |= file.dirty.is_none() && !file.shmem;
            let path = short_path(&file.path);
            let how = how_held(file, listing.counted);
            entries.push(match (listing.counted, entries.is_empty()) {
                (true, true) => {
                    let h = file.resident.unwrap_or(0);
                    let amount = match total_of(file) {
                        Some(t) if h > t => "all".to_string(),
                        _ => f(h),
                    };
                    format!("{amount} of it {path} ({how})")
                }
                (true, false) => format!("{} {path} ({how})", f(file.resident.unwrap_or(0))),
                (false, _) => format!("{path} ({how})"),
            });
        }
        if entries.is_empty() {
            continue;
        }
        let head = match total.filter(|_| listing.counted) {
            Some(t) => format!("{} of {name}", f(t)),
            None if on_tmpfs => format!("in {name}"),
            None => format!("in the {name}"),
        };
        groups.push(format!("{head}, {}", entries.join(", ")));
    }
    let when = if listing.counted {
        format!("files in memory at {:.1} s (mincore)", listing.at_s)
    } else {
        format!(
            "files held at {:.1} s (their pages not counted)",
            listing.at_s
        )
    };
    let mut s = format!("{when}: {}", groups.join("; "));
    let written_first = b.dirty.unwrap_or(0) + b.writeback.unwrap_or(0) >= FILE_WORTH_SAYING;
    if dirty_unknown && written_first {
        s.push_str("; the kernel tells no dirty count per file for a file only open");
    }
    if listing.incomplete {
        s.push_str("; the listing stopped at its cap: files may be missing");
    }
    Some(s)
}

/// How a file was held: "open, written 0.3–1.9 s", with its length when its pages were not
/// counted and the dirty pages of its mappings when known.
fn how_held(file: &FileAtPeak, counted: bool) -> String {
    let f = |v: u64| format_bytes(v as i64);
    let mut how = Vec::new();
    if !counted {
        let on = if file.shmem { " on tmpfs" } else { "" };
        how.push(format!("{} long{on}", f(file.size)));
    }
    match (file.open, file.mapped) {
        (true, true) => how.push("open, mapped".to_string()),
        (true, false) => how.push("open".to_string()),
        (false, true) => how.push("mapped".to_string()),
        (false, false) => {}
    }
    if let Some((from, to)) = file.written_s {
        how.push(format!("written {from:.1}–{to:.1} s"));
    }
    if let Some(d) = file.dirty {
        how.push(format!("dirty {} in its mappings", f(d)));
    }
    how.join(", ")
}

/// The largest file of one kind (on tmpfs, or in the page cache) whose pages were counted at
/// the peak, as a verdict names it: "854 MiB of it …/ctrl-ha.db-20261207-031333 (open,
/// written 0.3–1.9 s)". `None` without a counted listing or a file worth saying.
pub fn largest_file_words(b: &MemoryBreakdown, on_tmpfs: bool) -> Option<String> {
    let listing = b.files.as_ref().filter(|l| l.counted)?;
    let file = listing
        .files
        .iter()
        .filter(|f| f.shmem == on_tmpfs)
        .filter(|f| f.resident.is_some_and(|r| r >= FILE_WORTH_SAYING))
        .max_by_key(|f| f.resident)?;
    let resident = file.resident?;
    // A file counted above the cgroup's figure for its kind is charged elsewhere in part.
    let total = if on_tmpfs {
        b.shmem
    } else {
        page_cache(b).map(|c| c.saturating_sub(b.shmem.unwrap_or(0)))
    };
    if total.is_some_and(|t| resident > t + (t / 64).max(FILE_WORTH_SAYING)) {
        return None;
    }
    let amount = match total {
        Some(t) if resident > t => "all".to_string(),
        _ => format_bytes(resident as i64),
    };
    Some(format!(
        "{amount} of it {} ({})",
        short_path(&file.path),
        how_held(file, true)
    ))
}

/// The page cache with shared memory, however the run split it.
fn page_cache(b: &MemoryBreakdown) -> Option<u64> {
    match b.clean_cache {
        Some(clean) => {
            Some(clean + b.shmem.unwrap_or(0) + b.dirty.unwrap_or(0) + b.writeback.unwrap_or(0))
        }
        None => Some(b.other_cache? + b.mapped_files.unwrap_or(0)),
    }
}

/// A path, or its last components after "…/" when it is long.
fn short_path(path: &str) -> String {
    if path.chars().count() <= PATH_CHARS {
        return path.to_string();
    }
    let mut tail = String::new();
    for part in path.rsplit('/') {
        let next = if tail.is_empty() {
            part.to_string()
        } else {
            format!("{part}/{tail}")
        };
        if !tail.is_empty() && next.chars().count() + 2 > PATH_CHARS {
            break;
        }
        tail = next;
    }
    format!("…/{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::files::FilesAtPeak;

    const MIB: u64 = 1 << 20;

    fn file(path: &str, resident: u64, shmem: bool) -> FileAtPeak {
        FileAtPeak {
            path: path.into(),
            size: resident,
            resident: Some(resident),
            dirty: None,
            shmem,
            open: true,
            mapped: false,
            written_s: None,
        }
    }

    /// OpenZiti 2.1.0 with its data directory on tmpfs (issue 33, item 14): the database copy
    /// it wrote in its first seconds held most of the shared memory that filled the limit.
    #[test]
    fn the_file_holding_the_shared_memory_is_named_with_when_it_was_written() {
        let mut db = file(
            "/var/lib/kubelet/pods/5f0c/volumes/kubernetes.io~empty-dir/data/ctrl-ha.db-20261207-031333",
            854 * MIB,
            true,
        );
        db.written_s = Some((0.3, 1.9));
        let b = MemoryBreakdown {
            total: 1020 * MIB,
            anon: Some(132 * MIB),
            shmem: Some(886 * MIB),
            clean_cache: Some(2 * MIB),
            files: Some(FilesAtPeak {
                at_s: 1.9,
                counted: true,
                incomplete: false,
                files: vec![
                    db,
                    file("/data/raft.db", 12 * MIB, true),
                    file("/bin/ziti", 30 * 1024, false),
                    // Its pages cached before the process began: charged to another cgroup.
                    file("/bin/ziti-tunnel", 40 * MIB, false),
                ],
            }),
            ..MemoryBreakdown::default()
        };
        let words = files_words(&b).unwrap();
        assert_eq!(
            words,
            "files in memory at 1.9 s (mincore): 886 MiB of shared memory and tmpfs, 854 MiB \
             of it …/kubernetes.io~empty-dir/data/ctrl-ha.db-20261207-031333 (open, written \
             0.3–1.9 s), 12.0 MiB /data/raft.db (open)"
        );
        // The cgroup's counter read a moment before the count: all of it, not more than it.
        let mut lag = b.clone();
        lag.shmem = Some(853 * MIB);
        assert!(
            files_words(&lag)
                .unwrap()
                .contains("853 MiB of shared memory and tmpfs, all of it …/"),
            "{:?}",
            files_words(&lag)
        );
        // A heap that filled the limit: the files are not the story.
        let heap = MemoryBreakdown {
            total: 1020 * MIB,
            anon: Some(900 * MIB),
            shmem: Some(100 * MIB),
            clean_cache: Some(20 * MIB),
            ..b.clone()
        };
        assert_eq!(files_words(&heap), None);
    }

    #[test]
    fn a_written_disk_file_says_its_dirty_pages_are_not_known_per_file() {
        let mut mapped = file("/db/bolt.db", 40 * MIB, false);
        (mapped.open, mapped.mapped, mapped.dirty) = (true, true, Some(MIB));
        let b = MemoryBreakdown {
            total: 1000 * MIB,
            anon: Some(200 * MIB),
            shmem: Some(0),
            dirty: Some(4 * MIB),
            writeback: Some(600 * MIB),
            clean_cache: Some(196 * MIB),
            files: Some(FilesAtPeak {
                at_s: 5.2,
                counted: true,
                incomplete: true,
                files: vec![file("/db/copy.db", 748 * MIB, false), mapped],
            }),
            ..MemoryBreakdown::default()
        };
        let words = files_words(&b).unwrap();
        assert!(
            words.starts_with(
                "files in memory at 5.2 s (mincore): 800 MiB of page cache, 748 MiB of it \
                 /db/copy.db (open), 40.0 MiB /db/bolt.db (open, mapped, dirty 1.00 MiB in its \
                 mappings); the kernel tells no dirty count per file for a file only open; the \
                 listing stopped at its cap"
            ),
            "{words}"
        );
        // Lengths only, when the pages were never counted.
        let mut lengths = b.clone();
        let l = lengths.files.as_mut().unwrap();
        l.counted = false;
        l.files[0].resident = None;
        assert!(
            files_words(&lengths)
                .unwrap()
                .starts_with("files held at 5.2 s (their pages not counted): in the page cache, /db/copy.db (748 MiB long, open)"),
            "{:?}",
            files_words(&lengths)
        );
    }

    #[test]
    fn long_paths_keep_their_last_components() {
        assert_eq!(short_path("/a/b"), "/a/b");
        let long = format!("/{}/x/y.db", "d".repeat(80));
        assert_eq!(short_path(&long), "…/x/y.db");
    }
}
