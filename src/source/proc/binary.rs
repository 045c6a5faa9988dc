//! What the target's executable file says, without touching the process: its Go build info,
//! its build id, the runtime variables the walker reads (from `.symtab`) and its `.gopclntab`.
//! Parsed once per build id and shared: a restart of the same binary costs nothing.
//!
//! PIE: the load bias is the start of the mapping of the executable's first segment in
//! `/proc/PID/maps` (matched by inode) less its link-time address (`GoBinary::load_bias`).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use object::read::elf::ElfFile64;
use object::{
    Endianness, Object as _, ObjectKind, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _,
};
use thiserror::Error;

use super::module::{self, FileImage, ModuleData};
use super::pclntab::{FuncData, Pclntab, PclntabError};
use super::stripped;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BinaryError {
    #[error("cannot read the executable: {0}")]
    Read(String),
    #[error("not a 64-bit ELF executable ({0})")]
    NotElf(String),
    #[error("an ELF for machine {0:#x}, not amd64; only linux/amd64 Go targets are supported")]
    Machine(u16),
    #[error("not a Go program: it has no {0} section")]
    NotGo(&'static str),
    #[error("unreadable Go build info in .go.buildinfo: {0}")]
    BuildInfo(String),
    #[error(
        "the binary is stripped (no .symtab, as with -ldflags=-s) and the runtime's heap \
         profile variables could not be recovered from its code: {0}; rebuild without -s, or \
         use the HTTP or agent source"
    )]
    Stripped(String),
    #[error("the symbol {0} is missing from .symtab")]
    Symbol(&'static str),
    #[error(".gopclntab: {0}")]
    Pclntab(#[from] PclntabError),
    #[error(
        "its function table cannot be mapped the way its runtime maps it ({0}); heapwatch \
         refuses it rather than name its allocation sites wrongly: use the HTTP or agent source"
    )]
    Module(String),
}

/// The main module and toolchain, from `.go.buildinfo` (what `go version -m` prints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoBuild {
    /// `go1.26.8`
    pub go_version: String,
    pub main_path: Option<String>,
    /// The main module's path, from its `mod` line only (what a cycle record's
    /// `build.module` holds, read the same way by `source::buildinfo`): none for a program
    /// built outside a module.
    pub module: Option<String>,
    pub main_version: Option<String>,
    pub vcs_revision: Option<String>,
}

impl GoBuild {
    /// (major, minor) of the toolchain: `go1.24.6 X:foo` → (1, 24).
    pub fn release(&self) -> Option<(u32, u32)> {
        let v = self
            .go_version
            .split_whitespace()
            .find(|w| w.starts_with("go"))?;
        let mut parts = v.trim_start_matches("go").split(['.', '-', 'r', 'b']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    }

    /// The GOEXPERIMENTs the build differs from its release's defaults by, as its version
    /// string names them: `go1.24.6 X:nospinbitmutex,foo` (go1.26 writes `go1.26.8-X:foo`).
    pub fn experiments(&self) -> Vec<String> {
        let Some(at) = self.go_version.find("X:") else {
            return Vec::new();
        };
        self.go_version[at + 2..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// Link-time addresses of the runtime variables the heap profile lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeVars {
    pub mbuckets: u64,
    pub mprof_cycle: u64,
    pub mem_profile_rate: u64,
    pub disable_memory_profiling: u64,
    pub prof_mem_active_lock: Option<u64>,
    /// `runtime.allgs`, the slice of every goroutine: goroutine profiles need it, heap ones
    /// do not.
    pub allgs: Option<u64>,
    /// `runtime.memstats`, `runtime.gcController`, `runtime.mheap_`, `runtime.allp`: what
    /// MemStats are computed from.
    pub memstats: Option<[u64; 4]>,
}

/// One loadable segment: where it sits in the file and at which link-time address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
}

/// Everything heapwatch needs from one Go executable.
#[derive(Debug)]
pub struct GoBinary {
    /// The Go build id (`.note.go.buildid`): the cache key.
    pub build_id: String,
    /// The GNU build id in hex (`.note.gnu.build-id`), which runtime/pprof puts in mappings.
    pub gnu_build_id: String,
    pub build: GoBuild,
    pub vars: RuntimeVars,
    pub pclntab: Pclntab,
    /// `runtime.firstmoduledata`: where it is and the text base the function table counts
    /// from (link-time), checked against the live process at attach.
    pub module: ModuleData,
    /// ET_DYN: loaded at a bias found in the process's maps.
    pub pie: bool,
    pub segments: Vec<Segment>,
}

/// Parses `.go.buildinfo` (Go 1.18+ inline-string form).
pub fn parse_buildinfo(section: &[u8]) -> Result<GoBuild, String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if section.len() < 32 || !section.starts_with(MAGIC) {
        return Err("no build info magic".into());
    }
    if section[15] & 2 == 0 {
        return Err("pointer-form build info (a Go release older than 1.18)".into());
    }
    let mut at = 32usize;
    let mut string = || -> Result<&[u8], String> {
        let mut len: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *section.get(at).ok_or("truncated length")?;
            at += 1;
            len |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 56 {
                return Err("bad length".into());
            }
        }
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .ok_or("bad length")?;
        let s = section.get(at..end).ok_or("truncated string")?;
        at = end;
        Ok(s)
    };
    let go_version = String::from_utf8_lossy(string()?).into_owned();
    let modinfo = string()?;
    // The module text sits between two 16-byte sentinels, which are not UTF-8: they are cut
    // off as bytes (cut after a lossy conversion, whose replacement characters are longer, the
    // text was never found).
    let raw = modinfo;
    let text = if raw.len() >= 33 && raw[raw.len() - 17] == b'\n' {
        String::from_utf8_lossy(&raw[16..raw.len() - 16]).into_owned()
    } else {
        String::new()
    };
    let mut build = GoBuild {
        go_version,
        ..GoBuild::default()
    };
    for line in text.lines() {
        let mut f = line.split('\t');
        match f.next() {
            Some("mod") => {
                build.main_path = f.next().map(str::to_string);
                build.module = build.main_path.clone().filter(|p| !p.is_empty());
                build.main_version = f.next().map(str::to_string);
            }
            Some("path") if build.main_path.is_none() => {
                build.main_path = f.next().map(str::to_string);
            }
            Some("build") => {
                if let Some(rev) = f.next().and_then(|kv| kv.strip_prefix("vcs.revision=")) {
                    build.vcs_revision = Some(rev.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(build)
}

fn section_bytes<'d>(
    s: &object::read::elf::ElfSection64<'d, '_, Endianness>,
) -> Result<&'d [u8], BinaryError> {
    s.data().map_err(|e| BinaryError::NotElf(e.to_string()))
}

type Elf<'d> = ElfFile64<'d, Endianness>;

/// The runtime variables from `.symtab`.
fn symbols(elf: &Elf) -> Result<RuntimeVars, BinaryError> {
    const NAMES: [&str; 10] = [
        "runtime.memstats",
        "runtime.gcController",
        "runtime.mheap_",
        "runtime.allp",
        "runtime.allgs",
        "runtime.mbuckets",
        "runtime.mProfCycle",
        "runtime.MemProfileRate",
        "runtime.disableMemoryProfiling",
        "runtime.profMemActiveLock",
    ];
    let mut found: HashMap<&str, u64> = HashMap::new();
    for sym in elf.symbols() {
        if let Some(name) = sym
            .name()
            .ok()
            .and_then(|n| NAMES.iter().find(|w| **w == n))
        {
            found.insert(name, sym.address());
        }
    }
    let get = |name: &'static str| found.get(name).copied().ok_or(BinaryError::Symbol(name));
    let vars = RuntimeVars {
        mbuckets: get("runtime.mbuckets")?,
        mprof_cycle: get("runtime.mProfCycle")?,
        mem_profile_rate: get("runtime.MemProfileRate")?,
        disable_memory_profiling: get("runtime.disableMemoryProfiling")?,
        prof_mem_active_lock: get("runtime.profMemActiveLock").ok(),
        allgs: get("runtime.allgs").ok(),
        memstats: (|| {
            Some([
                get("runtime.memstats").ok()?,
                get("runtime.gcController").ok()?,
                get("runtime.mheap_").ok()?,
                get("runtime.allp").ok()?,
            ])
        })(),
    };
    Ok(vars)
}

/// The module data must describe this very pclntab, and its function table must span exactly
/// `[minpc, maxpc)` (the runtime's own `moduledataverify1`).
fn check_module(md: &ModuleData, table: &Pclntab, pclntab: u64) -> Result<(), String> {
    let (nfunc, functab, first, end) = table.extent();
    if md.pc_header != pclntab {
        return Err(format!(
            "moduledata.pcHeader is {:#x}, but .gopclntab is at {pclntab:#x}",
            md.pc_header
        ));
    }
    if md.ftab != pclntab.wrapping_add(functab as u64) || md.ftab_len != nfunc as u64 + 1 {
        return Err(format!(
            "moduledata.ftab ({} entries at {:#x}) is not the pclntab's function table ({} at \
             {:#x})",
            md.ftab_len,
            md.ftab,
            nfunc + 1,
            pclntab.wrapping_add(functab as u64)
        ));
    }
    if (first, end) != (md.minpc, md.maxpc) {
        return Err(format!(
            "the function table spans {first:#x}..{end:#x} from text base {:#x}, but the \
             runtime's minpc..maxpc is {:#x}..{:#x}",
            md.text, md.minpc, md.maxpc
        ));
    }
    Ok(())
}

/// The Go build id from `.note.go.buildid` (an ELF note named "Go").
fn go_build_id(note: &[u8]) -> Option<String> {
    let word = |i: usize| {
        note.get(i..i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let namesz = word(0)? as usize;
    let descsz = word(4)? as usize;
    let desc = 12 + namesz.div_ceil(4) * 4;
    let bytes = note.get(desc..desc.checked_add(descsz)?)?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

impl GoBinary {
    /// Parses an executable image.
    pub fn parse(data: &[u8]) -> Result<GoBinary, BinaryError> {
        let elf =
            ElfFile64::<Endianness>::parse(data).map_err(|e| BinaryError::NotElf(e.to_string()))?;
        let machine = elf.elf_header().e_machine.get(elf.endian());
        if machine != object::elf::EM_X86_64 {
            return Err(BinaryError::Machine(machine));
        }
        let section = |name: &'static str| -> Result<_, BinaryError> {
            elf.section_by_name(name).ok_or(BinaryError::NotGo(name))
        };
        let build = parse_buildinfo(section_bytes(&section(".go.buildinfo")?)?)
            .map_err(BinaryError::BuildInfo)?;
        let text = section(".text")?;
        let build_id = elf
            .section_by_name(".note.go.buildid")
            .and_then(|s| s.data().ok())
            .and_then(go_build_id)
            .unwrap_or_default();

        let gnu_build_id = elf
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default();
        // The pclntab is found the way the runtime finds it, through its module data: the
        // system linker merges `.gopclntab` into other sections, and puts C code at the start
        // of `.text`.
        let image = FileImage::new(&elf);
        let release = build.release().unwrap_or((1, 26));
        let module = module::read(&elf, &image, release).map_err(BinaryError::Module)?;
        let pcln_addr = module.pc_header;
        let pcln = module
            .pclntab_len()
            .and_then(|len| image.bytes(pcln_addr, len))
            .ok_or_else(|| {
                BinaryError::Module(format!(
                    "the pclntab at {pcln_addr:#x} (to the end of moduledata.pclntable, {:#x} \
                     bytes from {:#x}) is not in the file",
                    module.pclntable_len, module.pclntable
                ))
            })?;
        let table = Pclntab::parse(pcln.to_vec(), module.text, FuncData::default())?
            .with_text(module.text, module.textsects.clone());
        check_module(&module, &table, pcln_addr).map_err(BinaryError::Module)?;
        let vars = if elf.section_by_name(".symtab").is_some() {
            symbols(&elf)?
        } else {
            let code = (text.address(), section_bytes(&text)?);
            let mut vars = stripped::recover_vars(&table, code).map_err(BinaryError::Stripped)?;
            vars.memstats = stripped::recover_memstats(&table, code, release);
            vars
        };
        let gofunc = module.gofunc;
        let funcdata = elf
            .sections()
            .find(|s| s.address() <= gofunc && gofunc < s.address() + s.size())
            .and_then(|s| Some((s.address(), s.data().ok()?.to_vec())))
            .map(|(section_addr, section)| FuncData {
                base: gofunc,
                section_addr,
                section,
            })
            .ok_or_else(|| {
                BinaryError::Module(format!(
                    "moduledata.gofunc {gofunc:#x} is in no section of the file"
                ))
            })?;
        let pclntab = table.with_funcdata(funcdata);
        let segments = elf
            .segments()
            .map(|s| Segment {
                vaddr: s.address(),
                offset: s.file_range().0,
            })
            .collect();
        Ok(GoBinary {
            build_id,
            gnu_build_id,
            build,
            vars,
            pclntab,
            module,
            pie: elf.kind() == ObjectKind::Dynamic,
            segments,
        })
    }

    /// The load bias of this binary in a process, from the process's maps lines of the
    /// executable: 0 unless PIE.
    pub fn load_bias(&self, exe_maps: &[super::memory::MapLine]) -> Option<u64> {
        load_bias(self.pie, &self.segments, exe_maps)
    }
}

/// Where the segment at the lowest file offset was mapped, less where it was linked.
fn load_bias(pie: bool, segments: &[Segment], exe_maps: &[super::memory::MapLine]) -> Option<u64> {
    if !pie {
        return Some(0);
    }
    let seg = segments.iter().min_by_key(|s| s.offset)?;
    let line = exe_maps.iter().find(|l| l.offset == seg.offset & !0xfff)?;
    Some(line.start.wrapping_sub(seg.vaddr & !0xfff))
}

type StatKey = (u64, u64, u64, i64);

#[derive(Default)]
struct Cache {
    by_stat: HashMap<StatKey, String>,
    by_build_id: HashMap<String, Arc<GoBinary>>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The parsed binary behind `path` (e.g. `/proc/PID/exe`), from the cache when a binary with
/// the same build id was parsed before.
pub fn load(path: &Path) -> Result<Arc<GoBinary>, BinaryError> {
    let meta = fs::metadata(path).map_err(|e| BinaryError::Read(e.to_string()))?;
    let key = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
    if let Ok(c) = cache().lock() {
        if let Some(bin) = c.by_stat.get(&key).and_then(|id| c.by_build_id.get(id)) {
            return Ok(bin.clone());
        }
    }
    let data = fs::read(path).map_err(|e| BinaryError::Read(e.to_string()))?;
    let parsed = Arc::new(GoBinary::parse(&data)?);
    if let Ok(mut c) = cache().lock() {
        // Without a build id, the file identity alone is the key.
        let id = if parsed.build_id.is_empty() {
            format!("file:{key:?}")
        } else {
            parsed.build_id.clone()
        };
        c.by_stat.insert(key, id.clone());
        return Ok(c.by_build_id.entry(id).or_insert(parsed).clone());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varstr(s: &str) -> Vec<u8> {
        varbytes(s.as_bytes())
    }

    fn varbytes(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut n = s.len();
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(s);
        out
    }

    #[test]
    fn buildinfo_names_toolchain_module_and_revision() {
        let mut sec = b"\xff Go buildinf:".to_vec();
        sec.extend_from_slice(&[8, 2]);
        sec.resize(32, 0);
        sec.extend(varstr("go1.24.6"));
        let text = "path\texample.com/app\nmod\texample.com/app\tv1.2.3\th1:x=\nbuild\t-trimpath=true\nbuild\tvcs.revision=abc123\n";
        // The sentinels as cmd/go writes them: not UTF-8.
        let mut modinfo = b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6".to_vec();
        modinfo.extend_from_slice(text.as_bytes());
        modinfo.extend_from_slice(b"\xf92C1\x86\x18 r\x00\x82B\x10A\x16\xd8\xf2");
        sec.extend(varbytes(&modinfo));
        let b = parse_buildinfo(&sec).unwrap();
        assert_eq!(b.go_version, "go1.24.6");
        assert_eq!(b.release(), Some((1, 24)));
        assert_eq!(b.main_path.as_deref(), Some("example.com/app"));
        assert_eq!(b.module.as_deref(), Some("example.com/app"));
        assert_eq!(b.main_version.as_deref(), Some("v1.2.3"));
        assert_eq!(b.vcs_revision.as_deref(), Some("abc123"));
    }

    #[test]
    fn experiments_are_read_from_either_form_of_the_version() {
        let x = |s: &str| {
            GoBuild {
                go_version: s.into(),
                ..GoBuild::default()
            }
            .experiments()
        };
        assert_eq!(x("go1.24.6 X:nospinbitmutex"), vec!["nospinbitmutex"]);
        assert_eq!(
            x("go1.26.8-X:staticlockranking,nodwarf5"),
            vec!["staticlockranking", "nodwarf5"]
        );
        assert!(x("go1.26.8").is_empty());
    }

    #[test]
    fn buildinfo_garbage_is_an_error() {
        assert!(parse_buildinfo(b"nope").is_err());
        let mut sec = b"\xff Go buildinf:".to_vec();
        sec.extend_from_slice(&[8, 2]);
        sec.resize(32, 0);
        sec.push(200); // a length past the end
        assert!(parse_buildinfo(&sec).is_err());
    }

    #[test]
    fn releases_parse_from_version_strings() {
        let v = |s: &str| {
            GoBuild {
                go_version: s.into(),
                ..GoBuild::default()
            }
            .release()
        };
        assert_eq!(v("go1.26.8"), Some((1, 26)));
        assert_eq!(v("go1.23rc1"), Some((1, 23)));
        assert_eq!(v("go1.24.6 X:nodwarf5"), Some((1, 24)));
        assert_eq!(v("devel go1.27-abcdef"), Some((1, 27)));
        assert_eq!(v("weird"), None);
    }

    #[test]
    fn this_test_binary_is_not_go() {
        let exe = std::env::current_exe().unwrap();
        let err = GoBinary::parse(&fs::read(exe).unwrap()).unwrap_err();
        assert_eq!(err, BinaryError::NotGo(".go.buildinfo"));
        assert!(matches!(
            GoBinary::parse(b"garbage"),
            Err(BinaryError::NotElf(_))
        ));
    }

    #[test]
    fn the_load_bias_is_where_the_first_segment_landed() {
        use super::super::memory::MapLine;
        let segments = [
            Segment {
                vaddr: 0x40_1000,
                offset: 0x1000,
            },
            Segment {
                vaddr: 0x40_0000,
                offset: 0,
            },
        ];
        let line = |start: u64, offset: u64| MapLine {
            start,
            end: start + 0x1000,
            readable: true,
            executable: offset != 0,
            offset,
            inode: 9,
            path: "/app".into(),
        };
        let maps = [line(0x5555_5540_1000, 0x1000), line(0x5555_5540_0000, 0)];
        assert_eq!(load_bias(true, &segments, &maps), Some(0x5555_5500_0000));
        assert_eq!(load_bias(false, &segments, &maps), Some(0));
        assert_eq!(
            load_bias(true, &segments, &maps[..1]),
            None,
            "first segment not mapped"
        );
    }
}
