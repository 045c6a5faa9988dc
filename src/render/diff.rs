//! `heapwatch diff`: the per-site change between two profiles as a table or as JSON. `flat`
//! and `cum` are changes (new − base), signed, as `go tool pprof -diff_base` prints them.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analyse::diff::{ProfileDiff, SiteDelta, Status};
use crate::units::format_value;

/// What `diff` shows: one sample type, already ranked.
pub struct DiffView<'a> {
    pub base_file: &'a str,
    pub new_file: &'a str,
    pub diff: &'a ProfileDiff,
    pub rows: usize,
    /// Show the sites whose figures did not move, too.
    pub all: bool,
}

impl DiffView<'_> {
    /// The rows `-n` picks from: the changed ones, or all with `all`.
    fn eligible(&self) -> impl Iterator<Item = &SiteDelta> {
        let all = self.all;
        self.diff
            .rows
            .iter()
            .filter(move |r| all || r.status() != Status::Same)
    }
}

#[derive(Serialize)]
struct DiffJson<'a> {
    schema: u32,
    base: &'a str,
    new: &'a str,
    sample: &'a str,
    unit: &'a str,
    granularity: &'static str,
    total_base: i64,
    total_new: i64,
    total_delta: i64,
    /// How many rows there are in all (changed ones, or every site with `--all`); `rows`
    /// holds the first `-n` of them.
    sites: usize,
    rows: Vec<RowJson<'a>>,
}

#[derive(Serialize)]
struct RowJson<'a> {
    name: &'a str,
    base_flat: i64,
    new_flat: i64,
    flat: i64,
    base_cum: i64,
    new_cum: i64,
    cum: i64,
    status: &'static str,
}

pub fn json(view: &DiffView) -> String {
    let d = view.diff;
    let doc = DiffJson {
        schema: crate::model::SCHEMA,
        base: view.base_file,
        new: view.new_file,
        sample: &d.sample,
        unit: &d.unit,
        granularity: d.level.name(),
        total_base: d.total_base,
        total_new: d.total_new,
        total_delta: d.total_delta(),
        sites: view.eligible().count(),
        rows: view
            .eligible()
            .take(view.rows)
            .map(|r| RowJson {
                name: &r.name,
                base_flat: r.base_flat,
                new_flat: r.new_flat,
                flat: r.flat(),
                base_cum: r.base_cum,
                new_cum: r.new_cum,
                cum: r.cum(),
                status: r.status().as_str(),
            })
            .collect(),
    };
    let mut out = serde_json::to_string_pretty(&doc).expect("diff JSON is plain data");
    out.push('\n');
    out
}

/// A change with its sign always shown: `+5.01 MiB`, `-1,024`, `0`.
fn signed(value: i64, unit: &str) -> String {
    let text = format_value(value, unit);
    if value > 0 { format!("+{text}") } else { text }
}

pub fn text(view: &DiffView) -> String {
    let d = view.diff;
    let unit = d.unit.as_str();
    let eligible = view.eligible().count();
    let shown = eligible.min(view.rows);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} -> {}: {} ({}) by {}",
        view.base_file,
        view.new_file,
        d.sample,
        unit,
        d.level.name()
    );
    let _ = writeln!(
        out,
        "total {} -> {} ({}); top {} of {} {} by flat change",
        format_value(d.total_base, unit),
        format_value(d.total_new, unit),
        signed(d.total_delta(), unit),
        shown,
        eligible,
        if view.all { "sites" } else { "changed sites" },
    );
    if eligible == 0 {
        let _ = writeln!(out, "no site changed");
        return out;
    }
    let _ = writeln!(
        out,
        "{:>12} {:>12} {:>12} {:>12}  {:<6}  site",
        "flat Δ", "cum Δ", "base flat", "new flat", "status"
    );
    for r in view.eligible().take(view.rows) {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>12}  {:<6}  {}",
            signed(r.flat(), unit),
            signed(r.cum(), unit),
            format_value(r.base_flat, unit),
            format_value(r.new_flat, unit),
            r.status().as_str(),
            r.name,
        );
    }
    out
}
