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
    /// Stack id captured at begin.
    pub stack_id: crate::StackId,
    /// User stack id captured at begin ([`crate::USER_STACK_OFF`] without
    /// `--user-stacks`).
    pub user_stack_id: crate::StackId,
    /// The waiter's cgroup (v2 id; 0 when not recorded).
    pub cgroup_id: u64,
    /// Waiting thread.
    pub tid: u32,
    /// Waiting process.
    pub tgid: u32,
    /// `LCB_F_*` flags.
    pub flags: u32,
    /// Reserved, zero.
    pub _pad: u32,
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

/// `AggKey::flags` bit of a hold aggregate (hold times of contended
/// acquisitions, keyed like their waits); above every `LCB_F_*` bit.
pub const AGG_HOLD: u32 = 1 << 31;

/// `AggKey::flags` bit of a blame aggregate: waits on the lock, keyed by
/// the owner that made them wait (`tid`/`tgid` are the owner's, 0 for
/// readers; `stack_id` is the owner's acquire stack; a blame key has no
/// waiter and so no cgroup: its `cgroup_id` carries the owner's stack while
/// asleep (`--owner-stacks`, from `OWNER_ASLEEP`), [`crate::STACK_SKIPPED`]
/// when none was walked).
pub const AGG_BLAME: u32 = 1 << 30;

/// Slots per generation of the per-CPU aggregate cache (`AGG_CACHE` holds
/// two generations, like the two aggregate hash maps): 250 KiB per CPU,
/// under 2% of the aggregate hash maps' preallocation. A pipe storm's ~30
/// hot keys per CPU (waits, and blame keyed by owner) left 12.5% of the waits
/// on the hash-map path with 64 slots, 0.01-17% with 256 (`agg_cache_missed`:
/// which hot keys collide depends on the run's lock addresses and stacks).
pub const AGG_CACHE_SLOTS: u32 = 256;

/// An entry of the per-CPU aggregate cache: a direct-mapped array in front
/// of the aggregate hash maps. A wait whose key owns its slot is folded in
/// with array arithmetic only (no hashing of the key by the kernel, no
/// bucket lock) while the lock it waited for is held; a wait whose slot
/// another key owns goes to the hash map, and is counted in that slot's
/// `missed`. A slot belongs to the generation in `epoch`: a slot of an older
/// generation (already drained) is free.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AggSlot {
    /// The key this slot aggregates.
    pub key: AggKey,
    /// Generation (`ACTIVE[0]`) the slot was claimed in.
    pub epoch: u32,
    /// Waits of other keys this generation that found the slot taken and
    /// went to the hash map (`agg_cache_missed`, summed at each drain: a
    /// store to a line the program has just read, where a counter would
    /// cost a map lookup and stack the futex programs do not have on 6.1).
    pub missed: u32,
    /// The aggregate (count 0: free).
    pub val: AggVal,
}

/// Entries per generation of the per-CPU log of waits that missed the
/// aggregate cache (`AGG_LOG` holds two generations): 576 KiB per CPU. A
/// wait whose cache slot another key holds is appended there (one store of
/// its key, time and comm) instead of going to the hash map, whose insert of
/// a new key (a cold element and a 432-byte value zeroed on every possible
/// CPU, under a bucket lock) cost the end program ~600 ns inside the
/// critical section on the fork storm, where each child's waits are new
/// keys. A generation whose log filled past half is drained sooner (see
/// userspace's housekeeping); a full log sends waits to the hash map.
pub const AGG_LOG_ENTRIES: u32 = 4096;

/// One wait in the per-CPU log (`AGG_LOG`): userspace folds it into the
/// aggregates of its key at the drain.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AggLogEntry {
    /// The wait's aggregate key.
    pub key: AggKey,
    /// How long it waited, ns.
    pub wait_ns: u64,
    /// The comm its key takes if the key is new.
    pub comm: [u8; 16],
}

impl AggLogEntry {
    /// The entry as an aggregate of one wait.
    pub fn as_agg(&self) -> AggVal {
        let mut v = AggVal {
            count: 1,
            total_ns: self.wait_ns,
            max_ns: self.wait_ns,
            min_ns: self.wait_ns,
            comm: self.comm,
            ..AggVal::default()
        };
        let b = hist_bucket(self.wait_ns);
        if let Some(h) = v.hist.get_mut(b) {
            *h = 1;
        }
        v
    }
}

/// Index in `AGG_CACHE` of `key`'s slot in generation `epoch`.
#[inline(always)]
pub fn agg_cache_index(key: &AggKey, epoch: u32) -> u32 {
    // Fields folded into one word, then murmur3's 64-bit finalizer.
    let mut h = key.lock_addr
        ^ (u64::from(key.tid) << 32 | u64::from(key.flags))
        ^ key.stack_id.rotate_left(12)
        ^ key.user_stack_id.rotate_left(37);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    // AGG_CACHE_SLOTS is a power of two: the top bits pick the slot.
    let slot = (h >> (64 - AGG_CACHE_SLOTS.trailing_zeros())) as u32;
    (epoch & 1) * AGG_CACHE_SLOTS + slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<AggKey>(), 48);
        assert_eq!(core::mem::size_of::<AggVal>(), 432);
        assert_eq!(core::mem::size_of::<AggSlot>(), 488);
    }

    #[test]
    fn cache_index_stays_in_its_generation_and_spreads() {
        assert!(AGG_CACHE_SLOTS.is_power_of_two());
        let mut used = [false; AGG_CACHE_SLOTS as usize];
        for tid in 0..AGG_CACHE_SLOTS / 2 {
            for stack_id in 0..4u64 {
                let key = AggKey {
                    lock_addr: 0xffff_8881_0a3c_5e40,
                    tid: 1000 + tid,
                    tgid: 1000,
                    flags: 0x24,
                    stack_id: crate::stack_id_of(&[stack_id]),
                    user_stack_id: crate::USER_STACK_OFF,
                    cgroup_id: 1,
                    _pad: 0,
                };
                let even = agg_cache_index(&key, 2);
                let odd = agg_cache_index(&key, 3);
                assert!(even < AGG_CACHE_SLOTS);
                assert_eq!(odd, even + AGG_CACHE_SLOTS);
                used[even as usize] = true;
            }
        }
        // Twice as many keys of one lock as slots: most slots get one (86%
        // of them if the index spreads like a uniform hash).
        assert!(used.iter().filter(|u| **u).count() > AGG_CACHE_SLOTS as usize * 3 / 4);
    }

    #[test]
    fn a_logged_wait_is_an_aggregate_of_one() {
        let e = AggLogEntry { key: AggKey::default(), wait_ns: 1500, comm: *b"cat\0\0\0\0\0\0\0\0\0\0\0\0\0" };
        let v = e.as_agg();
        assert_eq!((v.count, v.total_ns, v.min_ns, v.max_ns), (1, 1500, 1500, 1500));
        assert_eq!(v.hist.iter().map(|&c| u64::from(c)).sum::<u64>(), 1);
        assert_eq!(v.hist[hist_bucket(1500)], 1);
        assert_eq!(&v.comm[..3], b"cat");
        assert_eq!(core::mem::size_of::<AggLogEntry>(), 72);
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
