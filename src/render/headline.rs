//! The headline of a run or a comparison: one short sentence that leads with the cause (what
//! killed the process, or what regressed) and where to look (the site), then the rest as a list.
//! Made once from the finished analysis; the terminal, `report.md`, `index.html` and
//! `summary.json` each lay out this one model.

use crate::analyse::compare::Comparison;
use crate::analyse::growth::{CycleGrowth, GrowthReport};
use crate::render::ends::end_words;
use crate::render::memory::filled_words;
use crate::render::verdict::{
    across_parts, age_range, cycle_verdict_parts, end_part, ends_tally, filled_across, rise_sites,
};
use crate::units::format_bytes;

/// One short sentence, then the rest as a list.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Headline {
    /// What killed it, or what regressed, and where to look.
    pub lead: String,
    /// Everything else the verdict says, one clause each.
    pub points: Vec<String>,
}

impl Headline {
    /// On one line, where a line is all there is (a table cell, `summary.json`'s `headline`):
    /// the lead as a sentence, then the points.
    pub fn line(&self) -> String {
        if self.points.is_empty() {
            self.lead.clone()
        } else {
            format!("{}. {}", self.lead, self.points.join("; "))
        }
    }

    /// For a terminal: the lead on its line, then each point on its own, indented.
    pub fn text(&self, indent: &str) -> String {
        let mut out = format!("{}\n", self.lead);
        for p in &self.points {
            out.push_str(&format!("{indent}- {p}\n"));
        }
        out
    }
}

/// The headline of a comparison: what regressed (or which side died) and where, then each
/// clause of the verdict.
pub fn of_comparison(c: &Comparison) -> Headline {
    let mut points = crate::render::compare::verdict_parts(c);
    if let Some(first) = points.first_mut() {
        *first = format!(
            "A = {} (cycle {}), B = {} (cycle {}): {first}",
            c.a, c.a_cycle, c.b, c.b_cycle
        );
    }
    Headline {
        lead: crate::render::compare::lead(c, None),
        points,
    }
}

/// The headline of a run, against its baseline when it has one: with a baseline the lead is
/// the comparison's (with the crash loop, when the run is in one), and the points are the
/// comparison's, then the run's own.
pub fn of_run(g: &GrowthReport, baseline: Option<&Comparison>) -> Headline {
    let Some(c) = baseline else {
        return of_growth(g);
    };
    let looped = g
        .across
        .crash_loop
        .as_ref()
        .filter(|l| l.oom_killed && g.across.ages_s.len() >= 2)
        .map(|_| {
            let (min, max) = age_range(&g.across.ages_s);
            let ages = if max - min < 0.05 {
                format!("{min:.1} s")
            } else {
                format!("{min:.1}–{max:.1} s")
            };
            format!(
                "OOM-killed {ages} after each of its {} starts (a crash loop)",
                g.cycles.len()
            )
        });
    // The run's own account in full: its lead is not the lead here.
    let mut points = of_comparison(c).points;
    match g.cycles.as_slice() {
        [one] => points.extend(cycle_verdict_parts(one, g.limit_bytes)),
        cycles => points.extend(across_parts(cycles, &g.across)),
    }
    Headline {
        lead: crate::render::compare::lead(c, looped.as_deref()),
        points,
    }
}

/// The headline of a run alone: its one cycle's, or the account across its cycles. What the
/// lead says is not listed again.
pub fn of_growth(g: &GrowthReport) -> Headline {
    match g.cycles.as_slice() {
        [] => Headline {
            lead: "no boot cycle with a good capture".into(),
            points: Vec::new(),
        },
        [one] => {
            let lead = cycle_lead(one, g.limit_bytes);
            let end = end_part(one).filter(|_| lead.starts_with(&end_words(&one.end)));
            let filled = one
                .breakdown
                .as_ref()
                .and_then(filled_words)
                .filter(|f| lead.contains(f.as_str()));
            let mut points = cycle_verdict_parts(one, g.limit_bytes);
            points.retain(|p| Some(p) != end.as_ref() && Some(p) != filled.as_ref());
            Headline { lead, points }
        }
        cycles => {
            let mut points = across_parts(cycles, &g.across);
            // The crash loop is the sentence that matters: it leads. Else the cycles' ends lead,
            // with the site of their rise.
            let lead = if g.across.crash_loop.is_some() {
                points.remove(0)
            } else {
                points.remove(0);
                let lead = across_lead(g);
                points.retain(|p| !lead.contains(p.as_str()));
                lead
            };
            Headline { lead, points }
        }
    }
}

/// "OOM-killed 7.4 s after the first capture; the rise is in main.store (95 % of it)".
pub fn cycle_lead(c: &CycleGrowth, limit: Option<u64>) -> String {
    let fate = match (c.end, c.died_after_s) {
        (end, Some(d)) if end.is_death() => Some(format!(
            "{} {d:.1} s after {}",
            end_words(&end),
            crate::render::verdict::measured_from(c)
        )),
        (end, None) if end.is_death() => Some(end_words(&end)),
        _ => None,
    };
    // What filled the limit, when not the heap, is where to look before the heap's rise.
    let filled = c.breakdown.as_ref().and_then(filled_words);
    let rise = rise_where(c);
    let storm = c
        .alloc_storms
        .first()
        .map(|s| format!("allocation storm in {}", s.name));
    let goroutines = c
        .goroutine_growth
        .first()
        .map(|g| format!("goroutines grew in {}", g.name));
    let Some(fate) = fate else {
        if let Some(filled) = filled {
            return filled;
        }
        // Alive at the end: whether the heap still grew, and what to look at.
        return match c.reading.as_ref() {
            Some(r) if r.ongoing => with(
                format!(
                    "in-use heap still growing at the end ({}/s from {:.1} s)",
                    format_bytes(r.bytes_per_sec as i64),
                    r.onset_s
                ),
                rise,
            ),
            reading => {
                let held = match reading {
                    Some(r) if (r.to_bytes - r.last_bytes) as f64 >= 0.5 * r.rise() as f64 => with(
                        "no sustained in-use growth: the heap spiked, then fell back".into(),
                        rise.clone(),
                    ),
                    Some(_) => with(
                        "no sustained in-use growth: the heap rose, then held".into(),
                        rise.clone(),
                    ),
                    None => "no sustained in-use growth".into(),
                };
                match storm.or(goroutines) {
                    Some(other) if reading.is_none() => with(held, Some(other)),
                    Some(other) => format!("no sustained in-use growth; {other}"),
                    None => held,
                }
            }
        };
    };
    let seen = if c.reading.is_none()
        && crate::render::verdict::faster_than_interval(c, limit).is_some()
    {
        Some("no capture saw the heap rise".to_string())
    } else {
        None
    };
    with(fate, filled.or(rise).or(seen).or(storm).or(goroutines))
}

/// Where the cycle's rise is: "the rise is in SITE (95 % of it)", or under the caller most of a
/// spread rise lies under.
fn rise_where(c: &CycleGrowth) -> Option<String> {
    let r = c.reading.as_ref()?;
    match (&r.cause, r.sites.first()) {
        (Some(k), _) => Some(format!(
            "the rise is under {} ({:.0} % of it)",
            k.name,
            k.share * 100.0
        )),
        (None, Some(s)) => Some(format!(
            "the rise is in {} ({:.0} % of it)",
            s.name,
            s.share * 100.0
        )),
        _ => None,
    }
}

/// "3 boot cycles: 2 OOM-killed, 1 restarted itself; the rise is in main.store in every cycle".
fn across_lead(g: &GrowthReport) -> String {
    let fate = format!("{} boot cycles: {}", g.cycles.len(), ends_tally(&g.cycles));
    if let Some(filled) = filled_across(&g.cycles) {
        return with(fate, Some(filled));
    }
    let (by_site, _) = rise_sites(&g.cycles);
    let rise = match by_site.as_slice() {
        [] => None,
        [(site, v)] if v.len() == g.cycles.len() => {
            Some(format!("the rise is in {site} in every cycle"))
        }
        sites => {
            let each: Vec<String> = sites
                .iter()
                .map(|(site, v)| {
                    let idx: Vec<String> = v.iter().map(|x| x.0.to_string()).collect();
                    let plural = if idx.len() == 1 { "" } else { "s" };
                    format!("{site} (cycle{plural} {})", idx.join(", "))
                })
                .collect();
            Some(format!("the rise is in {}", each.join(", ")))
        }
    };
    with(fate, rise)
}

fn with(fate: String, look: Option<String>) -> String {
    match look {
        Some(l) => format!("{fate}; {l}"),
        None => fate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headline_is_its_lead_then_its_points() {
        let h = Headline {
            lead:
                "OOM-killed 7.4 s after the first capture; the rise is in main.store (95 % of it)"
                    .into(),
            points: vec!["in-use heap grew 29.9 MiB/s".into(), "OOM-killed".into()],
        };
        assert_eq!(
            h.line(),
            "OOM-killed 7.4 s after the first capture; the rise is in main.store (95 % of it). \
             in-use heap grew 29.9 MiB/s; OOM-killed"
        );
        assert_eq!(
            h.text("  "),
            "OOM-killed 7.4 s after the first capture; the rise is in main.store (95 % of it)\n  \
             - in-use heap grew 29.9 MiB/s\n  - OOM-killed\n"
        );
    }
}
