//! The aggregator's tables, shared with every snapshot: rows are behind
//! `Arc`s and copied on write, so publishing a snapshot copies pointers and
//! only the rows that change afterwards are cloned (once per interval).

use std::sync::Arc;

use profiler_common::{ContentionEvent, StackId};
use rustc_hash::FxHashMap;

use crate::{
    ebpf::CounterValues,
    model::{LockKey, Stats, YieldStats},
};

/// Thread id of the row that absorbs tasks beyond the key limit.
pub const OVERFLOW_TID: u32 = u32::MAX;

/// Caps on distinct keys; events beyond them are folded into overflow rows
/// (so totals stay exact) and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Distinct locks.
    pub max_locks: usize,
    /// Distinct (lock, stack) pairs.
    pub max_callers: usize,
    /// Distinct threads.
    pub max_tasks: usize,
    /// Distinct cgroups.
    pub max_cgroups: usize,
    /// Drop lock and task rows not updated for this many publish intervals
    /// (a daemon's tables then follow the live locks and threads instead of
    /// filling up with exited ones); None: keep every row.
    pub max_idle: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_locks: 10_000, max_callers: 50_000, max_tasks: 10_000, max_cgroups: 1_000, max_idle: None }
    }
}

/// Statistics of one lock.
#[derive(Clone, Debug)]
pub struct LockAgg {
    /// All waits on the lock.
    pub wait: Stats,
    /// Waits per kernel stack id.
    pub callers: FxHashMap<StackId, Arc<Stats>>,
    /// Hold times of contended acquisitions (None until one is seen).
    pub hold: Option<Stats>,
    /// Hold times per acquirer stack id.
    pub hold_callers: FxHashMap<StackId, Arc<Stats>>,
    /// Waits charged to the owner that made them wait.
    pub blame: FxHashMap<BlameKey, BlameAgg>,
    /// Waits per (caller stack id, cgroup id), when cgroups are recorded.
    pub caller_cgroups: FxHashMap<(StackId, u64), CgroupSums>,
    /// Publish interval of the last update (for ageing).
    pub touched: u64,
    /// Publish interval of each caller slot's last update (only with
    /// `Limits::max_idle`).
    pub caller_touched: FxHashMap<StackId, u64>,
}

/// Who a wait is blamed on: the owner thread (0: readers), the stack it
/// acquired the lock with, and the stack it slept in while holding it
/// (`--owner-stacks`) ([`BlameKey::OVERFLOW`] past the cap).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlameKey {
    /// Owner thread id, 0 for readers.
    pub owner_tid: u32,
    /// Owner's acquire stack id.
    pub stack_id: StackId,
    /// Owner's stack while asleep ([`profiler_common::STACK_SKIPPED`]: not
    /// asleep, or not walked).
    pub asleep_stack_id: StackId,
}

impl BlameKey {
    /// The row of owners past the per-lock cap.
    pub const OVERFLOW: BlameKey = BlameKey {
        owner_tid: OVERFLOW_TID,
        stack_id: profiler_common::STACK_OVERFLOW,
        asleep_stack_id: profiler_common::STACK_SKIPPED,
    };

    /// Blame on `owner_tid` with acquire stack `stack_id`, no stack while asleep.
    pub fn acquired(owner_tid: u32, stack_id: StackId) -> BlameKey {
        BlameKey { owner_tid, stack_id, asleep_stack_id: profiler_common::STACK_SKIPPED }
    }
}

/// Waits one owner caused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlameAgg {
    /// Owner process id.
    pub tgid: u32,
    /// Owner comm (NUL padded).
    pub comm: [u8; 16],
    /// Waits it caused.
    pub waits: u64,
    /// Their total.
    pub wait_ns: u64,
    /// The longest.
    pub max_ns: u64,
}

/// The cgroup id of the row that absorbs cgroups beyond the key limit.
pub const CGROUP_OVERFLOW: u64 = u64::MAX;

/// Waits of one cgroup at one (lock, caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupSums {
    /// Waits.
    pub count: u64,
    /// Their total.
    pub wait_ns: u64,
    /// The longest.
    pub max_ns: u64,
}

impl CgroupSums {
    /// Adds `count` waits totalling `wait_ns`, the longest `max_ns`.
    pub fn add(&mut self, count: u64, wait_ns: u64, max_ns: u64) {
        self.count += count;
        self.wait_ns = self.wait_ns.saturating_add(wait_ns);
        self.max_ns = self.max_ns.max(max_ns);
    }
}

/// Statistics of one cgroup.
#[derive(Clone, Debug)]
pub struct CgroupAgg {
    /// Waits of its tasks over all locks.
    pub wait: Stats,
    /// Publish interval of the last update (for ageing).
    pub touched: u64,
}

/// Statistics of one thread.
#[derive(Clone, Debug)]
pub struct TaskAgg {
    /// Process id.
    pub tgid: u32,
    /// Thread name (NUL padded).
    pub comm: [u8; 16],
    /// Waits over all locks.
    pub wait: Stats,
    /// Publish interval of the last update (for ageing).
    pub touched: u64,
}

/// Events folded into overflow rows because a key limit was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overflow {
    /// Events whose lock did not fit.
    pub locks: u64,
    /// Events whose (lock, stack) did not fit.
    pub callers: u64,
    /// Events whose thread did not fit.
    pub tasks: u64,
    /// Events whose cgroup did not fit.
    pub cgroups: u64,
    /// Lock rows dropped after `Limits::max_idle` intervals without waits.
    pub aged_locks: u64,
    /// Task rows dropped after `Limits::max_idle` intervals without waits.
    pub aged_tasks: u64,
    /// (lock, stack) slots dropped after `Limits::max_idle` intervals without waits.
    pub aged_callers: u64,
    /// cgroup rows dropped after `Limits::max_idle` intervals without waits.
    pub aged_cgroups: u64,
}

/// A yielding thread and the task it yielded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct YieldPairKey {
    /// Yielding thread.
    pub tid: u32,
    /// Target thread (the kernel's `p->pid`; 0 when unknown).
    pub target_tid: u32,
}

impl YieldPairKey {
    /// The key of the row that absorbs pairs beyond the task limit.
    pub const OVERFLOW: YieldPairKey = YieldPairKey { tid: OVERFLOW_TID, target_tid: OVERFLOW_TID };
}

/// `yield_to` calls of one (yielder, target) pair.
#[derive(Clone, Debug)]
pub struct YieldPairAgg {
    /// Yielding process.
    pub tgid: u32,
    /// Yielding thread's name (NUL padded).
    pub comm: [u8; 16],
    /// Target's process.
    pub target_tgid: u32,
    /// Target's name (NUL padded).
    pub target_comm: [u8; 16],
    /// Outcomes and latency.
    pub stats: YieldStats,
}

/// KVM directed yield: all calls, per caller stack, per pair.
#[derive(Clone, Debug, Default)]
pub struct YieldAgg {
    /// Every call.
    pub total: YieldStats,
    /// Per caller stack id.
    pub callers: FxHashMap<StackId, YieldStats>,
    /// Per (yielder, target).
    pub pairs: FxHashMap<YieldPairKey, YieldPairAgg>,
    /// Calls folded into overflow rows (caller or pair limit reached).
    pub overflow: u64,
}

/// What the kernel side reported at the last housekeeping tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStatus {
    /// The programs' counters.
    pub counters: CounterValues,
    /// Program runs the kernel skipped to avoid recursion (in all, and of the `yield_to` programs).
    pub recursion_misses: crate::ebpf::RecursionMisses,
    /// Map operations the kernel refused (the aggregate flip or drain).
    pub map_ops_refused: u64,
}

/// How many of the longest individual waits are kept.
pub const SLOWEST_KEPT: usize = 20;

/// How many of the latest long waits are kept for incident triggers (a
/// reader that falls further behind misses the oldest: counted where read).
pub const RECENT_KEPT: usize = 1024;

/// The aggregator's tables at one point in time. Cloning one is cheap:
/// rows are shared until the aggregator changes them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Publications so far (0: nothing published yet).
    pub generation: u64,
    /// The longest individual waits seen (stream mode: all; aggregate mode:
    /// the outliers), longest first.
    pub slowest: Arc<Vec<ContentionEvent>>,
    /// The latest long waits (at least the aggregator's `recent_min_ns`;
    /// none unless incident triggers asked for them), oldest first, at most
    /// [`RECENT_KEPT`].
    pub recent: Arc<std::collections::VecDeque<ContentionEvent>>,
    /// Waits ever added to `recent`: the last one's sequence number (a
    /// reader that remembers it knows which are new).
    pub recent_seq: u64,
    /// Per-lock statistics.
    pub locks: FxHashMap<LockKey, Arc<LockAgg>>,
    /// Per-thread statistics.
    pub tasks: FxHashMap<u32, Arc<TaskAgg>>,
    /// Per-cgroup statistics (when cgroups are recorded).
    pub cgroups: FxHashMap<u64, Arc<CgroupAgg>>,
    /// Caller ids that join a user stack to a kernel stack: (kernel, user).
    pub joined: Arc<FxHashMap<StackId, (StackId, StackId)>>,
    /// Key-limit overflow counts.
    pub overflow: Overflow,
    /// Events ingested.
    pub events: u64,
    /// KVM directed yield.
    pub yields: Arc<YieldAgg>,
    /// Kernel counters at the last housekeeping tick.
    pub kernel: KernelStatus,
}

/// `key` when it already has a row or `map` has room for one (fewer than
/// `cap` rows); else the `overflow` key, and true.
pub fn capped<K: Eq + std::hash::Hash, V>(map: &FxHashMap<K, V>, key: K, cap: usize, overflow: K) -> (K, bool) {
    if map.contains_key(&key) || map.len() < cap { (key, false) } else { (overflow, true) }
}
