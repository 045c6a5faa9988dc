//! `compare`: the same work on two builds. One boot cycle of each is aligned on time since its
//! first capture; sites are keyed by function name (builds never share addresses or line
//! numbers) and compared on their growth rate and on their in-use peak over the whole span both
//! cycles cover. What B does after A's last capture is reported on its own, never dropped.
//! Several pairs of cycles are each compared; the worst leads and the others are listed.
//!
//! # The pair a relative gate judges
//!
//! The lead is the pair with the worst site; a gate on the heap's ratio takes the worst ratio of
//! every pair compared like with like (`select`'s doc: a first boot with a first boot), which
//! need not be the lead: OpenZiti 2.1.0's first boot held 1.15x 2.0.2's first boot while its
//! second boot, the lead, held 0.95x, and the gate passed on the second. Pairs that are not
//! like with like are judged only where no pair is; so is B's death where A lived (a restart
//! killed against a first boot that lived is what `kills>` judges, not a relative gate), and
//! the cgroup's gates (`memory-regression>`, `anon-regression>`) take the worst of the same pairs.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::growth::CycleGrowth;
use super::reduce::{PROFILING_SITE, SiteFigures};
use super::select::{Chosen, Selection};
use crate::model::run_options::OwnNamed;

/// Below this, in-use differences are sampling noise (Go samples one allocation per 512 KiB).
const NOISE_BYTES: f64 = 1024.0 * 1024.0;

/// Peaks are the largest of many sampled figures, so they carry the sampling noise upwards:
/// a peak must differ by four sampling periods to count.
const PEAK_NOISE_BYTES: f64 = 2.0 * NOISE_BYTES;

/// B must run this much longer than A for what it did after A's data to be reported.
const LATER_S: f64 = 1.0;

/// Rows kept in the list of what B did after A's data ends.
const LATER_SITES: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct Regression {
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    pub a_bytes_per_sec: f64,
    pub b_bytes_per_sec: f64,
    /// The site's largest in-use bytes over the aligned span, in A and in B.
    pub a_inuse: i64,
    pub b_inuse: i64,
    /// Seconds into the cycle of each side's peak (`null` when the site holds nothing).
    pub a_peak_at_s: Option<f64>,
    pub b_peak_at_s: Option<f64>,
    /// B's in-use over A's (`null` when A has none).
    pub inuse_ratio: Option<f64>,
    /// The site does not appear in A at all: A never held nor allocated anything there.
    pub new_in_b: bool,
    /// A's rate is that of a rise the site held in A and then stopped.
    pub a_rose_then_held: bool,
    /// How much worse B is, in bytes per second of extra growth plus extra in-use bytes
    /// spread over the aligned span: the ranking key.
    pub score: f64,
    /// Why it is worse: only B holds it (more than noise), B's rate is above A's by more than
    /// noise, B's peak above A's by more than noise.
    #[serde(skip)]
    pub only_in_b: bool,
    #[serde(skip)]
    pub grows_faster: bool,
    #[serde(skip)]
    pub holds_more: bool,
}

/// A site that rose in B after A's last capture.
#[derive(Debug, Clone, Serialize)]
pub struct LaterSite {
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    /// Its peak over the aligned span, and after it.
    pub inuse_before: i64,
    pub inuse_after: i64,
    pub after_at_s: f64,
}

/// What B did after A's data ends.
#[derive(Debug, Clone, Serialize)]
pub struct AfterBaseline {
    /// Seconds into the cycle of A's last heap capture.
    pub a_last_s: f64,
    /// Seconds into the cycle of B's last heap capture.
    pub b_last_s: f64,
    pub b_heap_peak: Option<i64>,
    pub b_heap_peak_at_s: Option<f64>,
    pub sites: Vec<LaterSite>,
    /// How B's cycle ended, when it ended after A's data (written to JSON by
    /// `render::worded::AfterJson`, in words).
    #[serde(skip)]
    pub b_end: Option<BEnd>,
    /// B's in-use heap after A's last capture went above its peak before it.
    #[serde(skip)]
    pub heap_rose: bool,
}

/// How B's cycle ended after A's data: OOM-killed, or stopped answering, at `at_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BEnd {
    pub oom_killed: bool,
    pub at_s: f64,
}

/// One compared pair of cycles that does not lead the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct PairVerdict {
    pub a_cycle: u32,
    pub b_cycle: u32,
    pub worst_site: Option<String>,
    pub score: f64,
    /// The pair compared (its verdict is `render::compare::pair_verdict`'s words of it).
    #[serde(skip)]
    pub pair: Box<Comparison>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema: u32,
    /// The builds compared: A's and B's.
    pub a: String,
    pub b: String,
    pub a_cycle: u32,
    pub b_cycle: u32,
    /// True when both sides ran the same build (there was no other to compare with).
    pub same_build: bool,
    /// How the cycles were chosen.
    pub chosen: Chosen,
    /// The aligned span: both cycles have heap captures from their start to `age_s` seconds.
    pub age_s: f64,
    /// The largest in-use heap of each side over the aligned span, and when B's was.
    pub a_heap_peak: Option<i64>,
    pub b_heap_peak: Option<i64>,
    pub b_heap_peak_at_s: Option<f64>,
    /// Each side's in-use heap rate over its growth episode (the cycle's reading).
    pub a_total_bytes_per_sec: Option<f64>,
    pub b_total_bytes_per_sec: Option<f64>,
    /// Each side's growth episode: onset, end, rate, whether it still went on, and when it died.
    pub a_episode: SideEpisode,
    pub b_episode: SideEpisode,
    // The fields from here on are written to JSON by `render::worded::ComparisonJson`, each
    // with its words, and then which cycles were compared and the verdict.
    #[serde(skip)]
    pub regressions: Vec<Regression>,
    /// Sites that improved in B, best first.
    #[serde(skip)]
    pub improvements: Vec<Regression>,
    /// B after A's last capture, when B has data there.
    #[serde(skip)]
    pub after_a: Option<AfterBaseline>,
    /// The other pairs of cycles compared, worst first.
    #[serde(skip)]
    pub other_pairs: Vec<PairVerdict>,
    /// B's build as the selection named it, and whether both sides ran it.
    #[serde(skip)]
    pub selection_b_build: String,
    #[serde(skip)]
    pub selection_same_build: bool,
    /// Whether this pair compares like with like (`select::Selection::like`).
    #[serde(skip)]
    pub like_with_like: bool,
    /// The prefixes each side's sites were named by as the user's own code, and whence: each
    /// run's recorded ones unless the comparison was given `--own`. None: none named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a_own: Option<OwnNamed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_own: Option<OwnNamed>,
}

impl Comparison {
    /// B's peak in-use heap over A's, over the span both cover.
    pub fn heap_ratio(&self) -> Option<f64> {
        let (a, b) = (self.a_heap_peak?, self.b_heap_peak?);
        (a > 0).then(|| b as f64 / a as f64)
    }

    /// Every pair compared: this one, then the others.
    pub fn all_pairs(&self) -> impl Iterator<Item = &Comparison> {
        std::iter::once(self).chain(self.other_pairs.iter().map(|p| p.pair.as_ref()))
    }

    /// The pairs a relative gate judges: those compared like with like, else all (see the
    /// module's doc).
    pub fn gate_pairs(&self) -> impl Iterator<Item = &Comparison> {
        let any_like = self.all_pairs().any(|p| p.like_with_like);
        self.all_pairs()
            .filter(move |p| p.like_with_like || !any_like)
    }

    /// The pair a relative gate on the heap judges: the worst ratio of [`Self::gate_pairs`].
    pub fn gate_pair(&self) -> Option<&Comparison> {
        self.gate_pairs()
            .filter_map(|p| Some((p, p.heap_ratio()?)))
            .reduce(|w, x| if x.1 > w.1 { x } else { w })
            .map(|(p, _)| p)
    }
}

/// One side's cycle as the comparison words it: its episode and its end.
#[derive(Debug, Clone, Serialize)]
pub struct SideEpisode {
    pub onset_s: Option<f64>,
    pub end_s: Option<f64>,
    pub bytes_per_sec: f64,
    pub growing_at_end: bool,
    /// The top site of the rise and its share.
    pub site: Option<String>,
    pub share: Option<f64>,
    /// The caller under which most of the rise lies, spread over several sites, as `growth`
    /// names it (Prometheus's head-series creation: six sites, one caller).
    pub cause: Option<super::cause::Cause>,
    /// The peak of its in-use heap over the whole cycle.
    pub heap_peak: Option<i64>,
    /// The peak of the memory seen from outside: the cgroup's, else the process's, and which.
    pub memory_peak: Option<i64>,
    pub memory_of: Option<String>,
    /// The peak of the cgroup's anonymous memory (heap, stacks, runtime; no page cache).
    pub memory_peak_anon: Option<i64>,
    /// Seconds to its death, when it died, and whether of an OOM kill.
    pub died_s: Option<f64>,
    pub oom_killed: bool,
    /// How it ended.
    pub end: super::ends::CycleEnd,
    pub span_s: f64,
}

fn side_episode(c: &CycleGrowth, heap: &[(f64, i64)]) -> SideEpisode {
    let r = c.reading.as_ref();
    SideEpisode {
        onset_s: r.map(|r| r.onset_s),
        end_s: r.map(|r| r.end_s),
        bytes_per_sec: r.map_or(0.0, |r| r.bytes_per_sec),
        growing_at_end: r.is_some_and(|r| r.ongoing),
        site: c.rise_sites().first().map(|s| s.name.clone()),
        share: c.rise_sites().first().map(|s| s.share),
        cause: r.and_then(|r| r.cause.clone()),
        heap_peak: heap.iter().map(|h| h.1).max(),
        memory_peak: c.peaks.cgroup.or(c.peaks.process).map(|p| p.bytes),
        memory_of: match (c.peaks.cgroup, c.peaks.process) {
            (Some(_), _) => Some("cgroup".into()),
            (None, Some(_)) => Some("process".into()),
            _ => None,
        },
        memory_peak_anon: c.memory_peak_anon.map(|b| b as i64),
        died_s: c.died_after_s.filter(|_| c.end.is_death()),
        oom_killed: c.killed,
        end: c.end,
        span_s: c.span_s,
    }
}

/// One stored heap capture of a cycle: when, and its per-site figures.
#[derive(Debug, Clone)]
pub struct AgedSites {
    pub seq: u64,
    pub age_s: f64,
    pub sites: Vec<SiteFigures>,
}

/// One boot cycle as compare sees it.
pub struct CycleSide<'a> {
    pub build: String,
    pub growth: &'a CycleGrowth,
    /// Its stored heap captures in time order.
    pub captures: &'a [AgedSites],
    /// Total in-use heap of every good heap capture (duplicates too), `(age_s, bytes)`.
    pub heap: &'a [(f64, i64)],
}

impl CycleSide<'_> {
    fn last_age(&self) -> f64 {
        let captured = self.captures.last().map_or(0.0, |c| c.age_s);
        self.heap.iter().map(|h| h.0).fold(captured, f64::max)
    }
}

/// Each site's largest in-use bytes among captures with `lo < age <= hi`, and when.
fn site_peaks(captures: &[AgedSites], lo: f64, hi: f64) -> BTreeMap<&str, (i64, f64)> {
    let mut out: BTreeMap<&str, (i64, f64)> = BTreeMap::new();
    for c in captures
        .iter()
        .filter(|c| c.age_s > lo - 1e-9 && c.age_s <= hi + 1e-9)
    {
        for s in &c.sites {
            let e = out.entry(s.name.as_str()).or_insert((s.value, c.age_s));
            if s.value > e.0 {
                *e = (s.value, c.age_s);
            }
        }
    }
    out
}

fn heap_peak(heap: &[(f64, i64)], lo: f64, hi: f64) -> Option<(i64, f64)> {
    heap.iter()
        .filter(|(t, _)| *t > lo - 1e-9 && *t <= hi + 1e-9)
        .map(|&(t, v)| (v, t))
        .reduce(|a, b| if b.0 > a.0 { b } else { a })
}

/// Each site's growth rate in a cycle: its steady rate over the cycle, else its rate over the
/// cycle's rise when it held part of it and the rise is still going at the end, or, with
/// `held_rises`, also when the rise stopped (not steady over the whole cycle). A site that
/// rose 8.73 MiB/s in A and then held was said to grow "0 B/s in A".
fn rates(c: &CycleGrowth, held_rises: bool) -> BTreeMap<&str, f64> {
    let mut rates: BTreeMap<&str, f64> = c
        .sites
        .iter()
        .map(|s| (s.name.as_str(), s.bytes_per_sec))
        .collect();
    let rising = c.reading.as_ref().is_none_or(|r| r.ongoing);
    if held_rises || rising {
        for s in c.rise_sites() {
            rates.entry(s.name.as_str()).or_insert(s.bytes_per_sec);
        }
    }
    rates
}

/// Whether `name` held part of the cycle's rise and the rise stopped before the cycle's end.
fn rose_then_held(c: &CycleGrowth, name: &str) -> bool {
    c.reading.as_ref().is_some_and(|r| !r.ongoing)
        && !c.sites.iter().any(|s| s.name == name)
        && c.rise_sites().iter().any(|s| s.name == name)
}

fn after_baseline(
    a_last: f64,
    b: &CycleSide,
    aligned: &BTreeMap<&str, (i64, f64)>,
) -> Option<AfterBaseline> {
    let b_last = b.last_age();
    if b_last <= a_last + LATER_S {
        return None;
    }
    let later = site_peaks(b.captures, a_last + 1e-6, f64::INFINITY);
    let mut sites: Vec<LaterSite> = later
        .iter()
        .filter(|(name, _)| **name != PROFILING_SITE)
        .filter_map(|(name, &(after, at))| {
            let before = aligned.get(name).map_or(0, |p| p.0);
            ((after - before) as f64 >= PEAK_NOISE_BYTES && after as f64 >= before as f64 * 1.5)
                .then(|| LaterSite {
                    name: name.to_string(),
                    inuse_before: before,
                    inuse_after: after,
                    after_at_s: at,
                })
        })
        .collect();
    sites.sort_by(|x, y| {
        (y.inuse_after - y.inuse_before)
            .cmp(&(x.inuse_after - x.inuse_before))
            .then(x.name.cmp(&y.name))
    });
    sites.truncate(LATER_SITES);
    let peak = heap_peak(b.heap, a_last + 1e-6, f64::INFINITY);
    let before_peak = heap_peak(b.heap, 0.0, a_last).map(|p| p.0);
    let b_end = b
        .growth
        .died_after_s
        .filter(|&d| d > a_last)
        .map(|at_s| BEnd {
            oom_killed: b.growth.killed,
            at_s,
        });
    Some(AfterBaseline {
        a_last_s: a_last,
        b_last_s: b_last,
        b_heap_peak: peak.map(|p| p.0),
        b_heap_peak_at_s: peak.map(|p| p.1),
        heap_rose: peak.is_some_and(|p| before_peak.is_none_or(|b| p.0 > b)),
        sites,
        b_end,
    })
}

/// Compares one cycle of B with one cycle of A over the span both cover.
pub fn compare_cycles(a: &CycleSide, b: &CycleSide) -> Comparison {
    let span = a.last_age().min(b.last_age());
    let (ra, rb) = (rates(a.growth, true), rates(b.growth, true));
    // What makes B grow faster: its steady rate, or its rise while still rising at the end. A
    // rise B took in and then held (a start-up load) is no faster growth, whatever its pace:
    // what it holds is weighed by `holds_more`.
    let rb_growing = rates(b.growth, false);
    let (pa, pb) = (
        site_peaks(a.captures, 0.0, span),
        site_peaks(b.captures, 0.0, span),
    );
    let names: BTreeSet<&str> = ra
        .keys()
        .chain(rb.keys())
        .chain(pa.keys())
        .chain(pb.keys())
        .copied()
        .collect();
    // Sites A ran at all: a site A allocated at and freed is not new in B (etcd: a JSON
    // decoder A allocated 380 MB in, holding none of it, was "(new in B)").
    let ran_in_a: BTreeSet<&str> = a
        .captures
        .iter()
        .flat_map(|c| c.sites.iter())
        .filter(|s| s.value > 0 || s.alloc > 0)
        .map(|s| s.name.as_str())
        .collect();
    let age = span.max(1.0);
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
        let (ua, ub) = (pa.get(name).copied(), pb.get(name).copied());
        let (va, vb) = (ua.map_or(0, |p| p.0), ub.map_or(0, |p| p.0));
        let new_in_b = !ra.contains_key(name) && !ran_in_a.contains(name);
        let score = (grb - gra) + (vb - va) as f64 / age;
        let growing = rb_growing.get(name).copied().unwrap_or(0.0);
        let grows_faster = growing > gra * 1.2 && (growing - gra) * age >= NOISE_BYTES;
        let holds_more = (vb - va) as f64 >= PEAK_NOISE_BYTES && vb as f64 >= va as f64 * 1.5;
        let only_in_b = new_in_b && vb as f64 >= PEAK_NOISE_BYTES;
        let row = || Regression {
            name: name.to_string(),
            a_bytes_per_sec: gra,
            b_bytes_per_sec: grb,
            a_inuse: va,
            b_inuse: vb,
            a_rose_then_held: rose_then_held(a.growth, name),
            a_peak_at_s: ua.filter(|p| p.0 > 0).map(|p| p.1),
            b_peak_at_s: ub.filter(|p| p.0 > 0).map(|p| p.1),
            inuse_ratio: (va > 0).then(|| vb as f64 / va as f64),
            new_in_b,
            score,
            only_in_b,
            grows_faster,
            holds_more,
        };
        if only_in_b || grows_faster || holds_more {
            worse.push(row());
        } else {
            // The same bars the other way round: sampling noise is no improvement either.
            // Steady rates only: a start-up rise in A that B's reading does not hold (both
            // loaded at start; B's rise was elsewhere) is no slowing.
            let steady = |c: &CycleGrowth| {
                c.sites
                    .iter()
                    .find(|s| s.name == name)
                    .map_or(0.0, |s| s.bytes_per_sec)
            };
            let (sa, sb) = (steady(a.growth), steady(b.growth));
            let slows = sa > sb * 1.2 && (sa - sb) * age >= NOISE_BYTES;
            let holds_less = (va - vb) as f64 >= PEAK_NOISE_BYTES && va as f64 >= vb as f64 * 1.5;
            if slows || holds_less {
                better.push(row());
            }
        }
    }
    worse.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.name.cmp(&y.name)));
    better.sort_by(|x, y| x.score.total_cmp(&y.score).then(x.name.cmp(&y.name)));
    let after_a = after_baseline(span, b, &pb).filter(|_| a.last_age() < b.last_age());
    let (ia, ib) = (a.growth.index, b.growth.index);
    let a_peak = heap_peak(a.heap, 0.0, span);
    let b_peak = heap_peak(b.heap, 0.0, span);
    Comparison {
        schema: crate::model::SCHEMA,
        a: a.build.clone(),
        b: b.build.clone(),
        a_cycle: ia,
        b_cycle: ib,
        same_build: a.build == b.build,
        chosen: Chosen::default(),
        age_s: span,
        a_heap_peak: a_peak.map(|p| p.0),
        b_heap_peak: b_peak.map(|p| p.0),
        b_heap_peak_at_s: b_peak.map(|p| p.1),
        a_total_bytes_per_sec: a.growth.total_bytes_per_sec,
        b_total_bytes_per_sec: b.growth.total_bytes_per_sec,
        a_episode: side_episode(a.growth, a.heap),
        b_episode: side_episode(b.growth, b.heap),
        regressions: worse,
        improvements: better,
        after_a,
        other_pairs: Vec::new(),
        selection_b_build: String::new(),
        selection_same_build: false,
        like_with_like: true,
        a_own: None,
        b_own: None,
    }
}

fn badness(c: &Comparison) -> f64 {
    // A pair where B died of memory and A did not is the worst there is.
    if c.b_episode.oom_killed && !c.a_episode.oom_killed {
        return f64::INFINITY;
    }
    c.regressions.first().map_or(f64::NEG_INFINITY, |r| r.score)
}

/// Compares every chosen pair; the worst leads, the others are listed beneath it.
pub fn compare(pairs: &[(CycleSide, CycleSide)], selection: &Selection) -> Option<Comparison> {
    let mut all: Vec<Comparison> = pairs.iter().map(|(a, b)| compare_cycles(a, b)).collect();
    for c in &mut all {
        c.like_with_like = selection.like.contains(&(c.a_cycle, c.b_cycle));
    }
    let worst = (0..all.len()).reduce(|w, i| {
        if badness(&all[i]) > badness(&all[w]) {
            i
        } else {
            w
        }
    })?;
    let mut lead = all.remove(worst);
    let mut others: Vec<PairVerdict> = all
        .into_iter()
        .map(|c| PairVerdict {
            a_cycle: c.a_cycle,
            b_cycle: c.b_cycle,
            worst_site: c.regressions.first().map(|r| r.name.clone()),
            score: badness(&c),
            pair: Box::new(c),
        })
        .collect();
    others.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.b_cycle.cmp(&y.b_cycle)));
    for o in &mut others {
        if !o.score.is_finite() {
            o.score = 0.0;
        }
    }
    lead.chosen = selection.how.clone();
    lead.selection_b_build = selection.b_build.clone();
    lead.selection_same_build = selection.same_build;
    lead.other_pairs = others;
    Some(lead)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::rules::tests::cycle;

    const MIB: f64 = 1024.0 * 1024.0;

    /// NATS in A rose 8.73 MiB/s and held; compare said "0 B/s in A" for it.
    #[test]
    fn a_site_that_rose_then_held_in_a_is_compared_at_its_rate_of_rise() {
        let mut a = cycle(1, 8.0, None);
        a.sites.clear();
        let r = a.reading.as_mut().unwrap();
        r.ongoing = false;
        r.held_s = Some(3.0);
        let b = cycle(1, 20.0, None);
        assert_eq!(rates(&a, true).get("main.leak").copied(), Some(8.0 * MIB));
        assert_eq!(rates(&a, false).get("main.leak"), None);
        assert!(rose_then_held(&a, "main.leak"));
        assert!(!rose_then_held(&b, "main.leak"));
        let side = |c| CycleSide {
            build: "x".into(),
            growth: c,
            captures: &[],
            heap: &[],
        };
        let found = compare_cycles(&side(&a), &side(&b));
        let leak = found
            .regressions
            .iter()
            .find(|r| r.name == "main.leak")
            .expect("B grows faster");
        assert_eq!(leak.a_bytes_per_sec, 8.0 * MIB);
        assert!(leak.a_rose_then_held && leak.grows_faster);
    }

    /// OpenZiti (issue 33, item 11): A, 2.0.2's first boot; B, 2.1.0's first boot (1.15x A's
    /// heap) then its second (0.95x, and the lead: its site grows). The gate judges B's first
    /// boot, like with like, and the worst; the second boot is set against a first boot.
    #[test]
    fn the_gate_takes_the_worst_heap_ratio_of_the_pairs_compared_like_with_like() {
        use crate::analyse::select::{CycleBuild, choose};
        let build = |index, label: &str| CycleBuild {
            index,
            label: label.into(),
            build: None,
            pid: None,
        };
        let selection = choose(
            ("a", &[build(1, "2.0.2")]),
            ("b", &[build(1, "2.1.0"), build(2, "2.1.0")]),
            None,
            None,
        )
        .unwrap();
        let (a1, b1, b2) = (
            cycle(1, 0.0, None),
            cycle(1, 0.0, None),
            cycle(2, 20.0, None),
        );
        let mib = |m: f64| (m * MIB) as i64;
        let heap = |m: f64| [(0.0, mib(m / 2.0)), (5.0, mib(m))];
        let (ha, hb1, hb2) = (heap(100.0), heap(115.0), heap(95.0));
        fn side<'s>(growth: &'s CycleGrowth, heap: &'s [(f64, i64)]) -> CycleSide<'s> {
            CycleSide {
                build: "x".into(),
                growth,
                captures: &[],
                heap,
            }
        }
        let pairs = [
            (side(&a1, &ha), side(&b1, &hb1)),
            (side(&a1, &ha), side(&b2, &hb2)),
        ];
        let c = compare(&pairs, &selection).unwrap();
        assert_eq!(c.b_cycle, 2, "the lead is the pair whose site grows");
        assert!(!c.like_with_like);
        let gate = c.gate_pair().unwrap();
        assert_eq!((gate.a_cycle, gate.b_cycle), (1, 1));
        assert!((gate.heap_ratio().unwrap() - 1.15).abs() < 1e-6);
        // And the rule trips on it, naming B's first boot.
        use crate::analyse::growth::{AcrossCycles, GrowthReport};
        use crate::analyse::rules::{Evidence, Findings, HeapRatio, Status, evaluate, parse};
        let growth = GrowthReport {
            schema: 1,
            limit_bytes: None,
            own: None,
            across: AcrossCycles {
                cycles: 2,
                died: 0,
                same_top_site: None,
                ages_s: vec![],
                crash_loop: None,
            },
            cycles: vec![b1.clone(), b2.clone()],
        };
        let ratio = HeapRatio::of(&c);
        let findings = Findings {
            growth: &growth,
            peak_heap: &[],
            comparison: Some(&c),
            heap_ratio: ratio.as_ref(),
            envoy: None,
        };
        let o = evaluate(&parse("regression>1.1x").unwrap(), &findings);
        assert_eq!((o.status, o.cycle), (Status::Fail, Some(1)), "{o:?}");
        assert!(
            matches!(&o.evidence, Evidence::PeakAgainstBaseline { sides: Some(s), .. } if s.b_cycle == 1),
            "{o:?}"
        );
        // B's death where A lived trips the gate in a like pair only: B's second boot killed is
        // set against a first boot; B's first killed is the worst there is.
        let evaluate_with = |b1_killed: bool, b2_killed: bool| {
            let (b1, b2) = (
                cycle(1, 0.0, b1_killed.then_some(4.0)),
                cycle(2, 20.0, b2_killed.then_some(4.0)),
            );
            let pairs = [
                (side(&a1, &ha), side(&b1, &hb1)),
                (side(&a1, &ha), side(&b2, &hb2)),
            ];
            let c = compare(&pairs, &selection).unwrap();
            let ratio = HeapRatio::of(&c);
            let findings = Findings {
                comparison: Some(&c),
                heap_ratio: ratio.as_ref(),
                ..findings
            };
            evaluate(&parse("regression>1.5x").unwrap(), &findings)
        };
        let o = evaluate_with(false, true);
        assert_eq!((o.status, o.cycle), (Status::Pass, Some(1)), "{o:?}");
        let o = evaluate_with(true, false);
        assert_eq!((o.status, o.cycle), (Status::Fail, Some(1)), "{o:?}");
        assert!(matches!(o.evidence, Evidence::BOomKilled { .. }), "{o:?}");
        // The cgroup's gates alike: B's second boot's 3x is set against a first boot; its
        // first boot's 1.15x is judged.
        let anon = |mut c: CycleGrowth, m: f64| {
            c.memory_peak_anon = Some(mib(m) as u64);
            c
        };
        let (a1, b1, b2) = (anon(a1, 100.0), anon(b1, 115.0), anon(b2, 300.0));
        let pairs = [
            (side(&a1, &ha), side(&b1, &hb1)),
            (side(&a1, &ha), side(&b2, &hb2)),
        ];
        let c = compare(&pairs, &selection).unwrap();
        let findings = Findings {
            comparison: Some(&c),
            ..findings
        };
        let o = evaluate(&parse("anon-regression>1.5x").unwrap(), &findings);
        assert_eq!((o.status, o.cycle), (Status::Pass, Some(1)), "{o:?}");
        assert!((o.measured.unwrap() - 1.15).abs() < 1e-6, "{o:?}");
        // Unlike pairs alone: the worst of them.
        let mut alone = c.clone();
        alone.other_pairs.clear();
        assert_eq!(alone.gate_pair().map(|p| p.b_cycle), Some(2));
    }

    /// The ziti pair the other way round: B (2.0.2) took its load in at 36 MiB/s in its first
    /// 0.2 s and held it; A grew steadily slower. That was a "grows 23.4 MiB/s in B against
    /// 1.97 MiB/s in A" regression; a load taken in and held is no faster growth.
    #[test]
    fn a_rise_b_took_in_and_held_is_no_faster_growth() {
        let a = cycle(1, 2.0, None);
        let mut b = cycle(1, 24.0, None);
        b.sites.clear();
        let r = b.reading.as_mut().unwrap();
        r.ongoing = false;
        r.held_s = Some(7.0);
        fn side(c: &CycleGrowth) -> CycleSide<'_> {
            CycleSide {
                build: "x".into(),
                growth: c,
                captures: &[],
                heap: &[],
            }
        }
        let found = compare_cycles(&side(&a), &side(&b));
        assert!(
            found.regressions.iter().all(|r| r.name != "main.leak"),
            "{:?}",
            found.regressions
        );
        // Still rising at B's end, the same pace is faster growth.
        b.reading.as_mut().unwrap().ongoing = true;
        let found = compare_cycles(&side(&a), &side(&b));
        assert!(
            found
                .regressions
                .iter()
                .any(|r| r.name == "main.leak" && r.grows_faster)
        );
    }

    /// etcd healthy against flooded (real servers): a JSON decoder A allocated 380 MB in and
    /// held none of was "(new in B)". New in B is a site A never held nor allocated at.
    #[test]
    fn a_site_a_allocated_at_and_freed_is_not_new_in_b() {
        let a = cycle(1, 0.0, None);
        let b = cycle(1, 0.0, None);
        let at = |age_s: f64, name: &str, value: i64, alloc: i64| AgedSites {
            seq: 1,
            age_s,
            sites: vec![SiteFigures {
                name: name.into(),
                value,
                alloc,
            }],
        };
        let mib = 1 << 20;
        let b_caps = [
            at(1.0, "main.decode", 6 * mib, 40 * mib),
            at(1.0, "main.fresh", 6 * mib, 6 * mib),
        ];
        let ran = [at(1.0, "main.decode", 0, 380 * mib)];
        let never = [at(1.0, "main.other", mib, mib)];
        fn side<'a>(c: &'a CycleGrowth, captures: &'a [AgedSites]) -> CycleSide<'a> {
            CycleSide {
                build: "x".into(),
                growth: c,
                captures,
                heap: &[],
            }
        }
        let new_in_b = |a_caps: &[AgedSites], name: &str| {
            compare_cycles(&side(&a, a_caps), &side(&b, &b_caps))
                .regressions
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.new_in_b)
        };
        assert_eq!(new_in_b(&ran, "main.decode"), Some(false));
        assert_eq!(new_in_b(&ran, "main.fresh"), Some(true));
        assert_eq!(new_in_b(&never, "main.decode"), Some(true));
    }
}
