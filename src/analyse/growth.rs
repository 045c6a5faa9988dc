//! `growth`: per boot cycle, which sites' in-use bytes grow and how fast (a robust fitted
//! rate with its fit quality, and when it began), allocation storms, goroutine growth, the
//! total rate and the time to the limit, the profiling cost, MemStats overhead, a verdict,
//! and whether every cycle dies the same way. Fed one reduced capture at a time.

use std::collections::BTreeMap;

use serde::Serialize;

use super::boundaries;
use super::breakdown::{self, AtLimit, MemoryBreakdown};
use super::ends::{self, CycleEnd, EndEvidence};
use super::reading::{self, Reading, RiseSite};
use super::reduce::SiteFigures;
use super::runtime::runtime_view;
pub use super::runtime::{GoroutineGrowth, MemStatsView, RuntimeView};
use super::select::cycle_builds;
use super::series::SeriesGrid;
use super::spikes::{Episode, Peaks};
pub use super::storms::{AllocStorm, ProfilingCost, StormWindow};
use crate::model::build::BuildInfo;
use crate::model::capture::{CaptureRecord, RecordKind};
use crate::model::memory::MemorySample;
use crate::model::run_options::OwnNamed;

mod cycle;
mod placement;

use cycle::{cycle, site_rows};
pub use placement::before_first_publication;
use placement::{Publication, Sighting, after_unpublished, place_publication};
#[cfg(test)]
use {
    cycle::{accounts_for_rise, fit_points},
    placement::{gc_moment, gcs_unseen, spread},
};

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
    /// The prefixes the sites were named by as the user's own code, and whence (`--own`);
    /// None: none named.
    pub own: Option<OwnNamed>,
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
        let life = life_of_attempts(records, &indices);
        let mut cycles = Vec::new();
        for (pos, &inc) in indices.iter().enumerate() {
            let rs: Vec<&CaptureRecord> = records
                .iter()
                .filter(|r| life(r) == inc && !r.kind.is_event())
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
            let exit = records
                .iter()
                .find(|r| r.kind == RecordKind::Exit && r.cycle == inc);
            if let Some(mut c) = cycle(
                inc,
                &rs,
                state,
                &mem,
                (next_start, exit),
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
                if let Some(d) = reading::into_death(&c, limit) {
                    c.rose_into_death(d);
                }
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
            own: None,
        }
    }
}

/// The life each capture attempt belongs to: its own cycle's, except a failed attempt made after
/// that cycle's process exited, which belongs to the next life. A collector that learns of a
/// restart only when the new process answers (`--also`'s HTTP endpoint) tags what it tried in
/// between with the life before: etcd's third life, killed in its replay before its endpoint
/// opened, had its six failed attempts counted in the second.
fn life_of_attempts<'a>(
    records: &'a [CaptureRecord],
    indices: &'a [u32],
) -> impl Fn(&CaptureRecord) -> u32 + 'a {
    let exits: BTreeMap<u32, i64> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Exit)
        .map(|r| (r.cycle, r.t_ms))
        .collect();
    move |r| {
        let next = indices.iter().find(|&&n| n > r.cycle).copied();
        match (next, exits.get(&r.cycle)) {
            (Some(next), Some(&exit)) if !r.is_ok() && !r.kind.is_event() && r.t_ms > exit => next,
            _ => r.cycle,
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

    /// A rise read as held in a life killed at its limit whose runtime figures rose on into the
    /// death ([`reading::into_death`]): it went on, and its sites are growing ones.
    fn rose_into_death(&mut self, d: reading::IntoDeath) {
        let Some(r) = self.reading.as_mut() else {
            return;
        };
        r.ongoing = true;
        r.held_s = None;
        r.into_death = Some(d);
        self.heap_sustained = true;
        self.sites = site_rows(r);
        self.unflatten_storms();
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

#[cfg(test)]
mod go_runtime;
#[cfg(test)]
mod shapes;
#[cfg(test)]
mod shapes_tests;
#[cfg(test)]
mod tests;
