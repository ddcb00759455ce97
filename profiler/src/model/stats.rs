//! Latency statistics: count, total, min, max and a sparse, capped
//! histogram for quantiles (a few hundred bytes per caller or task at most,
//! whatever the spread of values).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::histogram::SparseHistogram;

/// Histogram precision (significant figures) for per-lock statistics:
/// buckets under 1% wide, at most 512 of them (4 KiB).
pub const LOCK_SIGFIG: u8 = 2;
/// Histogram precision for per-caller and per-task statistics: coarser, since
/// there can be tens of thousands of them (buckets at most 1/16 of their
/// value wide, at most 48 of them: 384 bytes).
pub const DETAIL_SIGFIG: u8 = 1;

/// (sub-bucket bits, bucket cap) of a precision.
fn shape(sigfig: u8) -> (u8, u16) {
    match sigfig {
        0 | 1 => (4, 48),
        2 => (7, 512),
        _ => (9, 1024),
    }
}

/// Wait (or hold) time statistics in nanoseconds.
#[derive(Clone, Debug)]
pub struct Stats {
    count: u64,
    total_ns: u64,
    min_ns: u64,
    max_ns: u64,
    sigfig: u8,
    hist: SparseHistogram,
}

impl Stats {
    /// Empty statistics whose histogram keeps about `sigfig` significant figures.
    pub fn new(sigfig: u8) -> Stats {
        let sigfig = sigfig.clamp(1, 3);
        let (sub_bits, cap) = shape(sigfig);
        Stats { count: 0, total_ns: 0, min_ns: 0, max_ns: 0, sigfig, hist: SparseHistogram::new(sub_bits, cap) }
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
        self.hist.record_n(ns, n);
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
                self.hist.record_n(mid.clamp(min_ns, max_ns), n);
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
        self.hist.merge(&other.hist);
    }

    /// The observations added since `earlier`, an earlier state of these
    /// statistics: exact count, total and buckets; the minimum and maximum
    /// exact where they moved, else the bounds of the lowest and highest
    /// bucket that grew. All of `self` when `earlier` cannot be an earlier
    /// state (the row was dropped and made again).
    pub fn since(&self, earlier: &Stats) -> Stats {
        if earlier.count == 0 {
            return self.clone();
        }
        let grown = (self.count >= earlier.count && self.total_ns >= earlier.total_ns)
            .then(|| self.hist.since(&earlier.hist))
            .flatten();
        let Some(hist) = grown else { return self.clone() };
        let mut out = Stats { count: 0, total_ns: 0, min_ns: 0, max_ns: 0, sigfig: self.sigfig, hist };
        let (Some(lo), Some(hi)) = (out.hist.buckets().next(), out.hist.buckets().last()) else {
            out.hist = SparseHistogram::new(shape(self.sigfig).0, shape(self.sigfig).1);
            return out;
        };
        out.count = self.count - earlier.count;
        out.total_ns = self.total_ns - earlier.total_ns;
        out.min_ns = if self.min_ns < earlier.min_ns { self.min_ns } else { lo.0.clamp(self.min_ns, self.max_ns) };
        out.max_ns = if self.max_ns > earlier.max_ns { self.max_ns } else { hi.1.clamp(self.min_ns, self.max_ns) };
        out
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
        self.hist.quantile(q).unwrap_or(0).clamp(self.min_ns, self.max_ns)
    }

    /// Approximate bytes of heap this holds (histogram buckets).
    pub fn heap_bytes(&self) -> usize {
        self.hist.heap_bytes()
    }

    /// Non-empty histogram buckets as (highest value in the bucket, count).
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.hist.buckets().map(|(_, hi, n)| (hi, n)).collect()
    }

    /// Observations at or below `ns`, exact when `ns + 1` is a power of two
    /// (buckets never straddle one).
    pub fn count_at_or_below(&self, ns: u64) -> u64 {
        self.hist.buckets().take_while(|b| b.1 <= ns).map(|b| b.2).sum()
    }

    fn sigfig(&self) -> u8 {
        self.sigfig
    }

    /// The histogram precision these statistics were created with.
    pub fn sigfig_of(&self) -> u8 {
        self.sigfig
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
            st.hist.record_n(v, c);
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
    fn since_keeps_exact_moments_of_what_was_added() {
        let mut earlier = Stats::new(LOCK_SIGFIG);
        for ns in [1_000u64, 2_000, 3_000] {
            earlier.record(ns);
        }
        let mut now = earlier.clone();
        let mut added = Stats::new(LOCK_SIGFIG);
        for ns in [500u64, 2_000, 200_000_000] {
            now.record(ns);
            added.record(ns);
        }
        let d = now.since(&earlier);
        assert_eq!((d.count(), d.total_ns(), d.min_ns(), d.max_ns()), (3, 200_002_500, 500, 200_000_000));
        assert_eq!(d.buckets(), added.buckets());
        assert_eq!(d.quantile_ns(0.5), added.quantile_ns(0.5));
        // Nothing added: empty.
        assert_eq!(now.since(&now).count(), 0);
        assert_eq!(now.since(&now).max_ns(), 0);
        // Not an earlier state (a reset row): all of it.
        assert_eq!(earlier.since(&now).count(), earlier.count());
        // Neither bound moved: the bounds of the buckets that grew.
        let mut later = now.clone();
        later.record(2_500);
        let d = later.since(&now);
        assert_eq!(d.count(), 1);
        assert!(d.min_ns() <= 2_500 && d.max_ns() >= 2_500 && d.max_ns() - d.min_ns() < 50, "{d:?}");
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

    #[test]
    fn detail_statistics_stay_small_whatever_the_spread() {
        let mut s = Stats::new(DETAIL_SIGFIG);
        for i in 0..100_000u64 {
            s.record(100 + (i * 7_919) % 50_000_000);
        }
        assert!(s.heap_bytes() <= 48 * 8, "{} bytes", s.heap_bytes());
        assert_eq!(s.count(), 100_000);
        let p50 = s.quantile_ns(0.5) as f64;
        assert!((p50 - 25_000_000.0).abs() < 25_000_000.0 * 0.3, "p50 {p50}");
    }

    #[test]
    fn counts_below_powers_of_two_are_exact() {
        let mut s = Stats::new(DETAIL_SIGFIG);
        for v in [1_000u64, 1_023, 1_024, 1_025, 4_000, 70_000] {
            s.record(v);
        }
        assert_eq!(s.count_at_or_below(1_023), 2);
        assert_eq!(s.count_at_or_below(4_095), 5);
        assert_eq!(s.count_at_or_below(u64::MAX), 6);
    }

    #[test]
    fn recordings_written_with_hdr_histograms_still_load() {
        // The format is unchanged: (bucket's highest value, count) pairs.
        let old = r#"{"count":4,"total_ns":4100,"min_ns":100,"max_ns":2000,"sigfig":2,"buckets":[[100,1],[1003,2],[2007,1]]}"#;
        let s: Stats = serde_json::from_str(old).expect("old recording");
        assert_eq!((s.count(), s.total_ns(), s.max_ns()), (4, 4100, 2000));
        let p50 = s.quantile_ns(0.5);
        assert!((990..=1010).contains(&p50), "{p50}");
    }
}
