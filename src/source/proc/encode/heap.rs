//! A heap capture, encoded from the last capture of the same list.
//!
//! # Encoding a capture
//!
//! The profile is written by hand with prost's encoding functions, and most of it is copied from
//! the last capture of the same list. Each bucket's `Sample` message (location ids, values,
//! `bytes` label) is kept by the bucket's place from the list's end, which stays put as the list
//! grows at its head, and written again only when the record's figures (or the rate) moved: a
//! large profile's sites mostly allocated once, at start, and on the 100k-bucket target one
//! sample in 100,080 changes between two captures (the strings, functions and locations are
//! kept too: `tables.rs`). A new `list` number (the list read whole again) starts the samples
//! afresh, so memory that is not what it was is symbolised again rather than trusted.
//!
//! The samples are kept by pieces of 1,024 buckets: each piece's protobuf (its `Sample` fields
//! packed in one buffer) and the same deflated (`pieces.rs`). A piece none of whose samples
//! moved is hashed where it lies, neither written nor deflated again; a piece with one that
//! moved is written again into the room of the last piece written again, its other samples
//! copied from the old, and deflated. A bucket keeps only its figures, its site and where its
//! body lies in its piece (72 bytes): a buffer of its own per sample cost twice its bytes in the
//! allocator (a body of ~70 bytes in a 128-byte buffer), and every sample was copied into the
//! profile again at every capture. A caller that wants the whole protobuf (`take_raw`, the
//! collector's site index without sites named) gets the pieces joined.
//!
//! A capture goes through the pieces from the list's end (`heap_profile_gz_of`), and once a
//! piece's samples are made the walk's stacks of its buckets are let go
//! (`Snapshot::release_stacks`): a first walk holds every bucket's stack (22 MB of PCs on the
//! 100k-bucket target), and making all the samples beside them was the collector's peak.
//!
//! # What the heap profile has not published yet (`recent_objects`, `recent_space`)
//!
//! A heap profile is the heap as of the last finished GC cycle; each bucket's `memRecord.future`
//! holds the cycles after it. Every proc heap capture adds two sample types after the runtime's
//! four: the allocations of the two `future` slots the current cycle does not flush (the cycle in
//! progress and the one before it; their frees are not known yet), scaled like the others. Before
//! the first GC the four standard types already sum every cycle, so these are zero. The four
//! standard types stay what `/debug/pprof/heap` gives, and the profile names `inuse_space` its
//! default type (pprof and heapwatch would otherwise show the last one). `tests/cli/proc.rs`
//! checks that what a capture calls recent at a site is what the target's own profile shows
//! allocated there once two GCs have published it.

use prost::Message as _;

use super::samples::{
    KeptSample, figures_of, heap_values, sample_locations, subtract, write_heap_values,
};
use super::tables::{PcMap, Tables};
use super::{ExeMapping, Symbols};
use crate::decode::{Summary, pb};
use crate::source::proc::pieces::{Piece, Pieces};
use crate::source::proc::sites::{NO_SITE, SAMPLE_TYPES, SiteSums, Values};
use crate::source::proc::walk::{MemRecord, Snapshot, flush_rule, mem_records_of};
use crate::source::{MadeSites, SiteNaming};

/// Writes one target's heap profiles as `writeHeapProto` would, capture after capture. It
/// remembers, per return PC, whether it is a runtime frame, how a stack ending there is
/// expanded, and its location, so a capture symbolises only PCs it has not seen before. Made
/// per process (per attach): the PCs are the target's, load bias included.
pub struct Encoder {
    tables: Tables,
    runtime_pcs: PcMap<bool>,
    /// Return PC ending a stack → the PCs it stands for after `expandFinalInlineFrame`.
    final_pcs: PcMap<Vec<u64>>,
    sample_type: Vec<pb::ValueType>,
    period_type: Option<pb::ValueType>,
    bytes_key: i64,
    /// `inuse_space`: what pprof shows by default, as for the runtime's own profile, whose
    /// last type it is (here two follow it).
    default_type: i64,
    /// Each bucket's last encoded sample, for the list [`Encoder::list`], by the bucket's place
    /// counted from the list's end (the oldest bucket is 0): the list only grows at its head,
    /// so a bucket keeps its place, and a capture goes through them in order, with no lookup.
    /// Within one reading of the list each bucket's stack was read once
    /// (`walk::Snapshot::list`), so no copy of it is kept to compare; a list read whole again
    /// starts afresh: memory that is not what it was is symbolised again.
    samples: Vec<KeptSample>,
    list: u64,
    /// The sampling rate the kept samples were scaled at: when it moves, every one is
    /// written again.
    rate: i64,
    /// The samples by pieces of [`PIECE`] buckets, by place from the list's end like
    /// `samples`: each piece's protobuf and its deflated bytes. A piece none of whose samples
    /// moved is neither written nor deflated again (see
    /// [`pieces`](crate::source::proc::pieces)).
    kept: Vec<KeptPiece>,
    pieces: Pieces,
    /// Room for a piece written again (the one it replaces becomes the next one's room), one
    /// sample's body, and one piece's records.
    spare: Vec<u8>,
    body: Vec<u8>,
    /// The last profile's message after its samples (its head, then the tables as they were),
    /// and whether [`Encoder::take_raw`] may still make its protobuf.
    tail: Vec<u8>,
    raw_ready: bool,
    /// The last profile's protobuf length.
    raw_len: usize,
    stack: Vec<u64>,
    /// Each site's sums over the samples, and the last profile's entry (see [`sites`](crate::source::proc::sites)).
    sites: SiteSums,
    entry: Option<MadeSites>,
    /// Every sample's values summed, wrapping (the profile's totals per sample type), and the
    /// last profile's content hash.
    totals: Values,
    hash: String,
}

/// One piece of a heap profile's samples: their protobuf (each a `Sample` field, the newest
/// bucket first, as the profile holds them) and the same deflated.
#[derive(Default)]
struct KeptPiece {
    raw: Vec<u8>,
    deflated: Piece,
    /// Samples it holds.
    samples: usize,
}

/// Buckets per deflated piece of a heap profile's samples (~70 KB of protobuf).
const PIECE: usize = 1024;

/// What a capture does with one bucket's kept sample.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Copied as it is.
    Kept,
    /// Its values written again, its location ids kept.
    Moved,
    /// Another bucket's place, or none yet: symbolised and written whole.
    New,
}

impl Encoder {
    pub fn new(mappings: &[ExeMapping]) -> Encoder {
        let mut t = Tables::with_mappings(mappings);
        let mut vt = |ty: &str, unit: &str| pb::ValueType {
            r#type: t.intern(ty),
            unit: t.intern(unit),
        };
        let period_type = Some(vt("space", "bytes"));
        let units = ["count", "bytes"].into_iter().cycle();
        let sample_type = SAMPLE_TYPES
            .iter()
            .zip(units)
            .map(|(ty, unit)| vt(ty, unit))
            .collect();
        let bytes_key = t.intern("bytes");
        let default_type = t.intern("inuse_space");
        Encoder {
            default_type,
            tables: t,
            runtime_pcs: PcMap::default(),
            final_pcs: PcMap::default(),
            samples: Vec::new(),
            list: 0,
            rate: 0,
            kept: Vec::new(),
            pieces: Pieces::default(),
            spare: Vec::new(),
            body: Vec::new(),
            sample_type,
            period_type,
            bytes_key,
            tail: Vec::new(),
            raw_ready: false,
            raw_len: 0,
            stack: Vec::new(),
            sites: SiteSums::default(),
            entry: None,
            totals: [0; 6],
            hash: String::new(),
        }
    }

    /// The last profile's totals per sample type and content hash: what `decode::summarize`
    /// gives for its protobuf, kept as the samples were written rather than read again.
    pub fn summary(&self) -> Summary {
        Summary {
            totals: SAMPLE_TYPES
                .iter()
                .zip(self.totals)
                .map(|(t, v)| (t.to_string(), v))
                .collect(),
            hash: self.hash.clone(),
        }
    }

    /// The last profile's protobuf length.
    pub fn raw_len(&self) -> usize {
        self.raw_len
    }

    /// Names each capture's sites with `naming` from now on, for the program of `module`
    /// (see [`Encoder::take_sites`]).
    pub fn name_sites(&mut self, naming: &SiteNaming, module: Option<&str>) {
        self.sites.name_with(naming, module);
        // Every sample in hand is named again from its locations (the walk keeps no stacks
        // the encoder has seen), and counted again.
        let mut locs = Vec::new();
        let mut frames = Vec::new();
        for (place, sample) in self.samples.iter_mut().enumerate() {
            if sample.bucket == 0 {
                continue;
            }
            let raw = &self.kept[place / PIECE].raw;
            let at = sample.body as usize;
            locs.clear();
            sample_locations(&raw[at..at + sample.locations as usize], &mut locs);
            frames.clear();
            self.tables.frame_names(&locs, &mut frames);
            sample.site = self.sites.site(&frames);
            self.sites
                .add(sample.site, &heap_values(&sample.figures, self.rate));
        }
        self.entry = None;
    }

    /// The last profile's figures per site, once: its site index entry.
    pub fn take_sites(&mut self) -> Option<MadeSites> {
        self.entry.take()
    }

    /// The protobuf the last [`Encoder::heap_profile_gz`] gzipped, handed over whole (what the
    /// gzipped bytes decompress to), so the collector need not gunzip what was just gzipped.
    /// Made again from the kept pieces and the last profile's tail, as it was written. Empty
    /// before the first profile, or when already taken.
    pub fn take_raw(&mut self) -> Vec<u8> {
        if !std::mem::take(&mut self.raw_ready) {
            return Vec::new();
        }
        let mut raw = Vec::with_capacity(self.raw_len);
        for piece in self.kept.iter().rev() {
            raw.extend_from_slice(&piece.raw);
        }
        raw.extend_from_slice(&self.tail);
        raw
    }

    fn is_runtime(&mut self, syms: &Symbols, pc: u64) -> bool {
        *self
            .runtime_pcs
            .entry(pc)
            .or_insert_with(|| syms.is_runtime(pc))
    }

    /// The stack as `appendLocsForStack` walks it: `stk` with its final inlined call expanded.
    fn expanded(&mut self, syms: &Symbols, stk: &[u64]) {
        self.stack.clear();
        let Some((&last, rest)) = stk.split_last() else {
            return;
        };
        self.stack.extend_from_slice(rest);
        let tail = self.final_pcs.entry(last).or_insert_with(|| {
            let mut one = vec![last];
            syms.table.expand_final_inline_biased(&mut one, syms.bias);
            one
        });
        self.stack.extend_from_slice(tail);
    }

    fn locations(&mut self, syms: &Symbols, stk: &[u64], locs: &mut Vec<u64>) {
        self.expanded(syms, stk);
        let stack = std::mem::take(&mut self.stack);
        self.tables.locations_for(syms, &stack, locs);
        self.stack = stack;
    }

    /// The gzipped profile `writeHeapProto` would write for these records (head first), read
    /// from the list numbered `list` (see [`Snapshot::list`]; records that are not from one
    /// list each time need a new number each time).
    pub fn heap_profile_gz<'a>(
        &mut self,
        records: impl ExactSizeIterator<Item = MemRecord<'a>>,
        list: u64,
        rate: i64,
        syms: &Symbols,
        time_nanos: i64,
    ) -> Vec<u8> {
        let records: Vec<MemRecord> = records.collect();
        let n = records.len();
        self.begin(list, n);
        for piece in 0..n.div_ceil(PIECE) {
            let heads = heads_of(piece, n);
            self.piece(piece, &records[heads], rate, syms);
        }
        self.finish(rate, time_nanos)
    }

    /// [`Encoder::heap_profile_gz`] of a walk's snapshot under `runtime.MemProfile`'s rule,
    /// from the list's end: the stacks of each piece's buckets are let go once its samples
    /// are made (see [`Snapshot::release_stacks`]).
    pub fn heap_profile_gz_of(
        &mut self,
        snapshot: &mut Snapshot,
        rate: i64,
        syms: &Symbols,
        time_nanos: i64,
    ) -> Vec<u8> {
        let n = snapshot.buckets.len();
        let whole = snapshot.list != self.list;
        self.begin(snapshot.list, n);
        let rule = flush_rule(snapshot);
        for piece in 0..n.div_ceil(PIECE) {
            let heads = heads_of(piece, n);
            let batch: Vec<MemRecord> = mem_records_of(snapshot, heads.clone(), rule).collect();
            self.piece(piece, &batch, rate, syms);
            drop(batch);
            if whole {
                snapshot.release_stacks(heads);
            }
        }
        self.finish(rate, time_nanos)
    }

    /// Starts a profile of `n` records from the list numbered `list`.
    fn begin(&mut self, list: u64, n: usize) {
        self.raw_ready = false;
        if list != self.list {
            self.samples.clear();
            self.kept.clear();
            self.list = list;
        }
        if self.samples.is_empty() {
            self.sites.clear();
            self.totals = [0; 6];
        }
        self.samples.resize_with(n, KeptSample::default);
        self.kept.resize_with(n.div_ceil(PIECE), KeptPiece::default);
    }

    /// The profile of the pieces as they stand, at `rate`, gzipped.
    fn finish(&mut self, rate: i64, time_nanos: i64) -> Vec<u8> {
        self.rate = rate;
        self.entry = self.sites.entry();
        // `decode::summarize`'s hash: every top-level field in order but the timestamps,
        // the samples' piece by piece, the newest first, as the profile holds them.
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut samples_len = 0;
        for piece in self.kept.iter().rev() {
            hasher.update(&piece.raw);
            samples_len += piece.raw.len();
        }
        let head = pb::Profile {
            sample_type: self.sample_type.clone(),
            time_nanos,
            period_type: self.period_type,
            period: rate,
            default_sample_type: self.default_type,
            ..Default::default()
        };
        self.tail.clear();
        head.encode(&mut self.tail)
            .expect("a Vec grows to hold any message");
        self.tail.extend_from_slice(&self.tables.encoded);
        self.raw_len = samples_len + self.tail.len();
        self.raw_ready = true;
        // The head is written in field order, so without its time it is those fields.
        let timeless = pb::Profile {
            time_nanos: 0,
            ..head
        };
        hasher.update(&timeless.encode_to_vec());
        hasher.update(&self.tables.encoded);
        self.hash = format!("xxh3:{:032x}", hasher.digest128());
        let in_order = self.kept.iter().rev().map(|piece| &piece.deflated);
        self.pieces.member(in_order, &self.tail)
    }

    /// What becomes of the kept sample at `place` for record `r` at `rate`.
    fn fate(&self, place: usize, r: &MemRecord, rate: i64) -> Fate {
        let sample = &self.samples[place];
        if sample.bucket != r.bucket || r.bucket == 0 {
            Fate::New
        } else if rate != self.rate || sample.figures != figures_of(r) {
            Fate::Moved
        } else {
            Fate::Kept
        }
    }

    /// Brings the piece `piece` to `batch`, its records newest first: written again, and
    /// deflated, when one of its samples moved; left as it is otherwise.
    fn piece(&mut self, piece: usize, batch: &[MemRecord], rate: i64, syms: &Symbols) {
        let first = piece * PIECE;
        let place = |k: usize| first + batch.len() - 1 - k;
        let kept = &self.kept[piece];
        let whole = kept.samples == batch.len() && kept.deflated.inflated_len() == kept.raw.len();
        let still = whole
            && batch
                .iter()
                .enumerate()
                .all(|(k, r)| self.fate(place(k), r, rate) == Fate::Kept);
        if still {
            return;
        }
        let old = std::mem::take(&mut self.kept[piece].raw);
        let mut raw = std::mem::take(&mut self.spare);
        raw.clear();
        let mut body = std::mem::take(&mut self.body);
        for (k, r) in batch.iter().enumerate() {
            let at = place(k);
            let fate = self.fate(at, r, rate);
            let sample = self.samples[at];
            if fate == Fate::Kept {
                let from = sample.body as usize;
                let to = write_sample(&old[from..from + sample.len as usize], &mut raw);
                self.samples[at].body = to;
                continue;
            }
            if sample.bucket != 0 {
                let values = heap_values(&sample.figures, self.rate);
                self.sites.remove(sample.site, &values);
                subtract(&mut self.totals, &values);
            }
            body.clear();
            let site = if fate == Fate::New {
                self.new_locations(syms, r, &mut body)
            } else {
                let from = sample.body as usize;
                body.extend_from_slice(&old[from..from + sample.locations as usize]);
                sample.site
            };
            let locations = body.len() as u32;
            let figures = figures_of(r);
            let values = heap_values(&figures, rate);
            self.sites.add(site, &values);
            for (t, v) in self.totals.iter_mut().zip(&values) {
                *t = t.wrapping_add(*v);
            }
            write_heap_values(&figures, &values, self.bytes_key, &mut body);
            self.samples[at] = KeptSample {
                bucket: r.bucket,
                figures,
                site,
                body: write_sample(&body, &mut raw),
                len: body.len() as u32,
                locations,
            };
        }
        self.body = body;
        self.spare = old;
        let kept = &mut self.kept[piece];
        kept.raw = raw;
        kept.samples = batch.len();
        self.pieces.piece_into(&kept.raw, &mut kept.deflated);
    }

    /// A new bucket's location ids (its stack symbolised, the leading runtime frames hidden),
    /// written into `body` as its sample's first field; its site.
    fn new_locations(&mut self, syms: &Symbols, r: &MemRecord, body: &mut Vec<u8>) -> u32 {
        let mut locs = Vec::new();
        let lead = r
            .stack
            .iter()
            .position(|&pc| !self.is_runtime(syms, pc))
            .unwrap_or(0);
        self.locations(syms, &r.stack[lead..], &mut locs);
        if locs.is_empty() {
            self.locations(syms, r.stack, &mut locs);
        }
        if !locs.is_empty() {
            prost::encoding::uint64::encode_packed(1, &locs, body);
        }
        if self.sites.naming() {
            let mut frames = Vec::new();
            self.tables.frame_names(&locs, &mut frames);
            self.sites.site(&frames)
        } else {
            NO_SITE
        }
    }
}

/// The buckets (indexes, head first) of piece `piece` of a list of `n`: the piece holds the
/// places `piece * PIECE` on, counted from the list's end.
fn heads_of(piece: usize, n: usize) -> std::ops::Range<usize> {
    let places = piece * PIECE..((piece + 1) * PIECE).min(n);
    n - places.end..n - places.start
}

/// `Sample` by hand (what prost would write for it): its key, length and body; where the body
/// starts in `out`.
fn write_sample(body: &[u8], out: &mut Vec<u8>) -> u32 {
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(body.len() as u64, out);
    let at = out.len() as u32;
    out.extend_from_slice(body);
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (frames as function:line, values) per sample, sorted: the content of a profile,
    /// whatever ids it gives.
    type Content = (Vec<(Vec<String>, Vec<i64>)>, usize, usize);

    fn content(gz: &[u8]) -> Content {
        use std::io::Read as _;
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        let p = pb::Profile::decode(raw.as_slice()).unwrap();
        let s = |i: i64| p.string_table[i as usize].clone();
        let mut out: Vec<_> = p
            .sample
            .iter()
            .map(|x| {
                let frames = x
                    .location_id
                    .iter()
                    .flat_map(|id| {
                        let loc = p.location.iter().find(|l| l.id == *id).unwrap();
                        loc.line.iter().map(|l| {
                            let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                            format!("{}:{}@{:#x}", s(f.name), l.line, loc.address)
                        })
                    })
                    .collect();
                (frames, x.value.clone())
            })
            .collect();
        out.sort();
        (out, p.location.len(), p.function.len())
    }

    #[test]
    fn only_the_pieces_holding_a_changed_sample_are_deflated_again() {
        let table = crate::source::proc::pclntab::tests::fabricated();
        let syms = Symbols {
            table: &table,
            bias: 0,
            hide_internal_runtime: true,
        };
        let stack = [0x1003, 0x1007, 0x100b];
        let records = |n: usize, grown: usize| -> Vec<MemRecord<'_>> {
            // By place from the list's end, as the runtime's list grows at its head.
            (0..n)
                .map(|i| n - 1 - i)
                .map(|place| MemRecord {
                    bucket: 0x10_0000 + 0x100 * place as u64,
                    stack: &stack,
                    alloc_objects: 1 + place as i64 + i64::from(place == grown),
                    alloc_bytes: 16,
                    free_objects: 0,
                    free_bytes: 0,
                    recent_objects: 0,
                    recent_bytes: 0,
                })
                .collect()
        };
        let mut kept = Encoder::new(&[]);
        // 3 pieces (1024 + 1024 + 952 buckets), then the rest of the profile.
        kept.heap_profile_gz(records(3000, usize::MAX).into_iter(), 1, 1, &syms, 1);
        assert_eq!(kept.pieces.deflated, 4);
        // The samples are held in their pieces' protobuf, and nowhere else.
        let held: usize = kept.kept.iter().map(|p| p.raw.len()).sum();
        assert_eq!(held + kept.tail.len(), kept.raw_len());
        // One sample moved, in the middle piece.
        let now = records(3000, 1499);
        let gz = kept.heap_profile_gz(now.iter().cloned(), 1, 1, &syms, 2);
        assert_eq!(
            kept.pieces.deflated,
            4 + 2,
            "the middle piece, and the rest"
        );
        let fresh = Encoder::new(&[]).heap_profile_gz(now.iter().cloned(), 1, 1, &syms, 2);
        assert_eq!(content(&gz), content(&fresh));
        // Ten buckets added in front, and the moved sample back where it was: the newest
        // piece (now holding the ten), the middle one, and the rest.
        let more = records(3010, usize::MAX);
        let gz = kept.heap_profile_gz(more.iter().cloned(), 1, 1, &syms, 3);
        let fresh = Encoder::new(&[]).heap_profile_gz(more.iter().cloned(), 1, 1, &syms, 3);
        assert_eq!(content(&gz), content(&fresh));
        assert_eq!(kept.pieces.deflated, 6 + 3);
    }

    #[test]
    fn a_snapshot_is_encoded_as_its_records_are_and_its_stacks_let_go_on_the_way() {
        use crate::source::proc::walk::{Bucket, Cycle, mem_records};
        let table = crate::source::proc::pclntab::tests::fabricated();
        let syms = Symbols {
            table: &table,
            bias: 0,
            hide_internal_runtime: true,
        };
        let pcs = [0x1003, 0x1007, 0x100b];
        // A list read whole: 2,500 buckets head first, their stacks in that order.
        let mut snapshot = Snapshot {
            cycle: 4,
            list: 9,
            head: 0x10_0000,
            ..Snapshot::default()
        };
        for i in 0..2500u64 {
            let depth = 1 + (i % 3) as usize;
            let start = snapshot.stacks.len();
            snapshot.stacks.extend_from_slice(&pcs[..depth]);
            let cycle = Cycle {
                allocs: 1 + i,
                frees: i / 2,
                alloc_bytes: 16 * (1 + i),
                free_bytes: 16 * (i / 2),
            };
            snapshot.buckets.push(Bucket {
                addr: 0x10_0000 + 0x100 * i,
                stack: start..snapshot.stacks.len(),
                depth: depth as u32,
                active: cycle,
                future: [Cycle::default(), cycle, Cycle::default()],
            });
        }
        let want = Encoder::new(&[]).heap_profile_gz(mem_records(&snapshot), 9, 1, &syms, 5);
        // The newest piece (2,500 = 2 × 1,024 + 452) holds the head, whose stack the next
        // walk reads again: its stacks stay, for `forget_stacks`.
        let newest = snapshot.stacks[..snapshot.buckets[451].stack.end].to_vec();
        let mut encoder = Encoder::new(&[]);
        let gz = encoder.heap_profile_gz_of(&mut snapshot, 1, &syms, 5);
        assert_eq!(gz, want, "the same bytes");
        assert_eq!(
            snapshot.stacks, newest,
            "the older pieces' stacks are let go"
        );
        assert!(snapshot.buckets[452..].iter().all(|b| b.stack.is_empty()));
        // The same list again: its stacks are not the buffer's to cut, and stay.
        let mut again = snapshot.clone();
        again.forget_stacks();
        let before = again.stacks.clone();
        encoder.heap_profile_gz_of(&mut again, 1, &syms, 6);
        assert_eq!(again.stacks, before);
    }

    #[test]
    fn a_capture_from_the_caches_has_the_content_of_a_fresh_one() {
        let table = crate::source::proc::pclntab::tests::fabricated();
        let syms = Symbols {
            table: &table,
            bias: 0,
            hide_internal_runtime: true,
        };
        fn rec(bucket: u64, stack: &[u64], n: i64) -> MemRecord<'_> {
            MemRecord {
                bucket,
                stack,
                alloc_objects: n,
                alloc_bytes: 16 * n,
                free_objects: 0,
                free_bytes: 0,
                recent_objects: n,
                recent_bytes: 32 * n,
            }
        }
        // Stacks as the runtime writes them: an inlined frame's PC is followed by its
        // caller's (0x1003 in main.inner, inlined into main.outer at 0x1007), which is what
        // `appendLocsForStack`'s reuse of a multi-PC location assumes, here as in Go.
        let old = [rec(0x2000, &[0x1003, 0x1007, 0x100b], 1)];
        // Later: two buckets prepended (one cut inside the inlined call), the old one grown.
        let now = [
            rec(0x4000, &[0x1007], 3),
            rec(0x3000, &[0x100b, 0x1003], 2),
            rec(0x2000, &[0x1003, 0x1007, 0x100b], 5),
        ];
        let mut kept = Encoder::new(&[]);
        let first = kept.heap_profile_gz(old.iter().cloned(), 7, 1, &syms, 1);
        assert_eq!(
            content(&first),
            content(&Encoder::new(&[]).heap_profile_gz(old.iter().cloned(), 7, 1, &syms, 1))
        );
        let gz = kept.heap_profile_gz(now.iter().cloned(), 7, 1, &syms, 2);
        // What the collector is handed instead of gunzipping: exactly what the bytes gunzip to,
        // and once only.
        let mut gunzipped = Vec::new();
        use std::io::Read as _;
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut gunzipped)
            .unwrap();
        assert_eq!(kept.take_raw(), gunzipped);
        assert!(kept.take_raw().is_empty());
        let cached = content(&gz);
        let fresh =
            content(&Encoder::new(&[]).heap_profile_gz(now.iter().cloned(), 7, 1, &syms, 2));
        assert_eq!(cached, fresh);
        // A taken buffer is made again for the next profile.
        let again = kept.heap_profile_gz(now.iter().cloned(), 7, 1, &syms, 3);
        assert_eq!(content(&again), fresh);
        assert_eq!(cached.0.len(), 3);
        assert!(
            cached.0.iter().any(|(frames, _)| frames.len() == 3),
            "the cut stack is expanded: {cached:?}"
        );
        // A list read whole again, where a bucket's address now holds another stack: that
        // bucket is symbolised again, not taken from the last list.
        let moved = [rec(0x2000, &[0x1007], 5)];
        let relisted = content(&kept.heap_profile_gz(moved.iter().cloned(), 8, 1, &syms, 4));
        assert_eq!(
            relisted.0,
            content(&Encoder::new(&[]).heap_profile_gz(moved.iter().cloned(), 8, 1, &syms, 4)).0,
            "the same samples (the kept tables still hold the last list's locations)"
        );
        assert_ne!(relisted.0, cached.0);
    }
}
