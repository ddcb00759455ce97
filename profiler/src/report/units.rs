//! Human units for durations and counts.

/// Nanoseconds as `123 ns`, `1.23 us`, `45.6 ms`, `7.89 s` (three significant digits).
pub fn fmt_ns(ns: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"), (1, "ns")];
    for (scale, unit) in UNITS {
        if ns >= scale {
            if scale == 1 {
                return format!("{ns} ns");
            }
            let v = ns as f64 / scale as f64;
            return if v >= 100.0 {
                format!("{v:.0} {unit}")
            } else if v >= 10.0 {
                format!("{v:.1} {unit}")
            } else {
                format!("{v:.2} {unit}")
            };
        }
    }
    "0 ns".to_string()
}

/// Counts as `999`, `12.3k`, `4.56M`, `7.89G`.
pub fn fmt_count(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")];
    for (scale, unit) in UNITS {
        if n >= scale {
            let v = n as f64 / scale as f64;
            return if v >= 100.0 {
                format!("{v:.0}{unit}")
            } else if v >= 10.0 {
                format!("{v:.1}{unit}")
            } else {
                format!("{v:.2}{unit}")
            };
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
        assert_eq!(fmt_ns(u64::MAX), "18446744074 s");
    }

    #[test]
    fn counts() {
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(12_345), "12.3k");
        assert_eq!(fmt_count(4_560_000), "4.56M");
        assert_eq!(fmt_count(u64::MAX), "18446744074G");
    }
}
