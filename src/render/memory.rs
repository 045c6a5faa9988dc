//! The words of a cycle's memory at its peak (where it went, by kind) and of its stretch at
//! the limit, written into the growth report before any output, as `summary`.

use crate::analyse::breakdown::{AtLimit, MemoryBreakdown};
use crate::units::format_bytes;

/// "of 1 GiB: Go heap live X, held free Y, runtime Z, other anonymous W, mapped files M,
/// other page cache C (dirty D)", naming only what is known.
pub fn breakdown_words(b: &MemoryBreakdown) -> String {
    let f = |v: u64| format_bytes(v as i64);
    let mut parts = Vec::new();
    for (name, v) in [
        ("Go heap live", b.go_heap_live),
        ("held free", b.go_held_free),
        ("runtime", b.go_runtime),
        ("other anonymous", b.other_anon),
        ("mapped files", b.mapped_files),
    ] {
        if let Some(v) = v {
            parts.push(format!("{name} {}", f(v)));
        }
    }
    if b.go_heap_live.is_none() {
        if let Some(a) = b.anon {
            parts.insert(0, format!("anonymous {}", f(a)));
        }
    }
    if let Some(c) = b.other_cache {
        let mut s = format!("other page cache {}", f(c));
        if let Some(d) = b.dirty {
            s.push_str(&format!(" (dirty {})", f(d)));
        }
        parts.push(s);
    }
    let of = match b.limit {
        Some(l) => format!("{} of {}", f(b.total), f(l)),
        None => f(b.total),
    };
    let mut s = format!("at {:.1} s, {of}", b.at_s);
    if !parts.is_empty() {
        s.push_str(&format!(": {}", parts.join(", ")));
    }
    if let Some(t) = b.memstats_at_s {
        s.push_str(&format!(" (Go figures from MemStats read at {t:.1} s)"));
    }
    // Without memory.stat or smaps (runs recorded before they were sampled, a bare --pid), the
    // Go figures are all there is: say how much of the total they leave unexplained.
    if b.anon.is_none() && b.other_cache.is_none() {
        let go = [b.go_heap_live, b.go_held_free, b.go_runtime]
            .into_iter()
            .flatten()
            .sum::<u64>();
        if go > 0 && b.total > go {
            s.push_str(&format!(
                "; {} not split (no memory.stat or smaps_rollup samples in this run)",
                f(b.total - go)
            ));
        }
    }
    if b.cache_inherited {
        s.push_str(
            "; page cache was already charged when the cycle began (a reused cgroup): \
             cache figures are not comparable with another run's",
        );
    }
    s
}

/// "at its limit from 20.0 s for 69.0 s, 12420 charge failures, 660 MiB of it page cache and
/// 360 MiB anonymous, not killed".
pub fn at_limit_words(a: &AtLimit) -> String {
    let mut words = format!("at its limit from {:.1} s for {:.1} s", a.since_s, a.for_s);
    if let Some(n) = a.charge_failures {
        words.push_str(&format!(", {n} charge failures"));
    }
    if let (Some(file), Some(anon)) = (a.file, a.anon) {
        words.push_str(&format!(
            ", {} of it page cache and {} anonymous",
            format_bytes(file as i64),
            format_bytes(anon as i64)
        ));
    }
    words.push_str(if a.killed {
        ", then OOM-killed"
    } else {
        ", not killed"
    });
    words
}
