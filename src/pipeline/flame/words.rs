//! What a flamegraph's title names, as data for `render::flame_titles`: the sample type, the
//! program, the run, a capture, a file's own name.

use std::path::Path;

use crate::model::Profile;
use crate::pipeline::captures::StoredCapture;
use crate::render::flame_titles::{Capture, Measure, Program, RunName};
use crate::store::RunDir;

pub(super) fn measure(profile: &Profile, index: usize) -> Measure {
    Measure {
        name: profile.sample_type_name(index).to_string(),
        unit: profile.sample_type_unit(index).to_string(),
    }
}

pub(super) fn capture(c: &StoredCapture<'_>) -> Capture {
    Capture {
        seq: c.record.seq,
        cycle: c.record.cycle,
        age_s: c.age_s,
    }
}

pub(super) fn file_name(path: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(path)
        .or_else(|| name(&path.canonicalize().ok()?))
        .unwrap_or_else(|| path.display().to_string())
}

/// The run's label (its build), else its directory's name.
pub(super) fn run_name(run: &RunDir) -> RunName {
    match run.info.as_ref().and_then(|i| i.label.as_deref()) {
        Some(label) if !label.is_empty() => RunName::Label(label.to_string()),
        _ => RunName::Dir(file_name(&run.root)),
    }
}

/// The profiled program and its build ID, from the first mapping that names a file.
pub(super) fn program(profile: &Profile) -> Option<Program> {
    let m = profile
        .mappings
        .iter()
        .find(|m| !profile.str(m.file).is_empty())?;
    let file = profile.str(m.file);
    Some(Program {
        name: file.rsplit('/').next().unwrap_or(file).to_string(),
        build_id: profile.str(m.build_id).to_string(),
    })
}
