//! The pending-wait maps: reaping entries of exited tasks, and reading the
//! waits still open when recording stops.

use aya::maps::{HashMap, MapData, PerCpuArray};
use profiler_common::{PendingWait, SPIN_SLOTS, names::map};

use crate::ebpf::LoadError;

/// Per-task and per-CPU pending waits.
pub struct PendingMaps {
    tasks: HashMap<MapData, u64, PendingWait>,
    spin: PerCpuArray<MapData, PendingWait>,
}

fn err(name: &'static str, e: impl std::fmt::Display) -> LoadError {
    LoadError::Map { name, detail: e.to_string() }
}

impl PendingMaps {
    pub(crate) fn new(tasks: HashMap<MapData, u64, PendingWait>, spin: PerCpuArray<MapData, PendingWait>) -> Self {
        PendingMaps { tasks, spin }
    }

    /// Deletes the idle entries of threads that no longer exist; returns how
    /// many. The kernel side keeps one resident entry per thread that ever
    /// waited on a sleeping lock, so without this a fork storm fills the map.
    pub fn reap_exited(&mut self) -> usize {
        let keys: Vec<u64> = self.tasks.keys().filter_map(Result::ok).collect();
        let mut reaped = 0;
        for k in keys {
            if k >> 63 == 1 {
                continue; // idle tasks, keyed per CPU
            }
            let exists = std::path::Path::new(&format!("/proc/{k}")).exists();
            if exists {
                continue;
            }
            if self.tasks.get(&k, 0).is_ok_and(|t| t.lock_addr == 0) && self.tasks.remove(&k).is_ok() {
                reaped += 1;
            }
        }
        reaped
    }

    /// Waits with a begin and no end yet.
    pub fn open_waits(&self) -> Result<Vec<PendingWait>, LoadError> {
        let mut open: Vec<PendingWait> = self.tasks.iter().filter_map(Result::ok).map(|(_, t)| t).collect();
        for slot in 0..SPIN_SLOTS {
            open.extend(self.spin.get(&slot, 0).map_err(|e| err(map::SPIN_PENDING, e))?.iter().copied());
        }
        open.retain(|p| p.lock_addr != 0);
        Ok(open)
    }
}
