//! Serves a [`Timeline`] over HTTP as Go's net/http/pprof would: the listener exists only while
//! the recorded process was alive, so between boot cycles connections are refused, and the
//! last answer of a life can be cut mid-body the way an OOM kill cuts it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{State, Timeline, latest, memstats_text};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub listen: SocketAddr,
    /// 2.0 plays the recording twice as fast.
    pub speed: f64,
    /// Cut the last response of each life in half, then die.
    pub die_mid_response: bool,
}

#[derive(Debug, Default, Clone)]
pub struct ReplayTally {
    pub requests: u64,
    pub lives: usize,
    pub cut: u64,
}

/// Plays the timeline to its end (or until `stop`); `announce` hears each life start and end.
pub fn serve(
    timeline: &Timeline,
    options: &ReplayOptions,
    stop: &AtomicBool,
    announce: &mut dyn FnMut(String),
) -> io::Result<ReplayTally> {
    let start = Instant::now();
    let speed = if options.speed > 0.0 {
        options.speed
    } else {
        1.0
    };
    let mut addr = options.listen;
    let mut listener: Option<TcpListener> = None;
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
                        current.map_or(0, |i| timeline.lives[i].incarnation)
                    ));
                }
                let wake = timeline.next_change(at).unwrap_or(at + 50);
                let wait = Duration::from_secs_f64(((wake - at).max(1) as f64 / speed) / 1000.0);
                std::thread::sleep(wait.min(Duration::from_millis(20)));
            }
            State::Alive(i) => {
                if current != Some(i) || listener.is_none() {
                    let l = bind(addr)?;
                    addr = l.local_addr()?;
                    l.set_nonblocking(true)?;
                    listener = Some(l);
                    current = Some(i);
                    tally.lives += 1;
                    announce(format!(
                        "listening on {addr} (boot cycle {})",
                        timeline.lives[i].incarnation
                    ));
                }
                let accepted = listener.as_ref().expect("bound above").accept();
                match accepted {
                    Ok((stream, _)) => {
                        tally.requests += 1;
                        let life = &timeline.lives[i];
                        let left_ms = (life.end_ms - at) as f64 / speed;
                        let cut = options.die_mid_response && left_ms <= 300.0;
                        if let Err(e) = answer(stream, timeline, i, at, cut) {
                            announce(format!("request failed: {e}"));
                        }
                        if cut {
                            tally.cut += 1;
                            cut_life = Some(i);
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

/// Binds, retrying briefly: the previous life's socket may still be closing.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("retried at least once"))
}

fn read_request_line(stream: &mut TcpStream) -> io::Result<String> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
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

fn answer(
    mut stream: TcpStream,
    timeline: &Timeline,
    life: usize,
    at: i64,
    cut: bool,
) -> io::Result<()> {
    let line = read_request_line(&mut stream)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let debug = query
        .split('&')
        .any(|kv| kv == "debug=1" || kv == "debug=2");
    let life = &timeline.lives[life];
    let body: Option<(Vec<u8>, &str)> =
        if path.ends_with("/debug/pprof/heap") || path.ends_with("/debug/pprof/allocs") {
            if debug {
                latest(&life.memstats, at)
                    .map(|s| (memstats_text(s).into_bytes(), "text/plain; charset=utf-8"))
            } else {
                match latest(&life.heap, at) {
                    Some(p) => Some((std::fs::read(p)?, "application/octet-stream")),
                    None => None,
                }
            }
        } else if path.ends_with("/debug/pprof/goroutine") && !debug {
            match latest(&life.goroutine, at) {
                Some(p) => Some((std::fs::read(p)?, "application/octet-stream")),
                None => None,
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
        return Ok(());
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if cut {
        // The kill lands mid-write: half the body, then the connection is gone.
        stream.write_all(&body[..body.len() / 2])?;
        stream.flush()?;
        let _ = stream.shutdown(Shutdown::Both);
        return Ok(());
    }
    stream.write_all(&body)?;
    stream.flush()
}
