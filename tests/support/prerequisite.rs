//! What a test needs from the machine, and what it does without it: one rule for every test,
//! unit and integration alike (src/lib.rs and tests/cli/main.rs both include this file).
//!
//! Under CI (`CI`, or `HEAPWATCH_REQUIRE_GO` for Go, `HEAPWATCH_REQUIRE_ROOT` for what root
//! gives, as .ci/run sets both) a missing prerequisite fails the test. Elsewhere the test says
//! what is missing and how to get it, then skips (or runs without it, when it can), and the
//! line goes to the process's real stderr: libtest captures only what `print!` and `eprint!`
//! write, and shows it only for a failing test, so a skipped test that printed that way would
//! read as a plain `ok`. A write to `std::io::stderr()` itself reaches the terminal beside the
//! test's `ok`.
//!
//! # Tests that need the machine (`tests/support/prerequisite.rs`)
//!
//! One file, included by the unit tests (`src/lib.rs`) and the integration tests
//! (`tests/cli/main.rs`), decides what a test does without Go, root, Chromium or a kernel feature
//! (`Need`): under `CI`, `HEAPWATCH_REQUIRE_GO` (Go) or `HEAPWATCH_REQUIRE_ROOT` (the rest) it
//! fails; elsewhere it skips (`skip`) or runs a reduced form (`reduced`, e.g. a watchdog in place
//! of a memory cgroup), and says which, what is missing and how to get it. The line is written to
//! `std::io::stderr()` itself: libtest captures only `print!`/`eprint!` and shows them for
//! failing tests, so an `eprintln!` made a skipped test read as a plain `ok`.

#![allow(dead_code)]

use std::io::Write as _;

/// Something a test needs that a machine may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The Go toolchain on PATH: the fixtures, the `go tool pprof` oracle, the push receiver.
    Go,
    /// Root: memory cgroups, tmpfs mounts, the kernel's process events, ptrace.
    Root,
    /// Debian's headless Chromium, for the report's browser test.
    Chromium,
    /// A kernel whose `memory.oom_control` counts OOM kills (`oom_kill`, Linux 4.13 and later).
    OomKillCounter,
    /// A C compiler (`gcc`) for cgo fixtures, which the system linker links.
    CCompiler,
    /// qemu and a Debian kernel, for cgroup v2 in a VM (testdata/vm/run-in-vm.sh installs
    /// them as root where apt can reach Debian's archive).
    Vm,
}

impl Need {
    fn what(self) -> &'static str {
        match self {
            Need::Go => "the Go toolchain",
            Need::Root => "root",
            Need::Chromium => "headless Chromium",
            Need::OomKillCounter => "a kernel that counts OOM kills per cgroup",
            Need::CCompiler => "a C compiler for cgo",
            Need::Vm => "a VM with cgroup v2 (qemu and a Debian kernel)",
        }
    }

    fn how(self) -> &'static str {
        match self {
            Need::Go => "install Go (https://go.dev/dl/) and put `go` on PATH",
            Need::Root => "run the tests as root (sudo -E cargo test) or in a privileged container",
            Need::Chromium => "apt-get install chromium",
            Need::OomKillCounter => "Linux 4.13 or later",
            Need::CCompiler => "apt-get install gcc",
            Need::Vm => "run as root on Debian: testdata/vm/run-in-vm.sh installs what it needs",
        }
    }

    /// The variable that makes this need a requirement, if one is set.
    fn required_by(self) -> Option<&'static str> {
        let set = |name: &str| std::env::var_os(name).is_some();
        let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
        let own = match self {
            Need::Go | Need::CCompiler => "HEAPWATCH_REQUIRE_GO",
            // .ci/run installs Chromium and runs as root: one switch for the full set-up.
            Need::Root | Need::Chromium | Need::OomKillCounter | Need::Vm => {
                "HEAPWATCH_REQUIRE_ROOT"
            }
        };
        if set(own) {
            Some(own)
        } else if ci {
            Some("CI")
        } else {
            None
        }
    }
}

/// The test cannot run here (`why`: what was tried and how it failed). Under CI this fails
/// the test; elsewhere it says so where the user sees it, and the caller returns.
pub fn skip(need: Need, why: &str) {
    missing(need, why, "SKIPPED")
}

/// The test runs without what `need` gives, doing `instead` (e.g. "a watchdog plays the
/// kernel"). Under CI this fails the test; elsewhere it says so where the user sees it.
pub fn reduced(need: Need, why: &str, instead: &str) {
    missing(need, why, &format!("RAN WITHOUT IT ({instead})"))
}

fn missing(need: Need, why: &str, outcome: &str) {
    if let Some(variable) = need.required_by() {
        panic!(
            "{variable} is set, so this test needs {}: {why} ({})",
            need.what(),
            need.how()
        );
    }
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("a test");
    // Written whole in one call, so lines of tests running side by side do not interleave.
    let line = format!(
        "heapwatch test {test}: {outcome}: needs {}: {why}; for full coverage: {}\n",
        need.what(),
        need.how()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}
