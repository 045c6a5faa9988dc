//! A heap capture's figures per site (its `sites.idx` entry), kept by the encoder as it writes
//! the samples: each bucket is named once, when its stack is first written, and a site's sums
//! move only by the samples whose figures moved. So an entry costs what changed since the last
//! capture, where decoding the profile again cost a tenth of a core and 22 MiB
//! (docs/benchmarks.md). The names come from the collector's namer (the index's rules); the
//! sums follow `index::build::from_profile`: a sample counts when its in-use or allocated bytes
//! are not zero, and every sample type is summed, wrapping.

use std::collections::HashMap;

use crate::source::{HeapSiteNamer, MadeSites, SiteNaming};

/// A bucket with no site: no namer, or a sample with no location.
pub const NO_SITE: u32 = u32::MAX;

/// The six values of a heap sample, in the order of [`SAMPLE_TYPES`].
pub type Values = [i64; 6];

/// The proc heap profile's sample types, in the order the encoder writes them.
pub const SAMPLE_TYPES: [&str; 6] = [
    "alloc_objects",
    "alloc_space",
    "inuse_objects",
    "inuse_space",
    "recent_objects",
    "recent_space",
];
/// `inuse_space`, the profile's default sample type.
const DEFAULT_TYPE: usize = 3;

/// Each site's sums over the samples of the list in hand.
#[derive(Default)]
pub struct SiteSums {
    namer: Option<(Option<String>, HeapSiteNamer)>,
    ids: HashMap<String, u32>,
    names: Vec<String>,
    sums: Vec<Values>,
    /// Samples counted in each site: a site none counts in has no row, as in a decode.
    counts: Vec<u32>,
}

/// What `from_profile` counts: a sample with in-use or allocated bytes.
fn counts(v: &Values) -> bool {
    v[3] != 0 || v[1] != 0
}

impl SiteSums {
    /// Names sites for the program of `module` from now on; every bucket is named again.
    pub fn name_with(&mut self, naming: &SiteNaming, module: Option<&str>) {
        self.namer = Some((module.map(str::to_string), naming(module)));
        self.clear();
    }

    /// True when buckets are named (a namer was given).
    pub fn naming(&self) -> bool {
        self.namer.is_some()
    }

    /// Forgets every sum: the samples are all written again.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.names.clear();
        self.sums.clear();
        self.counts.clear();
    }

    /// The site of a sample whose frames' functions are `frames`, leaf first.
    pub fn site(&mut self, frames: &[&str]) -> u32 {
        let Some((_, namer)) = self.namer.as_mut() else {
            return NO_SITE;
        };
        if frames.is_empty() {
            return NO_SITE;
        }
        let name = namer(frames);
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        self.sums.push([0; 6]);
        self.counts.push(0);
        id
    }

    /// A sample of `site` no longer has the values `old`.
    pub fn remove(&mut self, site: u32, old: &Values) {
        let i = site as usize;
        if site == NO_SITE || i >= self.sums.len() || !counts(old) {
            return;
        }
        for (s, v) in self.sums[i].iter_mut().zip(old) {
            *s = s.wrapping_sub(*v);
        }
        self.counts[i] -= 1;
    }

    /// A sample of `site` now has the values `new`.
    pub fn add(&mut self, site: u32, new: &Values) {
        let i = site as usize;
        if site == NO_SITE || i >= self.sums.len() || !counts(new) {
            return;
        }
        for (s, v) in self.sums[i].iter_mut().zip(new) {
            *s = s.wrapping_add(*v);
        }
        self.counts[i] += 1;
    }

    /// The entry of the samples as they stand now, when sites are named.
    pub fn entry(&self) -> Option<MadeSites> {
        let (module, _) = self.namer.as_ref()?;
        let mut sites: Vec<(String, Vec<i64>)> = (0..self.names.len())
            .filter(|&i| self.counts[i] > 0)
            .map(|i| (self.names[i].clone(), self.sums[i].to_vec()))
            .collect();
        sites.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some(MadeSites {
            module: module.clone(),
            sample_types: SAMPLE_TYPES.iter().map(|t| t.to_string()).collect(),
            default_type: DEFAULT_TYPE,
            sites,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf_namer() -> SiteNaming {
        std::sync::Arc::new(|_| Box::new(|frames: &[&str]| frames[0].to_string()))
    }

    #[test]
    fn a_site_has_a_row_only_while_a_sample_counts_in_it() {
        let mut sums = SiteSums::default();
        assert_eq!(sums.site(&["main.a"]), NO_SITE, "no namer, no site");
        assert!(sums.entry().is_none());
        sums.name_with(&leaf_namer(), Some("example.com/m"));
        let a = sums.site(&["main.a", "main.main"]);
        let b = sums.site(&["main.b"]);
        assert_eq!(sums.site(&["main.a"]), a);
        assert_eq!(sums.site(&[]), NO_SITE);
        sums.add(a, &[1, 16, 1, 16, 0, 0]);
        sums.add(a, &[2, 32, 0, 0, 0, 0]);
        // Only recent allocations: not counted, as a decode leaves it out.
        sums.add(b, &[0, 0, 0, 0, 5, 80]);
        let entry = sums.entry().unwrap();
        assert_eq!(entry.module.as_deref(), Some("example.com/m"));
        assert_eq!(
            entry.sites,
            vec![("main.a".into(), vec![3, 48, 1, 16, 0, 0])]
        );
        sums.remove(a, &[1, 16, 1, 16, 0, 0]);
        sums.remove(a, &[2, 32, 0, 0, 0, 0]);
        sums.add(b, &[1, 8, 1, 8, 0, 0]);
        assert_eq!(
            sums.entry().unwrap().sites,
            vec![("main.b".into(), vec![1, 8, 1, 8, 0, 0])]
        );
    }
}
