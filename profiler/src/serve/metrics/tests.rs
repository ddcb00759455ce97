//! Exporter tests: deltas into series, label capping, the text format.

use super::*;
use crate::serve::tests::profile;

fn text(e: &Exporter) -> String {
    String::from_utf8(e.encode().expect("encode")).expect("utf-8")
}

/// The value of the sample `name{...label...}` whose labels contain `needle`.
fn value(text: &str, name: &str, needle: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| l.contains(needle))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn counters_follow_the_profiles_and_histograms_are_consistent() {
    let mut e = Exporter::new(10, 10);
    e.update(&profile(&[(0x100, &[("pipe_write", &[1_000, 3_000])])]));
    e.update(&profile(&[(0x100, &[("pipe_write", &[1_000, 3_000, 2_000_000])])]));
    let t = text(&e);
    assert_eq!(value(&t, "lockprof_lock_contentions_total", "addr=\"0x100\""), Some(3.0), "{t}");
    assert_eq!(value(&t, "lockprof_lock_wait_seconds_total", "addr=\"0x100\""), Some(0.002004));
    // Buckets are cumulative and end at the count; 2 ms is above 2^20 ns.
    assert_eq!(value(&t, "lockprof_lock_wait_seconds_bucket", "le=\"0.000001024\""), Some(1.0), "{t}");
    assert_eq!(value(&t, "lockprof_lock_wait_seconds_bucket", "le=\"0.001048576\""), Some(2.0));
    assert_eq!(value(&t, "lockprof_lock_wait_seconds_bucket", "le=\"+Inf\""), Some(3.0));
    assert_eq!(value(&t, "lockprof_lock_wait_seconds_count", "0x100"), Some(3.0));
    assert!(t.contains("lock=\"mutex @ lock100\",type=\"mutex\",mode=\"exclusive\""), "{t}");
    assert!(!t.contains("lockprof_lock_hold"), "no hold families without a hold backend");
    assert_eq!(value(&t, "lockprof_dropped_events_total", "reason=\"ringbuf_full\",kind=\"loss\""), Some(0.0), "{t}");
    assert_eq!(value(&t, "lockprof_dropped_events_total", "reason=\"holds\",kind=\"bookkeeping\""), Some(0.0));
    assert!(t.contains("lockprof_build_info{version=\""), "{t}");
    assert_eq!(value(&t, "lockprof_events_total", ""), Some(3.0));
    assert_eq!(value(&t, "lockprof_table_rows", "table=\"callers\""), Some(1.0));
    assert_eq!(value(&t, "lockprof_table_rows", "table=\"locks\""), Some(1.0));
}

#[test]
fn locks_beyond_max_series_fold_into_other_with_exact_totals() {
    let mut e = Exporter::new(2, 10);
    let hot: &[(&str, &[u64])] = &[("a", &[9_000, 9_000])];
    let warm: &[(&str, &[u64])] = &[("b", &[5_000])];
    let cold: &[(&str, &[u64])] = &[("c", &[100])];
    let colder: &[(&str, &[u64])] = &[("d", &[50, 50])];
    let p = profile(&[(0x1, hot), (0x2, warm), (0x3, cold), (0x4, colder)]);
    e.update(&p);
    let t = text(&e);
    assert_eq!(e.series_count(), 2);
    assert!(t.contains("addr=\"0x1\"") && t.contains("addr=\"0x2\""), "{t}");
    assert!(!t.contains("addr=\"0x3\"") && !t.contains("addr=\"0x4\""), "{t}");
    assert_eq!(value(&t, "lockprof_lock_contentions_total", "lock=\"[other]\""), Some(3.0));
    assert_eq!(sum(&t, "lockprof_lock_contentions_total"), 6.0, "every wait in exactly one series");
    assert!((sum(&t, "lockprof_lock_wait_seconds_total") - 23_200e-9).abs() < 1e-12);
    assert_eq!(value(&t, "lockprof_lock_series", ""), Some(2.0));
}

#[test]
fn a_lock_that_becomes_hot_takes_over_a_series_and_counters_never_go_down() {
    let mut e = Exporter::new(1, 10);
    let mut a = vec![9_000u64];
    let mut b = vec![10u64];
    let mut last = (0.0, 0.0);
    for round in 0..200 {
        a.push(9_000);
        if round > 20 {
            // b turns hot while a keeps its pace.
            b.extend([50_000u64; 10]);
        }
        e.update(&profile(&[(0xa, &[("a", &a)]), (0xb, &[("b", &b)])]));
        let t = text(&e);
        let other = value(&t, "lockprof_lock_contentions_total", "lock=\"[other]\"").unwrap_or(0.0);
        let b_series = value(&t, "lockprof_lock_contentions_total", "addr=\"0xb\"");
        assert!(other >= last.0, "[other] never decreases");
        if let Some(v) = b_series {
            assert!(round > 20, "b only gets a series once hot");
            assert!(v >= last.1, "a series never decreases");
            last.1 = v;
        }
        last.0 = other;
        assert_eq!(value(&t, "lockprof_lock_series", ""), Some(1.0));
    }
    let t = text(&e);
    assert!(t.contains("addr=\"0xb\""), "the hot lock has the series at the end: {t}");
    assert!(!t.contains("addr=\"0xa\""), "{t}");
}

#[test]
fn aged_locks_lose_their_series_and_come_back_from_zero() {
    let mut e = Exporter::new(5, 10);
    e.update(&profile(&[(0x1, &[("a", &[1_000, 1_000])])]));
    e.update(&profile(&[]));
    assert_eq!(e.series_count(), 0);
    e.update(&profile(&[(0x1, &[("a", &[1_000])])]));
    let t = text(&e);
    assert_eq!(value(&t, "lockprof_lock_contentions_total", "addr=\"0x1\""), Some(1.0), "{t}");
}

#[test]
fn label_values_are_escaped() {
    let mut p = profile(&[(0x1, &[("a", &[1_000])])]);
    p.locks[0].name = Some("we\"ird\\name\nx".into());
    let mut e = Exporter::new(5, 10);
    e.update(&p);
    let t = text(&e);
    assert!(t.contains(r#"lock="we\"ird\\name\nx""#), "{t}");
}
