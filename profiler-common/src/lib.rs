//! Plain-old-data types shared by lockprof's eBPF programs and its userspace.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of pointers and padding-stable,
//! so the same bytes mean the same thing on both sides of the ring buffer.
//! The `user` feature adds `aya::Pod` impls; the eBPF side never sees aya.
#![no_std]

/// `LCB_F_*` flags of the `lock:contention_begin` tracepoint
/// (include/trace/events/lock.h).
pub mod lcb {
    /// Spinning wait (spinlock, rwlock, optimistic mutex spin).
    pub const SPIN: u32 = 1 << 0;
    /// Reader side of a reader/writer lock.
    pub const READ: u32 = 1 << 1;
    /// Writer side of a reader/writer lock.
    pub const WRITE: u32 = 1 << 2;
    /// rt_mutex based lock (PREEMPT_RT kernels, futex PI).
    pub const RT: u32 = 1 << 3;
    /// percpu_rw_semaphore.
    pub const PERCPU: u32 = 1 << 4;
    /// struct mutex.
    pub const MUTEX: u32 = 1 << 5;
}

/// Kind of lock, derived from the `LCB_F_*` flags of a contention.
///
/// The discriminants are stable: they are bit positions in [`Config::type_mask`].
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockType {
    /// Flags the table below does not know.
    Unknown = 0,
    /// raw/arch spinlock (qspinlock).
    Spinlock = 1,
    /// rwlock_t (qrwlock), e.g. `tasklist_lock`.
    Rwlock = 2,
    /// struct rw_semaphore, e.g. `mmap_lock`, inode `i_rwsem`.
    Rwsem = 3,
    /// struct mutex.
    Mutex = 4,
    /// rt_mutex.
    RtMutex = 5,
    /// rwlock on PREEMPT_RT (rwbase_rt).
    RwlockRt = 6,
    /// percpu_rw_semaphore.
    PercpuRwsem = 7,
}

/// Which side of the lock the waiter wanted.
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    /// Exclusive lock without reader/writer distinction.
    Exclusive = 0,
    /// Shared (reader) side.
    Read = 1,
    /// Exclusive (writer) side of a reader/writer lock.
    Write = 2,
}

impl LockType {
    /// Every type, in discriminant order.
    pub const ALL: [LockType; 8] = [
        LockType::Unknown,
        LockType::Spinlock,
        LockType::Rwlock,
        LockType::Rwsem,
        LockType::Mutex,
        LockType::RtMutex,
        LockType::RwlockRt,
        LockType::PercpuRwsem,
    ];

    /// Bit of this type in [`Config::type_mask`].
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Classifies contention flags the way `perf lock contention` does.
    pub const fn from_flags(flags: u32) -> LockType {
        let rw = flags & (lcb::READ | lcb::WRITE) != 0;
        if flags & lcb::MUTEX != 0 {
            LockType::Mutex
        } else if flags & lcb::RT != 0 {
            if rw { LockType::RwlockRt } else { LockType::RtMutex }
        } else if flags & lcb::PERCPU != 0 {
            LockType::PercpuRwsem
        } else if flags & lcb::SPIN != 0 {
            if rw { LockType::Rwlock } else { LockType::Spinlock }
        } else if rw {
            LockType::Rwsem
        } else {
            LockType::Unknown
        }
    }
}

impl LockMode {
    /// Reader/writer side from contention flags.
    pub const fn from_flags(flags: u32) -> LockMode {
        if flags & lcb::WRITE != 0 {
            LockMode::Write
        } else if flags & lcb::READ != 0 {
            LockMode::Read
        } else {
            LockMode::Exclusive
        }
    }
}

/// `ContentionEvent::kind` of a completed wait seen by the tracepoints.
pub const EVENT_CONTENTION: u32 = 1;

/// One completed contention, sent through the ring buffer at `contention_end`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ContentionEvent {
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
    /// CPU that saw `contention_end`.
    pub cpu: u32,
    /// Kernel stack id captured at `contention_begin`; negative errno on failure.
    pub stack_id: i32,
    /// Record kind, [`EVENT_CONTENTION`].
    pub kind: u32,
    /// `comm` of the waiting thread.
    pub comm: [u8; 16],
}

/// State between `contention_begin` and `contention_end`: the value of the
/// per-task `PENDING` map (keyed by [`task_key`]) and of the per-CPU
/// `SPIN_PENDING` slot. `lock_addr == 0` marks a free or idle slot.
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

/// Value of the per-task `PENDING` map: the wait in progress, plus the last
/// captured stack, reused when the stack budget is spent and the same thread
/// waits again on the same lock with the same flags.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskWait {
    /// The wait in progress (`lock_addr == 0`: none).
    pub wait: PendingWait,
    /// Lock of the last captured stack.
    pub last_lock: u64,
    /// Flags of the last captured stack.
    pub last_flags: u32,
    /// The last captured stack id.
    pub last_stack_id: i32,
}

/// `stack_id` of a wait whose stack was not captured because the per-CPU
/// stack budget was spent and no reusable stack was known.
pub const STACK_SKIPPED: i32 = -1_000_000;

/// Per-CPU stack budget state.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StackBudget {
    /// Start of the current 100 ms window.
    pub window_ns: u64,
    /// Stacks captured in it.
    pub used: u64,
}

/// Key of the per-task pending-wait map: the thread id, or for the idle
/// tasks (which all have tid 0) a per-CPU key with the top bit set.
pub const fn task_key(tid: u32, cpu: u32) -> u64 {
    if tid == 0 { (1u64 << 63) | cpu as u64 } else { tid as u64 }
}

/// Filters and knobs the userspace writes into the eBPF programs' globals
/// before loading.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bitmask of [`LockType::bit`]s to record; all ones records every type.
    pub type_mask: u32,
    /// Non-zero: only record processes present in the `TGID_FILTER` map.
    pub filter_tgid: u32,
    /// Stack walks allowed per CPU per 100 ms window (0: unlimited).
    pub stacks_per_window: u32,
    /// Reserved, zero.
    pub _pad: u32,
}

impl Config {
    /// Whether a type or process filter is on (then unmatched ends are expected).
    pub const fn filtering(&self) -> bool {
        self.type_mask != u32::MAX || self.filter_tgid != 0
    }
}

impl Default for Config {
    fn default() -> Self {
        Config { type_mask: u32::MAX, filter_tgid: 0, stacks_per_window: 0, _pad: 0 }
    }
}

/// Indices of the per-CPU failure and bookkeeping counters (`COUNTERS` map).
pub mod counter {
    /// Contention events submitted to the ring buffer.
    pub const EVENTS: u32 = 0;
    /// Ring buffer had no room: event lost.
    pub const RINGBUF_FULL: u32 = 1;
    /// `bpf_get_stackid` failed (stack map full or hash collision): event kept without stack.
    pub const STACK_FAILED: u32 = 2;
    /// Pending-wait map full at begin: contention not measured.
    pub const PENDING_FULL: u32 = 3;
    /// `contention_end` with no matching begin (attached mid-wait).
    pub const END_WITHOUT_BEGIN: u32 = 4;
    /// Begin while the same task already waited on another lock (irq nesting,
    /// qrwlock's internal wait_lock): the inner wait is skipped, like perf.
    pub const NESTED: u32 = 5;
    /// Begin again on the same lock (mutex: spin then sleep): merged.
    pub const REPEATED_BEGIN: u32 = 6;
    /// A lock program fired while another lockprof program was running on
    /// this CPU (e.g. a map's own lock contended): skipped, so that no
    /// pending wait is ever left behind by a half-seen nested contention.
    pub const REENTERED: u32 = 7;
    /// Stack budget spent: the stack of the same thread's previous wait on the
    /// same lock with the same flags was reused.
    pub const STACK_REUSED: u32 = 8;
    /// Stack budget spent and nothing to reuse: the wait has no stack.
    pub const STACK_SKIPPED: u32 = 9;
    /// Number of counters.
    pub const COUNT: u32 = 10;

    /// Stable names, indexed by counter.
    pub const NAMES: [&str; COUNT as usize] = [
        "events",
        "ringbuf_full",
        "stack_failed",
        "pending_map_full",
        "end_without_begin",
        "nested_skipped",
        "repeated_begin",
        "reentered",
        "stack_reused",
        "stack_skipped",
    ];
}

/// Default number of ring buffer bytes (must be a power of two multiple of the page size).
pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;
/// Default capacity of the pending-wait map (concurrently waiting tasks).
pub const DEFAULT_PENDING_ENTRIES: u32 = 16384;
/// Default capacity of the stack trace map (distinct stacks).
pub const DEFAULT_STACK_ENTRIES: u32 = 16384;
/// Depth of captured kernel stacks (`PERF_MAX_STACK_DEPTH`).
pub const MAX_STACK_DEPTH: usize = 127;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only integer fields and a byte array, no padding
    // (8+8+8+4*6+16 = 64 bytes, 8-aligned); every bit pattern is valid.
    unsafe impl aya::Pod for super::ContentionEvent {}
    // SAFETY: repr(C), integer fields only (8+8+4*4 = 32 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::PendingWait {}
    // SAFETY: repr(C), four u32 fields; any bits valid.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: repr(C), PendingWait + u64 + u32 + i32 (48 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::TaskWait {}
    // SAFETY: repr(C), two u64; any bits valid.
    unsafe impl aya::Pod for super::StackBudget {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_classify_like_perf() {
        use lcb::*;
        let cases = [
            (SPIN, LockType::Spinlock, LockMode::Exclusive),
            (SPIN | READ, LockType::Rwlock, LockMode::Read),
            (SPIN | WRITE, LockType::Rwlock, LockMode::Write),
            (READ, LockType::Rwsem, LockMode::Read),
            (WRITE, LockType::Rwsem, LockMode::Write),
            (RT, LockType::RtMutex, LockMode::Exclusive),
            (RT | READ, LockType::RwlockRt, LockMode::Read),
            (PERCPU | WRITE, LockType::PercpuRwsem, LockMode::Write),
            (MUTEX, LockType::Mutex, LockMode::Exclusive),
            (MUTEX | SPIN, LockType::Mutex, LockMode::Exclusive),
            (0, LockType::Unknown, LockMode::Exclusive),
        ];
        for (flags, ty, mode) in cases {
            assert_eq!(LockType::from_flags(flags), ty, "flags {flags:#x}");
            assert_eq!(LockMode::from_flags(flags), mode, "flags {flags:#x}");
        }
    }

    #[test]
    fn idle_tasks_are_keyed_per_cpu() {
        assert_eq!(task_key(42, 3), 42);
        assert_ne!(task_key(0, 0), task_key(0, 1));
        assert_ne!(task_key(0, 5), 5);
    }

    #[test]
    fn event_layout_has_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<ContentionEvent>(), 64);
        assert_eq!(core::mem::size_of::<PendingWait>(), 32);
        assert_eq!(core::mem::size_of::<TaskWait>(), 48);
        assert_eq!(core::mem::size_of::<Config>(), 16);
    }
}
