//! Sizes as people type and read them: `4K`, `64M`, `1G` in ([`parse_size`]) and out
//! ([`human`]), and byte counts and large counts in messages ([`bytes`], [`count`]);
//! durations in ([`parse_duration`]) and out ([`seconds`]); numbers as a user would
//! type them ([`number`]).

use crate::error::{Error, Result};

/// Parses `8`, `4K`, `64M`, `1G` (binary multiples) into bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::bad_input(format!("bad size `{s}` (expected e.g. 4K, 64M, 1G)")))
}

/// `1.5 KiB`-style text for a byte count.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// `14.3 TiB`-style text for a byte count.
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b.max(0.0);
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `8.0e10`-style text for a large count, plain digits below a million.
pub fn count(n: f64) -> String {
    if n < 1e6 {
        format!("{n:.0}")
    } else {
        format!("{n:.1e}")
    }
}

/// A duration in seconds as people read it: `850 ns`, `1.6 ms`, `12.0 s`, `27 min`,
/// `3.2 h`, `41 days`, `3.0e5 years`.
pub fn seconds(s: f64) -> String {
    const DAY: f64 = 86_400.0;
    const YEAR: f64 = 365.25 * DAY;
    match s {
        s if !s.is_finite() => "forever".into(),
        s if s < 1e-6 => format!("{:.0} ns", s * 1e9),
        s if s < 1e-3 => format!("{:.1} us", s * 1e6),
        s if s < 1.0 => format!("{:.1} ms", s * 1e3),
        s if s < 120.0 => format!("{s:.1} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 2.0 * DAY => format!("{:.1} h", s / 3600.0),
        s if s < YEAR => format!("{:.0} days", s / DAY),
        s if s < 1e4 * YEAR => format!("{:.0} years", s / YEAR),
        s => format!("{:.1e} years", s / YEAR),
    }
}

/// Parses a duration: milliseconds (`500ms`), seconds (`90`, `90s`), minutes (`10m`) or
/// hours (`2h`), decimals allowed; it must be positive and finite.
pub fn parse_duration(s: &str) -> Result<f64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        _ if t.ends_with("ms") => (&t[..t.len() - 2], 1e-3),
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .map(|n| n * mult)
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| {
            Error::bad_input(format!(
                "bad duration `{s}` (expected seconds, or e.g. 500ms, 90s, 10m, 2h)"
            ))
        })
}

/// A number as a user would type it: the shorter of plain digits and the exponent form
/// (`-1`, `0.5`, `1e300`, `1e-300`), each the shortest that reads back as `v`.
pub fn number(v: f64) -> String {
    let plain = format!("{v}");
    let exp = format!("{v:e}");
    if exp.len() < plain.len() {
        exp
    } else {
        plain
    }
}

/// A derived number, rounded for a message: three significant digits in exponent form
/// outside [1e-3, 1e7) (`9.22e9`, `1e302`), else at most four decimals (`11.411`).
pub fn approx(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        return format!("{v}");
    }
    let trim = |m: &str| -> String {
        if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            m.to_string()
        }
    };
    if a == 0.0 || (1e-3..1e7).contains(&a) {
        trim(&format!("{v:.4}"))
    } else {
        let e = format!("{v:.2e}");
        let (m, x) = e.split_once('e').unwrap_or((&e, "0"));
        format!("{}e{x}", trim(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("4X").is_err() && parse_size("0").is_err() && parse_size("").is_err());
        assert_eq!(human(64 << 20), "64M");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(14.3 * (1u64 << 40) as f64), "14.3 TiB");
        assert_eq!(count(12.0), "12");
        assert_eq!(count(8.0e10), "8.0e10");
    }

    #[test]
    fn durations_and_numbers_read_as_typed() {
        assert_eq!(parse_duration("10m").unwrap(), 600.0);
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert_eq!(parse_duration("1.5h").unwrap(), 5400.0);
        assert_eq!(parse_duration("250ms").unwrap(), 0.25);
        for bad in ["", "0", "-5s", "inf", "nan", "10x", "m", "ms"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds(0.0016), "1.6 ms");
        assert_eq!(seconds(1620.0), "27 min");
        assert_eq!(seconds(f64::INFINITY), "forever");
        assert_eq!(number(-1.0), "-1");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(1e-300), "1e-300");
        assert_eq!(number(-0.000001), "-1e-6");
        assert_eq!(number(1234.5), "1234.5");
        assert_eq!(approx(9_223_372_036.854_775), "9.22e9");
        assert_eq!(approx(9.999999999999999e301), "1e302");
        assert_eq!(approx(11.4110001), "11.411");
        assert_eq!(approx(0.0), "0");
    }
}
