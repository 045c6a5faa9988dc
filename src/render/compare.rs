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
        "A = {} (cycle {}), B = {} (cycle {}): rates and in-use peaks over the first {:.1} s, \
         which both cycles cover; chosen: {}",
        c.a, c.a_cycle, c.b, c.b_cycle, c.age_s, c.chosen
    );
    let _ = writeln!(out, "verdict: {}", c.verdict);
    if !c.regressions.is_empty() {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>12}  site",
            "A rate", "B rate", "A peak", "B peak"
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
    if let Some(after) = &c.after_a {
        let _ = writeln!(out, "{}", after.summary);
    }
    for o in &c.other_pairs {
        let _ = writeln!(
            out,
            "also compared: cycle {} of B against cycle {} of A: {}",
            o.b_cycle, o.a_cycle, o.verdict
        );
    }
    out
}
