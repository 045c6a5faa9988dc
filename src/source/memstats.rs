//! Go runtime MemStats as targets print them: the `# runtime.MemStats` block at the end of
//! `/debug/pprof/heap?debug=1` (`# HeapAlloc = 123`), and the agent's memstats reply
//! (`heap-alloc: 22.89MB (24005552 bytes)`). Both become a map from Go's field name to a number.

use std::collections::BTreeMap;

/// Reads the `# runtime.MemStats` block of a debug=1 heap profile. `None` when the block is
/// missing (not a Go heap profile, or the body was cut short).
pub fn parse_debug_heap(text: &str) -> Option<BTreeMap<String, i64>> {
    let start = text.find("# runtime.MemStats")?;
    let mut stats = BTreeMap::new();
    for line in text[start..].lines().skip(1) {
        let Some(rest) = line.strip_prefix("# ") else {
            break;
        };
        let Some((key, value)) = rest.split_once(" = ") else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        if let Ok(n) = value.parse::<i64>() {
            stats.insert(key.to_string(), n);
        } else if let Some((inuse, sys)) = value.split_once(" / ") {
            // `# Stack = 1015808 / 1015808` is StackInuse / StackSys.
            if let (Ok(a), Ok(b)) = (inuse.trim().parse::<i64>(), sys.trim().parse::<i64>()) {
                stats.insert(format!("{key}Inuse"), a);
                stats.insert(format!("{key}Sys"), b);
            }
        } else if let Ok(f) = value.parse::<f64>() {
            // GCCPUFraction: kept in parts per million to stay an integer.
            stats.insert(format!("{key}PPM"), (f * 1e6).round() as i64);
        }
    }
    if stats.contains_key("HeapAlloc") {
        Some(stats)
    } else {
        None
    }
}

/// Go's MemStats field name for each key the agent prints.
const AGENT_KEYS: &[(&str, &str)] = &[
    ("alloc", "Alloc"),
    ("total-alloc", "TotalAlloc"),
    ("sys", "Sys"),
    ("lookups", "Lookups"),
    ("mallocs", "Mallocs"),
    ("frees", "Frees"),
    ("heap-alloc", "HeapAlloc"),
    ("heap-sys", "HeapSys"),
    ("heap-idle", "HeapIdle"),
    ("heap-in-use", "HeapInuse"),
    ("heap-released", "HeapReleased"),
    ("heap-objects", "HeapObjects"),
    ("stack-in-use", "StackInuse"),
    ("stack-sys", "StackSys"),
    ("stack-mspan-inuse", "MSpanInuse"),
    ("stack-mspan-sys", "MSpanSys"),
    ("stack-mcache-inuse", "MCacheInuse"),
    ("stack-mcache-sys", "MCacheSys"),
    ("other-sys", "OtherSys"),
    ("gc-sys", "GCSys"),
    ("next-gc: when heap-alloc >=", "NextGC"),
    ("next-gc", "NextGC"),
    ("num-gc", "NumGC"),
    ("num-forced-gc", "NumForcedGC"),
    ("enable-gc", "EnableGC"),
    ("debug-gc", "DebugGC"),
];

/// Reads the agent's memstats reply: `key: value` lines where sizes read
/// `22.89MB (24005552 bytes)` and the number in brackets is the exact one.
pub fn parse_agent(text: &str) -> Option<BTreeMap<String, i64>> {
    let mut stats = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.rsplit_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        let name = AGENT_KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| n.to_string())
            .unwrap_or_else(|| key.to_string());
        let number = if let Some(open) = value.rfind('(') {
            value[open + 1..]
                .trim_end_matches(')')
                .trim()
                .trim_end_matches("bytes")
                .trim()
                .parse::<i64>()
                .ok()
        } else {
            value.parse::<i64>().ok()
        };
        if let Some(n) = number {
            stats.insert(name, n);
        } else if let Ok(f) = value.trim_end_matches('%').parse::<f64>() {
            stats.insert(format!("{name}PPM"), (f * 1e4).round() as i64);
        }
    }
    if stats.contains_key("HeapAlloc") {
        Some(stats)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_heap_block_is_read() {
        let text = "heap profile: 1: 2 [3: 4] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 2048\n# HeapAlloc = 2048\n# HeapSys = 8192\n# Stack = 100 / 200\n# PauseNs = [1 2 3]\n# GCCPUFraction = 0.0125\n# NumGC = 7\n";
        let s = parse_debug_heap(text).unwrap();
        assert_eq!(s["HeapAlloc"], 2048);
        assert_eq!(s["HeapSys"], 8192);
        assert_eq!(s["StackInuse"], 100);
        assert_eq!(s["StackSys"], 200);
        assert_eq!(s["NumGC"], 7);
        assert_eq!(s["GCCPUFractionPPM"], 12500);
        assert!(!s.contains_key("PauseNs"));
    }

    #[test]
    fn a_reply_without_the_block_is_none() {
        assert!(parse_debug_heap("heap profile: 1: 2 [3: 4] @ heap/1048576\n").is_none());
    }
}
