//! One life's section of `index.html`: its verdict and end, the facts of its boot cycle, its
//! growing sites, storms and goroutines, its charts and flamegraphs, and where the page's
//! explorer draws what a span of its timeline added.

use super::chart::{self, Timeline};
use super::explorer;
use super::html::{ROWS, flame};
use super::markup::Markup;
use super::{ReportModel, rate, seconds};
use crate::analyse::growth::CycleGrowth;
use crate::analyse::rules;
use crate::render::ends::end_words;
use crate::units::format_bytes;
use crate::{html, htmlln};

pub(super) fn cycle(out: &mut String, m: &ReportModel, pos: usize, c: &CycleGrowth) {
    let verdict = if m.envoy_only() {
        "No heap profiles: Envoy's admin figures only (the verdict is in the Envoy section).".into()
    } else {
        crate::render::verdict::cycle_verdict(c, m.run.growth.limit_bytes)
    };
    htmlln!(
        out,
        "<section class=\"cycle\" id=\"cycle-{0}\">\n<h2>Boot cycle {0} <small class=\"note\">({2})</small></h2>\n<p class=\"verdict\">{1}</p>",
        c.index,
        &verdict,
        &crate::render::growth::build(c)
    );
    let timeline = Timeline::of_cycle(&m.run, pos);
    let caption = format!("{}: boot cycle {}", m.run.label(), c.index);
    let explained = if timeline.is_envoy() {
        "Envoy's figures at each snapshot: allocated (live data), heap_size (reserved by tcmalloc, pages already returned to the OS included) and total_physical_bytes; process / cgroup memory sampled from outside when collected. Crosses: failed snapshots.".to_string()
    } else {
        timeline.caption()
    };
    htmlln!(
        out,
        "<figure class=\"chart\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
        Markup::drawn(chart::svg(&timeline, &caption)),
        &explained
    );

    explorer_of(out, m, c.index);

    let mut facts: Vec<(String, String)> = vec![(
        "captures".into(),
        format!(
            "{} good ({} stored, {} duplicate), {} failed, over {}",
            c.captures,
            c.stored,
            c.duplicates,
            c.errors,
            seconds(c.span_s)
        ),
    )];
    if let (Some(a), Some(b)) = (c.heap_first, c.heap_last) {
        let s = format!(
            "{} → {} (first → last capture)",
            format_bytes(a),
            format_bytes(b)
        );
        facts.push(("heap in use".into(), s));
    }
    if let Some(r) = &c.reading {
        facts.push((
            "growth episode".into(),
            crate::render::verdict::reading_words(r, m.run.growth.limit_bytes),
        ));
    }
    if let Some(p) = m.peak_heap.iter().find(|p| p.0 == c.index) {
        facts.push(("largest heap captured".into(), format_bytes(p.1)));
    }
    let memory = crate::render::memory::outside_figure(c.peaks.cgroup.is_some());
    let peak = c
        .memory_peak
        .map(|_| format!("peak {}", super::memory_peak(c)));
    match (c.memory_bytes_per_sec, peak) {
        (Some(r), Some(p)) => facts.push((memory.into(), format!("{}, {p}", rate(r)))),
        (Some(r), None) => facts.push((memory.into(), rate(r))),
        (None, Some(p)) => facts.push((memory.into(), p)),
        (None, None) => {}
    }
    if let Some(b) = &c.breakdown {
        facts.push((
            "where the memory went".into(),
            crate::render::memory::breakdown_words(b),
        ));
    }
    if let Some(a) = &c.at_limit {
        facts.push((
            "at the limit".into(),
            crate::render::memory::at_limit_words(a),
        ));
    }
    if let Some(t) = rules::cycle_time_to_limit(c) {
        facts.push(("limit reached at".into(), seconds(t)));
    }
    if let Some(peaks) = crate::render::memory::peaks_words(&c.peaks) {
        facts.push(("peaks".into(), peaks));
    }
    if let Some(e) = c.episode.as_ref().filter(|_| c.reading.is_none()) {
        facts.push((
            if e.transient {
                "spike"
            } else {
                "rise into the peak"
            }
            .into(),
            crate::render::verdict::spike_words(e),
        ));
    }
    match (c.died_after_s, c.end.is_death()) {
        (Some(d), true) => facts.push((
            "end".into(),
            format!(
                "{} {} after the first capture",
                end_words(&c.end),
                seconds(d)
            ),
        )),
        _ => facts.push(("end".into(), end_words(&c.end))),
    }
    if let Some(held) = c.oom_held_ms {
        facts.push((
            "OOM hold".into(),
            crate::render::growth::hold_words(c, held),
        ));
    }
    if let Some(u) = &c.unpublished {
        facts.push((
            "last capture".into(),
            crate::render::growth::unpublished_words(u),
        ));
    }
    if let Some(p) = &c.profiling {
        facts.push((
            "profiling cost".into(),
            format!(
                "{} allocated by the profile writer ({:.1} % of all allocation)",
                rate(p.alloc_bytes_per_sec),
                p.alloc_share * 100.0
            ),
        ));
    }
    if let Some(ms) = &c.memstats {
        facts.push(("MemStats".into(), crate::render::memory::memstats_words(ms)));
    }
    out.push_str("<dl class=\"facts\">");
    for (k, v) in facts {
        html!(out, "<dt>{}</dt><dd>{}</dd>", &k, &v);
    }
    out.push_str("</dl>\n");
    if let Some(bar) = c.breakdown.as_ref().and_then(super::breakdown::svg) {
        htmlln!(
            out,
            "<figure class=\"breakdown\">\n{}\n<figcaption>Where the memory went at the cycle's peak, against the limit: anonymous memory is what the kernel kills on; page cache is reclaimed first.</figcaption>\n</figure>",
            Markup::drawn(bar)
        );
    }

    if m.envoy_only() {
        out.push_str("<p class=\"note\">No heap profiles in this run (Envoy without tcmalloc's <code>/heap_dump</code>): no allocation site to rank. The <a href=\"#envoy\">Envoy section</a> has the findings.</p>\n</section>\n");
        return;
    }
    out.push_str("<h3>Sites holding the rise (in-use bytes)</h3>\n");
    if c.rise_sites().is_empty() {
        out.push_str("<p class=\"note\">The in-use heap did not rise in this cycle.</p>\n");
    } else {
        out.push_str("<table><tr><th>site</th><th class=\"num\">share of the rise</th><th class=\"num\">rate</th><th class=\"num\">at the onset</th><th class=\"num\">at the end</th></tr>\n");
        for s in c.rise_sites().iter().take(ROWS) {
            htmlln!(
                out,
                "<tr><td class=\"site\">{}</td><td class=\"num\">{:.0} %</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                &s.name,
                s.share * 100.0,
                rate(s.bytes_per_sec),
                format_bytes(s.before),
                format_bytes(s.after)
            );
        }
        out.push_str("</table>\n");
    }
    if !c.alloc_storms.is_empty() {
        out.push_str("<h3>Allocation storms (cumulative allocated bytes)</h3>\n<table><tr><th>site</th><th class=\"num\">peak</th><th class=\"num\">typical</th><th>when</th><th>in use</th></tr>\n");
        for s in c.alloc_storms.iter().take(ROWS) {
            let when: Vec<String> = s
                .windows
                .iter()
                .map(|w| format!("{:.1}–{:.1} s", w.start_s, w.end_s))
                .collect();
            htmlln!(
                out,
                "<tr><td class=\"site\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                &s.name,
                rate(s.peak_bytes_per_sec),
                rate(s.typical_bytes_per_sec),
                &when.join(", "),
                if s.inuse_flat {
                    "flat (freed by the GC)"
                } else {
                    "grows"
                }
            );
        }
        out.push_str("</table>\n");
    }
    if !c.goroutine_growth.is_empty() {
        out.push_str("<h3>Goroutine growth</h3>\n<table><tr><th>first frame outside the runtime</th><th class=\"num\">rate</th><th class=\"num\">first</th><th class=\"num\">last</th></tr>\n");
        for g in c.goroutine_growth.iter().take(ROWS) {
            htmlln!(
                out,
                "<tr><td class=\"site\">{}</td><td class=\"num\">{:.1}/s</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                &g.name,
                g.per_sec,
                g.first,
                g.last
            );
        }
        out.push_str("</table>\n");
    }
    for (i, f) in m.flamegraphs.iter().enumerate() {
        if f.cycle == Some(c.index) {
            flame(out, f, i);
        }
    }
    out.push_str("</section>\n");
}

/// Where the script puts a life's explorer; without the script it says what it would show.
fn explorer_of(out: &mut String, m: &ReportModel, life: u32) {
    let Some(carried) = m.explorer else { return };
    if !carried.lives.iter().any(|l| l.index == life) {
        return;
    }
    htmlln!(
        out,
        "<div class=\"explorer\" id=\"explore-{}\" data-life=\"{}\">\n<p class=\"note ex-static\">With the page's script allowed to run, this is where a span of the timeline is chosen with the mouse, and the flamegraph and sites of what the heap gained between its ends are drawn.</p>",
        life,
        life
    );
    if let Some(note) = explorer::carried_note(carried, life) {
        htmlln!(out, "{}", note);
    }
    out.push_str("</div>\n");
}
