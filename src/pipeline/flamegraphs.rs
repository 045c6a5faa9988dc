//! The flamegraphs of a report: per boot cycle what it added to the in-use heap (first to
//! last stored heap capture, or the rise into its peak), and against the baseline the two
//! builds' in-use heaps at the compared age. Reads the profiles; `render::flame` draws.

use std::collections::HashMap;

use super::Analysis;
use super::captures::{StoredCapture, stored_captures};
use super::flame::{GrowthSpan, Stacks, growth_graph};
use super::scan;
use crate::analyse::growth::CycleGrowth;
use crate::decode::{self, DecodeLimits};
use crate::model::Profile;
use crate::render::flame::{self, FlameOptions};
use crate::render::report::Flamegraph;
use crate::store::{CaptureRecord, RecordKind, RunDir};

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

/// What grew from one capture's stacks to a later one's: the stacks that gained (sorted), the
/// profile writer's own stacks left out unless `keep_profiler`, and what shrank (not drawn).
/// The one computation behind `flame --growth` and the report's growth flamegraphs.
pub struct StackGrowth {
    pub added: Vec<(String, i64)>,
    /// What the profile writer's own stacks added, left out of `added`.
    pub profiler: i64,
    pub shrunk_stacks: usize,
    pub shrunk_by: i64,
}

pub fn stack_growth(
    from: &[(String, i64)],
    to: &[(String, i64)],
    keep_profiler: bool,
) -> StackGrowth {
    let mut change: HashMap<&str, i64> = HashMap::new();
    for (stack, v) in from {
        *change.entry(stack).or_default() -= v;
    }
    for (stack, v) in to {
        *change.entry(stack).or_default() += v;
    }
    let mut added: Vec<(String, i64)> = change
        .iter()
        .filter(|(_, d)| **d > 0)
        .map(|(s, d)| (s.to_string(), *d))
        .collect();
    added.sort();
    let shrunk: Vec<i64> = change.values().copied().filter(|d| *d < 0).collect();
    let (added, profiler) = if keep_profiler {
        (added, 0)
    } else {
        crate::analyse::reduce::without_profiler(added)
    };
    StackGrowth {
        added,
        profiler,
        shrunk_stacks: shrunk.len(),
        shrunk_by: -shrunk.iter().sum::<i64>(),
    }
}

/// The captures a boot cycle's growth flamegraph spans when it is not first to last: the rise
/// into its heap peak (seqs before the rise and at the peak), when the cycle has no sustained
/// growth but such a rise.
pub fn rise_into_peak(c: &CycleGrowth) -> Option<(u64, u64)> {
    if !c.sites.is_empty() {
        return None;
    }
    let e = c.episode.as_ref()?;
    e.from_seq.zip(e.to_seq)
}

/// A growth flamegraph per boot cycle ([`GrowthSpan::of_cycle`], drawn as `flame --growth`
/// draws it) and, with a
/// baseline, a differential one at the compared age. A flamegraph that cannot be drawn is
/// left out; the tables still say what grew.
pub fn draw(a: &Analysis, limits: &DecodeLimits, keep_profiler: bool) -> Vec<Flamegraph> {
    let mut out = Vec::new();
    let captures = stored_captures(&a.run);
    for c in &a.growth.cycles {
        let heaps: Vec<&StoredCapture> = captures
            .iter()
            .filter(|s| s.record.kind == RecordKind::Heap && s.record.cycle == c.index)
            .collect();
        // Without sustained growth, the rise into the cycle's peak is what it added.
        let Some(span) = GrowthSpan::of_cycle(&heaps, rise_into_peak(c)) else {
            continue;
        };
        let Ok(graph) = growth_graph(&a.run, &span, None, keep_profiler, limits) else {
            continue;
        };
        let Stacks::Plain(growth) = &graph.stacks else {
            continue;
        };
        let at = |s: &StoredCapture| format!("capture #{} at {:.1} s", s.record.seq, s.age_s);
        let span = format!(
            "from {} to {}{}",
            at(span.from),
            at(span.to),
            if span.rise {
                " (the rise into the peak)"
            } else {
                ""
            }
        );
        if let Ok(svg) = flame::flame_svg(growth, &graph.options) {
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
