//! The one growth flamegraph, of `flame --growth` and of the report: what a boot cycle added
//! between two of its captures, by default first to last or the rise into its peak.

use super::words::{capture, measure};
use super::{FlameError, FlameGraph, Stacks, default_sample, load_profile, name_files};
use crate::analyse::diff;
use crate::analyse::select;
use crate::decode::DecodeLimits;
use crate::model::aggregate::folded;
use crate::pipeline::captures::StoredCapture;
use crate::pipeline::flamegraphs::stack_growth;
use crate::pipeline::scan;
use crate::render::flame_titles::FlameTitle;
use crate::store::RunDir;

/// The two captures of one boot cycle a growth flamegraph spans.
pub struct GrowthSpan<'c, 'a> {
    pub from: &'c StoredCapture<'a>,
    pub to: &'c StoredCapture<'a>,
    /// The rise into the cycle's heap peak rather than first to last.
    pub rise: bool,
}

impl<'c, 'a> GrowthSpan<'c, 'a> {
    /// What a boot cycle added by default, from its stored heap captures (time order): the
    /// rise into its peak (`rise`, from [`rise_into_peak`](crate::pipeline::flamegraphs::rise_into_peak))
    /// when both its captures are stored, else first to last. `None` with fewer than two.
    pub fn of_cycle(in_cycle: &[&'c StoredCapture<'a>], rise: Option<(u64, u64)>) -> Option<Self> {
        let find = |seq| in_cycle.iter().find(|c| c.record.seq == seq).copied();
        if let Some((from, to)) = rise.and_then(|(f, t)| find(f).zip(find(t))) {
            return Some(GrowthSpan {
                from,
                to,
                rise: true,
            });
        }
        match in_cycle {
            [from, .., to] => Some(GrowthSpan {
                from,
                to,
                rise: false,
            }),
            _ => None,
        }
    }
}

/// The one growth flamegraph, of `flame --growth` and of the report: the stacks that grew
/// from one capture to the other ([`stack_growth`]), titled with the boot cycle's build.
pub fn growth_graph(
    run: &RunDir,
    span: &GrowthSpan<'_, '_>,
    sample: Option<&str>,
    keep_profiler: bool,
    limits: &DecodeLimits,
) -> Result<FlameGraph, FlameError> {
    let (from, to) = (span.from, span.to);
    let (fp, tp) = (
        load_profile(&from.path, limits)?,
        load_profile(&to.path, limits)?,
    );
    let wanted = sample.or(default_sample(to));
    let (fi, ti) = diff::sample_indices(&fp, &tp, wanted).map_err(|e| {
        name_files(
            e,
            &from.path.display().to_string(),
            &to.path.display().to_string(),
        )
    })?;
    let before = folded(&fp, fi);
    // A life's first capture taken before its runtime published any profile holds nothing:
    // what the graph draws is then all the life allocated and kept since it began.
    let from_empty = before.iter().all(|(_, v)| *v == 0);
    let growth = stack_growth(&before, &folded(&tp, ti), keep_profiler);
    let added: i64 = growth.added.iter().map(|(_, v)| v).sum();
    let cycle = to.record.cycle;
    Ok(FlameGraph {
        title: FlameTitle::Growth {
            measure: measure(&tp, ti),
            build: cycle_build(run, cycle),
            from: capture(from),
            to: capture(to),
            added,
            added_stacks: growth.added.len(),
            profiler: growth.profiler,
            rise: span.rise,
            from_empty,
            shrunk_stacks: growth.shrunk_stacks,
            shrunk_by: growth.shrunk_by,
        },
        stacks: Stacks::Plain(growth.added),
    })
}

/// The build a boot cycle ran, as `growth` and `compare` name it.
fn cycle_build(run: &RunDir, cycle: u32) -> String {
    let label = scan::build_label(run);
    select::cycle_builds(&run.manifest.records, &label)
        .into_iter()
        .find(|b| b.index == cycle)
        .map_or(label, |b| b.label)
}
