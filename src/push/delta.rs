//! Allocation deltas. A Go heap profile counts `alloc_objects` and `alloc_space` since the
//! process started; Pyroscope adds up the profiles of a time range, so a capture goes with its
//! `alloc_*` figures as the change since the previous capture of its boot cycle (the first of a
//! cycle whole), and its in-use figures as captured — what Pyroscope's own Go clients send.
//!
//! Pure data: a decoded profile in, the profile to send and the cumulative figures the next
//! capture of the cycle subtracts out. No I/O.
//!
//! # What goes on the wire: deltas, every capture a point
//!
//! Pyroscope adds up the profiles of a range, so cumulative `alloc_*` figures sent as captured
//! multiply with every capture in the range; its v2 storage keeps each profile as sent (v1
//! made deltas itself, from consecutive profiles of a series, which the old one-at-a-time,
//! in-order design served). So the push makes the deltas, as Pyroscope's Go clients
//! (godeltaprof) do: `delta.rs` keys every sample by content (each location's address and its
//! lines by function name, file and line, and the sample's labels, hashed with xxh3-128: ids are
//! renumbered in every profile) and subtracts the previous capture of the boot cycle per key.
//! A key with figures that falls or vanishes means a new process: the capture goes whole. A key
//! with no figure yet is ignored (Go adds the `bytes` label to a sample only once it has
//! allocations to divide). The base is the heap capture of the cycle the server had (or will
//! have) before this one: the previous one in the manifest that was delivered or may have
//! arrived, or is still to be sent in this push, passing over those never sent (refused and not
//! retried, deleted by `--max-disk` before they went, skipped duplicates, unreadable). The spool
//! keeps each cycle's captures in order, deleted ones too. The capture prepared just before is
//! kept in memory (its cumulative figures), so a base deleted after it went is still the base;
//! otherwise it is read back from disk. So a push cut short and finished by another command
//! sends the same bytes, and the figures add up over a cycle to its last capture's. The one case
//! not exact: a base deleted by `--max-disk` after an earlier command sent it, when the capture
//! after it is pushed later; its figures are gone, so that capture goes with an empty allocation
//! delta (its change not counted, rather than counted twice) and the summary line says how many
//! did.
//!
//! With the profile re-encoded anyway, duplicates go too (each a point at its own time, with an
//! empty allocation delta), and `--restamp` is a field set on the decoded profile (the earlier
//! wire walk that rewrote `time_nanos` alone had nothing left to preserve). A first capture of a
//! cycle with its own time goes byte for byte as stored. Decoding with prost into
//! `decode::pb::Profile` and encoding back re-orders nothing Pyroscope reads; the gzip is at the
//! fast level, since the pusher's one core matters more than the wire.

use std::collections::{HashMap, HashSet};

use xxhash_rust::xxh3::Xxh3;

use crate::decode::pb;

/// The sample types a Go heap profile counts since the process started.
const CUMULATIVE: [&str; 2] = ["alloc_objects", "alloc_space"];

/// One sample's cumulative figures: room for both of [`CUMULATIVE`], no allocation per sample.
type Figures = [i64; CUMULATIVE.len()];

/// A capture's cumulative figures per sample (its stack and labels): what the next capture
/// of the same boot cycle subtracts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cumulative {
    /// The cumulative sample types, by name, in the order of `values`.
    types: Vec<String>,
    /// Per sample key, the figures in the order of `types` (the rest zero).
    values: HashMap<u128, Figures>,
}

impl Cumulative {
    /// The figures of a profile, or `None` when it has no cumulative sample type (a
    /// goroutine profile).
    pub fn of(profile: &pb::Profile) -> Option<Cumulative> {
        let indices = cumulative_indices(profile);
        if indices.is_empty() {
            return None;
        }
        Some(Cumulative::with_keys(
            profile,
            indices,
            &sample_keys(profile),
        ))
    }

    fn with_keys(
        profile: &pb::Profile,
        indices: Vec<(usize, String)>,
        keys: &[u128],
    ) -> Cumulative {
        let mut values: HashMap<u128, Figures> = HashMap::with_capacity(profile.sample.len());
        for (sample, &key) in profile.sample.iter().zip(keys) {
            let sums = values.entry(key).or_default();
            for (sum, &(i, _)) in sums.iter_mut().zip(&indices) {
                *sum = sum.saturating_add(value(sample, i));
            }
        }
        Cumulative {
            types: indices.into_iter().map(|(_, name)| name).collect(),
            values,
        }
    }

    /// Samples counted.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// How a capture's allocation figures went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// No cumulative sample type: sent as captured.
    NotCumulative,
    /// The first capture of its boot cycle: whole.
    First,
    /// A figure fell below the previous capture's, or a sample it had is gone: a new process
    /// the boot cycle did not tell apart. Whole, as a first capture.
    Reset,
    /// The change since the previous capture.
    Delta,
    /// The capture before it was deleted after it was sent, with its figures no longer held:
    /// an empty allocation delta (the change is not counted rather than counted twice).
    BaseLost,
}

/// Turns `profile`'s cumulative figures into the change since `previous` (whole when there is
/// none or the counters dropped), keeping in-use figures as they are and dropping samples left
/// with no figure at all. Returns how, and the figures the next capture subtracts.
pub fn apply(
    profile: &mut pb::Profile,
    previous: Option<&Cumulative>,
) -> (Basis, Option<Cumulative>) {
    let named = cumulative_indices(profile);
    if named.is_empty() {
        return (Basis::NotCumulative, None);
    }
    let indices: Vec<usize> = named.iter().map(|&(i, _)| i).collect();
    let keys = sample_keys(profile);
    let now = Cumulative::with_keys(profile, named, &keys);
    let Some(previous) = previous else {
        return (Basis::First, Some(now));
    };
    if previous.types != now.types || !covers(&now, previous) {
        return (Basis::Reset, Some(now));
    }
    // A stack that appears in several samples carries its whole change on the first of them.
    let mut done: HashSet<u128> = HashSet::new();
    for (sample, key) in profile.sample.iter_mut().zip(keys) {
        let first = done.insert(key);
        let totals = &now.values[&key];
        let before = previous.values.get(&key);
        for (n, &i) in indices.iter().enumerate() {
            let change = if first {
                totals[n] - before.map_or(0, |b| b[n])
            } else {
                0
            };
            if let Some(v) = sample.value.get_mut(i) {
                *v = change;
            }
        }
    }
    profile.sample.retain(|s| s.value.iter().any(|&v| v != 0));
    (Basis::Delta, Some(now))
}

/// Whether every sample of `before` with a figure is in `now` with figures at least as large:
/// cumulative counters of one process never fall and never lose a stack. (A sample with no
/// figure yet may change its key: Go labels a sample with its object size only once it has
/// allocations to divide.)
fn covers(now: &Cumulative, before: &Cumulative) -> bool {
    before.values.iter().all(|(key, old)| {
        old.iter().all(|&o| o == 0)
            || now
                .values
                .get(key)
                .is_some_and(|new| new.iter().zip(old).all(|(n, o)| n >= o))
    })
}

/// Indices and names of the cumulative sample types (each name once, the first of a repeat).
fn cumulative_indices(profile: &pb::Profile) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = Vec::with_capacity(CUMULATIVE.len());
    for (i, t) in profile.sample_type.iter().enumerate() {
        let name = string(profile, t.r#type);
        if CUMULATIVE.contains(&name) && !found.iter().any(|(_, n)| n == name) {
            found.push((i, name.to_string()));
        }
    }
    found
}

fn value(sample: &pb::Sample, i: usize) -> i64 {
    sample.value.get(i).copied().unwrap_or(0)
}

fn string(profile: &pb::Profile, index: i64) -> &str {
    usize::try_from(index)
        .ok()
        .and_then(|i| profile.string_table.get(i))
        .map_or("", String::as_str)
}

/// Every sample's key, in order.
fn sample_keys(profile: &pb::Profile) -> Vec<u128> {
    let keys = SampleKeys::new(profile);
    profile.sample.iter().map(|s| keys.key(s)).collect()
}

/// A sample's identity across two profiles of one process: its stack (each location's
/// address and its lines by function name, file and line) and its labels, by content, since
/// ids are numbered afresh in every profile. Each location is hashed once; a sample's key is
/// the hash of its locations' hashes and its labels.
struct SampleKeys<'a> {
    profile: &'a pb::Profile,
    locations: LocationHashes,
}

/// Location id → content hash: a table when the ids are dense (Go numbers them from 1), a map
/// otherwise.
enum LocationHashes {
    Dense(Vec<Option<u64>>),
    Sparse(HashMap<u64, u64>),
}

impl LocationHashes {
    fn get(&self, id: u64) -> Option<u64> {
        match self {
            LocationHashes::Dense(table) => usize::try_from(id)
                .ok()
                .and_then(|i| table.get(i).copied().flatten()),
            LocationHashes::Sparse(map) => map.get(&id).copied(),
        }
    }
}

impl<'a> SampleKeys<'a> {
    fn new(profile: &'a pb::Profile) -> SampleKeys<'a> {
        let functions: HashMap<u64, &pb::Function> =
            profile.function.iter().map(|f| (f.id, f)).collect();
        let hash = |location: &pb::Location| {
            let mut h = Xxh3::new();
            h.update(&location.address.to_le_bytes());
            for line in &location.line {
                let (name, file) = functions.get(&line.function_id).map_or(("", ""), |f| {
                    (string(profile, f.name), string(profile, f.filename))
                });
                text(&mut h, name);
                text(&mut h, file);
                h.update(&line.line.to_le_bytes());
            }
            h.digest()
        };
        let most = profile.location.iter().map(|l| l.id).max().unwrap_or(0);
        let dense = usize::try_from(most)
            .ok()
            .filter(|&m| m <= profile.location.len().saturating_mul(4) + 64);
        let locations = match dense {
            Some(most) => {
                let mut table = vec![None; most + 1];
                for l in &profile.location {
                    table[l.id as usize] = Some(hash(l));
                }
                LocationHashes::Dense(table)
            }
            None => {
                LocationHashes::Sparse(profile.location.iter().map(|l| (l.id, hash(l))).collect())
            }
        };
        SampleKeys { profile, locations }
    }

    fn key(&self, sample: &pb::Sample) -> u128 {
        let mut h = Xxh3::new();
        for &id in &sample.location_id {
            match self.locations.get(id) {
                Some(location) => h.update(&location.to_le_bytes()),
                // A dangling id (the decoder's checks did not run here): keep it distinct.
                None => {
                    h.update(b"?");
                    h.update(&id.to_le_bytes());
                }
            }
        }
        for label in &sample.label {
            h.update(b"#");
            text(&mut h, string(self.profile, label.key));
            text(&mut h, string(self.profile, label.str));
            h.update(&label.num.to_le_bytes());
            text(&mut h, string(self.profile, label.num_unit));
        }
        h.digest128()
    }
}

fn text(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{self, DecodeLimits};

    fn fixture(name: &str) -> pb::Profile {
        let raw = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/profiles")
                .join(name),
        )
        .unwrap();
        let bytes = decode::decompress(&raw, &DecodeLimits::default()).unwrap();
        decode::decode_message(&bytes).unwrap()
    }

    fn totals(p: &pb::Profile) -> Vec<(String, i64)> {
        p.sample_type
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let sum = p.sample.iter().map(|s| value(s, i)).sum();
                (string(p, t.r#type).to_string(), sum)
            })
            .collect()
    }

    /// A later capture of the same process: every figure of `p` grown by `by` per sample.
    fn grown(p: &pb::Profile, by: i64) -> pb::Profile {
        let mut later = p.clone();
        for s in &mut later.sample {
            for v in &mut s.value {
                *v += by;
            }
        }
        later
    }

    #[test]
    fn the_first_is_whole_and_a_later_one_carries_the_change_with_in_use_as_captured() {
        let first = fixture("steady-heap.pb.gz");
        let mut sent = first.clone();
        let (basis, base) = apply(&mut sent, None);
        assert_eq!(basis, Basis::First);
        assert_eq!(sent, first, "a first capture goes as captured");

        let later = grown(&first, 7);
        let mut sent = later.clone();
        let (basis, _) = apply(&mut sent, base.as_ref());
        assert_eq!(basis, Basis::Delta);
        let n = later.sample.len() as i64;
        for ((name, sum), (_, captured)) in totals(&sent).into_iter().zip(totals(&later)) {
            if name.starts_with("alloc_") {
                assert_eq!(sum, 7 * n, "{name}: the change only");
            } else {
                assert_eq!(sum, captured, "{name}: as captured");
            }
        }
    }

    #[test]
    fn the_same_data_again_has_an_empty_allocation_delta_and_its_in_use_profile() {
        let p = fixture("steady-heap.pb.gz");
        let base = Cumulative::of(&p).unwrap();
        let mut again = p.clone();
        let (basis, _) = apply(&mut again, Some(&base));
        assert_eq!(basis, Basis::Delta);
        for (name, sum) in totals(&again) {
            if name.starts_with("alloc_") {
                assert_eq!(sum, 0, "{name}");
            }
        }
        let inuse = |p: &pb::Profile| totals(p).into_iter().find(|(n, _)| n == "inuse_space");
        assert_eq!(inuse(&again), inuse(&p));
        assert!(again.sample.len() <= p.sample.len());
        assert!(again.sample.iter().all(|s| s.value.iter().any(|&v| v != 0)));
    }

    #[test]
    fn a_sample_that_gains_its_size_label_is_the_same_sample_not_a_new_process() {
        // oomgrow's captures 4 and 6: stacks with nothing allocated yet carry no `bytes` label
        // in 4, and one once they have allocations, in 6.
        let run = |name: &str| {
            let raw = std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("testdata/runs/oomgrow/profiles")
                    .join(name),
            )
            .unwrap();
            let bytes = decode::decompress(&raw, &DecodeLimits::default()).unwrap();
            decode::decode_message(&bytes).unwrap()
        };
        let (before, after) = (run("000004-heap.pb.gz"), run("000006-heap.pb.gz"));
        let mut sent = after.clone();
        let (basis, _) = apply(&mut sent, Cumulative::of(&before).as_ref());
        assert_eq!(basis, Basis::Delta);
        for (((name, sum), (_, then)), (_, now)) in totals(&sent)
            .into_iter()
            .zip(totals(&before))
            .zip(totals(&after))
        {
            if name.starts_with("alloc_") {
                assert_eq!(sum, now - then, "{name}");
            }
        }
    }

    #[test]
    fn a_figure_that_falls_is_a_new_process_sent_whole() {
        let p = fixture("steady-heap.pb.gz");
        let later = grown(&p, 5);
        let base = Cumulative::of(&later).unwrap();
        let mut restarted = p.clone();
        let (basis, next) = apply(&mut restarted, Some(&base));
        assert_eq!(basis, Basis::Reset);
        assert_eq!(restarted, p);
        assert_eq!(next, Cumulative::of(&p));
    }

    #[test]
    fn ids_renumbered_between_captures_do_not_change_what_a_sample_is() {
        let p = fixture("steady-heap.pb.gz");
        let mut renumbered = p.clone();
        for l in &mut renumbered.location {
            l.id += 1000;
        }
        for s in &mut renumbered.sample {
            for id in &mut s.location_id {
                *id += 1000;
            }
        }
        renumbered.sample.reverse();
        assert_eq!(Cumulative::of(&renumbered), Cumulative::of(&p));
    }

    #[test]
    fn a_goroutine_profile_has_nothing_cumulative() {
        let mut g = fixture("steady-goroutine.pb.gz");
        let before = g.clone();
        assert_eq!(apply(&mut g, None), (Basis::NotCumulative, None));
        assert_eq!(g, before);
    }
}
