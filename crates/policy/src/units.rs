//! Sizes, durations and bit rates as an administrator writes them in a policy
//! file ("64M", "1.5h", "500M"), parsed exactly and printed back.
//!
//! Numbers are read as decimals into integers (no floating point), so "1.5G"
//! is exactly 1610612736 bytes and "1.1h" exactly 3960 s.

use std::time::Duration;

/// Parses a decimal number ("12", "1.5", ".5") into (numerator, denominator).
/// At most 18 significant digits, so products with a unit fit in u128.
fn decimal(s: &str) -> Option<(u128, u128)> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || int.len() + frac.len() > 18
    {
        return None;
    }
    let mut num = 0u128;
    for b in int.bytes().chain(frac.bytes()) {
        num = num * 10 + u128::from(b - b'0');
    }
    Some((num, 10u128.pow(frac.len() as u32)))
}

/// Splits "1.5G" into ("1.5", "G").
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Parses a size in bytes: a number with an optional unit K, M, G or T
/// (powers of 1024, either case, optionally followed by "iB" or "B"), e.g.
/// "4096", "512K", "64M", "1.5G", "10GiB". Fractions of a byte round down.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("expected a size such as 512K, 64M or 10G (powers of 1024), not \"{s}\"");
    let (num, unit) = split_number(s.trim());
    let (n, d) = decimal(num).ok_or_else(bad)?;
    let unit = unit.trim_start();
    let unit = unit
        .strip_suffix("iB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(unit);
    let scale: u128 = match unit {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        "T" | "t" => 1 << 40,
        _ => return Err(bad()),
    };
    u64::try_from(n * scale / d).map_err(|_| format!("size \"{s}\" is too large"))
}

/// Parses a bit rate in bits per second: a number with an optional unit k,
/// M, G or T (powers of 1000, as network rates are counted), e.g.
/// "500000000", "500M", "2.5G".
pub fn parse_bit_rate(s: &str) -> Result<u64, String> {
    let bad =
        || format!("expected a rate in bits/s such as 500M or 2G (powers of 1000), not \"{s}\"");
    let (num, unit) = split_number(s.trim());
    let (n, d) = decimal(num).ok_or_else(bad)?;
    let scale: u128 = match unit.trim_start() {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    u64::try_from(n * scale / d).map_err(|_| format!("rate \"{s}\" is too large"))
}

/// Parses a duration: one or more numbers each followed by a unit s, m, h or
/// d (seconds, minutes, hours, days), e.g. "90s", "1h", "1.5h", "1h30m", "2d".
/// A unit is required ("90" alone is refused: seconds or minutes?).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration such as 90s, 30m, 1.5h or 2d, not \"{s}\"");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let (num, after) = split_number(rest);
        let (n, d) = decimal(num).ok_or_else(bad)?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let secs: u128 = match &after[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86400,
            _ => return Err(bad()),
        };
        nanos += n * secs * 1_000_000_000 / d;
        rest = after[unit_len..].trim_start();
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Prints a size with the largest binary unit that divides it ("64 MiB",
/// "1536 KiB", "100 bytes").
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// Prints a duration the way [`parse_duration`] reads it ("1h30m", "90s"
/// prints as "1m30s"); fractions of a second are printed in seconds.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        return format!("{}s", d.as_secs_f64());
    }
    let mut s = d.as_secs();
    if s == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, len) in [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)] {
        if s >= len {
            out.push_str(&format!("{}{unit}", s / len));
            s %= len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("10 GB"), Ok(10 << 30));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("0.5K"), Ok(512));
        for bad in [
            "",
            "G",
            "10X",
            "1.2.3G",
            "-1G",
            "10 G G",
            "1e9",
            "99999999999999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("20000000T").unwrap_err().contains("too large"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 1h 30m "), Ok(Duration::from_secs(5400)));
        for bad in ["", "90", "1x", "h", "1.h.", "1hour", "-1h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bit_rates() {
        assert_eq!(parse_bit_rate("500000000"), Ok(500_000_000));
        assert_eq!(parse_bit_rate("500M"), Ok(500_000_000));
        assert_eq!(parse_bit_rate("2.5G"), Ok(2_500_000_000));
        assert_eq!(parse_bit_rate("10k"), Ok(10_000));
        assert!(parse_bit_rate("10Mi").is_err());
        assert!(parse_bit_rate("fast").is_err());
    }

    #[test]
    fn printing_round_trips() {
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(1536 << 10), "1536 KiB");
        assert_eq!(format_size(100), "100 bytes");
        assert_eq!(format_size(10 << 30), "10 GiB");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(86400 + 1)), "1d1s");
        for s in ["1h30m", "1m30s", "2d", "45s"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
