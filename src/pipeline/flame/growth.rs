//! The one growth flamegraph, of `flame --growth` and of the report: what a boot cycle added
//! between two of its captures, by default first to last or the rise into its peak.

use super::words::{amount, count_name, noun, signed, stacks};
use super::{FlameError, FlameGraph, Stacks, default_sample, load_profile, name_files};
use crate::analyse::diff;
use crate::analyse::select;
use crate::decode::DecodeLimits;
use crate::model::aggregate::folded;
use crate::pipeline::captures::StoredCapture;
use crate::pipeline::flamegraphs::stack_growth;
use crate::pipeline::scan;
use crate::render::flame::FlameOptions;
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
    /// rise into its peak (`rise`, from [`rise_into_peak`](super::flamegraphs::rise_into_peak))
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
    let count = count_name(&tp, ti);
    let growth = stack_growth(&folded(&fp, fi), &folded(&tp, ti), keep_profiler);
    let (added_stacks, profiler) = (growth.added, growth.profiler);
    let added: i64 = added_stacks.iter().map(|(_, v)| v).sum();
    let mut subtitle = format!(
        "added from capture #{} ({:.1} s) to #{} ({:.1} s): {} in {}",
        from.record.seq,
        from.age_s,
        to.record.seq,
        to.age_s,
        signed(added, &count),
        stacks(added_stacks.len())
    );
    if profiler > 0 {
        subtitle.push_str(&format!(
            "; the profile writer's {} left out (--keep-profiler keeps it)",
            amount(profiler, &count)
        ));
    }
    if span.rise {
        subtitle.push_str(" (the rise into the peak: the cycle has no sustained growth)");
    }
    if growth.shrunk_stacks > 0 {
        subtitle.push_str(&format!(
            "; {} shrank by {} (not drawn)",
            stacks(growth.shrunk_stacks),
            amount(growth.shrunk_by, &count)
        ));
    }
    let cycle = to.record.cycle;
    let options = FlameOptions {
        title: format!(
            "Growth of {}, boot cycle {cycle} of {}",
            noun(&tp, ti),
            cycle_build(run, cycle)
        ),
        subtitle: Some(subtitle),
        count_name: count,
    };
    Ok(FlameGraph {
        stacks: Stacks::Plain(added_stacks),
        options,
    })
}

/// The build a boot cycle ran, as `growth` and `compare` name it.
fn cycle_build(run: &RunDir, cycle: u32) -> String {
    let label = scan::run_label(run);
    select::cycle_builds(&run.manifest.records, &label)
        .into_iter()
        .find(|b| b.index == cycle)
        .map_or(label, |b| b.label)
}
