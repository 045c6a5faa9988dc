//! The memory limit a started command runs under: a fresh memory cgroup (v1 or v2) when this
//! machine lets us make one, else a watchdog that SIGKILLs the command once its RSS passes the
//! limit.

use super::LaunchError;
use crate::source::cgroup::{CgroupRoots, CgroupVersion, MemoryCgroup};

/// How the limit is enforced for a run.
#[derive(Debug)]
pub enum Confinement {
    Cgroup(MemoryCgroup),
    /// No cgroup could be made: a watchdog SIGKILLs the command when its RSS passes `limit`.
    Watchdog {
        limit: u64,
        why: String,
    },
    /// No limit was asked for.
    None,
}

impl Confinement {
    /// A cgroup when one can be made, else the watchdog (saying why).
    pub fn for_limit(roots: &CgroupRoots, name: &str, limit: Option<u64>) -> Confinement {
        let Some(limit) = limit else {
            return Confinement::None;
        };
        match MemoryCgroup::create(roots, name, limit) {
            Ok(cg) => Confinement::Cgroup(cg),
            Err(e) => Confinement::Watchdog {
                limit,
                why: e.to_string(),
            },
        }
    }

    /// `cgroup-v1`, `cgroup-v2`, `watchdog` or `none`, as run.json records it.
    pub fn mode(&self) -> &'static str {
        match self {
            Confinement::Cgroup(cg) if cg.version == CgroupVersion::V1 => "cgroup-v1",
            Confinement::Cgroup(_) => "cgroup-v2",
            Confinement::Watchdog { .. } => "watchdog",
            Confinement::None => "none",
        }
    }

    pub fn cgroup(&self) -> Option<&MemoryCgroup> {
        match self {
            Confinement::Cgroup(cg) => Some(cg),
            _ => None,
        }
    }

    /// Removes the cgroup, if there is one.
    pub fn release(self) -> Result<(), LaunchError> {
        match self {
            Confinement::Cgroup(cg) => Ok(cg.remove()?),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::cgroup::testing::fake_roots;

    #[test]
    fn no_memory_controller_means_the_watchdog_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fake_roots(dir.path());
        let c = Confinement::for_limit(&roots, "x", Some(1 << 20));
        assert_eq!(c.mode(), "watchdog");
        match c {
            Confinement::Watchdog { limit, why } => {
                assert_eq!(limit, 1 << 20);
                assert!(why.contains("no memory controller"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(Confinement::for_limit(&roots, "x", None).mode(), "none");
    }
}
