//! The words of a flamegraph's title and subtitle, from what the pipeline found to draw
//! ([`FlameTitle`]): what the sample type measures and what its widths count, the amounts,
//! and the files, runs, captures and programs drawn.

use super::flame::FlameOptions;
use crate::units;

/// A sample type, as the profile names it: `inuse_space` in `bytes`, `goroutine` in `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    pub name: String,
    pub unit: String,
}

/// The program a profile came from: its file's name and its build ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: String,
    pub build_id: String,
}

/// A run as a title names it: by its label (the build), else by its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunName {
    Label(String),
    Dir(String),
}

/// A stored capture of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capture {
    pub seq: u64,
    pub cycle: u32,
    /// Seconds since the first capture of its boot cycle.
    pub age_s: f64,
}

/// What a flamegraph draws, for its title and subtitle.
#[derive(Debug, Clone, PartialEq)]
pub enum FlameTitle {
    /// One profile file.
    Profile {
        measure: Measure,
        file: String,
        total: i64,
        program: Option<Program>,
    },
    /// A profile file against a base profile file.
    ProfileDiff {
        measure: Measure,
        file: String,
        total: i64,
        program: Option<Program>,
        base_file: String,
        base_total: i64,
        base_program: Option<Program>,
    },
    /// One capture of a run; `path` is where it lives ("RUN/profiles/000012-heap.pb.gz").
    Capture {
        measure: Measure,
        run: RunName,
        capture: Capture,
        total: i64,
        path: String,
    },
    /// A capture of one run against a capture of a base run.
    RunsDiff {
        measure: Measure,
        run: RunName,
        capture: Capture,
        total: i64,
        base_run: RunName,
        base_capture: Capture,
        base_total: i64,
    },
    /// What a boot cycle added between two captures.
    Growth {
        measure: Measure,
        /// The build the cycle ran.
        build: String,
        from: Capture,
        to: Capture,
        added: i64,
        added_stacks: usize,
        /// What the profile writer's own stacks added, left out.
        profiler: i64,
        /// The rise into the cycle's peak rather than first to last.
        rise: bool,
        /// The capture it starts from held nothing yet (a life's first capture, before its
        /// runtime published a profile): the graph is everything since the cycle began.
        from_empty: bool,
        shrunk_stacks: usize,
        shrunk_by: i64,
    },
}

/// The title, subtitle and count name a flamegraph is drawn with.
pub fn options(t: &FlameTitle) -> FlameOptions {
    let (title, subtitle, measure) = match t {
        FlameTitle::Profile {
            measure,
            file,
            total,
            program,
        } => {
            let count = count_name(measure);
            let amount = amount(*total, &count);
            (
                format!("{} — {file}", capital(&noun(measure))),
                match program {
                    Some(p) => format!("{amount} in all · {}", program_name(p, 12)),
                    None => format!("{amount} in all"),
                },
                measure,
            )
        }
        FlameTitle::ProfileDiff {
            measure,
            file,
            total,
            program,
            base_file,
            base_total,
            base_program,
        } => {
            let count = count_name(measure);
            let side = |total: i64, program: &Option<Program>| {
                let mut s = amount(total, &count);
                if let Some(p) = program {
                    s.push_str(&format!(" ({})", program_name(p, 8)));
                }
                s
            };
            (
                format!("{}: {file} against {base_file}", capital(&noun(measure))),
                format!(
                    "base {} → new {}",
                    side(*base_total, base_program),
                    side(*total, program)
                ),
                measure,
            )
        }
        FlameTitle::Capture {
            measure,
            run,
            capture,
            total,
            path,
        } => (
            format!(
                "{} — {}, capture {}",
                capital(&noun(measure)),
                run_name(run),
                describe(capture)
            ),
            format!("{} in all · {path}", amount(*total, &count_name(measure))),
            measure,
        ),
        FlameTitle::RunsDiff {
            measure,
            run,
            capture,
            total,
            base_run,
            base_capture,
            base_total,
        } => {
            let count = count_name(measure);
            (
                format!(
                    "{}: {} against {}",
                    capital(&noun(measure)),
                    run_name(run),
                    run_name(base_run)
                ),
                format!(
                    "base {} {} → new {} {}",
                    describe(base_capture),
                    amount(*base_total, &count),
                    describe(capture),
                    amount(*total, &count)
                ),
                measure,
            )
        }
        FlameTitle::Growth {
            measure,
            build,
            from,
            to,
            added,
            added_stacks,
            profiler,
            rise,
            from_empty,
            shrunk_stacks,
            shrunk_by,
        } => {
            let count = count_name(measure);
            let from_words = if *from_empty {
                format!(
                    "since the cycle began (its capture #{} at {:.1} s held nothing yet)",
                    from.seq, from.age_s
                )
            } else {
                format!("from capture #{} ({:.1} s)", from.seq, from.age_s)
            };
            let mut subtitle = format!(
                "added {from_words} to #{} ({:.1} s): {} in {}",
                to.seq,
                to.age_s,
                signed(*added, &count),
                stacks(*added_stacks)
            );
            if *profiler > 0 {
                subtitle.push_str(&format!(
                    "; the profile writer's {} left out (--keep-profiler keeps it)",
                    amount(*profiler, &count)
                ));
            }
            if *rise {
                subtitle.push_str(" (the rise into the peak: the cycle has no sustained growth)");
            }
            if *shrunk_stacks > 0 {
                subtitle.push_str(&format!(
                    "; {} shrank by {} (not drawn)",
                    stacks(*shrunk_stacks),
                    amount(*shrunk_by, &count)
                ));
            }
            // A build no process told and no label gave is not named.
            let of_build = if build.is_empty() {
                String::new()
            } else {
                format!(" of {build}")
            };
            (
                format!(
                    "Growth of {}, boot cycle {}{of_build}",
                    noun(measure),
                    to.cycle
                ),
                subtitle,
                measure,
            )
        }
    };
    FlameOptions {
        title,
        subtitle: Some(subtitle),
        count_name: count_name(measure),
    }
}

/// What the widths count, for tooltips: `bytes`, `goroutines`, `objects`, or the unit.
fn count_name(m: &Measure) -> String {
    match (m.name.as_str(), m.unit.as_str()) {
        ("goroutine", _) => "goroutines".into(),
        (_, "bytes") => "bytes".into(),
        (n, _) if n.ends_with("_objects") => "objects".into(),
        (_, "") => "samples".into(),
        (_, u) => u.into(),
    }
}

/// What a sample type measures, in words: "heap in use", "goroutines", or its own name.
fn noun(m: &Measure) -> String {
    match m.name.as_str() {
        "inuse_space" => "heap in use".into(),
        "inuse_objects" => "heap objects in use".into(),
        "alloc_space" => "bytes allocated since start".into(),
        "alloc_objects" => "objects allocated since start".into(),
        "goroutine" => "goroutines".into(),
        other => other.into(),
    }
}

fn capital(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn amount(value: i64, count: &str) -> String {
    if count == "bytes" {
        units::format_bytes(value)
    } else {
        format!("{} {count}", units::group_thousands(value))
    }
}

fn signed(value: i64, count: &str) -> String {
    if value > 0 {
        format!("+{}", amount(value, count))
    } else {
        amount(value, count)
    }
}

fn stacks(n: usize) -> String {
    if n == 1 {
        "1 stack".into()
    } else {
        format!("{n} stacks")
    }
}

/// "build 2.1.0", or "run DIR".
fn run_name(r: &RunName) -> String {
    match r {
        RunName::Label(label) => format!("build {label}"),
        RunName::Dir(dir) => format!("run {dir}"),
    }
}

/// "#53 (cycle 1, 6.3 s)".
fn describe(c: &Capture) -> String {
    format!("#{} (cycle {}, {:.1} s)", c.seq, c.cycle, c.age_s)
}

/// "controller f5f5e7ccfd7e": the program and the first `id_len` characters of its build ID.
fn program_name(p: &Program, id_len: usize) -> String {
    if p.build_id.is_empty() {
        p.name.clone()
    } else {
        format!(
            "{} {}",
            p.name,
            p.build_id.chars().take(id_len).collect::<String>()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap() -> Measure {
        Measure {
            name: "inuse_space".into(),
            unit: "bytes".into(),
        }
    }

    #[test]
    fn a_growth_title_says_what_was_added_left_out_and_shrank() {
        let at = |seq, age_s| Capture {
            seq,
            cycle: 2,
            age_s,
        };
        let o = options(&FlameTitle::Growth {
            measure: heap(),
            build: "2.1.0".into(),
            from: at(3, 0.5),
            to: at(40, 7.25),
            added: 3 << 20,
            added_stacks: 1,
            profiler: 4096,
            rise: true,
            from_empty: false,
            shrunk_stacks: 2,
            shrunk_by: 1 << 20,
        });
        assert_eq!(o.title, "Growth of heap in use, boot cycle 2 of 2.1.0");
        assert_eq!(
            o.subtitle.as_deref(),
            Some(
                "added from capture #3 (0.5 s) to #40 (7.2 s): +3.00 MiB in 1 stack; the profile \
                 writer's 4.00 KiB left out (--keep-profiler keeps it) (the rise into the peak: \
                 the cycle has no sustained growth); 2 stacks shrank by 1.00 MiB (not drawn)"
            )
        );
        assert_eq!(o.count_name, "bytes");
    }

    /// Issue 35, item 7b: a restarted life's first capture can hold nothing yet (its runtime
    /// had published no profile), and the graph from it is the whole heap: the title says it
    /// starts from the life's start.
    #[test]
    fn a_growth_from_an_empty_first_capture_says_it_is_since_the_cycle_began() {
        let at = |seq, age_s| Capture {
            seq,
            cycle: 3,
            age_s,
        };
        let o = options(&FlameTitle::Growth {
            measure: heap(),
            build: "oomgrow".into(),
            from: at(157, 0.0),
            to: at(231, 7.1),
            added: 85 << 20,
            added_stacks: 1,
            profiler: 0,
            rise: false,
            from_empty: true,
            shrunk_stacks: 0,
            shrunk_by: 0,
        });
        assert_eq!(
            o.subtitle.as_deref(),
            Some(
                "added since the cycle began (its capture #157 at 0.0 s held nothing yet) to \
                 #231 (7.1 s): +85.0 MiB in 1 stack"
            )
        );
    }

    #[test]
    fn goroutine_counts_and_programs_are_named() {
        let o = options(&FlameTitle::ProfileDiff {
            measure: Measure {
                name: "goroutine".into(),
                unit: "count".into(),
            },
            file: "new.pb.gz".into(),
            total: 1500,
            program: Some(Program {
                name: "controller".into(),
                build_id: "f5f5e7ccfd7e0123".into(),
            }),
            base_file: "old.pb.gz".into(),
            base_total: 8,
            base_program: None,
        });
        assert_eq!(o.title, "Goroutines: new.pb.gz against old.pb.gz");
        assert_eq!(
            o.subtitle.as_deref(),
            Some("base 8 goroutines → new 1,500 goroutines (controller f5f5e7cc)")
        );
        assert_eq!(o.count_name, "goroutines");
    }
}
