//! Where the decoder's protobuf bytes come from: a slice already in memory, or a gzip stream
//! gunzipped a window at a time, so a profile's decompressed bytes are never whole in memory.
//! The gzip side keeps the ceiling on the decompressed size and every check of [`super::gunzip`].

use std::io::Read;

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

/// A gzip member, gunzipped into a window that slides over the decompressed bytes.
pub(super) struct Gunzip<'a> {
    decoder: flate2::bufread::GzDecoder<&'a [u8]>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Decompressed bytes so far.
    total: u64,
    max: u64,
    ended: bool,
}

impl<'a> Gunzip<'a> {
    /// `max`: the ceiling on the decompressed size.
    pub(super) fn new(gz: &'a [u8], max: u64) -> Self {
        Gunzip {
            // The bufread decoder takes from the slice only what the gzip member spans, so
            // what is left at its end is exactly the trailing data.
            decoder: flate2::bufread::GzDecoder::new(gz),
            buf: Vec::new(),
            start: 0,
            end: 0,
            total: 0,
            max,
            ended: false,
        }
    }

    /// Gunzips more onto the end of the window; false at the end of the stream.
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
        // One byte past the ceiling is enough to know it is crossed.
        let allowed = self.max.saturating_add(1) - self.total;
        let room = (self.buf.len() - self.end).min(usize::try_from(allowed).unwrap_or(usize::MAX));
        let n = loop {
            match self.decoder.read(&mut self.buf[self.end..self.end + room]) {
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
            return Ok(false);
        }
        self.end += n;
        Ok(true)
    }
}

impl Input for Gunzip<'_> {
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
