//! Why a capture failed, as a type: read once from a manifest record's `error_kind` (and, for
//! runs recorded before a kind existed for it, the one message that carries a state), so no
//! analysis reads an error message back into a state.

use super::CaptureRecord;

/// The class of a failed capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureFailure {
    /// Nothing listened: the process was gone (or not started yet).
    Refused,
    /// Connected, but no complete answer in time.
    Timeout,
    /// The connection broke mid-request or mid-body.
    Reset,
    /// An HTTP status other than 200.
    Status,
    /// The body passed the size cap.
    TooLarge,
    /// TLS set-up or verification failed.
    Tls,
    /// The reply did not decode as what was asked for.
    Invalid,
    /// The capture could not be made durable.
    Disk,
    /// The target does not serve this kind of data at all (Envoy's `/heap_dump` answering
    /// 501), and was not asked again; `why` is its answer.
    NotServed { why: String },
    /// Anything else, or a kind this build does not know.
    Other,
}

/// The `error_kind` a collector writes for [`CaptureFailure::NotServed`].
pub const NOT_SERVED: &str = "not-served";

/// What the Envoy source says when `/heap_dump` is not served: `…/heap_dump: not available
/// (WHY); not asked again`. Runs written before [`NOT_SERVED`] existed record it as `status`.
const NOT_AVAILABLE: &str = "not available";

impl CaptureRecord {
    /// Why this capture failed; `None` when it did not.
    pub fn failure(&self) -> Option<CaptureFailure> {
        let message = self.error.as_deref()?;
        let kind = self.error_kind.as_deref().unwrap_or("other");
        Some(match kind {
            NOT_SERVED => CaptureFailure::NotServed {
                why: reason_inside(message).unwrap_or(message).to_string(),
            },
            "status" | "other" if message.contains(NOT_AVAILABLE) => CaptureFailure::NotServed {
                why: reason_inside(message).unwrap_or(message).to_string(),
            },
            "refused" => CaptureFailure::Refused,
            "timeout" => CaptureFailure::Timeout,
            "reset" => CaptureFailure::Reset,
            "status" => CaptureFailure::Status,
            "too-large" => CaptureFailure::TooLarge,
            "tls" => CaptureFailure::Tls,
            "invalid" => CaptureFailure::Invalid,
            "disk" => CaptureFailure::Disk,
            _ => CaptureFailure::Other,
        })
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
            Some(CaptureFailure::Refused)
        );
        assert_eq!(
            failed(Some("status"), "HTTP 500").failure(),
            Some(CaptureFailure::Status)
        );
        assert_eq!(
            failed(Some("new-kind"), "x").failure(),
            Some(CaptureFailure::Other)
        );
        assert_eq!(failed(None, "x").failure(), Some(CaptureFailure::Other));
    }

    #[test]
    fn a_heap_dump_not_served_keeps_its_reason_old_runs_and_new() {
        let message = "http://e/heap_dump: not available (HTTP 501: no tcmalloc (built with x)); not asked again";
        let want = CaptureFailure::NotServed {
            why: "HTTP 501: no tcmalloc (built with x)".into(),
        };
        assert_eq!(
            failed(Some("status"), message).failure(),
            Some(want.clone())
        );
        assert_eq!(failed(Some(NOT_SERVED), message).failure(), Some(want));
        assert_eq!(
            failed(Some(NOT_SERVED), "gone").failure(),
            Some(CaptureFailure::NotServed { why: "gone".into() })
        );
    }
}
