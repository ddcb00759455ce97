//! The maps userspace services while recording: aggregates drained every
//! interval, pending waits reaped and read at stop, counters, stacks.

mod aggregates;
mod batch;
mod counters;
mod futex;
mod pending;

pub use aggregates::{AggMaps, merge_cpus};
pub use counters::{CounterValues, KernelCounters, ProgramFd, RecursionMisses, recursion_misses};
pub use futex::FutexMaps;
pub use pending::PendingMaps;

use aya::maps::{HashMap, MapData};
use profiler_common::{StackId, StoredStack, StoredUserStack, UnwindPlan, UnwindPlanKey};

use crate::symbols::{
    CUT_MARK, StackSource,
    user::{UserStackSource, unwind::UnwindSink},
};

/// The kernel stack map as a [`StackSource`].
pub struct KernelStacks(pub(crate) HashMap<MapData, StackId, StoredStack>);

impl StackSource for KernelStacks {
    fn frames(&mut self, id: StackId) -> Option<Vec<u64>> {
        self.0.get(&id, 0).ok().map(|st| {
            let mut ips = st.frames().to_vec();
            if st.is_cut() {
                ips.push(CUT_MARK);
            }
            ips
        })
    }
}

/// The kernel's user stack map (`--user-stacks`).
pub struct KernelUserStacks(pub(crate) HashMap<MapData, StackId, StoredUserStack>);

impl UserStackSource for KernelUserStacks {
    fn get(&self, id: StackId) -> Option<(u32, Vec<u64>)> {
        self.0.get(&id, 0).ok().map(|st| (st.tgid, st.frames().to_vec()))
    }
}

/// The maps the user-stack unwinder writes: plans, and signed stacks in
/// the user stack map (a second handle on it).
pub struct KernelUnwindSink {
    pub(crate) roots: HashMap<MapData, UnwindPlanKey, u32>,
    pub(crate) plans: HashMap<MapData, UnwindPlanKey, UnwindPlan>,
    pub(crate) stacks: HashMap<MapData, StackId, StoredUserStack>,
}

impl UnwindSink for KernelUnwindSink {
    fn set_root(&mut self, key: UnwindPlanKey, root: u32) -> bool {
        self.roots.insert(key, root, 0).is_ok()
    }

    fn set_plan(&mut self, key: UnwindPlanKey, plan: &UnwindPlan) -> bool {
        self.plans.insert(key, plan, 0).is_ok()
    }

    fn set_stack(&mut self, id: StackId, stack: &StoredUserStack) -> bool {
        self.stacks.insert(id, stack, 0).is_ok()
    }
}

/// The kernel's `--cgroup` filter map.
pub struct CgroupFilter(pub(crate) HashMap<MapData, u64, u8>);

impl CgroupFilter {
    /// Lets cgroup `id`'s tasks be recorded; false if the map refused it
    /// (full).
    pub fn allow(&mut self, id: u64) -> bool {
        self.0.insert(id, 1, 0).is_ok()
    }
}
