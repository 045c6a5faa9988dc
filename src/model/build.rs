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
    /// `vcs.revision` from the binary's build info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcs_revision: Option<String>,
    /// The application id (agent app info `id`), when the source knows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
}

impl BuildInfo {
    pub fn is_empty(&self) -> bool {
        self == &BuildInfo::default()
    }
}
