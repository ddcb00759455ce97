//! Values of the programs' state maps (waits in progress, holds, yield_to
//! calls in progress, the stack budget).

/// `stack_id` of a wait whose stack was not captured because the per-CPU
/// stack budget was spent and no reusable stack was known.
pub const STACK_SKIPPED: i32 = -1_000_000;

/// State between `contention_begin` and `contention_end`: the value of the
/// per-task `PENDING` map (keyed by [`task_key`]) and of the per-CPU
/// `SPIN_PENDING` slots. `lock_addr == 0` marks a free or idle slot.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingWait {
    /// `bpf_ktime_get_ns()` at the first begin.
    pub begin_ns: u64,
    /// Lock being waited for.
    pub lock_addr: u64,
    /// `LCB_F_*` flags seen so far.
    pub flags: u32,
    /// Kernel stack id captured at begin.
    pub stack_id: i32,
    /// Waiting process id.
    pub tgid: u32,
    /// Waiting thread id.
    pub tid: u32,
}

/// `SPIN_PENDING` slot of pure spinning waits (spinlocks, rwlocks).
pub const SPIN_SLOT: u32 = 0;
/// `SPIN_PENDING` slot of a mutex's first optimistic spin: the waiter runs
/// with preemption disabled until it acquires the lock or queues to sleep,
/// so the wait stays on this CPU and out of the per-task hash map unless it
/// sleeps.
pub const MUTEX_SPIN_SLOT: u32 = 1;
/// Slots of `SPIN_PENDING`.
pub const SPIN_SLOTS: u32 = 2;

/// An entry of the per-CPU stack cache (`STACK_CACHE`, indexed by
/// `tid % STACK_CACHE_SLOTS`): the last stack captured for a thread on this
/// CPU, reused when the budget is spent and the same thread waits again on
/// the same lock with the same flags.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedStack {
    /// Lock of the captured stack.
    pub lock_addr: u64,
    /// Thread it was captured for.
    pub tid: u32,
    /// Flags of that wait.
    pub flags: u32,
    /// The stack id.
    pub stack_id: i32,
    /// Reserved, zero.
    pub _pad: u32,
}

/// Entries of the per-CPU stack cache.
pub const STACK_CACHE_SLOTS: u32 = 16;

/// Per-CPU stack budget state.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StackBudget {
    /// Start of the current window.
    pub window_ns: u64,
    /// Stacks captured in it.
    pub used: u64,
}

/// Key of the per-task pending-wait map: the thread id, or for the idle
/// tasks (which all have tid 0) a per-CPU key with the top bit set.
pub const fn task_key(tid: u32, cpu: u32) -> u64 {
    if tid == 0 { (1u64 << 63) | cpu as u64 } else { tid as u64 }
}

/// Key of the hold-tracking map: a lock and the thread that acquired it after
/// waiting (readers hold concurrently, so the thread is part of the key).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldKey {
    /// Lock address.
    pub lock_addr: u64,
    /// Acquiring thread.
    pub tid: u32,
    /// Reserved, zero.
    pub _pad: u32,
}

/// Value of the hold-tracking map.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldStart {
    /// When the wait ended (the lock was acquired).
    pub start_ns: u64,
    /// `LCB_F_*` flags of the wait.
    pub flags: u32,
    /// Acquirer's stack id.
    pub stack_id: i32,
}

/// State between `yield_to` entry and return, per yielding thread.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct YieldStart {
    /// `bpf_ktime_get_ns()` at entry.
    pub start_ns: u64,
    /// Target pid.
    pub target_pid: u32,
    /// Target tgid.
    pub target_tgid: u32,
    /// Caller stack id.
    pub stack_id: i32,
    /// `preempt` argument.
    pub preempt: u32,
    /// Target comm.
    pub target_comm: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_tasks_are_keyed_per_cpu() {
        assert_eq!(task_key(42, 3), 42);
        assert_ne!(task_key(0, 0), task_key(0, 1));
        assert_ne!(task_key(0, 5), 5);
    }

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<PendingWait>(), 32);
        assert_eq!(core::mem::size_of::<CachedStack>(), 24);
        assert_eq!(core::mem::size_of::<YieldStart>(), 40);
        assert_eq!(core::mem::size_of::<HoldKey>(), 16);
        assert_eq!(core::mem::size_of::<HoldStart>(), 16);
    }
}
