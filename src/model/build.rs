//! What build a process runs: the evidence a boot cycle is labelled with. Sources fill what
//! they can (the agent's app info, the binary's own build info); `--label` is the fallback and
//! the override. Plain data, no I/O.

use serde::{Deserialize, Serialize};

/// One process's build, as far as its source can tell. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// The application's own version (agent app info `version`, or the main module's version
    /// from the binary's build info).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `go1.26.8`, from the agent (op 0x04) or the binary's build info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_version: Option<String>,
    /// The main module's path (`github.com/nats-io/nats-server/v2`), from the binary's build
    /// info: what names a site by the target's own code rather than by a library it calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// `vcs.revision` from the binary's build info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcs_revision: Option<String>,
    /// The `-ldflags` the binary was linked with (its build info's `build -ldflags=…`), where a
    /// build set by `-X main.version=…` shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ldflags: Option<String>,
    /// The Go build id of the executable (`.note.go.buildid`, what `go tool buildid` prints):
    /// two different binaries never share it, so it tells builds apart when nothing else does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The application id (agent app info `id`), when the source knows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
}

impl BuildInfo {
    pub fn is_empty(&self) -> bool {
        self == &BuildInfo::default()
    }

    /// Fills what this one lacks from `other` (the executable's own build info beside what
    /// an agent said).
    pub fn fill_from(&mut self, other: &BuildInfo) {
        let fill = |mine: &mut Option<String>, theirs: &Option<String>| {
            if mine.is_none() {
                mine.clone_from(theirs);
            }
        };
        fill(&mut self.version, &other.version);
        fill(&mut self.go_version, &other.go_version);
        fill(&mut self.module, &other.module);
        fill(&mut self.vcs_revision, &other.vcs_revision);
        fill(&mut self.ldflags, &other.ldflags);
        fill(&mut self.build_id, &other.build_id);
        fill(&mut self.app_id, &other.app_id);
    }

    /// The version `-X …=VALUE` sets in the ldflags, when one of its variables is named
    /// like a version (`main.version`, `…/build.Version`, `….gitVersion`).
    pub fn ldflags_version(&self) -> Option<String> {
        let flags = self.ldflags.as_deref()?;
        let mut words = flags.split_whitespace();
        let mut found = None;
        while let Some(w) = words.next() {
            let setting = match w {
                "-X" => words.next(),
                w => w.strip_prefix("-X=").or_else(|| w.strip_prefix("--X=")),
            };
            let Some((name, value)) = setting.and_then(|s| s.split_once('=')) else {
                continue;
            };
            let var = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
            if var.ends_with("version") && !value.is_empty() {
                found = Some(value.trim_matches(['\'', '"']).to_string());
            }
        }
        found
    }

    /// What this build is called: the version (the main module's, else one set by the
    /// ldflags), else the VCS revision, else the Go build id's last part; a leading `v` before
    /// a digit is dropped, so `v2.1.0` and `2.1.0` are one build.
    pub fn name(&self) -> Option<String> {
        let version = self
            .version
            .clone()
            .filter(|v| !v.is_empty())
            .or_else(|| self.ldflags_version());
        if let Some(v) = version {
            return Some(normalise_version(&v).to_string());
        }
        if let Some(r) = self.vcs_revision.as_deref().filter(|r| !r.is_empty()) {
            return Some(format!("rev {}", r.chars().take(12).collect::<String>()));
        }
        let id = self.build_id.as_deref()?.rsplit('/').next()?;
        (!id.is_empty()).then(|| format!("build {}", id.chars().take(12).collect::<String>()))
    }

    /// Whether two builds are the same: their names agree (versions compared without a
    /// leading `v`), or else, with no name on either side, all they say agrees.
    pub fn same_build(&self, other: &BuildInfo) -> bool {
        match (self.name(), other.name()) {
            (Some(a), Some(b)) => a == b,
            _ => self == other,
        }
    }
}

/// A version as people compare it: `v2.1.0` and `2.1.0` are the same version, so a leading
/// `v` (or `V`) followed by a digit is dropped; anything else is kept as given.
pub fn normalise_version(version: &str) -> &str {
    let v = version.trim();
    match v.strip_prefix(['v', 'V']) {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => rest,
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_v_is_the_same_version() {
        assert_eq!(normalise_version("v2.1.0"), "2.1.0");
        assert_eq!(normalise_version("2.1.0"), "2.1.0");
        assert_eq!(normalise_version("V3"), "3");
        assert_eq!(normalise_version("vanilla"), "vanilla");
        let agent = BuildInfo {
            version: Some("v2.1.0".into()),
            ..BuildInfo::default()
        };
        let label = BuildInfo {
            version: Some("2.1.0".into()),
            go_version: Some("go1.26.8".into()),
            ..BuildInfo::default()
        };
        assert!(agent.same_build(&label));
        assert_eq!(agent.name().as_deref(), Some("2.1.0"));
    }

    #[test]
    fn a_version_set_by_the_ldflags_names_the_build() {
        let b = BuildInfo {
            ldflags: Some("-s -w -X main.version=v2.0.2 -X main.commit=abc".into()),
            vcs_revision: Some("0123456789abcdef".into()),
            ..BuildInfo::default()
        };
        assert_eq!(b.ldflags_version().as_deref(), Some("v2.0.2"));
        assert_eq!(b.name().as_deref(), Some("2.0.2"));
        let other = BuildInfo {
            ldflags: Some("-X=github.com/x/y/version.Version=2.1.0".into()),
            ..BuildInfo::default()
        };
        assert_eq!(other.name().as_deref(), Some("2.1.0"));
        assert!(!b.same_build(&other));
        let rev = BuildInfo {
            vcs_revision: Some("0123456789abcdef".into()),
            ..BuildInfo::default()
        };
        assert_eq!(rev.name().as_deref(), Some("rev 0123456789ab"));
        let id = BuildInfo {
            build_id: Some("aaa/bbb/ccc/XyZ0123456789abc".into()),
            ..BuildInfo::default()
        };
        assert_eq!(id.name().as_deref(), Some("build XyZ012345678"));
    }
}
