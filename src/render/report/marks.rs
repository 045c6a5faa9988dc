//! What the report's charts share: vertical marks (a target's ends, growth onsets, marked log
//! lines) with their staggered labels, and the legend that closes a chart.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One vertical line across the chart, labelled.
pub struct Mark {
    pub x: f64,
    pub label: String,
    pub color: RGBColor,
    /// Dashed: a marked log line, read apart from the target's own ends.
    pub dashed: bool,
}

/// Where the labels of successive marks sit, as shares of the chart's height: the first at
/// `top`, each next one `step` lower, starting again at the top after `cycle` of them.
pub struct Stagger {
    pub top: f64,
    pub step: f64,
    pub cycle: usize,
}

/// Draws the marks over `x0..x1` and `0..ymax`, labels on the side that keeps them inside.
pub fn draw(
    chart: &mut Chart<'_, '_>,
    marks: &[Mark],
    (x0, x1): (f64, f64),
    ymax: f64,
    stagger: &Stagger,
) -> Result<(), String> {
    for (i, m) in marks.iter().enumerate() {
        let points = vec![(m.x, 0.0), (m.x, ymax)];
        if m.dashed {
            chart
                .draw_series(DashedLineSeries::new(points, 4, 3, m.color.stroke_width(1)))
                .map_err(|e| e.to_string())?;
        } else {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    points,
                    m.color.stroke_width(1),
                )))
                .map_err(|e| e.to_string())?;
        }
        // Labels stagger downwards so neighbouring marks stay readable.
        let y = ymax * (stagger.top - stagger.step * (i % stagger.cycle) as f64);
        let right_half = m.x > x0 + (x1 - x0) * 0.6;
        let anchor = if right_half {
            Pos::new(HPos::Right, VPos::Center)
        } else {
            Pos::new(HPos::Left, VPos::Center)
        };
        let dx = if right_half { -0.004 } else { 0.004 } * (x1 - x0);
        chart
            .draw_series(std::iter::once(Text::new(
                m.label.clone(),
                (m.x + dx, y),
                ("sans-serif", 11).into_font().color(&m.color).pos(anchor),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The series legend in the lower right, over a light background: the first seconds of a
/// cycle (where a crash loop rises) and the top of a rise stay in view.
pub fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())
}
