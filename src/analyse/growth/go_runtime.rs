//! A model of a Go process's heap profile as the runtime publishes it, to make up lives for
//! the property test of the reading: when each GC runs (runtime/mgcpacer.go), which
//! allocations the profile samples (runtime/malloc.go, `MemProfileRate`), and how the
//! memRecord cycles hold every sampled allocation and free back until the GC after next
//! (runtime/mprof.go). It yields what a collector writes and the site index gives: capture
//! records with their totals and GC clock, each stored capture's sites and folded stacks, and
//! the cgroup's memory.

use std::collections::{BTreeMap, VecDeque};

use crate::analyse::reduce::{OwnCode, SiteFigures, name_frames};
use crate::model::capture::{CaptureRecord, GcClock, RecordKind};
use crate::model::memory::MemorySample;

pub const MIB: f64 = 1024.0 * 1024.0;
/// `runtime.MemProfileRate`'s default: a sample every 512 KiB allocated, on average.
pub const MEM_PROFILE_RATE: f64 = 512.0 * 1024.0;
/// `defaultHeapMinimum` (mgcpacer.go): the smallest heap goal at GOGC=100, scaled by GOGC.
const HEAP_MINIMUM: f64 = 4.0 * MIB;
/// mgcpacer.go's `minRunway`: with less room than this to its goal the GC runs back to back.
const MIN_RUNWAY: f64 = 64.0 * 1024.0;
/// sysmon forces a GC when none ran for two minutes (proc.go, `forcegcperiod`).
const FORCE_GC_PERIOD: f64 = 120.0;

/// SplitMix64: every life is a function of its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// When a site's objects become unreachable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lifetime {
    /// Never: a leak, a load kept for the process's life.
    Kept,
    /// This many seconds after each was allocated: churn, a storm, a bounded cache.
    For(f64),
    /// All at this moment: a spike let go at once.
    Until(f64),
}

/// One allocation site: its stack, the size of its objects, and the bytes per second it
/// allocates from `from` to `to` (seconds of the process's life).
#[derive(Debug, Clone)]
pub struct Site {
    /// Folded, root first, `;`-separated, as `model::aggregate::folded` writes a stack.
    pub stack: String,
    pub object: f64,
    pub from: f64,
    pub to: f64,
    pub rate: f64,
    pub lifetime: Lifetime,
}

fn overlap(a: f64, b: f64, c: f64, d: f64) -> f64 {
    (b.min(d) - a.max(c)).max(0.0)
}

impl Site {
    /// Bytes allocated by `t`.
    fn allocated(&self, t: f64) -> f64 {
        self.rate * overlap(self.from, self.to, 0.0, t)
    }

    /// Bytes still reachable at `t`.
    pub fn live(&self, t: f64) -> f64 {
        match self.lifetime {
            Lifetime::Kept => self.allocated(t),
            Lifetime::For(l) => self.rate * overlap(self.from, self.to, t - l, t),
            Lifetime::Until(d) if t < d => self.allocated(t),
            Lifetime::Until(_) => 0.0,
        }
    }

    /// The bytes a GC finds reachable at its mark: those alive when it began, and those
    /// allocated while it marked (allocated black).
    pub fn marked(&self, gc: &Gc) -> f64 {
        self.live(gc.start) + self.allocated(gc.end) - self.allocated(gc.start)
    }

    /// Bytes allocated per sample the profile takes, on average.
    pub fn bytes_per_sample(&self) -> f64 {
        self.object / (1.0 - (-self.object / MEM_PROFILE_RATE).exp())
    }

    fn dies(&self, born: f64) -> f64 {
        match self.lifetime {
            Lifetime::Kept => f64::INFINITY,
            Lifetime::For(l) => born + l,
            Lifetime::Until(d) => d.max(born),
        }
    }
}

/// The GC pacer's settings and the machine's marking speed.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// GOGC; `None` is `GOGC=off`.
    pub gogc: Option<f64>,
    /// GOMEMLIMIT, bytes.
    pub memory_limit: Option<f64>,
    /// How far into the runway from the marked heap to the goal a GC starts (the pacer keeps
    /// it between `minTriggerRatio` ≈ 0.7 and `maxTriggerRatio` ≈ 0.95).
    pub trigger: f64,
    /// Bytes of reachable heap marked per second: a mark lasts a millisecond plus this.
    pub mark_rate: f64,
}

impl Pacer {
    /// The heap goal after a mark that found `marked` bytes reachable: GOGC's (mgcpacer.go,
    /// `gcPercentHeapGoal`, at least the scaled heap minimum), or the memory limit's less what
    /// the process holds beside its heap, whichever is lower.
    fn goal(&self, marked: f64, non_heap: f64) -> f64 {
        let gogc = self.gogc.map_or(f64::INFINITY, |g| {
            (marked * (1.0 + g / 100.0)).max(HEAP_MINIMUM * g / 100.0)
        });
        let limit = self
            .memory_limit
            .map_or(f64::INFINITY, |l| (l - non_heap).max(0.0));
        gogc.min(limit)
    }
}

/// One GC: when its mark began and when it terminated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gc {
    pub start: f64,
    pub end: f64,
}

/// A process: its sites, its pacer, and what bounds its life.
#[derive(Debug, Clone)]
pub struct Process {
    pub sites: Vec<Site>,
    pub pacer: Pacer,
    /// Memory it holds beside its heap (runtime, stacks, text).
    pub non_heap: f64,
    /// The cgroup's limit: the kernel kills the process when its memory reaches it.
    pub limit: Option<f64>,
    /// Its life ends here when the kernel has not killed it before.
    pub horizon: f64,
}

/// When the GCs of a life ran, and how its heap stood between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub gcs: Vec<Gc>,
    /// The heap each mark found reachable (index as `gcs`), and 0 before the first.
    marked: Vec<f64>,
    /// When the kernel killed it, if it did.
    pub killed: Option<f64>,
    /// The end of the life: the kill, else the horizon.
    pub end: f64,
}

impl Process {
    fn allocated(&self, t: f64) -> f64 {
        self.sites.iter().map(|s| s.allocated(t)).sum()
    }

    fn live(&self, t: f64) -> f64 {
        self.sites.iter().map(|s| s.live(t)).sum()
    }

    /// The first moment from `after` on by which `bytes` have been allocated in all, if
    /// before `until`: allocation is piecewise linear in time, each piece inverted exactly.
    fn when_allocated(&self, bytes: f64, after: f64, until: f64) -> Option<f64> {
        let mut edges: Vec<f64> = self
            .sites
            .iter()
            .flat_map(|s| [s.from, s.to])
            .filter(|&t| t > after && t < until)
            .collect();
        edges.push(until);
        edges.sort_by(f64::total_cmp);
        let (mut t, mut done) = (after, self.allocated(after));
        if done >= bytes {
            return Some(after);
        }
        for edge in edges {
            let rate: f64 = self
                .sites
                .iter()
                .filter(|s| s.from <= t && t < s.to)
                .map(|s| s.rate)
                .sum();
            let reached = done + rate * (edge - t);
            if reached >= bytes && rate > 0.0 {
                return Some(t + (bytes - done) / rate);
            }
            (t, done) = (edge, reached);
        }
        None
    }

    /// The GCs the pacer runs, from the process's start to its death or horizon. Between two
    /// mark terminations the heap is what the last mark found reachable plus everything
    /// allocated since (`heapLive`); a GC starts when that reaches its trigger. Objects
    /// allocated during a mark are allocated black and survive it, and so do those that die
    /// while it marks: the next mark finds reachable what was alive at its start plus what
    /// was allocated while it ran.
    pub fn schedule(&self) -> Schedule {
        let (mut gcs, mut marked_at) = (Vec::new(), vec![0.0]);
        let (mut mt, mut marked, mut last_mark) = (0.0f64, 0.0f64, 0.001f64);
        loop {
            let goal = self.pacer.goal(marked, self.non_heap);
            let runway = goal - marked;
            let base = self.allocated(mt);
            let start = if runway <= MIN_RUNWAY {
                // At the memory limit the GC runs back to back, its CPU limiter leaving the
                // program half of the time.
                Some(mt + last_mark)
            } else {
                let trigger = marked + self.pacer.trigger * runway;
                self.when_allocated(base + trigger - marked, mt, self.horizon)
            }
            .map_or(mt + FORCE_GC_PERIOD, |s| s.min(mt + FORCE_GC_PERIOD));
            let mark = 0.001 + self.live(start) / self.pacer.mark_rate;
            let end = start + mark;
            if let Some(limit) = self.limit {
                // Its pages stay mapped: the process's memory is its largest heap so far, and
                // the kernel kills when that first reaches the limit.
                let room = limit - self.non_heap - marked;
                let peak = self.allocated(end.min(self.horizon)) - base;
                if peak >= room {
                    let at = self
                        .when_allocated(base + room, mt, self.horizon)
                        .unwrap_or(self.horizon);
                    return Schedule {
                        gcs,
                        marked: marked_at,
                        killed: Some(at),
                        end: at,
                    };
                }
            }
            if end > self.horizon {
                break;
            }
            gcs.push(Gc { start, end });
            marked = self.live(start) + self.allocated(end) - self.allocated(start);
            marked_at.push(marked);
            mt = end;
            last_mark = mark;
        }
        Schedule {
            gcs,
            marked: marked_at,
            killed: None,
            end: self.horizon,
        }
    }

    /// The heap (`heapLive`) at `t`: what the last mark before found reachable plus what was
    /// allocated since.
    fn heap_at(&self, s: &Schedule, t: f64) -> f64 {
        let k = s.gcs.partition_point(|g| g.end <= t);
        let since = if k == 0 { 0.0 } else { s.gcs[k - 1].end };
        s.marked[k] + self.allocated(t) - self.allocated(since)
    }
}

/// One allocation the sampler picked: its site, size, and when it was made and became
/// unreachable.
#[derive(Debug, Clone, Copy)]
struct Sampled {
    site: usize,
    born: f64,
    dies: f64,
    bytes: u64,
}

/// The allocations the sampler picks until `until`. An object of `s` bytes is sampled with
/// probability 1 − e^(−s/rate) (the next sample point is exponentially distributed in bytes,
/// malloc.go `nextSample`), so the sampled ones among a site's objects are a geometric
/// process.
fn sample(sites: &[Site], until: f64, rng: &mut Rng) -> Vec<Sampled> {
    let mut out = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        if site.rate <= 0.0 {
            continue;
        }
        let p = 1.0 - (-site.object / MEM_PROFILE_RATE).exp();
        let mut n = 0.0f64;
        loop {
            n += if p > 1.0 - 1e-12 {
                1.0
            } else {
                (rng.uniform().ln() / (-p).ln_1p()).floor() + 1.0
            };
            let born = site.from + n * site.object / site.rate;
            if born > site.to.min(until) {
                break;
            }
            out.push(Sampled {
                site: i,
                born,
                dies: site.dies(born),
                bytes: site.object as u64,
            });
        }
    }
    out.sort_by(|a, b| a.born.total_cmp(&b.born).then(a.site.cmp(&b.site)));
    out
}

/// `memRecordCycle`: what one bucket counted in one profile cycle (or published, summed).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Cycle {
    allocs: u64,
    frees: u64,
    alloc_bytes: u64,
    free_bytes: u64,
}

impl Cycle {
    fn add(&mut self, b: &Cycle) {
        self.allocs += b.allocs;
        self.frees += b.frees;
        self.alloc_bytes += b.alloc_bytes;
        self.free_bytes += b.free_bytes;
    }
}

/// `memRecord`: the published figures and the three cycles not yet published.
#[derive(Debug, Default, Clone)]
struct Record {
    active: Cycle,
    future: [Cycle; 3],
}

/// The runtime's heap profile: one bucket per site, the profile cycle (`mProfCycle`), and the
/// sampled objects not yet freed (a site's objects die in the order they were made: each
/// lives as long as the others, or all die at once).
struct Profiler {
    records: Vec<Record>,
    cycle: u32,
    unfreed: Vec<VecDeque<(f64, u64)>>,
}

/// A site's figures in one read of the profile: published, and allocated but not yet
/// published (what `proc:` reads as `recent_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Read {
    published: Cycle,
    recent: Cycle,
}

impl Profiler {
    fn new(sites: usize) -> Profiler {
        Profiler {
            records: vec![Record::default(); sites],
            cycle: 0,
            unfreed: vec![VecDeque::new(); sites],
        }
    }

    /// `mProf_Malloc`: a sampled allocation counts toward cycle C+2.
    fn malloc(&mut self, o: &Sampled) {
        let c = &mut self.records[o.site].future[((self.cycle + 2) % 3) as usize];
        c.allocs += 1;
        c.alloc_bytes += o.bytes;
        self.unfreed[o.site].push_back((o.dies, o.bytes));
    }

    /// A mark termination (`mProf_NextCycle`, then `mProf_Flush`: cycle C is published), and
    /// the sweep after it, which frees every sampled object that was unreachable when the
    /// mark began, counted toward cycle C+1 (`mProf_Free`).
    fn mark_termination(&mut self, mark_start: f64) {
        self.cycle += 1;
        self.flush((self.cycle % 3) as usize);
        let index = ((self.cycle + 1) % 3) as usize;
        for (r, unfreed) in self.records.iter_mut().zip(&mut self.unfreed) {
            while let Some(&(dies, bytes)) = unfreed.front() {
                if dies >= mark_start {
                    break;
                }
                unfreed.pop_front();
                r.future[index].frees += 1;
                r.future[index].free_bytes += bytes;
            }
        }
    }

    fn flush(&mut self, index: usize) {
        for r in &mut self.records {
            let f = r.future[index];
            r.active.add(&f);
            r.future[index] = Cycle::default();
        }
    }

    /// Whether nothing was published yet: `memProfileInternal` then sums every cycle.
    fn clear(&self) -> bool {
        let index = (self.cycle % 3) as usize;
        self.records.iter().all(|r| {
            let mut c = r.active;
            c.add(&r.future[index]);
            c.allocs == 0 && c.frees == 0
        })
    }

    /// `runtime.MemProfile`, as `/debug/pprof/heap` calls it: it flushes the current cycle and,
    /// when nothing was published yet, moves every cycle into the published figures, where
    /// they stay (the next reads see them as published).
    fn mem_profile(&mut self) -> Vec<Read> {
        let clear = self.clear();
        self.flush((self.cycle % 3) as usize);
        if clear {
            for k in 0..3 {
                self.flush(k);
            }
        }
        self.records
            .iter()
            .map(|r| Read {
                published: r.active,
                recent: Cycle::default(),
            })
            .collect()
    }

    /// What `proc:` reads from outside (source/proc/walk.rs `mem_records`): the same rule,
    /// nothing moved, and the two unpublished cycles' allocations beside.
    fn read_from_outside(&self) -> Vec<Read> {
        let clear = self.clear();
        let index = (self.cycle % 3) as usize;
        self.records
            .iter()
            .map(|r| {
                let mut published = r.active;
                let mut recent = Cycle::default();
                if clear {
                    r.future.iter().for_each(|f| published.add(f));
                } else {
                    published.add(&r.future[index]);
                    recent.add(&r.future[(index + 1) % 3]);
                    recent.add(&r.future[(index + 2) % 3]);
                }
                Read { published, recent }
            })
            .collect()
    }
}

/// `scaleHeapSample` (runtime/pprof/protomem.go): sampled counts and bytes scaled back up by
/// the probability that an object of their average size was sampled.
fn scale(count: u64, bytes: u64) -> (i64, i64) {
    if count == 0 || bytes == 0 {
        return (0, 0);
    }
    let average = bytes as f64 / count as f64;
    let s = 1.0 / (1.0 - (-average / MEM_PROFILE_RATE).exp());
    ((count as f64 * s) as i64, (bytes as f64 * s) as i64)
}

/// How the life is recorded.
#[derive(Debug, Clone)]
pub struct Collector {
    /// Seconds between heap captures.
    pub interval: f64,
    /// When the first capture is taken, seconds into the process's life.
    pub first: f64,
    /// `proc:` (read from outside, with the GC clock and `recent_*`), else HTTP pprof.
    pub proc: bool,
    /// Seconds between samples of the cgroup's memory, when it is watched.
    pub memory_every: Option<f64>,
}

/// A recorded life: what the run directory and its site index hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Life {
    pub records: Vec<CaptureRecord>,
    pub memory: Vec<MemorySample>,
    /// The site index's figures of each stored capture.
    pub sites: BTreeMap<u64, Vec<SiteFigures>>,
    /// Each stored capture's in-use bytes by folded stack.
    pub stacks: BTreeMap<u64, Vec<(String, i64)>>,
    pub schedule: Schedule,
    /// The first capture's moment in the process's life: the reading's zero.
    pub first: f64,
}

const MS: f64 = 1000.0;

/// Records a life of `process` with `collector`, its randomness drawn from `seed`.
pub fn record(process: &Process, collector: &Collector, seed: u64) -> Life {
    let mut rng = Rng::new(seed);
    let schedule = process.schedule();
    let sampled = sample(&process.sites, schedule.end, &mut rng);
    let own = OwnCode::guess();
    let names: Vec<String> = process
        .sites
        .iter()
        .map(|s| {
            let frames: Vec<&str> = s.stack.rsplit(';').collect();
            name_frames(&frames, false, &own).unwrap_or_default()
        })
        .collect();
    let mut profiler = Profiler::new(process.sites.len());
    let (mut next_malloc, mut next_gc) = (0, 0);
    let mut life = Life {
        records: Vec::new(),
        memory: Vec::new(),
        sites: BTreeMap::new(),
        stacks: BTreeMap::new(),
        schedule: schedule.clone(),
        first: collector.first,
    };
    let mut last_stored: Option<(Vec<Read>, u64)> = None;
    let mut seq = 0;
    for k in 0.. {
        let jitter = 0.1 * collector.interval * rng.uniform();
        let t = collector.first + k as f64 * collector.interval + jitter;
        if t >= schedule.end {
            break;
        }
        // Everything the runtime did by `t`, in order.
        loop {
            let malloc = sampled.get(next_malloc).map(|o| o.born).filter(|&b| b <= t);
            let gc = schedule.gcs.get(next_gc).filter(|g| g.end <= t);
            match (malloc, gc) {
                (Some(b), Some(g)) if b < g.end => {
                    profiler.malloc(&sampled[next_malloc]);
                    next_malloc += 1;
                }
                (_, Some(g)) => {
                    profiler.mark_termination(g.start);
                    next_gc += 1;
                }
                (Some(_), None) => {
                    profiler.malloc(&sampled[next_malloc]);
                    next_malloc += 1;
                }
                (None, None) => break,
            }
        }
        let read = if collector.proc {
            profiler.read_from_outside()
        } else {
            profiler.mem_profile()
        };
        seq += 1;
        let t_ms = (t * MS).round() as i64;
        let mut r = CaptureRecord::new(seq, RecordKind::Heap, 1, t_ms);
        r.interval_ms = Some((collector.interval * MS).round() as u64);
        if collector.proc {
            r.gc = Some(GcClock {
                num_gc: next_gc as u32,
                profile_cycle: Some(profiler.cycle),
            });
        }
        let mut totals: BTreeMap<String, i64> = BTreeMap::new();
        let mut sites: BTreeMap<&str, SiteFigures> = BTreeMap::new();
        let mut stacks = Vec::new();
        for (i, x) in read.iter().enumerate() {
            let p = &x.published;
            let (inuse_objects, inuse_space) =
                scale(p.allocs - p.frees, p.alloc_bytes - p.free_bytes);
            let (alloc_objects, alloc_space) = scale(p.allocs, p.alloc_bytes);
            let (recent_objects, recent_space) = scale(x.recent.allocs, x.recent.alloc_bytes);
            let mut add = |k: &str, v: i64| *totals.entry(k.to_string()).or_default() += v;
            add("inuse_objects", inuse_objects);
            add("inuse_space", inuse_space);
            add("alloc_objects", alloc_objects);
            add("alloc_space", alloc_space);
            if collector.proc {
                add("recent_objects", recent_objects);
                add("recent_space", recent_space);
            }
            if inuse_space != 0 || alloc_space != 0 {
                let e = sites.entry(&names[i]).or_insert_with(|| SiteFigures {
                    name: names[i].clone(),
                    value: 0,
                    alloc: 0,
                });
                e.value += inuse_space;
                e.alloc += alloc_space;
            }
            if inuse_space != 0 {
                stacks.push((process.sites[i].stack.clone(), inuse_space));
            }
        }
        r.totals = totals;
        // The collector stores a capture once: the same content as the last stored one is
        // a duplicate of it.
        match &last_stored {
            Some((content, twin)) if *content == read => {
                r.dup_of = Some(*twin);
                r.file = Some(format!("profiles/{twin:06}-heap.pb.gz"));
            }
            _ => {
                r.file = Some(format!("profiles/{seq:06}-heap.pb.gz"));
                last_stored = Some((read, seq));
                life.sites.insert(seq, sites.into_values().collect());
                stacks.sort();
                life.stacks.insert(seq, stacks);
            }
        }
        life.records.push(r);
    }
    if let Some(every) = collector.memory_every {
        let limit = process.limit.map(|l| l as u64);
        let mut largest = 0.0f64;
        for k in 0.. {
            let t = collector.first + k as f64 * every;
            if t >= schedule.end {
                break;
            }
            let heap = process.heap_at(&schedule, t);
            largest = largest.max(heap);
            // Under a memory limit the scavenger gives back what lies above it.
            let held = process
                .pacer
                .memory_limit
                .map_or(largest, |l| largest.min((l - process.non_heap).max(heap)));
            life.memory.push(MemorySample {
                t_ms: (t * MS).round() as i64,
                source: "cgroup".into(),
                usage: Some((held + process.non_heap) as u64),
                limit,
                oom_kills: Some(0),
                alive: true,
                ..MemorySample::default()
            });
        }
    }
    if let Some(at) = schedule.killed {
        seq += 1;
        let mut exit = CaptureRecord::new(seq, RecordKind::Exit, 1, (at * MS).round() as i64);
        exit.signal = Some(9);
        exit.totals.insert("oom_kill".into(), 1);
        life.records.push(exit);
    }
    life
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(object: f64) -> Process {
        Process {
            sites: vec![Site {
                stack: "main.main;main.leak".into(),
                object,
                from: 0.0,
                to: f64::INFINITY,
                rate: 32.0 * MIB,
                lifetime: Lifetime::Kept,
            }],
            pacer: Pacer {
                gogc: Some(100.0),
                memory_limit: None,
                trigger: 0.8,
                mark_rate: 1000.0 * MIB,
            },
            non_heap: 4.0 * MIB,
            limit: None,
            horizon: 6.0,
        }
    }

    /// Scaled back up, the sampled figures estimate what was allocated: over many lives the
    /// published heap averages the heap as of the mark termination before last.
    #[test]
    fn the_published_heap_is_the_snapshot_of_the_gc_before_last_scaled_back_up() {
        for (object, proc) in [64.0, 32768.0, 262144.0, 1048576.0]
            .into_iter()
            .flat_map(|o| [(o, true), (o, false)])
        {
            let p = leak(object);
            let collector = Collector {
                interval: 0.25,
                first: 0.0,
                proc,
                memory_every: None,
            };
            let (mut seen, mut truth) = (0.0, 0.0);
            for seed in 0..200 {
                let life = record(&p, &collector, seed);
                let last = life.records.last().unwrap();
                let t = last.t_ms as f64 / 1000.0;
                let n = life.schedule.gcs.iter().filter(|g| g.end <= t).count();
                let snapshot = life.schedule.gcs[n - 2].end;
                seen += last.totals["inuse_space"] as f64;
                truth += 32.0 * MIB * snapshot;
            }
            let ratio = seen / truth;
            assert!(
                (0.97..1.03).contains(&ratio),
                "{object} B objects, proc {proc}: {ratio:.3}"
            );
        }
    }
}
