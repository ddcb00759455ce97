//! A sparse, capped log-linear histogram: the memory behind every
//! [`Stats`](super::Stats).
//!
//! Values fall in buckets that split each power of two into `2^sub_bits`
//! equal parts (values below `2^sub_bits` are exact), so a bucket is at most
//! `1 / 2^sub_bits` of its value wide. Only non-empty buckets are stored, each
//! as one `u64` (16-bit index, 48-bit count), sorted by index. When more than
//! `cap` buckets are in use the histogram halves its resolution (merging
//! neighbours), so its size is bounded whatever it is fed. Buckets never
//! straddle a power of two, at any resolution: counts above or below a power
//! of two are exact, which the Prometheus histograms rely on.

/// Largest resolution: 512 sub-buckets per power of two (0.2% wide).
pub const MAX_SUB_BITS: u8 = 9;
const COUNT_BITS: u32 = 48;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseHistogram {
    sub_bits: u8,
    cap: u16,
    /// `index << 48 | count`, sorted by index, counts non-zero.
    cells: Vec<u64>,
}

/// Bucket index of `v` at resolution `sb`.
fn index(v: u64, sb: u8) -> u64 {
    let sb = u32::from(sb);
    if v < (1 << sb) {
        return v;
    }
    let e = 63 - v.leading_zeros();
    let mantissa = (v >> (e - sb)) & ((1 << sb) - 1);
    (u64::from(e - sb + 1) << sb) | mantissa
}

/// Lowest and highest value of bucket `i` at resolution `sb`.
fn bounds(i: u64, sb: u8) -> (u64, u64) {
    let sb = u32::from(sb);
    if i < (1 << sb) {
        return (i, i);
    }
    let e = (i >> sb) as u32 + sb - 1;
    let mantissa = i & ((1 << sb) - 1);
    let low = (1u64 << e) | (mantissa << (e - sb));
    (low, low + ((1u64 << (e - sb)) - 1))
}

fn cell(i: u64, n: u64) -> u64 {
    (i << COUNT_BITS) | n.min(COUNT_MASK)
}

fn cell_index(c: u64) -> u64 {
    c >> COUNT_BITS
}

fn cell_count(c: u64) -> u64 {
    c & COUNT_MASK
}

impl SparseHistogram {
    /// An empty histogram of resolution `sub_bits` (at most [`MAX_SUB_BITS`])
    /// keeping at most `cap` buckets (or one per power of two in use, when
    /// that is more).
    pub fn new(sub_bits: u8, cap: u16) -> Self {
        SparseHistogram { sub_bits: sub_bits.min(MAX_SUB_BITS), cap: cap.max(1), cells: Vec::new() }
    }

    /// Current resolution (sub-bucket bits).
    #[cfg(test)]
    pub fn sub_bits(&self) -> u8 {
        self.sub_bits
    }

    /// Adds `n` observations of `v`.
    pub fn record_n(&mut self, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = index(v, self.sub_bits);
        match self.cells.binary_search_by_key(&i, |&c| cell_index(c)) {
            Ok(at) => {
                let c = self.cells[at];
                self.cells[at] = cell(i, cell_count(c).saturating_add(n));
            }
            Err(at) => {
                // Grow a little at a time: thousands of these live at once.
                if self.cells.len() == self.cells.capacity() {
                    self.cells.reserve_exact(4);
                }
                self.cells.insert(at, cell(i, n));
                if self.cells.len() > usize::from(self.cap) {
                    self.coarsen_to(self.sub_bits.saturating_sub(1));
                }
            }
        }
    }

    /// Lowers the resolution to `sb`, merging buckets (no-op if not finer).
    fn coarsen_to(&mut self, sb: u8) {
        while self.sub_bits > sb || (self.cells.len() > usize::from(self.cap) && self.sub_bits > 0) {
            let to = self.sub_bits - 1;
            let mut out: Vec<u64> = Vec::with_capacity(self.cells.len());
            for &c in &self.cells {
                let i = index(bounds(cell_index(c), self.sub_bits).0, to);
                match out.last_mut() {
                    Some(last) if cell_index(*last) == i => {
                        *last = cell(i, cell_count(*last).saturating_add(cell_count(c)))
                    }
                    _ => out.push(cell(i, cell_count(c))),
                }
            }
            self.cells = out;
            self.sub_bits = to;
        }
        self.cells.shrink_to_fit();
    }

    /// Adds every observation of `other`, at the coarser of the two resolutions.
    pub fn merge(&mut self, other: &SparseHistogram) {
        if other.cells.is_empty() {
            return;
        }
        if other.sub_bits < self.sub_bits {
            self.coarsen_to(other.sub_bits);
        }
        for (low, _, n) in other.buckets() {
            self.record_n(low, n);
        }
    }

    /// What `self` holds beyond `earlier`, an earlier state of the same
    /// histogram, bucket by bucket at `self`'s resolution (a histogram only
    /// ever coarsens, so `earlier` is brought to it). None when `earlier`
    /// cannot be an earlier state (finer than `self` after coarsening, or a
    /// bucket holding more than now): the row was dropped and made again.
    pub fn since(&self, earlier: &SparseHistogram) -> Option<SparseHistogram> {
        let mut base = earlier.clone();
        if base.sub_bits > self.sub_bits {
            base.coarsen_to(self.sub_bits);
        }
        if base.sub_bits != self.sub_bits {
            return None;
        }
        let mut cells = Vec::with_capacity(self.cells.len());
        let mut old = base.cells.iter().peekable();
        for &c in &self.cells {
            let i = cell_index(c);
            while old.next_if(|&&o| cell_index(o) < i).is_some() {}
            let before = old.next_if(|&&o| cell_index(o) == i).map_or(0, |&o| cell_count(o));
            let n = cell_count(c).checked_sub(before)?;
            if n > 0 {
                cells.push(cell(i, n));
            }
        }
        if old.next().is_some() {
            // A bucket that emptied: not an earlier state.
            return None;
        }
        Some(SparseHistogram { sub_bits: self.sub_bits, cap: self.cap, cells })
    }

    /// Non-empty buckets as (lowest value, highest value, count), ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.cells.iter().map(|&c| {
            let (lo, hi) = bounds(cell_index(c), self.sub_bits);
            (lo, hi, cell_count(c))
        })
    }

    /// Observations held.
    pub fn count(&self) -> u64 {
        self.cells.iter().map(|&c| cell_count(c)).sum()
    }

    /// The bucket holding the observation of rank `ceil(q * count)`, as its
    /// highest value, like HDR histograms (None when empty).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (_, hi, n) in self.buckets() {
            seen += n;
            if seen >= rank {
                return Some(hi);
            }
        }
        self.buckets().last().map(|b| b.1)
    }

    /// Heap bytes in use.
    pub fn heap_bytes(&self) -> usize {
        self.cells.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_once_and_never_straddle_a_power_of_two() {
        for sb in [0u8, 1, 4, 7, MAX_SUB_BITS] {
            let mut prev_hi = None;
            for i in 0..=index(u64::MAX, sb) {
                let (lo, hi) = bounds(i, sb);
                if let Some(p) = prev_hi {
                    assert_eq!(lo, p + 1, "contiguous at sb {sb}, index {i}");
                }
                assert_eq!(index(lo, sb), i);
                assert_eq!(index(hi, sb), i);
                assert_eq!(63 - lo.max(1).leading_zeros(), 63 - hi.max(1).leading_zeros(), "one power of two");
                prev_hi = Some(hi);
            }
        }
        assert_eq!(index(u64::MAX, MAX_SUB_BITS) >> 16, 0, "indices fit 16 bits");
    }

    #[test]
    fn since_is_what_was_added() {
        let mut earlier = SparseHistogram::new(4, 8);
        for v in [3u64, 100, 100, 5_000] {
            earlier.record_n(v, 1);
        }
        let mut now = earlier.clone();
        let mut added = SparseHistogram::new(4, 8);
        for v in [100u64, 7_000, 1 << 30] {
            now.record_n(v, 2);
            added.record_n(v, 2);
        }
        assert_eq!(now.since(&earlier), Some(added));
        // Coarsened since: the earlier state is brought to the new resolution.
        for v in (0..40).map(|k| 1u64 << k) {
            now.record_n(v, 1);
        }
        assert!(now.sub_bits() < earlier.sub_bits());
        let d = now.since(&earlier).expect("an earlier state");
        assert_eq!(d.count(), now.count() - earlier.count());
        // Not an earlier state: a bucket shrank.
        let mut other = SparseHistogram::new(4, 8);
        other.record_n(5, 1);
        assert_eq!(other.since(&now), None);
    }

    #[test]
    fn width_is_bounded_by_the_resolution() {
        let h = SparseHistogram::new(4, 64);
        for v in [17u64, 1000, 123_456, 9_876_543_210] {
            let (lo, hi) = bounds(index(v, h.sub_bits()), h.sub_bits());
            assert!(lo <= v && v <= hi);
            assert!((hi - lo) as f64 <= v as f64 / 16.0, "{v}: {lo}..{hi}");
        }
    }

    #[test]
    fn the_cap_halves_resolution_and_keeps_counts() {
        let mut h = SparseHistogram::new(7, 64);
        for v in 1..=100_000u64 {
            h.record_n(v * 37, 1);
        }
        assert!(h.buckets().count() <= 64, "{} buckets", h.buckets().count());
        assert!(h.sub_bits() < 7);
        assert_eq!(h.count(), 100_000);
        let p50 = h.quantile(0.5).expect("p50") as f64;
        let exact = 50_000.0 * 37.0;
        assert!((p50 - exact).abs() / exact < 1.0 / (1 << h.sub_bits()) as f64, "p50 {p50}");
    }

    #[test]
    fn merge_takes_the_coarser_resolution() {
        let mut fine = SparseHistogram::new(7, 1024);
        let mut coarse = SparseHistogram::new(2, 1024);
        for v in [100u64, 1000, 10_000] {
            fine.record_n(v, 2);
            coarse.record_n(v, 1);
        }
        fine.merge(&coarse);
        assert_eq!(fine.sub_bits(), 2);
        assert_eq!(fine.count(), 9);
        // Counts below and above a power of two stay where they were.
        let below_1024: u64 = fine.buckets().filter(|b| b.1 < 1024).map(|b| b.2).sum();
        assert_eq!(below_1024, 6);
    }
}
