//! The heap profile as `runtime/pprof` writes it (`protomem.go`, `proto.go`): its four sample
//! types, then `recent_objects` and `recent_space` (what was allocated since the last
//! published cycle), `inuse_space` named the default, period = MemProfileRate, samples scaled like `scaleHeapSample`, leading runtime
//! frames hidden, a `bytes` label, and each run of inlined frames grouped into one location
//! the way `profileBuilder`'s pc deck groups them.
//!
//! # Encoding a capture
//!
//! The profile is written by hand with prost's encoding functions, and most of it is copied from
//! the last capture of the same list. Each bucket's `Sample` message (location ids, values,
//! `bytes` label) is kept by the bucket's place from the list's end, which stays put as the list
//! grows at its head, and written again only when the record's figures (or the rate) moved: a
//! large profile's sites mostly allocated once, at start, and on the 100k-bucket target one
//! sample in 100,080 changes between two captures. The strings, functions and locations are kept
//! for the life of the process. A new `list` number (the list read whole again) starts the
//! samples afresh, so memory that is not what it was is symbolised again rather than trusted.
//! The samples are deflated in pieces (`pieces.rs`).
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

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message as _;

use super::pclntab::{Frame, Pclntab};
use super::pieces::{Piece, Pieces};
use super::sites::{NO_SITE, SAMPLE_TYPES, SiteSums, Values};
use super::walk::MemRecord;
use crate::decode::{Summary, pb};
use crate::source::{MadeSites, SiteNaming};

/// Resolves the target's runtime PCs against the binary's table (link-time addresses).
pub struct Symbols<'a> {
    pub table: &'a Pclntab,
    /// Added to link-time addresses to get the target's (PIE load bias, else 0).
    pub bias: u64,
    /// Go 1.24+ also hides `internal/runtime/…` frames; Go 1.23 only `runtime.`.
    pub hide_internal_runtime: bool,
}

impl Symbols<'_> {
    /// `allFrames`: the frame one return PC stands for; none for `runtime.goexit` or a PC
    /// outside Go code.
    fn frames(&self, addr: u64) -> Vec<Frame> {
        match self.table.frame(addr.wrapping_sub(self.bias)) {
            Some(mut f) if f.function != "runtime.goexit" => {
                f.pc = f.pc.wrapping_add(self.bias);
                f.entry = f.entry.wrapping_add(self.bias);
                vec![f]
            }
            _ => Vec::new(),
        }
    }

    fn is_runtime(&self, addr: u64) -> bool {
        self.table
            .func_for_pc(addr.wrapping_sub(self.bias))
            .is_some_and(|name| {
                name.starts_with("runtime.")
                    || (self.hide_internal_runtime && name.starts_with("internal/runtime/"))
            })
    }
}

/// One executable mapping of the target, for the profile's mapping table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExeMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub file: String,
    pub build_id: String,
}

/// `scaleHeapSample`: undo the sampling, given each sample's chance to be recorded.
pub fn scale_heap_sample(count: i64, size: i64, rate: i64) -> (i64, i64) {
    if count == 0 || size == 0 {
        return (0, 0);
    }
    if rate <= 1 {
        return (count, size);
    }
    let avg = size as f64 / count as f64;
    let scale = 1.0 / (1.0 - (-avg / rate as f64).exp());
    ((count as f64 * scale) as i64, (size as f64 * scale) as i64)
}

/// `protomem`'s rule: drop the leading runtime frames, unless that leaves nothing.
pub fn hide_leading_runtime(stack: &[u64], is_runtime: impl Fn(u64) -> bool) -> &[u64] {
    match stack.iter().position(|&pc| !is_runtime(pc)) {
        Some(i) => &stack[i..],
        None => stack,
    }
}

/// A map keyed by PCs (already spread by the target's layout): one multiply instead of SipHash,
/// which was a tenth of a capture's CPU.
#[derive(Default, Clone, Copy)]
struct PcHasher(u64);

impl std::hash::Hasher for PcHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type PcMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<PcHasher>>;

struct LocInfo {
    id: u64,
    pcs: usize,
    first_frames: Arc<[Frame]>,
}

#[derive(Default)]
struct Deck {
    pcs: Vec<u64>,
    frames: Vec<Frame>,
    first_pc_frames: usize,
}

impl Deck {
    /// `pcDeck.tryAdd`: the frame joins the deck when it continues an inlined chain.
    fn try_add(&mut self, pc: u64, frames: &[Frame]) -> bool {
        if let (Some(last), Some(new)) = (self.frames.last(), frames.first()) {
            if !last.inlined || last.entry == 0 || new.entry == 0 {
                return false;
            }
            if last.entry != new.entry || last.function == new.function {
                return false;
            }
        }
        self.pcs.push(pc);
        self.frames.extend_from_slice(frames);
        if self.pcs.len() == 1 {
            self.first_pc_frames = self.frames.len();
        }
        true
    }

    fn clear(&mut self) {
        self.pcs.clear();
        self.frames.clear();
        self.first_pc_frames = 0;
    }
}

/// The string, function and location tables of one target, kept across its captures. The
/// runtime never frees a profile bucket, so every location an earlier capture of the same
/// process used is used again by every later one: the tables only grow, each entry is encoded
/// once, and a capture encodes only its samples and the entries new since the last one.
#[derive(Default)]
struct Tables {
    strings: i64,
    string_ids: HashMap<String, i64>,
    functions: u64,
    function_ids: HashMap<String, u64>,
    locs: PcMap<LocInfo>,
    mappings: Vec<pb::Mapping>,
    /// Every entry made so far, as `Profile` fields (mapping, location, function, string).
    encoded: Vec<u8>,
    deck: Deck,
    /// Each function's name, by id less one.
    function_names: Vec<String>,
    /// Each location's functions (ids), in the order of its lines, by id less one.
    location_functions: Vec<Box<[u64]>>,
}

impl Tables {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings;
        self.strings += 1;
        prost::encoding::string::encode(6, &s.to_string(), &mut self.encoded);
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn emit_location(&mut self) -> Option<u64> {
        if self.deck.pcs.is_empty() {
            return None;
        }
        let addr = self.deck.pcs[0];
        let id = self.locs.len() as u64 + 1;
        self.locs.insert(
            addr,
            LocInfo {
                id,
                pcs: self.deck.pcs.len(),
                first_frames: self.deck.frames[..self.deck.first_pc_frames].into(),
            },
        );
        let frames = std::mem::take(&mut self.deck.frames);
        let mut lines = Vec::with_capacity(frames.len());
        for frame in &frames {
            let function_id = match self.function_ids.get(&frame.function) {
                Some(&fid) => fid,
                None => {
                    self.functions += 1;
                    let fid = self.functions;
                    let name = self.intern(&frame.function);
                    let filename = self.intern(&frame.file);
                    let function = pb::Function {
                        id: fid,
                        name,
                        system_name: name,
                        filename,
                        start_line: frame.start_line,
                    };
                    prost::encoding::message::encode(5, &function, &mut self.encoded);
                    self.function_ids.insert(frame.function.clone(), fid);
                    self.function_names.push(frame.function.clone());
                    fid
                }
            };
            lines.push(pb::Line {
                function_id,
                line: frame.line,
                column: 0,
            });
        }
        let mapping_id = self
            .mappings
            .iter()
            .find(|m| m.memory_start <= addr && addr < m.memory_limit)
            .map_or(0, |m| m.id);
        let location = pb::Location {
            id,
            mapping_id,
            address: frames[0].pc,
            line: lines,
            is_folded: false,
        };
        prost::encoding::message::encode(4, &location, &mut self.encoded);
        self.location_functions
            .push(location.line.iter().map(|l| l.function_id).collect());
        self.deck.frames = frames;
        self.deck.clear();
        Some(id)
    }

    /// `appendLocsForStack`, into `locs`.
    fn locations_for(&mut self, syms: &Symbols, stk: &[u64], locs: &mut Vec<u64>) {
        self.deck.clear();
        let mut i = 0;
        while i < stk.len() {
            let addr = stk[i];
            if let Some(l) = self.locs.get(&addr) {
                let (id, pcs) = (l.id, l.pcs);
                if !self.deck.pcs.is_empty() {
                    let first = Arc::clone(&l.first_frames);
                    if self.deck.try_add(addr, &first) {
                        i += 1;
                        continue;
                    }
                }
                locs.extend(self.emit_location());
                locs.push(id);
                i += pcs.max(1);
                continue;
            }
            let frames = syms.frames(addr);
            if frames.is_empty() {
                locs.extend(self.emit_location());
                i += 1;
                continue;
            }
            if self.deck.try_add(addr, &frames) {
                i += 1;
                continue;
            }
            locs.extend(self.emit_location());
            if let Some(l) = self.locs.get(&addr) {
                locs.push(l.id);
                i += l.pcs.max(1);
            } else {
                self.deck.try_add(addr, &frames);
                i += 1;
            }
        }
        locs.extend(self.emit_location());
    }
}

impl Tables {
    /// The function names of the frames of `locs` (location ids), leaf first, into `frames`.
    fn frame_names<'t>(&'t self, locs: &[u64], frames: &mut Vec<&'t str>) {
        for &loc in locs {
            let Some(functions) = self.location_functions.get(loc as usize - 1) else {
                continue;
            };
            for &f in functions.iter() {
                if let Some(name) = self.function_names.get(f as usize - 1) {
                    frames.push(name);
                }
            }
        }
    }

    /// Empty tables holding the target's executable mappings.
    fn with_mappings(mappings: &[ExeMapping]) -> Tables {
        let mut t = Tables::default();
        t.intern("");
        for (i, m) in mappings.iter().enumerate() {
            let filename = t.intern(&m.file);
            let build_id = t.intern(&m.build_id);
            let mapping = pb::Mapping {
                id: i as u64 + 1,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: m.offset,
                filename,
                build_id,
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            };
            prost::encoding::message::encode(3, &mapping, &mut t.encoded);
            t.mappings.push(mapping);
        }
        t
    }
}

impl Pclntab {
    /// `expand_final_inline` over runtime addresses.
    fn expand_final_inline_biased(&self, stack: &mut Vec<u64>, bias: u64) {
        for pc in stack.iter_mut() {
            *pc = pc.wrapping_sub(bias);
        }
        self.expand_final_inline(stack);
        for pc in stack.iter_mut() {
            *pc = pc.wrapping_add(bias);
        }
    }
}

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
    samples: Vec<BucketSample>,
    list: u64,
    /// The samples' bytes deflated in pieces of [`PIECE`] buckets, by place from the list's
    /// end like `samples`: a piece none of whose samples was written again is not deflated
    /// again (see [`super::pieces`]).
    pieces: Pieces,
    deflated: Vec<Piece>,
    /// The last profile's protobuf, before gzip (see [`Encoder::take_raw`]).
    raw: Vec<u8>,
    /// Its length, so a buffer taken away is reserved at once at that size the next time.
    raw_len: usize,
    stack: Vec<u64>,
    /// Each site's sums over the samples, and the last profile's entry (see [`super::sites`]).
    sites: SiteSums,
    entry: Option<MadeSites>,
    /// Every sample's values summed, wrapping (the profile's totals per sample type), and the
    /// last profile's content hash.
    totals: Values,
    hash: String,
}

/// Buckets per deflated piece of a heap profile's samples (~70 KB of protobuf).
const PIECE: usize = 1024;

/// One bucket's `Sample` message as last written (its body: location ids, values, label), and
/// the figures it was written from. Most buckets of a large profile do not move between two
/// captures (sites that allocated once, at start), and their samples are copied, not written.
#[derive(Default)]
struct BucketSample {
    /// The bucket's address (0: no sample yet).
    bucket: u64,
    /// The record's six figures and the sampling rate (none before the first values).
    figures: Option<[i64; 7]>,
    /// Bytes of `body` holding the location ids (written once).
    locations: usize,
    body: Vec<u8>,
    /// Its site (see [`super::sites`]).
    site: u32,
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
            pieces: Pieces::default(),
            deflated: Vec::new(),
            sample_type,
            period_type,
            bytes_key,
            raw: Vec::new(),
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
        for sample in &mut self.samples {
            if sample.bucket == 0 {
                continue;
            }
            locs.clear();
            sample_locations(&sample.body[..sample.locations], &mut locs);
            let mut frames = Vec::new();
            self.tables.frame_names(&locs, &mut frames);
            sample.site = self.sites.site(&frames);
            if let Some(figures) = &sample.figures {
                self.sites.add(sample.site, &heap_values(figures));
            }
        }
        self.entry = None;
    }

    /// The last profile's figures per site, once: its site index entry.
    pub fn take_sites(&mut self) -> Option<MadeSites> {
        self.entry.take()
    }

    /// The protobuf the last [`Encoder::heap_profile_gz`] gzipped, handed over whole (what the
    /// gzipped bytes decompress to), so the collector need not gunzip what was just gzipped.
    /// Empty before the first profile, or when already taken.
    pub fn take_raw(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.raw)
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

    /// The gzipped profile `writeHeapProto` would write for these records, read from the list
    /// numbered `list` (see [`Snapshot::list`](super::walk::Snapshot::list); records that are not from one list each
    /// time need a new number each time).
    pub fn heap_profile_gz<'a>(
        &mut self,
        records: impl ExactSizeIterator<Item = MemRecord<'a>>,
        list: u64,
        rate: i64,
        syms: &Symbols,
        time_nanos: i64,
    ) -> Vec<u8> {
        self.raw.clear();
        self.raw.reserve(self.raw_len);
        if list != self.list {
            self.samples.clear();
            self.deflated.clear();
            self.list = list;
        }
        if self.samples.is_empty() {
            self.sites.clear();
            self.totals = [0; 6];
        }
        let n = records.len();
        self.samples.resize_with(n, BucketSample::default);
        let mut locs = Vec::new();
        let mut samples = std::mem::take(&mut self.samples);
        // Each piece's first byte in `raw` and whether a sample of it was written again.
        let pieces = n.div_ceil(PIECE);
        let mut starts = vec![0; pieces];
        let mut dirty = vec![false; pieces];
        for (i, (r, sample)) in records.zip(samples.iter_mut().rev()).enumerate() {
            let piece = (n - 1 - i) / PIECE;
            if i == 0 || (n - i) % PIECE == 0 {
                starts[piece] = self.raw.len();
            }
            let figures = [
                r.alloc_objects,
                r.alloc_bytes,
                r.free_objects,
                r.free_bytes,
                r.recent_objects,
                r.recent_bytes,
                rate,
            ];
            if sample.bucket != r.bucket || r.bucket == 0 {
                dirty[piece] = true;
                if let Some(old) = &sample.figures {
                    let old = heap_values(old);
                    self.sites.remove(sample.site, &old);
                    subtract(&mut self.totals, &old);
                }
                locs.clear();
                let lead = r
                    .stack
                    .iter()
                    .position(|&pc| !self.is_runtime(syms, pc))
                    .unwrap_or(0);
                self.locations(syms, &r.stack[lead..], &mut locs);
                if locs.is_empty() {
                    self.locations(syms, r.stack, &mut locs);
                }
                let mut body = Vec::new();
                if !locs.is_empty() {
                    prost::encoding::uint64::encode_packed(1, &locs, &mut body);
                }
                let site = if self.sites.naming() {
                    let mut frames = Vec::new();
                    self.tables.frame_names(&locs, &mut frames);
                    self.sites.site(&frames)
                } else {
                    NO_SITE
                };
                *sample = BucketSample {
                    bucket: r.bucket,
                    figures: None,
                    locations: body.len(),
                    body,
                    site,
                };
            }
            if sample.figures != Some(figures) {
                dirty[piece] = true;
                let values = heap_values(&figures);
                if let Some(old) = &sample.figures {
                    let old = heap_values(old);
                    self.sites.remove(sample.site, &old);
                    subtract(&mut self.totals, &old);
                }
                self.sites.add(sample.site, &values);
                for (t, v) in self.totals.iter_mut().zip(&values) {
                    *t = t.wrapping_add(*v);
                }
                sample.figures = Some(figures);
                sample.body.truncate(sample.locations);
                write_heap_values(&r, &values, self.bytes_key, &mut sample.body);
            }
            // `Sample` by hand (what prost would write for it).
            prost::encoding::encode_key(
                2,
                prost::encoding::WireType::LengthDelimited,
                &mut self.raw,
            );
            prost::encoding::encode_varint(sample.body.len() as u64, &mut self.raw);
            self.raw.extend_from_slice(&sample.body);
        }
        self.samples = samples;
        self.entry = self.sites.entry();
        let samples_end = self.raw.len();
        let head = pb::Profile {
            sample_type: self.sample_type.clone(),
            time_nanos,
            period_type: self.period_type,
            period: rate,
            default_sample_type: self.default_type,
            ..Default::default()
        };
        head.encode(&mut self.raw)
            .expect("a Vec grows to hold any message");
        self.raw.extend_from_slice(&self.tables.encoded);
        self.raw_len = self.raw.len();
        // `decode::summarize`'s hash: every top-level field in order but the timestamps. The
        // head is written in field order, so without its time it is those fields.
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        hasher.update(&self.raw[..samples_end]);
        let timeless = pb::Profile {
            time_nanos: 0,
            ..head
        };
        hasher.update(&timeless.encode_to_vec());
        hasher.update(&self.tables.encoded);
        self.hash = format!("xxh3:{:032x}", hasher.digest128());
        self.deflated.resize_with(pieces, Piece::default);
        for piece in 0..pieces {
            let start = starts[piece];
            let end = if piece == 0 {
                samples_end
            } else {
                starts[piece - 1]
            };
            let kept = &mut self.deflated[piece];
            if dirty[piece] || kept.inflated_len() != end - start {
                self.pieces.piece_into(&self.raw[start..end], kept);
            }
        }
        // In `raw`'s order: the newest buckets' piece first.
        let in_order = self.deflated.iter().rev();
        self.pieces.member(in_order, &self.raw[samples_end..])
    }
}

fn subtract(totals: &mut Values, values: &Values) {
    for (t, v) in totals.iter_mut().zip(values) {
        *t = t.wrapping_sub(*v);
    }
}

/// The location ids a `Sample` body starts with (field 1, packed), as written above.
fn sample_locations(mut packed: &[u8], locs: &mut Vec<u64>) {
    use prost::encoding::decode_varint;
    if packed.is_empty()
        || decode_varint(&mut packed).is_err()
        || decode_varint(&mut packed).is_err()
    {
        return;
    }
    while !packed.is_empty() {
        match decode_varint(&mut packed) {
            Ok(id) => locs.push(id),
            Err(_) => return,
        }
    }
}

/// A heap `Sample`'s six values from a record's figures (six counts, then the sampling rate),
/// scaled as `writeHeapProto` scales them.
fn heap_values(figures: &[i64; 7]) -> Values {
    let [
        alloc_objects,
        alloc_bytes,
        free_objects,
        free_bytes,
        recent_objects,
        recent_bytes,
        rate,
    ] = *figures;
    let (ao, ab) = scale_heap_sample(alloc_objects, alloc_bytes, rate);
    let (io, ib) = scale_heap_sample(alloc_objects - free_objects, alloc_bytes - free_bytes, rate);
    let (ro, rb) = scale_heap_sample(recent_objects, recent_bytes, rate);
    [ao, ab, io, ib, ro, rb]
}

/// A heap `Sample`'s values and its `bytes` label (the average object size), after its
/// location ids: what `writeHeapProto` writes for one record.
fn write_heap_values(r: &MemRecord, values: &Values, bytes_key: i64, body: &mut Vec<u8>) {
    prost::encoding::int64::encode_packed(2, values, body);
    let block = if r.alloc_objects > 0 {
        r.alloc_bytes / r.alloc_objects
    } else {
        0
    };
    if block != 0 {
        let label = pb::Label {
            key: bytes_key,
            str: 0,
            num: block,
            num_unit: 0,
        };
        prost::encoding::message::encode(3, &label, body);
    }
}

/// Writes one target's goroutine profiles as `runtime/pprof`'s `printCountProfile` writes
/// `/debug/pprof/goroutine`: sample type and period `goroutine/count`, one sample per stack
/// with its count. Each sample also carries where its goroutines were created (label
/// `created_by`: the function and file:line of the `go` statement) and the function they
/// started in (`go_func`), and goroutines that were running when read are a sample of their
/// own labelled `state: running`, whose one location is that function: their real stack was
/// on a thread, not in memory.
pub struct GoroutineEncoder {
    tables: Tables,
    sample_type: Vec<pb::ValueType>,
    period_type: Option<pb::ValueType>,
    created_key: i64,
    func_key: i64,
    state_key: i64,
    running: i64,
    /// `gopc` → the string id of its `created_by` label (0: none).
    sites: PcMap<i64>,
    /// `startpc` → the string id of its `go_func` label (0: none).
    funcs: PcMap<i64>,
}

/// (stack, created_by, go_func, running): what one goroutine sample stands for.
type GoroutineKey = (Vec<u64>, i64, i64, bool);

impl GoroutineEncoder {
    pub fn new(mappings: &[ExeMapping]) -> GoroutineEncoder {
        let mut t = Tables::with_mappings(mappings);
        let vt = pb::ValueType {
            r#type: t.intern("goroutine"),
            unit: t.intern("count"),
        };
        let created_key = t.intern("created_by");
        let func_key = t.intern("go_func");
        let state_key = t.intern("state");
        let running = t.intern("running");
        GoroutineEncoder {
            tables: t,
            sample_type: vec![vt],
            period_type: Some(vt),
            created_key,
            func_key,
            state_key,
            running,
            sites: PcMap::default(),
            funcs: PcMap::default(),
        }
    }

    /// The `created_by` label of a goroutine, as a `debug=2` dump prints `created by`: none
    /// for the main goroutine (goid 1) nor for a site in an unexported runtime function
    /// (`showframe` hides those).
    fn site(&mut self, syms: &Symbols, goid: u64, gopc: u64) -> i64 {
        if goid == 1 {
            return 0;
        }
        if let Some(&id) = self.sites.get(&gopc) {
            return id;
        }
        let id = match syms.table.creation_site(gopc.wrapping_sub(syms.bias)) {
            Some((name, _, _))
                if name
                    .strip_prefix("runtime.")
                    .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_uppercase())) =>
            {
                0
            }
            Some((name, file, line)) => self.tables.intern(&format!("{name} {file}:{line}")),
            None => 0,
        };
        self.sites.insert(gopc, id);
        id
    }

    fn func(&mut self, syms: &Symbols, startpc: u64) -> i64 {
        if let Some(&id) = self.funcs.get(&startpc) {
            return id;
        }
        let name = syms
            .table
            .find_func(startpc.wrapping_sub(syms.bias))
            .and_then(|f| syms.table.func_name(f).map(str::to_string));
        let id = name.map_or(0, |n| self.tables.intern(&n));
        self.funcs.insert(startpc, id);
        id
    }

    /// The gzipped goroutine profile of one walk.
    pub fn goroutine_profile_gz(
        &mut self,
        gs: &super::goroutines::Goroutines,
        syms: &Symbols,
        time_nanos: i64,
    ) -> Vec<u8> {
        use super::goroutines::GState;
        let mut counts: HashMap<GoroutineKey, i64> = HashMap::new();
        for g in &gs.goroutines {
            let running = g.state == GState::Running;
            let stack = if running {
                vec![g.startpc.wrapping_add(1)]
            } else {
                gs.stack(g).to_vec()
            };
            let key = (
                stack,
                self.site(syms, g.goid, g.gopc),
                self.func(syms, g.startpc),
                running,
            );
            *counts.entry(key).or_default() += 1;
        }
        // printCountProfile's order: most goroutines first.
        let mut samples: Vec<(GoroutineKey, i64)> = counts.into_iter().collect();
        samples.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut raw = Vec::new();
        let mut locs = Vec::new();
        for ((stack, site, func, running), count) in samples {
            let mut stack = stack;
            syms.table.expand_final_inline_biased(&mut stack, syms.bias);
            locs.clear();
            self.tables.locations_for(syms, &stack, &mut locs);
            let mut label = vec![];
            for (key, value) in [
                (self.created_key, site),
                (self.func_key, func),
                (self.state_key, if running { self.running } else { 0 }),
            ] {
                if value != 0 {
                    label.push(pb::Label {
                        key,
                        str: value,
                        num: 0,
                        num_unit: 0,
                    });
                }
            }
            let sample = pb::Sample {
                location_id: locs.clone(),
                value: vec![count],
                label,
            };
            prost::encoding::message::encode(2, &sample, &mut raw);
        }
        let head = pb::Profile {
            sample_type: self.sample_type.clone(),
            time_nanos,
            period_type: self.period_type,
            period: 1,
            ..Default::default()
        };
        head.encode(&mut raw)
            .expect("a Vec grows to hold any message");
        raw.extend_from_slice(&self.tables.encoded);
        let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 3 + 64), Compression::fast());
        gz.write_all(&raw).expect("writing to a Vec cannot fail");
        gz.finish().expect("writing to a Vec cannot fail")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_matches_scale_heap_sample() {
        assert_eq!(scale_heap_sample(0, 100, 512 * 1024), (0, 0));
        assert_eq!(scale_heap_sample(3, 0, 512 * 1024), (0, 0));
        assert_eq!(
            scale_heap_sample(3, 300, 1),
            (3, 300),
            "rate 1: every sample kept"
        );
        // One 1 KiB object at the default rate stands for about 512 of them.
        let (n, s) = scale_heap_sample(1, 1024, 512 * 1024);
        assert_eq!((n, s), (512, 524_800));
        // Large objects are nearly always sampled.
        assert_eq!(scale_heap_sample(2, 64 << 20, 512 * 1024), (2, 64 << 20));
        // In-use may be negative in flight; the formula is applied as is.
        assert_eq!(scale_heap_sample(-1, -4096, 4096).0, -1);
    }

    #[test]
    fn leading_runtime_frames_are_hidden_unless_all_are() {
        let runtime = |pc: u64| pc < 10;
        assert_eq!(
            hide_leading_runtime(&[1, 2, 30, 4, 50], runtime),
            &[30, 4, 50]
        );
        assert_eq!(hide_leading_runtime(&[30, 1], runtime), &[30, 1]);
        assert_eq!(hide_leading_runtime(&[1, 2], runtime), &[1, 2]);
        assert_eq!(hide_leading_runtime(&[], runtime), &[] as &[u64]);
    }

    fn frame(function: &str, entry: u64, inlined: bool) -> Frame {
        Frame {
            pc: entry + 1,
            function: function.into(),
            file: "f.go".into(),
            line: 1,
            start_line: 1,
            entry,
            inlined,
        }
    }

    #[test]
    fn the_deck_joins_an_inlined_chain_and_stops_at_its_physical_caller() {
        let mut d = Deck::default();
        assert!(d.try_add(1, &[frame("a", 100, true)]));
        assert!(d.try_add(2, &[frame("b", 100, true)]));
        assert!(d.try_add(3, &[frame("main", 100, false)]));
        assert!(
            !d.try_add(4, &[frame("caller", 200, false)]),
            "main is not inlined"
        );
        let mut d = Deck::default();
        assert!(d.try_add(1, &[frame("a", 100, true)]));
        assert!(
            !d.try_add(2, &[frame("x", 200, false)]),
            "another function's code"
        );
        assert!(
            !d.try_add(2, &[frame("a", 100, true)]),
            "same name: recursion, not inlining"
        );
    }

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
