//! The layering rule, held against the code: every top-level module stands on a floor, and its
//! code (tests aside) imports only from floors below its own. A table here is the one place the
//! order is written; docs/architecture.md shows the same table, and the test says where the two
//! differ.
//!
//! What counts as an import is any `crate::NAME` outside a comment: a `use`, a path in code, a
//! `crate::{A, B}` group. `super::` paths are not read (none today leaves its top-level module).
//! A `#[cfg(test)] mod` and the files `tests.rs`, `*_tests.rs` are tests and may reach any floor
//! (a property test borrows a higher floor's generator). The binary (`src/main.rs`, `src/cli/`)
//! is the floor above them all.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first: a module may import from any floor below its own, never from its
/// own floor or above.
const FLOORS: &[&[&str]] = &[
    &["units", "time"],
    &["model"],
    &["decode"],
    &["analyse", "source"],
    &["store", "node"],
    &["index", "replay", "push", "render"],
    &["collect", "pipeline"],
    &["launch"],
];

/// Imports the floors would allow that the design does not: (importer, imported, why).
const NEVER: &[(&str, &str, &str)] = &[(
    "render",
    "source",
    "render words finished results and never asks a target",
)];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level modules `src/lib.rs` declares (the test-only ones aside).
fn declared_modules() -> BTreeSet<String> {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        let name = path.file_name().unwrap().to_string_lossy();
        if name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path.to_path_buf());
        }
    }
}

/// The source of one module: `src/NAME.rs` and everything under `src/NAME/`.
fn module_files(module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in [
        root().join("src").join(format!("{module}.rs")),
        root().join("src").join(module),
    ] {
        if path.exists() {
            rust_files(&path, &mut files);
        }
    }
    files
}

/// The code of a file with its comments and its `#[cfg(test)] mod`s (inline or in a file of
/// their own) left out.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    let mut skip_to = 0;
    for (i, line) in lines.iter().enumerate() {
        if i < skip_to {
            continue;
        }
        if line.trim_start().starts_with("#[cfg(test)]") {
            if let Some(end) = test_module_end(&lines, i) {
                skip_to = end + 1;
                continue;
            }
        }
        let without_comment = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        code.push((i + 1, without_comment.to_string()));
    }
    code
}

/// Where the test module that `#[cfg(test)]` on line `at` marks ends (its `mod x;` line, or the
/// line that closes its braces), or None when the attribute marks no module.
fn test_module_end(lines: &[&str], at: usize) -> Option<usize> {
    let (offset, first) = lines[at + 1..]
        .iter()
        .enumerate()
        .find(|(_, l)| !l.trim_start().starts_with("#["))?;
    let start = at + 1 + offset;
    let first = first.trim_start();
    let first = first.strip_prefix("pub(crate) ").unwrap_or(first);
    if !first.starts_with("mod ") {
        return None;
    }
    if first.trim_end().ends_with(';') {
        return Some(start);
    }
    let mut depth = 0i32;
    for (i, line) in lines.iter().enumerate().skip(start) {
        depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
        if depth <= 0 && line.contains('}') {
            return Some(i);
        }
    }
    Some(lines.len())
}

/// The top-level names a line of code reaches through `crate::`.
fn crate_paths(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `heapwatch_crate::`, not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::X, b}`: the first name of each item at the group's top level.
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ if depth == 0 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            for item in items {
                let name: String = item
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

/// Every import that breaks the rule, as `file:line: importer (floor) imports imported (floor)`.
fn violations() -> Vec<String> {
    let modules = declared_modules();
    let mut found = Vec::new();
    for importer in &modules {
        let own = floor_of(importer).unwrap();
        for file in module_files(importer) {
            let text = fs::read_to_string(&file).unwrap();
            let shown = file.strip_prefix(root()).unwrap().display().to_string();
            for (number, line) in code_lines(&text) {
                for imported in crate_paths(&line) {
                    if imported == *importer || !modules.contains(&imported) {
                        continue; // its own code, or a macro exported at the root
                    }
                    let theirs = floor_of(&imported).unwrap();
                    if theirs >= own {
                        found.push(format!(
                            "{shown}:{number}: {importer} (floor {own}) imports {imported} \
                             (floor {theirs})"
                        ));
                    }
                    if let Some((_, _, why)) = NEVER
                        .iter()
                        .find(|(a, b, _)| *a == importer && *b == imported)
                    {
                        found.push(format!(
                            "{shown}:{number}: {importer} imports {imported}, which it never \
                             does: {why}"
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_module_stands_on_one_floor() {
    let modules = declared_modules();
    let placed: Vec<&str> = FLOORS.iter().flat_map(|f| f.iter().copied()).collect();
    let unplaced: Vec<&String> = modules
        .iter()
        .filter(|m| !placed.contains(&m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "{unplaced:?}: declared in src/lib.rs but on no floor of src/layering.rs"
    );
    let gone: Vec<&&str> = placed.iter().filter(|m| !modules.contains(**m)).collect();
    assert!(
        gone.is_empty(),
        "{gone:?}: on a floor but not in src/lib.rs"
    );
    let mut seen = BTreeSet::new();
    for m in &placed {
        assert!(seen.insert(m), "{m} stands on two floors");
    }
}

#[test]
fn every_import_runs_down() {
    let found = violations();
    assert!(
        found.is_empty(),
        "imports that run up the floors (src/layering.rs, docs/architecture.md \"Layering\"):\n{}",
        found.join("\n")
    );
}

/// The table in docs/architecture.md is this one: a floor row there reads `| N | `a`, `b` | …`.
#[test]
fn the_architecture_doc_shows_these_floors() {
    let doc = fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut shown: Vec<Vec<String>> = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].chars().all(|c| c.is_ascii_digit()) || cells[1].is_empty() {
            continue;
        }
        let floor: usize = cells[1].parse().unwrap();
        if floor != shown.len() {
            continue;
        }
        shown.push(
            cells[2]
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .collect(),
        );
    }
    let ours: Vec<Vec<String>> = FLOORS
        .iter()
        .map(|f| f.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(
        shown, ours,
        "docs/architecture.md's floors differ from src/layering.rs"
    );
}

#[test]
fn imports_are_read_from_uses_paths_and_groups() {
    assert_eq!(
        crate_paths("use crate::source::cgroup::{CgroupRoots, detect};"),
        ["source"]
    );
    assert_eq!(
        crate_paths("use crate::{html, model::Profile, store::{RunDir, RunInfo}};"),
        ["html", "model", "store"]
    );
    assert_eq!(
        crate_paths("let x = crate::units::bytes(crate::time::now());"),
        ["units", "time"]
    );
    assert_eq!(crate_paths("use heapwatch_crate::x;"), Vec::<String>::new());
    let text = "use crate::model::X;\n// crate::render in a comment\n#[cfg(test)]\nmod tests {\n    \
                use crate::launch::Y;\n}\n#[cfg(test)]\nmod more_tests;\nuse crate::units::Z;\n";
    let code: Vec<String> = code_lines(text)
        .into_iter()
        .flat_map(|(_, l)| crate_paths(&l))
        .collect();
    assert_eq!(code, ["model", "units"]);
}
