//! The regular files a process holds, read from outside: its descriptors (`/proc/PID/fd`) and
//! file mappings (`/proc/PID/maps`), each file's length and whether it lives on tmpfs, and when
//! asked its pages in memory (`mincore` over a read-only shared mapping, as `fincore` counts)
//! with the dirty pages of its shared mappings (`/proc/PID/smaps`). Bounded in descriptors and
//! time; nothing but a regular file is ever opened.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::model::memory::{HeldFile, HeldFiles};

/// How much one listing may cost.
#[derive(Debug, Clone, Copy)]
pub struct FileBudget {
    /// Descriptors looked at, at most: a process with thousands of sockets costs no more.
    pub max_fds: usize,
    /// Files kept, the largest first.
    pub keep: usize,
    /// Time for finding the files among the descriptors, and as much again among the mappings.
    pub list_time: Duration,
    /// Time for counting their resident pages, largest first; those not reached stay unknown.
    pub measure_time: Duration,
}

impl Default for FileBudget {
    fn default() -> FileBudget {
        FileBudget {
            max_fds: 4096,
            keep: 16,
            list_time: Duration::from_millis(10),
            measure_time: Duration::from_millis(25),
        }
    }
}

/// `statfs` type of tmpfs, which shared memory, `/dev/shm` and memfds live on too.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// A file by device and inode: one file open twice, or open and mapped, is one.
type FileKey = (u64, u64);

/// A file found, with a path that opens it again.
struct Found {
    file: HeldFile,
    /// `/proc/PID/fd/N` or `/proc/PID/map_files/…`, which reach even an unlinked file, else
    /// the path the maps name.
    open_by: PathBuf,
}

/// The regular files process `pid` holds, the largest `budget.keep` of them; with `measure`,
/// their resident pages and the dirty pages of their shared mappings. `None` when the process
/// is gone or its descriptors cannot be read.
pub fn held_files(pid: u32, budget: &FileBudget, measure: bool) -> Option<HeldFiles> {
    let started = Instant::now();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let mut found: HashMap<FileKey, Found> = HashMap::new();
    let mut incomplete = false;
    let mut tmpfs_devs: HashMap<u64, bool> = HashMap::new();
    let fd_dir = proc_dir.join("fd");
    for (n, entry) in fs::read_dir(&fd_dir).ok()?.enumerate() {
        if n >= budget.max_fds || (n % 32 == 31 && started.elapsed() > budget.list_time) {
            incomplete = true;
            break;
        }
        let Ok(entry) = entry else { continue };
        let link = entry.path();
        // Sockets, pipes and anonymous inodes name no path: nothing to stat.
        let Ok(target) = fs::read_link(&link) else {
            continue;
        };
        if !target.as_os_str().as_bytes().starts_with(b"/") {
            continue;
        }
        let Ok(meta) = fs::metadata(&link) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let key = (meta.dev(), meta.ino());
        let shmem = *tmpfs_devs
            .entry(meta.dev())
            .or_insert_with(|| on_tmpfs(&link));
        found.entry(key).or_insert(Found {
            file: HeldFile {
                path: target.to_string_lossy().into_owned(),
                size: meta.size(),
                open: true,
                shmem,
                ..HeldFile::default()
            },
            open_by: link,
        });
    }
    let maps = read_capped(&proc_dir.join("maps"), 4 << 20).unwrap_or_default();
    // The maps get a budget of their own: a process whose descriptors took all of the first
    // still has its mapped files named.
    for line in maps.lines() {
        if started.elapsed() > 2 * budget.list_time {
            incomplete = true;
            break;
        }
        let Some(m) = parse_map_line(line) else {
            continue;
        };
        if let Some(f) = found.get_mut(&m.key) {
            f.file.mapped = true;
            continue;
        }
        // A mapped file not open: by the path the maps name when it is still that file, else
        // through map_files (an unlinked one, SysV shared memory).
        let by_path = Path::new(m.path);
        let via = proc_dir.join("map_files").join(m.range);
        let (meta, open_by) = match fs::metadata(by_path) {
            Ok(meta) if (meta.dev(), meta.ino()) == m.key => (meta, by_path.to_path_buf()),
            _ => match fs::metadata(&via) {
                Ok(meta) => (meta, via),
                Err(_) => continue,
            },
        };
        if !meta.is_file() {
            continue;
        }
        let shmem = *tmpfs_devs
            .entry(meta.dev())
            .or_insert_with(|| on_tmpfs(&open_by));
        found.insert(
            m.key,
            Found {
                file: HeldFile {
                    path: m.path.to_string(),
                    size: meta.size(),
                    mapped: true,
                    shmem,
                    ..HeldFile::default()
                },
                open_by,
            },
        );
    }
    let mut files: Vec<(FileKey, Found)> = found.into_iter().collect();
    files.sort_by(|(_, a), (_, b)| {
        (b.file.size.cmp(&a.file.size)).then_with(|| a.file.path.cmp(&b.file.path))
    });
    let more = files.len().saturating_sub(budget.keep);
    files.truncate(budget.keep);
    let mut measured = false;
    if measure {
        let deadline = Instant::now() + budget.measure_time;
        for (key, f) in &mut files {
            if Instant::now() > deadline {
                break;
            }
            f.file.resident = resident_of(&f.open_by, *key, f.file.size, deadline);
            measured |= f.file.resident.is_some();
        }
        if files.iter().any(|(_, f)| f.file.mapped) {
            let smaps = read_capped(&proc_dir.join("smaps"), 16 << 20).unwrap_or_default();
            let dirty = shared_dirty(&smaps);
            for (key, f) in &mut files {
                if let Some(&d) = dirty.get(key) {
                    f.file.dirty = Some(d);
                }
            }
        }
    }
    Some(HeldFiles {
        pid,
        files: files.into_iter().map(|(_, f)| f.file).collect(),
        more: u32::try_from(more).unwrap_or(u32::MAX),
        incomplete,
        measured,
    })
}

/// At most `max` bytes of a kernel text file.
fn read_capped(path: &Path, max: usize) -> Option<String> {
    let file = fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(file, max as u64), &mut buf).ok()?;
    String::from_utf8(buf).ok()
}

/// One file mapping of `/proc/PID/maps`.
struct MapLine<'a> {
    /// `start-end`, as `map_files` names it.
    range: &'a str,
    /// `rw-s`: shared when the fourth is `s`.
    perms: &'a str,
    key: FileKey,
    path: &'a str,
}

/// `start-end perms offset major:minor inode path`; `None` for anonymous mappings and
/// pseudo-paths (`[heap]`, `[stack]`).
fn parse_map_line(line: &str) -> Option<MapLine<'_>> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let path = fields.next()?.trim_start();
    if inode == 0 || !path.starts_with('/') {
        return None;
    }
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some(MapLine {
        range,
        perms,
        key: (libc::makedev(major, minor), inode),
        path,
    })
}

/// Dirty pages of each file's shared mappings, by file: `Shared_Dirty` + `Private_Dirty` of
/// `smaps` ("private" there means mapped by this process alone). A private mapping's dirty
/// pages are its own copies, no page of the file: left out.
fn shared_dirty(smaps: &str) -> HashMap<FileKey, u64> {
    let mut dirty = HashMap::new();
    let mut current: Option<FileKey> = None;
    for line in smaps.lines() {
        // A mapping's header (`start-end perms …`) where the lines before were `Name: value`.
        if !line
            .split_ascii_whitespace()
            .next()
            .is_some_and(|f| f.ends_with(':'))
        {
            current = parse_map_line(line)
                .filter(|m| m.perms.as_bytes().get(3) == Some(&b's'))
                .map(|m| m.key);
            continue;
        }
        let Some(key) = current else { continue };
        for name in ["Shared_Dirty:", "Private_Dirty:"] {
            if let Some(kb) = line
                .strip_prefix(name)
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                *dirty.entry(key).or_insert(0) += kb * 1024;
            }
        }
    }
    dirty
}

/// Whether the file behind `path` lives on tmpfs (or shared memory, which is tmpfs).
fn on_tmpfs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes only into the zeroed struct it is given; `c` is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)] // `f_type` is i64 on some targets, u32 on others.
    let kind = st.f_type as i64;
    rc == 0 && kind == TMPFS_MAGIC
}

/// Resident bytes of the file reached by `path`, when it is still the file `key` names.
fn resident_of(path: &Path, key: FileKey, size: u64, deadline: Instant) -> Option<u64> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // The descriptor may have been closed and its number reused since it was listed.
    if !meta.is_file() || (meta.dev(), meta.ino()) != key {
        return None;
    }
    resident_bytes(&file, size.min(meta.size()), deadline)
        .ok()
        .flatten()
}

/// Bytes of a mapping window: 64 Ki pages of 4 KiB, a 64 KiB vector for `mincore`.
const WINDOW_PAGES: u64 = 64 << 10;

/// How many of the first `len` bytes of `file` are in memory, in whole pages: `mincore` over
/// a read-only shared mapping of it, a window at a time, as `fincore` does. Nothing is read
/// and no page is faulted in. `Ok(None)` when `deadline` passed before the end.
pub fn resident_bytes(file: &fs::File, len: u64, deadline: Instant) -> io::Result<Option<u64>> {
    let page = page_size();
    let window = WINDOW_PAGES * page;
    let mut vec = vec![0u8; WINDOW_PAGES as usize];
    let mut resident_pages = 0u64;
    let mut offset = 0u64;
    while offset < len {
        if Instant::now() > deadline {
            return Ok(None);
        }
        let span = (len - offset).min(window);
        let pages = span.div_ceil(page) as usize;
        let map_len = usize::try_from(span).map_err(io::Error::other)?;
        let map_offset = libc::off_t::try_from(offset).map_err(io::Error::other)?;
        // SAFETY: a fresh read-only mapping of a file this function holds open; the mapping is
        // never read through (no page is faulted in), only asked about, and unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                map_offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `addr` is the page-aligned start of a mapping of `map_len` bytes; `vec` has
        // room for one byte per page of it.
        let rc = unsafe { libc::mincore(addr, map_len, vec.as_mut_ptr()) };
        let err = io::Error::last_os_error();
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(addr, map_len) };
        if rc != 0 {
            return Err(err);
        }
        resident_pages += vec[..pages].iter().filter(|&&b| b & 1 == 1).count() as u64;
        offset += span;
    }
    Ok(Some(
        (resident_pages * page).min(len.next_multiple_of(page)),
    ))
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; it has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const MIB: u64 = 1 << 20;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// `posix_fadvise(DONTNEED)` after a flush: the kernel drops the file's clean pages.
    fn drop_cache(file: &fs::File) {
        file.sync_all().unwrap();
        // SAFETY: advice on a descriptor this test holds open; no memory is touched.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
    }

    /// mincore counts what is in memory of a real file: all of it once written, none once the
    /// kernel dropped it (on a disk's file system), the part read back, and no hole.
    #[test]
    fn resident_pages_of_a_real_file_are_counted_as_fincore_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all(&vec![7u8; (8 * MIB) as usize]).unwrap();
        let resident = |f: &fs::File, len| resident_bytes(f, len, far()).unwrap().unwrap();
        assert_eq!(resident(&file, 8 * MIB), 8 * MIB, "just written");
        assert_eq!(resident(&file, 3 * MIB), 3 * MIB, "the first 3 MiB asked");
        if on_tmpfs(&path) {
            let _ = std::io::stderr().write_all(
                b"procfiles test: the temporary directory is on tmpfs, whose pages cannot be \
                  dropped: the eviction part is left out\n",
            );
        } else {
            drop_cache(&file);
            assert!(resident(&file, 8 * MIB) < MIB, "dropped");
            // Read the first MiB back: that much and readahead's share, not the whole file.
            let mut buf = vec![0u8; MIB as usize];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 0).unwrap();
            let back = resident(&file, 8 * MIB);
            assert!((MIB..=4 * MIB).contains(&back), "{back}");
        }
        // A hole (the file extended, nothing written) holds no page.
        file.set_len(72 * MIB).unwrap();
        let whole = resident(&file, 72 * MIB);
        assert!(whole <= 8 * MIB, "{whole}");
        // A window past the first (64 Ki pages) is counted too: a sparse file of its own with
        // one page written there (on the file above, readahead of the read back may still be
        // landing, and a difference of two counts of it was off by its pages, 1 run in 3).
        let sparse = tempfile::tempfile_in(dir.path()).unwrap();
        sparse.set_len(72 * MIB).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&sparse, &[1u8; 4096], 70 * MIB).unwrap();
        assert_eq!(resident(&sparse, 72 * MIB), 4096);
        // A deadline already passed counts nothing.
        let past = Instant::now() - Duration::from_millis(1);
        assert_eq!(resident_bytes(&file, 8 * MIB, past).unwrap(), None);
        assert_eq!(resident_bytes(&file, 0, far()).unwrap(), Some(0));
    }

    /// This process's own files, read as the sampler reads another's: a file open, its pages;
    /// a file on tmpfs said to be shared memory; a shared mapping's dirty pages; no socket.
    #[test]
    fn a_process_s_open_and_mapped_files_are_listed_with_their_pages() {
        let dir = tempfile::tempdir().unwrap();
        let open_path = dir.path().join("open.bin");
        let mut open = fs::File::create(&open_path).unwrap();
        open.write_all(&vec![1u8; (3 * MIB) as usize]).unwrap();
        let _socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // A file on tmpfs, when this machine has /dev/shm.
        let shm = tempfile::tempdir_in("/dev/shm").ok();
        let shm_file = shm.as_ref().map(|d| {
            let path = d.path().join("shm.bin");
            let mut f = fs::File::create(&path).unwrap();
            f.write_all(&vec![2u8; (2 * MIB) as usize]).unwrap();
            (path, f)
        });
        // A file mapped shared and written through the mapping: 3 dirty pages.
        let mapped_path = dir.path().join("mapped.bin");
        let mapped = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&mapped_path)
            .unwrap();
        mapped.set_len(MIB).unwrap();
        let len = MIB as usize;
        // SAFETY: a fresh shared mapping of a file this test holds, written within its length
        // and unmapped before the test ends.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                mapped.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        for page in 0..3 {
            // SAFETY: within the mapping made above.
            unsafe { *(addr as *mut u8).add(page * 4096) = 9 };
        }
        drop(mapped);

        let held = held_files(std::process::id(), &FileBudget::default(), true).unwrap();
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(addr, len) };
        let find = |p: &Path| {
            held.files
                .iter()
                .find(|f| Path::new(&f.path) == p)
                .unwrap_or_else(|| panic!("{} not in {held:#?}", p.display()))
        };
        assert!(held.measured);
        assert!(
            held.files.iter().all(|f| f.path.starts_with('/')),
            "{held:#?}"
        );
        let o = find(&open_path);
        assert!(o.open && !o.mapped, "{o:?}");
        assert_eq!((o.size, o.resident), (3 * MIB, Some(3 * MIB)));
        assert_eq!(o.dirty, None, "no dirty count for a file only open");
        let m = find(&mapped_path);
        assert!(m.mapped && !m.open && !m.shmem, "{m:?}");
        assert_eq!(m.size, MIB);
        assert_eq!(m.dirty, Some(3 * 4096), "{m:?}");
        // The pages written, and those the faults read ahead of them.
        assert!(
            m.resident.is_some_and(|r| (3 * 4096..=MIB).contains(&r)),
            "{m:?}"
        );
        if let Some((path, _f)) = &shm_file {
            let s = find(path);
            assert!(s.shmem && s.open, "{s:?}");
            assert_eq!(s.resident, Some(2 * MIB));
        }
        // Largest first.
        assert!(held.files.windows(2).all(|w| w[0].size >= w[1].size));

        // Without counting: the same files, no pages.
        let listed = held_files(std::process::id(), &FileBudget::default(), false).unwrap();
        assert!(!listed.measured);
        assert!(
            listed
                .files
                .iter()
                .all(|f| f.resident.is_none() && f.dirty.is_none())
        );
        // Capped: no descriptor looked at, said to be incomplete; one file kept, the rest
        // counted.
        let capped = FileBudget {
            max_fds: 0,
            keep: 1,
            ..FileBudget::default()
        };
        let few = held_files(std::process::id(), &capped, false).unwrap();
        assert!(
            few.incomplete && few.files.len() == 1 && few.more > 0,
            "{few:#?}"
        );
        assert!(few.files.iter().all(|f| !f.open));
        drop(open);
    }

    #[test]
    fn maps_lines_name_files_by_device_and_inode() {
        let m = parse_map_line(
            "7f1c2a000000-7f1c2b000000 r--s 00000000 00:1a 123456                     /dev/shm/x (deleted)",
        )
        .unwrap();
        assert_eq!(m.range, "7f1c2a000000-7f1c2b000000");
        assert_eq!(m.key, (libc::makedev(0, 0x1a), 123456));
        assert_eq!(m.path, "/dev/shm/x (deleted)");
        assert!(
            parse_map_line("7ffd-7ffe rw-p 00000000 00:00 0                          [stack]")
                .is_none()
        );
        assert!(parse_map_line("c000000000-c004000000 rw-p 00000000 00:00 0 ").is_none());
        let smaps = "00400000-00500000 r-xp 00000000 08:01 77 /bin/x\nShared_Dirty: 4 kB\n\
                     7f00-7f10 rw-s 00000000 08:01 78 /db\nShared_Dirty: 8 kB\nPrivate_Dirty: 4 kB\n\
                     VmFlags: rd wr sh\n7f20-7f30 rw-p 00000000 00:00 0 \nPrivate_Dirty: 64 kB\n";
        let dirty = shared_dirty(smaps);
        assert_eq!(dirty.get(&(libc::makedev(8, 1), 78)), Some(&(12 * 1024)));
        assert_eq!(
            dirty.len(),
            1,
            "a private mapping's dirty pages are its own: {dirty:?}"
        );
    }
}
