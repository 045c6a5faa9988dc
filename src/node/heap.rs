//! Heap in use of a Go process, read out of its memory by the proc source (nothing asked of
//! the process): the `inuse_space` total of the profile `runtime/pprof` would serve now.

use crate::decode;
use crate::source::proc::ProcSource;

/// Largest decompressed capture accepted here (a capture of a heap this large is unusual).
const MAX_PROFILE: u64 = 1 << 30;

/// The process's heap in use in bytes, as its heap profile counts it; the reason in words when
/// it cannot be read (not a supported Go release, no permission, profiling disabled, gone).
pub fn heap_in_use(pid: u32) -> Result<u64, String> {
    let target = format!("proc:{pid}");
    let mut source = ProcSource::attach(pid, &target).map_err(|e| e.to_string())?;
    let gz = source
        .capture_heap(std::time::Duration::from_secs(5))
        .map_err(|e| e.message)?;
    let raw = decode::gunzip(&gz, MAX_PROFILE).map_err(|e| format!("{target}: {e}"))?;
    let summary = decode::summarize(&raw).map_err(|e| format!("{target}: {e}"))?;
    summary
        .totals
        .iter()
        .find(|(name, _)| name == "inuse_space")
        .map(|&(_, bytes)| bytes.max(0) as u64)
        .ok_or_else(|| format!("{target}: the heap profile has no inuse_space"))
}
