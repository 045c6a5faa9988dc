//! What the report page's explorer carries of a run's heap profiles: every stored heap capture
//! of each analysed life, decoded to its in-use bytes per stack (function granularity, the
//! folded stacks `flame` draws and `diff` sums), stacks and frames interned once for the run,
//! each capture kept as its changes from the one before. Past a size budget, every k-th
//! capture of each life is carried (its first and last always), and the page says which.

use std::collections::HashMap;

use super::Analysis;
use super::captures::stored_captures;
use crate::decode::{self, DecodeLimits};
use crate::model::aggregate;
use crate::render::report::explorer::{CarriedCapture, CarriedLife, CarriedStacks};
use crate::render::report::flames::ReportFlame;
use crate::store::RecordKind;

/// The JSON the page carries for its explorer, at most: with the rest of the page (charts,
/// flamegraphs, tables: well under a megabyte for a run of a thousand captures) the page
/// stays under 10 MB.
pub const BUDGET: usize = 8_000_000;

/// One decoded capture: in-use bytes per stack id, sorted by stack.
struct Decoded {
    seq: u64,
    age_s: f64,
    stacks: Vec<(u32, i64)>,
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
    let mut names: HashMap<String, u32> = HashMap::new();
    let mut lives: Vec<(u32, Vec<Decoded>)> = Vec::new();
    for c in &a.growth.cycles {
        let records: Vec<_> = captures
            .iter()
            .filter(|s| s.record.kind == RecordKind::Heap && s.record.cycle == c.index)
            .collect();
        let decoded = decode_all(&records, limits);
        let mut life = Vec::with_capacity(decoded.len());
        for (stored, stacks) in records.iter().zip(decoded) {
            let Some(stacks) = stacks else { continue };
            let mut ids: Vec<(u32, i64)> = stacks
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .map(|(s, v)| {
                    let next = names.len() as u32;
                    (*names.entry(s).or_insert(next), v)
                })
                .collect();
            ids.sort_unstable();
            life.push(Decoded {
                seq: stored.record.seq,
                age_s: (stored.record.t_ms - c.start_ms) as f64 / 1000.0,
                stacks: ids,
            });
        }
        if !life.is_empty() {
            lives.push((c.index, life));
        }
    }
    if lives.is_empty() {
        return None;
    }
    let mut stacks: Vec<&str> = vec![""; names.len()];
    for (s, &id) in &names {
        stacks[id as usize] = s;
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
    fit(&lives, &stacks, &defaults, budget)
}

/// The carried data at the smallest stride whose JSON fits `budget`; `None` when even each
/// life's first and last captures do not.
fn fit(
    lives: &[(u32, Vec<Decoded>)],
    stacks: &[&str],
    defaults: &HashMap<u32, (f64, f64)>,
    budget: usize,
) -> Option<CarriedStacks> {
    let most = lives.iter().map(|l| l.1.len()).max().unwrap_or(1);
    let mut stride = 1usize;
    loop {
        let carried = encode(lives, stacks, defaults, stride, budget);
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

/// Decodes the captures on a few threads; `None` for one that cannot be read (the analysis
/// has already noted it).
fn decode_all(
    records: &[&super::captures::StoredCapture<'_>],
    limits: &DecodeLimits,
) -> Vec<Option<Vec<(String, i64)>>> {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    let chunk = records.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = records
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|s| {
                            let bytes = std::fs::read(&s.path).ok()?;
                            let p = decode::decode_on_one_thread(&bytes, limits).ok()?;
                            let index = p.find_sample_type("inuse_space")?;
                            Some(aggregate::folded(&p, index))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// The carried data at one stride: the captures kept, their changes, and only the stacks and
/// frames they name.
fn encode(
    lives: &[(u32, Vec<Decoded>)],
    stacks: &[&str],
    defaults: &HashMap<u32, (f64, f64)>,
    stride: usize,
    budget: usize,
) -> CarriedStacks {
    let mut frames: Vec<String> = Vec::new();
    let mut frame_ids: HashMap<&str, u32> = HashMap::new();
    let mut stack_ids: HashMap<u32, u32> = HashMap::new();
    let mut table: Vec<Vec<u32>> = Vec::new();
    let mut out = Vec::new();
    for (index, life) in lives {
        let last = life.len() - 1;
        let mut before: HashMap<u32, i64> = HashMap::new();
        let mut captures = Vec::new();
        for (i, c) in life.iter().enumerate() {
            if i % stride != 0 && i != last {
                continue;
            }
            let now: HashMap<u32, i64> = c.stacks.iter().copied().collect();
            let mut changed: Vec<(u32, i64)> = c
                .stacks
                .iter()
                .filter(|(s, v)| before.get(s) != Some(v))
                .copied()
                .chain(
                    before
                        .keys()
                        .filter(|s| !now.contains_key(s))
                        .map(|&s| (s, 0)),
                )
                .collect();
            changed.sort_unstable();
            let mut pairs = Vec::with_capacity(changed.len() * 2);
            for (s, v) in changed {
                let id = *stack_ids.entry(s).or_insert_with(|| {
                    let frames_of = stacks[s as usize]
                        .split(';')
                        .map(|f| {
                            *frame_ids.entry(f).or_insert_with(|| {
                                frames.push(f.to_string());
                                (frames.len() - 1) as u32
                            })
                        })
                        .collect();
                    table.push(frames_of);
                    (table.len() - 1) as u32
                });
                pairs.push(i64::from(id));
                pairs.push(v);
            }
            captures.push(CarriedCapture {
                seq: c.seq,
                age_s: c.age_s,
                changed: pairs,
            });
            before = now;
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

    fn life(captures: &[&[(u32, i64)]]) -> Vec<Decoded> {
        captures
            .iter()
            .enumerate()
            .map(|(i, s)| Decoded {
                seq: i as u64 + 1,
                age_s: i as f64,
                stacks: s.to_vec(),
            })
            .collect()
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
        let c = encode(&lives, &stacks, &HashMap::new(), 1, BUDGET);
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
        let all = fit(&lives, &stacks, &HashMap::new(), BUDGET).unwrap();
        assert_eq!((all.stride, all.carried()), (1, 200));
        let whole = serde_json::to_vec(&all).unwrap().len();
        let budget = whole / 3;
        let thinned = fit(&lives, &stacks, &HashMap::new(), budget).unwrap();
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
        assert!(fit(&lives, &stacks, &HashMap::new(), 100).is_none());
    }

    #[test]
    fn a_stride_keeps_each_lifes_first_and_last_and_replays_to_them() {
        let stacks = ["main;a"];
        let shape: Vec<Vec<(u32, i64)>> = (1..=10).map(|i| vec![(0, i * 100)]).collect();
        let refs: Vec<&[(u32, i64)]> = shape.iter().map(Vec::as_slice).collect();
        let lives = vec![(2, life(&refs))];
        let c = encode(&lives, &stacks, &HashMap::new(), 4, BUDGET);
        let seqs: Vec<u64> = c.lives[0].captures.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [1, 5, 9, 10]);
        assert_eq!(c.lives[0].stored, 10);
        let states = replay(&c, 0);
        assert_eq!(states[3], vec![("main;a".to_string(), 1000)]);
        assert_eq!(states[1], vec![("main;a".to_string(), 500)]);
    }
}
