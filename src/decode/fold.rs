//! `top`'s shortcut: each sample's stack folded into flat and cum per site while it streams
//! in, so the stacks (most of a heap profile's model) are never kept. It relies on the order
//! Go writes, each location before the first sample naming it; any other order, or two frame
//! keys that turn out to share a site's name, gives up and leaves the work to the full model.

use std::collections::{HashMap, HashSet};

use super::DecodeError;
use super::samples::next_varint;
use crate::model::Profile;
use crate::model::aggregate::{self, Granularity, SiteTable, SiteTotal};

/// What makes two frames the same site before the names are known (the string table comes
/// last): the function's id and, by granularity, the line; the address of an unsymbolized
/// frame. The same as `aggregate`'s key, with the function's id in place of its position.
type FrameKey = (Option<u64>, i64, u64);

/// Sample types folded at once, one lane each: Go's heap and allocs profiles have 4, its
/// others fewer. A profile with more is not folded.
const LANES: usize = 4;

/// The `key_by_id` of a location with several frames (inlined calls).
const INLINED: u32 = u32::MAX - 1;
/// The `key_by_id` of an id no location has.
const UNKNOWN: u32 = u32::MAX;
type Lanes = [i64; LANES];

/// Lane by lane; sums wrap rather than panic: the end checks refuse a profile whose values
/// do not fit, and when they fit the wrapped sums are the true ones.
#[inline(always)]
fn add(sum: &mut Lanes, values: &Lanes) {
    for (s, v) in sum.iter_mut().zip(values) {
        *s = s.wrapping_add(*v);
    }
}

/// Flat and cum per frame key and sample type, as the samples stream in.
pub(super) struct Fold {
    granularity: Granularity,
    keys: HashMap<FrameKey, u32>,
    /// Per frame of the builder, its key.
    frame_key: Vec<u32>,
    /// Per location id, the key of the location's one frame, [`INLINED`] for a location of
    /// several frames, [`UNKNOWN`] for an id no location has (yet): most locations have one
    /// frame, and a stack entry then costs one lookup from its id to its key.
    key_by_id: Vec<u32>,
    /// The distinct keys of the sample being folded (one slot more than there are keys).
    distinct: Vec<u32>,
    /// How many of them so far. The first is the leaf's: a sample's first key is always new
    /// to it.
    distinct_len: usize,
    /// A frame of each key, to name the key once the profile is complete.
    key_frame: Vec<u32>,
    /// Values per sample; known from the first sample.
    types: Option<usize>,
    /// Per key, flat and cum of every sample type, one lane each.
    flat: Vec<Lanes>,
    cum: Vec<Lanes>,
    /// Per key, the number of the last sample that counted it into cum.
    seen: Vec<u32>,
    totals: Lanes,
    /// Per sample type, the sum of |value|: when it fits in i64, so does every sum here.
    magnitude: [u64; LANES],
    samples: u32,
    /// Per location id of several frames, its frames (first, count).
    inlined: HashMap<u64, (u32, u32)>,
    /// Stack entries folded: the full model refuses more than 2^32.
    entries: u64,
    /// Set when a sample names a location that has not arrived: the stacks already folded
    /// cannot be unfolded, so the full model is built instead.
    pub gave_up: bool,
}

impl Fold {
    pub(super) fn new(granularity: Granularity) -> Fold {
        Fold {
            granularity,
            keys: HashMap::new(),
            frame_key: Vec::new(),
            key_by_id: Vec::new(),
            distinct: vec![0],
            distinct_len: 0,
            key_frame: Vec::new(),
            types: None,
            flat: Vec::new(),
            cum: Vec::new(),
            seen: Vec::new(),
            totals: [0; LANES],
            magnitude: [0; LANES],
            samples: 0,
            inlined: HashMap::new(),
            entries: 0,
            gave_up: false,
        }
    }

    /// Keys the frames of a location that just arrived: per frame, its function's id (None
    /// when the location has no lines) and line.
    /// `position`: the location's place among the builder's locations.
    pub(super) fn location(
        &mut self,
        id: u64,
        position: u32,
        address: u64,
        frames: impl Iterator<Item = (Option<u64>, i64)>,
    ) {
        let first = self.frame_key.len();
        for (function, line) in frames {
            let key = match (self.granularity, function) {
                (_, None) => (None, 0, address),
                (Granularity::Line, _) => (function, line, 0),
                (_, Some(_)) => (function, 0, 0),
            };
            let next = self.key_frame.len() as u32;
            let k = *self.keys.entry(key).or_insert(next);
            if k == next {
                self.key_frame.push(self.frame_key.len() as u32);
                self.seen.push(u32::MAX);
                self.flat.push([0; LANES]);
                self.cum.push([0; LANES]);
                self.distinct.push(0);
            }
            self.frame_key.push(k);
        }
        let key = match self.frame_key[first..] {
            [k] => k,
            _ => INLINED,
        };
        // Dense while the ids are (Go numbers them 1, 2, 3, ...); any other numbering, or an
        // id used twice (refused at the end), is left to the full model.
        let dense_limit = (u64::from(position) + 1).saturating_mul(4) + 64;
        match usize::try_from(id) {
            Ok(at) if id <= dense_limit && self.key_by_id.get(at).is_none_or(|&k| k == UNKNOWN) => {
                if self.key_by_id.len() <= at {
                    self.key_by_id.resize(at + 1, UNKNOWN);
                }
                self.key_by_id[at] = key;
                if key == INLINED {
                    let len = self.frame_key.len() - first;
                    self.inlined.insert(id, (first as u32, len as u32));
                }
            }
            _ => self.gave_up = true,
        }
    }

    pub(super) fn begin_sample(&mut self) {
        self.distinct_len = 0;
    }

    /// A packed run of location ids of the sample, each folded as it is read.
    pub(super) fn stack(&mut self, mut ids: &[u8]) -> Result<(), DecodeError> {
        // Bytes, not ids: a bound on the entries, enough to know the model's limit is far.
        self.entries += ids.len() as u64;
        while let Some(id) = self.one_frame_ids(&mut ids)? {
            self.rare_id(id);
            if self.gave_up {
                break;
            }
        }
        Ok(())
    }

    /// Folds ids from the front of `rest` while they name locations of one frame; the first
    /// that does not, if any.
    #[inline]
    fn one_frame_ids(&mut self, rest: &mut &[u8]) -> Result<Option<u64>, DecodeError> {
        let stamp = self.samples;
        // Locals, so the loop keeps them in registers.
        let (seen, distinct, key_by_id) = (
            &mut self.seen[..],
            &mut self.distinct[..],
            &self.key_by_id[..],
        );
        let mut n = self.distinct_len;
        let mut rare = None;
        while !rest.is_empty() {
            let id = next_varint(rest)?;
            let k = key_by_id.get(id as usize).copied().unwrap_or(UNKNOWN);
            if k >= INLINED {
                rare = Some(id);
                break;
            }
            // Branch-free: whether a key repeats within a stack is not predictable.
            let fresh = seen[k as usize] != stamp;
            seen[k as usize] = stamp;
            distinct[n] = k;
            n += usize::from(fresh);
        }
        self.distinct_len = n;
        Ok(rare)
    }

    /// One location id of the sample, given on its own (unpacked) or of several frames, or
    /// one no location has yet (then the fold gives up).
    pub(super) fn id(&mut self, id: u64) {
        self.entries += 1;
        match self.key_by_id.get(id as usize).copied().unwrap_or(UNKNOWN) {
            k if k < INLINED => self.mark(k),
            _ => self.rare_id(id),
        }
    }

    fn rare_id(&mut self, id: u64) {
        let Some(&(start, len)) = self.inlined.get(&id) else {
            self.gave_up = true;
            return;
        };
        for at in start..start + len {
            self.mark(self.frame_key[at as usize]);
        }
    }

    #[inline]
    fn mark(&mut self, k: u32) {
        let fresh = self.seen[k as usize] != self.samples;
        self.seen[k as usize] = self.samples;
        self.distinct[self.distinct_len] = k;
        self.distinct_len += usize::from(fresh);
    }

    /// Adds the sample's values to its leaf's flat and to the cum of each of its keys.
    pub(super) fn end_sample(&mut self, values: &[i64]) {
        if self.gave_up {
            return;
        }
        let types = *self.types.get_or_insert(values.len());
        // An accepted sample has the first sample's count of values (a later check refuses
        // the profile otherwise, and then nothing folded is used).
        if values.len() != types
            || types > LANES
            || self.samples == u32::MAX
            || self.entries > u64::from(u32::MAX)
        {
            self.gave_up = true;
            return;
        }
        let mut v: Lanes = [0; LANES];
        v[..types].copy_from_slice(values);
        add(&mut self.totals, &v);
        for (m, x) in self.magnitude.iter_mut().zip(v) {
            *m = m.saturating_add(x.unsigned_abs());
        }
        let distinct = &self.distinct[..self.distinct_len];
        for &k in distinct {
            add(&mut self.cum[k as usize], &v);
        }
        if let Some(&leaf) = distinct.first() {
            add(&mut self.flat[leaf as usize], &v);
        }
        self.samples += 1;
    }

    /// The site table of every sample type, named from the complete profile; None when two
    /// frame keys have the same name, since a stack through both counts once in cum.
    pub(super) fn tables(self, profile: &Profile) -> Option<Vec<SiteTable>> {
        // Values that do not fit are refused by the full model's own check, with its message.
        if self.gave_up || self.magnitude.iter().any(|&m| m > i64::MAX as u64) {
            return None;
        }
        let mut names = Vec::with_capacity(self.key_frame.len());
        let mut distinct = HashSet::with_capacity(self.key_frame.len());
        for &frame in &self.key_frame {
            let frame = profile.frames.get(frame as usize)?;
            let name = aggregate::site_name(profile, frame, self.granularity);
            if !distinct.insert(name.clone()) {
                return None;
            }
            names.push(name);
        }
        let types = profile.sample_types.len();
        if self.samples == 0 {
            let empty = SiteTable {
                total: 0,
                sites: Vec::new(),
            };
            return Some(vec![empty; types]);
        }
        if self.types != Some(types) {
            return None;
        }
        let tables = (0..types)
            .map(|t| {
                let mut table = SiteTable {
                    total: self.totals[t],
                    sites: names
                        .iter()
                        .enumerate()
                        .filter(|&(k, _)| self.flat[k][t] != 0 || self.cum[k][t] != 0)
                        .map(|(k, name)| SiteTotal {
                            name: name.clone(),
                            flat: self.flat[k][t],
                            cum: self.cum[k][t],
                        })
                        .collect(),
                };
                table.sort_by_flat();
                table
            })
            .collect();
        Some(tables)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::super::{DecodeLimits, decode, decode_message, decode_sites, gunzip, pb};
    use crate::model::aggregate::{self, Granularity};

    const ALL: [Granularity; 3] = [Granularity::Function, Granularity::File, Granularity::Line];

    fn profiles() -> Vec<(String, Vec<u8>)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/profiles");
        let mut all: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        all.sort();
        assert!(all.len() > 3);
        all
    }

    /// The tables of `decode_sites` against `aggregate::sites` of the whole model, for every
    /// sample type; whether they were folded.
    fn same_tables(name: &str, bytes: &[u8], granularity: Granularity) -> bool {
        let limits = DecodeLimits::default();
        let whole = decode(bytes, &limits).unwrap();
        let sites = decode_sites(bytes, &limits, granularity).unwrap();
        assert_eq!(sites.profile.sample_types, whole.sample_types, "{name}");
        assert_eq!(sites.profile.strings, whole.strings, "{name}");
        for t in 0..whole.sample_types.len() {
            let want = aggregate::sites(&whole, t, granularity);
            assert_eq!(sites.sites(t), want, "{name} {granularity:?} type {t}");
        }
        sites.folded.is_some()
    }

    #[test]
    fn folded_sites_are_the_sites_of_the_whole_model() {
        let mut folded = 0;
        let mut inlined = 0;
        for (name, gz) in profiles() {
            let whole = decode(&gz, &DecodeLimits::default()).unwrap();
            inlined += usize::from(whole.locations.iter().any(|l| l.frames_len > 1));
            for granularity in ALL {
                folded += usize::from(same_tables(&name, &gz, granularity));
            }
            let raw = gunzip(&gz, 1 << 30).unwrap();
            folded += usize::from(same_tables(&name, &raw, Granularity::Function));
        }
        // Go's own profiles fold at function granularity; whether file and line do depends on
        // their names.
        assert!(folded >= profiles().len() * 2, "{folded}");
        // Locations of several frames (inlined calls) take the fold's slower path.
        assert!(inlined > 0);
    }

    #[test]
    fn samples_before_their_locations_are_not_folded_but_give_the_same_sites() {
        for (name, gz) in profiles() {
            let raw = gunzip(&gz, 1 << 30).unwrap();
            // prost writes every sample before the locations.
            let prost_order = decode_message(&raw).unwrap().encode_to_vec();
            if decode_message(&prost_order).unwrap().sample.is_empty() {
                continue;
            }
            assert!(
                !same_tables(&name, &prost_order, Granularity::Function),
                "{name}"
            );
        }
    }

    /// The message in the order Go writes: sample types, then locations and functions, then
    /// samples, then the string table.
    fn in_go_order(profile: &pb::Profile) -> Vec<u8> {
        let mut bytes = Vec::new();
        for part in [
            pb::Profile {
                sample_type: profile.sample_type.clone(),
                ..Default::default()
            },
            pb::Profile {
                location: profile.location.clone(),
                function: profile.function.clone(),
                ..Default::default()
            },
            pb::Profile {
                sample: profile.sample.clone(),
                string_table: profile.string_table.clone(),
                ..Default::default()
            },
        ] {
            bytes.extend(part.encode_to_vec());
        }
        bytes
    }

    /// One location of function "main.f", and one sample on it per entry of `values`.
    fn one_site(values: &[i64]) -> pb::Profile {
        pb::Profile {
            sample_type: vec![pb::ValueType { r#type: 1, unit: 2 }],
            location: vec![pb::Location {
                id: 1,
                line: vec![pb::Line {
                    function_id: 1,
                    line: 1,
                    column: 0,
                }],
                ..Default::default()
            }],
            function: vec![pb::Function {
                id: 1,
                name: 3,
                ..Default::default()
            }],
            sample: values
                .iter()
                .map(|&v| pb::Sample {
                    location_id: vec![1],
                    value: vec![v],
                    label: vec![],
                })
                .collect(),
            string_table: ["", "space", "bytes", "main.f"].map(String::from).to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn what_the_fold_does_not_keep_is_still_checked() {
        let limits = DecodeLimits::default();
        let ok = in_go_order(&one_site(&[3, 4]));
        assert!(same_tables("one site", &ok, Granularity::Function));
        // Values whose sum does not fit, and a label naming a string past the table: the
        // fold keeps neither, and the error is decode's.
        let overflow = in_go_order(&one_site(&[i64::MAX, 1]));
        let mut bad_label = one_site(&[3]);
        bad_label.sample[0].label.push(pb::Label {
            key: 99,
            ..Default::default()
        });
        for bytes in [overflow, in_go_order(&bad_label)] {
            let want = decode(&bytes, &limits).unwrap_err();
            assert!(
                matches!(want, super::super::DecodeError::Invalid(_)),
                "{want}"
            );
            let got = decode_sites(&bytes, &limits, Granularity::Function).err();
            assert_eq!(got, Some(want));
        }
    }

    #[test]
    fn two_functions_of_one_name_are_not_folded_and_count_once_in_cum() {
        // Functions 1 and 2 are both "main.f"; a stack through both counts once in its cum.
        let profile = pb::Profile {
            sample_type: vec![pb::ValueType { r#type: 1, unit: 2 }],
            location: (1..=2)
                .map(|id| pb::Location {
                    id,
                    line: vec![pb::Line {
                        function_id: id,
                        line: 1,
                        column: 0,
                    }],
                    ..Default::default()
                })
                .collect(),
            function: (1..=2)
                .map(|id| pb::Function {
                    id,
                    name: 3,
                    ..Default::default()
                })
                .collect(),
            sample: vec![pb::Sample {
                location_id: vec![1, 2],
                value: vec![5],
                label: vec![],
            }],
            string_table: ["", "space", "bytes", "main.f"].map(String::from).to_vec(),
            ..Default::default()
        };
        let go_order = in_go_order(&profile);
        assert!(!same_tables("same name", &go_order, Granularity::Function));
        let sites = decode_sites(&go_order, &DecodeLimits::default(), Granularity::Function)
            .unwrap()
            .sites(0);
        assert_eq!((sites.sites[0].flat, sites.sites[0].cum), (5, 5));
    }

    #[test]
    fn a_broken_profile_is_refused_with_the_error_of_decode() {
        let limits = DecodeLimits::default();
        for (name, gz) in profiles() {
            let raw = gunzip(&gz, 1 << 30).unwrap();
            let mut broken: Vec<Vec<u8>> = vec![
                gz[..gz.len() / 2].to_vec(),
                raw[..raw.len() * 2 / 3].to_vec(),
            ];
            for at in [raw.len() / 3, raw.len() / 2, raw.len() - 5] {
                let mut flipped = raw.clone();
                flipped[at] ^= 0x40;
                broken.push(flipped);
            }
            for bytes in broken {
                let want = decode(&bytes, &limits).err();
                let got = decode_sites(&bytes, &limits, Granularity::Function).err();
                assert_eq!(got, want, "{name}");
            }
            let small = DecodeLimits {
                max_decompressed: raw.len() as u64 - 1,
            };
            assert_eq!(
                decode_sites(&gz, &small, Granularity::Function).err(),
                decode(&gz, &small).err()
            );
        }
    }
}
