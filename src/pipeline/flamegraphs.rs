//! The flamegraphs of a report: per boot cycle what it added to the in-use heap (first to
//! last stored heap capture, or the rise into its peak), and against the baseline the two
//! builds' in-use heaps at the compared age. Reads the profiles; `render::report::flames`
//! words and draws.

use std::collections::HashMap;

use super::Analysis;
use super::captures::{StoredCapture, stored_captures};
use super::flame::{GrowthSpan, Stacks, growth_graph};
use super::scan;
use crate::analyse::growth::CycleGrowth;
use crate::decode::{self, DecodeLimits};
use crate::model::Profile;
use crate::model::aggregate;
use crate::render::report::flames::{CaptureAt, ReportFlame};
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
    aggregate::folded(&c.profile, index)
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

/// What the report's flamegraphs show ([`render::report::flames`](crate::render::report::flames)
/// draws them): per boot cycle what it added ([`GrowthSpan::of_cycle`], as `flame --growth`
/// takes it) and, with a baseline, both builds' in-use heaps at the compared age. A graph whose
/// captures cannot be read is left out; the tables still say what grew.
pub fn report_flames(a: &Analysis, limits: &DecodeLimits, keep_profiler: bool) -> Vec<ReportFlame> {
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
        let Stacks::Plain(added) = graph.stacks else {
            continue;
        };
        let at = |s: &StoredCapture| CaptureAt {
            seq: s.record.seq,
            age_s: s.age_s,
        };
        out.push(ReportFlame::Growth {
            cycle: c.index,
            from: at(span.from),
            to: at(span.to),
            rise: span.rise,
            added,
            title: graph.title,
        });
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
            out.push(ReportFlame::AgainstBaseline {
                build: b.comparison.b.clone(),
                base_label: b.comparison.a.clone(),
                age_s: age,
                cycle: b.comparison.b_cycle,
                base_cycle: b.comparison.a_cycle,
                seq: new.record.seq,
                base_seq: base.record.seq,
                base: inuse(&base),
                new: inuse(&new),
            });
        }
    }
    out
}
