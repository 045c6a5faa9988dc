//! A report folder written, as `report` writes it and `demo` ends with it: the run analysed
//! (one run, or every node of a cluster run), rendered, and written as OUT/index.html,
//! OUT/report.md, OUT/summary.json and OUT/flamegraphs/*.svg; the rules checked last, for the
//! caller to gate on.

mod cluster;

use std::path::Path;

use heapwatch::analyse::cluster::NodeOutcomes;
use heapwatch::analyse::rules::{Outcome, Rule};
use heapwatch::pipeline::CyclePicks;
use heapwatch::pipeline::cluster::ClusterRun;
use heapwatch::pipeline::report::{self, ReportInputs};
use heapwatch::render::headline::Headline;
use heapwatch::render::report::{ReportModel, flames, html, markdown, summary};

use super::{CliError, DecodeFlags, OwnFlags};
use super::{gate, opened};

/// What a report can add to the run's own findings.
#[derive(Default)]
pub struct Extras {
    /// The Envoy target's CPU limit in cores.
    pub cpu_limit: Option<f64>,
    /// The boot cycles compared with the baseline, when chosen.
    pub picks: CyclePicks,
    /// The Kubernetes documents and figures, and the flamegraph choice.
    pub inputs: ReportInputs,
    /// Which modules are the user's own code (`--own`).
    pub own: OwnFlags,
}

/// What a written report found, for the callers that print it (`report`, `demo`).
pub struct Written {
    pub headline: Headline,
    pub outcomes: Vec<Outcome>,
    pub flamegraphs: usize,
    /// On a cluster run, the rules' outcomes on each node (`outcomes` is then empty).
    pub nodes: Option<Vec<NodeOutcomes>>,
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
    gate::require_baseline(rules_given, baseline)?;
    let kube = report::kube_input(&extras.inputs).map_err(opened::failed)?;
    let options = opened::options(limit, extras.cpu_limit, decode, extras.picks, &extras.own);
    if let Some(c) = ClusterRun::open(run_path).map_err(opened::failed)? {
        if kube.is_some() {
            return Err(CliError::Usage(format!(
                "{}: is a cluster run; --pod applies to one pod: report one node ({}/targets/NAME)",
                run_path.display(),
                run_path.display()
            )));
        }
        return cluster::write(&c, baseline, out, rules_given, &options, &extras.inputs);
    }
    let analysed = opened::analyse(run_path, baseline, &options)?;
    let prepared = report::prepare(analysed, kube, rules_given, &options, &extras.inputs)
        .map_err(opened::failed)?;
    let drawn = flames::draw(&prepared.flames);
    let model = prepared.model(&drawn);
    write_files(out, &model)?;
    Ok(Written {
        headline: model.headline(),
        flamegraphs: drawn.len(),
        outcomes: prepared.outcomes.clone(),
        nodes: None,
    })
}

/// Writes a folder's file, naming it when that fails.
fn write_file(out: &Path, name: &str, text: &str) -> Result<(), CliError> {
    let path = out.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CliError::Read {
            path: parent.display().to_string(),
            source,
        })?;
    }
    std::fs::write(&path, text).map_err(|source| CliError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Writes one run's report folder: the page, the markdown, the summary and the flamegraphs.
fn write_files(out: &Path, model: &ReportModel) -> Result<(), CliError> {
    let folder = out.join("flamegraphs");
    std::fs::create_dir_all(&folder).map_err(|source| CliError::Read {
        path: folder.display().to_string(),
        source,
    })?;
    for f in model.flamegraphs {
        write_file(out, &f.file, &f.svg)?;
    }
    write_file(out, "index.html", &html::html(model))?;
    write_file(out, "report.md", &markdown::markdown(model))?;
    write_file(out, "summary.json", &summary::json(model))?;
    Ok(())
}
