//! One `heapwatch run`: the supervisor on its own thread starts and restarts the command, the
//! collector records it into the run, a sampler writes the cgroup's memory into memory.jsonl,
//! and each `--also` target gets a sub-run of its own (`RUN/also-N/`: one run, one manifest,
//! one collector). Every run hears of each death (`exit`); on Ctrl-C each collector writes its
//! own `stop` before the command is killed; when the supervisor is done, the collectors end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

use super::LaunchError;
use super::child::{self, Death, Ending, Launch, LifeEvent, RestartPolicy, Watch};
use super::confinement::Confinement;
use super::hold::{HoldObserver, OomHold};
use crate::collect::sampler::{Sampler, SamplerTally};
use crate::collect::{
    Clock, CollectConfig, CollectError, CollectSummary, Collector, NoObserver, Observer,
    OutsideMemory, Stop, SystemClock,
};
use crate::source::Source;
use crate::source::procmem::MemoryProbe;
use crate::store::{CaptureRecord, RecordKind, RunInfo, RunWriter};

/// A run directory and the source recorded into it.
pub struct SubRun {
    pub out: PathBuf,
    pub source: Box<dyn Source>,
    pub info: RunInfo,
}

pub struct Recording<'a> {
    pub launch: Launch,
    pub policy: RestartPolicy,
    pub confinement: &'a Confinement,
    pub collect: CollectConfig,
    pub memory_interval: Duration,
    /// The proc source, following the command's cgroup (or its pid under the watchdog).
    pub main: SubRun,
    pub also: Vec<SubRun>,
    /// Set by Ctrl-C.
    pub interrupt: &'a Stop,
    /// The pid the supervisor runs now (0 between processes), shared with whoever follows it.
    pub pid: Arc<AtomicU32>,
    /// Told about every starting and ending process, e.g. to print it.
    pub notify: &'a (dyn Fn(&LifeEvent) + Sync),
    /// Hold the command at its OOM kill until a capture is taken, at most this long (zero:
    /// no hold; cgroup v1 only, see [`super::hold`]).
    pub oom_hold: Duration,
}

#[derive(Debug)]
pub struct RecordingOutcome {
    pub ending: Ending,
    pub restarts: u32,
    pub deaths: Vec<Death>,
    pub main: CollectSummary,
    pub also: Vec<Result<CollectSummary, CollectError>>,
    pub memory: SamplerTally,
}

/// Runs the command and records it until it ends for good or Ctrl-C.
pub fn record(
    recording: Recording<'_>,
    observer: &mut dyn Observer,
) -> Result<RecordingOutcome, LaunchError> {
    let Recording {
        launch,
        policy,
        confinement,
        collect,
        memory_interval,
        main,
        also,
        interrupt,
        pid,
        notify,
        oom_hold,
    } = recording;
    // When the newest recorded capture began, for the hold to know a capture was taken.
    let captured_ms = Arc::new(AtomicI64::new(i64::MIN));
    let hold = OomHold::new(confinement, oom_hold, captured_ms.clone());
    let mut observer = HoldObserver {
        inner: observer,
        captured_ms,
    };
    let launch = Launch {
        join: confinement.cgroup().map(|cg| cg.procs_file()),
        ..launch
    };
    let (main_writer, main_existing) = RunWriter::open(&main.out)?;
    main_writer.write_info(&main.info)?;
    let outside = Arc::new(OutsideMemory::default());
    let probe = match confinement.cgroup() {
        Some(cg) => MemoryProbe::Cgroup(cg.memory()),
        None => MemoryProbe::Follow(pid.clone()),
    };
    let sampler = Sampler::start(
        probe,
        memory_interval,
        main_writer.memory_log()?,
        outside.clone(),
        // The supervisor sees each end itself, through waitpid.
        None,
    );
    let mut senders: Vec<Sender<CaptureRecord>> = Vec::new();
    let (main_tx, main_rx) = channel();
    senders.push(main_tx);
    let mut also_runs = Vec::new();
    for sub in also {
        let (writer, existing) = RunWriter::open(&sub.out)?;
        writer.write_info(&sub.info)?;
        let (tx, rx) = channel();
        senders.push(tx);
        let config = named_own(&collect, &sub.info);
        also_runs.push((sub.source, config, writer, existing, rx));
    }

    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    // The senders go when the supervisor is done: that ends the collectors (no `stop`).
    let senders = Mutex::new(Some(senders));
    // Collectors still running: on Ctrl-C each writes its `stop` before the command is killed.
    let collecting = AtomicUsize::new(1 + also_runs.len());
    let oom_kills = || confinement.cgroup().and_then(|cg| cg.oom_kills());
    let watchdog = match confinement {
        Confinement::Watchdog { limit, .. } => Some(*limit),
        _ => None,
    };
    let main_source = main.source;
    let (supervised, main_result, also_results) = std::thread::scope(|s| {
        let supervisor = s.spawn(|| {
            let watch = Watch {
                interrupt: interrupt.flag(),
                pid: &pid,
                watchdog,
                oom_kills: &oom_kills,
                hold: hold.as_ref(),
            };
            let mut deaths = Vec::new();
            let result = child::supervise(&launch, &policy, &watch, &mut |event| {
                notify(&event);
                if let Some(record) = event_record(&event) {
                    let senders = senders.lock().expect("the senders' lock");
                    for tx in senders.iter().flatten() {
                        // A collector that already stopped (its disk full) needs no events.
                        let _ = tx.send(record.clone());
                    }
                }
                match event {
                    LifeEvent::Died(d) => deaths.push(d),
                    LifeEvent::Interrupted { .. } => wait_for_stops(&collecting),
                    LifeEvent::Started { .. } => {}
                }
            });
            senders.lock().expect("the senders' lock").take();
            (result, deaths)
        });
        let also_handles: Vec<_> = also_runs
            .into_iter()
            .map(|(source, config, writer, existing, rx)| {
                let (clock, outside, collecting) = (clock.clone(), outside.clone(), &collecting);
                s.spawn(move || {
                    let result =
                        Collector::new(config, source, clock, writer, &existing, interrupt.clone())
                            .with_outside_memory(outside)
                            .with_events(rx)
                            .run(&mut NoObserver);
                    collecting.fetch_sub(1, Ordering::Relaxed);
                    result
                })
            })
            .collect();
        let main_result = Collector::new(
            named_own(&collect, &main.info),
            main_source,
            clock.clone(),
            main_writer,
            &main_existing,
            interrupt.clone(),
        )
        .with_outside_memory(outside.clone())
        .with_events(main_rx)
        .run(&mut observer);
        collecting.fetch_sub(1, Ordering::Relaxed);
        if main_result.is_err() {
            // The run cannot be written: end the command rather than run it unrecorded.
            interrupt.set();
        }
        let supervised = supervisor
            .join()
            .expect("the supervisor thread does not panic");
        let also_results: Vec<_> = also_handles
            .into_iter()
            .map(|h| h.join().expect("a collector thread does not panic"))
            .collect();
        (supervised, main_result, also_results)
    });
    let memory = sampler.finish();
    let (result, deaths) = supervised;
    let (ending, restarts) = result?;
    let main = main_result.map_err(|e| match e {
        CollectError::Store(s) => LaunchError::Store(s),
        CollectError::Runtime(e) => LaunchError::Store(crate::store::StoreError::Io {
            path: main.out.clone(),
            source: e,
        }),
    })?;
    Ok(RecordingOutcome {
        ending,
        restarts,
        deaths,
        main,
        also: also_results,
        memory,
    })
}

/// Waits (a few seconds at most) until every collector has stopped on Ctrl-C and written its
/// `stop` record while the command still ran.
/// The collector's settings for a run whose `run.json` is `info`: its index names sites by the
/// prefixes it records (`--own`, or a resumed run's).
fn named_own(collect: &CollectConfig, info: &RunInfo) -> CollectConfig {
    CollectConfig {
        own: info.options.own.clone().unwrap_or_default(),
        ..collect.clone()
    }
}

fn wait_for_stops(collecting: &AtomicUsize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while collecting.load(Ordering::Relaxed) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The manifest record of a process's end (`exit`). Ctrl-C's `stop` is each collector's own.
pub fn event_record(event: &LifeEvent) -> Option<CaptureRecord> {
    match event {
        LifeEvent::Started { .. } => None,
        LifeEvent::Died(d) => {
            let mut r = CaptureRecord::new(0, RecordKind::Exit, 0, d.t_ms);
            r.pid = Some(d.pid);
            r.exit_code = d.exit_code;
            r.signal = d.signal;
            r.totals = BTreeMap::from([
                ("oom_kill".to_string(), d.oom_killed as i64),
                ("watchdog_kill".to_string(), d.watchdog_killed as i64),
                ("lived_ms".to_string(), d.lived.as_millis() as i64),
            ]);
            // Only when the kernel held it (`run --oom-hold`): a hold of 0 ms is one too.
            if let Some(held) = d.oom_held {
                r.totals
                    .insert("oom_held_ms".to_string(), held.as_millis() as i64);
            }
            if let Some(below) = d.oom_held_below {
                r.totals
                    .insert("oom_held_below_bytes".to_string(), below as i64);
            }
            Some(r)
        }
        LifeEvent::Interrupted { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oom_kill_is_an_exit_record_with_signal_9_and_the_counter() {
        let death = Death {
            pid: 42,
            t_ms: 1_000,
            exit_code: None,
            signal: Some(9),
            oom_killed: true,
            watchdog_killed: false,
            oom_held: Some(Duration::from_millis(120)),
            oom_held_below: None,
            lived: Duration::from_millis(4_500),
        };
        let r = event_record(&LifeEvent::Died(death)).unwrap();
        assert_eq!(r.kind, RecordKind::Exit);
        assert_eq!(
            (r.pid, r.signal, r.exit_code, r.t_ms),
            (Some(42), Some(9), None, 1_000)
        );
        assert_eq!(r.totals["oom_kill"], 1);
        assert_eq!(r.totals["lived_ms"], 4_500);
        assert_eq!(r.totals["oom_held_ms"], 120);
        assert!(r.is_ok());
        let stop = LifeEvent::Interrupted {
            pid: Some(7),
            t_ms: 5,
        };
        assert!(
            event_record(&stop).is_none(),
            "the collectors write their own stop"
        );
        assert!(event_record(&LifeEvent::Started { pid: 1, t_ms: 0 }).is_none());
    }
}
