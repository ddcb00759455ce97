//! Human units for durations and counts.

/// Three significant digits (or all integer digits) with a unit.
fn short(v: f64, unit: &str, sep: &str) -> String {
    if v >= 100.0 {
        format!("{v:.0}{sep}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{sep}{unit}")
    } else {
        format!("{v:.2}{sep}{unit}")
    }
}

/// Nanoseconds as `123 ns`, `1.23 us`, `45.6 ms`, `7.89 s` (three significant
/// digits); from 1000 s on as hours, days, then years, so it stays short.
pub fn fmt_ns(ns: u64) -> String {
    const HOUR: u64 = 3_600_000_000_000;
    const DAY: u64 = 24 * HOUR;
    const YEAR: u64 = 365 * DAY;
    const UNITS: [(u64, &str); 6] =
        [(YEAR, "y"), (DAY, "d"), (HOUR, "h"), (1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    for (scale, unit) in UNITS {
        // Seconds up to 999 s read better than 0.28 h.
        if ns >= scale && (scale < HOUR || ns >= 1_000_000_000_000) {
            return short(ns as f64 / scale as f64, unit, " ");
        }
    }
    format!("{ns} ns")
}

/// Counts as `999`, `12.3k`, `4.56M`, `7.89G`, up to `18.4E`.
pub fn fmt_count(n: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1_000_000_000_000_000_000, "E"),
        (1_000_000_000_000_000, "P"),
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1_000, "k"),
    ];
    for (scale, unit) in UNITS {
        if n >= scale {
            return short(n as f64 / scale as f64, unit, "");
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(fmt_ns(0), "0 ns");
        assert_eq!(fmt_ns(999), "999 ns");
        assert_eq!(fmt_ns(1_234), "1.23 us");
        assert_eq!(fmt_ns(45_600_000), "45.6 ms");
        assert_eq!(fmt_ns(789_000_000), "789 ms");
        assert_eq!(fmt_ns(7_890_000_000), "7.89 s");
        assert_eq!(fmt_ns(999_000_000_000), "999 s");
        assert_eq!(fmt_ns(7_200_000_000_000), "2.00 h");
        assert_eq!(fmt_ns(3 * 86_400_000_000_000), "3.00 d");
        assert_eq!(fmt_ns(u64::MAX), "585 y");
    }

    #[test]
    fn counts() {
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(12_345), "12.3k");
        assert_eq!(fmt_count(4_560_000), "4.56M");
        assert_eq!(fmt_count(u64::MAX), "18.4E");
    }
}
