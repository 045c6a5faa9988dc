//! `index.html`: one self-contained page that works offline. No external resource: the
//! style is inline, the charts and flamegraphs are inline SVG, and the one script is the
//! page's own explorer (`explorer.js`), which a Content-Security-Policy names by its hash, so
//! that no other script can run and a function named `<script>…` can only ever be text.
//! Flamegraphs lose inferno's script and event handlers here (their ids are prefixed so
//! several can share the page); the files under `flamegraphs/` keep them. Without the script
//! the page is the static report it always was.

use super::explorer;
use super::life::cycle;
use super::markup::Markup;
use super::{
    Flamegraph, ReportModel, collection_facts, envoy_facts, envoy_verdict, rate, seconds, tally,
    usual_interval_ms,
};
use crate::analyse::rules::{Outcome, Status};
use crate::render::headline::Headline;
use crate::units::format_bytes;
use crate::{html, htmlln, markup};

/// Rows per table.
pub(super) const ROWS: usize = 10;

pub(super) const STYLE: &str = r#"
:root { --fg: #1d2329; --muted: #5b6570; --line: #d9dee3; --bad: #b42318; --ok: #1a7f37; --bg2: #f5f7f9; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); margin: 0 auto; max-width: 1040px; padding: 24px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h1 small { color: var(--muted); font-weight: normal; }
h2 { font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 22px 0 6px; }
.headline { background: var(--bg2); border-left: 4px solid var(--fg); padding: 10px 14px; }
.headline .lead { font-size: 17px; font-weight: 600; margin: 0; }
.headline ul { margin: 6px 0 0; padding-left: 1.3em; }
.verdict { background: var(--bg2); padding: 8px 12px; }
.fail { color: var(--bad); font-weight: 600; }
.pass { color: var(--ok); }
.unknown { color: var(--muted); }
.gate.failed { border-left: 4px solid var(--bad); padding-left: 12px; }
.gate.passed { border-left: 4px solid var(--ok); padding-left: 12px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; font-size: 14px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--bg2); font-weight: 600; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.rule code { white-space: nowrap; word-break: normal; }
code, .site { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; overflow-wrap: break-word; }
td.site { overflow-wrap: anywhere; min-width: 14em; }
figure { margin: 10px 0 18px; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; }
.note { color: var(--muted); font-size: 13px; }
nav a { margin-right: 12px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-all; }
dl.facts.prose dd { word-break: normal; overflow-wrap: anywhere; }
pre.checklist { background: var(--bg2); padding: 10px 12px; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12.5px; line-height: 1.4; }
details summary { cursor: pointer; color: var(--muted); }
.explorer { margin: 8px 0 18px; }
.ex-legend { font-size: 12.5px; color: var(--muted); display: flex; flex-wrap: wrap; gap: 2px 14px; }
.ex-legend i { display: inline-block; width: 16px; height: 3px; vertical-align: middle; margin-right: 5px; }
.ex-chart { display: block; width: 100%; height: auto; user-select: none; cursor: crosshair; }
.ex-chart text { font: 11px system-ui, sans-serif; }
.ex-bar { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; font-size: 13.5px; margin: 6px 0; }
.ex-summary { margin: 6px 0; }
.ex-flame { display: block; width: 100%; height: auto; }
.ex-flame g.frame { cursor: pointer; }
.ex-flame text { font: 11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; pointer-events: none; }
.ex-flame g.match rect { fill: #d946b0; }
.ex-flame g.dim { opacity: 0.45; }
.explorer input[type=search] { font: inherit; font-size: 13.5px; padding: 2px 6px; min-width: 16em; }
.explorer button { font: inherit; font-size: 13px; padding: 1px 8px; cursor: pointer; }
.explorer button.on { font-weight: 600; }
.ex-sites th button { border: 0; background: none; padding: 0; font-weight: 600; }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; border-top: 1px solid var(--line); padding-top: 8px; }
"#;

/// A headline as HTML: its lead, then its points as a list, in a box with this id.
pub fn headline(h: &Headline, id: &str) -> Markup {
    let items: Vec<Markup> = h.points.iter().map(|p| markup!("<li>{}</li>", p)).collect();
    let list = if items.is_empty() {
        Markup::default()
    } else {
        markup!("<ul>\n{}\n</ul>\n", Markup::join(&items, "\n"))
    };
    markup!(
        "<div class=\"headline\" id=\"{}\">\n<p class=\"lead\">{}</p>\n{}</div>\n",
        id,
        &h.lead,
        list
    )
}

pub fn html(m: &ReportModel) -> String {
    let run = &m.run;
    let label = run.label();
    let mut out = String::new();
    let script = if m.explorer.is_some() {
        explorer::script_source()
    } else {
        "'none'".to_string()
    };
    html!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src {}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>heapwatch report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        &script,
        label
    );
    htmlln!(
        out,
        "<header>\n<h1>heapwatch report <small>{}</small></h1>\n{}</header>",
        label,
        headline(&m.headline(), "headline")
    );
    nav(&mut out, m);
    gate(&mut out, m);
    baseline(&mut out, m);
    kubernetes(&mut out, m);
    envoy(&mut out, m);
    for (pos, c) in run.growth.cycles.iter().enumerate() {
        cycle(&mut out, m, pos, c);
    }
    events(&mut out, m);
    collection(&mut out, m);
    if let Some(carried) = m.explorer {
        htmlln!(
            out,
            "{}\n<script>{}</script>",
            explorer::data_block(run, carried),
            Markup::literal(explorer::SCRIPT)
        );
    }
    htmlln!(
        out,
        "<footer>Written by heapwatch {} from <code>{}</code>. Beside this page: <code>report.md</code>, <code>summary.json</code>, and every flamegraph under <code>flamegraphs/</code> (open one alone to zoom and search).</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION"),
        &run.name
    );
    out
}

fn nav(out: &mut String, m: &ReportModel) {
    let mut links = Vec::new();
    if !m.rules.is_empty() {
        links.push(("gate".to_string(), "CI rules".to_string()));
    }
    if m.baseline.is_some() {
        links.push(("baseline".into(), "against the baseline".into()));
    }
    if m.kube.is_some() {
        links.push(("kubernetes".into(), "Kubernetes".into()));
    }
    if m.envoy.is_some() {
        links.push(("envoy".into(), "Envoy".into()));
    }
    for c in &m.run.growth.cycles {
        links.push((
            format!("cycle-{}", c.index),
            format!("boot cycle {}", c.index),
        ));
    }
    links.push(("collection".into(), "how it was collected".into()));
    out.push_str("<nav>");
    for (id, text) in links {
        html!(out, "<a href=\"#{}\">{}</a>", &id, &text);
    }
    out.push_str("</nav>\n");
}

fn gate(out: &mut String, m: &ReportModel) {
    if m.rules.is_empty() {
        return;
    }
    let (class, word) = if m.failed() {
        ("failed", "failed")
    } else {
        ("passed", "passed")
    };
    htmlln!(
        out,
        "<section id=\"gate\" class=\"gate {}\">\n<h2>CI rules: {}</h2>",
        class,
        word
    );
    rules_table(out, m.rules);
    out.push_str("</section>\n");
}

/// The `--fail-on` rules, a row each: the rule, its figure, its result and why (a run's
/// report and each node of a cluster's).
pub(super) fn rules_table(out: &mut String, rules: &[Outcome]) {
    out.push_str(
        "<table><tr><th>rule</th><th class=\"num\">measured</th><th>result</th><th>why</th></tr>\n",
    );
    for o in rules {
        let (class, text) = match o.status {
            Status::Fail => ("fail", "fail"),
            Status::Pass => ("pass", "pass"),
            Status::Unknown => ("unknown", "not checked"),
        };
        htmlln!(
            out,
            "<tr><td class=\"rule\"><code>{}</code></td><td class=\"num\">{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
            &o.rule,
            &crate::render::rules::shown(o),
            class,
            text,
            &crate::render::rules::reason(o)
        );
    }
    out.push_str("</table>\n");
}

fn baseline(out: &mut String, m: &ReportModel) {
    let Some(b) = &m.baseline else { return };
    let c = b.comparison;
    htmlln!(
        out,
        "<section id=\"baseline\">\n<h2>Against {} <small class=\"note\">(baseline)</small></h2>\n{}",
        b.label(),
        headline(
            &crate::render::headline::of_comparison(c),
            "baseline-verdict"
        )
    );
    if let Some(r) = b.heap_ratio {
        if let Some(ratio) = r.ratio() {
            htmlln!(
                out,
                "<p>Peak in-use heap over the first {} of cycle {} of {} and cycle {} of {}: {} against {}, <strong>{:.2}x</strong>.</p>",
                seconds(r.age_s),
                r.b_cycle,
                &c.b,
                r.a_cycle,
                &c.a,
                format_bytes(r.bytes),
                format_bytes(r.baseline_bytes),
                ratio,
            );
        }
    }
    if !c.regressions.is_empty() {
        let sides = crate::render::compare::side_labels(c);
        htmlln!(
            out,
            "<h3>Sites that grow more, or only, in {}</h3>",
            &sides.1
        );
        htmlln!(
            out,
            "<table><tr><th>site</th><th class=\"num\">{0} rate</th><th class=\"num\">{1} rate</th><th class=\"num\">{0} peak in use</th><th class=\"num\">{1} peak in use</th><th>why</th></tr>",
            &sides.0,
            &sides.1
        );
        for r in c.regressions.iter().take(ROWS) {
            htmlln!(
                out,
                "<tr><td class=\"site\">{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                &r.name,
                Markup::literal(if r.new_in_b { " <em>(new)</em>" } else { "" }),
                rate(r.a_bytes_per_sec),
                rate(r.b_bytes_per_sec),
                format_bytes(r.a_inuse),
                format_bytes(r.b_inuse),
                &crate::render::compare::why_worse(r)
            );
        }
        out.push_str("</table>\n");
    }
    if !c.improvements.is_empty() {
        let names: Vec<Markup> = c
            .improvements
            .iter()
            .take(ROWS)
            .map(|r| markup!("<code>{}</code>", r.name))
            .collect();
        htmlln!(
            out,
            "<p>Better in {}: {}</p>",
            &c.b,
            Markup::join(&names, ", ")
        );
    }
    for (i, f) in m.flamegraphs.iter().enumerate() {
        if f.cycle.is_none() {
            flame(out, f, i);
        }
    }
    out.push_str("</section>\n");
}

fn envoy(out: &mut String, m: &ReportModel) {
    let Some(e) = &m.envoy else { return };
    let (code, summary) = envoy_verdict(e.report);
    htmlln!(
        out,
        "<section id=\"envoy\">\n<h2>Envoy <small class=\"note\">{}</small></h2>\n<p class=\"verdict\"><strong>{}</strong>: {}</p>",
        e.target,
        code,
        &summary
    );
    out.push_str("<dl class=\"facts prose\">");
    for (k, text) in envoy_facts(e) {
        html!(out, "<dt>{}</dt><dd>{}</dd>", k, &text);
    }
    out.push_str("</dl>\n");
    out.push_str("<p class=\"note\">heap_size counts pages tcmalloc already gave back to the OS (pageheap_unmapped), so allocated / heap_size understates live data; free pages and thread caches are held by tcmalloc and not returned.</p>\n</section>\n");
}

fn kubernetes(out: &mut String, m: &ReportModel) {
    let Some(k) = &m.kube else { return };
    let r = k.report;
    htmlln!(
        out,
        "<section id=\"kubernetes\">\n<h2>Kubernetes <small class=\"note\">{} as of {}</small></h2>",
        &k.file,
        &r.as_of
    );
    match (&r.events_from, &r.events_to) {
        (Some(a), Some(b)) => {
            htmlln!(
                out,
                "<p class=\"note\">Events from {} to {}.</p>",
                a,
                b
            );
        }
        _ if r.events_given => out.push_str("<p class=\"note\">The events file holds no events.</p>\n"),
        _ => out.push_str("<p class=\"note\">No events given (<code>--events</code>): liveness kills cannot be told from OOM kills.</p>\n"),
    }
    out.push_str("<table><tr><th>pod</th><th>container</th><th class=\"num\">restarts</th><th>last death</th><th>memory</th><th>verdict</th></tr>\n");
    for pod in &r.pods {
        let name = match &pod.namespace {
            Some(ns) => format!("{ns}/{}", pod.name),
            None => pod.name.clone(),
        };
        for c in &pod.containers {
            let death = c.termination.as_ref().map_or("-".to_string(), |t| {
                format!(
                    "{} {}",
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("(no reason)")
                )
            });
            let memory = match (&c.memory.request, &c.memory.limit) {
                (Some(req), Some(lim)) => format!("{req} / {lim} ({})", pod.qos_class),
                (None, Some(lim)) => format!("limit {lim} ({})", pod.qos_class),
                (Some(req), None) => format!("request {req}, no limit ({})", pod.qos_class),
                (None, None) => format!("no request, no limit ({})", pod.qos_class),
            };
            htmlln!(
                out,
                "<tr><td class=\"site\">{}</td><td class=\"site\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td><strong>{}</strong>: {}</td></tr>",
                &name,
                &c.name,
                c.restarts,
                &death,
                &memory,
                c.verdict.code,
                &crate::render::triage_words::verdict_summary(c)
            );
        }
    }
    out.push_str("</table>\n");
    htmlln!(
        out,
        "<details open><summary>The checklist, question by question</summary>\n<pre class=\"checklist\">{}</pre>\n</details>\n</section>",
        &crate::render::triage::text(&k.file, r)
    );
}

pub(super) fn flame(out: &mut String, f: &Flamegraph, i: usize) {
    htmlln!(
        out,
        "<figure class=\"flame\">\n{}\n<figcaption>{} <a href=\"{}\">Open alone</a> to zoom and search.</figcaption>\n</figure>",
        Markup::drawn(super::inline::inline_svg(&f.svg, &format!("fg{i}-"))),
        &f.caption,
        &f.file
    );
}

/// The marked log lines, when the run has any.
fn events(out: &mut String, m: &ReportModel) {
    let run = &m.run;
    if run.events.is_empty() {
        return;
    }
    let start = run.info.map(|i| i.started_ms);
    out.push_str("<section id=\"events\">\n<h2>Events</h2>\n<table><tr><th>time</th><th>label</th><th>log</th><th>line</th></tr>\n");
    for e in run.events {
        let when = match start {
            Some(s) => format!("{} into the run", seconds((e.t_ms - s) as f64 / 1000.0)),
            None => crate::time::readable(e.t_ms),
        };
        htmlln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            &when,
            &e.label,
            &e.log,
            &e.line
        );
    }
    out.push_str("</table>\n</section>\n");
}

fn collection(out: &mut String, m: &ReportModel) {
    let run = &m.run;
    out.push_str("<section id=\"collection\">\n<h2>How it was collected</h2>\n");
    match run.info {
        Some(info) => {
            out.push_str("<dl class=\"facts\">");
            for (k, v) in collection_facts(info) {
                html!(out, "<dt>{}</dt><dd>{}</dd>", k, &v);
            }
            out.push_str("</dl>\n");
        }
        None => out.push_str("<p class=\"note\">The run has no run.json.</p>\n"),
    }
    let t = tally(run.records, usual_interval_ms(run.info));
    let mut s = format!(
        "{} capture attempts: {} heap, {} goroutine, {} other; {} stored, {} duplicates of an earlier capture, {} kept as figures only (MemStats, runtime stats, thinned profiles), {} failed",
        t.attempts,
        t.heap,
        t.goroutine,
        t.attempts - t.heap - t.goroutine - t.envoy,
        t.stored,
        t.duplicates,
        t.figures_only,
        t.errors
    );
    if t.envoy > 0 {
        s = s.replacen(
            " goroutine;",
            &format!(" goroutine, {} Envoy snapshots;", t.envoy),
            1,
        );
    }
    if !t.errors_by_kind.is_empty() {
        let kinds: Vec<String> = t
            .errors_by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        s.push_str(&format!(" ({})", kinds.join(", ")));
    }
    if t.burst > 0 {
        s.push_str(&format!(
            "; {} heap captures at the burst interval",
            t.burst
        ));
    }
    if !run.memory.is_empty() {
        s.push_str(&format!("; {} memory samples", run.memory.len()));
    }
    htmlln!(out, "<p>{}.</p>", &s);
    htmlln!(
        out,
        "<p class=\"note\">{}</p>",
        &crate::render::verdict::across_summary(&run.growth.cycles, &run.growth.across)
    );
    for n in &run.notes {
        htmlln!(out, "<p class=\"note\">{}</p>", n);
    }
    out.push_str("</section>\n");
}
