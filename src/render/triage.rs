//! `heapwatch triage` as text (the field checklist, one line per question, in the order an
//! SRE asks them, then a verdict per container) and as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analyse::triage::{ContainerTriage, PodTriage, TriageReport, format_span};
use crate::render::triage_words::container_words;
use crate::render::worded::TriageJson;
use crate::units::format_bytes;

#[derive(Serialize)]
struct TriageDoc<'a> {
    schema: u32,
    file: &'a str,
    #[serde(flatten)]
    report: TriageJson<'a>,
}

pub fn json(file: &str, report: &TriageReport) -> String {
    let doc = TriageDoc {
        schema: crate::model::SCHEMA,
        file,
        report: TriageJson::new(report),
    };
    let mut out = serde_json::to_string_pretty(&doc).expect("triage report is plain data");
    out.push('\n');
    out
}

pub fn text(file: &str, report: &TriageReport) -> String {
    let mut out = String::new();
    let _ = write!(out, "triage of {file} as of {}", report.as_of);
    match (&report.events_from, &report.events_to) {
        (Some(a), Some(b)) => {
            let _ = write!(out, "; events from {a} to {b}");
        }
        _ if report.events_given => out.push_str("; the events file holds no events"),
        _ => {}
    }
    out.push('\n');
    for pod in &report.pods {
        out.push('\n');
        pod_text(&mut out, pod, report.events_given);
    }
    out
}

/// The same checklist as a report section: a heading and the text in a fenced block, so no
/// name from the cluster can turn into markup.
pub fn markdown(file: &str, report: &TriageReport) -> String {
    let body = text(file, report);
    let fence = if body.contains("```") { "~~~~" } else { "```" };
    format!("## Kubernetes triage\n\n{fence}text\n{body}{fence}\n")
}

fn pod_text(out: &mut String, pod: &PodTriage, events_given: bool) {
    let name = match &pod.namespace {
        Some(ns) => format!("{ns}/{}", pod.name),
        None => pod.name.clone(),
    };
    let _ = writeln!(out, "pod {name}");
    let mut facts = Vec::new();
    if let Some(o) = &pod.owner {
        facts.push(format!("{} {}", o.kind, o.name));
    }
    if let Some(n) = &pod.node {
        facts.push(format!("node {n}"));
    }
    facts.push(format!(
        "QoS {}{}",
        pod.qos_class,
        if pod.qos_source == "derived" {
            " (derived from the resources)"
        } else {
            ""
        }
    ));
    if let Some(a) = pod.age_s {
        facts.push(format!("age {}", format_span(a)));
    }
    if let Some(p) = &pod.phase {
        facts.push(match &pod.reason {
            Some(r) => format!("{p} ({r})"),
            None => p.clone(),
        });
    }
    let _ = writeln!(out, "  {}", facts.join(", "));
    for c in &pod.containers {
        container_text(out, c, &pod.qos_class, events_given);
    }
}

fn line(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "    {label:<12} {text}");
}

fn container_text(out: &mut String, c: &ContainerTriage, qos_class: &str, events_given: bool) {
    let words = container_words(c, qos_class);
    let mut head = format!(
        "  container {}: {} restart{}",
        c.name,
        c.restarts,
        if c.restarts == 1 { "" } else { "s" }
    );
    if let Some(r) = c.restarts_per_day {
        head.push_str(&format!(" ({r:.1} a day)"));
    }
    head.push_str(&format!(", {}", c.state));
    if let Some(t) = c.running_for_s {
        head.push_str(&format!(" for {}", format_span(t)));
    }
    if !c.ready {
        head.push_str(", not ready");
    }
    let _ = writeln!(out, "{head}");
    if let Some(r) = &words.replicas {
        line(out, "replicas", r);
    }
    match &words.probes {
        Some(p) => line(out, "probes", p),
        None if !events_given && c.restarts > 0 => line(
            out,
            "probes",
            "no events given (--events FILE from `kubectl get events -o json`): liveness kills \
             cannot be ruled out",
        ),
        None => {}
    }
    match &c.termination {
        Some(t) => {
            let mut s = format!(
                "{} {}",
                t.exit_code,
                t.reason.as_deref().unwrap_or("(no reason)")
            );
            if let Some(at) = &t.finished_at {
                s.push_str(&format!(" at {at}"));
            }
            if let Some(l) = t.lived_s {
                s.push_str(&format!(" after a run of {}", format_span(l)));
            }
            s.push_str(&format!(
                ": {}",
                words.termination.as_deref().unwrap_or_default()
            ));
            line(out, "last death", &s);
        }
        None if c.restarts > 0 => line(out, "last death", "not recorded in the pod status"),
        None => {}
    }
    line(out, "memory", &words.memory);
    if let Some(m) = &words.cpu {
        line(out, "workers", m);
    } else if let Some(l) = c.cpu.limit_cores {
        line(out, "cpu", &format!("limit {l} CPU"));
    }
    if let Some(u) = c.memory.usage_bytes {
        if c.memory.usage.is_none() {
            line(out, "usage", &format_bytes(u as i64));
        }
    }
    line(
        out,
        "verdict",
        &format!("{}: {}", c.verdict.code, words.verdict),
    );
}
