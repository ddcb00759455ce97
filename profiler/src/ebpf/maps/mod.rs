//! The maps userspace services while recording: aggregates drained every
//! interval, pending waits reaped and read at stop, counters, stacks.

mod aggregates;
mod counters;
mod pending;

pub use aggregates::{AggMaps, merge_cpus};
pub use counters::{CounterValues, KernelCounters, recursion_misses};
pub use pending::PendingMaps;

use aya::maps::{MapData, StackTraceMap};

use crate::symbols::StackSource;

/// The kernel stack map as a [`StackSource`].
pub struct KernelStacks(pub(crate) StackTraceMap<MapData>);

impl StackSource for KernelStacks {
    fn frames(&mut self, id: u32) -> Option<Vec<u64>> {
        self.0.get(&id, 0).ok().map(|st| st.frames().iter().map(|f| f.ip).collect())
    }
}
