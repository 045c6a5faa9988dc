//! The report of a cluster run: `index.html`, `report.md` and `summary.json` at the top of the
//! report folder, with one section per node (its verdict and rules, linking to the node's own
//! full report under `nodes/NAME/`), the shared timeline of every node, and the table of
//! marked log lines. Pure, like the rest of `report`.

use std::fmt::Write as _;

use serde::Serialize;

use super::cluster_chart::{self, SharedTimeline};
use super::html::STYLE;
use super::markdown::{code, text};
use super::markup::Markup;
use super::{ReportModel, seconds};
use crate::analyse::rules::Status;
use crate::render::headline::Headline;
use crate::store::cluster::{Event, TimeFrom};
use crate::{html, htmlln};

/// One node of the report: its name, its directory in the run, and its own report's model.
pub struct NodeReport<'a> {
    pub name: &'a str,
    /// The node's run directory, relative to the cluster run (`targets/ctrl2`).
    pub dir: &'a str,
    /// The node's own report folder, relative to the cluster report (`nodes/ctrl2`).
    pub folder: String,
    pub model: &'a ReportModel<'a>,
}

/// A node the report leaves out, and why: its own run could not be analysed (a Go container
/// with no heap profiling linked in has no heap capture to analyse). The others are reported.
pub struct LeftOut {
    pub name: String,
    pub why: String,
}

/// Everything the cluster report shows.
pub struct ClusterModel<'a> {
    /// The run directory's own name.
    pub name: String,
    pub label: Option<&'a str>,
    pub started_ms: i64,
    pub nodes: Vec<NodeReport<'a>>,
    /// Nodes not reported, each with its reason.
    pub left_out: &'a [LeftOut],
    /// Marked log lines, oldest first.
    pub events: &'a [Event],
}

impl ClusterModel<'_> {
    pub fn title(&self) -> &str {
        self.label.unwrap_or(&self.name)
    }

    /// The nodes counted, then each node's lead (its own report has the rest).
    pub fn headline(&self) -> Headline {
        let points = self
            .nodes
            .iter()
            .map(|n| format!("{}: {}", n.name, n.model.headline().lead))
            .chain(
                self.left_out
                    .iter()
                    .map(|l| format!("{}: not reported: {}", l.name, l.why)),
            )
            .collect();
        let left_out = match self.left_out.len() {
            0 => String::new(),
            n => format!(", {n} not reported"),
        };
        Headline {
            lead: format!("{} nodes{left_out}", self.nodes.len()),
            points,
        }
    }

    /// True when a rule tripped on any node.
    pub fn failed(&self) -> bool {
        self.nodes.iter().any(|n| n.model.failed())
    }

    pub fn timeline(&self) -> SharedTimeline {
        let runs: Vec<(&str, &super::RunView)> =
            self.nodes.iter().map(|n| (n.name, &n.model.run)).collect();
        SharedTimeline::of(self.started_ms, &runs, self.events)
    }
}

fn time_from(e: &Event) -> &'static str {
    match e.time_from {
        TimeFrom::Line => "line",
        TimeFrom::Read => "read",
    }
}

/// Seconds of an event on the shared timeline.
fn event_s(t: &SharedTimeline, e: &Event) -> f64 {
    (e.t_ms - t.start_ms) as f64 / 1000.0
}

fn status_word(s: Status) -> (&'static str, &'static str) {
    match s {
        Status::Fail => ("fail", "fail"),
        Status::Pass => ("pass", "pass"),
        Status::Unknown => ("unknown", "not checked"),
    }
}

pub fn html(m: &ClusterModel) -> String {
    let title = m.title();
    let timeline = m.timeline();
    let mut out = String::new();
    html!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>heapwatch cluster report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        title
    );
    htmlln!(
        out,
        "<header>\n<h1>heapwatch cluster report <small>{} · {} nodes</small></h1>\n</header>",
        title,
        m.nodes.len()
    );
    out.push_str("<nav>");
    for n in &m.nodes {
        html!(out, "<a href=\"#node-{0}\">{0}</a>", n.name);
    }
    out.push_str("<a href=\"#timeline\">timeline</a><a href=\"#events\">events</a></nav>\n");

    out.push_str("<section id=\"nodes\">\n<h2>Nodes</h2>\n<table><tr><th>node</th><th>verdict</th><th>rules</th><th>full report</th></tr>\n");
    for n in &m.nodes {
        let rules = Markup::literal(if n.model.rules.is_empty() {
            "<span class=\"unknown\">none given</span>"
        } else if n.model.failed() {
            "<span class=\"fail\">failed</span>"
        } else {
            "<span class=\"pass\">passed</span>"
        });
        htmlln!(
            out,
            "<tr><td><a href=\"#node-{0}\">{0}</a></td><td>{1}</td><td>{3}</td><td><a href=\"{2}/index.html\">{2}/index.html</a></td></tr>",
            n.name,
            &n.model.headline().lead,
            &n.folder,
            rules
        );
    }
    for l in m.left_out {
        htmlln!(
            out,
            "<tr><td>{}</td><td colspan=\"3\"><span class=\"unknown\">not reported</span>: {}</td></tr>",
            &l.name,
            &l.why
        );
    }
    out.push_str("</table>\n</section>\n");

    htmlln!(
        out,
        "<section id=\"timeline\">\n<h2>Timeline</h2>\n<figure class=\"chart\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n</section>",
        Markup::drawn(cluster_chart::svg(&timeline, "Memory of every node")),
        timeline.caption(&crate::time::readable(timeline.start_ms))
    );

    out.push_str("<section id=\"events\">\n<h2>Events</h2>\n");
    if m.events.is_empty() {
        out.push_str("<p class=\"note\">No marked log line (collect with --log NAME=PATH --mark LABEL=REGEX).</p>\n");
    } else {
        out.push_str(
            "<table><tr><th class=\"num\">time</th><th>label</th><th>log</th><th>line</th></tr>\n",
        );
        for e in m.events {
            htmlln!(
                out,
                "<tr><td class=\"num\">{} <small class=\"note\">({} time)</small></td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                seconds(event_s(&timeline, e)),
                time_from(e),
                &e.label,
                &e.log,
                &e.line
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");

    for n in &m.nodes {
        htmlln!(
            out,
            "<section class=\"node\" id=\"node-{0}\">\n<h2>Node {0} <small class=\"note\">{1}</small></h2>\n{2}",
            n.name,
            n.dir,
            super::html::headline(&n.model.headline(), &format!("headline-{}", n.name))
        );
        for c in &n.model.run.growth.cycles {
            htmlln!(
                out,
                "<p>Boot cycle {} ({}): {}</p>",
                c.index,
                &crate::render::growth::build(c),
                &crate::render::verdict::cycle_verdict(c, n.model.run.growth.limit_bytes)
            );
        }
        if !n.model.rules.is_empty() {
            super::html::rules_table(&mut out, n.model.rules);
        }
        htmlln!(
            out,
            "<p>The node's full report: <a href=\"{0}/index.html\">{0}/index.html</a></p>\n</section>",
            &n.folder
        );
    }
    htmlln!(
        out,
        "<footer>Written by heapwatch {} from <code>{}</code>. Beside this page: <code>report.md</code>, <code>summary.json</code>, and each node's own report under <code>nodes/</code>.</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION"),
        &m.name
    );
    out
}

pub fn markdown(m: &ClusterModel) -> String {
    let timeline = m.timeline();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# heapwatch cluster report: {} ({} nodes)\n",
        text(m.title()),
        m.nodes.len()
    );
    out.push_str("| node | verdict | rules | full report |\n|---|---|---|---|\n");
    for n in &m.nodes {
        let rules = if n.model.rules.is_empty() {
            "none given"
        } else if n.model.failed() {
            "**failed**"
        } else {
            "passed"
        };
        let _ = writeln!(
            out,
            "| {} | {} | {rules} | {}/index.html |",
            code(n.name),
            text(&n.model.headline().lead),
            text(&n.folder)
        );
    }
    for l in m.left_out {
        let _ = writeln!(
            out,
            "| {} | not reported: {} | | |",
            code(&l.name),
            text(&l.why)
        );
    }
    if !m.events.is_empty() {
        out.push_str("\n## Events\n\n| time | label | log | line |\n|---:|---|---|---|\n");
        for e in m.events {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                seconds(event_s(&timeline, e)),
                text(&e.label),
                text(&e.log),
                code(&e.line)
            );
        }
    }
    for n in &m.nodes {
        let _ = writeln!(
            out,
            "\n## Node {}\n\n{}",
            text(n.name),
            super::markdown::headline(&n.model.headline()).trim_end()
        );
        if !n.model.rules.is_empty() {
            out.push('\n');
        }
        for o in n.model.rules {
            let (_, word) = status_word(o.status);
            let _ = writeln!(
                out,
                "- {} {word} ({}): {}",
                code(&o.rule),
                text(&crate::render::rules::shown(o)),
                text(&crate::render::rules::reason(o))
            );
        }
    }
    out
}

#[derive(Serialize)]
struct EventSummary<'a> {
    t_ms: i64,
    /// Seconds on the shared timeline.
    t_s: f64,
    label: &'a str,
    log: &'a str,
    line: &'a str,
    time_from: &'static str,
}

/// `summary.json` of a cluster: `nodes` keyed by name, each holding the node's own summary
/// (the document a single run's report writes) with its directory and report folder.
pub fn json(m: &ClusterModel) -> String {
    let timeline = m.timeline();
    let mut nodes = serde_json::Map::new();
    for n in &m.nodes {
        let summary: serde_json::Value =
            serde_json::from_str(&super::summary::json(n.model)).unwrap_or_default();
        nodes.insert(
            n.name.to_string(),
            serde_json::json!({
                "dir": n.dir,
                "report": format!("{}/index.html", n.folder),
                "failed": n.model.failed(),
                "summary": summary,
            }),
        );
    }
    let events: Vec<EventSummary> = m
        .events
        .iter()
        .map(|e| EventSummary {
            t_ms: e.t_ms,
            t_s: (event_s(&timeline, e) * 1000.0).round() / 1000.0,
            label: &e.label,
            log: &e.log,
            line: &e.line,
            time_from: time_from(e),
        })
        .collect();
    let headline = m.headline();
    let doc = serde_json::json!({
        "schema": crate::model::SCHEMA,
        "kind": "cluster",
        "run": {"name": m.name, "label": m.label, "started_ms": m.started_ms},
        "headline": m
            .nodes
            .iter()
            .map(|n| format!("{}: {}", n.name, n.model.headline().line()))
            .collect::<Vec<_>>()
            .join(" | "),
        "lead": headline.lead,
        "points": headline.points,
        "failed": m.failed(),
        "node_order": m.nodes.iter().map(|n| n.name).collect::<Vec<_>>(),
        "nodes": nodes,
        "left_out": m
            .left_out
            .iter()
            .map(|l| serde_json::json!({"node": l.name, "why": l.why}))
            .collect::<Vec<_>>(),
        "events": events,
        "files": {"html": "index.html", "markdown": "report.md"},
    });
    let mut out = serde_json::to_string_pretty(&doc).expect("the summary is plain data");
    out.push('\n');
    out
}
