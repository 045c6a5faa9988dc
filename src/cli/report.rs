//! `heapwatch report RUN [--baseline RUN] -o OUT [--fail-on RULE]…`: analyses the run, draws
//! a growth flamegraph per boot cycle (and a differential one against the baseline), and
//! writes OUT/index.html, OUT/report.md, OUT/summary.json and OUT/flamegraphs/*.svg.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::rules::{Outcome, Rule};
use heapwatch::decode::{self, DecodeLimits};
use heapwatch::model::Profile;
use heapwatch::render::flame::{self, FlameOptions};
use heapwatch::render::report::{
    BaselineView, Flamegraph, ReportModel, RunView, html, markdown, summary,
};
use heapwatch::store::{CaptureRecord, RecordKind, RunDir};
use heapwatch::units;

use super::check::{self, Analysed};
use super::{CliError, DecodeFlags};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// The run of the previous build doing the same work: adds the comparison and a
    /// differential flamegraph.
    #[arg(long, value_name = "RUN")]
    baseline: Option<PathBuf>,
    /// The report folder (created; files in it are replaced).
    #[arg(long, short = 'o', value_name = "OUT")]
    out: PathBuf,
    /// A bar that fails the command (exit 1) after the report is written:
    /// growth>5MiB/s, time-to-limit<60s, regression>1.5x, goroutines>10/s, storm>100MiB/s,
    /// heap>SIZE, memory>SIZE, kills>N, restarts>N.
    #[arg(long = "fail-on", value_name = "RULE", value_parser = check::parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    #[command(flatten)]
    decode: DecodeFlags,
}

/// What a written report found, for the callers that print it (`report`, `demo`).
pub struct Written {
    pub headline: String,
    pub outcomes: Vec<Outcome>,
    pub flamegraphs: usize,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let written = write_report(
        &args.run,
        args.baseline.as_deref(),
        &args.out,
        &args.fail_on,
        args.limit,
        &args.decode,
    )?;
    println!("{}", written.headline);
    println!(
        "report: {} (with report.md, summary.json and {} flamegraph(s))",
        args.out.join("index.html").display(),
        written.flamegraphs
    );
    check::gate(&written.outcomes)
}

/// Analyses, renders and writes the report; checks the rules last.
pub fn write_report(
    run_path: &Path,
    baseline: Option<&Path>,
    out: &Path,
    rules_given: &[Rule],
    limit: Option<u64>,
    decode: &DecodeFlags,
) -> Result<Written, CliError> {
    check::require_baseline(rules_given, baseline)?;
    let analysed = check::analyse(run_path, baseline, limit, decode)?;
    let outcomes = analysed.evaluate(rules_given);
    let flamegraphs = draw_flamegraphs(&analysed, &decode.limits());
    let mut notes: Vec<String> = analysed
        .notes
        .unreadable
        .iter()
        .map(|p| format!("skipped {p}"))
        .collect();
    if analysed.notes.missing > 0 {
        notes.push(format!(
            "{} profile file(s) named in the manifest are missing (thinned by --max-disk?)",
            analysed.notes.missing
        ));
    }
    let model = ReportModel {
        run: RunView {
            name: dir_name(&analysed.run.root),
            info: analysed.run.info.as_ref(),
            records: &analysed.run.manifest.records,
            memory: &analysed.memory,
            growth: &analysed.growth,
            notes,
        },
        baseline: analysed.baseline.as_ref().map(|b| BaselineView {
            name: dir_name(&b.run.root),
            info: b.run.info.as_ref(),
            comparison: &b.comparison,
            heap_ratio: b.heap_ratio.as_ref(),
        }),
        rules: &outcomes,
        flamegraphs: &flamegraphs,
        peak_heap: &analysed.peak_heap,
    };

    let folder = out.join("flamegraphs");
    std::fs::create_dir_all(&folder).map_err(|source| CliError::Read {
        path: folder.display().to_string(),
        source,
    })?;
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|source| CliError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    for f in &flamegraphs {
        write(&f.file, &f.svg)?;
    }
    write("index.html", &html::html(&model))?;
    write("report.md", &markdown::markdown(&model))?;
    write("summary.json", &summary::json(&model))?;
    Ok(Written {
        headline: model.headline(),
        flamegraphs: flamegraphs.len(),
        outcomes,
    })
}

fn dir_name(path: &Path) -> String {
    std::fs::canonicalize(path)
        .ok()
        .as_deref()
        .unwrap_or(path)
        .file_name()
        .map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

fn label(run: &RunDir) -> String {
    run.info
        .as_ref()
        .and_then(|i| i.label.clone())
        .unwrap_or_else(|| dir_name(&run.root))
}

/// A stored heap capture: its record and decoded profile.
struct Capture<'a> {
    record: &'a CaptureRecord,
    profile: Profile,
}

fn stored_heaps(run: &RunDir, incarnation: u32) -> Vec<&CaptureRecord> {
    let mut heaps: Vec<&CaptureRecord> = run
        .manifest
        .records
        .iter()
        .filter(|r| {
            r.is_ok()
                && r.kind == RecordKind::Heap
                && r.dup_of.is_none()
                && r.incarnation == incarnation
                && run.file_path(r).is_some_and(|p| p.is_file())
        })
        .collect();
    heaps.sort_by_key(|r| (r.t_ms, r.seq));
    heaps
}

fn load<'a>(run: &RunDir, record: &'a CaptureRecord, limits: &DecodeLimits) -> Option<Capture<'a>> {
    let bytes = std::fs::read(run.file_path(record)?).ok()?;
    let profile = decode::decode(&bytes, limits).ok()?;
    Some(Capture { record, profile })
}

fn inuse(c: &Capture) -> Vec<(String, i64)> {
    let index = c
        .profile
        .find_sample_type("inuse_space")
        .unwrap_or_else(|| c.profile.default_sample_index());
    flame::folded(&c.profile, index)
}

fn capture_at(c: &Capture, start_ms: i64) -> String {
    format!(
        "capture #{} at {:.1} s",
        c.record.seq,
        (c.record.t_ms - start_ms) as f64 / 1000.0
    )
}

/// The stored heap capture of a run's first boot cycle nearest `age` seconds into it.
fn nearest(run: &RunDir, age: f64) -> Option<&CaptureRecord> {
    let ok = || run.manifest.records.iter().filter(|r| r.is_ok());
    let first = ok().map(|r| r.incarnation).min()?;
    let start = ok()
        .filter(|r| r.incarnation == first)
        .map(|r| r.t_ms)
        .min()?;
    let target = start + (age * 1000.0) as i64;
    stored_heaps(run, first)
        .into_iter()
        .min_by_key(|r| ((r.t_ms - target).abs(), r.seq))
}

/// A growth flamegraph per boot cycle (first to last stored heap capture) and, with a
/// baseline, a differential one at the compared age. A flamegraph that cannot be drawn is
/// left out; the tables still say what grew.
fn draw_flamegraphs(a: &Analysed, limits: &DecodeLimits) -> Vec<Flamegraph> {
    let mut out = Vec::new();
    let build = label(&a.run);
    for c in &a.growth.cycles {
        let heaps = stored_heaps(&a.run, c.index);
        let (Some(first), Some(last)) = (heaps.first(), heaps.last()) else {
            continue;
        };
        if first.seq == last.seq {
            continue;
        }
        let (Some(first), Some(last)) = (load(&a.run, first, limits), load(&a.run, last, limits))
        else {
            continue;
        };
        let mut growth: BTreeMap<String, i64> = inuse(&last).into_iter().collect();
        for (stack, v) in inuse(&first) {
            *growth.entry(stack).or_default() -= v;
        }
        let growth: Vec<(String, i64)> = growth.into_iter().filter(|(_, v)| *v > 0).collect();
        let span = format!(
            "from {} to {}",
            capture_at(&first, c.start_ms),
            capture_at(&last, c.start_ms)
        );
        let options = FlameOptions {
            title: format!("In-use growth, boot cycle {} of {build}", c.index),
            subtitle: Some(format!("{span}; widths: bytes added")),
            count_name: "bytes".into(),
        };
        if let Ok(svg) = flame::flame_svg(&growth, &options) {
            out.push(Flamegraph {
                file: format!("flamegraphs/cycle-{}-growth.svg", c.index),
                cycle: Some(c.index),
                caption: format!(
                    "What boot cycle {} added to the in-use heap {span}: each frame is as wide as the bytes added under it.",
                    c.index
                ),
                svg,
            });
        }
    }
    if let Some(b) = &a.baseline {
        let age = b.comparison.age_s;
        let loaded = nearest(&b.run, age)
            .and_then(|r| load(&b.run, r, limits))
            .zip(nearest(&a.run, age).and_then(|r| load(&a.run, r, limits)));
        if let Some((base, new)) = loaded {
            let base_label = label(&b.run);
            let options = FlameOptions {
                title: format!("In-use heap, {build} against {base_label}"),
                subtitle: Some(format!(
                    "{age:.1} s into the first boot cycle: capture #{} of {base_label}, #{} of {build}",
                    base.record.seq, new.record.seq
                )),
                count_name: "bytes".into(),
            };
            if let Ok(svg) = flame::diff_flame_svg(&inuse(&base), &inuse(&new), &options) {
                out.push(Flamegraph {
                    file: "flamegraphs/diff-vs-baseline.svg".into(),
                    cycle: None,
                    caption: format!(
                        "In-use heap of {build} against {base_label} at {age:.1} s: red grew in {build}, blue shrank."
                    ),
                    svg,
                });
            }
        }
    }
    out
}
