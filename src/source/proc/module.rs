//! `runtime.firstmoduledata`, read from the executable file: where the runtime itself finds its
//! function table, and the base its function offsets count from.
//!
//! # The module data, not the section layout
//!
//! The function table's entry offsets count from `moduledata.text`, not from the ELF `.text`: the
//! internal linker puts the two at the same address, the system linker (a cgo program,
//! `-linkmode=external`) puts its C start-up code first (0x100 bytes before `runtime.text` in the
//! fixtures), and a table read from `.text` names every PC after a neighbour. The system linker
//! also merges `.gopclntab` into `.data.rel.ro` in a PIE. So heapwatch finds the tables the way
//! the runtime does, through `runtime.firstmoduledata` read from the file: by its symbol, else the
//! `.go.module` section (Go 1.26), else the one word in the data sections that points at a Go
//! 1.20+ pclntab header (magic, pointer size) and is followed by that header's `funcnametab`. Its
//! words are read with a PIE's `R_X86_64_RELATIVE` addends applied (a linker may leave them zero
//! in the file). From it come the pclntab (`pcHeader` to the end of `pclntable`), the text base,
//! `textsectmap` (PCs are mapped through it when there are several text sections, as
//! `textOff`/`textAddr` do; the field moved a word on in Go 1.26 with `epclntab`) and `gofunc`,
//! the inline trees' base. It is checked before use: `pcHeader` is the table read, `ftab` is that
//! table's function table with `nfunc + 1` entries, the table spans exactly `[minpc, maxpc)` (the
//! runtime's own `moduledataverify1`), and at attach the live process's `moduledata.text` equals
//! the file's plus the load bias. A binary that fails any of these is refused ("its function
//! table cannot be mapped the way its runtime maps it (…)"), never read with guessed names.

use std::collections::HashMap;

use object::read::elf::ElfFile64;
use object::{Endianness, Object as _, ObjectSection as _, ObjectSymbol as _, RelocationFlags};

type Elf<'d> = ElfFile64<'d, Endianness>;

/// One `textsect`: a piece of Go text the linker placed apart from the rest (`vaddr` and `end`
/// are offsets from `runtime.text` as the function table counts, `base` where the piece is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextSect {
    pub vaddr: u64,
    pub end: u64,
    pub base: u64,
}

/// The fields of `runtime.moduledata` heapwatch relies on (link-time addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleData {
    /// Where the module data itself is.
    pub addr: u64,
    pub pc_header: u64,
    /// `pclntable`: the functions' records, the last part of the pclntab, so its end is the
    /// pclntab's end.
    pub pclntable: u64,
    pub pclntable_len: u64,
    pub ftab: u64,
    pub ftab_len: u64,
    pub minpc: u64,
    pub maxpc: u64,
    pub text: u64,
    pub gofunc: u64,
    pub textsects: Vec<TextSect>,
}

/// Byte offsets of the fields within `runtime.moduledata` (amd64). `epclntab` came in Go 1.26,
/// after `gofunc`, moving `textsectmap` one word on.
const PC_HEADER: u64 = 0;
const FUNCNAMETAB: u64 = 8;
const PCLNTABLE: u64 = 104;
const FTAB: u64 = 128;
const MINPC: u64 = 160;
const MAXPC: u64 = 168;
const TEXT: u64 = 176;
const GOFUNC: u64 = 320;

impl ModuleData {
    /// `[pcHeader, end of pclntable)`: the whole pclntab.
    pub fn pclntab_len(&self) -> Option<u64> {
        self.pclntable
            .checked_add(self.pclntable_len)?
            .checked_sub(self.pc_header)
    }
}

fn textsectmap_offset(release: (u32, u32)) -> u64 {
    if release >= (1, 26) { 336 } else { 328 }
}

/// The executable's initialised data as the loader would leave it: section bytes, with the
/// `R_X86_64_RELATIVE` relocations of a PIE applied (a linker may leave their words zero in
/// the file, as lld does by default; GNU ld and Go's linker write them in place too).
pub struct FileImage<'a> {
    elf: &'a Elf<'a>,
    relative: HashMap<u64, u64>,
}

impl<'a> FileImage<'a> {
    pub fn new(elf: &'a Elf<'a>) -> FileImage<'a> {
        let mut relative = HashMap::new();
        if let Some(relocs) = elf.dynamic_relocations() {
            for (at, r) in relocs {
                if let RelocationFlags::Elf { r_type } = r.flags() {
                    if r_type == object::elf::R_X86_64_RELATIVE {
                        relative.insert(at, r.addend() as u64);
                    }
                }
            }
        }
        FileImage { elf, relative }
    }

    /// The file's bytes at link-time `[addr, addr+len)`, when one section holds them all
    /// (relocations not applied).
    pub fn bytes(&self, addr: u64, len: u64) -> Option<&'a [u8]> {
        let end = addr.checked_add(len)?;
        let section = self.elf.sections().find(|s| {
            s.address() != 0 && s.address() <= addr && end <= s.address().saturating_add(s.size())
        })?;
        let data = section.data().ok()?;
        let at = usize::try_from(addr - section.address()).ok()?;
        data.get(at..at.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The 8-byte word at link-time address `addr`, when a section with file bytes holds it.
    pub fn word(&self, addr: u64) -> Option<u64> {
        if let Some(&v) = self.relative.get(&addr) {
            return Some(v);
        }
        let b = self.bytes(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// The Go 1.20+ pclntab header's first eight bytes: magic 0xfffffff1, two zero pads, an
/// instruction quantum of 1 and 8-byte pointers (amd64).
const PCLNTAB_HEAD: [u8; 8] = [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];

/// True when `at` looks like module data: its first word points at a pclntab header and its
/// second at that header's function names (`pcHeader`, then `funcnametab`, whose offset
/// from the header is the header's fifth word, `funcnameOffset`).
fn is_module_data(image: &FileImage, at: u64) -> bool {
    let Some(header) = image.word(at) else {
        return false;
    };
    if image.bytes(header, 8) != Some(&PCLNTAB_HEAD[..]) {
        return false;
    }
    let funcname_off = image
        .bytes(header.wrapping_add(32), 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes);
    funcname_off.is_some_and(|off| image.word(at + FUNCNAMETAB) == header.checked_add(off))
}

/// Where `runtime.firstmoduledata` is: its symbol; else the `.go.module` section (Go 1.26);
/// else the one place in the data sections that looks like module data. No section layout is
/// assumed: the system linker merges Go's sections (a PIE's pclntab lands in `.data.rel.ro`).
fn locate(elf: &Elf, image: &FileImage) -> Option<u64> {
    if let Some(sym) = elf
        .symbols()
        .find(|s| s.name() == Ok("runtime.firstmoduledata"))
    {
        return Some(sym.address());
    }
    if let Some(s) = elf.section_by_name(".go.module") {
        if is_module_data(image, s.address()) {
            return Some(s.address());
        }
    }
    for name in [".noptrdata", ".data", ".data.rel.ro"] {
        let Some(s) = elf.section_by_name(name) else {
            continue;
        };
        let found = (s.address()..s.address().saturating_add(s.size().saturating_sub(16)))
            .step_by(8)
            .find(|&at| is_module_data(image, at));
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Reads the module data of a Go binary built by `release`.
pub fn read(elf: &Elf, image: &FileImage, release: (u32, u32)) -> Result<ModuleData, String> {
    let addr = locate(elf, image).ok_or(
        "runtime.firstmoduledata was found neither by its symbol, nor as .go.module, nor as a \
         pointer to a Go 1.20+ pclntab in the data sections",
    )?;
    let word = |at: Option<u64>, name: &str| {
        at.and_then(|at| image.word(at)).ok_or_else(|| {
            format!("runtime.firstmoduledata.{name} (module data at {addr:#x}) is not in the file")
        })
    };
    let field = |off: u64, name: &str| word(addr.checked_add(off), name);
    let tsm = textsectmap_offset(release);
    let (tsm_ptr, tsm_len) = (field(tsm, "textsectmap")?, field(tsm + 8, "textsectmap")?);
    if tsm_len > 64 {
        return Err(format!(
            "runtime.firstmoduledata says {tsm_len} text sections, not a plausible number"
        ));
    }
    let textsects = (0..tsm_len)
        .map(|i| {
            let at = |k: u64| tsm_ptr.checked_add(24 * i + 8 * k);
            Ok(TextSect {
                vaddr: word(at(0), "textsectmap")?,
                end: word(at(1), "textsectmap")?,
                base: word(at(2), "textsectmap")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(ModuleData {
        addr,
        pc_header: field(PC_HEADER, "pcHeader")?,
        pclntable: field(PCLNTABLE, "pclntable")?,
        pclntable_len: field(PCLNTABLE + 8, "pclntable")?,
        ftab: field(FTAB, "ftab")?,
        ftab_len: field(FTAB + 8, "ftab")?,
        minpc: field(MINPC, "minpc")?,
        maxpc: field(MAXPC, "maxpc")?,
        text: field(TEXT, "text")?,
        gofunc: field(GOFUNC, "gofunc")?,
        textsects,
    })
}

/// Offset of `moduledata.text`: the attach reads it from the live process to check the file's
/// reading against what the runtime uses.
pub const TEXT_FIELD: u64 = TEXT;
