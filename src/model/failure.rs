//! Why a capture failed: the one type for it, from the source that saw the failure, through
//! the manifest's `error_kind` (its `as_str`), to the analyses that read a run back.
//!
//! A source reports it (`source::FetchError`), the collector writes its `as_str` as the record's
//! `error_kind` (`invalid` and `disk` are the collector's own), and analyses read it back once
//! through `CaptureRecord::failure` (an unknown kind is `Other`). A heap dump the target does not
//! serve is `NotServed`, its reason from `CaptureRecord::not_served_why`. Runs that recorded it as
//! `status` (Envoy's `/heap_dump` answering 501) are still recognised by the source's one message,
//! in that one place. (The Envoy source still reports it as `Status`; having it report
//! `NotServed` needs the collector's `failed` to count `NotServed`, like `Status`, as an answer
//! from a live target: a change for the collector's owner.)

/// The class of a failed capture, as a source reports it and as the manifest records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Nothing listens: the process is gone (or not started yet).
    Refused,
    /// Connected, but no complete answer in time: the target is stalled.
    Timeout,
    /// The connection broke mid-request or mid-body.
    Reset,
    /// An HTTP status other than 200.
    Status,
    /// The body passed the size cap.
    TooLarge,
    /// TLS set-up or verification failed.
    Tls,
    /// The reply did not decode as what was asked for (the collector's check).
    Invalid,
    /// The capture could not be made durable (the collector's store).
    Disk,
    /// The target does not serve this kind of data at all (Envoy's `/heap_dump` answering
    /// 501), and was not asked again; the message says why.
    NotServed,
    /// Anything else (bad URL, protocol error), or a kind this build does not know.
    Other,
}

impl FailureKind {
    /// The class of an I/O error on a connection, the same for every source that opens one
    /// (HTTP's under reqwest, the agent's socket): nothing listening or no route is `Refused`,
    /// a deadline passed `Timeout`, a connection broken mid-way `Reset`.
    pub fn of_io(e: &std::io::Error) -> FailureKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused
            | K::AddrNotAvailable
            | K::NotFound
            | K::HostUnreachable
            | K::NetworkUnreachable => FailureKind::Refused,
            K::TimedOut | K::WouldBlock => FailureKind::Timeout,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                FailureKind::Reset
            }
            _ => FailureKind::Other,
        }
    }

    /// Every kind, `Other` last.
    pub const ALL: [FailureKind; 10] = [
        FailureKind::Refused,
        FailureKind::Timeout,
        FailureKind::Reset,
        FailureKind::Status,
        FailureKind::TooLarge,
        FailureKind::Tls,
        FailureKind::Invalid,
        FailureKind::Disk,
        FailureKind::NotServed,
        FailureKind::Other,
    ];

    /// The manifest's `error_kind`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Refused => "refused",
            FailureKind::Timeout => "timeout",
            FailureKind::Reset => "reset",
            FailureKind::Status => "status",
            FailureKind::TooLarge => "too-large",
            FailureKind::Tls => "tls",
            FailureKind::Invalid => "invalid",
            FailureKind::Disk => "disk",
            FailureKind::NotServed => "not-served",
            FailureKind::Other => "other",
        }
    }

    /// An `error_kind` read back; one this build does not know is `Other`.
    pub fn parse(text: &str) -> FailureKind {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .unwrap_or(FailureKind::Other)
    }

    /// True when the failure means the target process is not there.
    pub fn means_gone(self) -> bool {
        matches!(self, FailureKind::Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written() {
        for k in FailureKind::ALL {
            assert_eq!(FailureKind::parse(k.as_str()), k);
        }
        assert_eq!(FailureKind::parse("new-kind"), FailureKind::Other);
    }

    /// The agent's socket and HTTP read one mapping: a route gone is the process gone for
    /// both (the agent's own copy had no `NetworkUnreachable`).
    #[test]
    fn an_io_error_is_classed_the_same_for_every_source() {
        use std::io::{Error, ErrorKind as K};
        let of = |k: K| FailureKind::of_io(&Error::from(k));
        assert_eq!(of(K::ConnectionRefused), FailureKind::Refused);
        assert_eq!(of(K::NotFound), FailureKind::Refused);
        assert_eq!(of(K::NetworkUnreachable), FailureKind::Refused);
        assert_eq!(of(K::TimedOut), FailureKind::Timeout);
        assert_eq!(of(K::WouldBlock), FailureKind::Timeout);
        assert_eq!(of(K::BrokenPipe), FailureKind::Reset);
        assert_eq!(of(K::UnexpectedEof), FailureKind::Reset);
        assert_eq!(of(K::InvalidData), FailureKind::Other);
    }
}
