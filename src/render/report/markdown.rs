//! `report.md`: short enough for a CI job summary (`$GITHUB_STEP_SUMMARY`), tables first.
//! Names from profiles go into code spans; other text from the run is backslash-escaped so
//! that no name turns into markup, a link or a broken table.

use std::fmt::Write as _;

use super::{ReportModel, collection_facts, envoy_facts, rate, seconds, tally, usual_interval_ms};
use crate::analyse::rules::{self, Status};
use crate::render::ends::end_words;
use crate::render::headline::Headline;
use crate::units::format_bytes;

/// Sites listed per cycle and regressions listed against the baseline.
const TOP: usize = 3;

/// Markdown-escapes running text. An `_` between two letters or digits stays bare: it cannot
/// open or close emphasis there (CommonMark's flanking rules), and `infra_etcd-0_etcd` stays
/// readable where report.md is shown as plain text.
pub(super) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let intraword = |at: Option<&char>| at.is_some_and(|c| c.is_alphanumeric());
        if c == '_' && i > 0 && intraword(chars.get(i - 1)) && intraword(chars.get(i + 1)) {
            out.push(c);
            continue;
        }
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '~' | '!' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A name as an inline code span that survives backticks and table pipes.
pub(super) fn code(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect::<String>()
        .replace('|', "\\|");
    let longest = clean.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if longest > 0 {
        format!("{fence} {clean} {fence}")
    } else {
        format!("`{clean}`")
    }
}

/// A headline as markdown: its lead in bold, then its points as a list, and a blank line.
pub fn headline(h: &Headline) -> String {
    let mut out = format!("**{}**\n\n", text(&h.lead));
    for p in &h.points {
        let _ = writeln!(out, "- {}", text(p));
    }
    if !h.points.is_empty() {
        out.push('\n');
    }
    out
}

pub fn markdown(m: &ReportModel) -> String {
    let run = &m.run;
    let g = run.growth;
    let mut out = String::new();
    let _ = writeln!(out, "## heapwatch report: {}\n", text(run.label()));
    out.push_str(&headline(&m.headline()));

    if !m.rules.is_empty() {
        let verdict = if m.failed() { "FAILED" } else { "passed" };
        let _ = writeln!(out, "### CI rules: {verdict}\n");
        let _ = writeln!(out, "| rule | measured | result | why |");
        let _ = writeln!(out, "|---|---|---|---|");
        for o in m.rules {
            let result = match o.status {
                Status::Fail => "**FAIL**",
                Status::Pass => "pass",
                Status::Unknown => "not checked",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {result} | {} |",
                code(&o.rule),
                text(&crate::render::rules::shown(o)),
                text(&crate::render::rules::reason(o))
            );
        }
        out.push('\n');
    }

    if let Some(k) = &m.kube {
        // The checklist in a fenced block (so no name from the cluster turns into markup),
        // one heading level below the report's title.
        let section = crate::render::triage::markdown(&k.file, k.report);
        let _ = writeln!(
            out,
            "{}",
            section.replacen("## Kubernetes triage", "### Kubernetes triage", 1)
        );
    }

    if let Some(e) = &m.envoy {
        let (verdict, summary) = super::envoy_verdict(e.report);
        let _ = writeln!(out, "### Envoy {}\n", code(e.target));
        let _ = writeln!(out, "**{}**: {}\n", text(verdict), text(&summary));
        let _ = writeln!(out, "| | |");
        let _ = writeln!(out, "|---|---|");
        for (k, v) in envoy_facts(e) {
            let _ = writeln!(out, "| {} | {} |", text(k), text(&v));
        }
        out.push('\n');
    }

    let envoy_only = m.envoy_only();
    let _ = writeln!(out, "### Boot cycles\n");
    let _ = writeln!(
        out,
        "| cycle | build | captures | end | heap growth | memory peak | limit reached at | site holding the rise |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for c in &g.cycles {
        let end = match (c.died_after_s, c.end.is_death()) {
            (Some(d), true) => format!("{} at {}", end_words(&c.end), seconds(d)),
            (Some(_), false) => end_words(&c.end),
            (None, _) if c.end == crate::analyse::ends::CycleEnd::CollectorStopped => {
                format!("collector stopped after {}", seconds(c.span_s))
            }
            (None, _) => format!("alive after {}", seconds(c.span_s)),
        };
        let heap_growth = match &c.reading {
            _ if envoy_only => "-".to_string(),
            None => rate(0.0),
            Some(r) if r.ongoing => {
                format!("{} from {}", rate(r.bytes_per_sec), seconds(r.onset_s))
            }
            Some(r) => format!(
                "{} from {} to {}, then held",
                rate(r.bytes_per_sec),
                seconds(r.onset_s),
                seconds(r.end_s)
            ),
        };
        let none = if envoy_only {
            "no heap profiles"
        } else {
            "none"
        };
        let none = match c.episode.as_ref().filter(|e| e.transient) {
            Some(e) => format!(
                "none; spike to {} at {}{}",
                format_bytes(e.peak_bytes),
                seconds(e.peak_s),
                e.sites
                    .first()
                    .map_or(String::new(), |s| format!(" in {}", code(&s.name)))
            ),
            None => none.to_string(),
        };
        let top = c.rise_sites().first().map_or(none, |s| {
            format!(
                "{} ({:.0} % of the rise, {})",
                code(&s.name),
                s.share * 100.0,
                rate(s.bytes_per_sec)
            )
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {end} | {heap_growth} | {} | {} | {top} |",
            c.index,
            if c.build.is_empty() {
                "-".to_string()
            } else {
                text(&c.build)
            },
            c.captures,
            super::memory_peak(c),
            rules::cycle_time_to_limit(c).map_or("-".to_string(), seconds),
        );
    }
    out.push('\n');

    let sites: Vec<_> = g
        .cycles
        .iter()
        .flat_map(|c| c.rise_sites().iter().take(TOP).map(move |s| (c.index, s)))
        .collect();
    if !sites.is_empty() {
        let _ = writeln!(out, "### Sites holding the rise (in-use bytes)\n");
        let _ = writeln!(
            out,
            "| cycle | site | share of the rise | rate | at the onset | at the end |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for (cycle, s) in sites {
            let _ = writeln!(
                out,
                "| {cycle} | {} | {:.0} % | {} | {} | {} |",
                code(&s.name),
                s.share * 100.0,
                rate(s.bytes_per_sec),
                format_bytes(s.before),
                format_bytes(s.after)
            );
        }
        out.push('\n');
    }
    if let Some(own) = &g.own {
        let _ = writeln!(out, "{}\n", text(&crate::render::growth::own_words(own)));
    }

    let unpublished: Vec<_> = g
        .cycles
        .iter()
        .filter_map(|c| Some((c.index, c.unpublished.as_ref()?)))
        .collect();
    if !unpublished.is_empty() {
        let _ = writeln!(
            out,
            "### The last capture, beyond the published heap
"
        );
        let _ = writeln!(
            out,
            "A heap profile shows the heap as of the last finished GC cycle; `proc:` captures \
             also read what was allocated since (`recent_space`, frees not yet known).\n"
        );
        let _ = writeln!(
            out,
            "| cycle | capture | at | in use (last GC) | allocated since | file |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for (cycle, u) in unpublished {
            let _ = writeln!(
                out,
                "| {cycle} | #{} | {} | {} | {} | {} |",
                u.seq,
                seconds(u.at_s),
                format_bytes(u.inuse_bytes),
                format_bytes(u.recent_bytes),
                u.file.as_deref().map_or("-".to_string(), code)
            );
        }
        out.push('\n');
    }

    let storms: Vec<_> = g
        .cycles
        .iter()
        .flat_map(|c| c.alloc_storms.iter().take(TOP).map(move |s| (c.index, s)))
        .collect();
    if !storms.is_empty() {
        let _ = writeln!(out, "### Allocation storms\n");
        let _ = writeln!(out, "| cycle | site | peak | typical | in use |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for (cycle, s) in storms {
            let _ = writeln!(
                out,
                "| {cycle} | {} | {} | {} | {} |",
                code(&s.name),
                rate(s.peak_bytes_per_sec),
                rate(s.typical_bytes_per_sec),
                if s.inuse_flat { "flat" } else { "grows" }
            );
        }
        out.push('\n');
    }

    let goroutines: Vec<_> = g
        .cycles
        .iter()
        .flat_map(|c| {
            c.goroutine_growth
                .iter()
                .take(TOP)
                .map(move |s| (c.index, s))
        })
        .collect();
    if !goroutines.is_empty() {
        let _ = writeln!(out, "### Goroutine growth\n");
        let _ = writeln!(
            out,
            "| cycle | first frame outside the runtime | rate | count |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for (cycle, s) in goroutines {
            let _ = writeln!(
                out,
                "| {cycle} | {} | {:.1}/s | {} → {} |",
                code(&s.name),
                s.per_sec,
                s.first,
                s.last
            );
        }
        out.push('\n');
    }

    if let Some(b) = &m.baseline {
        let c = b.comparison;
        let _ = writeln!(out, "### Against {}\n", text(b.label()));
        let mut points = crate::render::headline::of_comparison(c).points;
        points.extend(
            b.heap_ratio
                .and_then(|h| heap_ratio_point(h, (c.a_cycle, c.b_cycle))),
        );
        for p in &points {
            let _ = writeln!(out, "- {}", text(p));
        }
        out.push('\n');
        if !c.regressions.is_empty() {
            let (a, b) = crate::render::compare::side_labels(c);
            let (a, b) = (text(&a), text(&b));
            let _ = writeln!(
                out,
                "| site | {a} rate | {b} rate | {a} peak in use | {b} peak in use |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|");
            for r in c.regressions.iter().take(TOP + 2) {
                let _ = writeln!(
                    out,
                    "| {}{} | {} | {} | {} | {} |",
                    code(&r.name),
                    if r.new_in_b { " (new)" } else { "" },
                    rate(r.a_bytes_per_sec),
                    rate(r.b_bytes_per_sec),
                    format_bytes(r.a_inuse),
                    format_bytes(r.b_inuse)
                );
            }
            out.push('\n');
        }
    }

    let t = tally(run.records, usual_interval_ms(run.info));
    let mut how = format!(
        "{} capture attempts ({} stored, {} duplicates, {} figures only, {} failed",
        t.attempts, t.stored, t.duplicates, t.figures_only, t.errors
    );
    if t.envoy > 0 {
        how.push_str(&format!(", {} Envoy snapshots", t.envoy));
    }
    if t.burst > 0 {
        how.push_str(&format!(", {} at the burst interval", t.burst));
    }
    how.push(')');
    if !run.memory.is_empty() {
        how.push_str(&format!(", {} memory samples", run.memory.len()));
    }
    if let Some(info) = run.info {
        let facts = collection_facts(info);
        let get = |k: &str| facts.iter().find(|f| f.0 == k).map(|f| f.1.as_str());
        how.push_str(&format!(
            " from {} ({}), started {}",
            code(get("target").unwrap_or("?")),
            text(get("source").unwrap_or("?")),
            text(get("started").unwrap_or("?"))
        ));
        if let Some(i) = get("interval") {
            how.push_str(&format!(", interval {}", text(i)));
        }
    }
    if !run.events.is_empty() {
        out.push_str("## Events\n\n| time | label | log | line |\n|---|---|---|---|\n");
        for e in run.events {
            let when = match run.info {
                Some(i) => seconds((e.t_ms - i.started_ms) as f64 / 1000.0),
                None => crate::time::readable(e.t_ms),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                text(&when),
                text(&e.label),
                text(&e.log),
                code(&e.line)
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "<sub>{how}. Charts and flamegraphs: `index.html` in the report folder.</sub>"
    );
    out
}

/// The heap ratio the regression gate judges, as a point under the comparison; its pair named
/// when it is not the compared (`lead`) pair.
fn heap_ratio_point(h: &rules::HeapRatio, lead: (u32, u32)) -> Option<String> {
    let r = h.ratio()?;
    let pair = if (h.a_cycle, h.b_cycle) == lead {
        String::new()
    } else {
        format!(
            " (cycle {} against the baseline's cycle {}, the worst compared like with like)",
            h.b_cycle, h.a_cycle
        )
    };
    Some(format!(
        "peak in-use heap {r:.2}x the baseline's over the first {}{pair}",
        seconds(h.age_s)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate's pair need not lead the comparison (issue 33, item 11): then it is named.
    #[test]
    fn the_heap_ratio_names_its_pair_where_it_is_not_the_compared_one() {
        let h = rules::HeapRatio {
            age_s: 4.0,
            baseline_bytes: 100 << 20,
            bytes: 115 << 20,
            a_cycle: 1,
            b_cycle: 1,
        };
        let point = heap_ratio_point(&h, (1, 2)).unwrap();
        assert!(
            point.starts_with("peak in-use heap 1.15x the baseline's over the first ")
                && point.ends_with(
                    " (cycle 1 against the baseline's cycle 1, the worst compared like with like)"
                ),
            "{point}"
        );
        let lead = heap_ratio_point(&h, (1, 1)).unwrap();
        assert!(!lead.contains("cycle"), "{lead}");
    }

    #[test]
    fn an_underscore_inside_a_word_stays_bare_and_one_at_its_edge_is_escaped() {
        assert_eq!(text("infra_etcd-0_etcd"), "infra_etcd-0_etcd");
        assert_eq!(text("_init_ x_"), "\\_init\\_ x\\_");
        assert_eq!(text("a_*b*"), "a\\_\\*b\\*");
    }

    #[test]
    fn names_cannot_break_out_of_code_spans_or_tables() {
        assert_eq!(code("main.f"), "`main.f`");
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("x`y"), "`` x`y ``");
        assert_eq!(
            text("<script>*x*</script>"),
            "\\<script\\>\\*x\\*\\</script\\>"
        );
    }
}
