//! Reading another process's memory without touching it: `process_vm_readv` copies bytes out,
//! and `/proc/PID/maps` says which addresses may be asked for at all. The walker only sees the
//! `TargetMemory` trait, so it runs the same over a fabricated byte image (tests, fuzzing).

use std::fs;
use std::io;

/// A read that could not be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFault {
    /// The range lies (partly) outside every readable mapping: a pointer not to follow.
    Unmapped {
        addr: u64,
        len: usize,
    },
    /// The kernel refused the read (EPERM: no ptrace rights).
    Denied,
    /// The process is gone (ESRCH).
    Gone,
    /// The read returned fewer bytes than asked (a mapping vanished under the reader).
    Short {
        addr: u64,
        len: usize,
    },
    Other(String),
}

impl std::fmt::Display for ReadFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFault::Unmapped { addr, len } => write!(
                f,
                "{len} bytes at {addr:#x} are outside the process's readable memory (a pointer \
                 into unmapped memory)"
            ),
            ReadFault::Denied => f.write_str("the kernel refused the read (no ptrace rights)"),
            ReadFault::Gone => f.write_str("the process has exited"),
            ReadFault::Short { addr, len } => write!(
                f,
                "only part of {len} bytes at {addr:#x} could be read (a mapping changed under \
                 the reader)"
            ),
            ReadFault::Other(e) => write!(f, "the read failed: {e}"),
        }
    }
}

/// The memory of one target process, read-only.
pub trait TargetMemory {
    /// Fills `buf` from `addr`, or fails; never a partial fill reported as success.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault>;

    /// The readable range `[start, end)` holding `addr`, when known: lets a reader fetch a
    /// whole block around a small read without crossing into unmapped memory.
    fn readable_span(&self, _addr: u64) -> Option<(u64, u64)> {
        None
    }

    fn read_u64(&self, addr: u64) -> Result<u64, ReadFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Fills `out` with each range `(addr, len)` in turn, end to end (`out.len()` is their
    /// lengths' sum): many reads, which a process can serve in one system call.
    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> Result<(), ReadFault> {
        read_each(self, ranges, out)
    }
}

/// [`TargetMemory::read_ranges`] one range at a time.
fn read_each<M: TargetMemory + ?Sized>(
    mem: &M,
    ranges: &[(u64, usize)],
    out: &mut [u8],
) -> Result<(), ReadFault> {
    let mut at = 0;
    for &(addr, len) in ranges {
        let Some(chunk) = out.get_mut(at..at + len) else {
            return Err(ReadFault::Other(format!(
                "{} bytes given for ranges of more",
                out.len()
            )));
        };
        mem.read(addr, chunk)?;
        at += len;
    }
    Ok(())
}

/// One readable range `[start, end)` of the target's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
}

/// The readable ranges of an address space, sorted, for "is this pointer worth following".
#[derive(Debug, Clone, Default)]
pub struct Regions(Vec<Region>);

impl Regions {
    /// Regions that touch or overlap are joined: two neighbouring mappings (a heap arena beside
    /// another, split only by their flags) are one readable range, and a read may span both.
    pub fn new(mut regions: Vec<Region>) -> Regions {
        regions.retain(|r| r.start < r.end);
        regions.sort_by_key(|r| r.start);
        let mut joined: Vec<Region> = Vec::with_capacity(regions.len());
        for r in regions {
            match joined.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => joined.push(r),
            }
        }
        Regions(joined)
    }

    /// The region holding `addr`.
    pub fn span(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.0.partition_point(|r| r.start <= addr);
        let r = self.0.get(i.checked_sub(1)?)?;
        (addr < r.end).then_some((r.start, r.end))
    }

    /// The bytes of all regions together.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|r| r.end - r.start).sum()
    }

    /// True when `[addr, addr+len)` lies inside one region (neighbouring mappings joined).
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        let i = self.0.partition_point(|r| r.start <= addr);
        i > 0 && end <= self.0[i - 1].end
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLine {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
    pub offset: u64,
    pub inode: u64,
    pub path: String,
}

/// Parses `/proc/PID/maps` text; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<MapLine> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (lo, hi) = fields.next()?.split_once('-')?;
            let perms = fields.next()?.as_bytes();
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let inode = fields.next()?.parse().ok()?;
            let path = fields.collect::<Vec<_>>().join(" ");
            Some(MapLine {
                start: u64::from_str_radix(lo, 16).ok()?,
                end: u64::from_str_radix(hi, 16).ok()?,
                readable: perms.first() == Some(&b'r'),
                executable: perms.get(2) == Some(&b'x'),
                offset,
                inode,
                path,
            })
        })
        .collect()
}

/// A live process, read through `process_vm_readv`, bounded by its maps at the time of
/// `refresh`.
#[derive(Clone)]
pub struct ProcessMemory {
    pid: libc::pid_t,
    regions: Regions,
}

impl ProcessMemory {
    pub fn new(pid: u32) -> ProcessMemory {
        ProcessMemory {
            pid: pid as libc::pid_t,
            regions: Regions::default(),
        }
    }

    /// Re-reads `/proc/PID/maps` (the heap grows between captures). Returns the lines.
    pub fn refresh(&mut self) -> io::Result<Vec<MapLine>> {
        let text = fs::read_to_string(format!("/proc/{}/maps", self.pid))?;
        let lines = parse_maps(&text);
        self.regions = Regions::new(
            lines
                .iter()
                .filter(|l| l.readable)
                .map(|l| Region {
                    start: l.start,
                    end: l.end,
                })
                .collect(),
        );
        Ok(lines)
    }
}

impl ProcessMemory {
    /// How many bytes the process had readable at the last `refresh`: no list of its own can
    /// hold more.
    pub fn readable_bytes(&self) -> u64 {
        self.regions.total()
    }
}

impl TargetMemory for ProcessMemory {
    fn readable_span(&self, addr: u64) -> Option<(u64, u64)> {
        self.regions.span(addr)
    }

    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> Result<(), ReadFault> {
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if out.len() != total {
            return Err(ReadFault::Other(format!(
                "{} bytes given for ranges of {total}",
                out.len()
            )));
        }
        let mut at = 0;
        for batch in ranges.chunks(IOV_MAX) {
            let len: usize = batch.iter().map(|r| r.1).sum();
            self.read_batch(batch, &mut out[at..at + len])?;
            at += len;
        }
        Ok(())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        if buf.is_empty() {
            return Ok(());
        }
        if !self.regions.contains(addr, buf.len()) {
            return Err(ReadFault::Unmapped {
                addr,
                len: buf.len(),
            });
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes `buf`, which we own mutably for the whole call; the remote
        // side is only read by the kernel, which checks it against the target's mappings.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => ReadFault::Denied,
                Some(libc::ESRCH) => ReadFault::Gone,
                Some(libc::EFAULT) => ReadFault::Unmapped {
                    addr,
                    len: buf.len(),
                },
                _ => ReadFault::Other(err.to_string()),
            });
        }
        if n as usize != buf.len() {
            return Err(ReadFault::Short {
                addr,
                len: buf.len(),
            });
        }
        Ok(())
    }
}

/// Most iovecs one `process_vm_readv` takes (`IOV_MAX` on Linux).
const IOV_MAX: usize = 1024;

impl ProcessMemory {
    /// One `process_vm_readv` of up to `IOV_MAX` ranges; any that is not wholly read sends
    /// the batch to single reads, which name the fault.
    fn read_batch(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> Result<(), ReadFault> {
        if ranges
            .iter()
            .any(|&(a, len)| !self.regions.contains(a, len))
        {
            return read_each(self, ranges, out);
        }
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: out.len(),
        };
        let mut remote = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; IOV_MAX];
        for (iov, &(a, len)) in remote.iter_mut().zip(ranges) {
            *iov = libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: len,
            };
        }
        let remote = &remote[..ranges.len().min(IOV_MAX)];
        // SAFETY: `local` describes `out`, owned mutably for the call, and is exactly as long
        // as the remote ranges together; the kernel checks the remote side.
        let n = unsafe {
            libc::process_vm_readv(self.pid, &local, 1, remote.as_ptr(), remote.len() as _, 0)
        };
        if n >= 0 && n as usize == out.len() {
            return Ok(());
        }
        read_each(self, ranges, out)
    }
}

/// A fabricated address space: byte images at chosen addresses (tests and the fuzzer).
#[derive(Debug, Clone, Default)]
pub struct ImageMemory {
    pub segments: Vec<(u64, Vec<u8>)>,
}

impl TargetMemory for ImageMemory {
    fn readable_span(&self, addr: u64) -> Option<(u64, u64)> {
        self.segments.iter().find_map(|(base, bytes)| {
            let end = base.checked_add(bytes.len() as u64)?;
            (*base <= addr && addr < end).then_some((*base, end))
        })
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        let fault = ReadFault::Unmapped {
            addr,
            len: buf.len(),
        };
        for (base, bytes) in &self.segments {
            let Some(start) = addr.checked_sub(*base) else {
                continue;
            };
            let Ok(start) = usize::try_from(start) else {
                continue;
            };
            if let Some(src) = start
                .checked_add(buf.len())
                .and_then(|end| bytes.get(start..end))
            {
                buf.copy_from_slice(src);
                return Ok(());
            }
        }
        Err(fault)
    }
}

/// Bytes fetched per block by [`BlockReader`].
const BLOCK: u64 = 256 << 10;

/// Serves small reads out of aligned 256 KiB blocks: the runtime packs its profile buckets into
/// `persistentalloc` chunks (256 KiB each), so one `process_vm_readv` serves dozens of buckets instead of two
/// calls each. Made fresh for each walk, so nothing is served from an earlier one.
pub struct BlockReader<'a> {
    inner: &'a dyn TargetMemory,
    block: std::cell::RefCell<(u64, Vec<u8>)>,
}

impl<'a> BlockReader<'a> {
    pub fn new(inner: &'a dyn TargetMemory) -> BlockReader<'a> {
        BlockReader {
            inner,
            block: std::cell::RefCell::new((0, Vec::new())),
        }
    }

    fn cached(&self, addr: u64, buf: &mut [u8]) -> bool {
        let block = self.block.borrow();
        let Some(start) = addr.checked_sub(block.0) else {
            return false;
        };
        let Some(src) = usize::try_from(start)
            .ok()
            .and_then(|s| block.1.get(s..s.checked_add(buf.len())?))
        else {
            return false;
        };
        buf.copy_from_slice(src);
        true
    }
}

impl TargetMemory for BlockReader<'_> {
    fn readable_span(&self, addr: u64) -> Option<(u64, u64)> {
        self.inner.readable_span(addr)
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFault> {
        let len = buf.len() as u64;
        if len > BLOCK / 2 {
            return self.inner.read(addr, buf);
        }
        if self.cached(addr, buf) {
            return Ok(());
        }
        let Some((lo, hi)) = self.inner.readable_span(addr) else {
            return self.inner.read(addr, buf);
        };
        // Aligned blocks serve a walk in either direction: the runtime's list runs from the
        // newest bucket down to the oldest, so mostly toward lower addresses.
        let start = (addr & !(BLOCK - 1)).max(lo);
        let end = hi.min((addr & !(BLOCK - 1)).saturating_add(BLOCK));
        if addr.saturating_add(len) > end {
            return self.inner.read(addr, buf);
        }
        {
            // The block's buffer is reused from one block to the next (no fresh zeroed
            // allocation per block); a failed read leaves it empty, never stale.
            let mut block = self.block.borrow_mut();
            let (at, bytes) = &mut *block;
            bytes.resize((end - start) as usize, 0);
            if self.inner.read(start, bytes).is_err() {
                bytes.clear();
                *at = 0;
                drop(block);
                return self.inner.read(addr, buf);
            }
            *at = start;
        }
        if self.cached(addr, buf) {
            Ok(())
        } else {
            self.inner.read(addr, buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_and_bound_reads() {
        let text = "00400000-0040b000 r-xp 00000000 fc:01 787766   /bin/cat\n\
                    0060b000-0060c000 rw-p 0000b000 fc:01 787766 /bin/cat\n\
                    7ffc342a2000-7ffc342c3000 rw-p 00000000 00:00 0   [stack]\n\
                    garbage line\n";
        let lines = parse_maps(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].path, "/bin/cat");
        assert!(lines[0].executable && !lines[1].executable);
        assert_eq!(lines[1].offset, 0xb000);
        let regions = Regions::new(
            lines
                .iter()
                .map(|l| Region {
                    start: l.start,
                    end: l.end,
                })
                .collect(),
        );
        assert!(regions.contains(0x400000, 8));
        assert!(regions.contains(0x40aff8, 8));
        assert!(!regions.contains(0x40aff9, 8), "crosses the end");
        assert!(!regions.contains(0x500000, 1));
        assert!(!regions.contains(u64::MAX, 2), "overflow is outside");
    }

    #[test]
    fn own_memory_reads_back() {
        let value: u64 = 0x1122_3344_5566_7788;
        let mut mem = ProcessMemory::new(std::process::id());
        mem.refresh().unwrap();
        let addr = &value as *const u64 as u64;
        assert_eq!(mem.read_u64(addr), Ok(value));
        assert!(matches!(
            mem.read(8, &mut [0u8; 8]),
            Err(ReadFault::Unmapped { .. })
        ));
    }

    #[test]
    fn range_reads_of_own_memory_read_back_and_name_a_wild_address() {
        let values: Vec<u64> = (0..3000u64).map(|i| i * 7 + 1).collect();
        let mut mem = ProcessMemory::new(std::process::id());
        mem.refresh().unwrap();
        // Backwards, one value a range, but every tenth range two values long.
        let ranges: Vec<(u64, usize)> = (0..3000)
            .rev()
            .filter(|i| i % 10 != 1)
            .map(|i| {
                (
                    &values[i] as *const u64 as u64,
                    if i % 10 == 0 { 16 } else { 8 },
                )
            })
            .collect();
        let want: Vec<u64> = (0..3000)
            .rev()
            .filter(|i| i % 10 != 1)
            .flat_map(|i| {
                if i % 10 == 0 {
                    vec![values[i], values[i + 1]]
                } else {
                    vec![values[i]]
                }
            })
            .collect();
        let mut out = vec![0u8; 8 * want.len()];
        mem.read_ranges(&ranges, &mut out).unwrap();
        let back: Vec<u64> = out
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, want);
        let mut wild = ranges[1..11].to_vec();
        wild[5] = (8, 8);
        let n: usize = wild.iter().map(|r| r.1).sum();
        assert_eq!(
            mem.read_ranges(&wild, &mut out[..n]),
            Err(ReadFault::Unmapped { addr: 8, len: 8 })
        );
        assert!(matches!(
            mem.read_ranges(&wild, &mut out[..n - 1]),
            Err(ReadFault::Other(_))
        ));
    }

    /// Two neighbouring mappings split only by their protection (the kernel keeps them as two
    /// lines of the maps file): a read across the seam, alone or among many ranges, is served.
    #[test]
    fn reads_span_neighbouring_mappings() {
        const PAGE: usize = 4096;
        // SAFETY: a fresh private anonymous mapping of four pages, owned by this test alone;
        // its second half is made read-only, which splits it into two mappings, then unmapped.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let bytes = std::slice::from_raw_parts_mut(p.cast::<u8>(), 4 * PAGE);
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i % 253) as u8;
            }
            assert_eq!(
                libc::mprotect(
                    p.cast::<u8>().add(2 * PAGE).cast(),
                    2 * PAGE,
                    libc::PROT_READ
                ),
                0
            );
            p as u64
        };
        let seam = base + 2 * PAGE as u64;
        let mut mem = ProcessMemory::new(std::process::id());
        let lines = mem.refresh().unwrap();
        let split = |at: u64| lines.iter().any(|l| l.start == at || l.end == at);
        assert!(split(seam), "the mapping was not split at {seam:#x}");
        let want: Vec<u8> = (2 * PAGE - 100..2 * PAGE + 100)
            .map(|i| (i % 253) as u8)
            .collect();
        let mut one = vec![0u8; 200];
        assert_eq!(mem.read(seam - 100, &mut one), Ok(()));
        assert_eq!(one, want);
        assert_eq!(
            mem.readable_span(seam - 1).map(|s| s.1 >= seam + 100),
            Some(true)
        );
        let ranges = [(base, 8), (seam - 100, 200), (base + 3 * PAGE as u64, 8)];
        let mut many = vec![0u8; 216];
        assert_eq!(mem.read_ranges(&ranges, &mut many), Ok(()));
        assert_eq!(&many[8..208], &want[..]);
        // SAFETY: the mapping made above, unmapped once, nothing borrowed from it left.
        assert_eq!(
            unsafe { libc::munmap(base as *mut libc::c_void, 4 * PAGE) },
            0
        );
    }

    #[test]
    fn block_reads_serve_what_direct_reads_do_and_stop_at_segment_ends() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let image = ImageMemory {
            segments: vec![(0x10_0000, bytes.clone())],
        };
        let blocks = BlockReader::new(&image);
        for addr in [0x10_0000u64, 0x10_0007, 0x11_0000 - 3, 0x10_0000 + 199_990] {
            let mut a = [0u8; 10];
            let mut b = [0u8; 10];
            assert_eq!(
                blocks.read(addr, &mut a),
                image.read(addr, &mut b),
                "{addr:#x}"
            );
            assert_eq!(a, b, "{addr:#x}");
        }
        assert!(blocks.read(0x10_0000 + 199_995, &mut [0u8; 10]).is_err());
        assert!(blocks.read(0x9_0000, &mut [0u8; 4]).is_err());
    }
}
