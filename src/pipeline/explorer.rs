//! What the report page's explorer carries of a run's heap profiles: every stored heap capture
//! of each analysed life, decoded to its in-use bytes per stack (function granularity, the
//! stacks `flame` draws and `diff` sums by leaf), stacks and frames interned once for the run,
//! each capture kept as its changes from the one before. Past a size budget, every k-th
//! capture of each life is carried (its first and last always), and the page says which.
//! Captures are decoded a few at a time and reduced to their changes at once, so memory
//! follows the stacks and what changes, not the number of captures.
//!
//! # What the page carries
//!
//! `carry` decodes every stored heap capture of the analysed lives (a few threads, as `index`
//! does) to its in-use bytes per stack at function granularity (`model::aggregate::folded`, the
//! stacks `flame` draws and `diff` sums by leaf), and interns stacks and frames once for the run:
//! the page holds a table of frames, a table of stacks (frame ids, root first) and, per capture,
//! only the (stack, bytes) pairs that changed since the life's capture before it. `sites.idx` is
//! not the source: it keeps figures per *site* (one name per sample, for the growth analysis), not
//! per stack, and a flamegraph needs the stacks. A run whose carried JSON would pass [`BUDGET`]
//! (8 MB, which keeps the page under 10 MB) carries every k-th capture of each life, first and
//! last always, with the smallest k that fits (`fit`), and each life's explorer says how many, by
//! which rule, and which seqs (`render::report::explorer::carried_note`).

use std::collections::HashMap;

use super::Analysis;
use super::captures::{StoredCapture, stored_captures};
use crate::decode::{self, DecodeLimits};
use crate::index::QuickMap;
use crate::model::aggregate::{Granularity, SiteKeys};
use crate::render::report::explorer::{CarriedCapture, CarriedLife, CarriedStacks};
use crate::render::report::flames::ReportFlame;
use crate::store::RecordKind;

/// The JSON the page carries for its explorer, at most: with the rest of the page (charts,
/// flamegraphs, tables: well under a megabyte for a run of a thousand captures) the page
/// stays under 10 MB.
pub const BUDGET: usize = 8_000_000;

/// Stands in for a stack without frames, as folded stacks spell it.
const NO_FRAMES: &str = "(no frames)";

/// One capture of a life: the stacks whose in-use bytes changed since the life's capture
/// before it (all its stacks for the first), 0 for a stack gone, sorted by stack.
struct Decoded {
    seq: u64,
    age_s: f64,
    changes: Vec<(u32, i64)>,
}

/// Frames and stacks of the whole run, each once.
#[derive(Default)]
struct Interned {
    frame_ids: HashMap<String, u32>,
    frames: Vec<String>,
    stack_ids: QuickMap<Vec<u32>, u32>,
    stacks: Vec<Vec<u32>>,
}

/// One profile's stacks before interning: its own frame names, and per sample with in-use
/// bytes the keys of those names (leaf first, as the profile lists them), all in one buffer.
struct LocalStacks {
    names: Vec<String>,
    keys: Vec<u32>,
    /// Per sample: where its keys start in `keys`, how many, and its in-use bytes.
    samples: Vec<(usize, usize, i64)>,
}

impl Interned {
    /// The capture's in-use bytes per run-wide stack id, sorted by id.
    fn capture(&mut self, local: LocalStacks) -> Vec<(u32, i64)> {
        let ids: Vec<u32> = local
            .names
            .into_iter()
            .map(|name| {
                let next = self.frames.len() as u32;
                *self.frame_ids.entry(name).or_insert_with_key(|name| {
                    next_frame(&mut self.frames, name);
                    next
                })
            })
            .collect();
        let mut by_stack: QuickMap<u32, i64> = QuickMap::default();
        let mut global: Vec<u32> = Vec::new();
        for &(start, len, value) in &local.samples {
            global.clear();
            global.extend(
                local.keys[start..start + len]
                    .iter()
                    .rev()
                    .map(|&k| ids[k as usize]),
            );
            if global.is_empty() {
                let next = self.frames.len() as u32;
                global.push(
                    *self
                        .frame_ids
                        .entry(NO_FRAMES.to_string())
                        .or_insert_with_key(|name| {
                            next_frame(&mut self.frames, name);
                            next
                        }),
                );
            }
            let next = self.stacks.len() as u32;
            let id = match self.stack_ids.get(global.as_slice()) {
                Some(&id) => id,
                None => {
                    self.stacks.push(global.clone());
                    self.stack_ids.insert(global.clone(), next);
                    next
                }
            };
            *by_stack.entry(id).or_default() += value;
        }
        let mut out: Vec<(u32, i64)> = by_stack.into_iter().filter(|(_, v)| *v != 0).collect();
        out.sort_unstable();
        out
    }
}

fn next_frame(frames: &mut Vec<String>, name: &str) {
    frames.push(name.to_string());
}

/// The stacks of every stored heap capture of the analysed lives, within `budget` bytes of
/// JSON. `None` when no life has a heap capture to carry, or when even each life's first and
/// last do not fit.
pub fn carry(
    a: &Analysis,
    flames: &[ReportFlame],
    limits: &DecodeLimits,
    budget: usize,
) -> Option<CarriedStacks> {
    let captures = stored_captures(&a.run);
    let mut interned = Interned::default();
    let mut lives: Vec<(u32, Vec<Decoded>)> = Vec::new();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    for c in &a.growth.cycles {
        let records: Vec<&StoredCapture> = captures
            .iter()
            .filter(|s| s.record.kind == RecordKind::Heap && s.record.cycle == c.index)
            .collect();
        let mut life = Vec::with_capacity(records.len());
        let mut before: Vec<(u32, i64)> = Vec::new();
        // A few profiles decoded at once: memory holds a batch, not the life.
        for batch in records.chunks(workers * 2) {
            for (stored, local) in batch.iter().zip(decode_batch(batch, limits, workers)) {
                let Some(local) = local else { continue };
                let now = interned.capture(local);
                life.push(Decoded {
                    seq: stored.record.seq,
                    age_s: (stored.record.t_ms - c.start_ms) as f64 / 1000.0,
                    changes: changes(&before, &now),
                });
                before = now;
            }
        }
        if !life.is_empty() {
            lives.push((c.index, life));
        }
    }
    if lives.is_empty() {
        return None;
    }
    let defaults: HashMap<u32, (f64, f64)> = flames
        .iter()
        .filter_map(|f| match f {
            ReportFlame::Growth {
                cycle, from, to, ..
            } => Some((*cycle, (from.age_s, to.age_s))),
            ReportFlame::AgainstBaseline { .. } => None,
        })
        .collect();
    fit(&lives, &interned, &defaults, budget)
}

/// What changed from one capture's sorted (stack, bytes) to the next's: new and changed
/// values, and 0 for stacks gone.
fn changes(before: &[(u32, i64)], now: &[(u32, i64)]) -> Vec<(u32, i64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < before.len() || j < now.len() {
        match (before.get(i), now.get(j)) {
            (Some(b), Some(n)) if b.0 == n.0 => {
                if b.1 != n.1 {
                    out.push(*n);
                }
                i += 1;
                j += 1;
            }
            (Some(b), Some(n)) if b.0 < n.0 => {
                out.push((b.0, 0));
                i += 1;
            }
            (Some(b), None) => {
                out.push((b.0, 0));
                i += 1;
            }
            (_, Some(n)) => {
                out.push(*n);
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// Decodes a batch of captures on `workers` threads into their stacks (in-use bytes, function
/// granularity); `None` for one that cannot be read (the analysis has already noted it).
fn decode_batch(
    batch: &[&StoredCapture<'_>],
    limits: &DecodeLimits,
    workers: usize,
) -> Vec<Option<LocalStacks>> {
    let chunk = batch.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = batch
            .chunks(chunk)
            .map(|part| {
                let thread = scope.spawn(move || {
                    part.iter()
                        .map(|s| stacks_of(s, limits))
                        .collect::<Vec<_>>()
                });
                (part.len(), thread)
            })
            .collect();
        // A thread that panicked reads as its captures unreadable, in their places.
        handles
            .into_iter()
            .flat_map(|(len, h)| {
                h.join()
                    .unwrap_or_else(|_| std::iter::repeat_with(|| None).take(len).collect())
            })
            .collect()
    })
}

/// One capture's in-use bytes per sample as stacks of function names, as
/// `model::aggregate::stacks` reads them, with each name kept once rather than per frame
/// (samples of one stack are summed when interned).
fn stacks_of(stored: &StoredCapture<'_>, limits: &DecodeLimits) -> Option<LocalStacks> {
    let bytes = std::fs::read(&stored.path).ok()?;
    let p = decode::decode_on_one_thread(&bytes, limits).ok()?;
    let index = p.find_sample_type("inuse_space")?;
    let keys = SiteKeys::new(&p, Granularity::Function);
    let types = p.sample_types.len();
    let mut local = LocalStacks {
        names: Vec::new(),
        keys: Vec::new(),
        samples: Vec::new(),
    };
    for (i, sample) in p.samples.iter().enumerate() {
        let v = p.values[i * types + index];
        if v == 0 {
            continue;
        }
        let start = local.keys.len();
        for &loc in p.sample_stack(sample) {
            let l = &p.locations[loc.0 as usize];
            let first = l.frames_start as usize;
            local
                .keys
                .extend_from_slice(&keys.frame_key[first..first + l.frames_len as usize]);
        }
        local.samples.push((start, local.keys.len() - start, v));
    }
    local.names = keys.names;
    Some(local)
}

/// The carried data at the smallest stride whose JSON fits `budget`; `None` when even each
/// life's first and last captures do not.
fn fit(
    lives: &[(u32, Vec<Decoded>)],
    interned: &Interned,
    defaults: &HashMap<u32, (f64, f64)>,
    budget: usize,
) -> Option<CarriedStacks> {
    let most = lives.iter().map(|l| l.1.len()).max().unwrap_or(1);
    let mut stride = 1usize;
    loop {
        let carried = encode(lives, interned, defaults, stride, budget);
        let size = serde_json::to_vec(&carried).map_or(usize::MAX, |v| v.len());
        if size <= budget {
            return Some(carried);
        }
        if stride >= most {
            return None;
        }
        // Grow the stride by about the factor the size is over, at least by one.
        let over = size as f64 / budget as f64;
        stride = ((stride as f64 * over).ceil() as usize)
            .max(stride + 1)
            .min(most);
    }
}

/// The carried data at one stride: the captures kept, each as its changes since the capture
/// kept before it, and only the stacks and frames they name.
fn encode(
    lives: &[(u32, Vec<Decoded>)],
    interned: &Interned,
    defaults: &HashMap<u32, (f64, f64)>,
    stride: usize,
    budget: usize,
) -> CarriedStacks {
    let mut frames: Vec<String> = Vec::new();
    let mut frame_ids: HashMap<u32, u32> = HashMap::new();
    let mut stack_ids: HashMap<u32, u32> = HashMap::new();
    let mut table: Vec<Vec<u32>> = Vec::new();
    let mut out = Vec::new();
    for (index, life) in lives {
        let last = life.len() - 1;
        // The life's bytes per stack as of the capture replayed last, and as carried last.
        let mut state: HashMap<u32, i64> = HashMap::new();
        let mut carried: HashMap<u32, i64> = HashMap::new();
        let mut touched: Vec<u32> = Vec::new();
        let mut captures = Vec::new();
        for (i, c) in life.iter().enumerate() {
            for &(s, v) in &c.changes {
                state.insert(s, v);
                touched.push(s);
            }
            if i % stride != 0 && i != last {
                continue;
            }
            touched.sort_unstable();
            touched.dedup();
            let mut pairs = Vec::new();
            for s in touched.drain(..) {
                let now = state.get(&s).copied().unwrap_or(0);
                if carried.get(&s).copied().unwrap_or(0) == now {
                    continue;
                }
                carried.insert(s, now);
                let id = *stack_ids.entry(s).or_insert_with(|| {
                    let path = interned.stacks[s as usize]
                        .iter()
                        .map(|&f| {
                            *frame_ids.entry(f).or_insert_with(|| {
                                frames.push(interned.frames[f as usize].clone());
                                (frames.len() - 1) as u32
                            })
                        })
                        .collect();
                    table.push(path);
                    (table.len() - 1) as u32
                });
                pairs.push(i64::from(id));
                pairs.push(now);
            }
            captures.push(CarriedCapture {
                seq: c.seq,
                age_s: c.age_s,
                changed: pairs,
            });
        }
        out.push(CarriedLife {
            index: *index,
            stored: life.len(),
            captures,
            default_span: defaults.get(index).copied(),
        });
    }
    CarriedStacks {
        frames,
        stacks: table,
        lives: out,
        stride,
        budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A life of captures given whole (sorted (stack, bytes) each), as `carry` keeps them.
    fn life(captures: &[&[(u32, i64)]]) -> Vec<Decoded> {
        let mut before: &[(u32, i64)] = &[];
        captures
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let d = Decoded {
                    seq: i as u64 + 1,
                    age_s: i as f64,
                    changes: changes(before, s),
                };
                before = s;
                d
            })
            .collect()
    }

    /// Stacks given as text, interned as `carry` interns them.
    fn interned(stacks: &[&str]) -> Interned {
        let mut i = Interned::default();
        for s in stacks {
            let path: Vec<u32> = s
                .split(';')
                .map(|f| {
                    let next = i.frames.len() as u32;
                    *i.frame_ids.entry(f.to_string()).or_insert_with_key(|f| {
                        next_frame(&mut i.frames, f);
                        next
                    })
                })
                .collect();
            i.stack_ids.insert(path.clone(), i.stacks.len() as u32);
            i.stacks.push(path);
        }
        i
    }

    /// Replays a life's carried changes: the in-use bytes per stack (as text) at each capture.
    fn replay(c: &CarriedStacks, life: usize) -> Vec<Vec<(String, i64)>> {
        let mut state: std::collections::BTreeMap<String, i64> = Default::default();
        let mut out = Vec::new();
        for cap in &c.lives[life].captures {
            for pair in cap.changed.chunks(2) {
                let stack: Vec<&str> = c.stacks[pair[0] as usize]
                    .iter()
                    .map(|&f| c.frames[f as usize].as_str())
                    .collect();
                state.insert(stack.join(";"), pair[1]);
            }
            out.push(
                state
                    .iter()
                    .filter(|(_, v)| **v != 0)
                    .map(|(s, v)| (s.clone(), *v))
                    .collect(),
            );
        }
        out
    }

    #[test]
    fn carried_changes_replay_to_each_capture_and_stacks_are_kept_once() {
        let stacks = ["main;a", "main;b", "main;a;c"];
        let lives = vec![(1, life(&[&[(0, 5), (1, 7)], &[(0, 5), (2, 9)], &[(2, 9)]]))];
        let c = encode(&lives, &interned(&stacks), &HashMap::new(), 1, BUDGET);
        assert_eq!(c.frames, ["main", "a", "b", "c"]);
        assert_eq!(c.stacks.len(), 3);
        // The second capture names only what changed: b gone, c new; a unchanged.
        assert_eq!(c.lives[0].captures[1].changed, vec![1, 0, 2, 9]);
        let want = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
            pairs.iter().map(|(s, v)| (s.to_string(), *v)).collect()
        };
        assert_eq!(
            replay(&c, 0),
            vec![
                want(&[("main;a", 5), ("main;b", 7)]),
                want(&[("main;a", 5), ("main;a;c", 9)]),
                want(&[("main;a;c", 9)]),
            ]
        );
    }

    #[test]
    fn changes_name_new_changed_and_gone_stacks_only() {
        let before = [(1, 10), (2, 20), (4, 40)];
        let now = [(0, 5), (2, 20), (4, 41), (7, 70)];
        assert_eq!(
            changes(&before, &now),
            vec![(0, 5), (1, 0), (4, 41), (7, 70)]
        );
        assert_eq!(changes(&now, &now), vec![]);
        assert_eq!(changes(&now, &[]), vec![(0, 0), (2, 0), (4, 0), (7, 0)]);
    }

    #[test]
    fn past_the_budget_every_kth_capture_is_carried_within_it() {
        // 200 captures of 50 stacks each, every stack changing at every capture.
        let names: Vec<String> = (0..50).map(|i| format!("main.main;main.site{i}")).collect();
        let stacks: Vec<&str> = names.iter().map(String::as_str).collect();
        let shape: Vec<Vec<(u32, i64)>> = (0..200i64)
            .map(|k| {
                (0..50u32)
                    .map(|s| (s, (k + 1) * 4096 + i64::from(s)))
                    .collect()
            })
            .collect();
        let refs: Vec<&[(u32, i64)]> = shape.iter().map(Vec::as_slice).collect();
        let lives = vec![(1, life(&refs))];
        let all = fit(&lives, &interned(&stacks), &HashMap::new(), BUDGET).unwrap();
        assert_eq!((all.stride, all.carried()), (1, 200));
        let whole = serde_json::to_vec(&all).unwrap().len();
        let budget = whole / 3;
        let thinned = fit(&lives, &interned(&stacks), &HashMap::new(), budget).unwrap();
        assert!(thinned.stride >= 3, "stride {}", thinned.stride);
        assert!(serde_json::to_vec(&thinned).unwrap().len() <= budget);
        let seqs: Vec<u64> = thinned.lives[0].captures.iter().map(|c| c.seq).collect();
        assert_eq!(seqs.first(), Some(&1));
        assert_eq!(seqs.last(), Some(&200));
        assert_eq!(thinned.stored(), 200);
        // What is carried still replays to each carried capture's own figures.
        let last = replay(&thinned, 0).pop().unwrap();
        assert_eq!(last.len(), 50);
        assert!(
            last.iter()
                .any(|(s, v)| s == "main.main;main.site7" && *v == 200 * 4096 + 7)
        );
        // Nothing fits: nothing is carried.
        assert!(fit(&lives, &interned(&stacks), &HashMap::new(), 100).is_none());
    }

    #[test]
    fn a_stride_keeps_each_lifes_first_and_last_and_replays_to_them() {
        let stacks = ["main;a"];
        let shape: Vec<Vec<(u32, i64)>> = (1..=10).map(|i| vec![(0, i * 100)]).collect();
        let refs: Vec<&[(u32, i64)]> = shape.iter().map(Vec::as_slice).collect();
        let lives = vec![(2, life(&refs))];
        let c = encode(&lives, &interned(&stacks), &HashMap::new(), 4, BUDGET);
        let seqs: Vec<u64> = c.lives[0].captures.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [1, 5, 9, 10]);
        assert_eq!(c.lives[0].stored, 10);
        let states = replay(&c, 0);
        assert_eq!(states[3], vec![("main;a".to_string(), 1000)]);
        assert_eq!(states[1], vec![("main;a".to_string(), 500)]);
    }
}
