//! Go's own symbol table, `.gopclntab` (the Go 1.20+ layout), read from the binary file: the
//! function table, names, files, line tables and the inline tree. A PC becomes frames the way
//! `runtime.CallersFrames` and `runtime.FuncForPC` give them, so the profile names what the
//! target's own pprof would.
//!
//! One file per idea: here the header (its magic, the Go 1.20+ layout, the pointer size) and the
//! text base a function-table offset counts from; `funcs.rs` finds the function holding a PC and
//! reads its tables (name, file, line, SP delta); `inline.rs` turns a PC into the frame it stands
//! for through the inline tree. The tables themselves are found through the module data
//! (`module.rs`), never through the ELF section layout.

mod funcs;
mod inline;

use thiserror::Error;

use super::module::TextSect;

pub use self::funcs::{FUNC_FLAG_SP_WRITE, FUNC_FLAG_TOP_FRAME};
pub use self::inline::Frame;

const MAGIC_GO120: u32 = 0xffff_fff1;
/// Bytes of a `_func` before its pcdata offsets.
const FUNC_FIXED: usize = 44;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PclntabError {
    #[error("the .gopclntab header is too short")]
    Short,
    #[error(
        "the .gopclntab magic is {0:#x}, not Go 1.20+'s 0xfffffff1 (a Go release older than 1.20?)"
    )]
    Magic(u32),
    #[error("the .gopclntab header says {0}-byte pointers; only 64-bit targets are supported")]
    PointerSize(u8),
    #[error("the .gopclntab function table lies outside the section")]
    FunctionTable,
}

/// Where the inline trees live: the `go:func.*` area, as link-time address and bytes.
#[derive(Debug, Clone, Default)]
pub struct FuncData {
    pub base: u64,
    /// The section holding `base` (normally `.rodata`): its address and bytes.
    pub section_addr: u64,
    pub section: Vec<u8>,
}

impl FuncData {
    fn bytes(&self, off: u32, len: usize) -> Option<&[u8]> {
        let start = self
            .base
            .checked_add(u64::from(off))?
            .checked_sub(self.section_addr)?;
        let start = usize::try_from(start).ok()?;
        self.section.get(start..start.checked_add(len)?)
    }
}

/// One physical function found for a PC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuncRef {
    /// Offset of the `_func` record within the pclntab.
    off: usize,
    pub entry: u64,
}

/// The parsed `.gopclntab` of one binary. Addresses are link-time (before any PIE load bias).
#[derive(Debug, Clone)]
pub struct Pclntab {
    data: Vec<u8>,
    quantum: u64,
    nfunc: usize,
    text_start: u64,
    /// `moduledata.textsectmap` when the text is in several pieces (empty or one: contiguous).
    textsects: Vec<TextSect>,
    funcname: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    functab: usize,
    funcdata: FuncData,
}

fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(data: &[u8], off: usize) -> Option<u64> {
    let b = data.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

fn cstr(data: &[u8], off: usize) -> Option<&str> {
    let rest = data.get(off..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

fn varint(p: &[u8], at: &mut usize) -> Option<u32> {
    let mut v: u32 = 0;
    let mut shift = 0;
    loop {
        let b = *p.get(*at)?;
        *at += 1;
        v |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

impl Pclntab {
    /// `text_start` is the address of `.text` (the runtime's `moduledata.text`).
    pub fn parse(
        data: Vec<u8>,
        text_start: u64,
        funcdata: FuncData,
    ) -> Result<Pclntab, PclntabError> {
        let magic = u32_at(&data, 0).ok_or(PclntabError::Short)?;
        if magic != MAGIC_GO120 {
            return Err(PclntabError::Magic(magic));
        }
        let (Some(&quantum), Some(&ptr)) = (data.get(6), data.get(7)) else {
            return Err(PclntabError::Short);
        };
        if ptr != 8 {
            return Err(PclntabError::PointerSize(ptr));
        }
        let word = |i: usize| u64_at(&data, 8 + 8 * i).ok_or(PclntabError::Short);
        let as_off = |v: u64| usize::try_from(v).map_err(|_| PclntabError::FunctionTable);
        let nfunc = as_off(word(0)?)?;
        let funcname = as_off(word(3)?)?;
        let cutab = as_off(word(4)?)?;
        let filetab = as_off(word(5)?)?;
        let pctab = as_off(word(6)?)?;
        let functab = as_off(word(7)?)?;
        let table_end = nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .and_then(|n| n.checked_add(functab));
        if table_end.is_none_or(|end| end > data.len()) {
            return Err(PclntabError::FunctionTable);
        }
        Ok(Pclntab {
            data,
            quantum: u64::from(quantum.max(1)),
            nfunc,
            text_start,
            textsects: Vec::new(),
            funcname,
            cutab,
            filetab,
            pctab,
            functab,
            funcdata,
        })
    }

    /// The same table with the inline trees' home set (found after the table itself, in
    /// stripped binaries).
    pub fn with_funcdata(mut self, funcdata: FuncData) -> Pclntab {
        self.funcdata = funcdata;
        self
    }

    /// The same table with the runtime's own text base (`moduledata.text`) and its text
    /// sections: function offsets count from there, wherever the ELF `.text` begins.
    pub fn with_text(mut self, text_start: u64, textsects: Vec<TextSect>) -> Pclntab {
        self.text_start = text_start;
        self.textsects = if textsects.len() > 1 {
            textsects
        } else {
            Vec::new()
        };
        self
    }

    /// `moduledata.textOff`: the function-table offset of a PC.
    fn text_off(&self, pc: u64) -> Option<u32> {
        if self.textsects.is_empty() {
            return u32::try_from(pc.checked_sub(self.text_start)?).ok();
        }
        let last = self.textsects.len() - 1;
        for (i, s) in self.textsects.iter().enumerate() {
            if s.base > pc {
                return None;
            }
            let end = s.base.checked_add(s.end.checked_sub(s.vaddr)?)? + u64::from(i == last);
            if pc < end {
                return u32::try_from(pc - s.base + s.vaddr).ok();
            }
        }
        None
    }

    /// `moduledata.textAddr`: the PC of a function-table offset.
    pub fn text_addr(&self, off: u32) -> u64 {
        let off = u64::from(off);
        let last = self.textsects.len().saturating_sub(1);
        self.textsects
            .iter()
            .enumerate()
            .find(|&(i, s)| (s.vaddr <= off && off < s.end) || (i == last && off == s.end))
            .map_or(self.text_start.wrapping_add(off), |(_, s)| {
                s.base.wrapping_add(off - s.vaddr)
            })
    }

    /// (functions, offset of the function table in the pclntab, first and end PC): what
    /// `moduledata` must agree with.
    pub fn extent(&self) -> (usize, usize, u64, u64) {
        (
            self.nfunc,
            self.functab,
            self.text_addr(self.entry_off(0)),
            self.text_addr(self.entry_off(self.nfunc)),
        )
    }

    /// `funcnameOffset` of the header: where `moduledata.funcnametab` points, relative to the
    /// table's start.
    pub fn funcname_offset(&self) -> u64 {
        self.funcname as u64
    }

    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }
}

#[cfg(test)]
pub(crate) mod tests;
