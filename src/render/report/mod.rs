//! `heapwatch report`: one run's findings as `index.html` (self-contained, for people),
//! `report.md` (short, for a CI job summary) and `summary.json` (for tools). Pure: the caller
//! reads the run, analyses it and draws the flamegraphs; this module only lays them out.
//! Every string that came from a profile or a run is escaped on the way out.

pub mod chart;
pub mod html;
pub mod markdown;
pub mod summary;

use std::collections::BTreeMap;

use crate::analyse::compare::Comparison;
use crate::analyse::growth::GrowthReport;
use crate::analyse::rules::{HeapRatio, Outcome};
use crate::source::procmem::MemorySample;
use crate::store::{CaptureRecord, RecordKind, RunInfo};
use crate::units::format_bytes;

/// The run a report is about, as read from its directory and analysed.
pub struct RunView<'a> {
    /// The run directory's own name (not its path, so reports do not depend on where they run).
    pub name: String,
    pub info: Option<&'a RunInfo>,
    pub records: &'a [CaptureRecord],
    pub memory: &'a [MemorySample],
    pub growth: &'a GrowthReport,
    /// Profiles that could not be read, and similar things worth knowing.
    pub notes: Vec<String>,
}

impl RunView<'_> {
    /// The build label, else the directory name.
    pub fn label(&self) -> &str {
        self.info
            .and_then(|i| i.label.as_deref())
            .unwrap_or(&self.name)
    }
}

/// The build this run is compared against (`--baseline`).
pub struct BaselineView<'a> {
    pub name: String,
    pub info: Option<&'a RunInfo>,
    pub comparison: &'a Comparison,
    pub heap_ratio: Option<&'a HeapRatio>,
}

impl BaselineView<'_> {
    pub fn label(&self) -> &str {
        self.info
            .and_then(|i| i.label.as_deref())
            .unwrap_or(&self.name)
    }
}

/// One flamegraph of the report: its file under `flamegraphs/` and its SVG text.
pub struct Flamegraph {
    /// Relative to the report folder: `flamegraphs/cycle-1-growth.svg`.
    pub file: String,
    /// The boot cycle it belongs to; `None` for the comparison with the baseline.
    pub cycle: Option<u32>,
    pub caption: String,
    pub svg: String,
}

/// Everything a report shows.
pub struct ReportModel<'a> {
    pub run: RunView<'a>,
    pub baseline: Option<BaselineView<'a>>,
    pub rules: &'a [Outcome],
    pub flamegraphs: &'a [Flamegraph],
    /// Largest in-use heap captured per boot cycle.
    pub peak_heap: &'a [(u32, i64)],
}

impl ReportModel<'_> {
    /// The one sentence at the top: what happened, and (with a baseline) what regressed.
    pub fn headline(&self) -> String {
        let g = self.run.growth;
        let mut parts = Vec::new();
        if let Some(b) = &self.baseline {
            parts.push(b.comparison.verdict.clone());
        }
        match g.cycles.as_slice() {
            [] => parts.push("no boot cycle with a good capture".into()),
            [one] => parts.push(one.verdict.clone()),
            _ => parts.push(g.across.summary.clone()),
        }
        parts.join(". ")
    }

    pub fn failed(&self) -> bool {
        self.rules
            .iter()
            .any(|o| o.status == crate::analyse::rules::Status::Fail)
    }
}

/// Capture attempts of a run, counted.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Tally {
    pub attempts: usize,
    pub heap: usize,
    pub goroutine: usize,
    pub stored: usize,
    pub duplicates: usize,
    pub errors: usize,
    /// Failed attempts by class (refused, timeout, reset, …).
    pub errors_by_kind: BTreeMap<String, usize>,
    pub burst: usize,
}

pub fn tally(records: &[CaptureRecord], usual_interval_ms: Option<u64>) -> Tally {
    let mut t = Tally::default();
    let usual = usual_interval_ms.or_else(|| records.iter().filter_map(|r| r.interval_ms).max());
    for r in records.iter().filter(|r| r.kind != RecordKind::Delete) {
        t.attempts += 1;
        match r.kind {
            RecordKind::Heap => t.heap += 1,
            RecordKind::Goroutine => t.goroutine += 1,
            _ => {}
        }
        if !r.is_ok() {
            t.errors += 1;
            let kind = r.error_kind.clone().unwrap_or_else(|| "other".into());
            *t.errors_by_kind.entry(kind).or_default() += 1;
            continue;
        }
        if r.dup_of.is_some() {
            t.duplicates += 1;
        } else if r.file.is_some() {
            t.stored += 1;
        }
        if let (Some(i), Some(u)) = (r.interval_ms, usual) {
            if i < u && r.kind == RecordKind::Heap {
                t.burst += 1;
            }
        }
    }
    t
}

/// The usual (non-burst) interval of a run, from `run.json`.
pub fn usual_interval_ms(info: Option<&RunInfo>) -> Option<u64> {
    info.and_then(|i| i.options.get("interval_ms"))
        .and_then(|v| v.as_u64())
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub fn rate(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

pub fn seconds(s: f64) -> String {
    format!("{s:.1} s")
}

/// Unix milliseconds as `2026-12-02 12:27:18 UTC` (from the run, so reports stay reproducible).
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `run.json` options people care about, as (name, value) pairs in a stable order.
pub fn collection_facts(info: &RunInfo) -> Vec<(&'static str, String)> {
    let o = &info.options;
    let ms = |k: &str| o.get(k).and_then(|v| v.as_u64());
    let mut facts = vec![
        ("target", info.target.clone()),
        ("source", info.source.clone()),
        ("started", utc(info.started_ms)),
        ("collected by", info.tool.clone()),
    ];
    if let Some(l) = &info.label {
        facts.push(("build label", l.clone()));
    }
    if !info.resumed_ms.is_empty() {
        let when: Vec<String> = info.resumed_ms.iter().map(|&t| utc(t)).collect();
        facts.push(("resumed", when.join(", ")));
    }
    if let Some(i) = ms("interval_ms") {
        let mut s = format!("{i} ms");
        if let (Some(b), Some(limit)) = (ms("burst_interval_ms"), info.limit_bytes) {
            let at = o.get("burst_at").and_then(|v| v.as_f64()).unwrap_or(0.6);
            s.push_str(&format!(
                ", {b} ms past {:.0} % of the limit ({})",
                at * 100.0,
                format_bytes((limit as f64 * at) as i64)
            ));
        }
        facts.push(("interval", s));
    }
    if let Some(t) = ms("timeout_ms") {
        facts.push(("timeout", format!("{t} ms")));
    }
    if let Some(p) = o.get("profiles").and_then(|v| v.as_array()) {
        let names: Vec<&str> = p.iter().filter_map(|v| v.as_str()).collect();
        facts.push(("profiles", names.join(", ")));
    }
    if let Some(l) = info.limit_bytes {
        facts.push(("memory limit", format_bytes(l as i64)));
    }
    if let Some(c) = o.get("cgroup").and_then(|v| v.as_str()) {
        facts.push(("cgroup", c.to_string()));
    }
    if let Some(p) = o.get("pid").and_then(|v| v.as_u64()) {
        facts.push(("pid", p.to_string()));
    }
    if let Some(m) = o.get("memory_source").and_then(|v| v.as_str()) {
        facts.push(("memory samples", m.to_string()));
    }
    if o.get("gc").and_then(|v| v.as_bool()) == Some(true) {
        facts.push(("forced GC", "yes (?gc=1)".into()));
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }

    #[test]
    fn unix_ms_reads_as_a_utc_date() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_214_438_879), "2026-12-02 12:27:18 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
    }
}
