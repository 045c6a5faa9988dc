//! The flamegraphs of a report: per boot cycle what it added to the in-use heap (first to
//! last stored heap capture, or the rise into its peak), and against the baseline the two
//! builds' in-use heaps at the compared age. Reads the profiles; `render::flame` draws.

use std::collections::BTreeMap;

use super::Analysis;
use super::scan;
use crate::decode::{self, DecodeLimits};
use crate::model::Profile;
use crate::render::flame::{self, FlameOptions};
use crate::render::report::Flamegraph;
use crate::store::{CaptureRecord, RunDir};
use crate::units;

/// A stored heap capture: its record and decoded profile.
struct Capture<'a> {
    record: &'a CaptureRecord,
    profile: Profile,
}

fn load<'a>(run: &RunDir, record: &'a CaptureRecord, limits: &DecodeLimits) -> Option<Capture<'a>> {
    let bytes = std::fs::read(run.file_path(record)?).ok()?;
    let profile = decode::decode(&bytes, limits).ok()?;
    Some(Capture { record, profile })
}

fn inuse(c: &Capture) -> Vec<(String, i64)> {
    let index = c
        .profile
        .find_sample_type("inuse_space")
        .unwrap_or_else(|| c.profile.default_sample_index());
    flame::folded(&c.profile, index)
}

fn capture_at(c: &Capture, start_ms: i64) -> String {
    format!(
        "capture #{} at {:.1} s",
        c.record.seq,
        (c.record.t_ms - start_ms) as f64 / 1000.0
    )
}

/// A growth flamegraph per boot cycle (first to last stored heap capture) and, with a
/// baseline, a differential one at the compared age. A flamegraph that cannot be drawn is
/// left out; the tables still say what grew.
pub fn draw(a: &Analysis, limits: &DecodeLimits, keep_profiler: bool) -> Vec<Flamegraph> {
    let mut out = Vec::new();
    for c in &a.growth.cycles {
        let heaps = scan::stored_heaps(&a.run, c.index);
        // Without sustained growth, the rise into the cycle's peak is what it added.
        let rise = c
            .episode
            .as_ref()
            .filter(|_| c.sites.is_empty())
            .and_then(|e| e.from_seq.zip(e.to_seq))
            .and_then(|(from, to)| {
                let find = |seq| heaps.iter().find(|r| r.seq == seq);
                find(from).zip(find(to))
            });
        let (Some(first), Some(last)) = rise
            .map(|(f, t)| (Some(f), Some(t)))
            .unwrap_or((heaps.first(), heaps.last()))
        else {
            continue;
        };
        if first.seq == last.seq {
            continue;
        }
        let (Some(first), Some(last)) = (load(&a.run, first, limits), load(&a.run, last, limits))
        else {
            continue;
        };
        let mut growth: BTreeMap<String, i64> = inuse(&last).into_iter().collect();
        for (stack, v) in inuse(&first) {
            *growth.entry(stack).or_default() -= v;
        }
        let growth: Vec<(String, i64)> = growth.into_iter().filter(|(_, v)| *v > 0).collect();
        let (growth, profiler) = if keep_profiler {
            (growth, 0)
        } else {
            crate::analyse::reduce::without_profiler(growth)
        };
        let span = format!(
            "from {} to {}{}",
            capture_at(&first, c.start_ms),
            capture_at(&last, c.start_ms),
            if rise.is_some() {
                " (the rise into the peak)"
            } else {
                ""
            }
        );
        let options = FlameOptions {
            title: format!(
                "In-use {}, boot cycle {} of {}",
                if rise.is_some() { "rise" } else { "growth" },
                c.index,
                c.build
            ),
            subtitle: Some(if profiler > 0 {
                format!(
                    "{span}; widths: bytes added; the profile writer's {} left out",
                    units::format_bytes(profiler)
                )
            } else {
                format!("{span}; widths: bytes added")
            }),
            count_name: "bytes".into(),
        };
        if let Ok(svg) = flame::flame_svg(&growth, &options) {
            out.push(Flamegraph {
                file: format!("flamegraphs/cycle-{}-growth.svg", c.index),
                cycle: Some(c.index),
                caption: format!(
                    "What boot cycle {} added to the in-use heap {span}: each frame is as wide as the bytes added under it.",
                    c.index
                ),
                svg,
            });
        }
    }
    if let Some(b) = &a.baseline {
        let age = b.comparison.age_s;
        let loaded = scan::heap_at_age(&b.run, b.comparison.a_cycle, age)
            .and_then(|r| load(&b.run, r, limits))
            .zip(
                scan::heap_at_age(&a.run, b.comparison.b_cycle, age)
                    .and_then(|r| load(&a.run, r, limits)),
            );
        if let Some((base, new)) = loaded {
            let (build, base_label) = (&b.comparison.b, &b.comparison.a);
            let options = FlameOptions {
                title: format!("In-use heap, {build} against {base_label}"),
                subtitle: Some(format!(
                    "{age:.1} s into boot cycle {} of {build} and cycle {} of {base_label}: capture #{} of {base_label}, #{} of {build}",
                    b.comparison.b_cycle, b.comparison.a_cycle, base.record.seq, new.record.seq
                )),
                count_name: "bytes".into(),
            };
            if let Ok(svg) = flame::diff_flame_svg(&inuse(&base), &inuse(&new), &options) {
                out.push(Flamegraph {
                    file: "flamegraphs/diff-vs-baseline.svg".into(),
                    cycle: None,
                    caption: format!(
                        "In-use heap of {build} against {base_label} at {age:.1} s: red grew in {build}, blue shrank."
                    ),
                    svg,
                });
            }
        }
    }
    out
}
