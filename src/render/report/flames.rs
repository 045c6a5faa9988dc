//! The report's flamegraphs, drawn from what the pipeline found to draw: per boot cycle what it
//! added to the in-use heap, and against a baseline the two builds' in-use heaps at the
//! compared age. Captions, and the comparison's title, are worded here; a graph inferno cannot
//! draw is left out (the tables still say what grew).

use super::Flamegraph;
use crate::render::flame::{self, FlameOptions};
use crate::render::flame_titles::{self, FlameTitle};

/// A capture a flamegraph starts or ends at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaptureAt {
    pub seq: u64,
    /// Seconds since the first capture of its boot cycle.
    pub age_s: f64,
}

/// One flamegraph the report shows, with its stacks.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportFlame {
    /// What a boot cycle added to the in-use heap between two of its captures.
    Growth {
        cycle: u32,
        from: CaptureAt,
        to: CaptureAt,
        /// The rise into the cycle's heap peak rather than first to last.
        rise: bool,
        /// The stacks that gained, each by what it gained.
        added: Vec<(String, i64)>,
        /// What the title names, as `flame --growth` titles the same graph.
        title: FlameTitle,
    },
    /// The in-use heap of the run's build against the baseline's, at the compared age.
    AgainstBaseline {
        build: String,
        base_label: String,
        age_s: f64,
        cycle: u32,
        base_cycle: u32,
        seq: u64,
        base_seq: u64,
        base: Vec<(String, i64)>,
        new: Vec<(String, i64)>,
    },
}

/// Draws each flamegraph; one that cannot be drawn is left out.
pub fn draw(flames: &[ReportFlame]) -> Vec<Flamegraph> {
    flames.iter().filter_map(draw_one).collect()
}

fn draw_one(f: &ReportFlame) -> Option<Flamegraph> {
    match f {
        ReportFlame::Growth {
            cycle,
            from,
            to,
            rise,
            added,
            title,
        } => {
            let at = |c: &CaptureAt| format!("capture #{} at {:.1} s", c.seq, c.age_s);
            let from_words = match title {
                FlameTitle::Growth {
                    from_empty: true, ..
                } => format!("since it began ({} held nothing yet)", at(from)),
                _ => format!("from {}", at(from)),
            };
            let span = format!(
                "{from_words} to {}{}",
                at(to),
                if *rise {
                    " (the rise into the peak)"
                } else {
                    ""
                }
            );
            Some(Flamegraph {
                file: format!("flamegraphs/cycle-{cycle}-growth.svg"),
                cycle: Some(*cycle),
                caption: format!(
                    "What boot cycle {cycle} added to the in-use heap {span}: each frame is as wide as the bytes added under it."
                ),
                svg: flame::flame_svg(added, &flame_titles::options(title)).ok()?,
            })
        }
        ReportFlame::AgainstBaseline {
            build,
            base_label,
            age_s,
            cycle,
            base_cycle,
            seq,
            base_seq,
            base,
            new,
        } => {
            let options = FlameOptions {
                title: format!("In-use heap, {build} against {base_label}"),
                subtitle: Some(format!(
                    "{age_s:.1} s into boot cycle {cycle} of {build} and cycle {base_cycle} of {base_label}: capture #{base_seq} of {base_label}, #{seq} of {build}"
                )),
                count_name: "bytes".into(),
            };
            Some(Flamegraph {
                file: "flamegraphs/diff-vs-baseline.svg".into(),
                cycle: None,
                caption: format!(
                    "In-use heap of {build} against {base_label} at {age_s:.1} s: red grew in {build}, blue shrank."
                ),
                svg: flame::diff_flame_svg(base, new, &options).ok()?,
            })
        }
    }
}
