//! The string, function and location tables of one target, kept across its captures, and the
//! pc deck (`profileBuilder`'s `pcDeck`) that groups each run of inlined frames into one location.
//! The strings, functions and locations are kept for the life of the process: the runtime never
//! frees a bucket, so a location used once is used by every later capture.

use std::collections::HashMap;
use std::sync::Arc;

use super::{ExeMapping, Symbols};
use crate::decode::pb;
use crate::source::proc::pclntab::Frame;

/// A map keyed by PCs (already spread by the target's layout): one multiply instead of SipHash,
/// which was a tenth of a capture's CPU.
#[derive(Default, Clone, Copy)]
pub(super) struct PcHasher(u64);

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

pub(super) type PcMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<PcHasher>>;

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
pub(super) struct Tables {
    strings: i64,
    string_ids: HashMap<String, i64>,
    functions: u64,
    function_ids: HashMap<String, u64>,
    locs: PcMap<LocInfo>,
    mappings: Vec<pb::Mapping>,
    /// Every entry made so far, as `Profile` fields (mapping, location, function, string).
    pub(super) encoded: Vec<u8>,
    deck: Deck,
    /// Each function's name, by id less one.
    function_names: Vec<String>,
    /// Each location's functions (ids), in the order of its lines, by id less one.
    location_functions: Vec<Box<[u64]>>,
}

impl Tables {
    pub(super) fn intern(&mut self, s: &str) -> i64 {
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
    pub(super) fn locations_for(&mut self, syms: &Symbols, stk: &[u64], locs: &mut Vec<u64>) {
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
    pub(super) fn frame_names<'t>(&'t self, locs: &[u64], frames: &mut Vec<&'t str>) {
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
    pub(super) fn with_mappings(mappings: &[ExeMapping]) -> Tables {
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

#[cfg(test)]
mod tests {
    use super::*;

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
