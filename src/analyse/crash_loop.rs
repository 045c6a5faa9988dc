//! A crash loop: every restart dies in the rise it starts with (a write-ahead log replayed into
//! memory that no longer fits, a cache warmed past the limit). Such a loop will not end by
//! itself, and it is the first thing a reader of a multi-cycle run needs told; the first life,
//! which may have died of something else (the load that wrote the log), comes after. Read
//! from each cycle's end and its reading; pure, no I/O.
//!
//! A restart whose heap still stood at its start level after its start-up window idled first:
//! what killed it came from outside (a client reconnecting and flooding it), and it may live
//! once that stops. The start level is read from the life's own heap captures, not from the
//! reading's onset (a placed publication, which can fall before the rise): the heap published
//! plus what the runtime allocated since where the source reads it (`recent_space`, frees not
//! yet known, so a bound from above), within a tenth of its rise above the life's first figure.
//! nats-server restarted with a memory-store flood client: both restarts sat at 0–2.4 MiB
//! published, 6 MiB allocated since, for 3.0 s, then died 0.5 s after the client came back.

use serde::Serialize;

use super::ends::CycleEnd;
use super::growth::CycleGrowth;
use crate::model::capture::{CaptureRecord, RecordKind};

/// Every restart of a run that died in its start-up rise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrashLoop {
    /// The restarts (boot cycles after the first), all of which died so.
    pub cycles: Vec<u32>,
    /// Whether every one of them was killed by the kernel for memory.
    pub oom_killed: bool,
    /// The site (or the caller, where the rise was spread) that held each rise, when it is
    /// the same in every restart, with its smallest share.
    pub site: Option<(String, f64)>,
    /// Their ages at death: the first and last of them.
    pub died_s: (f64, f64),
}

/// A rise that began within this many seconds of the life's first capture, or within its
/// first quarter, is the life's start-up rise (a replay begins at once; the idle start of a
/// service that is later flooded lasts longer).
const START_UP_S: f64 = 2.0;
const START_UP_SHARE: f64 = 0.25;
/// A heap figure within this share of the life's rise above its first is still its start.
const QUIET_SHARE: f64 = 0.1;

/// The crash loop of `cycles`, when there is one: two or more restarts, and each of them died
/// (OOM-killed, a signal, or an exit of its own with an error) while its heap rose from its
/// start. A run whose last restart is still alive, or stopped by the collector, is no loop yet.
/// `records` are the run's, for the heap captures of each life.
pub fn crash_loop(cycles: &[CycleGrowth], records: &[CaptureRecord]) -> Option<CrashLoop> {
    let restarts = cycles.get(1..)?;
    if restarts.len() < 2 {
        return None;
    }
    let mut died = Vec::new();
    for c in restarts {
        let age = c.died_after_s?;
        let reading = c.reading.as_ref()?;
        let died_badly = match c.end {
            CycleEnd::OomKilled | CycleEnd::Signal { .. } => true,
            CycleEnd::Exited { code }
            | CycleEnd::RestartedItself {
                exit_code: Some(code),
            } => code != 0,
            _ => false,
        };
        let start_up = START_UP_S.max(START_UP_SHARE * age);
        let quiet = quiet_until(c, records).unwrap_or(0.0);
        if !died_badly || reading.onset_s > start_up || quiet > start_up {
            return None;
        }
        died.push(age);
    }
    let site_of = |c: &CycleGrowth| {
        let r = c.reading.as_ref()?;
        r.cause
            .as_ref()
            .map(|k| (k.name.clone(), k.share))
            .or_else(|| r.sites.first().map(|s| (s.name.clone(), s.share)))
    };
    let sites: Vec<Option<(String, f64)>> = restarts.iter().map(site_of).collect();
    let site = match sites.first() {
        Some(Some((name, _)))
            if sites
                .iter()
                .all(|s| s.as_ref().is_some_and(|s| &s.0 == name)) =>
        {
            let least = sites.iter().flatten().map(|s| s.1).fold(1.0, f64::min);
            Some((name.clone(), least))
        }
        _ => None,
    };
    Some(CrashLoop {
        cycles: restarts.iter().map(|c| c.index).collect(),
        oom_killed: restarts.iter().all(|c| c.end == CycleEnd::OomKilled),
        site,
        died_s: (
            died.iter().copied().fold(f64::INFINITY, f64::min),
            died.iter().copied().fold(0.0, f64::max),
        ),
    })
}

/// Seconds after the life's first capture of the last heap capture that still showed its start
/// level, before its highest figure: the heap published plus `recent_space` where read, within
/// [`QUIET_SHARE`] of its rise above the first figure. `None` without a rise.
fn quiet_until(c: &CycleGrowth, records: &[CaptureRecord]) -> Option<f64> {
    let mut heap: Vec<(i64, i64)> = records
        .iter()
        .filter(|r| r.cycle == c.index && r.kind == RecordKind::Heap && r.is_ok())
        .filter_map(|r| {
            let inuse = *r.totals.get("inuse_space")?;
            Some((
                r.t_ms,
                inuse + r.totals.get("recent_space").copied().unwrap_or(0),
            ))
        })
        .collect();
    heap.sort_unstable();
    let first = heap.first()?.1;
    let top = heap.iter().map(|h| h.1).max()?;
    let peak = heap.iter().position(|h| h.1 == top)?;
    let near = first as f64 + QUIET_SHARE * (top - first) as f64;
    let quiet = heap[..=peak].iter().rev().find(|h| h.1 as f64 <= near)?;
    (top > first).then(|| (quiet.0 - c.start_ms) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyse::rules::tests::cycle;

    /// Three lives, each killed at `killed_at` with its rise from `onset`.
    fn lives(onsets: [f64; 3]) -> Vec<CycleGrowth> {
        (1..=3)
            .zip(onsets)
            .map(|(i, onset)| {
                let mut c = cycle(i, 30.0, Some(4.0 + i as f64 / 10.0));
                c.reading.as_mut().unwrap().onset_s = onset;
                c
            })
            .collect()
    }

    #[test]
    fn restarts_that_all_die_in_their_start_up_rise_are_a_crash_loop() {
        let mut cycles = lives([2.5, 0.2, 0.3]);
        for c in &mut cycles[1..] {
            c.reading.as_mut().unwrap().sites[0].name = "main.(*kvStore).replayWAL".into();
        }
        let found = crash_loop(&cycles, &[]).expect("a loop");
        assert_eq!(found.cycles, vec![2, 3]);
        assert!(found.oom_killed);
        assert_eq!(found.site, Some(("main.(*kvStore).replayWAL".into(), 1.0)));
        assert_eq!(found.died_s, (4.2, 4.3));
    }

    #[test]
    fn a_restart_that_idled_first_or_lived_on_breaks_the_loop() {
        // Its rise began late in its life: loaded, not replaying.
        assert_eq!(crash_loop(&lives([0.0, 0.2, 3.0]), &[]), None);
        // The last restart is alive.
        let mut cycles = lives([0.0, 0.2, 0.3]);
        cycles[2].died_after_s = None;
        cycles[2].end = CycleEnd::StillAnswering;
        assert_eq!(crash_loop(&cycles, &[]), None);
        // One restart is no loop yet.
        assert_eq!(crash_loop(&lives([0.0, 0.2, 0.3])[..2], &[]), None);
        // Different sites: a loop, but no one site to name.
        let mut cycles = lives([0.0, 0.2, 0.3]);
        cycles[2].reading.as_mut().unwrap().sites[0].name = "main.other".into();
        assert_eq!(crash_loop(&cycles, &[]).map(|l| l.site), Some(None));
    }

    /// A proc: heap capture of life `cycle` at `t_ms` after its start: published, and allocated
    /// since (`recent_space`).
    fn capture(
        cycle: u32,
        start_ms: i64,
        t_ms: i64,
        inuse_mib: i64,
        recent_mib: i64,
    ) -> CaptureRecord {
        let mut r = CaptureRecord::new(t_ms as u64, RecordKind::Heap, cycle, start_ms + t_ms);
        r.totals.insert("inuse_space".into(), inuse_mib << 20);
        r.totals.insert("recent_space".into(), recent_mib << 20);
        r
    }

    /// nats-server restarted into a client that reconnected 3.3 s into each life and flooded a
    /// memory stream (the real-server retry of issue 33): nothing replayed, each restart idled
    /// at 0–2.4 MiB published and ≤ 6 MiB allocated since for 3.0 s, and died 0.5 s after the
    /// flood came. The reading placed its onset at 1.3–1.8 s (its last flat publication's GC),
    /// and the run read as "a crash loop … it will not end by itself".
    #[test]
    fn restarts_that_idled_then_died_of_an_outside_flood_are_no_crash_loop() {
        let cycles = lives([37.9, 1.8, 1.3]);
        let mut records = Vec::new();
        for c in &cycles[1..] {
            let figures = [
                (0, 0, 0),
                (500, 1, 0),
                (1000, 1, 2),
                (1520, 1, 4),
                (2020, 2, 4),
            ];
            for (t, inuse, recent) in figures.into_iter().chain([(2530, 2, 6), (3030, 2, 4)]) {
                records.push(capture(c.index, c.start_ms, t, inuse, recent));
            }
            records.push(capture(c.index, c.start_ms, 3530, 42, 78));
        }
        // Without the captures, the onsets alone made it a loop.
        assert!(crash_loop(&cycles, &[]).is_some());
        assert_eq!(crash_loop(&cycles, &records), None);
        // etcd's WAL replay: 54 GCs by 0.8 s, the heap at its start level only until then (of
        // a 4 s life), 65 MiB published and 144 MiB allocated since by 1.3 s.
        let mut replay = Vec::new();
        for c in &cycles[1..] {
            for (t, inuse, recent) in [(0, 0, 0), (290, 2, 0), (790, 4, 5), (1290, 65, 144)] {
                replay.push(capture(c.index, c.start_ms, t, inuse, recent));
            }
            replay.push(capture(c.index, c.start_ms, 3950, 116, 223));
        }
        assert!(crash_loop(&cycles, &replay).is_some());
    }
}
