//! The function holding a PC (`runtime.findfunc`: a binary search of the function table's
//! entry offsets) and what its `_func` record says: its name, `funcID` and flag, and the
//! pc-value tables (`runtime.pcvalue`) that give the file, line and SP delta at a PC.

use super::{FUNC_FIXED, FuncRef, Pclntab, cstr, u32_at, varint};

/// `abi.FuncFlagTopFrame`: the function is at the top of its stack (`runtime.goexit`).
pub const FUNC_FLAG_TOP_FRAME: u8 = 1;
/// `abi.FuncFlagSPWrite`: the function writes SP, so no frame above it can be found.
pub const FUNC_FLAG_SP_WRITE: u8 = 2;

impl Pclntab {
    /// `[entry, end)` of the function with this symbol name (a linear scan: once per binary).
    pub fn func_range(&self, name: &str) -> Option<(u64, u64)> {
        (0..self.nfunc).find_map(|i| {
            let funcoff = u32_at(&self.data, self.functab + 8 * i + 4)? as usize;
            let f = FuncRef {
                off: self.functab.checked_add(funcoff)?,
                entry: 0,
            };
            (self.func_name(f)? == name).then(|| {
                (
                    self.text_addr(self.entry_off(i)),
                    self.text_addr(self.entry_off(i + 1)),
                )
            })
        })
    }

    pub(super) fn entry_off(&self, i: usize) -> u32 {
        u32_at(&self.data, self.functab + 8 * i).unwrap_or(u32::MAX)
    }

    /// The function whose code holds `pc` (`runtime.findfunc`).
    pub fn find_func(&self, pc: u64) -> Option<FuncRef> {
        let rel = self.text_off(pc)?;
        if self.nfunc == 0 || rel < self.entry_off(0) || rel >= self.entry_off(self.nfunc) {
            return None;
        }
        // The last i with entry_off(i) <= rel.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry_off(mid) <= rel {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let funcoff = u32_at(&self.data, self.functab + 8 * lo + 4)? as usize;
        let off = self.functab.checked_add(funcoff)?;
        let entry = self.text_addr(u32_at(&self.data, off)?);
        Some(FuncRef { off, entry })
    }

    pub(super) fn field(&self, f: FuncRef, at: usize) -> Option<u32> {
        u32_at(&self.data, f.off + at)
    }

    pub(super) fn func_name_off(&self, name_off: u32) -> Option<&str> {
        cstr(&self.data, self.funcname.checked_add(name_off as usize)?)
    }

    /// The physical function's symbol name.
    pub fn func_name(&self, f: FuncRef) -> Option<&str> {
        self.func_name_off(self.field(f, 4)?)
    }

    pub(super) fn npcdata(&self, f: FuncRef) -> u32 {
        self.field(f, 28).unwrap_or(0)
    }

    pub(super) fn nfuncdata(&self, f: FuncRef) -> u32 {
        self.data.get(f.off + 43).map_or(0, |&b| u32::from(b))
    }

    /// `runtime.pcvalue`: the value of the table at `pctab + off` for `target`, -1 when none.
    fn pcvalue(&self, f: FuncRef, off: u32, target: u64) -> i32 {
        if off == 0 {
            return -1;
        }
        let Some(p) = self.data.get(self.pctab.saturating_add(off as usize)..) else {
            return -1;
        };
        let mut at = 0usize;
        let mut pc = f.entry;
        let mut val: i32 = -1;
        let mut first = true;
        loop {
            let Some(&b) = p.get(at) else { return -1 };
            if b == 0 && !first {
                return -1;
            }
            let Some(uv) = varint(p, &mut at) else {
                return -1;
            };
            val = val.wrapping_add((-((uv & 1) as i32)) ^ ((uv >> 1) as i32));
            let Some(pcdelta) = varint(p, &mut at) else {
                return -1;
            };
            pc = pc.wrapping_add(u64::from(pcdelta) * self.quantum);
            first = false;
            if target < pc {
                return val;
            }
        }
    }

    pub(super) fn pcdata(&self, f: FuncRef, table: u32, target: u64) -> i32 {
        if table >= self.npcdata(f) {
            return -1;
        }
        match self.field(f, FUNC_FIXED + 4 * table as usize) {
            Some(off) => self.pcvalue(f, off, target),
            None => -1,
        }
    }

    pub(super) fn file_line(&self, f: FuncRef, pc: u64) -> (String, i64) {
        let fileno = self.pcvalue(f, self.field(f, 20).unwrap_or(0), pc);
        let line = self.pcvalue(f, self.field(f, 24).unwrap_or(0), pc);
        let file = (|| {
            let cu = self.field(f, 32)?;
            let idx = u32::try_from(fileno).ok()?.checked_add(cu)? as usize;
            let name_off = u32_at(&self.data, self.cutab.checked_add(idx.checked_mul(4)?)?)?;
            if name_off == u32::MAX {
                return None;
            }
            cstr(&self.data, self.filetab.checked_add(name_off as usize)?)
        })()
        .unwrap_or("?")
        .to_string();
        (file, i64::from(line))
    }

    /// `funcID` of a physical function (`_func.funcID`).
    pub fn func_id(&self, f: FuncRef) -> u8 {
        self.data.get(f.off + 40).copied().unwrap_or(0)
    }

    /// `_func.flag`: [`FUNC_FLAG_TOP_FRAME`], [`FUNC_FLAG_SP_WRITE`].
    pub fn func_flag(&self, f: FuncRef) -> u8 {
        self.data.get(f.off + 41).copied().unwrap_or(0)
    }

    /// `funcspdelta`: how far the stack pointer at `pc` is below the frame's entry SP (its
    /// `pcsp` table); `None` when the function has no table or the PC is not in it.
    pub fn sp_delta(&self, f: FuncRef, pc: u64) -> Option<u64> {
        let off = self.field(f, 16)?;
        if off == 0 {
            return None;
        }
        u64::try_from(self.pcvalue(f, off, pc)).ok()
    }

    /// Where a `go` statement is, as a goroutine dump's `created by` line names it: the
    /// physical function holding its return PC `gopc`, and the file and line of the call.
    pub fn creation_site(&self, gopc: u64) -> Option<(String, String, i64)> {
        let f = self.find_func(gopc)?;
        let pc = if gopc > f.entry { gopc - 1 } else { gopc };
        let (file, line) = self.file_line(f, pc);
        Some((self.func_name(f)?.to_string(), file, line))
    }
}
