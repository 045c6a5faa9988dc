//! `compare`: the same work on two builds. Sites are keyed by function name (builds never
//! share addresses or line numbers); each is compared on its growth rate and on its in-use
//! bytes at the same age since the start of a boot cycle. Worst regression first.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::growth::GrowthReport;
use super::reduce::{PROFILING_SITE, SiteFigures};
use crate::units::format_bytes;

/// Below this, in-use differences are sampling noise (Go samples one allocation per 512 KiB).
const NOISE_BYTES: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, Serialize)]
pub struct Regression {
    pub name: String,
    pub a_bytes_per_sec: f64,
    pub b_bytes_per_sec: f64,
    pub a_inuse: i64,
    pub b_inuse: i64,
    /// B's in-use over A's at the same age (`null` when A has none).
    pub inuse_ratio: Option<f64>,
    /// The site does not appear in A at all.
    pub new_in_b: bool,
    /// How much worse B is, in bytes per second of extra growth plus extra in-use bytes
    /// spread over the compared age: the ranking key.
    pub score: f64,
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema: u32,
    pub a: String,
    pub b: String,
    /// Seconds since the start of the boot cycle at which in-use bytes are compared.
    pub age_s: f64,
    pub a_total_bytes_per_sec: Option<f64>,
    pub b_total_bytes_per_sec: Option<f64>,
    pub regressions: Vec<Regression>,
    /// Sites that improved in B, best first.
    pub improvements: Vec<Regression>,
    pub verdict: String,
}

/// One run as compare sees it: its growth report and the site figures of its first cycle's
/// capture nearest to the compared age.
pub struct Side<'a> {
    pub label: String,
    pub growth: &'a GrowthReport,
    pub at_age: &'a [SiteFigures],
}

fn rates(g: &GrowthReport) -> BTreeMap<&str, f64> {
    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    for c in &g.cycles {
        for s in &c.sites {
            let e = out.entry(s.name.as_str()).or_insert(0.0);
            *e = e.max(s.bytes_per_sec);
        }
    }
    out
}

pub fn compare(a: &Side, b: &Side, age_s: f64) -> Comparison {
    let (ra, rb) = (rates(a.growth), rates(b.growth));
    let ia: BTreeMap<&str, i64> = a
        .at_age
        .iter()
        .map(|s| (s.name.as_str(), s.value))
        .collect();
    let ib: BTreeMap<&str, i64> = b
        .at_age
        .iter()
        .map(|s| (s.name.as_str(), s.value))
        .collect();
    let names: BTreeSet<&str> = ra
        .keys()
        .chain(rb.keys())
        .chain(ia.keys())
        .chain(ib.keys())
        .copied()
        .collect();
    let age = age_s.max(1.0);
    let mut worse = Vec::new();
    let mut better = Vec::new();
    for name in names {
        if name == PROFILING_SITE {
            continue;
        }
        let (gra, grb) = (
            ra.get(name).copied().unwrap_or(0.0),
            rb.get(name).copied().unwrap_or(0.0),
        );
        let (ua, ub) = (
            ia.get(name).copied().unwrap_or(0),
            ib.get(name).copied().unwrap_or(0),
        );
        let new_in_b = !ra.contains_key(name) && !ia.contains_key(name);
        let score = (grb - gra) + (ub - ua) as f64 / age;
        let row = |why: String| Regression {
            name: name.to_string(),
            a_bytes_per_sec: gra,
            b_bytes_per_sec: grb,
            a_inuse: ua,
            b_inuse: ub,
            inuse_ratio: (ua > 0).then(|| ub as f64 / ua as f64),
            new_in_b,
            score,
            why,
        };
        let grows_faster = grb > gra * 1.2 && (grb - gra) * age >= NOISE_BYTES;
        let holds_more = (ub - ua) as f64 >= NOISE_BYTES && ub as f64 >= ua as f64 * 1.5;
        if new_in_b && ub as f64 >= NOISE_BYTES {
            worse.push(row(format!(
                "only in B: {} in use at {age_s:.1} s",
                format_bytes(ub)
            )));
        } else if grows_faster || holds_more {
            let mut why = Vec::new();
            if grows_faster {
                why.push(format!(
                    "grows {}/s in B against {}/s in A",
                    format_bytes(grb as i64),
                    format_bytes(gra as i64)
                ));
            }
            if holds_more {
                why.push(format!(
                    "{} in use at {age_s:.1} s against {}",
                    format_bytes(ub),
                    format_bytes(ua)
                ));
            }
            worse.push(row(why.join("; ")));
        } else {
            // The same bars the other way round: sampling noise is no improvement either.
            let slows = gra > grb * 1.2 && (gra - grb) * age >= NOISE_BYTES;
            let holds_less = (ua - ub) as f64 >= NOISE_BYTES && ua as f64 >= ub as f64 * 1.5;
            if slows || holds_less {
                better.push(row(String::new()));
            }
        }
    }
    worse.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.name.cmp(&y.name)));
    better.sort_by(|x, y| x.score.total_cmp(&y.score).then(x.name.cmp(&y.name)));
    let total = |g: &GrowthReport| g.cycles.first().and_then(|c| c.total_bytes_per_sec);
    let verdict = match worse.first() {
        Some(r) => format!("{} regressed in {}: {}", r.name, b.label, r.why),
        None => format!("no site regressed in {} against {}", b.label, a.label),
    };
    Comparison {
        schema: crate::render::SCHEMA,
        a: a.label.clone(),
        b: b.label.clone(),
        age_s,
        a_total_bytes_per_sec: total(a.growth),
        b_total_bytes_per_sec: total(b.growth),
        regressions: worse,
        improvements: better,
        verdict,
    }
}
