//! Envoy findings as text (also the report section) and JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analyse::envoy::EnvoyReport;
use crate::analyse::triage::format_span;
use crate::model::envoy::HeapDumpState;
use crate::render::envoy_words::{
    config_meaning, heap_explanation, verdict_words, workers_meaning,
};
use crate::render::worded::EnvoyJson;
use crate::units::format_bytes;

#[derive(Serialize)]
struct EnvoyDoc<'a> {
    schema: u32,
    target: &'a str,
    #[serde(flatten)]
    report: EnvoyJson<'a>,
}

pub fn json(target: &str, report: &EnvoyReport) -> String {
    let doc = EnvoyDoc {
        schema: crate::model::SCHEMA,
        target,
        report: EnvoyJson::new(report),
    };
    let mut out = serde_json::to_string_pretty(&doc).expect("envoy report is plain data");
    out.push('\n');
    out
}

fn bytes(b: u64) -> String {
    format_bytes(i64::try_from(b).unwrap_or(i64::MAX))
}

fn line(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "  {label:<12} {text}");
}

pub fn text(target: &str, r: &EnvoyReport) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "envoy {target}: {} snapshot{} over {}",
        r.snapshots,
        if r.snapshots == 1 { "" } else { "s" },
        format_span(r.span_s)
    );
    if r.restarts > 0 {
        let _ = write!(
            out,
            " ({} restart{} seen; figures from the last boot cycle)",
            r.restarts,
            if r.restarts == 1 { "" } else { "s" }
        );
    }
    out.push('\n');
    if let Some(h) = &r.heap {
        let mut s = format!(
            "allocated {} of heap_size {} (naive {:.1} %)",
            bytes(h.allocated),
            bytes(h.heap_size),
            h.naive_share * 100.0
        );
        if let Some(live) = h.live_share {
            s.push_str(&format!(", live share {:.1} %", live * 100.0));
        }
        s.push_str(&format!(" [{}]", h.source));
        line(&mut out, "heap", &s);
        line(&mut out, "", &heap_explanation(h));
        if let Some(held) = h.held_not_returned {
            line(
                &mut out,
                "held",
                &format!(
                    "{} not returned to the OS (pageheap_free {} + thread caches {})",
                    bytes(held),
                    bytes(h.pageheap_free.unwrap_or(0)),
                    bytes(h.total_thread_cache.unwrap_or(0))
                ),
            );
        }
        if let Some(p) = h.physical {
            line(&mut out, "physical", &bytes(p));
        }
    }
    if let Some(g) = &r.growth {
        let mut s = format!(
            "{} {} → {}, {}/min (R² {:.2})",
            g.series,
            bytes(g.first),
            bytes(g.last),
            format_bytes((g.bytes_per_sec * 60.0) as i64),
            g.fit_r2
        );
        if let Some(a) = g.allocated_bytes_per_sec {
            s.push_str(&format!(
                "; allocated {}/min",
                format_bytes((a * 60.0) as i64)
            ));
        }
        match (g.limit, g.limit_in_s) {
            (Some(l), Some(t)) => {
                s.push_str(&format!("; limit {} in {}", bytes(l), format_span(t)))
            }
            (Some(l), None) => s.push_str(&format!("; limit {} not in sight", bytes(l))),
            _ => {}
        }
        line(&mut out, "growth", &s);
    }
    if let Some(w) = &r.workers {
        line(&mut out, "workers", &workers_meaning(w));
    }
    if let Some(c) = &r.config {
        line(&mut out, "config", &config_meaning(c));
    }
    if let Some(c) = r.connections {
        line(&mut out, "connections", &c.to_string());
    }
    let dump = match &r.heap_dump {
        HeapDumpState::NotAsked => "not asked".to_string(),
        HeapDumpState::Available => {
            "available: the heap profiles name the C++ allocation sites".to_string()
        }
        HeapDumpState::NotAvailable(why) => format!("not available ({why})"),
    };
    line(&mut out, "heap dump", &dump);
    line(
        &mut out,
        "verdict",
        &format!("{}: {}", r.verdict.code, verdict_words(r)),
    );
    out
}

/// The findings as a report section: a heading and the text in a fenced block.
pub fn markdown(target: &str, report: &EnvoyReport) -> String {
    let body = text(target, report);
    let fence = if body.contains("```") { "~~~~" } else { "```" };
    format!("## Envoy\n\n{fence}text\n{body}{fence}\n")
}
