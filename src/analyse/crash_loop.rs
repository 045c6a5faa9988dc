//! A crash loop: every restart dies in the rise it starts with (a write-ahead log replayed into
//! memory that no longer fits, a cache warmed past the limit). Such a loop will not end by
//! itself, and it is the first thing a reader of a multi-cycle run needs told; the first life,
//! which may have died of something else (the load that wrote the log), comes after. Read
//! from each cycle's end and its reading; pure, no I/O.

use serde::Serialize;

use super::ends::CycleEnd;
use super::growth::CycleGrowth;

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

/// The crash loop of `cycles`, when there is one: two or more restarts, and each of them died
/// (OOM-killed, a signal, or an exit of its own with an error) while its heap rose from its
/// start. A run whose last restart is still alive, or stopped by the collector, is no loop yet.
pub fn crash_loop(cycles: &[CycleGrowth]) -> Option<CrashLoop> {
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
        if !died_badly || reading.onset_s > START_UP_S.max(START_UP_SHARE * age) {
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
        let found = crash_loop(&cycles).expect("a loop");
        assert_eq!(found.cycles, vec![2, 3]);
        assert!(found.oom_killed);
        assert_eq!(found.site, Some(("main.(*kvStore).replayWAL".into(), 1.0)));
        assert_eq!(found.died_s, (4.2, 4.3));
    }

    #[test]
    fn a_restart_that_idled_first_or_lived_on_breaks_the_loop() {
        // Its rise began late in its life: loaded, not replaying.
        assert_eq!(crash_loop(&lives([0.0, 0.2, 3.0])), None);
        // The last restart is alive.
        let mut cycles = lives([0.0, 0.2, 0.3]);
        cycles[2].died_after_s = None;
        cycles[2].end = CycleEnd::StillAnswering;
        assert_eq!(crash_loop(&cycles), None);
        // One restart is no loop yet.
        assert_eq!(crash_loop(&lives([0.0, 0.2, 0.3])[..2]), None);
        // Different sites: a loop, but no one site to name.
        let mut cycles = lives([0.0, 0.2, 0.3]);
        cycles[2].reading.as_mut().unwrap().sites[0].name = "main.other".into();
        assert_eq!(crash_loop(&cycles).map(|l| l.site), Some(None));
    }
}
