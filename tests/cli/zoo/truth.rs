//! A shape's truth, and the judge that holds what heapwatch printed against it: every wrong
//! thing of one test is collected and reported at once (with the headline heapwatch printed
//! and where the run lies), so one failure says all that the analysis got wrong.

use std::fs;
use std::path::{Path, PathBuf};

use heapwatch::units::format_bytes;
use serde_json::Value;

use crate::util;

/// The allocation site a maintainer acts on, as the spec defines it: `own`, the first frame
/// from the leaf up of the project's own code, and `leaf`, the leaf function as pprof spells
/// it.
pub struct Site {
    pub own: &'static str,
    pub leaf: &'static str,
}

impl Site {
    pub const fn at(own: &'static str) -> Site {
        Site { own, leaf: own }
    }

    /// The `site` heapwatch writes: the own frame, with the leaf beside it when they differ.
    pub fn named(&self) -> String {
        if self.own == self.leaf {
            self.own.to_string()
        } else {
            format!("{} (leaf {})", self.own, self.leaf)
        }
    }
}

/// A rate a program keeps to, with what bounds how well a heap profile can show it.
pub struct Rate {
    pub bytes_per_sec: f64,
    /// The size of one retained allocation.
    pub object: f64,
    /// How long a reading of the rise can last: the part of the rise the published profile
    /// shows (the last publication lags by a GC cycle, in a doubling heap up to half its age).
    pub seconds: f64,
}

/// Go's default `runtime.MemProfileRate`.
const SAMPLING: f64 = 512.0 * 1024.0;

impl Rate {
    pub const fn mib(mib_per_sec: f64, object: f64, seconds: f64) -> Rate {
        Rate {
            bytes_per_sec: mib_per_sec * 1024.0 * 1024.0,
            object,
            seconds,
        }
    }

    /// The band a right reading falls in: three standard deviations of the sampling noise
    /// (an allocation of `object` bytes is sampled with probability 1 − e^(−object/512 KiB),
    /// so the window holds n samples on average and its estimate varies by 1/√n), plus 15 %
    /// for where each publication is placed (a GC cycle at either end of the fit).
    pub fn band(&self) -> (f64, f64) {
        let p = 1.0 - (-self.object / SAMPLING).exp();
        let n = self.bytes_per_sec * self.seconds / self.object * p;
        let tolerance = 3.0 / n.sqrt() + 0.15;
        (
            self.bytes_per_sec * (1.0 - tolerance).max(0.1),
            self.bytes_per_sec * (1.0 + tolerance),
        )
    }
}

/// What one life of a shape is.
pub struct Truth {
    pub site: Site,
    pub rate: Rate,
    /// When the rise began, seconds after the life's first capture (a band: captures are
    /// 200–250 ms apart).
    pub onset: (f64, f64),
    /// `end.kind` in `growth --json`.
    pub end: &'static str,
    /// Still rising when the life ended.
    pub ongoing: bool,
    /// The least share of the rise the site holds.
    pub share: f64,
    /// Other sites of the program, which must not be named before the truth's.
    pub decoys: &'static [&'static str],
}

pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB/s", bytes / (1024.0 * 1024.0))
}

fn rate_words(bps: f64) -> String {
    format!("{}/s", format_bytes(bps as i64))
}

/// Collects what is wrong in what heapwatch printed for one run.
pub struct Judge {
    run: PathBuf,
    wrong: Vec<String>,
    growth: Value,
    text: String,
}

impl Judge {
    pub fn new(run: &Path) -> Judge {
        let out = util::run(&["growth", run.to_str().unwrap(), "--json"]);
        assert!(
            out.status.success(),
            "growth --json: {}",
            util::stderr(&out)
        );
        let growth = serde_json::from_slice(&out.stdout).unwrap();
        let out = util::run(&["growth", run.to_str().unwrap()]);
        assert!(out.status.success(), "growth: {}", util::stderr(&out));
        Judge {
            run: run.to_path_buf(),
            wrong: Vec::new(),
            growth,
            text: util::stdout(&out),
        }
    }

    pub fn growth(&self) -> &Value {
        &self.growth
    }

    /// Boot cycle `index` (from 1) of `growth --json`.
    pub fn cycle(&self, index: usize) -> &Value {
        let cycles = self.growth["cycles"].as_array().unwrap();
        cycles.get(index - 1).unwrap_or_else(|| {
            panic!(
                "no boot cycle {index} in {}: {}",
                self.run.display(),
                self.text
            )
        })
    }

    /// The text `growth` prints as cycle `index`'s headline (its `verdict:` line).
    pub fn headline(&self, index: usize) -> String {
        self.text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("verdict: "))
            .nth(index - 1)
            .unwrap_or_else(|| panic!("no verdict line {index} in:\n{}", self.text))
            .to_string()
    }

    /// The text `growth` prints across cycles.
    pub fn across(&self) -> String {
        self.text
            .lines()
            .find_map(|l| l.strip_prefix("across cycles: "))
            .unwrap_or("")
            .to_string()
    }

    pub fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.wrong.push(what());
        }
    }

    /// Fails the test with everything found wrong, if anything was.
    pub fn done(self) {
        if let Some(wrong) = self.finish() {
            panic!("{wrong}");
        }
    }

    /// Everything found wrong, with what growth printed and where the run lies; `None` when
    /// nothing was.
    pub fn finish(self) -> Option<String> {
        if self.wrong.is_empty() {
            return None;
        }
        let heads: Vec<String> = self
            .text
            .lines()
            .filter(|l| l.trim_start().starts_with("verdict: ") || l.starts_with("across"))
            .map(|l| format!("  {}", l.trim()))
            .collect();
        Some(format!(
            "{} wrong in {}:\n- {}\ngrowth printed:\n{}",
            self.wrong.len(),
            self.run.display(),
            self.wrong.join("\n- "),
            heads.join("\n")
        ))
    }

    /// The reading of cycle `index` against `truth`: its top site, rate, onset, end and
    /// whether it still rose, in `growth --json` and in the headline.
    pub fn reading(&mut self, index: usize, truth: &Truth) {
        self.site(index, truth);
        self.shape(index, truth);
    }

    /// Only the top site: the own frame and the leaf in the JSON, and the headline naming it
    /// before any decoy.
    pub fn site(&mut self, index: usize, truth: &Truth) {
        let c = self.cycle(index).clone();
        let top = &c["reading"]["sites"][0];
        let named = truth.site.named();
        self.expect(top["site"] == named.as_str(), || {
            format!(
                "cycle {index}: site {} (leaf {}), not {named}",
                top["site"], top["name"]
            )
        });
        self.expect(top["name"] == truth.site.leaf, || {
            format!(
                "cycle {index}: leaf {}, not {}",
                top["name"], truth.site.leaf
            )
        });
        let own = top["own"]
            .as_str()
            .unwrap_or(top["name"].as_str().unwrap_or(""));
        self.expect(own == truth.site.own, || {
            format!("cycle {index}: own frame {own}, not {}", truth.site.own)
        });
        let share = top["share"].as_f64().unwrap_or(0.0);
        self.expect(share >= truth.share, || {
            format!(
                "cycle {index}: {:.0} % of the rise in the top site, not ≥ {:.0} %",
                share * 100.0,
                truth.share * 100.0
            )
        });
        self.names_first(index, truth.site.own, truth.decoys);
    }

    /// The headline of cycle `index` names `first` before any of `decoys`.
    pub fn names_first(&mut self, index: usize, first: &str, decoys: &[&str]) {
        let head = self.headline(index);
        let at = head.find(first);
        self.expect(at.is_some(), || {
            format!("cycle {index}: the headline does not name {first}")
        });
        if let Some(at) = at {
            for d in decoys {
                let before = head.find(d).is_some_and(|d| d < at);
                self.expect(!before, || {
                    format!("cycle {index}: the headline names {d} before {first}")
                });
            }
        }
    }

    /// The rate, onset, end and trend of cycle `index`.
    pub fn shape(&mut self, index: usize, truth: &Truth) {
        self.rate_and_onset(index, truth);
        self.trend(index, truth);
    }

    /// The rate of cycle `index`'s reading and when it began.
    pub fn rate_and_onset(&mut self, index: usize, truth: &Truth) {
        let r = self.cycle(index)["reading"].clone();
        let (lo, hi) = truth.rate.band();
        let bps = r["bytes_per_sec"].as_f64().unwrap_or(f64::NAN);
        self.expect((lo..=hi).contains(&bps), || {
            format!(
                "cycle {index}: rate {} not within {}–{} (the program keeps {})",
                mib(bps),
                mib(lo),
                mib(hi),
                mib(truth.rate.bytes_per_sec)
            )
        });
        let onset = r["onset_s"].as_f64().unwrap_or(f64::NAN);
        self.expect((truth.onset.0..=truth.onset.1).contains(&onset), || {
            format!(
                "cycle {index}: onset {onset:.2} s, not within {:.1}–{:.1} s",
                truth.onset.0, truth.onset.1
            )
        });
    }

    /// How cycle `index` ended, and whether it still rose then, in the JSON and the headline.
    pub fn trend(&mut self, index: usize, truth: &Truth) {
        let c = self.cycle(index).clone();
        let r = &c["reading"];
        self.expect(c["end"]["kind"] == truth.end, || {
            format!("cycle {index}: end {}, not {}", c["end"], truth.end)
        });
        self.expect(c["killed"] == (truth.end == "oom-killed"), || {
            format!(
                "cycle {index}: killed {} for an end {}",
                c["killed"], truth.end
            )
        });
        self.expect(r["ongoing"] == truth.ongoing, || {
            format!(
                "cycle {index}: ongoing {}, not {}",
                r["ongoing"], truth.ongoing
            )
        });
        let head = self.headline(index);
        if truth.ongoing {
            for word in ["then held", "fell back", "no sustained", "spiked"] {
                self.expect(!head.contains(word), || {
                    format!(
                        "cycle {index}: \"{word}\" in the headline of a life that rose to its end"
                    )
                });
            }
        }
        let json_verdict = c["verdict"].as_str().unwrap_or("");
        self.expect(json_verdict == head, || {
            format!("cycle {index}: growth --json's verdict is not the text's headline")
        });
    }

    /// Everything but the rate and onset for cycle `index`: the site, the end and trend,
    /// `check` and summary.json.
    pub fn all_but_rate(&mut self, index: usize, truth: &Truth) {
        self.site(index, truth);
        self.trend(index, truth);
        self.checks(truth);
        self.summary(index, truth);
    }

    /// `check RUN --fail-on RULE`: its exit code and all it printed.
    pub fn check(&self, rule: &str) -> (i32, String) {
        let out = util::run(&["check", self.run.to_str().unwrap(), "--fail-on", rule]);
        (
            out.status.code().unwrap_or(-1),
            format!("{}{}", util::stdout(&out), util::stderr(&out)),
        )
    }

    /// `check` under the rules whose outcome `truth` decides: a growth bar
    /// at half the slowest right reading trips while the site still rises and names it; kills
    /// trip exactly when a life was killed; nothing that held nears a limit.
    pub fn checks(&mut self, truth: &Truth) {
        let bar = rate_words(truth.rate.band().0 / 2.0);
        let (code, said) = self.check(&format!("growth>{bar}"));
        let want = if truth.ongoing { 1 } else { 0 };
        self.expect(code == want, || {
            format!("check growth>{bar}: exit {code}, not {want}: {said}")
        });
        if truth.ongoing {
            self.expect(said.contains(truth.site.own), || {
                format!(
                    "check growth>{bar} does not name {}: {said}",
                    truth.site.own
                )
            });
        }
        let killed = self.growth["cycles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["killed"] == true);
        let (code, said) = self.check("kills>0");
        self.expect(code == i32::from(killed), || {
            format!("check kills>0: exit {code}: {said}")
        });
        if !truth.ongoing {
            let (code, said) = self.check("time-to-limit<300s");
            self.expect(code == 0, || {
                format!("check time-to-limit<300s: exit {code} for a life that held: {said}")
            });
        }
    }

    /// `report RUN -o RUN.report`: its summary.json.
    pub fn report(&self) -> Value {
        let out_dir = self.run.with_extension("report");
        let _ = fs::remove_dir_all(&out_dir);
        let done = util::run(&[
            "report",
            self.run.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
        ]);
        assert!(done.status.success(), "report: {}", util::stderr(&done));
        serde_json::from_slice(&fs::read(out_dir.join("summary.json")).unwrap()).unwrap()
    }

    /// `report RUN`'s summary.json agrees with growth on cycle `index`.
    pub fn summary(&mut self, index: usize, truth: &Truth) {
        let s = self.report();
        let sc = &s["cycles"][index - 1];
        let c = self.cycle(index).clone();
        self.expect(
            sc["reading"]["sites"][0]["name"] == c["reading"]["sites"][0]["name"],
            || {
                format!(
                    "cycle {index}: summary.json names {}, growth {}",
                    sc["reading"]["sites"][0]["name"], c["reading"]["sites"][0]["name"]
                )
            },
        );
        self.expect(sc["killed"] == c["killed"], || {
            format!("cycle {index}: summary.json killed {}", sc["killed"])
        });
        self.expect(sc["growing_at_end"] == truth.ongoing, || {
            format!(
                "cycle {index}: summary.json growing_at_end {}, not {}",
                sc["growing_at_end"], truth.ongoing
            )
        });
        let head = s["headline"].as_str().unwrap_or("");
        self.expect(head.contains(truth.site.own), || {
            format!("report's headline does not name {}: {head}", truth.site.own)
        });
    }

    /// Everything above for cycle `index`.
    pub fn all(&mut self, index: usize, truth: &Truth) {
        self.reading(index, truth);
        self.checks(truth);
        self.summary(index, truth);
    }
}
