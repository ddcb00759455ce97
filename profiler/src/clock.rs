//! The clocks lockprof correlates: CLOCK_MONOTONIC (the kernel's
//! `bpf_ktime_get_ns`, which stamps every wait) and wall-clock time, and
//! the UTC stamps incident files are named by.

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in ns (the clock of `bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into a valid, owned timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Wall-clock time, Unix ms.
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `20261201T231502.123Z`: UTC, sortable, safe in a file name.
pub fn utc_stamp(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let (y, mo, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}{mo:02}{d:02}T{:02}{:02}{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, unix_ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_dates() {
        assert_eq!(utc_stamp(0), "19700101T000000.000Z");
        // date -u -d @1796166902 -> Tue Dec  1 23:15:02 UTC 2026
        assert_eq!(utc_stamp(1_796_166_902_123), "20261201T231502.123Z");
        // A leap day.
        assert_eq!(utc_stamp(951_782_400_000), "20000229T000000.000Z");
    }

    #[test]
    fn the_monotonic_clock_moves() {
        let a = monotonic_ns();
        assert!(a > 0 && monotonic_ns() >= a);
    }
}
