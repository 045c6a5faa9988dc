//! What `/proc/PID` says that discovery needs beyond the pid and start time (which
//! `source::procfind` reads): which file the process runs, and its pid in its own namespace.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::cgroups::read_into;
use crate::source::procfind::{ProcessId, parse_stat};

/// The file a process runs, by identity rather than path: the same binary in two containers
/// is judged once, and a process that execs into another binary is seen to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExeId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
}

/// `stat` through `/proc/PID/exe`. `NotFound` for a kernel thread or a process gone.
pub fn exe_id(pid: u32) -> io::Result<ExeId> {
    fs::metadata(format!("/proc/{pid}/exe")).map(|m| ExeId::of(&m))
}

/// The executable opened, with the identity of the file opened (`fstat` of the descriptor,
/// not a second look at the path): what is judged is what is named, even when the process
/// execs between the two.
pub fn open_exe(pid: u32) -> io::Result<(fs::File, ExeId)> {
    let file = fs::File::open(format!("/proc/{pid}/exe"))?;
    let id = ExeId::of(&file.metadata()?);
    Ok((file, id))
}

impl ExeId {
    fn of(m: &fs::Metadata) -> ExeId {
        ExeId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
        }
    }
}

/// The executable's path as the process sees its file system.
pub fn exe_path(pid: u32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `NSpid` line of `/proc/PID/status`: the pid in each PID namespace from this one down
/// to the process's own.
pub fn ns_pids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The process's pid inside its own PID namespace, when it is in a deeper one than ours.
pub fn own_ns_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let pids = ns_pids(&status);
    (pids.len() > 1).then(|| pids.last().copied()).flatten()
}

/// The kernel's per-task flag of a kernel thread (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// The live process with this pid (a zombie, or one being torn down, is gone), as
/// `source::procfind::ProcessId::of` judges it, with `buf` reused from call to call.
pub fn process_id(pid: u32, buf: &mut Vec<u8>) -> Option<ProcessId> {
    read_into(Path::new(&format!("/proc/{pid}/stat")), buf).ok()?;
    ProcessId::from_stat(pid, &String::from_utf8_lossy(buf))
}

/// Whether this pid is a kernel thread (flags, field 9 of `/proc/PID/stat`).
pub fn is_kernel_thread(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| parse_stat(&stat))
        .is_some_and(|(_, flags, _)| flags & PF_KTHREAD != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_its_pid_and_start_time_as_procfind_says() {
        let mut buf = Vec::new();
        let me = std::process::id();
        assert_eq!(process_id(me, &mut buf), ProcessId::of(me));
        assert!(process_id(me, &mut buf).is_some());
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000";
        assert_eq!(parse_stat(stat), Some(('S', 4194560, 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn nspid_lists_one_pid_per_namespace() {
        assert_eq!(
            ns_pids("Name:\tx\nNSpid:\t4242\t17\t1\nNSpgid:\t1\n"),
            [4242, 17, 1]
        );
        assert_eq!(ns_pids("NSpid:\t99\n"), [99]);
        assert_eq!(ns_pids("Name:\told kernel\n"), Vec::<u32>::new());
        assert_eq!(own_ns_pid(std::process::id()), None);
    }

    #[test]
    fn the_same_file_is_the_same_identity() {
        let me = exe_id(std::process::id()).unwrap();
        assert_eq!(me, exe_id(std::process::id()).unwrap());
        assert_eq!(open_exe(std::process::id()).unwrap().1, me);
        let path = exe_path(std::process::id());
        assert!(!path.is_empty());
        let m = fs::metadata(path.trim_end_matches(" (deleted)")).unwrap();
        assert_eq!((me.dev, me.ino), (m.dev(), m.ino()));
        // A kernel thread (kthreadd is pid 2 in the host's namespace) has no executable.
        if is_kernel_thread(2) {
            assert!(exe_id(2).is_err());
        }
        assert!(!is_kernel_thread(std::process::id()));
    }
}
