//! The timeline of one boot cycle as an SVG chart drawn with plotters: heap in use from the
//! manifest totals, process / cgroup memory from `memory.jsonl`, goroutines on a second axis,
//! with the limit, burst captures, failed captures, the growth onset and the kill marked.
//! A cycle of Envoy admin figures without heap profiles draws Envoy's `allocated`,
//! `heap_size` and `total_physical_bytes` instead of the heap in use.

use plotters::prelude::*;

use super::RunView;
use super::marks::{Mark, Stagger};
use crate::analyse::boundaries::{self, CycleSpan};
use crate::analyse::growth::CycleGrowth;
use crate::render::ends::end_words;
use crate::store::RecordKind;
use crate::units::format_bytes;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 340;

const HEAP: RGBColor = RGBColor(31, 119, 180);
const CGROUP: RGBColor = RGBColor(214, 39, 40);
const RSS: RGBColor = RGBColor(255, 127, 14);
const GOROUTINES: RGBColor = RGBColor(44, 160, 44);
const BURST: RGBColor = RGBColor(255, 187, 120);
const MARK: RGBColor = RGBColor(80, 80, 80);
const ENVOY_HEAP_SIZE: RGBColor = RGBColor(148, 103, 189);
const ENVOY_PHYSICAL: RGBColor = RGBColor(140, 86, 75);
const EVENT: RGBColor = RGBColor(110, 110, 110);

/// What the chart of one boot cycle draws, in seconds since the cycle's first capture.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Timeline {
    pub heap: Vec<(f64, f64)>,
    pub cgroup: Vec<(f64, f64)>,
    pub rss: Vec<(f64, f64)>,
    pub goroutines: Vec<(f64, f64)>,
    /// Envoy's `memory.allocated` (live data), when the cycle has no heap profile.
    pub envoy_allocated: Vec<(f64, f64)>,
    /// Envoy's `memory.heap_size` (reserved by tcmalloc, unmapped pages included).
    pub envoy_heap_size: Vec<(f64, f64)>,
    /// Envoy's `memory.total_physical_bytes`.
    pub envoy_physical: Vec<(f64, f64)>,
    /// Spans captured at the burst interval.
    pub bursts: Vec<(f64, f64)>,
    /// Failed capture attempts.
    pub failures: Vec<f64>,
    /// Where the kernel's OOM-kill counter moved.
    pub kills: Vec<f64>,
    /// When the target stopped answering, when it did and no kill was seen.
    pub stopped: Option<f64>,
    /// How the cycle ended, in the words of the growth report.
    pub end_words: String,
    pub onset: Option<f64>,
    pub limit: Option<u64>,
    /// Marked log lines in the cycle: (seconds, "label (log)").
    pub events: Vec<(f64, String)>,
}

impl Timeline {
    /// The series of cycle number `pos` (position in the growth report) of a run.
    pub fn of_cycle(run: &RunView, pos: usize) -> Timeline {
        let cycles = &run.growth.cycles;
        let c: &CycleGrowth = &cycles[pos];
        let at = |t_ms: i64| (t_ms - c.start_ms) as f64 / 1000.0;
        let mine = || run.records.iter().filter(|r| r.cycle == c.index);
        let mut t = Timeline {
            limit: run.growth.limit_bytes,
            onset: c.sites.first().and_then(|s| s.onset_s),
            ..Timeline::default()
        };
        let mut heap: Vec<(i64, u64, f64)> = Vec::new();
        let mut envoy: Vec<(i64, u64, [Option<f64>; 3])> = Vec::new();
        for r in mine() {
            if !r.is_ok() {
                t.failures.push(at(r.t_ms));
                continue;
            }
            match r.kind {
                RecordKind::Heap => {
                    if let Some(&v) = r.totals.get("inuse_space") {
                        heap.push((r.t_ms, r.seq, v as f64));
                    }
                }
                RecordKind::Goroutine => {
                    if let Some(&v) = r.totals.get("goroutine") {
                        t.goroutines.push((at(r.t_ms), v as f64));
                    }
                }
                RecordKind::Envoy => envoy.push((r.t_ms, r.seq, envoy_figures(&r.totals))),
                _ => {}
            }
        }
        heap.sort_by_key(|h| (h.0, h.1));
        t.heap = heap.iter().map(|&(ms, _, v)| (at(ms), v)).collect();
        if t.heap.is_empty() {
            envoy.sort_by_key(|e| (e.0, e.1));
            for (ms, _, [allocated, heap_size, physical]) in envoy {
                let x = at(ms);
                t.envoy_allocated.extend(allocated.map(|v| (x, v)));
                t.envoy_heap_size.extend(heap_size.map(|v| (x, v)));
                t.envoy_physical.extend(physical.map(|v| (x, v)));
            }
        }
        t.goroutines.sort_by(|a, b| a.0.total_cmp(&b.0));
        t.failures.sort_by(f64::total_cmp);

        // Burst spans: captures taken at an interval shorter than the run's usual one.
        let usual = run
            .info
            .and_then(|i| i.options.interval_ms)
            .or_else(|| mine().filter_map(|r| r.interval_ms).max());
        if let Some(usual) = usual {
            let mut heap_records: Vec<_> = mine()
                .filter(|r| r.kind == RecordKind::Heap)
                .map(|r| (r.t_ms, r.interval_ms.is_some_and(|i| i < usual)))
                .collect();
            heap_records.sort();
            let mut open: Option<(f64, f64)> = None;
            for (ms, burst) in heap_records {
                match (burst, open.as_mut()) {
                    (true, Some(span)) => span.1 = at(ms),
                    (true, None) => open = Some((at(ms), at(ms))),
                    (false, Some(_)) => t.bursts.extend(open.take()),
                    (false, None) => {}
                }
            }
            t.bursts.extend(open);
        }

        let spans: Vec<CycleSpan> = cycles
            .iter()
            .map(|c| CycleSpan {
                index: c.index,
                start_ms: c.start_ms,
                pid: c.pid,
            })
            .collect();
        // The cycle's own samples: by pid where known (memory of the new process before its
        // first capture included), else by time; the same rule as the growth analysis.
        // The kill is the one the growth analysis placed on this life, never a sample's flag
        // (a kill first seen under the next process's pid is not the next process's).
        t.kills.extend(c.kill_seen_s);
        for m in boundaries::cycle_memory(run.memory, &spans, c.index) {
            if !m.alive {
                continue;
            }
            if let Some(u) = m.usage {
                t.cgroup.push((at(m.t_ms), u as f64));
            }
            if let Some(r) = m.rss {
                t.rss.push((at(m.t_ms), r as f64));
            }
        }
        // Where the cgroup is known, its usage is what the limit counts: the process's RSS (its
        // binary's mapped text included, often above the limit line) is left out of the chart
        // and said among the cycle's peaks, as RSS.
        if !t.cgroup.is_empty() {
            t.rss.clear();
        }
        if t.kills.is_empty() {
            t.stopped = c.died_after_s;
            t.end_words = end_words(&c.end);
        }
        // The marked log lines from the cycle's start to the next cycle's.
        let next_ms = cycles.get(pos + 1).map_or(i64::MAX, |n| n.start_ms);
        t.events = run
            .events
            .iter()
            .filter(|e| e.t_ms >= c.start_ms && e.t_ms < next_ms)
            .map(|e| (at(e.t_ms), format!("{} ({})", e.label, e.log)))
            .collect();
        t
    }

    /// The caption of a Go heap chart, naming only the series and marks it draws.
    pub fn caption(&self) -> String {
        let mut drawn = Vec::new();
        if !self.heap.is_empty() {
            drawn.push(
                "Heap in use as each capture reported it (Go publishes it at each GC, so it lags)",
            );
        }
        match (self.rss.is_empty(), self.cgroup.is_empty()) {
            (false, false) => drawn.push("process RSS and cgroup memory sampled from outside"),
            (false, true) => drawn.push(
                "the process's RSS (its binary's mapped pages included) sampled from outside",
            ),
            (true, false) => {
                drawn.push("the cgroup's memory (what its limit counts) sampled from outside")
            }
            (true, true) => {}
        }
        if !self.goroutines.is_empty() {
            drawn.push("goroutines on the right axis");
        }
        let mut marks = Vec::new();
        if !self.bursts.is_empty() {
            marks.push("shaded: burst captures");
        }
        if !self.failures.is_empty() {
            marks.push("crosses: failed captures");
        }
        [drawn.join(", "), marks.join("; ")]
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| format!("{}.", upper_first(s)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// True when the chart draws Envoy's figures rather than a Go heap.
    pub fn is_envoy(&self) -> bool {
        !(self.envoy_allocated.is_empty()
            && self.envoy_heap_size.is_empty()
            && self.envoy_physical.is_empty())
    }

    fn x_range(&self) -> (f64, f64) {
        let xs = self
            .heap
            .iter()
            .chain(&self.cgroup)
            .chain(&self.rss)
            .chain(&self.goroutines)
            .chain(&self.envoy_allocated)
            .chain(&self.envoy_heap_size)
            .chain(&self.envoy_physical)
            .map(|p| p.0)
            .chain(self.failures.iter().copied())
            .chain(self.kills.iter().copied())
            .chain(self.events.iter().map(|e| e.0))
            .chain(self.stopped);
        let (lo, hi) = xs.fold((0.0f64, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let pad = (hi - lo) * 0.02;
        (lo - pad, hi + pad)
    }

    fn y_max(&self) -> f64 {
        let data = self
            .heap
            .iter()
            .chain(&self.cgroup)
            .chain(&self.rss)
            .chain(&self.envoy_allocated)
            .chain(&self.envoy_heap_size)
            .chain(&self.envoy_physical)
            .map(|p| p.1)
            .fold(1.0f64, f64::max);
        // The limit is drawn when memory comes within sight of it.
        let top = match self.limit {
            Some(l) if (l as f64) < data * 3.0 => data.max(l as f64),
            _ => data,
        };
        top * 1.08
    }
}

/// Envoy's allocated, heap size and physical bytes from a record's totals: `/memory` when it
/// has tcmalloc figures (heap_size above 0), else the `/stats` gauges.
fn envoy_figures(totals: &std::collections::BTreeMap<String, i64>) -> [Option<f64>; 3] {
    let get = |k: &str| totals.get(k).copied().filter(|&v| v > 0).map(|v| v as f64);
    if get("memory.heap_size").is_some() {
        [
            get("memory.allocated"),
            get("memory.heap_size"),
            get("memory.total_physical_bytes").or_else(|| get("server.memory_physical_size")),
        ]
    } else {
        [
            get("server.memory_allocated"),
            get("server.memory_heap_size"),
            get("server.memory_physical_size"),
        ]
    }
}

/// Draws the chart; the SVG text, or a short note when plotters fails.
pub fn svg(timeline: &Timeline, caption: &str) -> String {
    let mut out = String::new();
    let drawn = draw(timeline, caption, &mut out);
    match drawn {
        Ok(()) => out,
        Err(e) => crate::markup!("<p class=\"note\">chart not drawn: {}</p>", e).into_string(),
    }
}

fn draw(t: &Timeline, caption: &str, out: &mut String) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(out, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (x0, x1) = t.x_range();
    let ymax = t.y_max();
    let gmax = t.goroutines.iter().map(|p| p.1).fold(10.0f64, f64::max) * 1.15;
    let decimals = tick_decimals(x1 - x0);
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .right_y_label_area_size(if t.goroutines.is_empty() { 0 } else { 56 })
        .build_cartesian_2d(x0..x1, 0.0..ymax)
        .map_err(|e| err(&e))?
        .set_secondary_coord(x0..x1, 0.0..gmax);
    chart
        .configure_mesh()
        .x_desc("seconds since the cycle's first capture")
        .y_desc("bytes")
        .y_label_formatter(&|v| format_bytes(*v as i64))
        .x_labels(X_LABELS)
        .x_label_formatter(&|v| format!("{v:.decimals$}"))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    if !t.goroutines.is_empty() {
        chart
            .configure_secondary_axes()
            .y_desc("goroutines")
            .label_style(("sans-serif", 12).into_font().color(&GOROUTINES))
            .draw()
            .map_err(|e| err(&e))?;
    }

    for &(a, b) in &t.bursts {
        let b = if b > a { b } else { a + 0.05 };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, 0.0), (b, ymax)],
                BURST.mix(0.25).filled(),
            )))
            .map_err(|e| err(&e))?;
    }
    if let Some(&(a, _)) = t.bursts.first() {
        chart
            .draw_series(std::iter::once(Text::new(
                "burst",
                (a, ymax * 0.97),
                ("sans-serif", 11)
                    .into_font()
                    .color(&RGBColor(180, 100, 20)),
            )))
            .map_err(|e| err(&e))?;
    }
    if let Some(limit) = t.limit.map(|l| l as f64).filter(|&l| l <= ymax) {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x0, limit), (x1, limit)],
                CGROUP.mix(0.6).stroke_width(1),
            )))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("limit {}", format_bytes(limit as i64)),
                (x0 + (x1 - x0) * 0.3, limit * 0.985),
                ("sans-serif", 11).into_font().color(&CGROUP),
            )))
            .map_err(|e| err(&e))?;
    }

    let lines = [
        (&t.cgroup, CGROUP, "cgroup memory"),
        (&t.rss, RSS, "process RSS"),
        (&t.envoy_heap_size, ENVOY_HEAP_SIZE, "heap_size (Envoy)"),
        (
            &t.envoy_physical,
            ENVOY_PHYSICAL,
            "total_physical_bytes (Envoy)",
        ),
        (&t.envoy_allocated, HEAP, "allocated (Envoy)"),
        (&t.heap, HEAP, "heap in use (profile)"),
    ];
    for (points, color, label) in lines {
        if points.is_empty() {
            continue;
        }
        // One path per stretch with data: no line across a gap.
        chart
            .draw_series(
                boundaries::segments(points)
                    .into_iter()
                    .map(|s| PathElement::new(s.to_vec(), color.stroke_width(2))),
            )
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    for points in [&t.heap, &t.envoy_allocated] {
        if !points.is_empty() {
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 2, HEAP.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    if !t.goroutines.is_empty() {
        chart
            .draw_secondary_series(
                boundaries::segments(&t.goroutines)
                    .into_iter()
                    .map(|s| PathElement::new(s.to_vec(), GOROUTINES.stroke_width(1))),
            )
            .map_err(|e| err(&e))?
            .label("goroutines (right axis)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], GOROUTINES));
    }
    if !t.failures.is_empty() {
        chart
            .draw_series(
                t.failures
                    .iter()
                    .map(|&x| Cross::new((x, ymax * 0.02), 4, CGROUP.stroke_width(2))),
            )
            .map_err(|e| err(&e))?
            .label("failed capture")
            .legend(|(x, y)| Cross::new((x + 9, y), 4, CGROUP.stroke_width(2)));
    }

    let mut marks: Vec<(f64, String, RGBColor)> = Vec::new();
    if let Some(o) = t.onset.filter(|&o| o > 0.0) {
        marks.push((o, format!("growth onset {o:.1} s"), HEAP));
    }
    for &k in &t.kills {
        marks.push((k, format!("OOM kill {k:.1} s"), CGROUP));
    }
    if let Some(s) = t.stopped {
        marks.push((s, format!("{} {s:.1} s", t.end_words), MARK));
    }
    let solid = marks.len();
    for (x, label) in &t.events {
        marks.push((*x, format!("{label} {x:.1} s"), EVENT));
    }
    let marks: Vec<Mark> = marks
        .into_iter()
        .enumerate()
        .map(|(i, (x, label, color))| Mark {
            x,
            label,
            color,
            dashed: i >= solid,
        })
        .collect();
    let stagger = Stagger {
        top: 0.55,
        step: 0.07,
        cycle: usize::MAX,
    };
    super::marks::draw(&mut chart, &marks, (x0, x1), ymax, &stagger)?;
    super::marks::legend(&mut chart)?;
    root.present().map_err(|e| err(&e))?;
    drop(chart);
    drop(root);
    Ok(())
}

/// Labels on the time axis, at most.
const X_LABELS: usize = 10;

/// The step between time ticks: 1, 2 or 5 times a power of ten, at most [`X_LABELS`] of
/// them over the span (as plotters places them).
fn tick_step(span: f64) -> f64 {
    let least = span / X_LABELS as f64;
    if least <= 0.0 || !least.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(least.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= least - 1e-12)
        .unwrap_or(10.0 * power)
}

/// Decimals of the time axis's labels, so that no two ticks read the same ("0 0 1 2 2" on a
/// short cycle) and none carries a useless ".0".
fn tick_decimals(span: f64) -> usize {
    let step = tick_step(span);
    (-(step.log10().floor()) as i64).clamp(0, 3) as usize
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ticks_of_a_short_cycle_never_read_the_same() {
        for span in [0.6, 3.0, 7.4, 12.0, 95.0, 3600.0] {
            let d = tick_decimals(span);
            let nice = tick_step(span);
            let labels: Vec<String> = (0..=X_LABELS)
                .map(|k| format!("{:.d$}", k as f64 * nice))
                .collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(unique, labels, "span {span}: {labels:?}");
        }
        // The step format of the old labels: "{:.0}" read 0 0 1 2 2 2 3 4 at 0.5 s steps.
        assert_eq!(tick_decimals(3.0), 1);
        assert_eq!(tick_decimals(7.4), 0);
    }

    #[test]
    fn the_caption_names_only_what_is_drawn() {
        const HEAP: &str =
            "Heap in use as each capture reported it (Go publishes it at each GC, so it lags)";
        let points = vec![(0.0, 1e6), (1.0, 2e6)];
        let mut t = Timeline {
            heap: points.clone(),
            ..Timeline::default()
        };
        assert_eq!(t.caption(), format!("{HEAP}."));
        t.failures = vec![0.5];
        assert_eq!(t.caption(), format!("{HEAP}. Crosses: failed captures."));
        t.rss = points.clone();
        assert_eq!(
            t.caption(),
            format!(
                "{HEAP}, the process's RSS (its binary's mapped pages included) sampled from \
                 outside. Crosses: failed captures."
            )
        );
        t.rss.clear();
        t.cgroup = points.clone();
        t.goroutines = points;
        t.bursts = vec![(0.2, 0.8)];
        assert_eq!(
            t.caption(),
            format!(
                "{HEAP}, the cgroup's memory (what its limit counts) sampled from outside, \
                 goroutines on the right axis. Shaded: burst captures; crosses: failed captures."
            )
        );
    }

    #[test]
    fn no_line_is_drawn_across_a_gap_with_no_data() {
        let cgroup = "stroke=\"#D62728\"";
        let mut t = Timeline {
            cgroup: (0..20).map(|i| (i as f64 * 0.5, 100e6)).collect(),
            ..Timeline::default()
        };
        let whole = svg(&t, "steady");
        // Polylines in the cgroup colour (the legend's sample line is one of them).
        let lines = |s: &str| {
            s.split("<polyline")
                .skip(1)
                .filter(|tag| tag[..tag.find('>').unwrap_or(tag.len())].contains(cgroup))
                .count()
        };
        let before = lines(&whole);
        assert!(whole.contains(cgroup), "the cgroup line is drawn");
        // Nine minutes without a sample, then more: two stretches, one more line, none across.
        t.cgroup
            .extend((0..20).map(|i| (550.0 + i as f64 * 0.5, 120e6)));
        let gapped = svg(&t, "gap");
        assert_eq!(lines(&gapped), before + 1, "{gapped}");
    }
}
