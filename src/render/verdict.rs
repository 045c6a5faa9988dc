//! The words of `growth`: one verdict per boot cycle (sustained growth, a transient spike,
//! storms, goroutines, the limit, how the cycle ended) and one summary across cycles, made from
//! the finished analysis whenever an output needs them.

use crate::analyse::breakdown::Filler;
use crate::analyse::crash_loop::CrashLoop;
use crate::analyse::ends::CycleEnd;
use crate::analyse::growth::{AcrossCycles, CycleGrowth};
use crate::analyse::reading::{Forecast, IntoDeath, Reading};
use crate::analyse::spikes::{Episode, Peak};
use crate::render::ends::end_words;
use crate::render::memory::{cgroup_at_limit, filled_words, filler_name};
use crate::units::format_bytes;

/// A spike that reached this share of the limit is never called "no growth".
const LARGE_SHARE: f64 = 0.5;

/// A cycle's verdict: its episode (or why it has none), its storms, goroutines, the limit, how
/// it ended and its GOMAXPROCS against the CPU limit.
pub fn cycle_verdict(c: &CycleGrowth, limit: Option<u64>) -> String {
    cycle_verdict_parts(c, limit).join("; ")
}

/// The parts of [`cycle_verdict`], each a clause of its own: what a headline lists.
pub fn cycle_verdict_parts(c: &CycleGrowth, limit: Option<u64>) -> Vec<String> {
    let rate = |bps: f64| format!("{}/s", format_bytes(bps as i64));
    let mut parts = Vec::new();
    // A heap that did not fill the limit does not lead: what did, first.
    parts.extend(c.breakdown.as_ref().and_then(filled_words));
    if let Some(r) = &c.reading {
        parts.push(reading_words(r, limit));
    } else if let Some(words) = faster_than_interval(c, limit) {
        parts.push(words);
    } else if let Some((what, p, share)) = large_peak(c, limit) {
        parts.push(format!(
            "in-use heap did not grow steadily (heap {}), but {what} peaked at {} ({:.0} % of the limit) at {:.1} s",
            c.heap_last.map_or("unknown".into(), format_bytes),
            format_bytes(p.bytes),
            share * 100.0,
            p.at_s
        ));
    } else {
        parts.push(format!(
            "no sustained in-use growth (heap {})",
            c.heap_last.map_or("unknown".into(), format_bytes)
        ));
    }
    if let Some(storm) = c.alloc_storms.first() {
        let w = &storm.windows[0];
        parts.push(format!(
            "allocation storm in {} at {} from {:.1} to {:.1} s (typically {})",
            storm.name,
            rate(storm.peak_bytes_per_sec),
            w.start_s,
            w.end_s,
            rate(storm.typical_bytes_per_sec)
        ));
    }
    if let Some(g) = c.goroutine_growth.first() {
        parts.push(format!(
            "goroutines grew {:.1}/s in {} ({} → {})",
            g.per_sec, g.name, g.first, g.last
        ));
    }
    if let Some(a) = &c.at_limit {
        // The end of the cycle is said once, below.
        let words = cgroup_at_limit(a);
        parts.push(words.trim_end_matches(", then OOM-killed").to_string());
    }
    if let (Some(limit), Some(f), None) = (
        limit,
        c.reading.as_ref().and_then(|r| r.forecast.as_ref()),
        &c.at_limit,
    ) {
        parts.push(forecast_words(limit, f));
    }
    parts.extend(end_part(c));
    if let Some(rt) = &c.runtime {
        if let (Some(m), Some(p), Some(l)) = (rt.multiplier, rt.gomaxprocs, rt.cpu_limit) {
            parts.push(format!(
                "GOMAXPROCS {p} against a CPU limit of {l}: {m:.0}x the per-P caches and GC workers the limit pays for"
            ));
        }
    }
    parts
}

/// How the cycle ended, as its verdict says it: "OOM-killed 7.4 s after the first capture";
/// nothing for a process still answering at the end of the run.
pub fn end_part(c: &CycleGrowth) -> Option<String> {
    match (c.end, c.died_after_s) {
        (CycleEnd::StillAnswering, _) => None,
        (end, Some(died)) if end.is_death() => Some(format!(
            "{} {died:.1} s after {}",
            end_words(&end),
            measured_from(c)
        )),
        (end, _) => Some(end_words(&end)),
    }
}

/// What a cycle's times are measured from: its first capture, or, for a life that answered
/// none, its start as its exit record tells it.
pub fn measured_from(c: &CycleGrowth) -> &'static str {
    if c.captures == 0 {
        "it started"
    } else {
        "the first capture"
    }
}

/// The cycle's episode: "in-use heap grew 19.5 MiB/s from 20.0 s (4.00 MiB → 141 MiB), 95 % of
/// the rise in main.storeRawMsg", or, when it held or fell after its peak, "rose … then held".
pub fn reading_words(r: &Reading, limit: Option<u64>) -> String {
    let rate = format!("{}/s", format_bytes(r.bytes_per_sec as i64));
    let fell = (r.to_bytes - r.last_bytes) as f64 >= 0.5 * r.rise() as f64;
    let mut s = if r.ongoing {
        format!(
            "in-use heap grew {rate} from {:.1} s ({} → {})",
            r.onset_s,
            format_bytes(r.from_bytes),
            format_bytes(r.to_bytes)
        )
    } else if fell {
        format!(
            "in-use heap spiked at {rate} from {:.1} to {:.1} s ({} → {})",
            r.onset_s,
            r.end_s,
            format_bytes(r.from_bytes),
            format_bytes(r.to_bytes)
        )
    } else {
        format!(
            "no sustained in-use growth: the heap rose {rate} from {:.1} to {:.1} s ({} → {})",
            r.onset_s,
            r.end_s,
            format_bytes(r.from_bytes),
            format_bytes(r.to_bytes)
        )
    };
    if let Some(share) = limit
        .filter(|&l| l > 0)
        .map(|l| r.to_bytes as f64 / l as f64)
    {
        if share >= 0.05 {
            s.push_str(&format!(" ({:.0} % of the limit)", share * 100.0));
        }
    }
    match (&r.cause, r.sites.first()) {
        // Spread over sites one caller reached: that caller is where to look.
        (Some(cause), Some(top)) => s.push_str(&format!(
            ", {:.0} % of the rise under {} ({} sites; the largest, {}, {:.0} %)",
            cause.share * 100.0,
            cause.name,
            cause.sites,
            top.name,
            top.share * 100.0
        )),
        (_, Some(top)) => s.push_str(&format!(
            ", {:.0} % of the rise in {}",
            top.share * 100.0,
            top.name
        )),
        _ => {}
    }
    if let Some(d) = &r.into_death {
        s.push_str(&into_death_words(d));
    }
    if let Some(held) = r.held_s {
        if fell {
            s.push_str(&format!(
                ", then fell back to {} by the last capture, {held:.1} s after the peak",
                format_bytes(r.last_bytes)
            ));
        } else {
            s.push_str(&format!(
                ", then held ({} at the last capture, {held:.1} s after the peak): not growing at the end",
                format_bytes(r.last_bytes)
            ));
        }
    }
    s
}

/// ", still rising at its death at the limit: the runtime counted 230 MiB (MemStats HeapAlloc
/// at 3.9 s) against 116 MiB in the last published profile".
fn into_death_words(d: &IntoDeath) -> String {
    let counted = if d.of == "recent_space" {
        format!(
            "{} published and {} allocated since (recent_space at {:.1} s, frees not yet known)",
            format_bytes(d.published_bytes),
            format_bytes(d.heap_bytes - d.published_bytes),
            d.at_s
        )
    } else {
        format!(
            "{} ({} at {:.1} s) against {} in the last published profile",
            format_bytes(d.heap_bytes),
            d.of,
            d.at_s,
            format_bytes(d.published_bytes)
        )
    };
    format!(", still rising at its death at the limit: the runtime counted {counted}")
}

/// "256 MiB would be reached 126.0 s after the first capture (between 120.1 and 133.3 s at
/// the fit's slopes; cgroup memory, R² 0.98)".
pub fn forecast_words(limit: u64, f: &Forecast) -> String {
    let latest = if f.latest_s.is_finite() {
        format!("{:.1} s", f.latest_s)
    } else {
        "never".into()
    };
    format!(
        "{} would be reached {:.1} s after the first capture if the growth goes on (between {:.1} s and {latest} at the fit's slopes; fitted on {}, R² {:.2})",
        format_bytes(limit as i64),
        f.at_s,
        f.earliest_s,
        f.of,
        f.fit_r2
    )
}

/// When the cycle died of memory (or near its limit) with no rise of the heap in any capture:
/// the death was faster than the capture interval. Says so, and what to do.
pub fn faster_than_interval(c: &CycleGrowth, limit: Option<u64>) -> Option<String> {
    let died = c.died_after_s.filter(|_| c.end.is_death())?;
    let peak = large_peak(c, limit);
    if c.reading.is_some() || !(c.killed || peak.is_some()) {
        return None;
    }
    let gap = (died - c.span_s).max(0.0);
    let interval = c
        .interval_s
        .map_or(String::new(), |i| format!(" (interval {i:.1} s)"));
    let peak_words = peak.map_or(String::new(), |(what, p, share)| {
        format!(
            "; {what} peaked at {} ({:.0} % of the limit) at {:.1} s",
            format_bytes(p.bytes),
            share * 100.0,
            p.at_s
        )
    });
    let heap = c.heap_last.map_or("unknown".into(), format_bytes);
    let from_outside = "from outside with a proc source (proc:PID, proc:exe:NAME; heapwatch run \
                        uses one), which reads the heap up to the kill";
    // A life that answered no capture at all (an endpoint that opens after a start-up replay).
    if c.captures == 0 {
        let tried = match c.errors {
            0 => "no capture was attempted in its life".to_string(),
            n => format!("its {n} capture attempts all failed"),
        };
        return Some(format!(
            "no capture of this life: it died {died:.1} s after it started, before its target \
             answered ({tried}){peak_words}; read it {from_outside}"
        ));
    }
    // Silent for an interval or more with failed attempts between: the target stopped
    // answering (a process at its limit stalls), which no shorter interval mends.
    let stalled = c.errors > 0 && c.interval_s.is_none_or(|i| gap >= i - 1e-9);
    if stalled {
        return Some(format!(
            "no capture saw the heap rise (heap {heap}): the target stopped answering {gap:.1} s \
             before its death{interval}, and its {} failed capture attempts hold no profile of \
             those seconds{peak_words}; read it {from_outside}",
            c.errors
        ));
    }
    let more_often = if c.interval_s.is_some_and(|i| i <= 0.1 + 1e-9) {
        String::new()
    } else {
        "capture more often (--interval 100ms), or ".to_string()
    };
    Some(format!(
        "no capture saw the heap rise (heap {heap}): the death came {gap:.1} s after the last \
         capture{interval}, faster than the capture interval{peak_words}; {more_often}read it \
         {from_outside}"
    ))
}

/// The largest memory peak of a cycle against the limit, when it reached a large share.
fn large_peak(c: &CycleGrowth, limit: Option<u64>) -> Option<(&'static str, Peak, f64)> {
    let limit = limit.filter(|&l| l > 0)? as f64;
    [
        ("in-use heap", c.peaks.heap),
        ("process memory", c.peaks.process),
        ("cgroup memory", c.peaks.cgroup),
    ]
    .into_iter()
    .filter_map(|(what, p)| p.map(|p| (what, p, p.bytes as f64 / limit)))
    .filter(|(_, _, share)| *share >= LARGE_SHARE)
    .reduce(|a, b| if b.2 > a.2 { b } else { a })
}

/// "in-use heap spiked from 30.8 MiB to 199 MiB at 22.0 s (19 % of the limit), 92 % of the
/// rise in main.migrate, and fell back to 58.8 MiB by 31.0 s".
pub fn spike_words(e: &Episode) -> String {
    let mut s = format!(
        "in-use heap {} from {} to {} at {:.1} s",
        if e.transient { "spiked" } else { "rose" },
        format_bytes(e.base_bytes),
        format_bytes(e.peak_bytes),
        e.peak_s
    );
    if let Some(share) = e.share_of_limit {
        s.push_str(&format!(" ({:.0} % of the limit)", share * 100.0));
    }
    if let Some(top) = e.sites.first() {
        s.push_str(&format!(
            ", {:.0} % of the rise in {}",
            top.share * 100.0,
            top.name
        ));
    }
    if let (Some(at), Some(after)) = (e.fell_s, e.after_bytes) {
        s.push_str(&format!(
            ", and fell back to {} by {at:.1} s",
            format_bytes(after)
        ));
    }
    s
}

/// "3 boot cycles: 2 OOM-killed, 1 restarted itself; every cycle grows fastest in …".
pub fn across_summary(cycles: &[CycleGrowth], across: &AcrossCycles) -> String {
    let parts = across_parts(cycles, across);
    match &across.crash_loop {
        // The crash loop is a sentence of its own, said before anything else.
        Some(_) if cycles.len() >= 2 => {
            format!("{}. {}", parts[0], parts[1..].join("; "))
        }
        _ => parts.join("; "),
    }
}

/// The parts of [`across_summary`]: the crash loop (when there is one), how the cycles ended,
/// which site holds each rise, and their ages at death. What a headline lists.
pub fn across_parts(cycles: &[CycleGrowth], across: &AcrossCycles) -> Vec<String> {
    let ages = &across.ages_s;
    if cycles.len() < 2 {
        return vec![format!("{} boot cycle(s)", cycles.len())];
    }
    // "3 boot cycles: 2 OOM-killed, 1 restarted itself".
    let mut parts: Vec<String> = across.crash_loop.iter().map(crash_loop_words).collect();
    parts.push(format!(
        "{} boot cycles: {}",
        cycles.len(),
        ends_tally(cycles)
    ));
    parts.extend(filled_across(cycles));
    parts.extend(rise_sites_words(cycles));
    if ages.len() >= 2 {
        let (min, max) = age_range(ages);
        let died: Vec<&CycleGrowth> = cycles.iter().filter(|c| c.died_after_s.is_some()).collect();
        let from = if died.iter().all(|c| c.captures == 0) {
            "after it started"
        } else if died.iter().any(|c| c.captures == 0) {
            "after its first capture (its start, where it answered none)"
        } else {
            "after the first capture"
        };
        parts.push(format!("died {min:.1}–{max:.1} s {from}"));
    }
    parts
}

/// The cycles whose limit a kind other than the Go heap filled, by kind: "shared memory and
/// tmpfs filled the limit in cycles 1, 2, 3".
pub fn filled_across(cycles: &[CycleGrowth]) -> Option<String> {
    let mut kinds: Vec<(Filler, Vec<String>)> = Vec::new();
    for c in cycles {
        let Some(f) = c.breakdown.as_ref().and_then(|b| b.filled_by()) else {
            continue;
        };
        match kinds.iter_mut().find(|(k, _)| *k == f.kind) {
            Some((_, v)) => v.push(c.index.to_string()),
            None => kinds.push((f.kind, vec![c.index.to_string()])),
        }
    }
    let each: Vec<String> = kinds
        .iter()
        .map(|(kind, v)| {
            let plural = if v.len() == 1 { "" } else { "s" };
            format!(
                "{} filled the limit in cycle{plural} {}",
                filler_name(*kind),
                v.join(", ")
            )
        })
        .collect();
    (!each.is_empty()).then(|| each.join("; "))
}

/// How the cycles ended, counted: "2 OOM-killed, 1 restarted itself".
pub fn ends_tally(cycles: &[CycleGrowth]) -> String {
    let mut ends: Vec<(String, usize)> = Vec::new();
    for c in cycles {
        let w = end_words(&c.end);
        match ends.iter_mut().find(|(e, _)| *e == w) {
            Some((_, n)) => *n += 1,
            None => ends.push((w, 1)),
        }
    }
    let ends: Vec<String> = ends.iter().map(|(w, n)| format!("{n} {w}")).collect();
    ends.join(", ")
}

/// The youngest and oldest age at death.
pub fn age_range(ages: &[f64]) -> (f64, f64) {
    let min = ages.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ages.iter().copied().fold(0.0, f64::max);
    (min, max)
}

/// "crash loop: every restart (cycles 2, 3) was OOM-killed 3.9–4.1 s into the rise it
/// started with, 100 % of it in main.(*kvStore).replayWAL; it will not end by itself",
/// said before anything else about the cycles.
fn crash_loop_words(l: &CrashLoop) -> String {
    let cycles: Vec<String> = l.cycles.iter().map(|c| c.to_string()).collect();
    let mut s = format!(
        "crash loop: every restart (cycles {}) {} {} into the rise it started with",
        cycles.join(", "),
        if l.oom_killed {
            "was OOM-killed"
        } else {
            "died"
        },
        crash_loop_ages(l),
    );
    if let Some((site, share)) = &l.site {
        s.push_str(&format!(", {:.0} % of it in {site}", share * 100.0));
    }
    s.push_str("; it will not end by itself");
    s
}

/// "3.9–4.1 s", or "4.0 s" when the restarts died at one age.
fn crash_loop_ages(l: &CrashLoop) -> String {
    let (first, last) = l.died_s;
    if last - first < 0.05 {
        format!("{first:.1} s")
    } else {
        format!("{first:.1}–{last:.1} s")
    }
}

/// A site holding the rise of some cycles: its name, and each cycle with its share of the rise.
pub type RiseSite<'a> = (&'a str, Vec<(u32, f64)>);

/// The site (or the caller most of a spread rise lies under) that holds each cycle's rise,
/// with the cycles and their shares, in the order first seen; and the cycles without a rise.
pub fn rise_sites(cycles: &[CycleGrowth]) -> (Vec<RiseSite<'_>>, Vec<u32>) {
    let mut by_site: Vec<RiseSite> = Vec::new();
    let mut without = Vec::new();
    for c in cycles {
        let cause = c.reading.as_ref().and_then(|r| r.cause.as_ref());
        let top = cause
            .map(|k| (k.name.as_str(), k.share))
            .or_else(|| c.rise_sites().first().map(|s| (s.name.as_str(), s.share)));
        match top {
            Some((name, share)) => match by_site.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push((c.index, share)),
                None => by_site.push((name, vec![(c.index, share)])),
            },
            None => without.push(c.index),
        }
    }
    (by_site, without)
}

/// "1, 2, 3".
fn list(v: &[u32]) -> String {
    v.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which site holds each cycle's rise, the same way for every cycle that has one:
/// "the rise is in main.store in every cycle (95 %, 97 %, 93 % of it)", or by site with
/// its cycles when they differ, and the cycles without a rise.
fn rise_sites_words(cycles: &[CycleGrowth]) -> Vec<String> {
    let (by_site, without) = rise_sites(cycles);
    // A life that answered no capture shows no rise, and none is claimed for it.
    let unseen: Vec<u32> = cycles
        .iter()
        .filter(|c| c.captures == 0)
        .map(|c| c.index)
        .collect();
    let without: Vec<u32> = without
        .into_iter()
        .filter(|i| !unseen.contains(i))
        .collect();
    let mut parts = rise_words(&by_site, &without);
    if !unseen.is_empty() {
        parts.push(format!(
            "no capture of cycle(s) {}: its target never answered",
            list(&unseen)
        ));
    }
    parts
}

/// The words of [`rise_sites_words`] for the cycles that answered.
fn rise_words(by_site: &[(&str, Vec<(u32, f64)>)], without: &[u32]) -> Vec<String> {
    let shares = |v: &[(u32, f64)]| {
        v.iter()
            .map(|(_, s)| format!("{:.0} %", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (by_site, without.is_empty()) {
        ([], true) => Vec::new(),
        ([], _) => vec!["no cycle's heap rose".to_string()],
        ([(site, v)], true) => vec![format!(
            "the rise is in {site} in every cycle ({} of it)",
            shares(v)
        )],
        _ => {
            let mut parts: Vec<String> = by_site
                .iter()
                .map(|(site, v)| {
                    let idx: Vec<u32> = v.iter().map(|x| x.0).collect();
                    format!(
                        "the rise is in {site} in cycle(s) {} ({} of it)",
                        list(&idx),
                        shares(v)
                    )
                })
                .collect();
            if !without.is_empty() {
                parts.push(format!("no rise in cycle(s) {}", list(without)));
            }
            parts
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::growth::{GrowthBuilder, GrowthReport};
    use crate::model::capture::{CaptureRecord, RecordKind};
    use crate::model::memory::MemorySample;

    fn verdict(report: &GrowthReport) -> String {
        cycle_verdict(&report.cycles[0], report.limit_bytes)
    }

    #[test]
    fn gomaxprocs_far_above_the_cpu_limit_is_named_a_multiplier() {
        let mut heap = CaptureRecord::new(1, RecordKind::Heap, 1, 1_000);
        heap.totals.insert("inuse_space".into(), 8 << 20);
        let mut stats = CaptureRecord::new(2, RecordKind::Stats, 1, 1_500);
        for (k, v) in [
            ("gomaxprocs", 16),
            ("num_cpu", 16),
            ("threads", 22),
            ("goroutines", 40),
        ] {
            stats.totals.insert(k.into(), v);
        }
        let records = vec![heap, stats];
        let report = GrowthBuilder::default()
            .cpu_limit(Some(2.0))
            .finish(&records, &[], None);
        let rt = report.cycles[0]
            .runtime
            .as_ref()
            .expect("stats give a runtime view");
        assert_eq!((rt.gomaxprocs, rt.num_cpu), (Some(16), Some(16)));
        assert_eq!(rt.multiplier, Some(8.0));
        assert!(verdict(&report).contains("GOMAXPROCS 16 against a CPU limit of 2"));
        let unknown = GrowthBuilder::default().finish(&records, &[], None);
        let rt = unknown.cycles[0].runtime.as_ref().unwrap();
        assert_eq!(rt.multiplier, None);
        assert!(!verdict(&unknown).contains("GOMAXPROCS"));
    }

    /// A flat heap and memory creeping 1 KiB/s under a 1 GiB limit, then the same cycle sat at
    /// its limit: no "59046.7 s" forecast, and no forecast while at the limit.
    /// `run --also http://…` on Prometheus (issue 33, item 12): captures every 100 ms, the
    /// endpoint silent for 5.4 s before the kill. Not "faster than the capture interval;
    /// capture more often": it had stopped answering.
    #[test]
    fn a_target_that_stopped_answering_before_its_death_is_said_so() {
        let mut records = Vec::new();
        let mut builder = GrowthBuilder::default();
        for k in 0..20u64 {
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, k as i64 * 100);
            r.totals.insert("inuse_space".into(), 8 << 20);
            r.interval_ms = Some(100);
            builder.heap(&r, &[]);
            records.push(r);
        }
        for k in 0..10u64 {
            let mut failed =
                CaptureRecord::new(30 + k, RecordKind::Heap, 1, 2_400 + k as i64 * 500);
            failed.error = Some("timed out".into());
            records.push(failed);
        }
        let mut exit = CaptureRecord::new(50, RecordKind::Exit, 1, 7_300);
        exit.signal = Some(9);
        exit.totals.insert("oom_kill".into(), 1);
        records.push(exit);
        let report = builder.finish(&records, &[], Some(256 << 20));
        let v = verdict(&report);
        assert!(
            v.contains("the target stopped answering 5.4 s before its death"),
            "{v}"
        );
        assert!(v.contains("10 failed capture attempts"), "{v}");
        assert!(
            !v.contains("--interval") && !v.contains("faster than"),
            "{v}"
        );
    }

    /// etcd under `--also`, real servers: "the death came 0.2 s after the last capture
    /// (interval 0.1 s), faster than the capture interval" beside failed attempts (its endpoint
    /// had stopped answering); and a life that answered no capture read "no capture saw the
    /// heap rise (heap unknown) … 3.4 s after the last capture".
    #[test]
    fn a_silence_of_one_interval_with_failures_is_a_stop_and_a_life_without_captures_says_so() {
        let exit = CaptureRecord::oom_exit;
        let mut records = Vec::new();
        let mut builder = GrowthBuilder::default();
        for k in 0..5u64 {
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, k as i64 * 100);
            r.totals.insert("inuse_space".into(), 110 << 20);
            r.interval_ms = Some(100);
            builder.heap(&r, &[]);
            records.push(r);
        }
        let mut failed = CaptureRecord::new(6, RecordKind::Heap, 1, 500);
        failed.error = Some("connection reset".into());
        records.push(failed);
        records.push(exit(7, 1, 500, 600));
        records.push(exit(8, 2, 4_000, 3_400));
        let report = builder.finish(&records, &[], Some(256 << 20));
        let first = cycle_verdict(&report.cycles[0], report.limit_bytes);
        assert!(
            first.contains("the target stopped answering 0.1 s"),
            "{first}"
        );
        assert!(!first.contains("faster than"), "{first}");
        let second = cycle_verdict(&report.cycles[1], report.limit_bytes);
        assert!(
            second.contains("no capture of this life: it died 3.4 s after it started"),
            "{second}"
        );
        assert!(
            second.contains("OOM-killed 3.4 s after it started"),
            "{second}"
        );
        assert!(!second.contains("after the last capture"), "{second}");
    }

    /// etcd's replay loop under `--also` (real servers): three lives killed before their
    /// endpoint opened read "no cycle's heap rose; died 3.2–3.9 s after the first capture", a
    /// rise denied and a capture that never was.
    #[test]
    fn lives_that_answered_no_capture_claim_no_rise_and_are_timed_from_their_start() {
        let mut records = Vec::new();
        for (k, (t, lived)) in [(3_900, 3_900), (8_000, 3_200), (12_000, 3_200)]
            .into_iter()
            .enumerate()
        {
            records.push(CaptureRecord::oom_exit(
                k as u64 + 1,
                k as u32 + 1,
                t,
                lived,
            ));
        }
        let report = GrowthBuilder::default().finish(&records, &[], Some(256 << 20));
        assert_eq!(report.cycles.len(), 3);
        let words = across_parts(&report.cycles, &report.across).join("; ");
        assert_eq!(
            words,
            "3 boot cycles: 3 OOM-killed; no capture of cycle(s) 1, 2, 3: its target never \
             answered; died 3.2–3.9 s after it started"
        );
    }

    /// Issue 35, item 7b: "27.1 s later" said not later than what. A rise that held, or fell
    /// back, says how long after its peak the last capture was.
    #[test]
    fn the_time_to_the_last_capture_is_said_from_the_peak() {
        let mib = 1 << 20;
        let mut r = Reading {
            onset_s: 0.0,
            end_s: 2.3,
            from_bytes: 11 * mib,
            to_bytes: 15 * mib,
            bytes_per_sec: 1.5 * mib as f64,
            fit_r2: 0.99,
            points: 4,
            ongoing: false,
            held_s: Some(27.1),
            last_bytes: 14 * mib,
            sites: Vec::new(),
            onset_seq: None,
            end_seq: None,
            from_seq: None,
            to_seq: None,
            forecast: None,
            cause: None,
            into_death: None,
        };
        let held = reading_words(&r, None);
        assert!(
            held.ends_with(
                "then held (14.0 MiB at the last capture, 27.1 s after the peak): not growing at the end"
            ),
            "{held}"
        );
        r.last_bytes = 11 * mib;
        let fell = reading_words(&r, None);
        assert!(
            fell.ends_with("then fell back to 11.0 MiB by the last capture, 27.1 s after the peak"),
            "{fell}"
        );
    }

    #[test]
    fn a_forecast_only_within_an_hour_and_never_at_the_limit() {
        let gib = 1u64 << 30;
        let mut records = Vec::new();
        let mut builder = GrowthBuilder::default();
        for k in 0..20u64 {
            let mut r = CaptureRecord::new(k + 1, RecordKind::Heap, 1, k as i64 * 1000);
            r.totals.insert("inuse_space".into(), 8 << 20);
            builder.heap(&r, &[]);
            records.push(r);
        }
        let creeping = |base: u64, per_s: u64| -> Vec<MemorySample> {
            (0..20)
                .map(|k| MemorySample {
                    t_ms: k * 1000,
                    source: "cgroup".into(),
                    usage: Some(base + per_s * k as u64),
                    limit: Some(gib),
                    alive: true,
                    ..MemorySample::default()
                })
                .collect()
        };
        let far = builder.finish(&records, &creeping(300 << 20, 1024), Some(gib));
        let c = &far.cycles[0];
        assert_eq!(c.limit_at_s, None, "{:?}", c.limit_at_s);
        let words = verdict(&far);
        assert!(!words.contains("would be reached"), "{words}");

        let mut builder = GrowthBuilder::default();
        for r in &records {
            builder.heap(r, &[]);
        }
        let at = builder.finish(&records, &creeping(gib - (4 << 20), 64 << 10), Some(gib));
        let a = at.cycles[0]
            .at_limit
            .as_ref()
            .expect("measured at the limit");
        assert_eq!(a.since_s, 0.0);
        let words = verdict(&at);
        assert!(!words.contains("would be reached"), "{words}");
        assert!(words.contains("at its limit from 0.0 s"), "{words}");
    }
}
