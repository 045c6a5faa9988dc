//! The runtime's data layout for each Go release the walker reads, and the build's
//! GOEXPERIMENTs that change it.
//!
//! # GOEXPERIMENTs
//!
//! GOEXPERIMENTs are read from the version string's `X:` part (`go1.24.6 X:nospinbitmutex`;
//! go1.26 writes `go1.26.8-X:…`; `binary.rs` parses it). Two touch what the walker reads:
//! `nospinbitmutex` (go1.24) brings back the tristate futex lock, held whenever its key is not 0,
//! and is read as such (the spinbit reading, bit 0, would call a lock with sleeping waiters, key
//! 2, free); `staticlockranking` puts a rank before every mutex's key and is refused by name. The
//! others change the compiler, the GC, maps or code generation, not the bucket layout, the
//! profile lock or the module data (the runtime sources of go1.23 to go1.26 tag nothing else in
//! `mprof.go`, `symtab.go` or the lock files).

/// The runtime's data layout for one range of Go releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `bucket`: next, allnext, typ, hash, size, nstk (six words).
    pub header: usize,
    /// `memRecord`: active plus `future[3]`, four words each.
    pub record: usize,
    /// `maxProfStackDepth`: no bucket holds more PCs.
    pub max_stack: usize,
    /// `memProfile` in `bucketType`.
    pub mem_bucket: u64,
    /// Go 1.24+ on amd64 uses the spinbit mutex (bit 0 = locked); before, the futex mutex
    /// (any nonzero key = locked).
    pub spinbit_mutex: bool,
    /// `protomem.go` hides leading `internal/runtime/…` frames too (Go 1.24+), not only
    /// `runtime.` ones.
    pub hides_internal_runtime: bool,
}

/// The layouts a test has verified against the runtime's own profile. `None`: refused.
pub fn layout_for(release: (u32, u32)) -> Option<Layout> {
    match release {
        (1, minor @ 23..=26) => Some(Layout {
            header: 48,
            record: 128,
            max_stack: 1024,
            mem_bucket: 1,
            spinbit_mutex: minor >= 24,
            hides_internal_runtime: minor >= 24,
        }),
        _ => None,
    }
}

/// The layout under the build's GOEXPERIMENTs, or the experiment heapwatch cannot read
/// under. Only two touch what the walker reads: `spinbitmutex` (default on amd64 from go1.24;
/// `nospinbitmutex` brings back the futex lock, held whenever its key is not 0, so a lock with
/// sleeping waiters, key 2, must not read as free) and `staticlockranking` (puts a rank before
/// every mutex's key). The others change code generation, the GC, maps or the compiler, not
/// the buckets, the profile lock or the module data.
pub fn with_experiments(mut layout: Layout, experiments: &[String]) -> Result<Layout, String> {
    for x in experiments {
        match x.as_str() {
            "nospinbitmutex" => layout.spinbit_mutex = false,
            "spinbitmutex" => layout.spinbit_mutex = true,
            "staticlockranking" => return Err(x.clone()),
            _ => {}
        }
    }
    Ok(layout)
}

/// The Go releases `layout_for` accepts, for messages.
pub const SUPPORTED: &str = "go1.23 to go1.26";

/// Runtime addresses (load bias applied) of the variables the walker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchors {
    pub mbuckets: u64,
    pub mprof_cycle: u64,
    pub prof_mem_active_lock: Option<u64>,
    /// `memstats.numgc`, when the runtime's MemStats are found: read with the cycle counter,
    /// so a capture says how many GC cycles had ended when its profile was the published one.
    pub numgc: Option<u64>,
}
