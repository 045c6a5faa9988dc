//! Go runtime figures as targets print them: the `# runtime.MemStats` block at the end of
//! `/debug/pprof/heap?debug=1` (`# HeapAlloc = 123`), the agent's memstats reply
//! (`heap-alloc: 22.89MB (24005552 bytes)`) and its stats reply (`goroutines: 25`). Each becomes
//! a map from a field name (Go's, for MemStats) to a number.

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

/// Go's MemStats field name for each key the agent prints (OpenZiti `agent` and gops alike).
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
    ("next-gc", "NextGC"),
    ("gc-pause-total", "PauseTotalNs"),
    ("gc-pause", "LastPauseNs"),
    ("num-gc", "NumGC"),
    ("num-forced-gc", "NumForcedGC"),
    ("enable-gc", "EnableGC"),
    ("debug-gc", "DebugGC"),
];

/// Reads the agent's memstats reply (op 0x03): `key: value` lines where sizes read
/// `22.89MB (24005552 bytes)` (the number in brackets is the exact one) or, under 1 KiB,
/// `512 bytes`; `next-gc: when heap-alloc >= 53.98MB (56598770 bytes)`; `gc-pause-total` a Go
/// duration (`551.844µs`), kept in nanoseconds; booleans as 1 or 0. `last-gc` (a date) is
/// skipped. `None` without a `heap-alloc` line (an error text, or a reply cut short).
pub fn parse_agent(text: &str) -> Option<BTreeMap<String, i64>> {
    let mut stats = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Some(&(_, name)) = AGENT_KEYS.iter().find(|(k, _)| *k == key.trim()) else {
            continue;
        };
        if let Some(n) = agent_value(value.trim()) {
            stats.insert(name.to_string(), n);
        }
    }
    stats.contains_key("HeapAlloc").then_some(stats)
}

fn agent_value(value: &str) -> Option<i64> {
    if let (Some(open), true) = (value.rfind('('), value.ends_with(" bytes)")) {
        return value[open + 1..value.len() - " bytes)".len()]
            .trim()
            .parse()
            .ok();
    }
    if let Some(n) = value.strip_suffix(" bytes") {
        return n.trim().parse().ok();
    }
    match value {
        "true" => return Some(1),
        "false" => return Some(0),
        _ => {}
    }
    value.parse().ok().or_else(|| go_duration_ns(value))
}

/// A Go `time.Duration` as `String()` prints it (`1h2m3.5s`, `551.844µs`, `0s`), in ns.
pub fn go_duration_ns(text: &str) -> Option<i64> {
    const UNITS: &[(&str, f64)] = &[
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("μs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
        ("m", 60e9),
        ("h", 3600e9),
    ];
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0.0;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        // Longest unit first: "ms" before "m", "ns" before "s".
        let (unit, scale) = UNITS
            .iter()
            .filter(|(u, _)| rest.starts_with(u))
            .max_by_key(|(u, _)| u.len())?;
        total += number * scale;
        rest = &rest[unit.len()..];
        parts += 1;
    }
    (parts > 0).then(|| {
        let ns = total.round() as i64;
        if negative { -ns } else { ns }
    })
}

/// Writes MemStats figures the way the agent does (the replay's op 0x03): Go's field names
/// back to the agent's keys, sizes as `formatBytes` prints them.
pub fn format_agent(stats: &BTreeMap<String, i64>) -> String {
    const SIZES: &[&str] = &[
        "Alloc",
        "TotalAlloc",
        "Sys",
        "HeapAlloc",
        "HeapSys",
        "HeapIdle",
        "HeapInuse",
        "HeapReleased",
        "StackInuse",
        "StackSys",
        "MSpanInuse",
        "MSpanSys",
        "MCacheInuse",
        "MCacheSys",
        "OtherSys",
        "GCSys",
    ];
    let mut out = String::new();
    for &(key, name) in AGENT_KEYS {
        let Some(&v) = stats.get(name) else { continue };
        let value = match name {
            "NextGC" => format!("when heap-alloc >= {}", format_size(v)),
            "EnableGC" | "DebugGC" => (v != 0).to_string(),
            "PauseTotalNs" => format!("{v}ns"),
            _ if SIZES.contains(&name) => format_size(v),
            _ => v.to_string(),
        };
        out.push_str(&format!("{key}: {value}\n"));
    }
    out
}

/// The agent's `formatBytes`: `512 bytes`, `22.89MB (24005552 bytes)`.
fn format_size(v: i64) -> String {
    const UNITS: &[&str] = &[" bytes", "KB", "MB", "GB", "TB", "PB"];
    let mut i = 0;
    let mut target: u128 = 1024;
    while i + 1 < UNITS.len() && (v.max(0) as u128) >= target {
        i += 1;
        target <<= 10;
    }
    if i == 0 {
        return format!("{v} bytes");
    }
    let scaled = v as f64 / ((target >> 10) as f64);
    format!("{scaled:.2}{} ({v} bytes)", UNITS[i])
}

/// Writes runtime counts the way the agent does (the replay's op 0x07).
pub fn format_agent_stats(stats: &BTreeMap<String, i64>) -> String {
    let mut out = String::new();
    for (name, key) in [
        ("goroutines", "goroutines"),
        ("threads", "OS threads"),
        ("gomaxprocs", "GOMAXPROCS"),
        ("num_cpu", "num CPU"),
    ] {
        if let Some(v) = stats.get(name) {
            out.push_str(&format!("{key}: {v}\n"));
        }
    }
    out
}

/// Reads the agent's stats reply (op 0x07): `goroutines: 25`, `OS threads: 7`,
/// `GOMAXPROCS: 2`, `num CPU: 2`, as `goroutines`, `threads`, `gomaxprocs` and `num_cpu`.
/// `None` without a goroutine count.
pub fn parse_agent_stats(text: &str) -> Option<BTreeMap<String, i64>> {
    let mut stats = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let name = match key.trim() {
            "goroutines" => "goroutines",
            "OS threads" => "threads",
            "GOMAXPROCS" => "gomaxprocs",
            "num CPU" => "num_cpu",
            _ => continue,
        };
        if let Ok(n) = value.trim().parse::<i64>() {
            stats.insert(name.to_string(), n);
        }
    }
    stats.contains_key("goroutines").then_some(stats)
}

/// The memory a MemStats reading says the process holds from the OS: `Sys` less what the heap
/// gave back (`HeapReleased`), the closest figure to RSS; `HeapAlloc` when `Sys` is missing.
pub fn held_bytes(stats: &BTreeMap<String, i64>) -> Option<i64> {
    match (stats.get("Sys"), stats.get("HeapReleased")) {
        (Some(&sys), released) => Some(sys - released.copied().unwrap_or(0)),
        (None, _) => stats.get("HeapAlloc").copied(),
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

    const REAL_MEMSTATS: &str = include_str!("../../testdata/agent/memstats.txt");
    const REAL_STATS: &str = include_str!("../../testdata/agent/stats.txt");

    #[test]
    fn a_real_agent_memstats_reply_is_read_exactly() {
        let s = parse_agent(REAL_MEMSTATS).unwrap();
        // Every value of the recorded reply (testdata/agent/record.sh), as printed in brackets.
        assert_eq!(s["Alloc"], 50496024);
        assert_eq!(s["TotalAlloc"], 50590440);
        assert_eq!(s["Sys"], 58894616);
        assert_eq!(s["Lookups"], 0);
        assert_eq!(s["Mallocs"], 1149);
        assert_eq!(s["Frees"], 369);
        assert_eq!(s["HeapAlloc"], 50496024);
        assert_eq!(s["HeapSys"], 54034432);
        assert_eq!(s["HeapIdle"], 3121152);
        assert_eq!(s["HeapInuse"], 50913280);
        assert_eq!(s["HeapReleased"], 2793472);
        assert_eq!(s["HeapObjects"], 780);
        assert_eq!(s["StackInuse"], 491520);
        assert_eq!(s["StackSys"], 491520);
        assert_eq!(s["MSpanInuse"], 54720);
        assert_eq!(s["MSpanSys"], 65280);
        assert_eq!(s["MCacheInuse"], 4592);
        assert_eq!(s["MCacheSys"], 16072);
        assert_eq!(s["OtherSys"], 548248);
        assert_eq!(s["GCSys"], 2295552);
        assert_eq!(s["NextGC"], 56598770);
        assert_eq!(s["PauseTotalNs"], 551844);
        assert_eq!(s["LastPauseNs"], 181091);
        assert_eq!(s["NumGC"], 4);
        assert_eq!(s["EnableGC"], 1);
        assert_eq!(s["DebugGC"], 0);
        assert_eq!(
            s.len(),
            26,
            "last-gc (a date) is the only line skipped: {s:?}"
        );
        assert_eq!(held_bytes(&s), Some(58894616 - 2793472));
    }

    #[test]
    fn small_sizes_durations_and_cut_replies() {
        let s =
            parse_agent("heap-alloc: 512 bytes\nheap-released: 0 bytes\ngc-pause-total: 1m2.5s\n")
                .unwrap();
        assert_eq!(s["HeapAlloc"], 512);
        assert_eq!(s["HeapReleased"], 0);
        assert_eq!(s["PauseTotalNs"], 62_500_000_000);
        assert_eq!(go_duration_ns("0s"), Some(0));
        assert_eq!(go_duration_ns("1.5ms"), Some(1_500_000));
        assert_eq!(go_duration_ns("250ns"), Some(250));
        assert_eq!(go_duration_ns("2h"), Some(7_200_000_000_000));
        assert_eq!(go_duration_ns("soon"), None);
        // A reply cut before heap-alloc, and an error text, are not MemStats.
        assert!(parse_agent(&REAL_MEMSTATS[..120]).is_none());
        assert!(parse_agent("unable to write: broken pipe").is_none());
    }

    #[test]
    fn a_real_agent_stats_reply_is_read() {
        let s = parse_agent_stats(REAL_STATS).unwrap();
        assert_eq!(s["goroutines"], 25);
        assert_eq!(s["threads"], 7);
        assert_eq!(s["gomaxprocs"], 2);
        assert_eq!(s["num_cpu"], 2);
        assert!(parse_agent_stats(REAL_MEMSTATS).is_none());
    }

    #[test]
    fn the_replay_writes_what_the_agent_writes() {
        let s = parse_agent(REAL_MEMSTATS).unwrap();
        let text = format_agent(&s);
        // Every line is a line of the recorded reply, but the pause total's unit.
        for line in text.lines().filter(|l| !l.starts_with("gc-pause-total")) {
            assert!(REAL_MEMSTATS.lines().any(|r| r == line), "{line}");
        }
        assert_eq!(parse_agent(&text).unwrap(), s);
        let stats = parse_agent_stats(REAL_STATS).unwrap();
        assert_eq!(format_agent_stats(&stats), REAL_STATS);
        assert_eq!(format_size(1023), "1023 bytes");
        assert_eq!(format_size(1024), "1.00KB (1024 bytes)");
    }
}
