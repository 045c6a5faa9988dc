//! `heapwatch growth` as text: per boot cycle the verdict, then the ranked tables; Envoy's
//! findings when the run holds `envoy` records (alone when it has no profiles to rank).

use std::fmt::Write as _;

use serde::Serialize;

use crate::analyse::envoy::EnvoyReport;
use crate::analyse::growth::{CycleGrowth, GrowthReport, Unpublished};
use crate::model::run_options::{OwnFrom, OwnNamed};
use crate::render::ends::end_words;
use crate::render::memory::{breakdown_words, cgroup_at_limit};
use crate::render::verdict::{across_summary, cycle_verdict, spike_words};
use crate::render::worded::{EnvoyJson, GrowthJson};
use crate::units::format_bytes;

/// Envoy's findings beside the growth analysis.
pub struct EnvoyPart<'a> {
    /// The target as recorded (`envoy:http://…`).
    pub target: &'a str,
    pub report: &'a EnvoyReport,
    /// True when the run has no heap or goroutine profile: Envoy's findings are all there is.
    pub alone: bool,
}

#[derive(Serialize)]
struct GrowthDoc<'a> {
    #[serde(flatten)]
    report: GrowthJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    envoy: Option<EnvoyJson<'a>>,
}

fn rate(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

/// The growth report as JSON, with Envoy's findings under `envoy` when there are any.
pub fn json(report: &GrowthReport, envoy: Option<&EnvoyPart>) -> String {
    let doc = GrowthDoc {
        report: GrowthJson::new(report),
        envoy: envoy.map(|e| EnvoyJson::new(e.report)),
    };
    let mut out = serde_json::to_string_pretty(&doc).expect("growth report is plain data");
    out.push('\n');
    out
}

pub fn text(report: &GrowthReport, rows: usize, envoy: Option<&EnvoyPart>) -> String {
    let mut out = String::new();
    let envoy_text = |e: &EnvoyPart| {
        if e.report.snapshots == 0 {
            format!(
                "envoy {}: no snapshot in the run: Envoy never answered /memory or /stats \
                 (the failed attempts are in the manifest)\n",
                e.target
            )
        } else {
            super::envoy::text(e.target, e.report)
        }
    };
    if let Some(e) = envoy.filter(|e| e.alone) {
        // No heap profile to rank (an Envoy without /heap_dump): the admin figures are the
        // findings, and the boot cycles add only their count.
        out.push_str(&envoy_text(e));
        if report.cycles.len() > 1 {
            let _ = writeln!(
                out,
                "across cycles: {} (boot cycles the collector saw)",
                across_summary(&report.cycles, &report.across)
            );
        }
        return out;
    }
    // The headline first (what killed it and where to look, then the rest as a list), as the
    // report leads with it; each cycle's account follows.
    out.push_str(&crate::render::headline::of_growth(report).text("  "));
    out.push('\n');
    for c in &report.cycles {
        cycle(&mut out, c, rows, report.limit_bytes);
    }
    let _ = writeln!(
        out,
        "across cycles: {}",
        across_summary(&report.cycles, &report.across)
    );
    if let Some(own) = &report.own {
        let _ = writeln!(out, "{}", own_words(own));
    }
    if let Some(e) = envoy {
        out.push('\n');
        out.push_str(&envoy_text(e));
    }
    out
}

/// "own code: go.etcd.io/ (recorded with the run)": the prefixes that named the sites as the
/// user's, and whence.
pub fn own_words(own: &OwnNamed) -> String {
    let from = match own.from {
        OwnFrom::Recorded => "recorded with the run; --own replaces it",
        OwnFrom::Given => "--own",
    };
    format!(
        "own code: {}, the main module and package main ({from})",
        own.prefixes.join(", ")
    )
}

/// "build 2.1.0, go1.26.1, pid 4242": what is known of the cycle's process.
pub fn build(c: &CycleGrowth) -> String {
    // A build no process told and no label gave is not named.
    let mut parts: Vec<String> = (!c.build.is_empty())
        .then(|| format!("build {}", c.build))
        .into_iter()
        .collect();
    if let Some(go) = c.build_info.as_ref().and_then(|b| b.go_version.as_deref()) {
        parts.push(go.to_string());
    }
    if let Some(rev) = c
        .build_info
        .as_ref()
        .and_then(|b| b.vcs_revision.as_deref())
    {
        if c.build_info.as_ref().is_some_and(|b| b.version.is_some()) {
            parts.push(format!("rev {}", rev.chars().take(12).collect::<String>()));
        }
    }
    if let Some(pid) = c.pid {
        parts.push(format!("pid {pid}"));
    }
    if parts.is_empty() {
        return "no build known".into();
    }
    parts.join(", ")
}

/// How the `--oom-hold` held the process for its last capture: at its limit (cgroup v1), or
/// slowed a margin below it (v2).
pub fn hold_words(c: &CycleGrowth, held_ms: i64) -> String {
    match c.oom_held_below_bytes {
        Some(below) => format!(
            "the kernel slowed it {held_ms} ms at {} below its limit for a last capture \
             (cgroup v2 memory.high)",
            format_bytes(below)
        ),
        None => format!("the kernel held it {held_ms} ms at its limit for a last capture"),
    }
}

/// The last capture's heap beyond what the profile published: "at the last capture (#31,
/// 3.1 s): 57.8 MiB in use as of the last GC, and 65.0 MiB allocated since, not yet published
/// (recent_space, frees not yet known; `heapwatch top RUN/profiles/… --sample recent_space`
/// names where)". What was allocated since may be garbage already: it is no part of the heap.
pub fn unpublished_words(u: &Unpublished) -> String {
    let mut s = format!(
        "at the last capture (#{}, {:.1} s): {} in use as of the last GC, and {} allocated \
         since, not yet published (recent_space, frees not yet known",
        u.seq,
        u.at_s,
        format_bytes(u.inuse_bytes),
        format_bytes(u.recent_bytes)
    );
    if let Some(file) = &u.file {
        s.push_str(&format!(
            "; `heapwatch top RUN/{file} --sample recent_space` names where"
        ));
    }
    s.push(')');
    s
}

fn cycle(out: &mut String, c: &CycleGrowth, rows: usize, limit_bytes: Option<u64>) {
    let _ = writeln!(
        out,
        "boot cycle {} ({}): {} capture attempts over {:.1} s: {} good ({} heap profiles stored, {} duplicate heap captures, {} goroutine profiles and runtime figures), {} failed",
        c.index,
        build(c),
        c.captures + c.errors,
        c.span_s,
        c.captures,
        c.stored,
        c.duplicates,
        c.captures.saturating_sub(c.stored + c.duplicates),
        c.errors
    );
    let _ = writeln!(out, "  verdict: {}", cycle_verdict(c, limit_bytes));
    let _ = match c.oom_held_ms {
        Some(held) => writeln!(
            out,
            "  end: {}, after {}",
            end_words(&c.end),
            hold_words(c, held)
        ),
        None => writeln!(out, "  end: {}", end_words(&c.end)),
    };
    if let Some(u) = &c.unpublished {
        let _ = writeln!(out, "  {}", unpublished_words(u));
    }
    if let (Some(a), Some(b)) = (c.heap_first, c.heap_last) {
        let mut line = format!(
            "  heap in use {} → {} (first → last capture)",
            format_bytes(a),
            format_bytes(b)
        );
        if let Some(m) = c.memory_bytes_per_sec {
            let what = crate::render::memory::outside_figure(c.peaks.cgroup.is_some());
            line.push_str(&format!("; {what} {}", rate(m)));
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(r) = &c.reading {
        // A line through two points fits them perfectly: its R² says nothing.
        let fit = if r.points > 2 {
            format!("R² {:.2}, {} points", r.fit_r2, r.points)
        } else {
            format!("{} points: a chord, no fit to judge", r.points)
        };
        // A heap profile is the state as of a GC: when that GC ran is read or estimated.
        let placed = if c.gc_clock {
            "placed by the runtime's GC count"
        } else {
            "GC moments estimated, the source gives no GC count"
        };
        let fit = format!("{fit}; {placed}");
        let _ = writeln!(
            out,
            "  growth episode: {} from {:.1} to {:.1} s ({fit}), {} → {}, {}",
            rate(r.bytes_per_sec),
            r.onset_s,
            r.end_s,
            format_bytes(r.from_bytes),
            format_bytes(r.to_bytes),
            if r.ongoing {
                "still growing at the end".to_string()
            } else {
                format!(
                    "then held or fell for {:.1} s (not growing at the end)",
                    r.held_s.unwrap_or(0.0)
                )
            }
        );
    }
    if !c.rise_sites().is_empty() {
        let from = c.reading.as_ref().and_then(|r| r.from_seq.zip(r.to_seq));
        let _ = writeln!(
            out,
            "  {} (in-use bytes at the onset and the end{}):",
            if c.heap_sustained {
                "growing sites, holding the rise"
            } else {
                "sites holding the rise, which did not go on"
            },
            from.map_or(String::new(), |(a, b)| format!(", capture #{a} and #{b}"))
        );
        let _ = writeln!(
            out,
            "  {:>6} {:>12} {:>12} {:>12}  site",
            "share", "rate", "at onset", "at end"
        );
        for s in c.rise_sites().iter().take(rows) {
            let _ = writeln!(
                out,
                "  {:>5.0}% {:>12} {:>12} {:>12}  {}",
                s.share * 100.0,
                rate(s.bytes_per_sec),
                format_bytes(s.before),
                format_bytes(s.after),
                s.name
            );
        }
    }
    if let Some(peaks) = crate::render::memory::peaks_words(&c.peaks) {
        let _ = writeln!(out, "  peaks: {peaks}");
    }
    if let Some(b) = &c.breakdown {
        let _ = writeln!(out, "  where the memory went: {}", breakdown_words(b));
    }
    if let Some(a) = &c.at_limit {
        let _ = writeln!(out, "  {}", cgroup_at_limit(a));
    }
    if let Some(s) = &c.stuck {
        let _ = writeln!(out, "  {}", crate::render::stuck::stuck_words(s));
    }
    // The reading is the rise into the peak; a spike is shown on its own only without one, or
    // when it fell back (its fall is no part of the reading).
    if let Some(e) = c
        .episode
        .as_ref()
        .filter(|e| c.reading.is_none() || e.transient)
    {
        let kind = if e.transient {
            "transient episode (rise, then fall)"
        } else {
            "rise into the peak (did not fall back)"
        };
        let _ = writeln!(out, "  {kind}: {}", spike_words(e));
        if !e.sites.is_empty() {
            let _ = writeln!(
                out,
                "  {:>12} {:>12} {:>6}  site (capture #{} against #{}, before the rise)",
                "before",
                "at the peak",
                "share",
                e.to_seq.unwrap_or_default(),
                e.from_seq.unwrap_or_default()
            );
            for s in e.sites.iter().take(rows) {
                let _ = writeln!(
                    out,
                    "  {:>12} {:>12} {:>5.0}%  {}",
                    format_bytes(s.before),
                    format_bytes(s.at_peak),
                    s.share * 100.0,
                    s.name
                );
            }
        }
    }
    for e in c.other_episodes.iter().take(rows) {
        let _ = writeln!(out, "  another transient episode: {}", spike_words(e));
    }
    if !c.alloc_storms.is_empty() {
        let _ = writeln!(out, "  allocation storms (cumulative alloc_space):");
        for s in c.alloc_storms.iter().take(rows) {
            let windows: Vec<String> = s
                .windows
                .iter()
                .map(|w| {
                    format!(
                        "{:.1}–{:.1}s at {}",
                        w.start_s,
                        w.end_s,
                        rate(w.bytes_per_sec)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  {:>12} typical {:>12}  {}{}  [{}]",
                rate(s.peak_bytes_per_sec),
                rate(s.typical_bytes_per_sec),
                s.name,
                if s.inuse_flat { " (in-use flat)" } else { "" },
                windows.join(", ")
            );
        }
    }
    if !c.goroutine_growth.is_empty() {
        let _ = writeln!(out, "  goroutine growth:");
        for g in c.goroutine_growth.iter().take(rows) {
            let _ = writeln!(
                out,
                "  {:>10.1}/s {:>6} → {:<6} {}",
                g.per_sec, g.first, g.last, g.name
            );
        }
    }
    if let Some(p) = &c.profiling {
        let _ = writeln!(
            out,
            "  profiling cost in the target: {} allocated ({:.1} % of all allocation), {} in use",
            rate(p.alloc_bytes_per_sec),
            p.alloc_share * 100.0,
            format_bytes(p.inuse_bytes)
        );
    }
    if let Some(m) = &c.memstats {
        let _ = writeln!(
            out,
            "  memstats (read at {:.1} s): {}",
            m.at_s,
            crate::render::memory::memstats_words(m)
        );
    }
}
