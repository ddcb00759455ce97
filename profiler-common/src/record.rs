//! Ring-buffer records. Every record starts with its kind (a `u32` at offset
//! 0), so a reader tells records apart by their tag and checks the size the
//! tag implies ([`record_size`]).

/// A completed wait seen by a wait backend ([`ContentionEvent`]).
pub const EVENT_CONTENTION: u32 = 1;
/// A long wait in aggregate mode ([`ContentionEvent`]): already counted in
/// the aggregate maps, streamed only so its details can be listed.
pub const EVENT_OUTLIER: u32 = 2;
/// A wait the aggregate maps had no room for ([`ContentionEvent`]): streamed
/// instead, so it is not lost.
pub const EVENT_AGG_OVERFLOW: u32 = 3;
/// A hold ([`ContentionEvent`]): a contended acquisition's time from the end
/// of its wait to its release; `wait_ns` then carries the hold time and
/// `stack_id` the acquirer's stack.
pub const EVENT_HOLD: u32 = 4;
/// One `yield_to()` call ([`YieldEvent`]).
pub const EVENT_YIELD: u32 = 5;
/// A user stack stored for the first time ([`UserStackEvent`]): userspace
/// reads its process's mappings while the process is alive.
pub const EVENT_USER_STACK: u32 = 6;
/// A copy of a user stack to unwind ([`crate::UserStackCopy`]).
pub const EVENT_USER_STACK_COPY: u32 = 7;

/// Size of a record of `kind`, `None` for an unknown kind.
pub const fn record_size(kind: u32) -> Option<usize> {
    match kind {
        EVENT_CONTENTION | EVENT_OUTLIER | EVENT_AGG_OVERFLOW | EVENT_HOLD => {
            Some(core::mem::size_of::<ContentionEvent>())
        }
        EVENT_YIELD => Some(core::mem::size_of::<YieldEvent>()),
        EVENT_USER_STACK => Some(core::mem::size_of::<UserStackEvent>()),
        EVENT_USER_STACK_COPY => Some(core::mem::size_of::<crate::UserStackCopy>()),
        _ => None,
    }
}

/// One completed contention (or hold), sent through the ring buffer.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ContentionEvent {
    /// Record kind: [`EVENT_CONTENTION`], [`EVENT_OUTLIER`],
    /// [`EVENT_AGG_OVERFLOW`] or [`EVENT_HOLD`].
    pub kind: u32,
    /// CPU that saw the end of the wait.
    pub cpu: u32,
    /// Address of the lock the task waited for.
    pub lock_addr: u64,
    /// Nanoseconds from the first `contention_begin` to `contention_end`.
    pub wait_ns: u64,
    /// `bpf_ktime_get_ns()` at `contention_end` (CLOCK_MONOTONIC).
    pub end_ns: u64,
    /// Waiting thread id (0 for the idle task).
    pub tid: u32,
    /// Waiting process id.
    pub tgid: u32,
    /// `LCB_F_*` flags, OR-ed over repeated begins (mutex: spin, then sleep).
    pub flags: u32,
    /// Reserved, zero.
    pub _pad: u32,
    /// Kernel stack captured at `contention_begin` (or why there is none).
    pub stack_id: crate::StackId,
    /// User stack captured at `contention_begin` (or why there is none).
    pub user_stack_id: crate::StackId,
    /// The waiter's cgroup (v2 id; 0 when not recorded).
    pub cgroup_id: u64,
    /// `comm` of the waiting thread.
    pub comm: [u8; 16],
    /// Who held the lock when the wait began.
    pub owner: crate::Owner,
}

/// A user stack the `USER_STACKS` map did not hold yet.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UserStackEvent {
    /// Record kind, [`EVENT_USER_STACK`].
    pub kind: u32,
    /// The process whose address space the frames are in.
    pub tgid: u32,
    /// The stack's id (key of `USER_STACKS`).
    pub id: crate::StackId,
}

/// One `yield_to()` call (KVM directed yield), sent at its return.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct YieldEvent {
    /// Record kind, [`EVENT_YIELD`].
    pub kind: u32,
    /// CPU of the return.
    pub cpu: u32,
    /// Nanoseconds from entry to return (a successful yield includes the
    /// `schedule()` that hands the CPU over, so the time until the yielder
    /// runs again).
    pub latency_ns: u64,
    /// `bpf_ktime_get_ns()` at return (CLOCK_MONOTONIC).
    pub end_ns: u64,
    /// Target task's pid (thread id), 0 when unknown (no BTF offsets).
    pub target_pid: u32,
    /// Target task's tgid, 0 when unknown.
    pub target_tgid: u32,
    /// Yielding thread id.
    pub tid: u32,
    /// Yielding process id.
    pub tgid: u32,
    /// Return value: > 0 yielded, 0 not yielded, < 0 error (-ESRCH: target
    /// running or not runnable).
    pub ret: i32,
    /// The `preempt` argument (KVM passes 1: preempt the target's CPU).
    pub preempt: u32,
    /// Caller stack captured at entry (or why there is none).
    pub stack_id: crate::StackId,
    /// `comm` of the yielding thread.
    pub comm: [u8; 16],
    /// `comm` of the target task (empty when unknown).
    pub target_comm: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_lead_with_their_kind_and_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<ContentionEvent>(), 136);
        assert_eq!(core::mem::size_of::<UserStackEvent>(), 16);
        assert_eq!(record_size(EVENT_USER_STACK), Some(16));
        assert_eq!(core::mem::size_of::<YieldEvent>(), 88);
        assert_eq!(core::mem::offset_of!(ContentionEvent, kind), 0);
        assert_eq!(core::mem::offset_of!(YieldEvent, kind), 0);
        assert_eq!(record_size(EVENT_HOLD), Some(136));
        assert_eq!(record_size(EVENT_YIELD), Some(88));
        assert_eq!(record_size(0), None);
        assert_eq!(record_size(99), None);
    }
}
