//! Reading and printing sizes, durations and counts the way people write them:
//! `256MiB`, `1G`, `500ms`, `12.3 MiB`.

use std::time::Duration;

/// The number a size or a duration starts with, and the unit after it (`"1.5GiB"` → 1.5,
/// `"GiB"`); `None` when it does not start with a number.
fn number_and_unit(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    Some((number.parse().ok()?, unit))
}

/// Parses a size: a number with an optional unit, binary (`KiB`, `MiB`, `GiB`, `Ki`, `Mi`,
/// `Gi`, `K`, `M`, `G`, as Kubernetes and Go print them) or decimal (`KB`, `MB`, `GB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a size (examples: 256MiB, 1GiB, 1073741824)"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        "t" | "ti" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "{text:?} has an unknown size unit {unit:?} (use B, KiB, MiB, GiB)"
            ));
        }
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration: `500ms`, `2s`, `1.5s`, `3m`, `1h`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a duration (examples: 500ms, 2s, 5m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => number,
        "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "{text:?} has an unknown time unit {unit:?} (use ms, s, m, h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}

/// Parses a duration flag: like [`parse_duration`], but a bare number other than zero is
/// refused, since `--interval 5` could mean seconds or milliseconds: the message asks for a
/// unit and shows what the number would mean in seconds.
pub fn parse_duration_flag(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let number: f64 = t
            .parse()
            .map_err(|_| format!("{text:?} is not a duration (examples: 500ms, 2s, 5m)"))?;
        if number != 0.0 {
            return Err(format!(
                "{text:?} has no unit: write {t}s for {t} seconds, or {t}ms, {t}m (ms, s, m, h)"
            ));
        }
    }
    parse_duration(text)
}

/// A duration as a flag takes it: `10s`, `1500ms`, `2m` (whole minutes), `250µs` below a ms.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        return format!("{}µs", d.as_micros());
    }
    if ms % 60_000 == 0 && ms >= 120_000 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Bytes in binary units with three significant figures: `512 B`, `1.50 KiB`, `96.0 MiB`.
pub fn format_bytes(bytes: i64) -> String {
    let sign = if bytes < 0 { "-" } else { "" };
    let b = bytes.unsigned_abs() as f64;
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = b;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{sign}{} B", bytes.unsigned_abs())
    } else if value >= 100.0 {
        format!("{sign}{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{sign}{value:.1} {}", UNITS[unit])
    } else {
        format!("{sign}{value:.2} {}", UNITS[unit])
    }
}

/// A value in the unit a profile gives it: bytes get binary units, counts get thousands
/// separators, nanoseconds become seconds.
pub fn format_value(value: i64, unit: &str) -> String {
    match unit {
        "bytes" => format_bytes(value),
        "nanoseconds" => format!("{:.3}s", value as f64 / 1e9),
        _ => group_thousands(value),
    }
}

pub fn group_thousands(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if value < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Kubernetes quantity in base units: `128Mi` → 134217728, `500m` → 0.5, `2` → 2,
/// `1e3` → 1000, `1.5G` → 1.5e9.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let digits = &t[..t.len() - body.len() + split];
    let suffix = &body[split..];
    let number: f64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a quantity (examples: 128Mi, 1Gi, 500m, 2)"))?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s => {
            // `1e3`, `12E6`: a decimal exponent (a bare `E` is exa, above).
            let exponent = s
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .ok_or_else(|| format!("{text:?} has an unknown quantity suffix {s:?}"))?;
            10f64.powi(exponent)
        }
    };
    let value = number * factor;
    if !value.is_finite() {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(value)
}

/// An ordinal as English writes it: 1st, 2nd, 3rd, 4th, 11th, 21st.
pub fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_kubernetes_and_go_write_them() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_size("128Mi").unwrap(), 128 << 20);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12furlongs").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("3m").unwrap(), Duration::from_secs(180));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn a_duration_flag_needs_a_unit_but_for_zero() {
        assert_eq!(parse_duration_flag("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration_flag("0").unwrap(), Duration::ZERO);
        let e = parse_duration_flag("5").unwrap_err();
        assert!(
            e.contains("no unit") && e.contains("5s") && e.contains("5ms"),
            "{e}"
        );
        assert!(parse_duration_flag("1.5").unwrap_err().contains("1.5s"));
        assert!(parse_duration_flag("soon").is_err());
    }

    #[test]
    fn durations_are_shown_as_a_flag_takes_them_back() {
        for (d, shown) in [
            (Duration::from_secs(10), "10s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(180), "3m"),
            (Duration::from_secs(60), "60s"),
            (Duration::from_micros(250), "250µs"),
        ] {
            assert_eq!(format_duration(d), shown);
            assert_eq!(parse_duration(shown).unwrap(), d);
        }
    }

    #[test]
    fn bytes_print_with_three_figures() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(96 << 20), "96.0 MiB");
        assert_eq!(format_bytes(-(300 << 20)), "-300 MiB");
        assert_eq!(group_thousands(1234567), "1,234,567");
        assert_eq!(group_thousands(-1000), "-1,000");
    }
}
