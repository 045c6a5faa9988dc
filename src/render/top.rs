//! `heapwatch top`: the heaviest sites of one profile as a pprof-like table or as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::model::aggregate::SiteTable;
use crate::units::format_value;

/// What `top` shows: one sample type of one profile, already ranked.
pub struct TopView<'a> {
    pub file: &'a str,
    pub sample: &'a str,
    pub unit: &'a str,
    pub table: &'a SiteTable,
    pub rows: usize,
    pub by_cum: bool,
}

#[derive(Serialize)]
struct TopJson<'a> {
    schema: u32,
    file: &'a str,
    sample: &'a str,
    unit: &'a str,
    total: i64,
    /// How many sites the profile has in all; `rows` holds the first `-n` of them.
    sites: usize,
    sorted_by: &'static str,
    rows: Vec<RowJson<'a>>,
}

#[derive(Serialize)]
struct RowJson<'a> {
    name: &'a str,
    flat: i64,
    cum: i64,
}

pub fn json(view: &TopView) -> String {
    let doc = TopJson {
        schema: crate::model::SCHEMA,
        file: view.file,
        sample: view.sample,
        unit: view.unit,
        total: view.table.total,
        sites: view.table.sites.len(),
        sorted_by: if view.by_cum { "cum" } else { "flat" },
        rows: view
            .table
            .sites
            .iter()
            .take(view.rows)
            .map(|s| RowJson {
                name: &s.name,
                flat: s.flat,
                cum: s.cum,
            })
            .collect(),
    };
    let mut out = serde_json::to_string_pretty(&doc).expect("top JSON is plain data");
    out.push('\n');
    out
}

fn percent(part: i64, total: i64) -> String {
    if total == 0 {
        return "-".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / total as f64)
}

pub fn text(view: &TopView) -> String {
    let table = view.table;
    let shown = table.sites.len().min(view.rows);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} ({}), total {}; top {} of {} sites by {}",
        view.file,
        view.sample,
        view.unit,
        format_value(table.total, view.unit),
        shown,
        table.sites.len(),
        if view.by_cum { "cum" } else { "flat" },
    );
    let _ = writeln!(
        out,
        "{:>12} {:>7} {:>7} {:>12} {:>7}  site",
        "flat", "flat%", "sum%", "cum", "cum%"
    );
    let mut running = 0i64;
    for site in table.sites.iter().take(view.rows) {
        running += site.flat;
        let _ = writeln!(
            out,
            "{:>12} {:>7} {:>7} {:>12} {:>7}  {}",
            format_value(site.flat, view.unit),
            percent(site.flat, table.total),
            percent(running, table.total),
            format_value(site.cum, view.unit),
            percent(site.cum, table.total),
            site.name,
        );
    }
    out
}
