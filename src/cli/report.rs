//! `heapwatch report RUN [--baseline RUN] -o OUT [--fail-on RULE]… [--pod POD.json
//! [--events EVENTS.json]] [--cpu-limit CORES]`: analyses the run, draws a growth flamegraph
//! per boot cycle (and a differential one against the baseline), and writes OUT/index.html,
//! OUT/report.md, OUT/summary.json and OUT/flamegraphs/*.svg. A run with `envoy` records gets
//! an Envoy section; a pod file adds the Kubernetes triage checklist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use heapwatch::analyse::rules::{Outcome, Rule};
use heapwatch::analyse::triage::kube::{self, Event, KubeError, Pod};
use heapwatch::analyse::triage::{
    self, ContainerTriage, TriageInput, TriageReport, UsageFigure, WorkerFigure,
};
use heapwatch::decode::{self, DecodeLimits};
use heapwatch::model::Profile;
use heapwatch::render::flame::{self, FlameOptions};
use heapwatch::render::report::{
    BaselineView, EnvoyView, Flamegraph, KubeView, ReportModel, RunView, html, markdown, summary,
};
use heapwatch::scan;
use heapwatch::store::{CaptureRecord, RunDir};
use heapwatch::units;

use heapwatch::pipeline::{self, Analysis, CyclePicks};

use super::check;
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
    /// heap>SIZE, memory>SIZE, kills>N, restarts>N, live-share<0.6.
    #[arg(long = "fail-on", value_name = "RULE", value_parser = check::parse_rule)]
    fail_on: Vec<Rule>,
    /// The target's memory limit (default: the one recorded in the run).
    #[arg(long, value_parser = units::parse_size)]
    limit: Option<u64>,
    /// The CPU limit of an Envoy target in cores (2, 1.5, 500m), against its worker count.
    /// Default: `cpu_limit` recorded in the run, else the Envoy container's limit in --pod.
    #[arg(long, value_name = "CORES", value_parser = check::parse_cores)]
    cpu_limit: Option<f64>,
    /// `kubectl get pod NAME -o json` (a Pod or a List): adds the Kubernetes triage section.
    #[arg(long, value_name = "POD.json")]
    pod: Option<PathBuf>,
    /// `kubectl get events -n NS -o json`, for the triage section's probe findings.
    #[arg(long, value_name = "EVENTS.json", requires = "pod")]
    events: Option<PathBuf>,
    /// When the pod file was taken (RFC 3339), for ages and growth estimates. Default: the
    /// pod file's modification time (when kubectl's output was saved).
    #[arg(long, value_name = "TIME", requires = "pod", value_parser = parse_at)]
    at: Option<i64>,
    /// For the triage section: a container's memory use from `kubectl top pod --containers`
    /// (istio-proxy=737Mi, or POD/CONTAINER=737Mi). Repeatable.
    #[arg(long, value_name = "[POD/]CONTAINER=SIZE", requires = "pod",
          value_parser = super::triage::parse_usage)]
    usage: Vec<UsageFigure>,
    /// For the triage section: a known worker count (16, or istio-proxy=16). Default: Envoy's
    /// server.concurrency when the run has it.
    #[arg(long, value_name = "[CONTAINER=]N", requires = "pod",
          value_parser = super::triage::parse_workers)]
    concurrency: Vec<WorkerFigure>,
    /// Keep the profile writer's own stacks (`runtime/pprof`, `compress/flate` under it) in the
    /// growth flamegraphs; left out by default as the cost of watching.
    #[arg(long)]
    keep_profiler: bool,
    #[command(flatten)]
    cycles: check::CycleFlags,
    #[command(flatten)]
    decode: DecodeFlags,
}

fn parse_at(text: &str) -> Result<i64, String> {
    kube::parse_time(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time (2024-05-02T12:00:00Z)"))
}

/// What a report can add to the run's own findings.
#[derive(Default)]
pub struct Extras {
    /// The Envoy target's CPU limit in cores.
    pub cpu_limit: Option<f64>,
    pub pod: Option<PathBuf>,
    pub events: Option<PathBuf>,
    /// When the pod file was taken (unix ms).
    pub at_ms: Option<i64>,
    pub usage: Vec<UsageFigure>,
    pub workers: Vec<WorkerFigure>,
    /// The boot cycles compared with the baseline, when chosen.
    pub picks: CyclePicks,
    /// Keep the profile writer's stacks in the growth flamegraphs.
    pub keep_profiler: bool,
}

/// The pod and event documents, read and parsed before any analysis so that a broken file
/// fails fast (exit 2, naming it).
struct KubeInput {
    /// The file name, as the report shows it.
    file: String,
    /// The path as given, for error messages.
    path: String,
    pods: Vec<Pod>,
    events: Option<Vec<Event>>,
    now_ms: i64,
}

fn read_kube<T>(path: &Path, parse: fn(&[u8]) -> Result<T, KubeError>) -> Result<T, CliError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CliError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&bytes).map_err(|e| CliError::Usage(format!("{shown}: {e}")))
}

fn kube_input(extras: &Extras) -> Result<Option<KubeInput>, CliError> {
    let Some(path) = &extras.pod else {
        return Ok(None);
    };
    let pods = read_kube(path, kube::parse_pods)?;
    let events = match &extras.events {
        Some(e) => Some(read_kube(e, kube::parse_events)?),
        None => None,
    };
    let modified = || {
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
    };
    let now_ms = extras.at_ms.or_else(modified).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    });
    Ok(Some(KubeInput {
        file: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        path: path.display().to_string(),
        pods,
        events,
        now_ms,
    }))
}

/// The Envoy container of the first pod: `istio-proxy`, a name with "envoy" in it, or the
/// pod's only container.
fn envoy_container(report: &TriageReport) -> Option<&ContainerTriage> {
    let pod = report.pods.first()?;
    pod.containers
        .iter()
        .find(|c| c.name == "istio-proxy" || c.name.contains("envoy"))
        .or(match pod.containers.as_slice() {
            [only] => Some(only),
            _ => None,
        })
}

/// What a written report found, for the callers that print it (`report`, `demo`).
pub struct Written {
    pub headline: String,
    pub outcomes: Vec<Outcome>,
    pub flamegraphs: usize,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let (run, baseline, picks) =
        check::resolve_picks(&args.run, args.baseline.as_deref(), &args.cycles);
    let extras = Extras {
        picks,
        keep_profiler: args.keep_profiler,
        cpu_limit: args.cpu_limit,
        pod: args.pod.clone(),
        events: args.events.clone(),
        at_ms: args.at,
        usage: args.usage.clone(),
        workers: args.concurrency.clone(),
    };
    let written = write_report_with(
        &run,
        baseline.as_deref(),
        &args.out,
        &args.fail_on,
        args.limit,
        &args.decode,
        &extras,
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
    write_report_with(
        run_path,
        baseline,
        out,
        rules_given,
        limit,
        decode,
        &Extras::default(),
    )
}

/// [`write_report`] with the Envoy CPU limit and the Kubernetes documents.
pub fn write_report_with(
    run_path: &Path,
    baseline: Option<&Path>,
    out: &Path,
    rules_given: &[Rule],
    limit: Option<u64>,
    decode: &DecodeFlags,
    extras: &Extras,
) -> Result<Written, CliError> {
    check::require_baseline(rules_given, baseline)?;
    let kube = kube_input(extras)?;
    let options = check::options(limit, extras.cpu_limit, decode, extras.picks);
    let mut analysed = check::analyse(run_path, baseline, &options)?;
    let triaged = match &kube {
        None => None,
        Some(k) => {
            // Envoy's worker count, when the run has it, meets the pod's CPU limit there too.
            let mut workers = extras.workers.clone();
            let from_run = workers.is_empty();
            if from_run {
                workers.extend(
                    pipeline::envoy_snapshots(&analysed.run)
                        .iter()
                        .rev()
                        .find_map(|s| s.stats.concurrency())
                        .and_then(|c| u32::try_from(c).ok())
                        .filter(|&w| w > 0)
                        .map(|workers| WorkerFigure {
                            container: None,
                            workers,
                        }),
                );
            }
            let input = TriageInput {
                pods: &k.pods,
                events: k.events.as_deref(),
                usage: &extras.usage,
                workers: &workers,
                now_ms: k.now_ms,
            };
            let mut report =
                triage::triage(&input).map_err(|e| CliError::Usage(format!("{}: {e}", k.path)))?;
            if from_run && !workers.is_empty() {
                for c in report.pods.iter_mut().flat_map(|p| p.containers.iter_mut()) {
                    if c.cpu.workers_source.as_deref() == Some("--concurrency") {
                        c.cpu.workers_source = Some("server.concurrency in the run".into());
                    }
                }
            }
            Some(report)
        }
    };
    // Limits the run does not know come from the Envoy container of the pod.
    if let (Some(e), Some(c)) = (
        analysed.envoy.as_ref(),
        triaged.as_ref().and_then(envoy_container),
    ) {
        let from = format!("pod container {}", c.name);
        let memory = e
            .limits
            .memory_bytes
            .zip(e.memory_from.clone())
            .or_else(|| c.memory.limit_bytes.map(|m| (m, from.clone())));
        let cpu = e
            .limits
            .cpu_cores
            .zip(e.cpu_from.clone())
            .or_else(|| c.cpu.limit_cores.map(|l| (l, from.clone())));
        if memory.as_ref().map(|m| m.0) != e.limits.memory_bytes
            || cpu.as_ref().map(|c| c.0) != e.limits.cpu_cores
        {
            analysed.envoy = pipeline::envoy_findings(&analysed.run, memory, cpu);
        }
    }
    let outcomes = analysed.evaluate(rules_given);
    let flamegraphs = draw_flamegraphs(&analysed, &decode.limits(), extras.keep_profiler);
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
        envoy: analysed.envoy.as_ref().map(|e| EnvoyView {
            target: &e.target,
            report: &e.report,
            limits: e.limits,
            memory_from: e.memory_from.as_deref(),
            cpu_from: e.cpu_from.as_deref(),
        }),
        kube: kube
            .as_ref()
            .zip(triaged.as_ref())
            .map(|(k, report)| KubeView {
                file: k.file.clone(),
                report,
            }),
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

/// A stored heap capture: its record and decoded profile.
struct Capture<'a> {
    record: &'a CaptureRecord,
    profile: Profile,
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

/// The stored heap capture of a run's boot cycle in effect `age` seconds into it.
fn at_age(run: &RunDir, cycle: u32, age: f64) -> Option<&CaptureRecord> {
    let start = scan::cycle_start_ms(&run.manifest.records, cycle)?;
    scan::capture_at_age(&scan::stored_heaps(run, cycle), start, age)
}

/// A growth flamegraph per boot cycle (first to last stored heap capture) and, with a
/// baseline, a differential one at the compared age. A flamegraph that cannot be drawn is
/// left out; the tables still say what grew.
fn draw_flamegraphs(a: &Analysis, limits: &DecodeLimits, keep_profiler: bool) -> Vec<Flamegraph> {
    let mut out = Vec::new();
    for c in &a.growth.cycles {
        let heaps = scan::stored_heaps(&a.run, c.index);
        // Without sustained growth, the rise into the cycle's peak is what it added.
        let rise = c
            .episode
            .as_ref()
            .filter(|_| c.sites.is_empty())
            .and_then(|e| e.from_seq.zip(e.to_seq))
            .and_then(|(from, to)| {
                let find = |seq| heaps.iter().find(|r| r.seq == seq);
                find(from).zip(find(to))
            });
        let (Some(first), Some(last)) = rise
            .map(|(f, t)| (Some(f), Some(t)))
            .unwrap_or((heaps.first(), heaps.last()))
        else {
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
        let (growth, profiler) = if keep_profiler {
            (growth, 0)
        } else {
            heapwatch::analyse::reduce::without_profiler(growth)
        };
        let span = format!(
            "from {} to {}{}",
            capture_at(&first, c.start_ms),
            capture_at(&last, c.start_ms),
            if rise.is_some() {
                " (the rise into the peak)"
            } else {
                ""
            }
        );
        let options = FlameOptions {
            title: format!(
                "In-use {}, boot cycle {} of {}",
                if rise.is_some() { "rise" } else { "growth" },
                c.index,
                c.build
            ),
            subtitle: Some(if profiler > 0 {
                format!(
                    "{span}; widths: bytes added; the profile writer's {} left out",
                    units::format_bytes(profiler)
                )
            } else {
                format!("{span}; widths: bytes added")
            }),
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
        let loaded = at_age(&b.run, b.comparison.a_cycle, age)
            .and_then(|r| load(&b.run, r, limits))
            .zip(at_age(&a.run, b.comparison.b_cycle, age).and_then(|r| load(&a.run, r, limits)));
        if let Some((base, new)) = loaded {
            let (build, base_label) = (&b.comparison.b, &b.comparison.a);
            let options = FlameOptions {
                title: format!("In-use heap, {build} against {base_label}"),
                subtitle: Some(format!(
                    "{age:.1} s into boot cycle {} of {build} and cycle {} of {base_label}: capture #{} of {base_label}, #{} of {build}",
                    b.comparison.b_cycle, b.comparison.a_cycle, base.record.seq, new.record.seq
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
