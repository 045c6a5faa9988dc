//! An accepted connection of the replay, TCP or unix, and the cut that imitates an OOM kill
//! landing mid-write.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// An accepted connection, TCP or unix.
pub(super) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    /// Blocking, with a read timeout: a client that never sends its request is dropped.
    pub(super) fn prepare(&self) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(2)))
            }
            Conn::Unix(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(2)))
            }
        }
    }

    /// The kill lands mid-write: what was written is all there is. Half the body, and never
    /// right after a newline, so a cut text reply is visibly cut too.
    pub(super) fn cut(&mut self, body: &[u8]) -> io::Result<()> {
        let mut n = body.len() / 2;
        while n > 1 && body[n - 1] == b'\n' {
            n -= 1;
        }
        self.write_all(&body[..n])?;
        self.flush()?;
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(Shutdown::Both),
            Conn::Unix(s) => s.shutdown(Shutdown::Both),
        };
        Ok(())
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            Conn::Unix(s) => s.flush(),
        }
    }
}
