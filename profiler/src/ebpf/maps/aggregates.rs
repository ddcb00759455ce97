//! Draining the in-kernel aggregates (aggregate mode).
//!
//! The programs write into generation `ACTIVE[0]`: the hash map and the
//! per-CPU cache half its low bit names. To drain without losing a single
//! wait, userspace moves `ACTIVE` to the next generation, waits until
//! programs that read the old value have finished (they run for
//! microseconds; the grace period is milliseconds), then reads and deletes
//! every key of the now-inactive hash map and reads the cache slots claimed
//! in the old generation. Cache slots need no deleting: a slot of an older
//! generation counts as free in the programs.

use std::{collections::HashMap, os::fd::AsFd};

use aya::maps::PerCpuValues;
use aya::maps::{Array, IterableMap, MapData, PerCpuArray, PerCpuHashMap};
use profiler_common::{
    AGG_CACHE_SLOTS, AGG_LOG_ENTRIES, AggKey, AggLogEntry, AggSlot, AggVal, HIST_BUCKETS, names::map,
};

use super::batch;
use crate::ebpf::LoadError;

/// The aggregate maps, the cache and the generation selector.
pub struct AggMaps {
    maps: [PerCpuHashMap<MapData, AggKey, AggVal>; 2],
    cache: PerCpuArray<MapData, AggSlot>,
    log: PerCpuArray<MapData, AggLogEntry>,
    log_len: PerCpuArray<MapData, u32>,
    active: Array<MapData, u32>,
    epoch: u32,
    /// The most entries one CPU logged in the last generation drained.
    log_most: usize,
    cache_missed: u64,
    /// Possible CPUs (the per-CPU values of a key); 0 where unknown, which
    /// drains key by key.
    cpus: usize,
    /// The batch reads' key and value buffers, kept between drains (a
    /// drain's megabytes would otherwise be faulted in anew each time).
    bufs: (Vec<u8>, Vec<u8>),
    /// Whether the kernel refused a batch read of a per-CPU hash map
    /// (before 5.6): its keys one by one from then on.
    per_key: bool,
    /// Whether the kernel refused a batch read of a per-CPU array (before
    /// 5.13): the cache slots and log entries one by one from then on.
    arrays_per_key: bool,
}

/// Adds `v` (one CPU's or one source's aggregate) into `out`.
pub fn merge_into(out: &mut AggVal, v: &AggVal) {
    if v.count == 0 {
        return;
    }
    if out.count == 0 || v.min_ns < out.min_ns {
        out.min_ns = v.min_ns;
    }
    out.max_ns = out.max_ns.max(v.max_ns);
    out.count += v.count;
    out.total_ns = out.total_ns.saturating_add(v.total_ns);
    if out.comm[0] == 0 {
        out.comm = v.comm;
    }
    for i in 0..HIST_BUCKETS {
        out.hist[i] = out.hist[i].saturating_add(v.hist[i]);
    }
}

/// Sums per-CPU values of one key.
pub fn merge_cpus<'a>(values: impl IntoIterator<Item = &'a AggVal>) -> AggVal {
    let mut out = AggVal::default();
    for v in values {
        merge_into(&mut out, v);
    }
    out
}

/// The cache slots of generation `epoch` among `slots` (every CPU's value
/// of the generation's half), merged by key, and the waits of other keys
/// they sent to the hash map (`agg_cache_missed`).
pub fn cached_of_epoch<'a>(epoch: u32, slots: impl IntoIterator<Item = &'a AggSlot>) -> (HashMap<AggKey, AggVal>, u64) {
    let mut out: HashMap<AggKey, AggVal> = HashMap::new();
    let mut missed = 0u64;
    for s in slots {
        if s.epoch == epoch && s.val.count != 0 {
            merge_into(out.entry(s.key).or_default(), &s.val);
            missed += u64::from(s.missed);
        }
    }
    (out, missed)
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> LoadError {
    move |e| LoadError::Map { name, detail: e.to_string() }
}

impl AggMaps {
    pub(crate) fn new(
        a: PerCpuHashMap<MapData, AggKey, AggVal>,
        b: PerCpuHashMap<MapData, AggKey, AggVal>,
        cache: PerCpuArray<MapData, AggSlot>,
        log: PerCpuArray<MapData, AggLogEntry>,
        log_len: PerCpuArray<MapData, u32>,
        active: Array<MapData, u32>,
    ) -> AggMaps {
        let cpus = aya::util::nr_cpus().unwrap_or(0);
        AggMaps {
            maps: [a, b],
            cache,
            log,
            log_len,
            active,
            epoch: 0,
            log_most: 0,
            cache_missed: 0,
            cpus,
            bufs: (Vec::new(), Vec::new()),
            per_key: cpus == 0,
            arrays_per_key: cpus == 0,
        }
    }

    /// Moves the programs to the next generation; returns the one to drain.
    pub fn flip(&mut self) -> Result<u32, LoadError> {
        let old = self.epoch;
        let new = old.wrapping_add(1);
        self.active.set(0, new, 0).map_err(map_err(map::ACTIVE))?;
        self.epoch = new;
        Ok(old)
    }

    /// The generation the programs write.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Waits whose cache slot another key held (`agg_cache_missed`), in the
    /// generations drained so far: the cache slots count them, not the
    /// programs' counters.
    pub fn cache_missed(&self) -> u64 {
        self.cache_missed
    }

    /// Reads generation `epoch` (no longer written): deletes every key of its
    /// hash map, reads its cache slots, appends their values (a key may
    /// appear twice, from the map and from a cache slot: consumers add).
    /// When the kernel refuses an operation midway, what was read (and
    /// deleted) so far is still appended; the rest stays in the maps for a
    /// later drain.
    pub fn drain(&mut self, epoch: u32, out: &mut Vec<(AggKey, AggVal)>) -> Result<(), LoadError> {
        let name = if epoch & 1 == 0 { map::AGG_A } else { map::AGG_B };
        let hashed = if self.per_key { Err(None) } else { self.drain_batched(epoch, out) };
        match hashed {
            Ok(()) => {}
            // The first call failed: nothing was read or deleted.
            Err(None) => self.drain_per_key(epoch, out)?,
            Err(Some(e)) => return Err(LoadError::Map { name, detail: e.to_string() }),
        }
        self.drain_log(epoch, out)?;
        let half = (epoch & 1) * AGG_CACHE_SLOTS;
        if !self.arrays_per_key {
            match self.drain_cache_batched(epoch, half, out) {
                Ok(()) => return Ok(()),
                Err(e) if refused(&e) => self.refuse_array_batches(&e),
                Err(e) => return Err(LoadError::Map { name: map::AGG_CACHE, detail: e.to_string() }),
            }
        }
        for i in half..half + AGG_CACHE_SLOTS {
            let per_cpu = self.cache.get(&i, 0).map_err(map_err(map::AGG_CACHE))?;
            let (cached, missed) = cached_of_epoch(epoch, per_cpu.iter());
            out.extend(cached);
            self.cache_missed += missed;
        }
        Ok(())
    }

    /// The most entries one CPU wrote to its log in the last generation
    /// drained (of [`AGG_LOG_ENTRIES`]).
    pub fn log_most(&self) -> usize {
        self.log_most
    }

    /// The per-CPU log of generation `epoch`: its entry counts are read and
    /// zeroed first (the programs write the other generation's), then its
    /// entries. Counts that could not be zeroed leave the entries unread
    /// (they would be read twice otherwise): an error.
    fn drain_log(&mut self, epoch: u32, out: &mut Vec<(AggKey, AggVal)>) -> Result<(), LoadError> {
        let half = epoch & 1;
        let lens: Vec<usize> = self
            .log_len
            .get(&half, 0)
            .map_err(map_err(map::AGG_LOG_LEN))?
            .iter()
            .map(|&n| (n as usize).min(AGG_LOG_ENTRIES as usize))
            .collect();
        let most = lens.iter().copied().max().unwrap_or(0);
        self.log_most = most;
        if most == 0 {
            return Ok(());
        }
        let zeros = PerCpuValues::try_from(vec![0u32; lens.len()])
            .map_err(|e| LoadError::Map { name: map::AGG_LOG_LEN, detail: e.to_string() })?;
        self.log_len.set(half, zeros, 0).map_err(map_err(map::AGG_LOG_LEN))?;
        let cpus = lens.len();
        let entries = |n: usize, values: &[u8], out: &mut Vec<(AggKey, AggVal)>| {
            let stride = batch::per_cpu_stride(size_of::<AggLogEntry>());
            for i in 0..n {
                for (c, &len) in lens.iter().enumerate() {
                    if i < len {
                        let at = (i * cpus + c) * stride;
                        // SAFETY: AggLogEntry is repr(C) POD (any bit pattern
                        // is valid); `values` holds `n` entries of `cpus`
                        // strided values, and read_unaligned copes with
                        // alignment.
                        let e = unsafe {
                            std::ptr::read_unaligned(
                                values[at..at + size_of::<AggLogEntry>()].as_ptr() as *const AggLogEntry
                            )
                        };
                        out.push((e.key, e.as_agg()));
                    }
                }
            }
        };
        let first = half * AGG_LOG_ENTRIES;
        if !self.arrays_per_key {
            let read = batch::lookup_array_range(
                self.log.map().fd().as_fd(),
                first,
                most,
                size_of::<AggLogEntry>(),
                self.cpus,
                &mut self.bufs,
            );
            match read {
                Ok(n) => {
                    entries(n, &self.bufs.1, out);
                    return Ok(());
                }
                // Nothing was read: the entries are read one by one below.
                Err(e) if refused(&e) => self.refuse_array_batches(&e),
                Err(e) => return Err(LoadError::Map { name: map::AGG_LOG, detail: e.to_string() }),
            }
        }
        for i in 0..most {
            let per_cpu = self.log.get(&(first + i as u32), 0).map_err(map_err(map::AGG_LOG))?;
            for (c, e) in per_cpu.iter().enumerate() {
                if i < lens.get(c).copied().unwrap_or(0) {
                    out.push((e.key, e.as_agg()));
                }
            }
        }
        Ok(())
    }

    /// The kernel refused a batch read of a per-CPU array (`e`): the arrays
    /// are read one by one from then on.
    fn refuse_array_batches(&mut self, e: &std::io::Error) {
        log::debug!("batch reads of per-CPU arrays refused ({e}): reading the cache and log slot by slot");
        self.arrays_per_key = true;
    }

    /// The cache slots of `epoch` (from `half`) in one batch read; an
    /// error has read nothing.
    fn drain_cache_batched(&mut self, epoch: u32, half: u32, out: &mut Vec<(AggKey, AggVal)>) -> std::io::Result<()> {
        let cpus = self.cpus;
        let n = batch::lookup_array_range(
            self.cache.map().fd().as_fd(),
            half,
            AGG_CACHE_SLOTS as usize,
            size_of::<AggSlot>(),
            cpus,
            &mut self.bufs,
        )?;
        let stride = batch::per_cpu_stride(size_of::<AggSlot>());
        let values = &self.bufs.1;
        let mut slots = Vec::with_capacity(cpus);
        for i in 0..n {
            slots.clear();
            slots.extend((0..cpus).map(|c| {
                let at = (i * cpus + c) * stride;
                // SAFETY: AggSlot is repr(C) POD (any bit pattern is valid);
                // `values` holds `n` entries of `cpus` strided values
                // (`lookup_array_range`), and read_unaligned copes with
                // alignment.
                unsafe { std::ptr::read_unaligned(values[at..at + size_of::<AggSlot>()].as_ptr() as *const AggSlot) }
            }));
            let (cached, missed) = cached_of_epoch(epoch, slots.iter());
            out.extend(cached);
            self.cache_missed += missed;
        }
        Ok(())
    }

    /// The hash map of `epoch` in batches. `Err(None)`: the kernel refused
    /// the first batch (nothing read; `per_key` is set).
    fn drain_batched(&mut self, epoch: u32, out: &mut Vec<(AggKey, AggVal)>) -> Result<(), Option<std::io::Error>> {
        let hashed = &self.maps[(epoch & 1) as usize];
        let cpus = self.cpus;
        let read = batch::lookup_and_delete_all(
            hashed.map().fd().as_fd(),
            size_of::<AggKey>(),
            size_of::<AggVal>(),
            cpus,
            &mut self.bufs,
            |keys, values, n| {
                out.extend((0..n).map(|i| batch_entry(keys, values, cpus, i)).filter(|(_, v)| v.count > 0))
            },
        );
        match read {
            Ok(_) => Ok(()),
            Err(e) if refused(&e) => {
                log::debug!("batch reads refused ({e}): draining the aggregate maps key by key");
                self.per_key = true;
                Err(None)
            }
            Err(e) => Err(Some(e)),
        }
    }

    /// The hash map of `epoch` key by key (kernels without batch reads).
    fn drain_per_key(&mut self, epoch: u32, out: &mut Vec<(AggKey, AggVal)>) -> Result<(), LoadError> {
        let name = if epoch & 1 == 0 { map::AGG_A } else { map::AGG_B };
        let hashed = &mut self.maps[(epoch & 1) as usize];
        let keys: Vec<AggKey> = hashed.keys().collect::<Result<_, _>>().map_err(map_err(name))?;
        for k in keys {
            let v = hashed.get(&k, 0).map_err(map_err(name))?;
            hashed.remove(&k).map_err(map_err(name))?;
            let v = merge_cpus(v.iter());
            if v.count > 0 {
                out.push((k, v));
            }
        }
        Ok(())
    }
}

/// The kernel's ENOTSUPP (524), which a map type without batch operations
/// returns; not in libc.
const ENOTSUPP: i32 = 524;

/// Whether `e` is the kernel refusing a batch operation it lacks (for the
/// map type, or at all): per-CPU hash maps have them from 5.6, per-CPU
/// arrays from 5.13.
fn refused(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP | ENOTSUPP))
}

/// Entry `i` of a batch read: its key, and its per-CPU values summed.
fn batch_entry(keys: &[u8], values: &[u8], cpus: usize, i: usize) -> (AggKey, AggVal) {
    let ks = size_of::<AggKey>();
    let stride = batch::per_cpu_stride(size_of::<AggVal>());
    // SAFETY: AggKey and AggVal are repr(C) POD (any bit pattern is valid);
    // the slices hold `n > i` keys and `n * cpus` strided values (the
    // caller's contract with `lookup_and_delete_all`), and read_unaligned
    // copes with alignment.
    let key = unsafe { std::ptr::read_unaligned(keys[i * ks..(i + 1) * ks].as_ptr() as *const AggKey) };
    let mut val = AggVal::default();
    for c in 0..cpus {
        let at = (i * cpus + c) * stride;
        let bytes = &values[at..at + size_of::<AggVal>()];
        // SAFETY: as above.
        let v = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const AggVal) };
        merge_into(&mut val, &v);
    }
    (key, val)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cpu_values_merge() {
        let mut a = AggVal { count: 2, total_ns: 30, max_ns: 20, min_ns: 10, ..AggVal::default() };
        a.hist[profiler_common::hist_bucket(10)] += 1;
        a.hist[profiler_common::hist_bucket(20)] += 1;
        a.comm[..3].copy_from_slice(b"cat");
        let mut b = AggVal { count: 1, total_ns: 5, max_ns: 5, min_ns: 5, ..AggVal::default() };
        b.hist[profiler_common::hist_bucket(5)] += 1;
        let idle = AggVal::default();
        let m = merge_cpus([&idle, &a, &b]);
        assert_eq!((m.count, m.total_ns, m.min_ns, m.max_ns), (3, 35, 5, 20));
        assert_eq!(m.hist.iter().map(|&c| u64::from(c)).sum::<u64>(), 3);
        assert_eq!(&m.comm[..3], b"cat");
        assert_eq!(merge_cpus([&idle]).count, 0);
    }

    #[test]
    fn cache_slots_count_only_in_their_generation() {
        let key = |tid| AggKey {
            lock_addr: 0xffff_8881_0000_1000,
            tid,
            tgid: 7,
            flags: 0x20,
            stack_id: 3,
            user_stack_id: profiler_common::USER_STACK_OFF,
            cgroup_id: 0,
            _pad: 0,
        };
        let slot = |tid, epoch, count, missed| AggSlot {
            key: key(tid),
            epoch,
            missed,
            val: AggVal { count, total_ns: count * 100, max_ns: 100, min_ns: 100, ..AggVal::default() },
        };
        // Two CPUs with the same key in generation 4, one stale slot of
        // generation 2 (drained two flips ago, its misses counted then) and
        // one free slot.
        let slots = [slot(1, 4, 3, 7), slot(1, 4, 2, 1), slot(2, 2, 9, 40), slot(3, 4, 0, 0)];
        let (got, missed) = cached_of_epoch(4, slots.iter());
        assert_eq!(got.len(), 1);
        assert_eq!((got[&key(1)].count, got[&key(1)].total_ns), (5, 500));
        assert_eq!(missed, 8);
        let (stale, missed) = cached_of_epoch(3, slots.iter());
        assert!(stale.is_empty());
        assert_eq!(missed, 0);
    }
}
