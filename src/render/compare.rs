//! `heapwatch compare` as text and JSON.

use std::fmt::Write as _;

use crate::analyse::compare::{AfterBaseline, BEnd, Comparison, Regression, SideEpisode};
use crate::analyse::select::Chosen;
use crate::model::run_options::{OwnFrom, OwnNamed};
use crate::render::ends::end_words;
use crate::units::format_bytes;

pub fn json(c: &Comparison) -> String {
    let doc = crate::render::worded::ComparisonJson::new(c);
    let mut out = serde_json::to_string_pretty(&doc).expect("comparison is plain data");
    out.push('\n');
    out
}

/// How the cycles were chosen, in words.
pub fn chosen_words(c: &Chosen) -> String {
    match c {
        Chosen::NewestBuilds { b_build, a_build } => {
            format!("the cycles of B's newest build ({b_build}) against A's build ({a_build})")
        }
        Chosen::Picked => "the cycles chosen with RUN@N / --cycle / --baseline-cycle".to_string(),
    }
}

/// In JSON, how the cycles were chosen is its words, in the place the field takes in
/// `Comparison` (serde's derive calls this; the words stay in render).
impl serde::Serialize for Chosen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&chosen_words(self))
    }
}

/// What a table calls each side: its build, or "A (build)" and "B (build)" when both ran the
/// same build (two columns both headed "2.15.3" say nothing).
pub fn side_labels(c: &Comparison) -> (String, String) {
    if c.a == c.b {
        (format!("A ({})", c.a), format!("B ({})", c.b))
    } else {
        (c.a.clone(), c.b.clone())
    }
}

pub fn text(c: &Comparison, rows: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A = {} (cycle {}, the baseline), B = {} (cycle {}): rates over each cycle's growth \
         episode, site peaks over the first {:.1} s, which both cycles cover; chosen: {}",
        c.a,
        c.a_cycle,
        c.b,
        c.b_cycle,
        c.age_s,
        chosen_words(&c.chosen)
    );
    // The line above says which is A and which is B: the points need not.
    let _ = writeln!(out, "verdict: {}", lead(c, None));
    for p in verdict_parts(c) {
        let _ = writeln!(out, "  - {p}");
    }
    if !c.regressions.is_empty() {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>12}  site",
            "A rate", "B rate", "A peak", "B peak"
        );
        for r in c.regressions.iter().take(rows) {
            let _ = writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>12}  {}{}",
                format!("{}/s", format_bytes(r.a_bytes_per_sec as i64)),
                format!("{}/s", format_bytes(r.b_bytes_per_sec as i64)),
                format_bytes(r.a_inuse),
                format_bytes(r.b_inuse),
                r.name,
                if r.new_in_b { " (new in B)" } else { "" }
            );
        }
    }
    if !c.improvements.is_empty() {
        let names: Vec<&str> = c
            .improvements
            .iter()
            .take(rows)
            .map(|r| r.name.as_str())
            .collect();
        let _ = writeln!(out, "better in B: {}", names.join(", "));
    }
    if let Some(after) = &c.after_a {
        let _ = writeln!(out, "{}", after_words(after));
    }
    for o in &c.other_pairs {
        let _ = writeln!(
            out,
            "also compared: cycle {} of B against cycle {} of A: {}",
            o.b_cycle,
            o.a_cycle,
            pair_verdict(&o.pair)
        );
    }
    if c.a_own.is_some() || c.b_own.is_some() {
        let side = |o: &Option<OwnNamed>| match o {
            None => "none named".to_string(),
            Some(o) => format!(
                "{} ({})",
                o.prefixes.join(", "),
                match o.from {
                    OwnFrom::Recorded => "recorded with the run",
                    OwnFrom::Given => "--own",
                }
            ),
        };
        let _ = writeln!(
            out,
            "own code beside the main module: A {}; B {}",
            side(&c.a_own),
            side(&c.b_own)
        );
    }
    out
}

/// The comparison's verdict: its leading pair's, then whether both sides ran one build, and
/// which other cycles were compared.
pub fn verdict(c: &Comparison) -> String {
    let parts = verdict_parts(c);
    let (pair, rest) = parts.split_at(1);
    let mut verdict = format!(
        "A = {} (cycle {}), B = {} (cycle {}): {}",
        c.a, c.a_cycle, c.b, c.b_cycle, pair[0]
    );
    for p in rest {
        verdict.push_str("; ");
        verdict.push_str(p);
    }
    verdict
}

/// The parts of [`verdict`], each a clause of its own, without the "A = …, B = …" that
/// introduces them: what a headline lists.
pub fn verdict_parts(c: &Comparison) -> Vec<String> {
    let mut parts = pair_parts(c);
    if c.selection_same_build {
        parts.push(format!(
            "both sides ran build {}: there was no other build to compare with",
            c.selection_b_build
        ));
    }
    if !c.other_pairs.is_empty() {
        let list: Vec<String> = c
            .other_pairs
            .iter()
            .map(|o| o.b_cycle.to_string())
            .collect();
        parts.push(format!(
            "the worst of {} cycles of {} (also compared: cycle {})",
            c.other_pairs.len() + 1,
            c.selection_b_build,
            list.join(", ")
        ));
    }
    parts
}

/// Which cycles of which builds were compared: "cycle 3 of 2.1.0 against cycle 1 of 2.0.2,
/// over the first 7.4 s".
pub fn compared(c: &Comparison) -> String {
    format!(
        "cycle {} of {} against cycle {} of {}, over the first {:.1} s",
        c.b_cycle, c.b, c.a_cycle, c.a, c.age_s
    )
}

/// One pair's words: "A = 2.0.2 (cycle 1), B = 2.1.0 (cycle 3): SITE regressed in B: WHY
/// (cycle 3 of B against cycle 1 of A, over the first 7.4 s); after A's last capture at …".
pub fn pair_verdict(c: &Comparison) -> String {
    format!(
        "A = {} (cycle {}), B = {} (cycle {}): {}",
        c.a,
        c.a_cycle,
        c.b,
        c.b_cycle,
        pair_parts(c).join("; ")
    )
}

/// Whether B's whole in-use heap held less than A's at its peak while a site held more: then
/// that site is no regression of B, only a site that holds more.
fn whole_heap_smaller(c: &Comparison) -> Option<f64> {
    let ratio = c
        .a_heap_peak
        .zip(c.b_heap_peak)
        .filter(|(a, _)| *a > 0)
        .map(|(a, b)| b as f64 / a as f64)?;
    let b_died_alone = c.b_episode.oom_killed && !c.a_episode.oom_killed;
    (ratio < 1.0 && !b_died_alone).then_some(ratio)
}

/// The parts of one pair's words, without the "A = …, B = …" that introduces them: the whole
/// cycles, the site that regressed with which cycles were compared, and B after A's data.
fn pair_parts(c: &Comparison) -> Vec<String> {
    let mut parts = picture(c);
    let regressed = match (c.regressions.first(), whole_heap_smaller(c)) {
        // A site that holds more while the whole heap holds less is no regression of B.
        (Some(r), Some(ratio)) => format!(
            "no regression of the whole heap (B's in-use peak is {ratio:.2}x A's); {} holds more in B: {}",
            r.name,
            why_worse(r)
        ),
        (Some(r), None) => format!("{} regressed in B: {}", r.name, why_worse(r)),
        (None, _) => "no site regressed in B".to_string(),
    };
    parts.push(format!("{regressed} ({})", compared(c)));
    if let Some(after) = c
        .after_a
        .as_ref()
        .filter(|x| x.b_heap_peak.is_some() || !x.sites.is_empty() || x.b_end.is_some())
    {
        parts.push(after_words(after));
    }
    parts
}

/// The comparison in one short sentence, for a headline: what regressed, or which side died
/// and which did not, and where to look (the site that regressed). `b_fate` words how B died
/// when the caller knows more than this pair (a crash loop across B's cycles).
pub fn lead(c: &Comparison, b_fate: Option<&str>) -> String {
    let (a_name, b_name) = side_labels(c);
    let (a, b) = (&c.a_episode, &c.b_episode);
    let site = c.regressions.first().map(|r| r.name.as_str());
    let fate = |e: &SideEpisode| match e.died_s {
        Some(d) => format!("{} {d:.1} s after its first capture", end_words(&e.end)),
        None => end_words(&e.end),
    };
    let b_fate = b_fate.map_or_else(|| fate(b), str::to_string);
    let look = |site: Option<&str>, what: &str| {
        site.map_or(String::new(), |s| format!("; {what} is in {s}"))
    };
    match (a.oom_killed, b.oom_killed) {
        (false, true) => format!(
            "{b_name} was {b_fate} and {a_name} was not{}",
            match site {
                Some(s) => look(Some(s), "the regression"),
                None => look(b.site.as_deref(), &format!("{b_name}'s rise")),
            }
        ),
        (true, false) => format!(
            "{a_name} (the baseline) was {} and {b_name} was not{}",
            fate(a),
            match site {
                Some(s) => format!("; {s} holds more in {b_name}"),
                None => String::new(),
            }
        ),
        _ => {
            let both = if a.oom_killed {
                format!("; both were OOM-killed ({b_name} {b_fate})")
            } else {
                String::new()
            };
            match (site, whole_heap_smaller(c)) {
                (Some(s), Some(_)) => format!(
                    "no regression of {b_name}'s whole heap against {a_name}'s, but {s} holds more in {b_name}{both}"
                ),
                (Some(s), None) => format!("{s} regressed in {b_name} against {a_name}{both}"),
                (None, _) => format!("no site regressed in {b_name} against {a_name}{both}"),
            }
        }
    }
}

/// One side's episode: "grew 19.5 MiB/s from 20.0 s (95 % of the rise in main.store)", or
/// "rose 8.0 MiB/s from 1.0 to 4.0 s, then held", or "did not rise".
fn episode_words(e: &SideEpisode) -> String {
    let (Some(onset), Some(end)) = (e.onset_s, e.end_s) else {
        return "did not rise".into();
    };
    let rate = format!("{}/s", format_bytes(e.bytes_per_sec as i64));
    let mut s = if e.growing_at_end {
        format!("grew {rate} from {onset:.1} s")
    } else {
        format!("rose {rate} from {onset:.1} to {end:.1} s, then held")
    };
    match (&e.cause, &e.site, e.share) {
        // As `growth` says it: the caller first, where one holds a rise over several sites.
        (Some(cause), Some(site), Some(share)) => s.push_str(&format!(
            " ({:.0} % of the rise under {} over {} sites; the largest, {site}, {:.0} %)",
            cause.share * 100.0,
            cause.name,
            cause.sites,
            share * 100.0
        )),
        (_, Some(site), Some(share)) => {
            s.push_str(&format!(" ({:.0} % of the rise in {site})", share * 100.0))
        }
        _ => {}
    }
    s
}

fn end_of(e: &SideEpisode) -> String {
    match e.died_s {
        Some(d) => format!("{} at {d:.1} s", end_words(&e.end)),
        None => format!("{} (ran {:.1} s)", end_words(&e.end), e.span_s),
    }
}

/// The whole cycles first: which side died and which did not, and each heap's episode.
fn picture(c: &Comparison) -> Vec<String> {
    let (a, b) = (&c.a_episode, &c.b_episode);
    let mut parts = Vec::new();
    match (a.oom_killed, b.oom_killed) {
        (false, true) => parts.push(format!("B was {} and A was not: {}", end_of(b), end_of(a))),
        (true, false) => parts.push(format!("A was {} and B was not: {}", end_of(a), end_of(b))),
        (true, true) => parts.push(format!(
            "both sides died of memory: A {}, B {}",
            end_of(a),
            end_of(b)
        )),
        (false, false) => {}
    }
    parts.extend(memory_peaks(a, b));
    parts.push(format!(
        "B's in-use heap {}, A's {}",
        episode_words(b),
        episode_words(a)
    ));
    if let (Some(pa), Some(pb)) = (a.heap_peak, b.heap_peak) {
        parts.push(format!(
            "peak in-use heap {} in B against {} in A",
            format_bytes(pb),
            format_bytes(pa)
        ));
    }
    parts
}

/// Where a quarter or more of a side's peak was not anonymous memory (page cache, mostly).
const MOSTLY_ANON: f64 = 0.75;

/// The memory the kernel counts, when both sides were sampled from outside alike; and its
/// anonymous part (heap, stacks, runtime) beside it when either side's peak was a quarter or
/// more something else: two cgroups at one limit peak alike whatever filled them (nats-server:
/// "256 MiB in B against 256 MiB in A (1.00x)", A's 176 MiB of it page cache, B's its heap).
fn memory_peaks(a: &SideEpisode, b: &SideEpisode) -> Option<String> {
    let (ma, mb, of) = (a.memory_peak?, b.memory_peak?, b.memory_of.as_ref()?);
    if a.memory_of.as_ref() != Some(of) || ma <= 0 {
        return None;
    }
    let mut s = format!(
        "{of} memory peaked at {} in B against {} in A ({:.2}x)",
        format_bytes(mb),
        format_bytes(ma),
        mb as f64 / ma as f64
    );
    let mostly_anon = |anon: i64, whole: i64| anon as f64 >= MOSTLY_ANON * whole as f64;
    if let (Some(aa), Some(ab)) = (a.memory_peak_anon, b.memory_peak_anon) {
        if aa > 0 && !(mostly_anon(aa, ma) && mostly_anon(ab, mb)) {
            s.push_str(&format!(
                "; its anonymous part (heap, stacks, runtime; no page cache) {} in B against {} \
                 in A ({:.2}x)",
                format_bytes(ab),
                format_bytes(aa),
                ab as f64 / aa as f64
            ));
        }
    }
    Some(s)
}

/// "only in B: 12 MiB in use at its peak (at 7.0 s)", or "grows 2 MiB/s in B against 0 B/s
/// in A; peaks at 90 MiB (at 7.0 s) in B against 4 MiB in A".
pub fn why_worse(r: &Regression) -> String {
    let at = r
        .b_peak_at_s
        .map_or(String::new(), |t| format!(" (at {t:.1} s)"));
    if r.only_in_b {
        return format!(
            "only in B: {} in use at its peak{at}",
            format_bytes(r.b_inuse)
        );
    }
    let mut why = Vec::new();
    if r.grows_faster && r.a_rose_then_held {
        why.push(format!(
            "grows {}/s in B; in A it rose {}/s, then held",
            format_bytes(r.b_bytes_per_sec as i64),
            format_bytes(r.a_bytes_per_sec as i64)
        ));
    } else if r.grows_faster {
        why.push(format!(
            "grows {}/s in B against {}/s in A",
            format_bytes(r.b_bytes_per_sec as i64),
            format_bytes(r.a_bytes_per_sec as i64)
        ));
    }
    if r.holds_more {
        why.push(format!(
            "peaks at {}{at} in B against {} in A",
            format_bytes(r.b_inuse),
            format_bytes(r.a_inuse)
        ));
    }
    why.join("; ")
}

pub fn after_words(after: &AfterBaseline) -> String {
    let (a_last, b_last) = (after.a_last_s, after.b_last_s);
    let mut parts = Vec::new();
    if let (true, Some(v), Some(t)) = (after.heap_rose, after.b_heap_peak, after.b_heap_peak_at_s) {
        parts.push(format!(
            "B's in-use heap went on to {} at {t:.1} s",
            format_bytes(v)
        ));
    }
    if let Some(s) = after.sites.first() {
        parts.push(format!(
            "{} rose to {} at {:.1} s (from {})",
            s.name,
            format_bytes(s.inuse_after),
            s.after_at_s,
            format_bytes(s.inuse_before)
        ));
    }
    if let Some(e) = &after.b_end {
        parts.push(format!("B was {}", b_end_words(e)));
    }
    if parts.is_empty() {
        format!("after A's last capture at {a_last:.1} s, B ran to {b_last:.1} s with nothing new")
    } else {
        format!(
            "after A's last capture at {a_last:.1} s: {}",
            parts.join("; ")
        )
    }
}

/// How B's cycle ended after A's data: "OOM-killed at 3.5 s", "stopped answering at 3.5 s".
pub fn b_end_words(e: &BEnd) -> String {
    let how = if e.oom_killed {
        "OOM-killed"
    } else {
        "stopped answering"
    };
    format!("{how} at {:.1} s", e.at_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn side(memory: i64, anon: i64) -> SideEpisode {
        SideEpisode {
            onset_s: None,
            end_s: None,
            bytes_per_sec: 0.0,
            growing_at_end: false,
            site: None,
            share: None,
            heap_peak: None,
            memory_peak: Some(memory),
            memory_of: Some("cgroup".into()),
            memory_peak_anon: Some(anon),
            cause: None,
            died_s: None,
            oom_killed: false,
            end: crate::analyse::ends::CycleEnd::StillAnswering,
            span_s: 30.0,
        }
    }

    /// nats-server, real servers: "cgroup memory peaked at 256 MiB in B against 256 MiB in A
    /// (1.00x)" where A's was page cache and B's its heap.
    #[test]
    fn two_peaks_at_one_limit_are_split_by_what_filled_them() {
        let mib = 1 << 20;
        let (a, b) = (side(256 * mib, 80 * mib), side(256 * mib, 250 * mib));
        assert_eq!(
            memory_peaks(&a, &b).unwrap(),
            "cgroup memory peaked at 256 MiB in B against 256 MiB in A (1.00x); its anonymous \
             part (heap, stacks, runtime; no page cache) 250 MiB in B against 80.0 MiB in A \
             (3.12x)"
        );
        // Both mostly anonymous: the peak says it.
        let (a, b) = (side(200 * mib, 190 * mib), side(256 * mib, 250 * mib));
        assert!(!memory_peaks(&a, &b).unwrap().contains("anonymous"));
    }

    /// Prometheus under churn, real servers: growth named the one caller holding the rise
    /// over six sites, compare its largest leaf (`tsdb.newMemSeries`) as if it were the cause.
    #[test]
    fn a_side_s_rise_is_named_by_its_caller_as_growth_names_it() {
        let mut e = side(200 << 20, 180 << 20);
        (e.onset_s, e.end_s, e.growing_at_end) = (Some(2.0), Some(9.0), true);
        e.bytes_per_sec = 8.0 * MIB;
        (e.site, e.share) = (Some("tsdb.newMemSeries".into()), Some(0.16));
        assert_eq!(
            episode_words(&e),
            "grew 8.00 MiB/s from 2.0 s (16 % of the rise in tsdb.newMemSeries)"
        );
        e.cause = Some(crate::analyse::cause::Cause {
            name: "scrape.(*scrapeLoop).append".into(),
            share: 0.7,
            sites: 6,
        });
        assert_eq!(
            episode_words(&e),
            "grew 8.00 MiB/s from 2.0 s (70 % of the rise under scrape.(*scrapeLoop).append over \
             6 sites; the largest, tsdb.newMemSeries, 16 %)"
        );
    }

    #[test]
    fn a_rate_a_held_is_said_as_a_rise_that_held_not_as_none() {
        let mut r = Regression {
            name: "main.leak".into(),
            a_bytes_per_sec: 8.0 * MIB,
            b_bytes_per_sec: 20.0 * MIB,
            a_inuse: 0,
            b_inuse: 0,
            a_peak_at_s: None,
            b_peak_at_s: None,
            inuse_ratio: None,
            new_in_b: false,
            a_rose_then_held: true,
            score: 0.0,
            only_in_b: false,
            grows_faster: true,
            holds_more: false,
        };
        assert_eq!(
            why_worse(&r),
            "grows 20.0 MiB/s in B; in A it rose 8.00 MiB/s, then held"
        );
        r.a_rose_then_held = false;
        assert_eq!(
            why_worse(&r),
            "grows 20.0 MiB/s in B against 8.00 MiB/s in A"
        );
    }
}
