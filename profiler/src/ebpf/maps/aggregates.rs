//! Draining the in-kernel aggregate maps (aggregate mode).
//!
//! The programs write into the map `ACTIVE[0]` names. To drain without
//! losing a single wait, userspace flips `ACTIVE`, waits until programs that
//! read the old value have finished (they run for microseconds; the grace
//! period is milliseconds), then reads and deletes every key of the
//! now-inactive map.

use std::time::Duration;

use aya::maps::{Array, MapData, PerCpuHashMap};
use profiler_common::{AggKey, AggVal, HIST_BUCKETS};

use crate::ebpf::LoadError;

/// Grace period after a flip before the old map is read.
pub const FLIP_GRACE: Duration = Duration::from_millis(5);

/// The two aggregate maps and the selector.
pub struct AggMaps {
    maps: [PerCpuHashMap<MapData, AggKey, AggVal>; 2],
    active: Array<MapData, u32>,
    current: u32,
}

/// Sums per-CPU values of one key.
pub fn merge_cpus<'a>(values: impl IntoIterator<Item = &'a AggVal>) -> AggVal {
    let mut out = AggVal::default();
    for v in values {
        if v.count == 0 {
            continue;
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
    out
}

impl AggMaps {
    pub(crate) fn new(
        a: PerCpuHashMap<MapData, AggKey, AggVal>,
        b: PerCpuHashMap<MapData, AggKey, AggVal>,
        active: Array<MapData, u32>,
    ) -> AggMaps {
        AggMaps { maps: [a, b], active, current: 0 }
    }

    /// Makes the other map active; returns the index of the one to drain.
    pub fn flip(&mut self) -> Result<usize, LoadError> {
        let old = self.current;
        let new = old ^ 1;
        self.active
            .set(0, new, 0)
            .map_err(|e| LoadError::Map { name: profiler_common::names::map::ACTIVE, detail: e.to_string() })?;
        self.current = new;
        Ok(old as usize)
    }

    /// Reads and deletes every key of map `idx`, appending merged values.
    pub fn drain(&mut self, idx: usize, out: &mut Vec<(AggKey, AggVal)>) -> Result<(), LoadError> {
        let map = &mut self.maps[idx & 1];
        let err =
            |e: aya::maps::MapError| LoadError::Map { name: profiler_common::names::map::AGG_A, detail: e.to_string() };
        let keys: Vec<AggKey> = map.keys().collect::<Result<_, _>>().map_err(err)?;
        for k in keys {
            let v = map.get(&k, 0).map_err(err)?;
            let merged = merge_cpus(v.iter());
            map.remove(&k).map_err(err)?;
            if merged.count > 0 {
                out.push((k, merged));
            }
        }
        Ok(())
    }
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
}
