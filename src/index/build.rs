//! One capture reduced to its index entry: every sample type's figures per site (the name the
//! growth analysis gives a sample). Follows the rules of `analyse::reduce` exactly; the index
//! file's header carries a hash of both sources, so a change to either rebuilds every index.

use super::QuickMap;
use crate::analyse::reduce::{self, PROFILING_SITE, SiteFigures};
use crate::decode::stackdump::StackDump;
use crate::model::{LocId, Profile};
use crate::source::{MadeSites, SiteNaming};
use crate::store::RecordKind;

/// What the index keeps of one capture, names still as text (interned when written).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CaptureFigures {
    pub sample_types: Vec<String>,
    /// The sample type pprof shows by default (an index into `sample_types`).
    pub default_type: usize,
    /// Per site, sorted by name: one value per sample type.
    pub sites: Vec<(String, Vec<i64>)>,
}

impl CaptureFigures {
    /// The figures the growth analysis works from, equal to `reduce::heap_sites` /
    /// `goroutine_sites` on the decoded profile.
    pub fn site_figures(&self, kind: RecordKind) -> Vec<SiteFigures> {
        site_figures(
            kind,
            &self.sample_types,
            self.default_type,
            self.sites.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        )
    }
}

/// [`CaptureFigures::site_figures`] over rows already in name order, whatever holds them.
pub fn site_figures<'a, S: AsRef<str>>(
    kind: RecordKind,
    sample_types: &[S],
    default_type: usize,
    rows: impl Iterator<Item = (&'a str, &'a [i64])>,
) -> Vec<SiteFigures> {
    let find = |wanted: &str| sample_types.iter().position(|t| t.as_ref() == wanted);
    let at = |values: &[i64], i: Option<usize>| i.and_then(|i| values.get(i).copied());
    if kind == RecordKind::Goroutine {
        return rows
            .map(|(name, values)| SiteFigures {
                name: name.to_string(),
                value: at(values, Some(default_type)).unwrap_or(0),
                alloc: 0,
            })
            .collect();
    }
    let Some(inuse) =
        find("inuse_space").or_else(|| (!sample_types.is_empty()).then_some(default_type))
    else {
        return Vec::new();
    };
    let alloc = find("alloc_space");
    rows.filter_map(|(name, values)| {
        let (value, alloc) = (
            at(values, Some(inuse)).unwrap_or(0),
            at(values, alloc).unwrap_or(0),
        );
        (value != 0 || alloc != 0).then(|| SiteFigures {
            name: name.to_string(),
            value,
            alloc,
        })
    })
    .collect()
}

fn is_profiler(name: &str) -> bool {
    name.starts_with("runtime/pprof.") || name.starts_with("net/http/pprof.")
}

/// The site of a heap sample from its frames' function names, leaf first, by the rules of
/// [`from_profile`]: a stack through the profile writer is [`PROFILING_SITE`], any other is
/// named as `reduce::SiteNamer` names it.
pub fn heap_site(frames: &[&str], own: &reduce::OwnCode) -> String {
    if frames.iter().any(|f| is_profiler(f)) {
        return PROFILING_SITE.to_string();
    }
    reduce::name_frames(frames, false, own).unwrap_or_else(|| "(unsymbolized)".to_string())
}

/// [`heap_site`] for the program of a main module, for a source that gives each capture's
/// figures per site as it makes it (proc): its entries name sites as a decode of its profiles
/// would, for the same boot cycle's own code.
pub fn site_naming() -> SiteNaming {
    std::sync::Arc::new(|module: Option<&str>| {
        let own = reduce::OwnCode::module(module.unwrap_or(""));
        Box::new(move |frames: &[&str]| heap_site(frames, &own))
    })
}

impl From<MadeSites> for CaptureFigures {
    fn from(made: MadeSites) -> CaptureFigures {
        CaptureFigures {
            sample_types: made.sample_types,
            default_type: made.default_type,
            sites: made.sites,
        }
    }
}

/// The figures of a decoded pprof profile of `kind`.
pub fn from_profile(profile: &Profile, kind: RecordKind, own: &reduce::OwnCode) -> CaptureFigures {
    let types = profile.sample_types.len();
    let sample_types: Vec<String> = (0..types)
        .map(|i| profile.sample_type_name(i).to_string())
        .collect();
    let default_type = profile.default_sample_index();
    let heap = kind != RecordKind::Goroutine;
    // Worked out once per location, so a sample costs a few lookups. A heap site is named by
    // its leaf function and needs no frame names; a goroutine site by its first frame outside
    // the runtime, the only case that names frames.
    let location_profiler: Vec<bool> = if heap {
        (0..profile.locations.len())
            .map(|l| {
                profile.location_frames(LocId(l as u32)).iter().any(|f| {
                    f.function
                        .is_some_and(|id| is_profiler(profile.str(profile.function(id).name)))
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut namer = reduce::SiteNamer::new(profile, own);
    // Sites: the same names as `reduce::heap_sites` and `goroutine_sites` (the first frame in
    // the target's own code with the leaf beside it, the profiler's own allocations set apart).
    // A few dozen sites looked up once a sample: SipHash was 4% of a first analysis.
    let mut site_rows: QuickMap<String, Vec<i64>> = QuickMap::default();
    let inuse = profile
        .find_sample_type("inuse_space")
        .or_else(|| (types > 0).then_some(default_type));
    let alloc = profile.find_sample_type("alloc_space");
    for (i, sample) in profile.samples.iter().enumerate() {
        let values = &profile.values[i * types..(i + 1) * types];
        let locations = profile.sample_stack(sample);
        let site = if heap {
            let Some(inuse) = inuse else { continue };
            if values[inuse] == 0 && alloc.is_none_or(|a| values[a] == 0) {
                None
            } else {
                (!locations.is_empty()).then(|| {
                    if locations.iter().any(|l| location_profiler[l.0 as usize]) {
                        PROFILING_SITE
                    } else {
                        namer.name(locations, false).unwrap_or("(unsymbolized)")
                    }
                })
            }
        } else {
            Some(namer.name(locations, true).unwrap_or("runtime"))
        };
        if let Some(site) = site {
            match site_rows.get_mut(site) {
                Some(row) => add(row, values),
                None => {
                    site_rows.insert(site.to_string(), values.to_vec());
                }
            }
        }
    }
    let mut sites: Vec<(String, Vec<i64>)> = site_rows.into_iter().collect();
    sites.sort_by(|a, b| a.0.cmp(&b.0));
    CaptureFigures {
        sample_types,
        default_type,
        sites,
    }
}

/// The figures of a text goroutine dump (the agent's op 0x01): one sample type, `goroutine`.
pub fn from_dump(dump: &StackDump, own: &reduce::OwnCode) -> CaptureFigures {
    CaptureFigures {
        sample_types: vec!["goroutine".into()],
        default_type: 0,
        sites: reduce::goroutine_dump_sites(dump, own)
            .into_iter()
            .map(|s| (s.name, vec![s.value]))
            .collect(),
    }
}

fn add(into: &mut [i64], values: &[i64]) {
    for (t, v) in into.iter_mut().zip(values) {
        *t = t.wrapping_add(*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::testdata_profile as fixture;

    #[test]
    fn site_figures_equal_the_reduction_of_the_decoded_profile() {
        let heap = fixture("hiddenleak-heap-late.pb.gz");
        let own = reduce::OwnCode::guess();
        let figures = from_profile(&heap, RecordKind::Heap, &own);
        assert_eq!(
            figures.site_figures(RecordKind::Heap),
            reduce::heap_sites(&heap, &own)
        );
        assert_eq!(figures.sample_types.len(), 4);
        let sites_inuse: i64 = figures.sites.iter().map(|s| s.1[3]).sum();
        assert_eq!(sites_inuse, heap.total(3));
        let g = fixture("goroutineleak-goroutine.pb.gz");
        let figures = from_profile(&g, RecordKind::Goroutine, &own);
        assert_eq!(
            figures.site_figures(RecordKind::Goroutine),
            reduce::goroutine_sites(&g, &own)
        );
    }
}
