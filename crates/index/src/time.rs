//! Times on the command line: seconds since the epoch (`1764165600`,
//! `1764165600.25`) or RFC 3339 (`2026-11-26T14:00:00Z`,
//! `2026-11-26 15:00:00.5+01:00`), to nanoseconds since the epoch.

/// Parses a time; the error says what is wrong.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return epoch(s).ok_or_else(|| format!("time '{s}': not a number of seconds"));
    }
    rfc3339(s).ok_or_else(|| {
        format!(
            "time '{s}': use seconds since the epoch (fractions allowed) or RFC 3339 \
             (2026-11-26T14:00:00Z, 2026-11-26T15:00:00.5+01:00)"
        )
    })
}

/// `SECONDS[.FRACTION]`, up to nanoseconds (further digits are cut).
fn epoch(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || frac.contains('.') {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    secs.checked_mul(1_000_000_000)?
        .checked_add(fraction_ns(frac)?)
}

fn fraction_ns(frac: &str) -> Option<u64> {
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns = 0u64;
    for i in 0..9 {
        let d = frac.as_bytes().get(i).map_or(0, |b| (b - b'0') as u64);
        ns = ns * 10 + d;
    }
    Some(ns)
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(s: &str, at: usize, len: usize) -> Option<i64> {
    let t = s.get(at..at + len)?;
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(s, 0, 4)?, num(s, 5, 2)?, num(s, 8, 2)?);
    let (h, mi, sec) = (num(s, 11, 2)?, num(s, 14, 2)?, num(s, 17, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mdays = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > mdays[mo as usize - 1]
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        frac_ns = fraction_ns(&r[..n])?;
        rest = &r[n..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        // Byte 3 checked as a byte: a str slice there could cut a character.
        r if r.len() == 6
            && (r.starts_with('+') || r.starts_with('-'))
            && r.as_bytes()[3] == b':' =>
        {
            let (oh, om) = (num(r, 1, 2)?, num(r, 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if r.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    let secs = u64::try_from(secs).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_rfc3339_agree() {
        assert_eq!(parse_time("1764165600"), Ok(1_764_165_600_000_000_000));
        assert_eq!(parse_time("1764165600.25"), Ok(1_764_165_600_250_000_000));
        assert_eq!(parse_time("0.000000001"), Ok(1));
        assert_eq!(
            parse_time("2025-11-26T14:00:00Z"),
            Ok(1_764_165_600_000_000_000)
        );
        assert_eq!(
            parse_time("2025-11-26 15:00:00.25+01:00"),
            Ok(1_764_165_600_250_000_000)
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_time("2000-02-29T00:00:00Z"),
            Ok(951_782_400_000_000_000)
        );
        for bad in [
            "",
            "1.2.3",
            "2025-02-29T00:00:00Z",
            "2025-11-26T14:00:00",
            "yesterday",
            "1e9",
            "2025-11-26T14:00:00+0é00",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
