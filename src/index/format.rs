//! The bytes of `sites.idx`. A 16-byte header (magic, then a hash of the format and of the
//! reduction rules), then one frame per capture:
//!
//! ```text
//! frame := head_len u32 | xxh3(head) u64 | head
//! head  := seq | hash | file len | mtime ns | inode | kind u8 | gunzipped len
//!          | new names (count, then each as length + UTF-8)
//!          | sample types (count, name ids) | default type
//!          | sites (count, then name id + one zigzag value per sample type), by name
//! ```
//!
//! Integers are LEB128 varints unless sized. Name ids count definitions in file order. The
//! gunzipped length is what `--max-decompressed` is held against (0: a file not gzipped).
//!
//! # Sites only
//!
//! A frame is `len, xxh3(entry), entry`: the key, the new names and the site rows, a few hundred
//! bytes a capture (~540 bytes in the bench run of docs/benchmarks.md, against 240 KB of gzipped
//! profile), so what an analysis reads is about a four-hundredth of the profiles.
//!
//! # What it does not keep: per-stack rows
//!
//! Format 1 also kept, after each frame's site rows, every stack of the capture and its four
//! values (~128 KB a capture of 25,000 stacks, 99.5 % of the file). Nothing read them: they were
//! kept for per-stack analyses that do not exist. Building them (naming, interning and hashing
//! every stack) cost the collector's indexer 5.6× the CPU a capture of the collector without an
//! index (46.6 against 8.3 ms) and made the first `growth` 3× its cost without an index, so
//! format 2 drops them; an index of format 1 is rebuilt. A heap site is named by its first own
//! frame and its leaf (`SiteNamer`, in `analyse::reduce`), so a heap entry names no frames beyond
//! those two. Flamegraphs, the one thing that needs stacks, decode the two captures they draw
//! (they need addresses and lines an index would not keep anyway).

use std::io::Read;

use super::Built;
use super::{EntryKey, QuickMap};
use crate::store::RecordKind;

const MAGIC: &[u8; 8] = b"HWSITES3";
pub const HEADER_LEN: u64 = 16;
pub const FRAME_HEADER: u64 = 12;
/// No head is larger than this; a length beyond it is damage, not data.
const MAX_PART: u32 = 1 << 30;

/// What the entries were built by: a change to the format or to the reduction rules makes
/// every index outdated, so it is rebuilt rather than misread.
fn rules() -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(include_bytes!("format.rs"));
    h.update(include_bytes!("build.rs"));
    h.update(include_bytes!("../analyse/reduce.rs"));
    h.digest()
}

pub fn header() -> [u8; HEADER_LEN as usize] {
    let mut out = [0u8; HEADER_LEN as usize];
    out[..8].copy_from_slice(MAGIC);
    out[8..].copy_from_slice(&rules().to_le_bytes());
    out
}

pub struct Frame {
    pub head_len: u32,
    head_sum: u64,
}

impl Frame {
    pub fn head_ok(&self, head: &[u8]) -> bool {
        xxhash_rust::xxh3::xxh3_64(head) == self.head_sum
    }
}

/// The frame header at `offset`, and the frame's whole length; None at the end, or when the
/// frame would run past `file_len` (torn) or its length is not believable.
pub fn read_frame_header(
    reader: &mut impl Read,
    offset: u64,
    file_len: u64,
) -> Option<(Frame, u64)> {
    if offset + FRAME_HEADER > file_len {
        return None;
    }
    let mut b = [0u8; FRAME_HEADER as usize];
    reader.read_exact(&mut b).ok()?;
    let frame = Frame {
        head_len: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
        head_sum: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
    };
    if frame.head_len > MAX_PART {
        return None;
    }
    let total = FRAME_HEADER + u64::from(frame.head_len);
    (offset + total <= file_len).then_some((frame, total))
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_signed(out: &mut Vec<u8>, v: i64) {
    put(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn intern<'a>(name: &'a str, names: &mut QuickMap<String, u32>, new: &mut Vec<&'a str>) -> u32 {
    if let Some(&id) = names.get(name) {
        return id;
    }
    let id = names.len() as u32;
    names.insert(name.to_string(), id);
    new.push(name);
    id
}

/// Appends one capture's frame to `out`, interning its names.
pub fn encode_frame(out: &mut Vec<u8>, b: &Built, names: &mut QuickMap<String, u32>) {
    let f = &b.figures;
    let mut new_names = Vec::new();
    let types: Vec<u32> = f
        .sample_types
        .iter()
        .map(|t| intern(t, names, &mut new_names))
        .collect();
    let sites: Vec<u32> = f
        .sites
        .iter()
        .map(|(n, _)| intern(n, names, &mut new_names))
        .collect();
    let mut head = Vec::new();
    put(&mut head, b.seq);
    put_bytes(&mut head, b.key.hash.as_bytes());
    put(&mut head, b.key.len);
    put(&mut head, b.key.mtime_ns);
    put(&mut head, b.key.ino);
    head.push(u8::from(b.kind == RecordKind::Goroutine));
    put(&mut head, b.gunzipped);
    put(&mut head, new_names.len() as u64);
    for n in &new_names {
        put_bytes(&mut head, n.as_bytes());
    }
    put(&mut head, types.len() as u64);
    for t in &types {
        put(&mut head, u64::from(*t));
    }
    put(&mut head, f.default_type as u64);
    put(&mut head, sites.len() as u64);
    for (id, (_, values)) in sites.iter().zip(&f.sites) {
        put(&mut head, u64::from(*id));
        for i in 0..types.len() {
            put_signed(&mut head, values.get(i).copied().unwrap_or(0));
        }
    }
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&head).to_le_bytes());
    out.extend_from_slice(&head);
}

/// A cursor over a head; every read is checked.
struct Cursor<'a>(&'a [u8]);

#[derive(Debug)]
pub struct Damaged;

impl<'a> Cursor<'a> {
    fn uint(&mut self) -> Result<u64, Damaged> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err(Damaged)
    }

    fn signed(&mut self) -> Result<i64, Damaged> {
        let v = self.uint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn count(&mut self) -> Result<usize, Damaged> {
        // A count can never exceed the bytes left: each item takes at least one.
        let n = self.uint()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.0.len())
            .ok_or(Damaged)
    }

    fn bytes(&mut self) -> Result<&'a [u8], Damaged> {
        let n = self.count()?;
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(b)
    }

    fn text(&mut self) -> Result<&'a str, Damaged> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Damaged)
    }

    fn byte(&mut self) -> Result<u8, Damaged> {
        let (&b, rest) = self.0.split_first().ok_or(Damaged)?;
        self.0 = rest;
        Ok(b)
    }
}

/// The start of a head: which capture, built for what, and the names it defines.
pub struct Head {
    pub seq: u64,
    pub key: EntryKey,
    pub kind: RecordKind,
    pub gunzipped: u64,
    pub new_names: Vec<String>,
}

type Start = (u64, EntryKey, RecordKind, u64);

fn head_start(c: &mut Cursor) -> Result<Start, Damaged> {
    let seq = c.uint()?;
    let hash = c.text()?.to_string();
    let key = EntryKey {
        hash,
        len: c.uint()?,
        mtime_ns: c.uint()?,
        ino: c.uint()?,
    };
    let kind = if c.byte()? == 1 {
        RecordKind::Goroutine
    } else {
        RecordKind::Heap
    };
    let gunzipped = c.uint()?;
    Ok((seq, key, kind, gunzipped))
}

impl Head {
    pub fn parse(head: &[u8]) -> Result<Head, Damaged> {
        let mut c = Cursor(head);
        let (seq, key, kind, gunzipped) = head_start(&mut c)?;
        let n = c.count()?;
        let new_names = (0..n)
            .map(|_| c.text().map(str::to_string))
            .collect::<Result<_, _>>()?;
        Ok(Head {
            seq,
            key,
            kind,
            gunzipped,
            new_names,
        })
    }
}

/// A head's site rows, names resolved against the run's names.
pub struct Entry<'n> {
    pub sample_types: Vec<&'n str>,
    pub default_type: usize,
    pub sites: Vec<(&'n str, Vec<i64>)>,
}

impl<'n> Entry<'n> {
    pub fn parse_sites(head: &[u8], names: &'n [String]) -> Result<Entry<'n>, Damaged> {
        let mut c = Cursor(head);
        head_start(&mut c)?;
        let n = c.count()?;
        for _ in 0..n {
            c.bytes()?;
        }
        let name = |c: &mut Cursor| -> Result<&'n str, Damaged> {
            let id = usize::try_from(c.uint()?).map_err(|_| Damaged)?;
            names.get(id).map(String::as_str).ok_or(Damaged)
        };
        let types = c.count()?;
        let sample_types = (0..types)
            .map(|_| name(&mut c))
            .collect::<Result<Vec<_>, _>>()?;
        let default_type = usize::try_from(c.uint()?).map_err(|_| Damaged)?;
        let rows = c.count()?;
        let mut sites = Vec::with_capacity(rows);
        for _ in 0..rows {
            let n = name(&mut c)?;
            let values = (0..types)
                .map(|_| c.signed())
                .collect::<Result<Vec<_>, _>>()?;
            sites.push((n, values));
        }
        Ok(Entry {
            sample_types,
            default_type,
            sites,
        })
    }
}

/// Learns a frame's new names, checking none is defined twice.
pub fn learn(head: &[u8], names: &mut QuickMap<String, u32>) -> Result<(), Damaged> {
    for n in Head::parse(head)?.new_names {
        // A name defined twice would shift every later id: the frame is damaged.
        let id = names.len() as u32;
        if names.insert(n, id).is_some() {
            return Err(Damaged);
        }
    }
    Ok(())
}
