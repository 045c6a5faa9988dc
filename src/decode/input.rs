//! Where the decoder's protobuf bytes come from: a slice already in memory, or a gzip stream
//! gunzipped a window at a time, so a profile's decompressed bytes are never whole in memory.
//! The gzip side keeps the ceiling on the decompressed size and every check of [`super::gunzip`].

use std::io::Read;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};

use super::DecodeError;

/// Bytes read front to back: the decoder asks for a window, reads a field out of it and says
/// how much it used.
pub(super) trait Input {
    /// The bytes not consumed yet: at least `want` of them, unless the profile ends sooner
    /// (then all that is left; empty at the end).
    fn fill(&mut self, want: usize) -> Result<&[u8], DecodeError>;

    fn consume(&mut self, n: usize);

    /// Reads to the end without decoding, for the errors of the layer below the protobuf: a
    /// gzip stream that is corrupt further on says so rather than the protobuf error its
    /// garbage caused, as when the whole stream was gunzipped first.
    fn drain(&mut self) -> Result<(), DecodeError>;
}

impl Input for &[u8] {
    fn fill(&mut self, _want: usize) -> Result<&[u8], DecodeError> {
        Ok(self)
    }

    fn consume(&mut self, n: usize) {
        *self = &self[n..];
    }

    fn drain(&mut self) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// How much is gunzipped at a time: small enough to stay in cache while it is decoded.
const WINDOW: usize = 64 << 10;

/// Where a [`Window`] gets decompressed bytes from: the gunzip itself, or the chunks a gunzip
/// thread sends.
pub(super) trait Source {
    /// Fills the front of `out`; 0 at the end of the stream.
    fn read(&mut self, out: &mut [u8]) -> Result<usize, DecodeError>;
}

/// A gzip member gunzipped under the ceiling on its decompressed size, refusing a stream that
/// ends early, fails its checksum or has data after its end.
pub(super) struct Gunzipper<'a> {
    decoder: flate2::bufread::GzDecoder<&'a [u8]>,
    /// Decompressed bytes so far.
    total: u64,
    max: u64,
    ended: bool,
}

impl<'a> Gunzipper<'a> {
    /// `max`: the ceiling on the decompressed size.
    pub(super) fn new(gz: &'a [u8], max: u64) -> Self {
        Gunzipper {
            // The bufread decoder takes from the slice only what the gzip member spans, so
            // what is left at its end is exactly the trailing data.
            decoder: flate2::bufread::GzDecoder::new(gz),
            total: 0,
            max,
            ended: false,
        }
    }
}

impl Source for Gunzipper<'_> {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, DecodeError> {
        if self.ended {
            return Ok(0);
        }
        // One byte past the ceiling is enough to know it is crossed.
        let allowed = self.max.saturating_add(1) - self.total;
        let room = out
            .len()
            .min(usize::try_from(allowed).unwrap_or(usize::MAX));
        let n = loop {
            match self.decoder.read(&mut out[..room]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(DecodeError::TruncatedGzip);
                }
                Err(e) => return Err(DecodeError::BadGzip(e.to_string())),
            }
        };
        self.total += n as u64;
        if self.total > self.max {
            return Err(DecodeError::TooLarge { max: self.max });
        }
        if n == 0 {
            self.ended = true;
            // A gzip stream must end where its member ends; trailing garbage is a corrupt
            // capture.
            if !self.decoder.get_ref().is_empty() {
                return Err(DecodeError::BadGzip(
                    "data after the end of the gzip stream".into(),
                ));
            }
        }
        Ok(n)
    }
}

/// Decompressed bytes in a window that slides over them as the decoder consumes them.
pub(super) struct Window<S> {
    source: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    ended: bool,
}

/// The gzip member gunzipped on the decoder's own thread.
pub(super) type Gunzip<'a> = Window<Gunzipper<'a>>;

impl<'a> Gunzip<'a> {
    /// `max`: the ceiling on the decompressed size.
    pub(super) fn new(gz: &'a [u8], max: u64) -> Self {
        Window::over(Gunzipper::new(gz, max))
    }
}

impl<S: Source> Window<S> {
    fn over(source: S) -> Self {
        Window {
            source,
            buf: Vec::new(),
            start: 0,
            end: 0,
            ended: false,
        }
    }

    /// Reads more onto the end of the window; false at the end of the stream.
    fn read_more(&mut self) -> Result<bool, DecodeError> {
        if self.ended {
            return Ok(false);
        }
        if self.buf.len() - self.end < WINDOW / 4 {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < WINDOW / 4 {
                // A field longer than the window: grow by what it has so far, so the memory
                // follows the bytes that arrive and never a length the data claims.
                let grown = (self.buf.len() * 2).max(WINDOW);
                self.buf.resize(grown, 0);
            }
        }
        let n = self.source.read(&mut self.buf[self.end..])?;
        if n == 0 {
            self.ended = true;
            return Ok(false);
        }
        self.end += n;
        Ok(true)
    }
}

impl<S: Source> Input for Window<S> {
    #[inline]
    fn fill(&mut self, want: usize) -> Result<&[u8], DecodeError> {
        while self.end - self.start < want && self.read_more()? {}
        Ok(&self.buf[self.start..self.end])
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.start += n;
    }

    fn drain(&mut self) -> Result<(), DecodeError> {
        loop {
            self.start = self.end;
            if !self.read_more()? {
                return Ok(());
            }
        }
    }
}

/// The size of the chunks a gunzip thread sends.
const CHUNK: usize = 64 << 10;
/// Chunks sent and not yet taken: enough to ride out the decoder's slower stretches, few
/// enough that the gunzip thread stays a few hundred KiB ahead, never the whole profile.
const IN_FLIGHT: usize = 4;

/// What a gunzip thread sends: a chunk of decompressed bytes (empty at the end of the stream)
/// or the error that stopped it.
type Chunk = Result<Vec<u8>, DecodeError>;

/// The chunks of a gunzip thread, as a [`Source`]: the decoder reads on one core while the
/// next chunks are gunzipped on another. Used chunks go back to the thread for reuse.
pub(super) struct Chunks {
    chunks: Receiver<Chunk>,
    used: Sender<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    /// The end of the stream or the error that ended it, once received.
    ended: Option<Result<(), DecodeError>>,
}

impl Source for Chunks {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, DecodeError> {
        while self.at == self.chunk.len() {
            if let Some(end) = &self.ended {
                return end.clone().map(|()| 0);
            }
            let next = match self.chunks.recv() {
                Ok(Ok(chunk)) if !chunk.is_empty() => chunk,
                Ok(Ok(_)) => {
                    self.ended = Some(Ok(()));
                    continue;
                }
                Ok(Err(e)) => {
                    self.ended = Some(Err(e));
                    continue;
                }
                // Only a panic ends the thread without a last message; the scope re-raises it.
                Err(_) => {
                    self.ended = Some(Err(DecodeError::BadGzip(
                        "the gunzip thread stopped".into(),
                    )));
                    continue;
                }
            };
            let used = std::mem::replace(&mut self.chunk, next);
            // The thread may have ended already; then the chunk is simply freed.
            let _ = self.used.send(used);
            self.at = 0;
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Runs `read` over the gzip member gunzipped on a thread of its own, a chunk at a time
/// through a bounded channel, so decoding costs about the longer of gunzip and decode rather
/// than their sum. Neither side can leave the other blocked: the thread ends at the end of the
/// stream or at its first error (sent as its last chunk), and when `read` returns, dropping
/// the receiver makes the thread's next send fail, which ends it. `None` when no thread could
/// be started.
pub(super) fn with_gunzip_thread<R>(
    gz: &[u8],
    max: u64,
    read: impl FnOnce(&mut Window<Chunks>) -> R,
) -> Option<R> {
    std::thread::scope(|scope| {
        let (send_chunk, chunks) = mpsc::sync_channel::<Chunk>(IN_FLIGHT);
        let (used, reuse) = mpsc::channel::<Vec<u8>>();
        let spawned = std::thread::Builder::new()
            .name("gunzip".into())
            .spawn_scoped(scope, move || gunzip_chunks(gz, max, &send_chunk, &reuse));
        if spawned.is_err() {
            return None;
        }
        let mut input = Window::over(Chunks {
            chunks,
            used,
            chunk: Vec::new(),
            at: 0,
            ended: None,
        });
        let result = read(&mut input);
        // Closes both channels before the scope waits for the thread.
        drop(input);
        Some(result)
    })
}

fn gunzip_chunks(gz: &[u8], max: u64, send: &SyncSender<Chunk>, reuse: &Receiver<Vec<u8>>) {
    let mut gunzip = Gunzipper::new(gz, max);
    loop {
        let mut chunk = reuse.try_recv().unwrap_or_default();
        chunk.resize(CHUNK, 0);
        let mut filled = 0;
        let last = loop {
            match gunzip.read(&mut chunk[filled..]) {
                Ok(0) => break Some(Ok(())),
                Ok(n) => {
                    filled += n;
                    if filled == CHUNK {
                        break None;
                    }
                }
                Err(e) => break Some(Err(e)),
            }
        };
        chunk.truncate(filled);
        if filled > 0 && send.send(Ok(chunk)).is_err() {
            return; // the decoder is done
        }
        match last {
            None => {}
            Some(Ok(())) => {
                let _ = send.send(Ok(Vec::new()));
                return;
            }
            Some(Err(e)) => {
                let _ = send.send(Err(e));
                return;
            }
        }
    }
}

/// Gunzips a whole stream into memory: what [`Gunzip`] reads, kept.
pub(super) fn gunzip_all(gz: &[u8], max: u64) -> Result<Vec<u8>, DecodeError> {
    // Go's compress/gzip output is usually 3-8x smaller than the protobuf.
    let guess = (gz.len() as u64).saturating_mul(6).min(max) as usize;
    let mut out = Vec::with_capacity(guess);
    let mut input = Gunzip::new(gz, max);
    loop {
        let window = input.fill(WINDOW)?;
        if window.is_empty() {
            return Ok(out);
        }
        out.extend_from_slice(window);
        let n = window.len();
        input.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    fn counting(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_field_longer_than_the_window_arrives_whole() {
        let raw = counting(5 * WINDOW + 3);
        let gz = gzip(&raw);
        let mut input = Gunzip::new(&gz, 1 << 30);
        assert_eq!(input.fill(10).unwrap()[..10], raw[..10]);
        input.consume(10);
        let rest = input.fill(raw.len() - 10).unwrap();
        assert_eq!(rest, &raw[10..]);
        input.consume(raw.len() - 10);
        assert!(input.fill(1).unwrap().is_empty());
    }

    #[test]
    fn the_ceiling_and_the_stream_end_are_checked_as_it_streams() {
        let raw = counting(3 * WINDOW);
        let gz = gzip(&raw);
        assert_eq!(gunzip_all(&gz, raw.len() as u64).unwrap(), raw);
        assert_eq!(
            gunzip_all(&gz, raw.len() as u64 - 1),
            Err(DecodeError::TooLarge {
                max: raw.len() as u64 - 1
            })
        );
        assert_eq!(
            gunzip_all(&gz[..gz.len() / 2], 1 << 30),
            Err(DecodeError::TruncatedGzip)
        );
        let mut trailing = gz.clone();
        trailing.push(0);
        assert!(matches!(
            Gunzip::new(&trailing, 1 << 30).drain(),
            Err(DecodeError::BadGzip(m)) if m.contains("data after the end")
        ));
    }
}
