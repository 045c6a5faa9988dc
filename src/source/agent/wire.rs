//! The gops wire format the OpenZiti agent speaks: one new connection per request, 13 magic
//! bytes and one op byte out, then everything up to EOF back. No framing, no status byte: an
//! error comes back as text, and a reply cut short is only visible in its own format.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::source::{BodyTap, FailureKind, FetchError};

/// Written before the op byte of every request.
pub const MAGIC: [u8; 13] = [
    0x01, 0x0B, 0x0A, 0x0D, 0x0E, 0x0C, 0x0A, 0x0F, 0x0E, 0x0F, 0x00, 0x00, 0x0D,
];

/// The only requests heapwatch ever sends. Deliberately closed: the agent serves one request at
/// a time, and 0x06 (a 30 s CPU profile) or 0x08 (a 5 s trace) would hold it for seconds, so
/// there is no way to put an arbitrary byte on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// 0x01: every goroutine's stack as text (`pprof.Lookup("goroutine").WriteTo(w, 2)`).
    StackTrace,
    /// 0x03: `runtime.MemStats` as `key: value` lines.
    MemStats,
    /// 0x04: the Go version.
    Version,
    /// 0x05: a gzipped pprof heap profile.
    HeapProfile,
    /// 0x07: goroutines, OS threads, GOMAXPROCS, CPUs.
    Stats,
    /// 0x0a: JSON with the application's type, id, alias and version.
    AppInfo,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Op::StackTrace,
        Op::MemStats,
        Op::Version,
        Op::HeapProfile,
        Op::Stats,
        Op::AppInfo,
    ];

    pub fn byte(self) -> u8 {
        match self {
            Op::StackTrace => 0x01,
            Op::MemStats => 0x03,
            Op::Version => 0x04,
            Op::HeapProfile => 0x05,
            Op::Stats => 0x07,
            Op::AppInfo => 0x0a,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::StackTrace => "stack dump",
            Op::MemStats => "memstats",
            Op::Version => "version",
            Op::HeapProfile => "heap profile",
            Op::Stats => "stats",
            Op::AppInfo => "app info",
        }
    }

    /// The request as written on the wire.
    pub fn request(self) -> [u8; 14] {
        let mut out = [0u8; 14];
        out[..13].copy_from_slice(&MAGIC);
        out[13] = self.byte();
        out
    }
}

/// Where an agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `HOST:PORT`.
    Tcp(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
        }
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn connect(endpoint: &Endpoint, timeout: Duration) -> io::Result<Stream> {
    match endpoint {
        // A unix connect does not block on a live listener; a full backlog is rare enough.
        Endpoint::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
        Endpoint::Tcp(addr) => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for a in addr.to_socket_addrs()? {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => return Ok(Stream::Tcp(s)),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

/// A whole reply, and who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub bytes: Vec<u8>,
    /// The agent's process as this pid namespace sees it (unix sockets on Linux); `None` over
    /// TCP, or when the agent lives in a pid namespace that cannot be mapped to ours.
    pub peer_pid: Option<u32>,
}

/// The pid of the process at the other end of a unix socket (SO_PEERCRED: the process that
/// called `listen`), translated into this process's pid namespace.
#[cfg(target_os = "linux")]
fn peer_pid(stream: &impl std::os::fd::AsRawFd) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is open for the life of `stream`; `cred` and `len` are valid for writes
    // of the size passed, which is what SO_PEERCRED fills.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // 0: the peer's namespace is not a descendant of ours, so its pid means nothing here.
    (rc == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

#[cfg(not(target_os = "linux"))]
fn peer_pid(_stream: &impl std::os::fd::AsRawFd) -> Option<u32> {
    None
}

/// Sends one request and reads the reply to EOF, within `timeout` overall and at most
/// `max_bytes` long.
pub fn request(
    endpoint: &Endpoint,
    op: Op,
    timeout: Duration,
    max_bytes: u64,
) -> Result<Answer, FetchError> {
    let fail = |kind: FailureKind, what: String| {
        FetchError::new(
            kind,
            format!("{endpoint}: {} (op 0x{:02x}): {what}", op.name(), op.byte()),
        )
    };
    let deadline = Instant::now() + timeout;
    let mut stream = connect(endpoint, timeout).map_err(|e| {
        let kind = FailureKind::of_io(&e);
        let what = match kind {
            FailureKind::Refused => format!("no agent listens ({e})"),
            _ => format!("cannot connect ({e})"),
        };
        fail(kind, what)
    })?;
    let peer_pid = match &stream {
        Stream::Unix(s) => peer_pid(s),
        Stream::Tcp(_) => None,
    };
    stream
        .set_timeouts(timeout)
        .map_err(|e| fail(FailureKind::Other, e.to_string()))?;
    stream
        .io()
        .write_all(&op.request())
        .map_err(|e| fail(FailureKind::of_io(&e), format!("request not sent ({e})")))?;
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail(
                FailureKind::Timeout,
                format!(
                    "no complete answer in {timeout:?} ({} bytes so far)",
                    reply.len()
                ),
            ));
        }
        stream
            .set_timeouts(left)
            .map_err(|e| fail(FailureKind::Other, e.to_string()))?;
        let read = stream.io().read(&mut buf);
        match take_read(&mut reply, &buf, read, max_bytes, timeout) {
            Ok(true) => {
                return Ok(Answer {
                    bytes: reply,
                    peer_pid,
                });
            }
            Ok(false) => {}
            Err((kind, what)) => return Err(fail(kind, what)),
        }
    }
}

/// [`request`] on tokio's sockets: the same exchange, limits and failure classes, without
/// blocking a thread; dropping the future closes the connection.
/// `tap` is told each piece of the reply as it is read.
pub async fn request_async(
    endpoint: &Endpoint,
    op: Op,
    timeout: Duration,
    max_bytes: u64,
    mut tap: Option<&mut (dyn BodyTap + '_)>,
) -> Result<Answer, FetchError> {
    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::time::timeout_at;

    let fail = |kind: FailureKind, what: String| {
        FetchError::new(
            kind,
            format!("{endpoint}: {} (op 0x{:02x}): {what}", op.name(), op.byte()),
        )
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "connection timed out");
    let connected = match endpoint {
        Endpoint::Unix(path) => timeout_at(deadline, tokio::net::UnixStream::connect(path))
            .await
            .unwrap_or_else(|_| Err(timed_out()))
            .map(|s| {
                let pid = peer_pid(&s);
                (AsyncStream::Unix(s), pid)
            }),
        Endpoint::Tcp(addr) => timeout_at(deadline, tokio::net::TcpStream::connect(addr.as_str()))
            .await
            .unwrap_or_else(|_| Err(timed_out()))
            .map(|s| (AsyncStream::Tcp(s), None)),
    };
    let (mut stream, peer_pid) = connected.map_err(|e| {
        let kind = FailureKind::of_io(&e);
        let what = match kind {
            FailureKind::Refused => format!("no agent listens ({e})"),
            _ => format!("cannot connect ({e})"),
        };
        fail(kind, what)
    })?;
    let sent = match &mut stream {
        AsyncStream::Unix(s) => timeout_at(deadline, s.write_all(&op.request())).await,
        AsyncStream::Tcp(s) => timeout_at(deadline, s.write_all(&op.request())).await,
    };
    sent.unwrap_or_else(|_| Err(timed_out()))
        .map_err(|e| fail(FailureKind::of_io(&e), format!("request not sent ({e})")))?;
    let reader: &mut (dyn AsyncRead + Unpin + Send) = match &mut stream {
        AsyncStream::Unix(s) => s,
        AsyncStream::Tcp(s) => s,
    };
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let read = timeout_at(deadline, reader.read(&mut buf))
            .await
            .unwrap_or_else(|_| Err(timed_out()));
        let before = reply.len();
        match take_read(&mut reply, &buf, read, max_bytes, timeout) {
            Ok(true) => {
                return Ok(Answer {
                    bytes: reply,
                    peer_pid,
                });
            }
            Ok(false) => {
                if let Some(tap) = tap.as_deref_mut() {
                    if reply.len() > before {
                        tap.piece(&reply[before..]);
                    }
                }
            }
            Err((kind, what)) => return Err(fail(kind, what)),
        }
    }
}

enum AsyncStream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

/// One read of a reply, sync or async alike: `Ok(true)` at its end (the agent closes the
/// connection after answering), `Ok(false)` to read on, or the failure with its words.
fn take_read(
    reply: &mut Vec<u8>,
    buf: &[u8],
    read: io::Result<usize>,
    max_bytes: u64,
    timeout: Duration,
) -> Result<bool, (FailureKind, String)> {
    match read {
        Ok(0) => Ok(true),
        Ok(n) => {
            reply.extend_from_slice(&buf[..n]);
            if reply.len() as u64 > max_bytes {
                return Err((
                    FailureKind::TooLarge,
                    format!("reply larger than {max_bytes} bytes"),
                ));
            }
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => {
            let kind = FailureKind::of_io(&e);
            let what = match kind {
                FailureKind::Timeout => format!(
                    "no complete answer in {timeout:?} ({} bytes so far)",
                    reply.len()
                ),
                _ => format!("connection broke after {} bytes ({e})", reply.len()),
            };
            Err((kind, what))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::thread::JoinHandle;

    /// A fake agent: accepts `n` connections, checks each request and answers with `reply(op)`.
    fn fake_agent(path: PathBuf, n: usize, reply: fn(u8) -> Vec<u8>) -> JoinHandle<Vec<[u8; 14]>> {
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..n {
                let (mut s, _) = listener.accept().unwrap();
                let mut req = [0u8; 14];
                s.read_exact(&mut req).unwrap();
                seen.push(req);
                let _ = s.write_all(&reply(req[13]));
            }
            seen
        })
    }

    #[test]
    fn no_op_blocks_the_agent() {
        for op in Op::ALL {
            assert!(!matches!(op.byte(), 0x06 | 0x08), "{op:?}");
            assert_eq!(&op.request()[..13], &MAGIC);
        }
    }

    #[test]
    fn a_request_is_magic_then_op_and_the_reply_runs_to_eof() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let server = fake_agent(path.clone(), 2, |op| match op {
            0x07 => b"goroutines: 3\n".to_vec(),
            _ => vec![0xAB; 200_000],
        });
        let ep = Endpoint::Unix(path);
        let stats = request(&ep, Op::Stats, Duration::from_secs(2), 1 << 20).unwrap();
        assert_eq!(stats.bytes, b"goroutines: 3\n");
        if cfg!(target_os = "linux") {
            assert_eq!(
                stats.peer_pid,
                Some(std::process::id()),
                "the listener is ours"
            );
        }
        let big = request(&ep, Op::HeapProfile, Duration::from_secs(2), 1 << 20).unwrap();
        assert_eq!(big.bytes.len(), 200_000);
        let seen = server.join().unwrap();
        assert_eq!(seen[0][..13], MAGIC);
        assert_eq!(seen[0][13], 0x07);
        assert_eq!(seen[1][13], 0x05);
    }

    #[test]
    fn a_missing_socket_is_refused_and_a_silent_agent_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let gone = Endpoint::Unix(dir.path().join("gone.sock"));
        let e = request(&gone, Op::Stats, Duration::from_millis(200), 1024).unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused, "{e}");

        // A socket file nobody listens on any more (the process was killed).
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let e = request(
            &Endpoint::Unix(stale),
            Op::Stats,
            Duration::from_millis(200),
            1024,
        )
        .unwrap_err();
        assert_eq!(e.kind, FailureKind::Refused, "{e}");

        let path = dir.path().join("silent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let hold = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_millis(600));
            drop(s);
        });
        let started = Instant::now();
        let e = request(
            &Endpoint::Unix(path),
            Op::Stats,
            Duration::from_millis(200),
            1024,
        )
        .unwrap_err();
        assert_eq!(e.kind, FailureKind::Timeout, "{e}");
        assert!(started.elapsed() < Duration::from_millis(500));
        hold.join().unwrap();
    }

    #[test]
    fn a_reply_over_the_cap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let server = fake_agent(path.clone(), 1, |_| vec![1; 300_000]);
        let e = request(
            &Endpoint::Unix(path),
            Op::HeapProfile,
            Duration::from_secs(2),
            100_000,
        )
        .unwrap_err();
        assert_eq!(e.kind, FailureKind::TooLarge);
        server.join().unwrap();
    }

    #[test]
    fn tcp_endpoints_work_too() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 14];
            s.read_exact(&mut req).unwrap();
            s.write_all(b"go1.26.8\n").unwrap();
            req[13]
        });
        let reply = request(
            &Endpoint::Tcp(addr.to_string()),
            Op::Version,
            Duration::from_secs(2),
            1024,
        )
        .unwrap();
        assert_eq!(reply.bytes, b"go1.26.8\n");
        assert_eq!(reply.peer_pid, None);
        assert_eq!(server.join().unwrap(), 0x04);
    }
}
