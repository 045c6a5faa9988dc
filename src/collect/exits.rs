//! How a watched process ended, from the kernel: the process-event connector (netlink,
//! `NETLINK_CONNECTOR`, root only) reports every exit on the machine with its wait status, so
//! the exit code or signal of a process heapwatch did not start is known, not guessed. Where
//! the connector cannot be opened (not root, a kernel without it), there is no watcher and the
//! run says less.
//!
//! # Exit statuses from the process-event connector
//!
//! `waitpid` only works for children, and a process not started by heapwatch leaves no other
//! trace of its status. The connector (`NETLINK_CONNECTOR`, `PROC_EVENT_EXIT`) reports every exit
//! with its wait status; it needs CAP_NET_ADMIN (root) and costs one blocking thread. Written with
//! `libc` (already a dependency), ~100 lines, rather than a crate. Without root it is off and the
//! run says less.
//!
//! # One process-event socket for a node
//!
//! The connector reports every exit on the machine, so one socket and thread serve every
//! container `watch` records; each collector holds a `subscriber()` and takes only its own pids'
//! ends. An end is judged 20 ms after its event (`SETTLE`): a process still running then (not a
//! zombie) exec'd from a thread other than its first, whose end the kernel reports under the pid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One watched process's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    pub pid: u32,
    /// Unix ms when the event was read.
    pub t_ms: i64,
    /// Set when the process exited by itself.
    pub exit_code: Option<i32>,
    /// Set when a signal ended it (9 for an OOM kill, 2 for Ctrl-C, …).
    pub signal: Option<i32>,
}

impl ProcessExit {
    /// Splits a wait status as `waitpid` would.
    pub fn from_wait_status(pid: u32, t_ms: i64, status: u32) -> ProcessExit {
        let signal = status & 0x7f;
        ProcessExit {
            pid,
            t_ms,
            exit_code: (signal == 0).then_some(((status >> 8) & 0xff) as i32),
            signal: (signal != 0).then_some(signal as i32),
        }
    }
}

/// How long after an exit event its process is looked at again: time for an exec's new
/// program to take the pid over (see [`still_running`]).
const SETTLE: Duration = Duration::from_millis(20);

/// Whether `pid` runs on, not a zombie: a multithreaded process that calls `execve` from a
/// thread other than its first has that first thread end, and the kernel reports the end
/// under the process's pid, although the process lives on as the new program (as a Go
/// program's `syscall.Exec` usually does). A process that really ended is a zombie, or gone.
fn still_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    match stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
    {
        Some(state) => !matches!(state, "Z" | "X" | "x"),
        None => false,
    }
}

#[derive(Default)]
struct Shared {
    /// Each watched pid, with the subscriber it is reported to.
    watched: Mutex<HashMap<u32, usize>>,
    /// Per subscriber, the ends heard and not yet taken, with when each was heard.
    heard: Mutex<HashMap<usize, Vec<(ProcessExit, Instant)>>>,
    next_id: AtomicUsize,
}

/// The connector's socket and its reading thread, shared by every [`ExitWatcher`] made from
/// one [`ExitWatcher::start`] (every container of a node: one socket, one thread, rather than
/// each hearing every exit on the machine). Stopped when the last of them is dropped.
struct Hub {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.lock().ok().and_then(|mut h| h.take()) {
            let _ = h.join();
        }
    }
}

/// One subscriber's view of the node's process ends: only those of the pids it watches.
pub struct ExitWatcher {
    hub: Arc<Hub>,
    id: usize,
}

impl ExitWatcher {
    /// Subscribes to process events; an error says why there will be no exit statuses.
    pub fn start() -> Result<ExitWatcher, String> {
        let socket = connector::subscribe()?;
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, flag) = (shared.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("heapwatch-exits".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    for (pid, status) in socket.exits() {
                        let to = s.watched.lock().ok().and_then(|w| w.get(&pid).copied());
                        if let Some(to) = to {
                            let exit =
                                ProcessExit::from_wait_status(pid, crate::time::now_ms(), status);
                            if let Ok(mut heard) = s.heard.lock() {
                                heard.entry(to).or_default().push((exit, Instant::now()));
                            }
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the exit watcher thread: {e}"))?;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(ExitWatcher {
            hub: Arc::new(Hub {
                shared,
                stop,
                handle: Mutex::new(Some(handle)),
            }),
            id,
        })
    }

    /// Another subscriber on the same socket and thread, told only of its own pids' ends.
    pub fn subscriber(&self) -> ExitWatcher {
        ExitWatcher {
            hub: self.hub.clone(),
            id: self.hub.shared.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// From now on, this process's end is reported (to this subscriber only).
    pub fn watch(&self, pid: u32) {
        if pid == 0 {
            return;
        }
        if let Ok(mut w) = self.hub.shared.watched.lock() {
            w.insert(pid, self.id);
        }
    }

    /// The watched processes that ended since the last call, oldest first. An end heard less
    /// than `SETTLE` ago is waited for (rare, and at most that long), so none is left behind
    /// by the collector's last call; one whose process runs on was an exec, not an end.
    pub fn take(&self) -> Vec<ProcessExit> {
        let mine = self
            .hub
            .shared
            .heard
            .lock()
            .ok()
            .and_then(|mut h| h.remove(&self.id))
            .unwrap_or_default();
        if let Some((_, newest)) = mine.last() {
            std::thread::sleep(SETTLE.saturating_sub(newest.elapsed()));
        }
        mine.into_iter()
            .map(|(exit, _)| exit)
            .filter(|exit| !still_running(exit.pid))
            .collect()
    }

    /// This subscriber is done: its pids are no longer watched. The thread ends with the last
    /// subscriber.
    pub fn finish(&self) {
        if let Ok(mut w) = self.hub.shared.watched.lock() {
            w.retain(|_, to| *to != self.id);
        }
        if let Ok(mut h) = self.hub.shared.heard.lock() {
            h.remove(&self.id);
        }
    }
}

impl Drop for ExitWatcher {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The netlink side, in the kernel's own layout (`linux/connector.h`, `linux/cn_proc.h`).
mod connector {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const CN_IDX_PROC: u32 = 1;
    const CN_VAL_PROC: u32 = 1;
    const PROC_CN_MCAST_LISTEN: u32 = 1;
    const PROC_EVENT_EXIT: u32 = 0x8000_0000;
    const NLMSG_HDR: usize = 16;
    const CN_MSG: usize = 20;
    /// `what`, `cpu`, `timestamp_ns` before the event's own fields.
    const EVENT_HDR: usize = 16;

    pub struct Socket(OwnedFd);

    pub fn subscribe() -> Result<Socket, String> {
        // SAFETY: plain socket(2); the fd is owned from here on.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_CONNECTOR,
            )
        };
        if fd < 0 {
            return Err(format!(
                "process events: socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: fd is a fresh, open descriptor nobody else owns.
        let socket = Socket(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        // SAFETY: addr is a valid sockaddr_nl of the size passed.
        let rc = unsafe {
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc != 0 {
            return Err(format!(
                "process events: bind: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut message = Vec::with_capacity(NLMSG_HDR + CN_MSG + 4);
        let total = (NLMSG_HDR + CN_MSG + 4) as u32;
        message.extend_from_slice(&total.to_ne_bytes());
        message.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        message.extend_from_slice(&0u16.to_ne_bytes());
        message.extend_from_slice(&0u32.to_ne_bytes());
        message.extend_from_slice(&std::process::id().to_ne_bytes());
        for v in [CN_IDX_PROC, CN_VAL_PROC, 0, 0] {
            message.extend_from_slice(&v.to_ne_bytes());
        }
        message.extend_from_slice(&4u16.to_ne_bytes());
        message.extend_from_slice(&0u16.to_ne_bytes());
        message.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: message is valid for reads of its length.
        let sent = unsafe { libc::send(fd, message.as_ptr().cast(), message.len(), 0) };
        if sent < 0 {
            return Err(format!(
                "process events: subscribe: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Every exit on the machine comes through here: room for bursts of them, so a watched
        // one is not dropped with the rest when the buffer fills.
        let size: libc::c_int = 1 << 20;
        // SAFETY: size is valid for reads of its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        // Wake up now and then to see whether the watcher should stop.
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: timeval is valid for reads of its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
        }
        Ok(socket)
    }

    impl Socket {
        /// The exits of thread-group leaders (processes) in the next datagram, as (pid, wait
        /// status); empty after the receive timeout.
        pub fn exits(&self) -> Vec<(u32, u32)> {
            let mut buf = [0u8; 8192];
            // SAFETY: buf is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                return Vec::new();
            }
            parse(&buf[..n as usize])
        }
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    /// Every process exit in a datagram of netlink messages.
    pub fn parse(mut bytes: &[u8]) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        while let Some(len) = u32_at(bytes, 0).map(|l| l as usize) {
            if len < NLMSG_HDR || len > bytes.len() {
                break;
            }
            let event = NLMSG_HDR + CN_MSG;
            if u32_at(bytes, event) == Some(PROC_EVENT_EXIT) {
                let fields = event + EVENT_HDR;
                if let (Some(pid), Some(tgid), Some(status)) = (
                    u32_at(bytes, fields),
                    u32_at(bytes, fields + 4),
                    u32_at(bytes, fields + 8),
                ) {
                    if pid == tgid {
                        out.push((pid, status));
                    }
                }
            }
            // Messages are 4-byte aligned.
            let next = (len + 3) & !3;
            bytes = bytes.get(next..).unwrap_or_default();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_split_into_exit_codes_and_signals() {
        let e = ProcessExit::from_wait_status(1, 0, 3 << 8);
        assert_eq!((e.exit_code, e.signal), (Some(3), None));
        let k = ProcessExit::from_wait_status(1, 0, 9);
        assert_eq!((k.exit_code, k.signal), (None, Some(9)));
        let core = ProcessExit::from_wait_status(1, 0, 0x80 | 11);
        assert_eq!(core.signal, Some(11));
    }

    #[test]
    fn a_datagram_gives_the_exits_of_processes_not_threads() {
        let mut d = Vec::new();
        for (pid, tgid, status) in [(10u32, 10u32, 2u32), (11, 10, 0)] {
            let mut m = vec![0u8; 16 + 20 + 16 + 16];
            let len = m.len() as u32;
            m[0..4].copy_from_slice(&len.to_ne_bytes());
            m[36..40].copy_from_slice(&0x8000_0000u32.to_ne_bytes());
            m[52..56].copy_from_slice(&pid.to_ne_bytes());
            m[56..60].copy_from_slice(&tgid.to_ne_bytes());
            m[60..64].copy_from_slice(&status.to_ne_bytes());
            d.extend(m);
        }
        assert_eq!(connector::parse(&d), vec![(10, 2)]);
        assert!(connector::parse(&[1, 2, 3]).is_empty());
        assert!(connector::parse(&d[..40]).is_empty());
    }

    #[test]
    fn the_end_of_a_real_process_is_seen_with_its_exit_code_when_root() {
        let watcher = match ExitWatcher::start() {
            Ok(w) => w,
            Err(e) => {
                use crate::prerequisite::{Need, skip};
                skip(Need::Root, &format!("no process events here ({e})"));
                return;
            }
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3; exit 7"])
            .spawn()
            .unwrap();
        watcher.watch(child.id());
        child.wait().unwrap();
        let started = std::time::Instant::now();
        let mut seen = Vec::new();
        while seen.is_empty() && started.elapsed() < std::time::Duration::from_secs(3) {
            seen = watcher.take();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!((seen[0].pid, seen[0].exit_code), (child.id(), Some(7)));
        watcher.finish();
    }

    #[test]
    fn subscribers_of_one_watcher_each_take_only_their_own_processes_ends() {
        let first = match ExitWatcher::start() {
            Ok(w) => w,
            Err(e) => {
                use crate::prerequisite::{Need, skip};
                skip(Need::Root, &format!("no process events here ({e})"));
                return;
            }
        };
        let second = first.subscriber();
        let spawn = |code: u32| {
            std::process::Command::new("sh")
                .args(["-c", &format!("sleep 0.3; exit {code}")])
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (spawn(3), spawn(4));
        first.watch(a.id());
        second.watch(b.id());
        a.wait().unwrap();
        b.wait().unwrap();
        let started = std::time::Instant::now();
        let (mut one, mut two) = (Vec::new(), Vec::new());
        while (one.is_empty() || two.is_empty())
            && started.elapsed() < std::time::Duration::from_secs(3)
        {
            one.extend(first.take());
            two.extend(second.take());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let seen = |v: &[ProcessExit]| v.iter().map(|e| (e.pid, e.exit_code)).collect::<Vec<_>>();
        assert_eq!(seen(&one), [(a.id(), Some(3))]);
        assert_eq!(seen(&two), [(b.id(), Some(4))]);
        // The first one gone, the second still hears its own.
        drop(first);
        let mut c = spawn(5);
        second.watch(c.id());
        c.wait().unwrap();
        let started = std::time::Instant::now();
        let mut three = Vec::new();
        while three.is_empty() && started.elapsed() < std::time::Duration::from_secs(3) {
            three.extend(second.take());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(seen(&three), [(c.id(), Some(5))]);
    }
}
