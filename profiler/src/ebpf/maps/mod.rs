//! The maps userspace services while recording: aggregates drained every
//! interval, pending waits reaped and read at stop, counters, stacks.

mod aggregates;
mod counters;
mod pending;

pub use aggregates::{AggMaps, merge_cpus};
pub use counters::{CounterValues, KernelCounters, recursion_misses};
pub use pending::PendingMaps;

use aya::maps::{HashMap, MapData};
use profiler_common::{StackId, StoredStack};

use crate::symbols::StackSource;

/// The kernel stack map as a [`StackSource`].
pub struct KernelStacks(pub(crate) HashMap<MapData, StackId, StoredStack>);

impl StackSource for KernelStacks {
    fn frames(&mut self, id: StackId) -> Option<Vec<u64>> {
        self.0.get(&id, 0).ok().map(|st| st.frames().to_vec())
    }
}
