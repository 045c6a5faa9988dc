//! The heap profile as `runtime/pprof` writes it (`protomem.go`, `proto.go`): four sample
//! types, period = MemProfileRate, samples scaled like `scaleHeapSample`, leading runtime
//! frames hidden, a `bytes` label, and each run of inlined frames grouped into one location
//! the way `profileBuilder`'s pc deck groups them.

use std::collections::HashMap;
use std::io::Write as _;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message as _;

use super::pclntab::{Frame, Pclntab};
use super::walk::MemRecord;
use crate::decode::pb;

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

struct LocInfo {
    id: u64,
    pcs: usize,
    first_frames: Vec<Frame>,
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
}

#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<pb::Function>,
    function_ids: HashMap<String, u64>,
    locations: Vec<pb::Location>,
    locs: HashMap<u64, LocInfo>,
    deck: Deck,
    mappings: Vec<pb::Mapping>,
}

impl Builder {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn emit_location(&mut self) -> Option<u64> {
        if self.deck.pcs.is_empty() {
            return None;
        }
        let deck = std::mem::take(&mut self.deck);
        let addr = deck.pcs[0];
        let id = self.locs.len() as u64 + 1;
        self.locs.insert(
            addr,
            LocInfo {
                id,
                pcs: deck.pcs.len(),
                first_frames: deck.frames[..deck.first_pc_frames].to_vec(),
            },
        );
        let mut lines = Vec::with_capacity(deck.frames.len());
        for frame in &deck.frames {
            let function_id = match self.function_ids.get(&frame.function) {
                Some(&fid) => fid,
                None => {
                    let fid = self.functions.len() as u64 + 1;
                    let name = self.intern(&frame.function);
                    let filename = self.intern(&frame.file);
                    self.functions.push(pb::Function {
                        id: fid,
                        name,
                        system_name: name,
                        filename,
                        start_line: frame.start_line,
                    });
                    self.function_ids.insert(frame.function.clone(), fid);
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
        self.locations.push(pb::Location {
            id,
            mapping_id,
            address: deck.frames[0].pc,
            line: lines,
            is_folded: false,
        });
        Some(id)
    }

    /// `appendLocsForStack`.
    fn locations_for(&mut self, syms: &Symbols, stack: &[u64]) -> Vec<u64> {
        let mut locs = Vec::new();
        self.deck = Deck::default();
        let mut stk = stack.to_vec();
        syms.table.expand_final_inline_biased(&mut stk, syms.bias);
        let mut i = 0;
        while i < stk.len() {
            let addr = stk[i];
            if let Some(l) = self.locs.get(&addr) {
                let (id, pcs, first) = (l.id, l.pcs, l.first_frames.clone());
                if !self.deck.pcs.is_empty() && self.deck.try_add(addr, &first) {
                    i += 1;
                    continue;
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
        locs
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

/// The gzipped profile `writeHeapProto` would write for these records.
pub fn heap_profile_gz(
    records: &[MemRecord],
    rate: i64,
    syms: &Symbols,
    mappings: &[ExeMapping],
    time_nanos: i64,
) -> Vec<u8> {
    let raw = heap_profile(records, rate, syms, mappings, time_nanos).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 3 + 64), Compression::fast());
    gz.write_all(&raw).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

pub fn heap_profile(
    records: &[MemRecord],
    rate: i64,
    syms: &Symbols,
    mappings: &[ExeMapping],
    time_nanos: i64,
) -> pb::Profile {
    let mut b = Builder::default();
    b.intern("");
    for (i, m) in mappings.iter().enumerate() {
        let filename = b.intern(&m.file);
        let build_id = b.intern(&m.build_id);
        b.mappings.push(pb::Mapping {
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
        });
    }
    let vt = |b: &mut Builder, t: &str, u: &str| pb::ValueType {
        r#type: b.intern(t),
        unit: b.intern(u),
    };
    let period_type = Some(vt(&mut b, "space", "bytes"));
    let sample_type = vec![
        vt(&mut b, "alloc_objects", "count"),
        vt(&mut b, "alloc_space", "bytes"),
        vt(&mut b, "inuse_objects", "count"),
        vt(&mut b, "inuse_space", "bytes"),
    ];
    let bytes_key = b.intern("bytes");
    let mut samples = Vec::with_capacity(records.len());
    for r in records {
        let hidden = hide_leading_runtime(&r.stack, |pc| syms.is_runtime(pc));
        let mut locs = b.locations_for(syms, hidden);
        if locs.is_empty() {
            locs = b.locations_for(syms, &r.stack);
        }
        let (ao, ab) = scale_heap_sample(r.alloc_objects, r.alloc_bytes, rate);
        let (io, ib) = scale_heap_sample(
            r.alloc_objects - r.free_objects,
            r.alloc_bytes - r.free_bytes,
            rate,
        );
        let block = if r.alloc_objects > 0 {
            r.alloc_bytes / r.alloc_objects
        } else {
            0
        };
        let label = if block != 0 {
            vec![pb::Label {
                key: bytes_key,
                str: 0,
                num: block,
                num_unit: 0,
            }]
        } else {
            Vec::new()
        };
        samples.push(pb::Sample {
            location_id: locs,
            value: vec![ao, ab, io, ib],
            label,
        });
    }
    pb::Profile {
        sample_type,
        sample: samples,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos,
        duration_nanos: 0,
        period_type,
        period: rate,
        comment: Vec::new(),
        default_sample_type: 0,
        doc_url: 0,
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
}
