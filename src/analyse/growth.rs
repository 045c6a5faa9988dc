//! `growth`: per boot cycle, which sites' in-use bytes grow and how fast (a robust fitted
//! rate with its fit quality, and when it began), allocation storms, goroutine growth, the
//! total rate and the time to the limit, the profiling cost, MemStats overhead, a verdict,
//! and whether every cycle dies the same way. Fed one reduced capture at a time.

use std::collections::BTreeMap;

use serde::Serialize;

use super::boundaries;
use super::breakdown::{self, AtLimit, MemoryBreakdown};
use super::ends::{self, CycleEnd, EndEvidence};
use super::reading::{self, Reading, ReadingInput, RiseSite};
use super::reduce::SiteFigures;
pub use super::runtime::{GoroutineGrowth, MemStatsView, RuntimeView};
use super::runtime::{goroutines, memstats_view, runtime_view};
use super::select::cycle_builds;
use super::series::{LineFit, SeriesGrid, theil_sen};
use super::spikes::{self, Episode, Peaks};
use super::storms::storms;
pub use super::storms::{AllocStorm, ProfilingCost, StormWindow};
use crate::model::build::BuildInfo;
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;

#[derive(Debug, Clone, Serialize)]
pub struct SiteGrowth {
    /// The site: the first frame in the target's own code with the leaf beside it
    /// ([`SiteNamer`](super::reduce::SiteNamer)); in JSON `name` (the leaf), `own` and `site`.
    #[serde(flatten, serialize_with = "super::reduce::serialize_site")]
    pub name: String,
    /// Its part of the episode's rate (its share of the rise × the heap's rate).
    pub bytes_per_sec: f64,
    /// R² of the episode's fitted line (1 = a straight line).
    pub fit_r2: f64,
    /// Its in-use bytes at the episode's onset and end.
    pub inuse_first: i64,
    pub inuse_last: i64,
    /// Seconds after the cycle's first capture when the episode began.
    pub onset_s: Option<f64>,
    /// This site's share of the episode's rise, 0..1.
    pub share: f64,
}

/// The last heap capture of a cycle, split as its source saw it: the heap as of the last
/// finished GC cycle (what `/debug/pprof/heap` serves) and what was allocated after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unpublished {
    pub seq: u64,
    /// The stored file holding it (a duplicate's earlier twin).
    pub file: Option<String>,
    /// Seconds after the cycle's first capture.
    pub at_s: f64,
    /// `inuse_space`: the heap as of the last finished GC cycle.
    pub inuse_bytes: i64,
    /// `recent_space`: allocated in the cycles the profile has not published yet (frees not
    /// known).
    pub recent_bytes: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CycleGrowth {
    pub index: u32,
    /// The build the cycle's process ran: the version it reported, else the run's label.
    pub build: String,
    /// What the source told about that build, when it wrote a `cycle` record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_info: Option<BuildInfo>,
    /// The cycle's process id, when the source knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub captures: usize,
    pub stored: usize,
    pub duplicates: usize,
    pub errors: usize,
    pub start_ms: i64,
    /// Seconds from the first to the last good capture.
    pub span_s: f64,
    /// Seconds from the first capture to the moment the target stopped answering, when it did:
    /// its exit record's time when whoever started it saw it die.
    pub died_after_s: Option<f64>,
    /// The capture interval in force at the cycle's last capture, seconds, when recorded.
    pub interval_s: Option<f64>,
    /// How the cycle ended, from evidence (`render::ends::end_words` words it).
    pub end: CycleEnd,
    /// True when it was OOM-killed.
    pub killed: bool,
    /// Whether its heap publications were placed by the runtime's own GC count (read with each
    /// capture by `proc:`); else their moments are estimated from Go's GC pacing.
    pub gc_clock: bool,
    /// When its OOM kill was seen, seconds from the first capture: its exit record, else the
    /// first memory sample that showed the kernel's counter risen ([`ends::kernel_kills`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_seen_s: Option<f64>,
    /// How long the kernel held the process at its OOM kill until the last capture was in
    /// (`run --oom-hold`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom_held_ms: Option<i64>,
    /// On cgroup v2, how far below its limit the hold slowed it (`memory.high`): the last
    /// capture is of the process that much short of its kill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom_held_below_bytes: Option<i64>,
    /// What the cycle's last heap capture saw beyond its published heap, when its source
    /// reads the allocations not yet published (`proc:`'s `recent_space`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpublished: Option<Unpublished>,
    pub heap_first: Option<i64>,
    pub heap_last: Option<i64>,
    pub total_bytes_per_sec: Option<f64>,
    pub total_fit_r2: Option<f64>,
    /// Growth rate of process / cgroup memory seen from outside.
    pub memory_bytes_per_sec: Option<f64>,
    pub memory_peak: Option<u64>,
    /// Seconds from the first capture to the cycle's first memory sample: negative when its
    /// process was sampled before it answered.
    pub memory_from_s: Option<f64>,
    /// Seconds after the first capture at which the growth fit reaches the limit (a forecast,
    /// within an hour of the last capture); `at_limit` says when it really was.
    pub limit_at_s: Option<f64>,
    pub sites: Vec<SiteGrowth>,
    pub alloc_storms: Vec<AllocStorm>,
    pub goroutine_growth: Vec<GoroutineGrowth>,
    pub profiling: Option<ProfilingCost>,
    pub memstats: Option<MemStatsView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeView>,
    /// The peaks of in-use heap, process and cgroup memory, with their times.
    pub peaks: Peaks,
    // The fields from here on are written to JSON by `render::worded::CycleJson`, after the
    // ones above and with the words of `breakdown` and `at_limit` and the verdict beside them.
    /// Where the memory went at the cycle's peak usage.
    #[serde(skip)]
    pub breakdown: Option<MemoryBreakdown>,
    /// How long the cgroup sat at its limit, measured, when it did.
    #[serde(skip)]
    pub at_limit: Option<AtLimit>,
    /// The stretch at the limit read for a stall, when nothing moved there.
    #[serde(skip)]
    pub stuck: Option<super::stuck::Stuck>,
    /// The peak of anonymous memory (what the kernel cannot reclaim), when the split is known.
    #[serde(skip)]
    pub memory_peak_anon: Option<u64>,
    /// The biggest rise of the in-use heap into its peak, with the sites that made it.
    #[serde(skip)]
    pub episode: Option<Episode>,
    /// Other transient episodes of the cycle, biggest rise first.
    #[serde(skip)]
    pub other_episodes: Vec<Episode>,
    /// Whether the in-use heap as a whole grew to the end (not levelling off): the reading's.
    #[serde(skip)]
    pub heap_sustained: bool,
    /// The cycle's growth episode, read once: `total_bytes_per_sec`, `total_fit_r2`,
    /// `limit_at_s`, `heap_sustained` and `sites` are its figures, quoted everywhere.
    #[serde(skip)]
    pub reading: Option<Reading>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AcrossCycles {
    pub cycles: usize,
    pub died: usize,
    pub same_top_site: Option<String>,
    pub ages_s: Vec<f64>,
    /// Every restart died in its start-up rise (set once the rises' sites are read).
    pub crash_loop: Option<super::crash_loop::CrashLoop>,
}

/// Written to JSON by `render::worded::GrowthJson`, with the words.
#[derive(Debug, Clone)]
pub struct GrowthReport {
    pub schema: u32,
    pub limit_bytes: Option<u64>,
    pub cycles: Vec<CycleGrowth>,
    pub across: AcrossCycles,
}

#[derive(Default)]
struct CycleState {
    start_ms: Option<i64>,
    inuse: SeriesGrid,
    alloc: SeriesGrid,
    goroutines: SeriesGrid,
    /// The newest heap publication.
    published: Option<Publication<Vec<SiteFigures>>>,
    /// Every point on the grids so far came from a capture before the first publication.
    unpublished: bool,
}

/// Whether a capture was made before the runtime published any heap profile cycle: the
/// profile then sums every allocation since the process started, garbage included (the
/// runtime's rule when no cycle holds data), and nothing is yet "allocated but not published"
/// (`recent_space` 0). Allocations of cycle 0 are flushed at profile cycle 2, so this holds
/// until the second GC; known only where the source reads the runtime's clock (`proc:`).
pub fn before_first_publication(r: &CaptureRecord) -> bool {
    r.gc.is_some_and(|g| g.profile_cycle.unwrap_or(g.num_gc) < 2)
        && r.totals.get("recent_space").copied().unwrap_or(0) == 0
}

/// The moment GC `n` ran, by the runtime's clock: halfway between the last capture that read a
/// count below `n` and the first that read `n` or more. `captures` are (seconds, GC count) in
/// time order.
fn gc_moment(captures: &[(f64, Option<u32>)], n: u32) -> Option<f64> {
    let first = captures
        .iter()
        .position(|(_, g)| g.is_some_and(|g| g >= n))?;
    let after = captures[first].0;
    let before = captures[..first]
        .iter()
        .rev()
        .find(|(_, g)| g.is_some_and(|g| g < n))
        .map_or(after, |b| b.0);
    Some((before + after) / 2.0)
}

/// The first publication after captures made before any ([`before_first_publication`]): it
/// describes GC `n − 1` (seen at count `n`), which ran while those captures were being made, so
/// it goes at that GC's moment, and the captures after that moment, which counted garbage as in
/// use, give way to it. `None` without a clock or when the capture is not such a one.
fn after_unpublished(
    r: &CaptureRecord,
    was_unpublished: bool,
    captures: &[(f64, Option<u32>)],
) -> Option<f64> {
    if !was_unpublished || before_first_publication(r) {
        return None;
    }
    let n = r.gc?.num_gc;
    gc_moment(captures, n.checked_sub(1)?)
}

/// Heap-profile publications among time-ordered captures, each placed at the moment it
/// describes.
///
/// The Go runtime publishes heap-profile figures (in-use and cumulative allocated) at a GC's
/// mark termination, and what it publishes is the snapshot of the mark termination before
/// (runtime/mprof.go: "we wait until the next mark termination to publish the previous mark
/// termination's snapshot"). So a capture with the same figures as the one before is no new
/// data (byte-level duplicates are only part of those), and a new publication describes the
/// heap as of the previous publication, which was first seen shortly after its GC. Placing it
/// at its own capture time instead lags it by one GC period, and as a growing heap doubles its
/// GC goal, GCs come ever more rarely: the lag grows, fitted rates come out at half the truth,
/// the last seconds before an OOM kill look flat and their catch-up looks like a storm. The
/// first publication of a cycle describes an unknown earlier moment and is not placed.
///
/// That holds while at most one GC runs between two captures. A heap cannot grow past its GC
/// goal (twice the live heap at GOGC=100, at least 4 MiB) between two consecutive mark
/// terminations, so a publication far above the one before means GCs ran unseen: a load that
/// came at once after a quiet start, a rise faster than the captures. Then the one before
/// still held when the last capture that showed it was taken (no GC had run since), and is
/// placed there again (unless it is the cycle's first, never placed: a start-up's own load is
/// no growth); the new one describes a GC between that capture and its own, and is
/// placed halfway (nats-server flooded after 3 s idle read "grew 15.2 MiB/s from 0.0 s" for a
/// rise of 46 MiB between the captures at 3.0 and 3.5 s).
///
/// Only `runtime.GC()` publishes the snapshot of the cycle it just finished: captures made
/// with `?gc=1` (`collect --gc`) are current and keep their own time.
///
/// Where the source reads the runtime's own GC count with each capture (`proc:`), nothing is
/// guessed: a publication seen at GC count `n` describes mark termination `n − 1`; GCs ran
/// unseen exactly when the count rose by two or more since the publication before; and when
/// one GC ran, that GC is placed between the last capture before it and the first after it.
fn place_publication<T: PartialEq + Clone>(
    published: &mut Option<Publication<T>>,
    (figures, inuse): (&T, fn(&T) -> f64),
    t: f64,
    before: Option<Sighting>,
    clock: Option<u32>,
    forced_gc: bool,
) -> Option<Placed<T>> {
    if !forced_gc {
        // The same figures are the same publication, unless the clock says a GC published
        // since: a site that allocated nothing the profile sampled between two mark
        // terminations publishes the same figures twice, and the second describes the later one.
        let same_gc = |p: &Publication<T>| match (p.num_gc, clock) {
            (Some(was), Some(now)) => was == now,
            _ => true,
        };
        if let Some(p) = published
            .as_mut()
            .filter(|p| p.figures == *figures && same_gc(p))
        {
            p.last = p.last.max(t);
            return None;
        }
    }
    let placed = match published.take() {
        _ if forced_gc => Some(Placed { at: t, again: None }),
        None => None,
        Some(p) => {
            // The last capture that still showed it: no GC had published since.
            let last = before.map_or(p.last, |b| b.at.max(p.last)).min(t);
            let clocked = p.num_gc.is_some() && clock.is_some();
            let unseen = match (p.num_gc, clock) {
                (Some(was), Some(now)) => now >= was.saturating_add(2),
                _ => gcs_unseen(inuse(&p.figures), inuse(figures)),
            };
            // By the clock: the capture before this one, when it read a lower count.
            let counted = before.and_then(|b| Some((b.at, b.num_gc?))).zip(clock);
            if unseen {
                match counted {
                    // It describes GC `now − 1`, one of the GCs between that capture and
                    // this one, which are spread evenly over the gap; the one before stays
                    // at its own GC (the heap went on after it, and nothing says how).
                    Some(((b_at, was), now)) if was < now => Some(Placed {
                        at: spread((b_at, was), (t, now), now - 1),
                        again: None,
                    }),
                    _ => {
                        // A cycle's first publication stays unplaced (its moment is unknown).
                        let again =
                            p.at.is_some_and(|at| last > at && !clocked)
                                .then_some((last, p.figures));
                        Some(Placed {
                            at: (last + t) / 2.0,
                            again,
                        })
                    }
                }
            } else {
                // The GC that published the one before: first seen at `p.first`, and after
                // the capture before it when the clock says that capture preceded it (the
                // last of the GCs between them, when more than one ran there).
                let at = match (p.gc_after, p.num_gc) {
                    (Some(after), Some(seen)) => spread(after, (p.first, seen), seen),
                    _ => p.first,
                };
                Some(Placed { at, again: None })
            }
        }
    };
    let gc_after = before
        .and_then(|b| Some((b.at, b.num_gc?)))
        .filter(|&(_, was)| clock.is_some_and(|now| was < now));
    *published = Some(Publication {
        figures: figures.clone(),
        first: t,
        last: t,
        at: placed.as_ref().map(|p| p.at),
        num_gc: clock,
        gc_after,
    });
    placed
}

/// A capture before the one being placed: when, and the runtime's GC count it read.
#[derive(Debug, Clone, Copy)]
struct Sighting {
    at: f64,
    num_gc: Option<u32>,
}

/// The newest heap publication of a cycle: its figures, when it was first and last seen, and
/// where it was placed.
struct Publication<T> {
    figures: T,
    first: f64,
    last: f64,
    at: Option<f64>,
    /// The runtime's GC count when it was first seen, where the source reads it.
    num_gc: Option<u32>,
    /// The last capture known to come before the GC that published it (a lower GC count):
    /// when, and the count it read.
    gc_after: Option<(f64, u32)>,
}

/// The moment of GC `n`, one of the GCs that ran between a capture that read count `a` at
/// `t_a` and one that read `b` at `t_b` (`a < n <= b`): the GCs between are spread evenly over
/// the gap, so one GC goes halfway and two that ran unseen go at a third and two thirds (a
/// short life published at counts 2, 4 and 5 had both publications put at one moment, a rise
/// in no time that no reading could take).
fn spread((t_a, a): (f64, u32), (t_b, b): (f64, u32), n: u32) -> f64 {
    let steps = f64::from(b.saturating_sub(a)) + 1.0;
    let k = f64::from(n.saturating_sub(a).min(b.saturating_sub(a)));
    t_a + (t_b - t_a) * k / steps
}

/// Where a publication goes, and the one before it placed again at its last sighting.
struct Placed<T> {
    at: f64,
    again: Option<(f64, T)>,
}

/// Captures made before the first publication are figures of the heap only when the first
/// GC found at least this share of what had been allocated still in use.
const LIVE_SHARE: f64 = 0.5;

/// The smallest GC goal the runtime sets (runtime/mgcpacer.go: 4 MiB at GOGC=100).
const MIN_HEAP_GOAL: f64 = 4.0 * 1024.0 * 1024.0;

/// Whether in-use bytes going from `before` to `after` between two publications needs GCs
/// that were not seen: more than a quarter above the goal `before` sets (twice it, at least
/// [`MIN_HEAP_GOAL`]). At a GOGC above 100, or under GOMEMLIMIT alone, the goal is further and
/// a rise within it is taken for unseen GCs: the figure is then placed half an interval late.
fn gcs_unseen(before: f64, after: f64) -> bool {
    after > 1.25 * (2.0 * before).max(MIN_HEAP_GOAL)
}

/// Accumulates reduced captures, cycle by cycle, in any order of cycles but time order within.
#[derive(Default)]
pub struct GrowthBuilder {
    cycles: BTreeMap<u32, CycleState>,
    /// Every good heap capture's time by cycle, duplicates included ([`GrowthBuilder::captures`]).
    heap_times: BTreeMap<u32, Vec<(i64, Option<u32>)>>,
    forced_gc: bool,
    cpu_limit: Option<f64>,
    run_label: String,
}

impl GrowthBuilder {
    /// What to call the build of cycles whose source told nothing (the run's `--label`).
    pub fn run_label(mut self, label: &str) -> GrowthBuilder {
        self.run_label = label.to_string();
        self
    }

    /// Whether the heap captures were made with a forced GC (`?gc=1`, `collect --gc`).
    /// The CPU limit of the target (cores), when known: GOMAXPROCS is compared with it.
    pub fn cpu_limit(mut self, cores: Option<f64>) -> GrowthBuilder {
        self.cpu_limit = cores;
        self
    }

    pub fn forced_gc(mut self, forced: bool) -> GrowthBuilder {
        self.forced_gc = forced;
        self
    }

    fn cycle(&mut self, index: u32, t_ms: i64) -> (&mut CycleState, f64) {
        let c = self.cycles.entry(index).or_default();
        let start = *c.start_ms.get_or_insert(t_ms);
        (c, (t_ms - start) as f64 / 1000.0)
    }

    /// The run's records: every good heap capture, duplicates included, tells when the
    /// publication it showed still held (duplicates are not fed to [`GrowthBuilder::heap`]).
    pub fn captures(mut self, records: &[CaptureRecord]) -> GrowthBuilder {
        for r in records
            .iter()
            .filter(|r| r.kind == RecordKind::Heap && r.is_ok())
        {
            self.heap_times
                .entry(r.cycle)
                .or_default()
                .push((r.t_ms, r.gc.map(|g| g.num_gc)));
        }
        for times in self.heap_times.values_mut() {
            times.sort_unstable();
        }
        self
    }

    /// A heap capture: every site's in-use and cumulative allocated bytes.
    pub fn heap(&mut self, record: &CaptureRecord, sites: &[SiteFigures]) {
        let forced_gc = self.forced_gc;
        let before_ms = self.heap_times.get(&record.cycle).and_then(|times| {
            let i = times.partition_point(|&(t, _)| t < record.t_ms);
            i.checked_sub(1).map(|i| times[i])
        });
        let begun = self
            .cycles
            .get(&record.cycle)
            .and_then(|c| c.start_ms)
            .unwrap_or(record.t_ms);
        // Only wanted while no publication has been seen (the times of every capture).
        let waiting = record.gc.is_some()
            && self
                .cycles
                .get(&record.cycle)
                .is_none_or(|c| c.unpublished || c.published.is_none());
        let clocked: Vec<(f64, Option<u32>)> = self
            .heap_times
            .get(&record.cycle)
            .filter(|_| waiting)
            .map(|times| {
                times
                    .iter()
                    .map(|&(ms, g)| ((ms - begun) as f64 / 1000.0, g))
                    .collect()
            })
            .unwrap_or_default();
        let (c, t) = self.cycle(record.cycle, record.t_ms);
        let start = c.start_ms.unwrap_or(record.t_ms);
        let before = before_ms.map(|(b, num_gc)| Sighting {
            at: (b - start) as f64 / 1000.0,
            num_gc,
        });
        let figures = sites.to_vec();
        let total = |f: &Vec<SiteFigures>| f.iter().map(|s| s.value as f64).sum();
        let clock = record.gc.map(|g| g.num_gc);
        let unpublished = before_first_publication(record);
        if c.published.is_none() {
            c.unpublished = unpublished;
        }
        if let Some(at) = after_unpublished(record, c.unpublished, &clocked) {
            c.unpublished = false;
            c.inuse.truncate_after(at);
            c.alloc.truncate_after(at);
            c.published = Some(Publication {
                figures: figures.clone(),
                first: t,
                last: t,
                at: Some(at),
                num_gc: clock,
                gc_after: None,
            });
            c.inuse.push(
                at,
                figures.iter().map(|s| (s.name.as_str(), s.value as f64)),
            );
            c.alloc.push(
                at,
                figures.iter().map(|s| (s.name.as_str(), s.alloc as f64)),
            );
            return;
        }
        if !unpublished {
            c.unpublished = false;
        }
        // Before the first publication a capture is current: it sums what was allocated by then.
        let Some(placed) = place_publication(
            &mut c.published,
            (&figures, total),
            t,
            before,
            clock,
            forced_gc || unpublished,
        ) else {
            return;
        };
        for (at, sites) in placed
            .again
            .iter()
            .map(|(at, f)| (*at, f))
            .chain([(placed.at, &figures)])
        {
            c.inuse
                .push(at, sites.iter().map(|s| (s.name.as_str(), s.value as f64)));
            c.alloc
                .push(at, sites.iter().map(|s| (s.name.as_str(), s.alloc as f64)));
        }
    }

    pub fn goroutine(&mut self, record: &CaptureRecord, sites: &[SiteFigures]) {
        let (c, t) = self.cycle(record.cycle, record.t_ms);
        c.goroutines
            .push(t, sites.iter().map(|s| (s.name.as_str(), s.value as f64)));
    }

    pub fn finish(
        self,
        records: &[CaptureRecord],
        memory: &[MemorySample],
        limit: Option<u64>,
    ) -> GrowthReport {
        let mut indices: Vec<u32> = records.iter().map(|r| r.cycle).collect();
        indices.extend(self.cycles.keys());
        indices.sort_unstable();
        indices.dedup();
        let mut states = self.cycles;
        let builds = cycle_builds(records, &self.run_label);
        let spans = boundaries::cycle_spans(
            records,
            &indices,
            |inc| builds.iter().find(|b| b.index == inc).and_then(|b| b.pid),
            memory,
        );
        let kills = ends::kernel_kills(memory, &spans);
        let mut cycles = Vec::new();
        for (pos, &inc) in indices.iter().enumerate() {
            let rs: Vec<&CaptureRecord> = records
                .iter()
                .filter(|r| r.cycle == inc && !r.kind.is_event())
                .collect();
            let next_start = indices.get(pos + 1).and_then(|n| {
                records
                    .iter()
                    .filter(|r| r.cycle == *n)
                    .map(|r| r.t_ms)
                    .min()
            });
            let state = states.remove(&inc).unwrap_or_default();
            let mem = boundaries::cycle_memory(memory, &spans, inc);
            let exit_ms = records
                .iter()
                .find(|r| r.kind == RecordKind::Exit && r.cycle == inc)
                .map(|r| r.t_ms);
            if let Some(mut c) = cycle(
                inc,
                &rs,
                state,
                &mem,
                (next_start, exit_ms),
                limit,
                self.forced_gc,
            ) {
                if let Some(b) = builds.iter().find(|b| b.index == inc) {
                    c.build = b.label.clone();
                    c.build_info = b.build.clone();
                    c.pid = b.pid;
                }
                let span_pid = |n: u32| spans.iter().find(|s| s.index == n).and_then(|s| s.pid);
                c.pid = c.pid.or(span_pid(inc));
                if let Some(b) = c.breakdown.as_mut() {
                    breakdown::mark_inherited(b, &mem, pos > 0);
                }
                let next = indices.get(pos + 1).map(|&n| span_pid(n));
                c.end = ends::cycle_end(&EndEvidence {
                    index: inc,
                    records,
                    kills: &kills,
                    last_ms: c.start_ms + (c.span_s * 1000.0).round() as i64,
                    stopped: c.died_after_s.is_some(),
                    pid: c.pid,
                    next,
                    cgroup_watched: mem.iter().any(|m| m.source == "cgroup"),
                });
                c.killed = c.end == CycleEnd::OomKilled;
                let exit = records
                    .iter()
                    .find(|r| r.kind == RecordKind::Exit && r.cycle == inc)
                    .filter(|_| c.killed);
                let sampled = kills.iter().find(|k| k.cycle == inc).map(|k| k.seen_ms);
                c.kill_seen_s = exit
                    .map(|x| x.t_ms)
                    .or(sampled)
                    .filter(|_| c.killed)
                    .map(|ms| (ms - c.start_ms) as f64 / 1000.0);
                c.oom_held_ms = exit.and_then(|x| x.totals.get("oom_held_ms").copied());
                c.oom_held_below_bytes =
                    exit.and_then(|x| x.totals.get("oom_held_below_bytes").copied());
                if let Some(a) = c.at_limit.as_mut() {
                    a.killed = c.killed;
                    // The kernel kills only after a charge failed: a count of none beside a
                    // kill is a counter that cannot see them (v1 with memory+swap bound at
                    // the limit, as `run` sets it, in runs recorded before the sampler knew).
                    if a.killed && a.charge_failures == Some(0) {
                        a.charge_failures = None;
                    }
                }
                let good: Vec<&&CaptureRecord> = rs.iter().filter(|r| r.is_ok()).collect();
                c.runtime = runtime_view(&good, self.cpu_limit);
                cycles.push(c);
            }
        }
        let across = across(&cycles);
        GrowthReport {
            schema: crate::model::SCHEMA,
            limit_bytes: limit,
            cycles,
            across,
        }
    }
}

/// The figures across cycles (`render::verdict::across_summary` words them).
fn across(cycles: &[CycleGrowth]) -> AcrossCycles {
    let ages: Vec<f64> = cycles.iter().filter_map(|c| c.died_after_s).collect();
    let tops: Vec<Option<&str>> = cycles
        .iter()
        .map(|c| c.sites.first().map(|s| s.name.as_str()))
        .collect();
    let same_top_site = match tops.first() {
        Some(Some(first)) if tops.iter().all(|t| t == &Some(*first)) => Some(first.to_string()),
        _ => None,
    };
    AcrossCycles {
        cycles: cycles.len(),
        died: ages.len(),
        same_top_site,
        ages_s: ages,
        crash_loop: None,
    }
}

/// Whether a line fitted to time-ordered `points` rises over their span by at least half of
/// their rise from the first figure to the highest (a rise under an eighth of the highest
/// needs no accounting for).
fn accounts_for_rise(fit: &LineFit, points: &[(f64, f64)]) -> bool {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return true;
    };
    let peak = points.iter().map(|p| p.1).fold(first.1, f64::max);
    let rise = peak - first.1;
    rise <= peak / 8.0 || fit.slope * (last.0 - first.0) >= rise / 2.0
}

fn fit_points(points: &[(f64, f64)]) -> Option<LineFit> {
    let (t, v): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    theil_sen(&t, &v)
}

fn cycle(
    index: u32,
    records: &[&CaptureRecord],
    state: CycleState,
    mem: &[&MemorySample],
    (next_start, exit_ms): (Option<i64>, Option<i64>),
    limit: Option<u64>,
    forced_gc: bool,
) -> Option<CycleGrowth> {
    let good: Vec<&&CaptureRecord> = records.iter().filter(|r| r.is_ok()).collect();
    let first = good.iter().map(|r| r.t_ms).min()?;
    let last = good.iter().map(|r| r.t_ms).max()?;
    let start_ms = state.start_ms.unwrap_or(first).min(first);
    let secs = |t: i64| (t - start_ms) as f64 / 1000.0;
    let heap: Vec<&&&CaptureRecord> = good.iter().filter(|r| r.kind == RecordKind::Heap).collect();
    let mut by_time = heap.clone();
    by_time.sort_by_key(|r| (r.t_ms, r.seq));
    // Duplicates too: each tells that the publication it showed still held.
    let mut published = None;
    let mut before: Option<&&&CaptureRecord> = None;
    let (mut distinct, mut seqs): (Vec<(f64, f64)>, Vec<u64>) = (Vec::new(), Vec::new());
    let inuse_of = |f: &(i64, Option<i64>)| f.0 as f64;
    let clocked: Vec<(f64, Option<u32>)> = by_time
        .iter()
        .map(|r| (secs(r.t_ms), r.gc.map(|g| g.num_gc)))
        .collect();
    // A capture stored as a twin of an earlier one (`dup_of`) is read from that one's file.
    let stored = |r: &CaptureRecord| r.dup_of.unwrap_or(r.seq);
    let mut unpublished = by_time.first().is_some_and(|r| before_first_publication(r));
    // The moment of the GC the first publication describes and its figure, when captures before
    // it counted garbage as in use: those after it, or above it, are no figure of the heap.
    let mut superseded_after: Option<(f64, i64)> = None;
    for r in &by_time {
        let last = before.replace(r);
        // With a forced GC every capture is current and placed, but a stored twin only once.
        if forced_gc && r.dup_of.is_some() {
            continue;
        }
        let Some(&inuse) = r.totals.get("inuse_space") else {
            continue;
        };
        let figures = (inuse, r.totals.get("alloc_space").copied());
        let at_before = last.map(|b| Sighting {
            at: secs(b.t_ms),
            num_gc: b.gc.map(|g| g.num_gc),
        });
        // The first publication after captures made before any: at its GC's moment, the
        // captures after it (garbage counted as in use) giving way, and so do those before it
        // that stand above it: what they summed beyond the heap that GC found was garbage.
        // When that GC found less than half of what had been allocated in use, they summed
        // garbage mostly, and all give way (GOGC=off: no GC until the soft limit, and 263 MiB
        // of dropped buffers read as the heap at 2 s).
        if let Some(at) = after_unpublished(r, unpublished, &clocked) {
            unpublished = false;
            let allocated = r.totals.get("alloc_space").copied().unwrap_or(inuse);
            let figure = if (inuse as f64) < LIVE_SHARE * allocated as f64 {
                i64::MIN
            } else {
                inuse
            };
            superseded_after = Some((at, figure));
            let keep = distinct.partition_point(|p: &(f64, f64)| p.0 <= at);
            distinct.truncate(keep);
            seqs.truncate(keep);
            let mut k = 0;
            while k < distinct.len() {
                if distinct[k].1 > figure as f64 {
                    distinct.remove(k);
                    seqs.remove(k);
                } else {
                    k += 1;
                }
            }
            distinct.push((at, inuse as f64));
            seqs.push(stored(r));
            published = Some(Publication {
                figures,
                first: secs(r.t_ms),
                last: secs(r.t_ms),
                at: Some(at),
                num_gc: r.gc.map(|g| g.num_gc),
                gc_after: None,
            });
            continue;
        }
        let current = before_first_publication(r);
        unpublished &= current;
        let Some(placed) = place_publication(
            &mut published,
            (&figures, inuse_of),
            secs(r.t_ms),
            at_before,
            r.gc.map(|g| g.num_gc),
            forced_gc || current,
        ) else {
            continue;
        };
        if let (Some((at, again)), Some(b)) = (placed.again, last) {
            distinct.push((at, again.0 as f64));
            seqs.push(stored(b));
        }
        distinct.push((placed.at, inuse as f64));
        seqs.push(stored(r));
    }
    let failed_after = records
        .iter()
        .filter(|r| !r.is_ok() && r.t_ms > last)
        .map(|r| r.t_ms)
        .min();
    // The death: the exit record of whoever started the process, else the first failed
    // capture after the last good one, else the next cycle's start.
    let stopped = exit_ms.or(failed_after).or(next_start);
    // How the cycle ended is told once its neighbours are known (`GrowthBuilder::finish`).
    let killed = false;
    let cgroup = mem
        .iter()
        .any(|m| m.source == "cgroup" && m.usage.is_some());
    let mem_points: Vec<(f64, f64)> = mem
        .iter()
        .filter(|m| m.alive && m.t_ms <= last.max(stopped.unwrap_or(last)))
        .filter_map(|m| m.bytes().map(|b| (secs(m.t_ms), b as f64)))
        .collect();
    // A whole-cycle fit is the memory's trend only when it accounts for the rise: a quiet start
    // and then a climb to the limit in its last moments fit a flat line ("0 B/s").
    let mem_fit = thin(&mem_points, 256)
        .and_then(|p| fit_points(&p))
        .filter(|f| accounts_for_rise(f, &mem_points));
    let at_limit = breakdown::at_limit(mem, start_ms, limit, killed);
    let died_after_s = stopped.map(secs);
    // Without totals in the records, the sites' sum on the grid is the heap.
    let summed: Vec<(f64, f64)> = if distinct.is_empty() {
        let times = state.inuse.times();
        (0..times.len())
            .map(|i| (times[i], state.inuse.series().map(|(_, v)| v[i]).sum()))
            .collect()
    } else {
        Vec::new()
    };
    let reading = reading::read(&ReadingInput {
        heap: if distinct.is_empty() {
            &summed
        } else {
            &distinct
        },
        seqs: &seqs,
        sites: &state.inuse,
        memory: &thin(&mem_points, 512).unwrap_or_default(),
        memory_of: if cgroup {
            "cgroup memory"
        } else {
            "process memory"
        },
        limit,
        died_s: died_after_s,
        at_limit: at_limit.is_some(),
    });
    let sites = reading.as_ref().map_or_else(Vec::new, site_rows);

    // Allocation storms and the profiling cost.
    let (alloc_storms, profiling) = storms(&state.alloc, &state.inuse);
    let goroutine_growth = goroutines(&state.goroutines);
    let memstats = memstats_view(&good, start_ms);

    let memstats_records: Vec<&CaptureRecord> = good
        .iter()
        .filter(|r| r.kind == RecordKind::Memstats)
        .map(|r| **r)
        .collect();
    let good_records: Vec<&CaptureRecord> = good.iter().map(|r| **r).collect();
    let stuck = super::stuck::read(at_limit.as_ref(), mem, &good_records, start_ms);
    let heap_series: Vec<(f64, i64)> = by_time
        .iter()
        .filter(|r| {
            !(before_first_publication(r)
                && superseded_after.is_some_and(|(at, figure)| {
                    secs(r.t_ms) > at || r.totals.get("inuse_space").is_some_and(|&v| v > figure)
                }))
        })
        .filter_map(|r| Some((secs(r.t_ms), *r.totals.get("inuse_space")?)))
        .collect();
    let c = CycleGrowth {
        index,
        build: String::new(),
        build_info: None,
        pid: None,
        captures: good.len(),
        stored: heap.iter().filter(|r| r.dup_of.is_none()).count(),
        duplicates: heap.iter().filter(|r| r.dup_of.is_some()).count(),
        errors: records.iter().filter(|r| !r.is_ok()).count(),
        start_ms,
        span_s: secs(last),
        died_after_s,
        interval_s: good
            .iter()
            .max_by_key(|r| (r.t_ms, r.seq))
            .and_then(|r| r.interval_ms)
            .map(|ms| ms as f64 / 1000.0),
        end: CycleEnd::StillAnswering,
        killed,
        gc_clock: !heap.is_empty() && heap.iter().all(|r| r.gc.is_some()),
        kill_seen_s: None,
        oom_held_ms: None,
        oom_held_below_bytes: None,
        unpublished: heap.last().and_then(|r| {
            let recent_bytes = *r.totals.get("recent_space")?;
            let file = r.file.clone().or_else(|| {
                let twin = r.dup_of?;
                heap.iter().find(|h| h.seq == twin)?.file.clone()
            });
            Some(Unpublished {
                seq: r.seq,
                file,
                at_s: secs(r.t_ms),
                inuse_bytes: r.totals.get("inuse_space").copied().unwrap_or(0),
                recent_bytes,
            })
        }),
        heap_first: heap
            .first()
            .and_then(|r| r.totals.get("inuse_space").copied()),
        heap_last: heap
            .last()
            .and_then(|r| r.totals.get("inuse_space").copied()),
        total_bytes_per_sec: Some(reading.as_ref().map_or(0.0, |r| r.bytes_per_sec)),
        total_fit_r2: reading.as_ref().map(|r| r.fit_r2),
        memory_bytes_per_sec: mem_fit.map(|f| f.slope),
        memory_peak: mem.iter().filter_map(|m| m.bytes()).max(),
        memory_from_s: mem.first().map(|m| secs(m.t_ms)),
        limit_at_s: reading
            .as_ref()
            .and_then(|r| r.forecast.as_ref())
            .map(|f| f.at_s),
        sites,
        alloc_storms,
        goroutine_growth,
        profiling,
        memstats,
        runtime: None,
        peaks: spikes::peaks(&heap_series, mem, start_ms),
        breakdown: breakdown::at_peak(mem, &memstats_records, start_ms, limit),
        at_limit,
        stuck,
        memory_peak_anon: mem
            .iter()
            .filter_map(|m| {
                m.cgroup
                    .as_ref()
                    .and_then(|c| c.anon)
                    .or_else(|| m.process.as_ref().and_then(|p| p.rss_anon))
            })
            .max(),
        other_episodes: spikes::episode(&heap_series, limit)
            .map(|main| spikes::other_episodes(&heap_series, limit, &main))
            .unwrap_or_default(),
        episode: spikes::episode(&heap_series, limit),
        heap_sustained: reading.as_ref().is_some_and(|r| r.ongoing),
        reading,
    };
    let mut c = c;
    c.unflatten_storms();
    Some(c)
}

/// A site is among the growing ones when it holds at least this share of a rise still going on.
const GROWING_SHARE: f64 = 0.1;

/// The rows of the growing-sites table: the reading's sites, each with its part of the rate,
/// while the episode still goes on at the end of the cycle (a rise that held is no growth).
fn site_rows(r: &Reading) -> Vec<SiteGrowth> {
    if !r.ongoing {
        return Vec::new();
    }
    r.sites
        .iter()
        .filter(|s| s.share >= GROWING_SHARE)
        .map(|s| SiteGrowth {
            name: s.name.clone(),
            bytes_per_sec: s.bytes_per_sec,
            fit_r2: r.fit_r2,
            inuse_first: s.before,
            inuse_last: s.after,
            onset_s: Some(r.onset_s),
            share: s.share,
        })
        .collect()
}

impl CycleGrowth {
    /// The sites holding the reading's rise, largest share first (none without a reading).
    pub fn rise_sites(&self) -> &[RiseSite] {
        self.reading.as_ref().map_or(&[], |r| r.sites.as_slice())
    }

    /// The reading's sites as read from the two stored captures at its onset and end.
    pub fn set_rise_sites(&mut self, sites: Vec<RiseSite>, from_seq: u64, to_seq: u64) {
        let Some(r) = self.reading.as_mut() else {
            return;
        };
        r.sites = sites;
        r.from_seq = Some(from_seq);
        r.to_seq = Some(to_seq);
        reading::set_shares(r);
        self.sites = site_rows(r);
        self.unflatten_storms();
    }

    /// The reading's sites as read from the site figures of the two stored captures at its
    /// onset (`from`) and end (`to`), each with its seq. True when no site holds
    /// [`CAUSE_SHARE`](super::cause::CAUSE_SHARE) of the rise: it is spread over several, and
    /// its cause is the caller they share, read from the stacks ([`CycleGrowth::set_cause`]).
    pub fn read_rise_sites(
        &mut self,
        (from, before): (u64, &[SiteFigures]),
        (to, after): (u64, &[SiteFigures]),
    ) -> bool {
        let sites = reading::rise_sites(
            before.iter().map(|s| (s.name.as_str(), s.value as f64)),
            after.iter().map(|s| (s.name.as_str(), s.value as f64)),
        );
        self.set_rise_sites(sites, from, to);
        self.rise_sites()
            .first()
            .is_some_and(|s| s.share < super::cause::CAUSE_SHARE)
    }

    /// The caller under which most of the reading's rise lies, read from the stacks that grew.
    pub fn set_cause(&mut self, cause: Option<crate::analyse::cause::Cause>) {
        if let Some(r) = self.reading.as_mut() {
            r.cause = cause;
        }
    }

    /// A storm's site that holds part of the rise is not "in-use flat".
    fn unflatten_storms(&mut self) {
        for s in &mut self.alloc_storms {
            if self.sites.iter().any(|g| g.name == s.name) {
                s.inuse_flat = false;
            }
        }
    }
}

fn thin(points: &[(f64, f64)], max: usize) -> Option<Vec<(f64, f64)>> {
    if points.len() < 2 {
        return None;
    }
    let step = points.len().div_ceil(max);
    Some(points.iter().step_by(step.max(1)).copied().collect())
}

#[cfg(test)]
mod go_runtime;
#[cfg(test)]
mod shapes;
#[cfg(test)]
mod shapes_tests;
#[cfg(test)]
mod tests;
