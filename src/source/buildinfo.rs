//! The build a Go executable says it is, read from its file: the `\xff Go buildinf:` blob the
//! linker writes (`.go.buildinfo`, else near the start of the data segment), in both of its
//! forms: since Go 1.18 the toolchain and module text follow the 32-byte header inline,
//! each with a varint length; before, the header holds two pointers to Go string headers
//! in the data segment. From the module text come the main module's version, `vcs.revision`
//! and the `-ldflags` the binary was linked with (what `go version -m` prints).
//!
//! Any process whose executable is readable can be told apart this way, whatever its source:
//! a proc target, an HTTP target with `--pid`, a command `heapwatch run` started.
//!
//! # The binary's own build info beside what the source says
//!
//! The blob is read lazily from the executable (its section, else the head of a segment). It fills
//! only what the source left out; an executable of another toolchain than the agent reported is
//! another namespace's process and is left out. `-ldflags` appear only in binaries built without
//! `-trimpath` (cmd/go leaves them out otherwise), and a module version only with
//! `go install …@version`; the Go build id is always there and differs between any two binaries,
//! so `BuildInfo::name` falls back to it. `model::build::normalise_version` drops a leading `v`
//! before a digit, so `v2.1.0` and `2.1.0` are one build.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use object::read::ReadCache;
use object::read::elf::ElfFile64;
use object::{Endianness, Object as _, ObjectSection as _, ObjectSegment as _};

use crate::model::build::BuildInfo;

const MAGIC: &[u8; 14] = b"\xff Go buildinf:";
const HEADER: usize = 32;
/// How much of a segment's start is searched for the blob when no section names it.
const SEARCH: u64 = 8 << 20;
/// The longest module text taken (a binary with thousands of dependencies stays well under).
const MAX_TEXT: u64 = 4 << 20;

/// What the blob says: the toolchain and the module text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawBuild {
    pub go_version: String,
    pub modinfo: String,
}

/// The build of an executable file; `None` when it is not a readable Go ELF executable with
/// build info.
pub fn read_executable(path: &Path) -> Option<BuildInfo> {
    let meta = std::fs::metadata(path).ok()?;
    let key = (
        path.to_path_buf(),
        meta.len(),
        meta.modified().ok(),
        std::os::unix::fs::MetadataExt::ino(&meta),
    );
    static CACHE: Mutex<Vec<(CacheKey, Option<BuildInfo>)>> = Mutex::new(Vec::new());
    if let Some((_, b)) = CACHE.lock().ok()?.iter().find(|(k, _)| *k == key).cloned() {
        return b;
    }
    let build = read_raw(path).map(|raw| {
        let mut build = build_of(&raw);
        build.build_id = read_build_id(path);
        build
    });
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= 16 {
            cache.remove(0);
        }
        cache.push((key, build.clone()));
    }
    build
}

type CacheKey = (std::path::PathBuf, u64, Option<std::time::SystemTime>, u64);

/// The build of a running process, from `/proc/PID/exe`.
pub fn read_process(pid: u32) -> Option<BuildInfo> {
    read_executable(Path::new(&format!("/proc/{pid}/exe")))
}

/// The Go build id from the `.note.go.buildid` note (name `Go`, type 4).
pub fn read_build_id(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let cache = ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
    let note = elf.section_by_name(".note.go.buildid")?.data().ok()?;
    let word = |at: usize| -> Option<usize> {
        let b: [u8; 4] = note.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let (namesz, descsz, kind) = (word(0)?, word(4)?, word(8)?);
    if kind != 4 || note.get(12..14)? != b"Go" {
        return None;
    }
    let desc = 12 + namesz.div_ceil(4) * 4;
    let id = note.get(desc..desc + descsz)?;
    let id = String::from_utf8_lossy(id)
        .trim_end_matches('\0')
        .to_string();
    (!id.is_empty()).then_some(id)
}

/// The blob of an ELF file, read lazily (a few pages, not the whole binary).
pub fn read_raw(path: &Path) -> Option<RawBuild> {
    let file = File::open(path).ok()?;
    let cache = ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
    let read = |addr: u64, len: u64| -> Option<Vec<u8>> {
        elf.segments().find_map(|s| {
            let end = s.address().checked_add(s.size())?;
            if addr < s.address() || addr.checked_add(len)? > end {
                return None;
            }
            s.data_range(addr, len).ok().flatten().map(<[u8]>::to_vec)
        })
    };
    // Where the blob starts (an address), from its section, else by searching.
    let start = match elf.section_by_name(".go.buildinfo") {
        Some(section) => {
            let head = section
                .data_range(section.address(), HEADER as u64)
                .ok()??;
            head.starts_with(MAGIC).then(|| section.address())?
        }
        None => elf.segments().find_map(|s| {
            let data = s.data_range(s.address(), s.size().min(SEARCH)).ok()??;
            let at = data
                .chunks(16)
                .position(|c| c.len() >= MAGIC.len() && c.starts_with(MAGIC))?;
            Some(s.address() + at as u64 * 16)
        })?,
    };
    let header = read(start, HEADER as u64)?;
    parse_blob(&header, read, start)
}

/// Decodes the blob at `start` whose 32-byte header is `header`; `read(addr, len)` reads the
/// executable's memory image.
fn parse_blob(
    header: &[u8],
    read: impl Fn(u64, u64) -> Option<Vec<u8>>,
    start: u64,
) -> Option<RawBuild> {
    if header.len() < HEADER || !header.starts_with(MAGIC) {
        return None;
    }
    let ptr_size = header[14] as usize;
    let flags = header[15];
    let big_endian = flags & 1 == 1;
    if flags & 2 == 2 {
        // Inline: two varint-length strings after the header.
        let mut at = start + HEADER as u64;
        let mut string = || -> Option<String> {
            let head = read(at, 10).or_else(|| read(at, 1))?;
            let (len, used) = uvarint(&head)?;
            if len > MAX_TEXT {
                return None;
            }
            let body = if len == 0 {
                Vec::new()
            } else {
                read(at + used as u64, len)?
            };
            at += used as u64 + len;
            Some(String::from_utf8_lossy(&body).into_owned())
        };
        let go_version = string()?;
        let modinfo = string()?;
        return Some(RawBuild {
            go_version,
            modinfo: strip_sentinels(&modinfo),
        });
    }
    // Pointers to two Go string headers (data pointer, length).
    if ptr_size != 4 && ptr_size != 8 {
        return None;
    }
    let word = |bytes: &[u8]| -> u64 {
        let mut v: u64 = 0;
        for i in 0..ptr_size {
            let b = if big_endian {
                bytes[i]
            } else {
                bytes[ptr_size - 1 - i]
            };
            v = (v << 8) | u64::from(b);
        }
        v
    };
    let go_string = |at: u64| -> Option<String> {
        let head = read(at, 2 * ptr_size as u64)?;
        let (data, len) = (word(&head), word(&head[ptr_size..]));
        if len > MAX_TEXT {
            return None;
        }
        if len == 0 {
            return Some(String::new());
        }
        Some(String::from_utf8_lossy(&read(data, len)?).into_owned())
    };
    let go_version = go_string(word(&header[16..]))?;
    let modinfo = go_string(word(&header[16 + ptr_size..]))?;
    Some(RawBuild {
        go_version,
        modinfo: strip_sentinels(&modinfo),
    })
}

/// The module text sits between two 16-byte sentinels, the first ending in a newline.
fn strip_sentinels(modinfo: &str) -> String {
    let b = modinfo.as_bytes();
    if b.len() >= 33 && b[b.len() - 17] == b'\n' {
        modinfo
            .get(16..modinfo.len() - 16)
            .unwrap_or("")
            .to_string()
    } else {
        modinfo.to_string()
    }
}

fn uvarint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The fields heapwatch keeps from a blob.
pub fn build_of(raw: &RawBuild) -> BuildInfo {
    let mut build = BuildInfo {
        go_version: Some(raw.go_version.clone()).filter(|v| !v.is_empty()),
        ..BuildInfo::default()
    };
    for line in raw.modinfo.lines() {
        let mut fields = line.split('\t');
        match fields.next() {
            Some("mod") => {
                build.module = fields.next().filter(|p| !p.is_empty()).map(str::to_string);
                build.version = fields
                    .next()
                    .filter(|v| !v.is_empty() && *v != "(devel)")
                    .map(str::to_string);
            }
            Some("build") => {
                let Some(setting) = fields.next() else {
                    continue;
                };
                let (key, value) = split_setting(setting);
                match key.as_str() {
                    "vcs.revision" if !value.is_empty() => build.vcs_revision = Some(value),
                    "-ldflags" if !value.is_empty() => build.ldflags = Some(value),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    build
}

/// `KEY=VALUE` of a `build` line; either side may be a quoted Go string.
fn split_setting(setting: &str) -> (String, String) {
    let (key, rest) = if let Some(quoted) = setting.strip_prefix('"') {
        match go_unquote_prefix(quoted) {
            Some((key, rest)) => (key, rest.strip_prefix('=').unwrap_or(rest)),
            None => return (setting.to_string(), String::new()),
        }
    } else {
        match setting.split_once('=') {
            Some((k, v)) => (k.to_string(), v),
            None => return (setting.to_string(), String::new()),
        }
    };
    let value = match rest.strip_prefix('"') {
        Some(quoted) => go_unquote_prefix(quoted).map_or_else(|| rest.to_string(), |(v, _)| v),
        None => rest.to_string(),
    };
    (key, value)
}

/// A Go double-quoted string's text up to its closing quote (the opening one already gone),
/// and what follows it.
fn go_unquote_prefix(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'x' => {
                        let hex: String = [chars.next()?.1, chars.next()?.1].iter().collect();
                        out.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
                    }
                    other => out.push(other),
                }
            }
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modinfo(text: &str) -> String {
        // Between the two 16-byte sentinels cmd/go wraps the module text in.
        format!("{}{text}{}", "<".repeat(16), ">".repeat(16))
    }

    #[test]
    fn settings_quoted_as_go_quotes_them_are_read_back() {
        assert_eq!(
            split_setting(r#"-ldflags="-X main.version=2.1.0 -s""#),
            ("-ldflags".into(), "-X main.version=2.1.0 -s".into())
        );
        assert_eq!(
            split_setting("vcs.revision=abc123"),
            ("vcs.revision".into(), "abc123".into())
        );
        assert_eq!(
            split_setting(r#""a=b"="x\ty""#),
            ("a=b".into(), "x\ty".into())
        );
    }

    #[test]
    fn the_pointer_form_of_go_before_1_18_is_followed_into_the_data_segment() {
        // A little-endian 64-bit image: the header at 0x1000, the string headers at 0x2000,
        // the strings at 0x3000.
        let base = 0x1000u64;
        let mut image = vec![0u8; 0x4000];
        image[0x1000..0x100e].copy_from_slice(MAGIC);
        image[0x100e] = 8;
        image[0x100f] = 0;
        image[0x1010..0x1018].copy_from_slice(&0x2000u64.to_le_bytes());
        image[0x1018..0x1020].copy_from_slice(&0x2010u64.to_le_bytes());
        let version = b"go1.16.15";
        let text = modinfo(
            "path\texample.com/app\nmod\texample.com/app\tv1.4.0\th1:x=\n\
             build\tvcs.revision=0123abcd\n",
        );
        image[0x3000..0x3000 + version.len()].copy_from_slice(version);
        image[0x3100..0x3100 + text.len()].copy_from_slice(text.as_bytes());
        image[0x2000..0x2008].copy_from_slice(&0x3000u64.to_le_bytes());
        image[0x2008..0x2010].copy_from_slice(&(version.len() as u64).to_le_bytes());
        image[0x2010..0x2018].copy_from_slice(&0x3100u64.to_le_bytes());
        image[0x2018..0x2020].copy_from_slice(&(text.len() as u64).to_le_bytes());
        let read = |addr: u64, len: u64| {
            image
                .get(addr as usize..(addr + len) as usize)
                .map(<[u8]>::to_vec)
        };
        let raw = parse_blob(&image[0x1000..0x1020], read, base).unwrap();
        assert_eq!(raw.go_version, "go1.16.15");
        let build = build_of(&raw);
        assert_eq!(build.version.as_deref(), Some("v1.4.0"));
        assert_eq!(build.vcs_revision.as_deref(), Some("0123abcd"));
        assert_eq!(build.go_version.as_deref(), Some("go1.16.15"));
    }

    #[test]
    fn garbage_and_a_missing_file_are_no_build() {
        assert!(read_executable(Path::new("/nonexistent/binary")).is_none());
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"\x7fELF garbage").unwrap();
        assert!(read_executable(&junk).is_none());
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&[8, 2]);
        header.resize(32, 0);
        // Inline form whose length runs past the image.
        let read = |_: u64, _: u64| Some(vec![0xff; 10]);
        assert!(parse_blob(&header, read, 0).is_none());
    }
}
