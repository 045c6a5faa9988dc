//! `summary.json`: the report for other tools. Per boot cycle the verdict and the top sites,
//! the comparison with the baseline, every rule checked, and (when there are any) Envoy's
//! findings under `envoy` and the Kubernetes triage under `kubernetes`. Figures are rounded
//! (bytes and bytes per second to whole numbers, seconds to milliseconds) so the file diffs
//! cleanly.

use serde::Serialize;

use super::{EnvoyView, KubeView, ReportModel, Tally, tally, usual_interval_ms};
use crate::analyse::rules;
use crate::render::compare;
use crate::render::verdict::{across_summary, cycle_verdict};
use crate::render::worded::{self, at_limit_json, breakdown_json};

/// Rows kept per table.
const TOP: usize = 5;

#[derive(Serialize)]
struct Summary<'a> {
    schema: u32,
    run: RunSummary,
    /// The headline on one line: its lead, then its points.
    headline: String,
    /// The headline's one short sentence: what killed it, or what regressed, and where to look.
    lead: String,
    /// The rest of the headline, one clause each.
    points: Vec<String>,
    captures: Tally,
    memory_samples: usize,
    cycles: Vec<CycleSummary<'a>>,
    across: String,
    baseline: Option<BaselineSummary>,
    rules: Vec<crate::render::rules::OutcomeView<'a>>,
    failed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    envoy: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kubernetes: Option<serde_json::Value>,
    /// Marked log lines (`events.jsonl`), when the run has any.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    events: &'a [crate::store::cluster::Event],
    files: Files,
}

#[derive(Serialize)]
struct RunSummary {
    name: String,
    label: Option<String>,
    target: Option<String>,
    source: Option<String>,
    started_ms: Option<i64>,
    tool: Option<String>,
    limit_bytes: Option<u64>,
    /// The prefixes named as the user's own code, and whence (`recorded`, `given`).
    #[serde(skip_serializing_if = "Option::is_none")]
    own: Option<crate::model::run_options::OwnNamed>,
}

#[derive(Serialize)]
struct SiteSummary {
    #[serde(flatten, serialize_with = "crate::analyse::reduce::serialize_site")]
    name: String,
    bytes_per_sec: f64,
    fit_r2: f64,
    share: f64,
    onset_s: Option<f64>,
    inuse_last: i64,
}

#[derive(Serialize)]
struct StormSummary {
    #[serde(flatten, serialize_with = "crate::analyse::reduce::serialize_site")]
    name: String,
    peak_bytes_per_sec: f64,
    typical_bytes_per_sec: f64,
    start_s: Option<f64>,
    inuse_flat: bool,
}

#[derive(Serialize)]
struct GoroutineSummary {
    #[serde(flatten, serialize_with = "crate::analyse::reduce::serialize_site")]
    name: String,
    per_sec: f64,
    first: i64,
    last: i64,
}

#[derive(Serialize)]
struct CycleSummary<'a> {
    index: u32,
    build: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    build_info: Option<crate::model::build::BuildInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    captures: usize,
    errors: usize,
    span_s: f64,
    died_after_s: Option<f64>,
    killed: bool,
    /// How it ended, in the report's words.
    end: String,
    /// How long the kernel held it at its OOM kill for a last capture (`run --oom-hold`).
    #[serde(skip_serializing_if = "Option::is_none")]
    oom_held_ms: Option<i64>,
    /// On cgroup v2: how far below its limit it was held.
    #[serde(skip_serializing_if = "Option::is_none")]
    oom_held_below_bytes: Option<i64>,
    /// The last capture's heap beyond the published one (`proc:` sources).
    #[serde(skip_serializing_if = "Option::is_none")]
    unpublished: Option<&'a crate::analyse::growth::Unpublished>,
    /// The in-use heap's rate over the cycle's growth episode (the reading), 0 without one.
    heap_bytes_per_sec: f64,
    /// Whether that episode still went on at the end of the cycle.
    growing_at_end: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reading: Option<&'a crate::analyse::reading::Reading>,
    heap_peak: Option<i64>,
    memory_bytes_per_sec: Option<f64>,
    memory_peak: Option<u64>,
    time_to_limit_s: Option<f64>,
    verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_peak_anon: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    breakdown: Option<worded::Summary<'a, crate::analyse::breakdown::MemoryBreakdown>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at_limit: Option<worded::Summary<'a, crate::analyse::breakdown::AtLimit>>,
    peaks: &'a crate::analyse::spikes::Peaks,
    #[serde(skip_serializing_if = "Option::is_none")]
    episode: Option<&'a crate::analyse::spikes::Episode>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    other_episodes: &'a [crate::analyse::spikes::Episode],
    top_sites: Vec<SiteSummary>,
    alloc_storms: Vec<StormSummary>,
    goroutine_growth: Vec<GoroutineSummary>,
}

#[derive(Serialize)]
struct RegressionSummary {
    #[serde(flatten, serialize_with = "crate::analyse::reduce::serialize_site")]
    name: String,
    baseline_bytes_per_sec: f64,
    bytes_per_sec: f64,
    baseline_inuse: i64,
    inuse: i64,
    new_in_this_build: bool,
    why: String,
}

#[derive(Serialize)]
struct BaselineSummary {
    name: String,
    label: Option<String>,
    /// The compared cycles and builds: this run's cycle `cycle` of `build` against the
    /// baseline's cycle `baseline_cycle` of `baseline_build`.
    build: String,
    cycle: u32,
    baseline_build: String,
    baseline_cycle: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    after_baseline_ends: Option<String>,
    verdict: String,
    age_s: f64,
    heap_ratio: Option<f64>,
    /// The pair `heap_ratio` was measured on, when it is not the compared cycles above (the
    /// worst pair compared like with like).
    #[serde(skip_serializing_if = "Option::is_none")]
    heap_ratio_of: Option<RatioPair>,
    regressions: Vec<RegressionSummary>,
    improvements: Vec<String>,
}

#[derive(Serialize)]
struct RatioPair {
    cycle: u32,
    baseline_cycle: u32,
    age_s: f64,
}

#[derive(Serialize)]
struct Files {
    html: &'static str,
    markdown: &'static str,
    flamegraphs: Vec<String>,
}

/// Rounded, and never −0.0.
fn whole(x: f64) -> f64 {
    x.round() + 0.0
}

fn ms(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0 + 0.0
}

/// Rounds every fraction in a document: figures of 1000 and more (bytes, bytes per second,
/// seconds of a long span) to whole numbers, smaller ones (shares, ratios, R²) to four
/// decimals.
fn round_all(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(x) = n.as_f64() {
                let r = if x.abs() >= 1000.0 {
                    x.round()
                } else {
                    (x * 10_000.0).round() / 10_000.0
                } + 0.0;
                if let Some(rounded) = serde_json::Number::from_f64(r) {
                    *n = rounded;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(round_all),
        Value::Object(map) => map.values_mut().for_each(round_all),
        _ => {}
    }
}

#[derive(Serialize)]
struct EnvoySummary<'a> {
    target: &'a str,
    memory_limit_from: Option<&'a str>,
    cpu_limit_from: Option<&'a str>,
    #[serde(flatten)]
    report: worded::EnvoyJson<'a>,
}

fn envoy(e: &EnvoyView) -> serde_json::Value {
    let mut v = serde_json::to_value(EnvoySummary {
        target: e.target,
        memory_limit_from: e.memory_from,
        cpu_limit_from: e.cpu_from,
        report: worded::EnvoyJson::new(e.report),
    })
    .expect("the envoy findings are plain data");
    round_all(&mut v);
    v
}

#[derive(Serialize)]
struct KubeSummary<'a> {
    file: &'a str,
    #[serde(flatten)]
    report: worded::TriageJson<'a>,
}

fn kubernetes(k: &KubeView) -> serde_json::Value {
    let mut v = serde_json::to_value(KubeSummary {
        file: &k.file,
        report: worded::TriageJson::new(k.report),
    })
    .expect("the triage is plain data");
    round_all(&mut v);
    v
}

pub fn json(m: &ReportModel) -> String {
    let run = &m.run;
    let info = run.info;
    let cycles = run
        .growth
        .cycles
        .iter()
        .map(|c| CycleSummary {
            index: c.index,
            build: c.build.clone(),
            build_info: c.build_info.clone(),
            pid: c.pid,
            captures: c.captures,
            errors: c.errors,
            span_s: ms(c.span_s),
            died_after_s: c.died_after_s.map(ms),
            killed: c.killed,
            end: crate::render::ends::end_words(&c.end),
            oom_held_ms: c.oom_held_ms,
            oom_held_below_bytes: c.oom_held_below_bytes,
            unpublished: c.unpublished.as_ref(),
            heap_bytes_per_sec: whole(c.reading.as_ref().map_or(0.0, |r| r.bytes_per_sec)),
            growing_at_end: c.reading.as_ref().is_some_and(|r| r.ongoing),
            reading: c.reading.as_ref(),
            heap_peak: m.peak_heap.iter().find(|(i, _)| *i == c.index).map(|p| p.1),
            memory_bytes_per_sec: c.memory_bytes_per_sec.map(whole),
            memory_peak: c.memory_peak,
            time_to_limit_s: rules::cycle_time_to_limit(c).map(ms),
            verdict: cycle_verdict(c, run.growth.limit_bytes),
            memory_peak_anon: c.memory_peak_anon,
            breakdown: c.breakdown.as_ref().map(breakdown_json),
            at_limit: c.at_limit.as_ref().map(at_limit_json),
            peaks: &c.peaks,
            episode: c.episode.as_ref(),
            other_episodes: &c.other_episodes,
            top_sites: c
                .sites
                .iter()
                .take(TOP)
                .map(|s| SiteSummary {
                    name: s.name.clone(),
                    bytes_per_sec: whole(s.bytes_per_sec),
                    fit_r2: ms(s.fit_r2),
                    share: ms(s.share),
                    onset_s: s.onset_s.map(ms),
                    inuse_last: s.inuse_last,
                })
                .collect(),
            alloc_storms: c
                .alloc_storms
                .iter()
                .take(TOP)
                .map(|s| StormSummary {
                    name: s.name.clone(),
                    peak_bytes_per_sec: whole(s.peak_bytes_per_sec),
                    typical_bytes_per_sec: whole(s.typical_bytes_per_sec),
                    start_s: s.windows.first().map(|w| ms(w.start_s)),
                    inuse_flat: s.inuse_flat,
                })
                .collect(),
            goroutine_growth: c
                .goroutine_growth
                .iter()
                .take(TOP)
                .map(|g| GoroutineSummary {
                    name: g.name.clone(),
                    per_sec: ms(g.per_sec),
                    first: g.first,
                    last: g.last,
                })
                .collect(),
        })
        .collect();
    let baseline = m.baseline.as_ref().map(|b| BaselineSummary {
        name: b.name.clone(),
        label: b.info.and_then(|i| i.label.clone()),
        build: b.comparison.b.clone(),
        cycle: b.comparison.b_cycle,
        baseline_build: b.comparison.a.clone(),
        baseline_cycle: b.comparison.a_cycle,
        after_baseline_ends: b.comparison.after_a.as_ref().map(compare::after_words),
        verdict: compare::verdict(b.comparison),
        age_s: ms(b.comparison.age_s),
        heap_ratio: b
            .heap_ratio
            .and_then(|r| r.ratio())
            .map(|r| (r * 10_000.0).round() / 10_000.0),
        heap_ratio_of: b
            .heap_ratio
            .filter(|h| (h.a_cycle, h.b_cycle) != (b.comparison.a_cycle, b.comparison.b_cycle))
            .map(|h| RatioPair {
                cycle: h.b_cycle,
                baseline_cycle: h.a_cycle,
                age_s: ms(h.age_s),
            }),
        regressions: b
            .comparison
            .regressions
            .iter()
            .take(TOP)
            .map(|r| RegressionSummary {
                name: r.name.clone(),
                baseline_bytes_per_sec: whole(r.a_bytes_per_sec),
                bytes_per_sec: whole(r.b_bytes_per_sec),
                baseline_inuse: r.a_inuse,
                inuse: r.b_inuse,
                new_in_this_build: r.new_in_b,
                why: compare::why_worse(r),
            })
            .collect(),
        improvements: b
            .comparison
            .improvements
            .iter()
            .take(TOP)
            .map(|r| r.name.clone())
            .collect(),
    });
    let headline = m.headline();
    let summary = Summary {
        schema: crate::model::SCHEMA,
        run: RunSummary {
            name: run.name.clone(),
            label: info.and_then(|i| i.label.clone()),
            target: info.map(|i| i.target.clone()),
            source: info.map(|i| i.source.clone()),
            started_ms: info.map(|i| i.started_ms),
            tool: info.map(|i| i.tool.clone()),
            limit_bytes: run.growth.limit_bytes,
            own: run.growth.own.clone(),
        },
        headline: headline.line(),
        lead: headline.lead,
        points: headline.points,
        captures: tally(run.records, usual_interval_ms(info)),
        memory_samples: run.memory.len(),
        cycles,
        across: across_summary(&run.growth.cycles, &run.growth.across),
        baseline,
        rules: m
            .rules
            .iter()
            .map(crate::render::rules::outcome_view)
            .collect(),
        failed: m.failed(),
        envoy: m.envoy.as_ref().map(envoy),
        kubernetes: m.kube.as_ref().map(kubernetes),
        events: run.events,
        files: Files {
            html: "index.html",
            markdown: "report.md",
            flamegraphs: m.flamegraphs.iter().map(|f| f.file.clone()).collect(),
        },
    };
    let mut out = serde_json::to_string_pretty(&summary).expect("the summary is plain data");
    out.push('\n');
    out
}
