//! Is this executable a Go program, and which Go built it? Decided from a few hundred bytes of
//! its ELF file (the section headers, their names and the head of `.go.buildinfo`), never the
//! whole file, so judging every process on a node costs a few reads per distinct binary.
//! Only the part of Go's build info that discovery needs; the build identity is read elsewhere.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;

/// What an executable is, for discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExeKind {
    /// A Go program; the release that built it when its build info says (`go1.26.8`), `None`
    /// for a release older than go1.18 or a binary whose build info was stripped.
    Go { version: Option<String> },
    /// Anything else: another language, a script, a 32-bit or big-endian ELF (which the proc
    /// source cannot read either), garbage.
    NotGo,
}

/// `.go.buildinfo` opens with this (cmd/go's `buildInfoMagic`).
const BUILDINFO_MAGIC: &[u8; 14] = b"\xff Go buildinf:";
/// The build info header: magic, pointer size, flags, two pointer slots.
const BUILDINFO_HEADER: usize = 32;
/// Flags bit set since go1.18: the version string follows the header inline.
const FLAG_VERSION_INLINE: u8 = 0x2;
/// The linker's note on every Go ELF binary (`ELF_NOTE_GO_NAME`, `ELF_NOTE_GOBUILDID_TAG`).
const GO_NOTE_NAME: &[u8] = b"Go\0\0";
const GO_NOTE_BUILDID: u32 = 4;

/// Bounds on what is read, so that a hostile or corrupt file costs little.
const MAX_SECTIONS: u64 = 4096;
const MAX_NAMES: u64 = 256 << 10;
const MAX_SEGMENTS: u64 = 256;
const MAX_NOTE: u64 = 64 << 10;
/// How far into the writable segment `.go.buildinfo` is looked for when the section headers
/// are gone (the linker puts it first).
const MAX_DATA_SEARCH: u64 = 64 << 10;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PF_X: u32 = 1;
const PF_W: u32 = 2;

/// Judges an executable. Only I/O errors are errors; a file that is not a well-formed 64-bit
/// little-endian ELF is `NotGo`.
pub fn judge(file: &File) -> io::Result<ExeKind> {
    let len = file.metadata()?.len();
    let elf = Elf { file, len };
    let mut header = [0u8; 64];
    if !elf.read(0, &mut header)? {
        return Ok(ExeKind::NotGo);
    }
    // ELFCLASS64, little-endian: amd64 and arm64, the architectures the proc source reads.
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(ExeKind::NotGo);
    }
    if let Some(kind) = elf.by_sections(&header)? {
        return Ok(kind);
    }
    elf.by_segments(&header)
}

struct Elf<'a> {
    file: &'a File,
    len: u64,
}

/// Whether `len` bytes at `offset` lie inside a file of `file_len` bytes.
fn fits(offset: u64, len: u64, file_len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= file_len)
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u64
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Elf<'_> {
    /// Fills `buf` from `offset`; false when the file is shorter (a truncated file is not Go).
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        if !fits(offset, buf.len() as u64, self.len) {
            return Ok(false);
        }
        self.file.read_exact_at(buf, offset)?;
        Ok(true)
    }

    /// `count` records of `size` bytes at `offset`, when they lie inside the file and within
    /// the bounds. Nothing is allocated before the bounds are checked: a hostile header
    /// cannot make it allocate more than the file holds.
    fn table(&self, offset: u64, size: u64, count: u64, max: u64) -> io::Result<Option<Vec<u8>>> {
        if count == 0 || count > max {
            return Ok(None);
        }
        let Some(bytes) = size.checked_mul(count) else {
            return Ok(None);
        };
        self.bytes(offset, bytes)
    }

    /// `len` bytes at `offset`, when they lie inside the file (checked before allocating).
    fn bytes(&self, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        if !fits(offset, len, self.len) {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        Ok(self.read(offset, &mut buf)?.then_some(buf))
    }

    /// By the section headers: `.go.buildinfo` (with the version), else the Go build id note's
    /// section. `None` when the file has no usable section headers.
    fn by_sections(&self, header: &[u8]) -> io::Result<Option<ExeKind>> {
        let (shoff, shentsize, shnum, shstrndx) = (
            u64_at(header, 0x28),
            u16_at(header, 0x3a),
            u16_at(header, 0x3c),
            u16_at(header, 0x3e),
        );
        if shoff == 0 || shentsize < 64 || shstrndx >= shnum {
            return Ok(None);
        }
        let Some(table) = self.table(shoff, shentsize, shnum, MAX_SECTIONS)? else {
            return Ok(None);
        };
        let entry = |i: u64| &table[(i * shentsize) as usize..(i * shentsize + 64) as usize];
        let names_header = entry(shstrndx);
        let (names_off, names_len) = (u64_at(names_header, 0x18), u64_at(names_header, 0x20));
        if names_len > MAX_NAMES {
            return Ok(None);
        }
        let Some(names) = self.bytes(names_off, names_len)? else {
            return Ok(None);
        };
        let name_of = |sh: &[u8]| {
            names
                .get(u32_at(sh, 0) as usize..)
                .and_then(|s| s.split(|&b| b == 0).next())
                .unwrap_or(b"")
        };
        let mut has_note = false;
        for i in 0..shnum {
            let sh = entry(i);
            match name_of(sh) {
                b".go.buildinfo" => {
                    let (offset, size) = (u64_at(sh, 0x18), u64_at(sh, 0x20));
                    let version = self.buildinfo_version(offset, size)?;
                    return Ok(Some(ExeKind::Go { version }));
                }
                b".note.go.buildid" => has_note = true,
                _ => {}
            }
        }
        Ok(Some(if has_note {
            ExeKind::Go { version: None }
        } else {
            ExeKind::NotGo
        }))
    }

    /// Without section headers (a binary put through `sstrip`): the Go note in a `PT_NOTE`
    /// segment, and the build info where the linker puts it, at the head of the data segment.
    fn by_segments(&self, header: &[u8]) -> io::Result<ExeKind> {
        let (phoff, phentsize, phnum) = (
            u64_at(header, 0x20),
            u16_at(header, 0x36),
            u16_at(header, 0x38),
        );
        if phentsize < 56 {
            return Ok(ExeKind::NotGo);
        }
        let Some(table) = self.table(phoff, phentsize, phnum, MAX_SEGMENTS)? else {
            return Ok(ExeKind::NotGo);
        };
        let segments = (0..phnum).map(|i| {
            let ph = &table[(i * phentsize) as usize..(i * phentsize + 56) as usize];
            (u32_at(ph, 0), u32_at(ph, 4), u64_at(ph, 8), u64_at(ph, 32))
        });
        let mut go = false;
        let mut version = None;
        for (kind, flags, offset, size) in segments {
            if kind == PT_NOTE && size <= MAX_NOTE && !go {
                go = self
                    .bytes(offset, size)?
                    .is_some_and(|notes| has_go_note(&notes));
            }
            if kind == PT_LOAD && flags & (PF_X | PF_W) == PF_W && version.is_none() {
                version = self.search_buildinfo(offset, size.min(MAX_DATA_SEARCH))?;
            }
        }
        Ok(if go || version.is_some() {
            ExeKind::Go {
                version: version.flatten(),
            }
        } else {
            ExeKind::NotGo
        })
    }

    /// The version in a `.go.buildinfo` at this file offset; `None` before go1.18 (pointers
    /// instead of inline strings) or when malformed.
    fn buildinfo_version(&self, offset: u64, size: u64) -> io::Result<Option<String>> {
        // Header, a varint of at most 10 bytes, a version string of a sane length.
        let len = size.min(BUILDINFO_HEADER as u64 + 10 + 128);
        Ok(self
            .bytes(offset, len)?
            .and_then(|head| inline_version(&head)))
    }

    /// Looks for the build info magic at 16-byte alignment in `size` bytes at `offset`:
    /// `Some(version)` when found.
    #[allow(clippy::option_option)]
    fn search_buildinfo(&self, offset: u64, size: u64) -> io::Result<Option<Option<String>>> {
        let size = size.min(self.len.saturating_sub(offset));
        let Some(data) = self.bytes(offset, size)? else {
            return Ok(None);
        };
        let skip = (16 - offset % 16) % 16;
        let found = data
            .get(skip as usize..)
            .unwrap_or(&[])
            .chunks(16)
            .position(|c| c.starts_with(BUILDINFO_MAGIC));
        Ok(found.map(|i| {
            let at = skip as usize + i * 16;
            inline_version(&data[at..])
        }))
    }
}

/// The version string that follows the header when the flags say it is inline.
fn inline_version(head: &[u8]) -> Option<String> {
    if head.len() < BUILDINFO_HEADER || !head.starts_with(BUILDINFO_MAGIC) {
        return None;
    }
    if head[15] & FLAG_VERSION_INLINE == 0 {
        return None;
    }
    let rest = &head[BUILDINFO_HEADER..];
    let (len, used) = uvarint(rest)?;
    let text = rest.get(used..used.checked_add(len as usize)?)?;
    let text = std::str::from_utf8(text).ok()?;
    let plausible = (text.starts_with("go") || text.starts_with("devel"))
        && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    plausible.then(|| text.to_string())
}

/// An unsigned LEB128 varint: its value and the bytes it took.
fn uvarint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Whether a `PT_NOTE` segment holds the Go build id note.
fn has_go_note(mut notes: &[u8]) -> bool {
    let align4 = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (
            u32_at(notes, 0) as usize,
            u32_at(notes, 4) as usize,
            u32_at(notes, 8),
        );
        let name_end = 12 + align4(namesz);
        let Some(name) = notes.get(12..12 + namesz) else {
            return false;
        };
        if kind == GO_NOTE_BUILDID && name == GO_NOTE_NAME {
            return true;
        }
        let Some(next) = name_end.checked_add(align4(descsz)) else {
            return false;
        };
        let Some(rest) = notes.get(next..) else {
            return false;
        };
        notes = rest;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// `gofmt` from the installed Go (a small Go binary) and `go env GOVERSION`; without Go
    /// the test is skipped as every test that needs Go is (failing under CI).
    fn gofmt() -> Option<(PathBuf, String)> {
        let go = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("go"))
                .find(|p| p.is_file())
        });
        let Some(go) = go else {
            crate::prerequisite::skip(crate::prerequisite::Need::Go, "`go` is not on PATH");
            return None;
        };
        let env = |key: &str| {
            let out = Command::new(&go)
                .args(["env", key])
                .output()
                .expect("go env");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let root = PathBuf::from(env("GOROOT"));
        Some((root.join("bin/gofmt"), env("GOVERSION")))
    }

    fn judge_path(path: &std::path::Path) -> ExeKind {
        judge(&File::open(path).expect("open")).expect("judge")
    }

    #[test]
    fn a_go_binary_is_go_with_the_version_go_itself_reports() {
        let Some((gofmt, version)) = gofmt() else {
            return;
        };
        assert_eq!(
            judge_path(&gofmt),
            ExeKind::Go {
                version: Some(version)
            }
        );
    }

    #[test]
    fn other_executables_scripts_and_garbage_are_not_go() {
        assert_eq!(
            judge_path(std::path::Path::new("/bin/sleep")),
            ExeKind::NotGo
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for bytes in [
            b"#!/bin/sh\necho hi\n".to_vec(),
            Vec::new(),
            b"\x7fELF\x02\x01".to_vec(),
            // A header whose section table lies far past the end of the file.
            {
                let mut h = vec![0u8; 64];
                h[..6].copy_from_slice(b"\x7fELF\x02\x01");
                h[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
                h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
                h[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
                h[0x20..0x28].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
                h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
                h[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
                h
            },
        ] {
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(judge_path(&path), ExeKind::NotGo, "{bytes:?}");
        }
    }

    #[test]
    fn without_section_headers_the_note_and_the_data_segment_still_tell() {
        let Some((gofmt, version)) = gofmt() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("sstripped");
        let mut bytes = std::fs::read(&gofmt).unwrap();
        // What sstrip leaves: no section header table at all.
        bytes[0x28..0x30].copy_from_slice(&0u64.to_le_bytes());
        bytes[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        bytes[0x3e..0x40].copy_from_slice(&0u16.to_le_bytes());
        std::fs::write(&copy, &bytes).unwrap();
        assert_eq!(
            judge_path(&copy),
            ExeKind::Go {
                version: Some(version)
            }
        );
    }

    #[test]
    fn a_go_binary_without_its_build_info_is_still_go_by_its_note() {
        let Some((gofmt, _)) = gofmt() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("nobuildinfo");
        let mut bytes = std::fs::read(&gofmt).unwrap();
        // The section renamed in the section name table: as if it had been removed.
        let at = bytes
            .windows(14)
            .position(|w| w == b".go.buildinfo\0")
            .expect("gofmt has a .go.buildinfo section name");
        bytes[at + 4] = b'X';
        std::fs::write(&copy, &bytes).unwrap();
        assert_eq!(judge_path(&copy), ExeKind::Go { version: None });
    }

    #[test]
    fn a_hostile_header_asks_for_no_more_than_the_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hostile");
        // Section headers of the largest size at the most sections allowed: 256 MiB asked
        // of a 4 KiB file. Refused before anything is allocated.
        let mut h = vec![0u8; 4096];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&u16::MAX.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&(MAX_SECTIONS as u16).to_le_bytes());
        std::fs::write(&path, &h).unwrap();
        let file = File::open(&path).unwrap();
        let elf = Elf {
            file: &file,
            len: 4096,
        };
        assert!(!fits(64, u64::from(u16::MAX) * MAX_SECTIONS, elf.len));
        assert_eq!(
            elf.table(64, u64::from(u16::MAX), MAX_SECTIONS, MAX_SECTIONS)
                .unwrap(),
            None
        );
        assert_eq!(
            elf.table(64, u64::MAX, 2, MAX_SECTIONS).unwrap(),
            None,
            "overflow"
        );
        assert_eq!(elf.bytes(4000, 96).unwrap().map(|b| b.len()), Some(96));
        assert_eq!(elf.bytes(4000, 97).unwrap(), None);
        assert_eq!(judge_path(&path), ExeKind::NotGo);
    }

    #[test]
    fn build_info_headers_and_notes_are_read_defensively() {
        let mut head = BUILDINFO_MAGIC.to_vec();
        head.extend_from_slice(&[8, FLAG_VERSION_INLINE]);
        head.resize(BUILDINFO_HEADER, 0);
        let mut good = head.clone();
        good.push(8);
        good.extend_from_slice(b"go1.26.8\0");
        assert_eq!(inline_version(&good).as_deref(), Some("go1.26.8"));
        // A length past the end, an endless varint, pre-1.18 pointers, binary junk.
        let mut long = head.clone();
        long.extend_from_slice(&[0xff, 0x7f, b'g']);
        assert_eq!(inline_version(&long), None);
        let mut endless = head.clone();
        endless.extend_from_slice(&[0xff; 12]);
        assert_eq!(inline_version(&endless), None);
        let mut old = good.clone();
        old[15] = 0;
        assert_eq!(inline_version(&old), None);
        let mut junk = head.clone();
        junk.extend_from_slice(&[3, b'g', b'o', 0x01]);
        assert_eq!(inline_version(&junk), None);
        // Notes: a GNU build id then Go's; a truncated one.
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"GNU\0"[..], 3u32, &[1u8; 20][..]),
            (GO_NOTE_NAME, 4, b"abc"),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        assert!(has_go_note(&notes));
        assert!(!has_go_note(&notes[..30]));
        assert!(!has_go_note(&[0xff; 12]));
    }
}
