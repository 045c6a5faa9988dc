//! A gzip member made of pieces deflated each on its own: the samples of 1,024 buckets at a time
//! are deflated alone (flate2's `Compress`, level 1, a fresh state, ended by a sync flush:
//! byte-aligned, not the last block), and a piece none of whose samples was written again is
//! copied as it was deflated; the rest of the profile is deflated last, ending the stream. A
//! deflate stream is any sequence of blocks and no piece refers back into another, so the member
//! is valid as put together; its CRC-32 is the pieces' combined (`Crc::combine`). The gzip header
//! and trailer are written here (18 bytes) because flate2's `GzEncoder` deflates everything it is
//! given.
//!
//! A heap profile's samples change little between two captures (a large profile's sites mostly
//! allocated once), so most pieces are copied, not deflated again. Profiles come out 0.2 % bigger
//! than one stream makes them; deflate was about a third of a 100k-bucket capture's CPU
//! (docs/benchmarks.md), and is now a piece or two. `go tool pprof` reads them
//! (tests/cli/proc.rs).

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// One deflated piece: its bytes (ending in a sync flush) and the CRC-32 and length of what
/// it holds.
#[derive(Default)]
pub struct Piece {
    deflated: Vec<u8>,
    crc: Crc,
}

impl Piece {
    /// Bytes it holds, once inflated.
    pub fn inflated_len(&self) -> usize {
        self.crc.amount() as usize
    }
}

/// Deflates pieces, and writes a gzip member from them.
pub struct Pieces {
    deflate: Compress,
    /// Pieces deflated since made (for tests and benchmarks).
    pub deflated: usize,
}

impl Default for Pieces {
    fn default() -> Pieces {
        Pieces {
            deflate: Compress::new(Compression::fast(), false),
            deflated: 0,
        }
    }
}

/// A gzip header: no name, no time, no extra flags, OS unknown (flate2's `GzEncoder` writes
/// the same but for XFL, 4 at its fastest level; readers ignore XFL).
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

impl Pieces {
    /// `raw` deflated on its own, as a piece that does not end the stream.
    pub fn piece(&mut self, raw: &[u8]) -> Piece {
        let mut piece = Piece::default();
        self.piece_into(raw, &mut piece);
        piece
    }

    /// `raw` deflated on its own into `piece` (its room reused).
    pub fn piece_into(&mut self, raw: &[u8], piece: &mut Piece) {
        piece.deflated.clear();
        self.deflate_into(raw, &mut piece.deflated, FlushCompress::Sync);
        piece.crc.reset();
        piece.crc.update(raw);
    }

    /// The gzip member of `pieces` in order, then `last` (deflated here, ending the stream).
    pub fn member<'a>(&mut self, pieces: impl Iterator<Item = &'a Piece>, last: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(last.len() / 3 + 64);
        out.extend_from_slice(&HEADER);
        let mut crc = Crc::new();
        for piece in pieces {
            out.extend_from_slice(&piece.deflated);
            crc.combine(&piece.crc);
        }
        self.deflate_into(last, &mut out, FlushCompress::Finish);
        crc.update(last);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&crc.amount().to_le_bytes());
        out
    }

    fn deflate_into(&mut self, raw: &[u8], out: &mut Vec<u8>, flush: FlushCompress) {
        self.deflate.reset();
        self.deflated += 1;
        loop {
            let read = self.deflate.total_in() as usize;
            out.reserve(raw.len().saturating_sub(read) / 2 + 64);
            let status = self
                .deflate
                .compress_vec(&raw[read..], out, flush)
                .expect("deflating memory into memory cannot fail");
            let all_in = self.deflate.total_in() as usize == raw.len();
            // Done when everything went in and the flush found room to finish.
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                _ => all_in && out.len() < out.capacity(),
            };
            if done {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    /// Bytes that compress somewhat, like a profile's samples.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 3 == 0 {
                    (x % 7) as u8
                } else {
                    b'a' + (i % 11) as u8
                }
            })
            .collect()
    }

    #[test]
    fn pieces_and_a_last_part_make_one_member_of_their_bytes() {
        let mut p = Pieces::default();
        let parts = [bytes(1, 70_000), bytes(2, 1), Vec::new(), bytes(3, 300_000)];
        let last = bytes(4, 5_000);
        let pieces: Vec<Piece> = parts.iter().map(|b| p.piece(b)).collect();
        let gz = p.member(pieces.iter(), &last);
        let mut want = parts.concat();
        want.extend_from_slice(&last);
        assert_eq!(gunzip(&gz), want);
        assert_eq!(pieces[3].inflated_len(), 300_000);
        // The same bytes in one piece: what a gzip tool reads, and no bigger than a little
        // over what one stream makes of them.
        let whole = p.member(std::iter::empty(), &want);
        assert_eq!(gunzip(&whole), want);
        assert!(
            gz.len() < whole.len() + 1_000,
            "{} against {}",
            gz.len(),
            whole.len()
        );
        // No pieces, nothing last: an empty member.
        assert!(gunzip(&p.member(std::iter::empty(), &[])).is_empty());
    }

    #[test]
    fn a_piece_kept_from_before_stands_in_a_later_member() {
        let mut p = Pieces::default();
        let a = p.piece(&bytes(5, 40_000));
        let b = p.piece(&bytes(6, 40_000));
        let first = p.member([&a, &b].into_iter(), b"end one");
        let b2 = p.piece(&bytes(7, 10_000));
        let second = p.member([&a, &b2].into_iter(), b"end two");
        assert_eq!(
            gunzip(&first),
            [bytes(5, 40_000), bytes(6, 40_000), b"end one".to_vec()].concat()
        );
        assert_eq!(
            gunzip(&second),
            [bytes(5, 40_000), bytes(7, 10_000), b"end two".to_vec()].concat()
        );
        assert_eq!(p.deflated, 5, "a is deflated once, for both");
    }
}
