//! The in-kernel aggregate maps' key and value, and their histogram buckets.

/// Buckets of the in-kernel wait histogram: two per power of two
/// ([`hist_bucket`]), up to 2^47 ns (~39 hours).
pub const HIST_BUCKETS: usize = 96;

/// Histogram bucket of `ns`: `2 * floor(log2 ns) + (the bit below the top
/// bit)`, so 0 and 1 map to themselves, clamped to the last bucket.
/// Branch-light on purpose: older verifiers (6.1) mis-track a dead
/// `ns < 2` early return and reject the map-value index that follows.
#[inline(always)]
pub fn hist_bucket(ns: u64) -> usize {
    // floor(log2) without a count-leading-zeros instruction (BPF has none).
    let mut v = ns;
    let mut log = 0u32;
    if v >> 32 != 0 {
        v >>= 32;
        log += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        log += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        log += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        log += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        log += 2;
    }
    if v >> 1 != 0 {
        log += 1;
    }
    let half = (ns >> log.saturating_sub(1)) & 1;
    let idx = 2 * log as usize + half as usize;
    if idx >= HIST_BUCKETS { HIST_BUCKETS - 1 } else { idx }
}

/// Smallest value of bucket `idx` (inverse of [`hist_bucket`]).
pub const fn hist_bucket_low(idx: usize) -> u64 {
    if idx < 2 {
        return idx as u64;
    }
    let log = (idx / 2) as u32;
    let half = (idx % 2) as u64;
    (1u64 << log) | (half << (log - 1))
}

/// Key of the aggregate maps.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggKey {
    /// Lock address.
    pub lock_addr: u64,
    /// Waiting thread.
    pub tid: u32,
    /// Waiting process.
    pub tgid: u32,
    /// `LCB_F_*` flags.
    pub flags: u32,
    /// Stack id captured at begin.
    pub stack_id: i32,
}

/// Per-CPU value of the aggregate maps.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AggVal {
    /// Waits.
    pub count: u64,
    /// Sum of waits, ns.
    pub total_ns: u64,
    /// Longest wait.
    pub max_ns: u64,
    /// Shortest wait (meaningful when count > 0).
    pub min_ns: u64,
    /// comm of the thread when the key was created.
    pub comm: [u8; 16],
    /// Wait histogram, [`hist_bucket`] indexed.
    pub hist: [u32; HIST_BUCKETS],
}

impl Default for AggVal {
    fn default() -> Self {
        AggVal { count: 0, total_ns: 0, max_ns: 0, min_ns: 0, comm: [0; 16], hist: [0; HIST_BUCKETS] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<AggKey>(), 24);
        assert_eq!(core::mem::size_of::<AggVal>(), 432);
    }

    #[test]
    fn histogram_buckets_are_monotonic_and_invertible() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1), 1);
        assert_eq!(hist_bucket(2), 2);
        assert_eq!(hist_bucket(3), 3);
        assert_eq!(hist_bucket(4), 4);
        assert_eq!(hist_bucket(6), 5);
        assert_eq!(hist_bucket(7), 5);
        assert_eq!(hist_bucket(8), 6);
        let mut prev = 0;
        for shift in 0..47 {
            for v in [1u64 << shift, (1u64 << shift) + (1u64 << shift) / 2, (2u64 << shift) - 1] {
                let b = hist_bucket(v);
                assert!(b >= prev, "{v}");
                prev = b;
                assert!(hist_bucket_low(b) <= v, "{v} below its bucket start {}", hist_bucket_low(b));
                if b + 1 < HIST_BUCKETS {
                    assert!(hist_bucket_low(b + 1) > v, "{v} not below next bucket");
                }
            }
        }
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
    }
}
