//! Wall-clock time, the one place for it: now in unix ms/ns, RFC 3339 text to unix ms (a whole
//! field, or a timestamp at the start of a log line) and unix ms to the three forms heapwatch
//! writes. Hand-written on the civil-from-days algorithm: every time heapwatch reads or writes is
//! UTC or carries its offset, so no time-zone database is needed.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    since_epoch().map_or(0, |d| d.as_millis() as i64)
}

/// Now, in unix nanoseconds (0 if the clock is before 1970).
pub fn now_ns() -> i64 {
    since_epoch().map_or(0, |d| d.as_nanos() as i64)
}

/// Now, in unix seconds (0 if the clock is before 1970).
pub fn now_secs() -> i64 {
    since_epoch().map_or(0, |d| d.as_secs() as i64)
}

/// A file time (a modification time, say) in unix ms, if it is after 1970.
pub fn system_ms(t: SystemTime) -> Option<i64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as i64)
}

fn since_epoch() -> Option<std::time::Duration> {
    SystemTime::now().duration_since(UNIX_EPOCH).ok()
}

/// A UTC calendar time, to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub milli: i64,
}

impl Utc {
    /// Unix milliseconds as calendar fields (Howard Hinnant's civil-from-days).
    pub fn from_ms(ms: i64) -> Utc {
        let secs = ms.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        Utc {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            milli: ms.rem_euclid(1000),
        }
    }

    fn date_time(&self, between: char) -> String {
        let Utc {
            year,
            month,
            day,
            hour,
            minute,
            second,
            ..
        } = self;
        format!("{year:04}-{month:02}-{day:02}{between}{hour:02}:{minute:02}:{second:02}")
    }
}

/// `2024-05-02T10:31:07Z`: RFC 3339 UTC to the second.
pub fn rfc3339(ms: i64) -> String {
    format!("{}Z", Utc::from_ms(ms).date_time('T'))
}

/// `2026-12-02T12:27:00.626Z`: RFC 3339 UTC with milliseconds.
pub fn rfc3339_ms(ms: i64) -> String {
    let t = Utc::from_ms(ms);
    format!("{}.{:03}Z", t.date_time('T'), t.milli)
}

/// `2026-12-02 12:27:18 UTC`: for people (reports).
pub fn readable(ms: i64) -> String {
    format!("{} UTC", Utc::from_ms(ms).date_time(' '))
}

/// A whole RFC 3339 field as unix ms: `2024-05-02T10:31:07Z`, with an optional fraction and a
/// `Z` or `±hh:mm` offset, surrounding white space ignored. What Kubernetes writes and `--at`
/// takes; a time without an offset, or with anything after it, is refused.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = text.trim();
    let stamp = leading(t)?;
    (stamp.len == t.len() && stamp.offset == Offset::Given && stamp.colon_offset)
        .then_some(stamp.ms)
}

/// The timestamp at the start of a log line as unix ms: RFC 3339 / ISO 8601 with `T` or a space
/// between date and time, a fraction after `.` or `,`, an offset as `Z`, `±hh:mm`, `±hhmm` or
/// `±hh`; a time with no offset is taken as UTC. What follows the timestamp is not read.
pub fn parse_leading(text: &str) -> Option<i64> {
    leading(text).map(|s| s.ms)
}

#[derive(PartialEq)]
enum Offset {
    Given,
    Missing,
}

struct Stamp {
    ms: i64,
    /// Bytes the timestamp took.
    len: usize,
    offset: Offset,
    /// The offset is `Z` or `±hh:mm` (the only forms RFC 3339 has).
    colon_offset: bool,
}

/// The one parser: a timestamp at the start of `s`.
fn leading(s: &str) -> Option<Stamp> {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut milli = 0i64;
    if matches!(b.get(at), Some(b'.' | b',')) {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                milli = milli * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..3 {
            milli *= 10;
        }
    }
    let (offset_min, offset, colon_offset) = match b.get(at) {
        Some(b'Z' | b'z') => {
            at += 1;
            (0, Offset::Given, true)
        }
        Some(&sign @ (b'+' | b'-')) => {
            let hours = digits(at + 1, 2)?;
            let (minutes, colon, len) = if b.get(at + 3) == Some(&b':') {
                (digits(at + 4, 2)?, true, 6)
            } else {
                match digits(at + 3, 2) {
                    Some(m) => (m, false, 5),
                    None => (0, false, 3),
                }
            };
            at += len;
            let total = hours * 60 + minutes;
            (
                if sign == b'-' { -total } else { total },
                Offset::Given,
                colon,
            )
        }
        _ => (0, Offset::Missing, false),
    };
    // A leap second (:60) is read as the last second of its minute.
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(59)
            - offset_min * 60;
    Some(Stamp {
        ms: secs * 1000 + milli,
        len: at,
        offset,
        colon_offset,
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days-from-civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T10:15:02.123Z in unix ms.
    const AT: i64 = 1_796_292_902_123;

    #[test]
    fn kubernetes_and_at_times_read_as_written() {
        // The form every pod and event file under testdata/k8s carries.
        assert_eq!(parse_rfc3339("2026-12-03T10:15:02Z"), Some(AT - 123));
        assert_eq!(parse_rfc3339(" 2026-12-03T10:15:02Z\n"), Some(AT - 123));
        // Event times carry microseconds; offsets other than Z.
        assert_eq!(parse_rfc3339("2026-12-03T10:15:02.123456Z"), Some(AT));
        assert_eq!(parse_rfc3339("2026-12-03T12:15:02.123+02:00"), Some(AT));
        assert_eq!(parse_rfc3339("2026-12-03T05:15:02.123-05:00"), Some(AT));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        for refused in [
            "yesterday",
            "",
            "2024-13-02T10:31:07Z",
            "2024-05-32T10:31:07Z",
            "2024-05-02T24:00:00Z",
            "2024-05-02T10:31Z",
            "2024-05-02T10:31:07",
            "2024-05-02T10:31:07+0200",
            "2024-05-02T10:31:07Z and more",
            "2024-05-02T10:31:07.Z",
        ] {
            assert_eq!(parse_rfc3339(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn log_line_timestamps_in_the_usual_forms() {
        for (line, ms) in [
            ("2026-12-03T10:15:02.123Z entering", AT),
            ("2026-12-03T11:15:02.123+01:00 x", AT),
            ("2026-12-03T05:15:02.123-0500 x", AT),
            ("2026-12-03T12:15:02.123+02 x", AT),
            ("2026-12-03 10:15:02.123 x", AT),
            ("2026-12-03 10:15:02,123 x", AT),
            ("2026-12-03T10:15:02.123456789Z] x", AT),
            ("2026-12-03T10:15:02Z x", AT - 123),
        ] {
            assert_eq!(parse_leading(line), Some(ms), "{line:?}");
        }
        for none in [
            "entering read-only mode",
            "2026-13-03T10:15:02Z",
            "12/03/2026 10:15:02",
        ] {
            assert_eq!(parse_leading(none), None, "{none:?}");
        }
    }

    #[test]
    fn a_leap_second_is_the_last_second_of_its_minute() {
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60Z"),
            parse_rfc3339("2016-12-31T23:59:59Z")
        );
    }

    #[test]
    fn the_three_written_forms() {
        assert_eq!(rfc3339(AT), "2026-12-03T10:15:02Z");
        assert_eq!(rfc3339_ms(AT), "2026-12-03T10:15:02.123Z");
        assert_eq!(readable(AT), "2026-12-03 10:15:02 UTC");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(readable(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(readable(1_796_214_438_879), "2026-12-02 12:27:18 UTC");
        assert_eq!(
            parse_rfc3339("2024-05-02T10:31:07Z"),
            Some(1_714_645_867_000)
        );
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn written_times_read_back() {
        for ms in [0, AT, AT - 123, 951_782_400_000, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&rfc3339_ms(ms)), Some(ms));
            assert_eq!(parse_leading(&readable(ms)), Some(ms - ms % 1000));
        }
    }

    #[test]
    fn now_is_after_this_code_was_written() {
        let ms = now_ms();
        assert!(ms > 1_764_000_000_000);
        assert!(now_ns() >= ms * 1_000_000);
        assert!(now_secs() >= ms / 1000);
    }
}
