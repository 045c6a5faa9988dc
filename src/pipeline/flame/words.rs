//! The words of a flamegraph's title and subtitle: what a sample type measures and counts,
//! amounts, and short names for files, runs and programs.

use std::path::Path;

use crate::model::Profile;
use crate::store::RunDir;
use crate::units;

/// What the widths count, for tooltips: `bytes`, `goroutines`, `objects`, or the unit.
pub(super) fn count_name(profile: &Profile, index: usize) -> String {
    let (name, unit) = (
        profile.sample_type_name(index),
        profile.sample_type_unit(index),
    );
    match (name, unit) {
        ("goroutine", _) => "goroutines".into(),
        (_, "bytes") => "bytes".into(),
        (n, _) if n.ends_with("_objects") => "objects".into(),
        (_, "") => "samples".into(),
        (_, u) => u.into(),
    }
}

/// What a sample type measures, in words: "heap in use", "goroutines", or its own name.
pub(super) fn noun(profile: &Profile, index: usize) -> String {
    match profile.sample_type_name(index) {
        "inuse_space" => "heap in use".into(),
        "inuse_objects" => "heap objects in use".into(),
        "alloc_space" => "bytes allocated since start".into(),
        "alloc_objects" => "objects allocated since start".into(),
        "goroutine" => "goroutines".into(),
        other => other.into(),
    }
}

pub(super) fn capital(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub(super) fn amount(value: i64, count: &str) -> String {
    if count == "bytes" {
        units::format_bytes(value)
    } else {
        format!("{} {count}", units::group_thousands(value))
    }
}

pub(super) fn signed(value: i64, count: &str) -> String {
    if value > 0 {
        format!("+{}", amount(value, count))
    } else {
        amount(value, count)
    }
}

pub(super) fn stacks(n: usize) -> String {
    if n == 1 {
        "1 stack".into()
    } else {
        format!("{n} stacks")
    }
}

pub(super) fn file_name(path: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(path)
        .or_else(|| name(&path.canonicalize().ok()?))
        .unwrap_or_else(|| path.display().to_string())
}

/// "build 2.1.0" from the run's label, else "run DIR".
pub(super) fn build_of(run: &RunDir) -> String {
    match run.info.as_ref().and_then(|i| i.label.as_deref()) {
        Some(label) if !label.is_empty() => format!("build {label}"),
        _ => format!("run {}", file_name(&run.root)),
    }
}

/// The profiled program and its build ID, from the first mapping that names a file:
/// "controller f5f5e7ccfd7e".
pub(super) fn binary(profile: &Profile, id_len: usize) -> Option<String> {
    let m = profile
        .mappings
        .iter()
        .find(|m| !profile.str(m.file).is_empty())?;
    let file = profile.str(m.file);
    let name = file.rsplit('/').next().unwrap_or(file);
    let id = profile.str(m.build_id);
    Some(if id.is_empty() {
        name.to_string()
    } else {
        format!("{name} {}", id.chars().take(id_len).collect::<String>())
    })
}
