//! Why a capture failed, as a type: read once from a manifest record's `error_kind` (and, for
//! runs recorded before a kind existed for it, the one message that carries a state), so no
//! analysis reads an error message back into a state.

use super::CaptureRecord;

pub use crate::model::failure::FailureKind;

/// The `error_kind` a collector writes for [`FailureKind::NotServed`].
pub const NOT_SERVED: &str = FailureKind::NotServed.as_str();

/// What the Envoy source says when `/heap_dump` is not served: `…/heap_dump: not available
/// (WHY); not asked again`. Runs written before [`NOT_SERVED`] existed record it as `status`.
const NOT_AVAILABLE: &str = "not available";

impl CaptureRecord {
    /// Why this capture failed; `None` when it did not.
    pub fn failure(&self) -> Option<FailureKind> {
        let message = self.error.as_deref()?;
        let kind = FailureKind::parse(self.error_kind.as_deref().unwrap_or("other"));
        Some(match kind {
            FailureKind::Status | FailureKind::Other if message.contains(NOT_AVAILABLE) => {
                FailureKind::NotServed
            }
            kind => kind,
        })
    }

    /// What the target said when it does not serve this kind of data at all
    /// ([`FailureKind::NotServed`]); `None` for any other capture.
    pub fn not_served_why(&self) -> Option<String> {
        let message = self.error.as_deref()?;
        (self.failure()? == FailureKind::NotServed)
            .then(|| reason_inside(message).unwrap_or(message).to_string())
    }
}

/// The reason inside `… not available (REASON); …`, brackets inside it kept.
fn reason_inside(message: &str) -> Option<&str> {
    const OPEN: &str = "not available (";
    let at = message.find(OPEN)?;
    let inner = &message[at + OPEN.len()..];
    let mut depth = 0usize;
    for (i, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(&inner[..i]),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RecordKind;

    fn failed(kind: Option<&str>, message: &str) -> CaptureRecord {
        let mut r = CaptureRecord::new(1, RecordKind::Heap, 1, 0);
        r.error = Some(message.to_string());
        r.error_kind = kind.map(str::to_string);
        r
    }

    #[test]
    fn kinds_read_back_as_variants() {
        assert_eq!(
            failed(Some("refused"), "x").failure(),
            Some(FailureKind::Refused)
        );
        assert_eq!(
            failed(Some("status"), "HTTP 500").failure(),
            Some(FailureKind::Status)
        );
        assert_eq!(
            failed(Some("new-kind"), "x").failure(),
            Some(FailureKind::Other)
        );
        assert_eq!(failed(None, "x").failure(), Some(FailureKind::Other));
        assert_eq!(failed(Some("status"), "HTTP 500").not_served_why(), None);
    }

    #[test]
    fn a_heap_dump_not_served_keeps_its_reason_old_runs_and_new() {
        let message = "http://e/heap_dump: not available (HTTP 501: no tcmalloc (built with x)); not asked again";
        let why = Some("HTTP 501: no tcmalloc (built with x)".to_string());
        for kind in ["status", NOT_SERVED] {
            let r = failed(Some(kind), message);
            assert_eq!(r.failure(), Some(FailureKind::NotServed));
            assert_eq!(r.not_served_why(), why);
        }
        assert_eq!(
            failed(Some(NOT_SERVED), "gone").not_served_why(),
            Some("gone".into())
        );
    }
}
