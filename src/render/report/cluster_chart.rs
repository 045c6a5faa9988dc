//! The shared timeline of a cluster run as an SVG chart: every node's memory on one time axis
//! (heap in use from its captures, and cgroup or process memory where it was sampled), each
//! node's kills and exits marked in its colour, and the marked log lines (`events.jsonl`) as
//! labelled vertical lines.

use plotters::prelude::*;

use super::RunView;
use super::marks::{Mark, Stagger};
use super::markup::Markup;
use crate::analyse::boundaries;
use crate::markup;
use crate::render::ends::end_words;
use crate::store::RecordKind;
use crate::store::cluster::Event;
use crate::units::format_bytes;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 400;
const EVENT: RGBColor = RGBColor(90, 90, 90);

/// One colour per node, in run.json order (repeating past ten nodes).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One node's series, in seconds since the timeline's start.
#[derive(Debug, Default, Clone)]
pub struct NodeSeries {
    pub name: String,
    pub heap: Vec<(f64, f64)>,
    /// cgroup usage where sampled, else the process's RSS.
    pub memory: Vec<(f64, f64)>,
    /// Where a boot cycle ended: (seconds, "OOM kill" or how it ended).
    pub ends: Vec<(f64, String)>,
}

/// What the shared chart draws.
#[derive(Debug, Default, Clone)]
pub struct SharedTimeline {
    /// Unix ms of the time axis's zero.
    pub start_ms: i64,
    pub nodes: Vec<NodeSeries>,
    /// (seconds, label, log name) of each marked log line.
    pub events: Vec<(f64, String, String)>,
}

impl SharedTimeline {
    /// Every node's series from its run, and the events, on one axis starting at the earliest
    /// moment any of them knows (or `started_ms`, when earlier).
    pub fn of(started_ms: i64, nodes: &[(&str, &RunView)], events: &[Event]) -> SharedTimeline {
        let start_ms = nodes
            .iter()
            .flat_map(|(_, r)| {
                r.records
                    .iter()
                    .map(|x| x.t_ms)
                    .chain(r.memory.iter().map(|m| m.t_ms))
            })
            .chain(events.iter().map(|e| e.t_ms))
            .chain(std::iter::once(started_ms))
            .min()
            .unwrap_or(started_ms);
        let at = |t_ms: i64| (t_ms - start_ms) as f64 / 1000.0;
        let nodes = nodes
            .iter()
            .map(|(name, run)| {
                let mut heap: Vec<(i64, u64, f64)> = run
                    .records
                    .iter()
                    .filter(|r| r.is_ok() && r.kind == RecordKind::Heap)
                    .filter_map(|r| {
                        r.totals
                            .get("inuse_space")
                            .map(|&v| (r.t_ms, r.seq, v as f64))
                    })
                    .collect();
                heap.sort_by_key(|h| (h.0, h.1));
                let cgroup = run.memory.iter().any(|m| m.usage.is_some());
                let memory = run
                    .memory
                    .iter()
                    .filter(|m| m.alive)
                    .filter_map(|m| {
                        if cgroup { m.usage } else { m.rss }.map(|v| (at(m.t_ms), v as f64))
                    })
                    .collect();
                let ends = run
                    .growth
                    .cycles
                    .iter()
                    .filter_map(|c| {
                        let died = c.died_after_s?;
                        let words = if c.killed {
                            "OOM kill".to_string()
                        } else {
                            end_words(&c.end)
                        };
                        Some((at(c.start_ms) + died, words))
                    })
                    .collect();
                NodeSeries {
                    name: name.to_string(),
                    heap: heap.iter().map(|&(t, _, v)| (at(t), v)).collect(),
                    memory,
                    ends,
                }
            })
            .collect();
        SharedTimeline {
            start_ms,
            nodes,
            events: events
                .iter()
                .map(|e| (at(e.t_ms), e.label.clone(), e.log.clone()))
                .collect(),
        }
    }

    fn x_max(&self) -> f64 {
        let xs = self.nodes.iter().flat_map(|n| {
            n.heap
                .iter()
                .chain(n.memory.iter())
                .map(|p| p.0)
                .chain(n.ends.iter().map(|e| e.0))
        });
        xs.chain(self.events.iter().map(|e| e.0))
            .fold(1.0f64, f64::max)
            * 1.02
    }

    fn y_max(&self) -> f64 {
        self.nodes
            .iter()
            .flat_map(|n| n.heap.iter().chain(n.memory.iter()).map(|p| p.1))
            .fold(1024.0 * 1024.0, f64::max)
            * 1.12
    }
}

/// The node's colour by its position.
pub fn colour(pos: usize) -> RGBColor {
    PALETTE[pos % PALETTE.len()]
}

impl SharedTimeline {
    /// What the chart draws, in words, naming only what is there: the thin memory line where
    /// it was sampled (for which nodes, when not all), the ends, the events.
    pub fn caption(&self, from: &str) -> Markup {
        let mut text = markup!(
            "Every node's memory on one time axis from {}: heap in use (thick)",
            from
        );
        let sampled: Vec<Markup> = self
            .nodes
            .iter()
            .filter(|n| !n.memory.is_empty())
            .map(|n| markup!("{}", n.name))
            .collect();
        if sampled.len() == self.nodes.len() && !sampled.is_empty() {
            text.push(&Markup::literal(" and cgroup or process memory (thin)"));
        } else if !sampled.is_empty() {
            text.push(&markup!(
                " and cgroup or process memory (thin; sampled for {} only)",
                Markup::join(&sampled, ", ")
            ));
        }
        text.push(&Markup::literal(" in the node's colour"));
        if self.nodes.iter().any(|n| !n.ends.is_empty()) {
            text.push(&Markup::literal(
                ", a vertical line where a node was OOM-killed or ended",
            ));
        }
        if !self.events.is_empty() {
            text.push(&Markup::literal(
                ", dashed grey lines at the marked log lines",
            ));
        }
        text.push(&Markup::literal("."));
        text
    }
}

/// The chart as SVG text; a note in its place when it cannot be drawn.
pub fn svg(t: &SharedTimeline, caption: &str) -> String {
    let mut out = String::new();
    match draw(t, caption, &mut out) {
        Ok(()) => out,
        Err(e) => markup!("<p class=\"note\">chart not drawn: {}</p>", e).into_string(),
    }
}

fn draw(t: &SharedTimeline, caption: &str, out: &mut String) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(out, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (x1, ymax) = (t.x_max(), t.y_max());
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x1, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run's first moment")
        .y_desc("bytes")
        .y_label_formatter(&|v| format_bytes(*v as i64))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;

    for (pos, n) in t.nodes.iter().enumerate() {
        let c = colour(pos);
        for (points, width, what) in [(&n.heap, 2, "heap in use"), (&n.memory, 1, "memory")] {
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(
                    boundaries::segments(points)
                        .into_iter()
                        .map(|s| PathElement::new(s.to_vec(), c.stroke_width(width))),
                )
                .map_err(|e| err(&e))?
                .label(format!("{} {what}", n.name))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(width))
                });
        }
    }

    // Vertical marks: each node's ends in its colour, then the events in grey.
    let mut marks: Vec<(f64, String, RGBColor)> = Vec::new();
    for (pos, n) in t.nodes.iter().enumerate() {
        for (x, words) in &n.ends {
            marks.push((*x, format!("{} {words} {x:.1} s", n.name), colour(pos)));
        }
    }
    for (x, label, log) in &t.events {
        marks.push((*x, format!("{label} ({log}) {x:.1} s"), EVENT));
    }
    let marks: Vec<Mark> = marks
        .into_iter()
        .map(|(x, label, color)| Mark {
            x,
            label,
            color,
            dashed: color == EVENT,
        })
        .collect();
    let stagger = Stagger {
        top: 0.95,
        step: 0.06,
        cycle: 12,
    };
    super::marks::draw(&mut chart, &marks, (0.0, x1), ymax, &stagger)?;
    super::marks::legend(&mut chart)?;
    root.present().map_err(|e| err(&e))?;
    drop(chart);
    drop(root);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_its_ends_and_the_events_are_drawn_with_their_labels() {
        let t = SharedTimeline {
            start_ms: 0,
            nodes: vec![
                NodeSeries {
                    name: "ctrl1".into(),
                    heap: vec![(0.0, 1e6), (5.0, 2e6)],
                    ..NodeSeries::default()
                },
                NodeSeries {
                    name: "ctrl2".into(),
                    heap: vec![(1.0, 1e6), (4.0, 9e6)],
                    memory: vec![(1.0, 2e6), (4.0, 10e6)],
                    ends: vec![(4.5, "OOM kill".into())],
                },
            ],
            events: vec![(2.0, "read-only".into(), "ctrl1".into())],
        };
        let svg = svg(&t, "cluster");
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "ctrl1 heap in use",
            "ctrl2 memory",
            "ctrl2 OOM kill 4.5 s",
            "read-only (ctrl1) 2.0 s",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
    }

    #[test]
    fn the_caption_names_only_what_is_drawn() {
        let node = |name: &str, memory: bool| NodeSeries {
            name: name.into(),
            heap: vec![(0.0, 1e6), (5.0, 2e6)],
            memory: if memory { vec![(0.0, 2e6)] } else { Vec::new() },
            ..NodeSeries::default()
        };
        let mut t = SharedTimeline {
            start_ms: 0,
            nodes: vec![node("ctrl1", false), node("ctrl2", false)],
            events: Vec::new(),
        };
        let from = "Every node's memory on one time axis from T: heap in use (thick)";
        assert_eq!(
            t.caption("T").as_str(),
            format!("{from} in the node's colour.")
        );
        t.nodes[1] = node("<ctrl2>", true);
        assert_eq!(
            t.caption("T").as_str(),
            format!(
                "{from} and cgroup or process memory (thin; sampled for &lt;ctrl2&gt; only) in \
                 the node's colour."
            )
        );
        t.nodes[0] = node("ctrl1", true);
        t.nodes[0].ends = vec![(4.5, "OOM kill".into())];
        t.events = vec![(2.0, "read-only".into(), "ctrl1".into())];
        assert_eq!(
            t.caption("T").as_str(),
            format!(
                "{from} and cgroup or process memory (thin) in the node's colour, a vertical \
                 line where a node was OOM-killed or ended, dashed grey lines at the marked log \
                 lines."
            )
        );
    }
}
