//! How numbers of a comparison read: rates, changes, p-values; shared by
//! the text, Markdown and spread renderers.

use super::row::{DiffRow, Status};
use crate::report::{fmt_count, fmt_ns};

/// A rate: three significant digits below 1000 (`0.400`, `12.3`, `456`),
/// then `12.3k`, `4.56M`.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 999.5 {
        fmt_count(v.round() as u64)
    } else if a >= 99.95 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 9.995 {
        format!("{v:.1}")
    } else if a >= 0.9995 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Wait per second (`ns/s`) as a duration per second: `1.20 ms`.
pub fn fmt_wait_rate(ns_per_s: f64) -> String {
    fmt_ns(ns_per_s.max(0.0).round() as u64)
}

/// A change in percent: `+117%`, `-4.2%`, `+0.0%`.
pub fn fmt_pct(p: f64) -> String {
    if p.abs() >= 9.95 { format!("{p:+.0}%") } else { format!("{p:+.1}%") }
}

/// A p-value: `0.042`, `0.003`, `3.1e-05`.
pub fn fmt_p(p: f64) -> String {
    if p >= 0.001 { format!("{p:.3}") } else { format!("{p:.1e}") }
}

/// The change column of a rate: `gone` or `new` when a side did not see
/// the row, else the percentage (`-` when before was 0).
pub fn rate_change(row: &DiffRow, pct: Option<f64>) -> String {
    match row.status {
        Status::Gone => "gone".into(),
        Status::New => "new".into(),
        Status::Both => pct.map_or_else(|| "-".into(), fmt_pct),
    }
}

/// The change column of a per-wait value (avg, p99, hold): `-` unless both sides have it.
pub fn value_change(pct: Option<f64>) -> String {
    pct.map_or_else(|| "-".into(), fmt_pct)
}

/// `before -> after`, `-` for a side without a value.
pub fn pair(before: Option<String>, after: Option<String>, arrow: &str) -> String {
    format!("{} {arrow} {}", before.unwrap_or_else(|| "-".into()), after.unwrap_or_else(|| "-".into()))
}

/// A file list shortened: `a.r1.lockprof .. a.r5.lockprof (5 files)` past two.
pub fn files(files: &[String]) -> String {
    match files {
        [] => "-".into(),
        [one] => one.clone(),
        [a, b] => format!("{a} {b}"),
        [first, .., last] => format!("{first} .. {last} ({} files)", files.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_short() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(0.4), "0.400");
        assert_eq!(fmt_rate(4.5678), "4.57");
        assert_eq!(fmt_rate(12.34), "12.3");
        assert_eq!(fmt_rate(456.4), "456");
        assert_eq!(fmt_rate(12_345.0), "12.3k");
        assert_eq!(fmt_pct(117.3), "+117%");
        assert_eq!(fmt_pct(-4.21), "-4.2%");
        assert_eq!(fmt_pct(-100.0), "-100%");
        assert_eq!(fmt_p(0.0421), "0.042");
        assert_eq!(fmt_p(3.1e-5), "3.1e-5");
        assert_eq!(fmt_wait_rate(1_200_000.0), "1.20 ms");
        assert_eq!(files(&["a".into(), "b".into(), "c".into()]), "a .. c (3 files)");
    }
}
