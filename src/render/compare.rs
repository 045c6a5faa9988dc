//! `heapwatch compare` as text and JSON.

use std::fmt::Write as _;

use crate::analyse::compare::Comparison;
use crate::units::format_bytes;

pub fn json(c: &Comparison) -> String {
    let mut out = serde_json::to_string_pretty(c).expect("comparison is plain data");
    out.push('\n');
    out
}

pub fn text(c: &Comparison, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A = {}, B = {}; in-use compared at {:.1} s into the first boot cycle",
        c.a, c.b, c.age_s
    );
    let _ = writeln!(out, "verdict: {}", c.verdict);
    if !c.regressions.is_empty() {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>12}  site",
            "A rate", "B rate", "A in use", "B in use"
        );
        for r in c.regressions.iter().take(limit) {
            let _ = writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>12}  {}{}",
                format!("{}/s", format_bytes(r.a_bytes_per_sec as i64)),
                format!("{}/s", format_bytes(r.b_bytes_per_sec as i64)),
                format_bytes(r.a_inuse),
                format_bytes(r.b_inuse),
                r.name,
                if r.new_in_b { " (new in B)" } else { "" }
            );
        }
    }
    if !c.improvements.is_empty() {
        let names: Vec<&str> = c
            .improvements
            .iter()
            .take(limit)
            .map(|r| r.name.as_str())
            .collect();
        let _ = writeln!(out, "better in B: {}", names.join(", "));
    }
    out
}
