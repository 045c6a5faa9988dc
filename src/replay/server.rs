//! Serves a [`Timeline`] as a live target: over HTTP as Go's net/http/pprof would, or over a
//! unix socket or TCP as the OpenZiti agent would ([`serve_agent`]). The listener exists only
//! while the recorded process was alive, so between boot cycles connections are refused, and
//! the last answer of a cycle can be cut mid-body the way an OOM kill cuts it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::agent::{self, goroutine_text};
use super::conn::Conn;
use super::{State, Timeline, latest, memstats_text};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub listen: SocketAddr,
    /// 2.0 plays the recording twice as fast.
    pub speed: f64,
    /// Cut the last response of each cycle in half, then die.
    pub die_mid_response: bool,
}

/// Where the replayed agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentListen {
    /// A socket file, left behind when a cycle dies (as a SIGKILL leaves the agent's).
    Unix(PathBuf),
    /// Loopback only; port 0 picks one, kept across cycles.
    Tcp(SocketAddr),
}

#[derive(Debug, Clone)]
pub struct AgentReplayOptions {
    pub listen: AgentListen,
    pub speed: f64,
    /// Cut the last heap profile or stack dump of each cycle in half, then die.
    pub die_mid_response: bool,
    /// What op 0x0a answers.
    pub app_id: String,
    pub app_version: Option<String>,
}

#[derive(Debug, Default, Clone)]
pub struct ReplayTally {
    pub requests: u64,
    pub cycles: usize,
    pub cut: u64,
}

/// Plays the timeline over HTTP to its end (or until `stop`); `announce` hears each cycle start
/// and end.
pub fn serve(
    timeline: &Timeline,
    options: &ReplayOptions,
    stop: &AtomicBool,
    announce: &mut dyn FnMut(String),
) -> io::Result<ReplayTally> {
    let mut place = Place::Tcp(options.listen);
    play(
        timeline,
        &mut place,
        options.speed,
        options.die_mid_response,
        stop,
        announce,
        &|conn, cycle, at, cut| answer_http(conn, timeline, cycle, at, cut),
        "listening on",
    )
}

/// Plays the timeline over the agent protocol: heap profiles (0x05), stack dumps (0x01),
/// MemStats (0x03), stats (0x07), version (0x04) and app info (0x0a).
pub fn serve_agent(
    timeline: &Timeline,
    options: &AgentReplayOptions,
    stop: &AtomicBool,
    announce: &mut dyn FnMut(String),
) -> io::Result<ReplayTally> {
    let mut place = match &options.listen {
        AgentListen::Unix(p) => Place::Unix(p.clone()),
        AgentListen::Tcp(a) => Place::Tcp(*a),
    };
    let result = play(
        timeline,
        &mut place,
        options.speed,
        options.die_mid_response,
        stop,
        announce,
        &|conn, cycle, at, cut| {
            let version = options.app_version.as_deref();
            agent::answer(conn, timeline, cycle, at, cut, &options.app_id, version)
        },
        "agent on",
    );
    if let Place::Unix(path) = &place {
        remove_socket(path);
    }
    result
}

enum Place {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Tcp(a) => write!(f, "{a}"),
            Place::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Bound {
    fn accept(&self) -> io::Result<Conn> {
        match self {
            Bound::Tcp(l) => l.accept().map(|(s, _)| Conn::Tcp(s)),
            Bound::Unix(l) => l.accept().map(|(s, _)| Conn::Unix(s)),
        }
    }
}

/// Removes a socket file, and only a socket file.
fn remove_socket(path: &PathBuf) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds, retrying briefly: the previous cycle's socket may still be closing. A TCP port 0 is
/// replaced by the port the kernel picked, so later cycles listen where the first one did.
fn bind(place: &mut Place) -> io::Result<Bound> {
    let mut last = None;
    for _ in 0..50 {
        let bound = match place {
            Place::Tcp(addr) => TcpListener::bind(*addr).and_then(|l| {
                *addr = l.local_addr()?;
                l.set_nonblocking(true)?;
                Ok(Bound::Tcp(l))
            }),
            Place::Unix(path) => {
                // The previous cycle's socket, left behind like a killed agent's.
                remove_socket(path);
                UnixListener::bind(&*path).and_then(|l| {
                    l.set_nonblocking(true)?;
                    Ok(Bound::Unix(l))
                })
            }
        };
        match bound {
            Ok(b) => return Ok(b),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("retried at least once"))
}

/// Answers one connection of a cycle at a moment; returns whether the answer was cut.
type Answer<'a> = dyn Fn(Conn, usize, i64, bool) -> io::Result<bool> + 'a;

#[allow(clippy::too_many_arguments)]
fn play(
    timeline: &Timeline,
    place: &mut Place,
    speed: f64,
    die_mid_response: bool,
    stop: &AtomicBool,
    announce: &mut dyn FnMut(String),
    answer: &Answer<'_>,
    greeting: &str,
) -> io::Result<ReplayTally> {
    let start = Instant::now();
    let speed = if speed > 0.0 { speed } else { 1.0 };
    let mut listener: Option<Bound> = None;
    let mut current: Option<usize> = None;
    let mut cut_life: Option<usize> = None;
    let mut tally = ReplayTally::default();
    while !stop.load(Ordering::Relaxed) {
        let at = (start.elapsed().as_secs_f64() * 1000.0 * speed) as i64;
        let state = match timeline.state(at) {
            State::Alive(i) if cut_life == Some(i) => State::Dead,
            s => s,
        };
        match state {
            State::Over => break,
            State::Dead => {
                if listener.take().is_some() {
                    announce(format!(
                        "boot cycle {} died",
                        current.map_or(0, |i| timeline.cycles[i].index)
                    ));
                }
                let wake = timeline.next_change(at).unwrap_or(at + 50);
                let wait = Duration::from_secs_f64(((wake - at).max(1) as f64 / speed) / 1000.0);
                std::thread::sleep(wait.min(Duration::from_millis(20)));
            }
            State::Alive(i) => {
                if current != Some(i) || listener.is_none() {
                    listener = Some(bind(place)?);
                    current = Some(i);
                    tally.cycles += 1;
                    announce(format!(
                        "{greeting} {place} (boot cycle {})",
                        timeline.cycles[i].index
                    ));
                }
                let accepted = listener.as_ref().expect("bound above").accept();
                match accepted {
                    Ok(conn) => {
                        tally.requests += 1;
                        let cycle = &timeline.cycles[i];
                        let left_ms = (cycle.end_ms - at) as f64 / speed;
                        let cut = die_mid_response && left_ms <= 300.0;
                        match answer(conn, i, at, cut) {
                            Ok(true) => {
                                tally.cut += 1;
                                cut_life = Some(i);
                            }
                            Ok(false) => {}
                            Err(e) => announce(format!("request failed: {e}")),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(tally)
}

fn read_request_line(stream: &mut Conn) -> io::Result<String> {
    stream.prepare()?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() > 16 * 1024 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    Ok(text.lines().next().unwrap_or("").to_string())
}

fn answer_http(
    mut stream: Conn,
    timeline: &Timeline,
    cycle: usize,
    at: i64,
    cut: bool,
) -> io::Result<bool> {
    let line = read_request_line(&mut stream)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let debug = query
        .split('&')
        .any(|kv| kv == "debug=1" || kv == "debug=2");
    let cycle = &timeline.cycles[cycle];
    let body: Option<(Vec<u8>, &str)> =
        if path.ends_with("/debug/pprof/heap") || path.ends_with("/debug/pprof/allocs") {
            if debug {
                latest(&cycle.memstats, at)
                    .map(|s| (memstats_text(s).into_bytes(), "text/plain; charset=utf-8"))
            } else {
                match latest(&cycle.heap, at) {
                    Some(p) => Some((std::fs::read(p)?, "application/octet-stream")),
                    None => None,
                }
            }
        } else if path.ends_with("/debug/pprof/goroutine") {
            match latest(&cycle.goroutine, at) {
                Some(p) if debug => Some((goroutine_text(p)?, "text/plain; charset=utf-8")),
                // A dump recorded as text has no pprof form to serve.
                Some(p) if p.extension().is_some_and(|e| e == "gz") => {
                    Some((std::fs::read(p)?, "application/octet-stream"))
                }
                _ => None,
            }
        } else {
            None
        };
    let Some((body, content_type)) = body else {
        let msg = b"404 page not found\n";
        write!(
            stream,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            msg.len()
        )?;
        stream.write_all(msg)?;
        return Ok(false);
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if cut {
        stream.cut(&body)?;
        return Ok(true);
    }
    stream.write_all(&body)?;
    stream.flush()?;
    Ok(false)
}
