//! Latency statistics: count, total, min, max and an HDR histogram for quantiles.

use hdrhistogram::Histogram;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Histogram precision (significant figures) for per-lock statistics.
pub const LOCK_SIGFIG: u8 = 2;
/// Histogram precision for per-caller and per-task statistics: coarser, since
/// there can be tens of thousands of them (about 1 KiB each at this precision).
pub const DETAIL_SIGFIG: u8 = 1;

/// Wait (or hold) time statistics in nanoseconds.
#[derive(Clone, Debug)]
pub struct Stats {
    count: u64,
    total_ns: u64,
    min_ns: u64,
    max_ns: u64,
    hist: Histogram<u64>,
}

impl Stats {
    /// Empty statistics whose histogram keeps `sigfig` significant figures.
    pub fn new(sigfig: u8) -> Stats {
        let sigfig = sigfig.clamp(1, 5);
        // new() only fails for sigfig > 5, excluded by the clamp; auto-resizing
        // histograms grow to any value, so record() cannot fail either.
        let hist = Histogram::new(sigfig).expect("sigfig in 1..=5 is always valid");
        Stats { count: 0, total_ns: 0, min_ns: 0, max_ns: 0, hist }
    }

    /// Records one observation.
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Records `n` observations of the same value.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        if self.count == 0 || ns < self.min_ns {
            self.min_ns = ns;
        }
        self.max_ns = self.max_ns.max(ns);
        self.count += n;
        self.total_ns = self.total_ns.saturating_add(ns.saturating_mul(n));
        // Auto-resizing histograms accept any u64; saturate rather than fail.
        let _ = self.hist.record_n(ns, n);
    }

    /// Adds pre-aggregated waits: exact count, total, min and max, and a
    /// coarse histogram (`(bucket low, bucket high, count)` triples) whose
    /// counts are recorded at each bucket's midpoint, clamped to [min, max].
    pub fn add_buckets(
        &mut self,
        count: u64,
        total_ns: u64,
        min_ns: u64,
        max_ns: u64,
        buckets: impl IntoIterator<Item = (u64, u64, u64)>,
    ) {
        if count == 0 {
            return;
        }
        for (lo, hi, n) in buckets {
            if n > 0 {
                let mid = lo / 2 + hi / 2;
                let _ = self.hist.record_n(mid.clamp(min_ns, max_ns), n);
            }
        }
        if self.count == 0 || min_ns < self.min_ns {
            self.min_ns = min_ns;
        }
        self.max_ns = self.max_ns.max(max_ns);
        self.count += count;
        self.total_ns = self.total_ns.saturating_add(total_ns);
    }

    /// Adds another set of statistics into this one.
    pub fn merge(&mut self, other: &Stats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 || other.min_ns < self.min_ns {
            self.min_ns = other.min_ns;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.count += other.count;
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
        let _ = self.hist.add(&other.hist);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// Sum of all observations.
    pub fn total_ns(&self) -> u64 {
        self.total_ns
    }
    /// Smallest observation (0 when empty).
    pub fn min_ns(&self) -> u64 {
        self.min_ns
    }
    /// Largest observation (0 when empty).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }
    /// Mean (0 when empty).
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }
    /// Value at quantile `q` in [0, 1], within the histogram's precision and
    /// clamped to the exact [min, max] (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        self.hist.value_at_quantile(q.clamp(0.0, 1.0)).clamp(self.min_ns, self.max_ns)
    }

    /// Approximate bytes of heap this holds (histogram counts).
    pub fn heap_bytes(&self) -> usize {
        self.hist.distinct_values() * std::mem::size_of::<u64>()
    }

    /// Non-empty histogram buckets as (highest value equivalent, count).
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.hist
            .iter_recorded()
            .map(|v| (self.hist.highest_equivalent(v.value_iterated_to()), v.count_at_value()))
            .collect()
    }

    fn sigfig(&self) -> u8 {
        self.hist.sigfig()
    }

    /// The histogram precision these statistics were created with.
    pub fn sigfig_of(&self) -> u8 {
        self.hist.sigfig()
    }
}

/// On-disk form of [`Stats`] (recording files).
#[derive(Serialize, Deserialize)]
struct StatsRepr {
    count: u64,
    total_ns: u64,
    min_ns: u64,
    max_ns: u64,
    sigfig: u8,
    /// (value, count) pairs of the histogram's non-empty buckets.
    buckets: Vec<(u64, u64)>,
}

impl Serialize for Stats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StatsRepr {
            count: self.count,
            total_ns: self.total_ns,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            sigfig: self.sigfig(),
            buckets: self.buckets(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Stats {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = StatsRepr::deserialize(d)?;
        let bucket_sum: u64 = r.buckets.iter().map(|&(_, c)| c).sum();
        if bucket_sum != r.count || (r.count > 0 && r.min_ns > r.max_ns) {
            return Err(serde::de::Error::custom(format!(
                "inconsistent statistics: count {} but histogram holds {bucket_sum}",
                r.count
            )));
        }
        let mut st = Stats::new(r.sigfig);
        for (v, c) in r.buckets {
            let _ = st.hist.record_n(v, c);
        }
        st.count = r.count;
        st.total_ns = r.total_ns;
        st.min_ns = r.min_ns;
        st.max_ns = r.max_ns;
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_stats_are_all_zero() {
        let s = Stats::new(LOCK_SIGFIG);
        assert_eq!((s.count(), s.total_ns(), s.min_ns(), s.max_ns()), (0, 0, 0, 0));
        assert_eq!(s.avg_ns(), 0);
        assert_eq!(s.quantile_ns(0.99), 0);
    }

    #[test]
    fn records_min_max_total_and_quantiles() {
        let mut s = Stats::new(LOCK_SIGFIG);
        for v in 1..=1000u64 {
            s.record(v * 1000);
        }
        assert_eq!(s.count(), 1000);
        assert_eq!(s.min_ns(), 1000);
        assert_eq!(s.max_ns(), 1_000_000);
        assert_eq!(s.total_ns(), 1000 * 1001 / 2 * 1000);
        assert_eq!(s.avg_ns(), 500_500);
        let p50 = s.quantile_ns(0.5);
        let p99 = s.quantile_ns(0.99);
        // Two significant figures: within 1% of the exact order statistic.
        assert!((495_000..=505_000).contains(&p50), "p50 {p50}");
        assert!((980_000..=1_000_000).contains(&p99), "p99 {p99}");
        assert_eq!(s.quantile_ns(1.0), 1_000_000);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = Stats::new(DETAIL_SIGFIG);
        let mut b = Stats::new(DETAIL_SIGFIG);
        let mut all = Stats::new(DETAIL_SIGFIG);
        for v in [5u64, 70, 900, 12_000] {
            a.record(v);
            all.record(v);
        }
        for v in [3u64, 1_000_000] {
            b.record(v);
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert_eq!(a.total_ns(), all.total_ns());
        assert_eq!(a.min_ns(), 3);
        assert_eq!(a.max_ns(), 1_000_000);
        assert_eq!(a.buckets(), all.buckets());
        let mut empty = Stats::new(DETAIL_SIGFIG);
        empty.merge(&Stats::new(DETAIL_SIGFIG));
        assert_eq!(empty.count(), 0);
    }

    #[test]
    fn serde_round_trip_keeps_quantiles() {
        let mut s = Stats::new(LOCK_SIGFIG);
        for v in [10u64, 20, 30, 4000, 5_000_000] {
            s.record_n(v, 3);
        }
        let json = serde_json::to_string(&s).expect("serialize");
        let back: Stats = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back.count(), 15);
        assert_eq!(back.total_ns(), s.total_ns());
        assert_eq!(back.quantile_ns(0.5), s.quantile_ns(0.5));
        assert_eq!(back.quantile_ns(0.99), s.quantile_ns(0.99));
    }

    #[test]
    fn inconsistent_recording_is_rejected() {
        let bad = r#"{"count":5,"total_ns":10,"min_ns":1,"max_ns":3,"sigfig":2,"buckets":[[1,1]]}"#;
        let err = serde_json::from_str::<Stats>(bad).expect_err("must reject");
        assert!(err.to_string().contains("inconsistent"), "{err}");
    }

    #[test]
    fn pre_aggregated_buckets_keep_exact_moments() {
        let mut s = Stats::new(LOCK_SIGFIG);
        s.record(50);
        s.add_buckets(4, 4_000, 500, 1_500, [(512, 767, 2), (768, 1023, 1), (1024, 1535, 1)]);
        assert_eq!(s.count(), 5);
        assert_eq!(s.total_ns(), 4_050);
        assert_eq!((s.min_ns(), s.max_ns()), (50, 1_500));
        let p50 = s.quantile_ns(0.5);
        assert!((512..=767).contains(&p50), "median in the 512-767 bucket: {p50}");
        assert!(s.quantile_ns(1.0) <= 1_500);
        s.add_buckets(0, 0, 0, 0, [(1, 1, 0)]);
        assert_eq!(s.count(), 5);
    }

    #[test]
    fn huge_values_do_not_panic() {
        let mut s = Stats::new(DETAIL_SIGFIG);
        s.record(u64::MAX / 2);
        s.record_n(u64::MAX / 2, 2);
        assert_eq!(s.count(), 3);
        assert_eq!(s.total_ns(), u64::MAX, "totals saturate");
        assert_eq!(s.max_ns(), u64::MAX / 2);
        assert_eq!(s.quantile_ns(0.99), u64::MAX / 2);
    }
}
