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
/// `ContentionEvent::kind` of a long wait in aggregate mode: already counted
/// in the aggregate maps, streamed only so its details can be listed.
pub const EVENT_OUTLIER: u32 = 2;
/// `ContentionEvent::kind` of a wait the aggregate maps had no room for:
/// streamed instead, so it is not lost.
pub const EVENT_AGG_OVERFLOW: u32 = 3;

/// `ContentionEvent::kind` of a hold: a contended acquisition's time from the
/// end of its wait to its release; `wait_ns` then carries the hold time and
/// `stack_id` the acquirer's stack.
pub const EVENT_HOLD: u32 = 4;

/// Record kind of a [`YieldEvent`] (at the same offset as
/// [`ContentionEvent::kind`], so a reader can tell records apart).
pub const EVENT_YIELD: u32 = 5;

/// One `yield_to()` call (KVM directed yield), sent at its return.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct YieldEvent {
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
    /// CPU of the return.
    pub cpu: u32,
    /// Record kind, [`EVENT_YIELD`] (same offset as in [`ContentionEvent`]).
    pub kind: u32,
    /// Caller stack captured at entry; negative errno on failure.
    pub stack_id: i32,
    /// Reserved, zero.
    pub _pad: u32,
    /// `comm` of the yielding thread.
    pub comm: [u8; 16],
    /// `comm` of the target task (empty when unknown).
    pub target_comm: [u8; 16],
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

/// Offsets inside `struct task_struct`, found in the kernel's BTF by
/// userspace and written into the programs' globals (0: unknown).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskOffsets {
    /// `pid`.
    pub pid: u32,
    /// `tgid`.
    pub tgid: u32,
    /// `comm`.
    pub comm: u32,
    /// Reserved, zero.
    pub _pad: u32,
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

/// `LCB_F_*`-style flags of the probed slowpaths, by function family.
pub mod probe_flags {
    use super::lcb;
    /// `__mutex_lock*_slowpath`.
    pub const MUTEX: u32 = lcb::MUTEX;
    /// `rwsem_down_read_slowpath`.
    pub const RWSEM_READ: u32 = lcb::READ;
    /// `rwsem_down_write_slowpath`.
    pub const RWSEM_WRITE: u32 = lcb::WRITE;
    /// `queued_read_lock_slowpath`.
    pub const RWLOCK_READ: u32 = lcb::SPIN | lcb::READ;
    /// `queued_write_lock_slowpath`.
    pub const RWLOCK_WRITE: u32 = lcb::SPIN | lcb::WRITE;
}

/// Buckets of the in-kernel wait histogram: two per power of two
/// ([`hist_bucket`]), up to 2^47 ns (~39 hours).
pub const HIST_BUCKETS: usize = 96;

/// Histogram bucket of `ns`: `2 * floor(log2 ns) + (the bit below the top
/// bit)`, so 0 and 1 map to themselves, clamped to the last bucket.
/// Branch-light on purpose: older verifiers (6.1) mis-track a dead
/// `ns < 2` early return and reject the map-value index that follows.
#[inline(always)]
pub fn hist_bucket(ns: u64) -> usize {
    // floor(log2) without a count-leading-zeros instruction (BPF has none).
    let mut v = ns;
    let mut log = 0u32;
    if v >> 32 != 0 {
        v >>= 32;
        log += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        log += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        log += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        log += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        log += 2;
    }
    if v >> 1 != 0 {
        log += 1;
    }
    let half = (ns >> log.saturating_sub(1)) & 1;
    let idx = 2 * log as usize + half as usize;
    if idx >= HIST_BUCKETS { HIST_BUCKETS - 1 } else { idx }
}

/// Smallest value of bucket `idx` (inverse of [`hist_bucket`]).
pub const fn hist_bucket_low(idx: usize) -> u64 {
    if idx < 2 {
        return idx as u64;
    }
    let log = (idx / 2) as u32;
    let half = (idx % 2) as u64;
    (1u64 << log) | (half << (log - 1))
}

/// Key of the aggregate maps.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggKey {
    /// Lock address.
    pub lock_addr: u64,
    /// Waiting thread.
    pub tid: u32,
    /// Waiting process.
    pub tgid: u32,
    /// `LCB_F_*` flags.
    pub flags: u32,
    /// Stack id captured at begin.
    pub stack_id: i32,
}

/// Per-CPU value of the aggregate maps.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AggVal {
    /// Waits.
    pub count: u64,
    /// Sum of waits, ns.
    pub total_ns: u64,
    /// Longest wait.
    pub max_ns: u64,
    /// Shortest wait (meaningful when count > 0).
    pub min_ns: u64,
    /// comm of the thread when the key was created.
    pub comm: [u8; 16],
    /// Wait histogram, [`hist_bucket`] indexed.
    pub hist: [u32; HIST_BUCKETS],
}

impl Default for AggVal {
    fn default() -> Self {
        AggVal { count: 0, total_ns: 0, max_ns: 0, min_ns: 0, comm: [0; 16], hist: [0; HIST_BUCKETS] }
    }
}

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
    /// [`MODE_STREAM`] or [`MODE_AGGREGATE`].
    pub mode: u32,
    /// Aggregate mode: waits at least this long are also streamed as
    /// [`EVENT_OUTLIER`] records (0: none).
    pub outlier_ns: u64,
}

/// Every completed wait goes through the ring buffer.
pub const MODE_STREAM: u32 = 0;
/// Waits are folded into per-CPU maps in the kernel, drained every interval.
pub const MODE_AGGREGATE: u32 = 1;

impl Config {
    /// Whether a type or process filter is on (then unmatched ends are expected).
    pub const fn filtering(&self) -> bool {
        self.type_mask != u32::MAX || self.filter_tgid != 0
    }
}

impl Default for Config {
    fn default() -> Self {
        Config { type_mask: u32::MAX, filter_tgid: 0, stacks_per_window: 0, mode: MODE_STREAM, outlier_ns: 0 }
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
    /// Aggregate mode: a key did not fit in the aggregate map; the wait was
    /// streamed through the ring buffer instead.
    pub const AGG_FULL: u32 = 10;
    /// Aggregate mode: long waits streamed as outliers.
    pub const OUTLIERS: u32 = 11;
    /// Hold tracking: the hold map was full, that hold is not measured.
    pub const HOLD_MAP_FULL: u32 = 12;
    /// Holds measured.
    pub const HOLDS: u32 = 13;
    /// yield_to: the per-thread entry map was full, that call is not measured.
    pub const YIELD_MAP_FULL: u32 = 14;
    /// yield_to: a return without a recorded entry (attached mid-call).
    pub const YIELD_UNMATCHED: u32 = 15;
    /// yield_to calls recorded.
    pub const YIELDS: u32 = 16;
    /// Number of counters.
    pub const COUNT: u32 = 17;

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
        "agg_map_full",
        "outliers",
        "hold_map_full",
        "holds",
        "yield_map_full",
        "yield_unmatched",
        "yield_calls",
    ];
}

/// Default number of ring buffer bytes (must be a power of two multiple of the page size).
pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;
/// Default capacity of the pending-wait map (concurrently waiting tasks).
pub const DEFAULT_PENDING_ENTRIES: u32 = 32768;
/// Default capacity of the stack trace map (distinct stacks).
pub const DEFAULT_STACK_ENTRIES: u32 = 16384;
/// Default capacity of each aggregate map (distinct lock, thread, flags, stack).
pub const DEFAULT_AGG_ENTRIES: u32 = 16384;
/// Depth of captured kernel stacks (`PERF_MAX_STACK_DEPTH`).
pub const MAX_STACK_DEPTH: usize = 127;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only integer fields and a byte array, no padding
    // (8+8+8+4*6+16 = 64 bytes, 8-aligned); every bit pattern is valid.
    unsafe impl aya::Pod for super::ContentionEvent {}
    // SAFETY: repr(C), integer fields only (8+8+4*4 = 32 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::PendingWait {}
    // SAFETY: repr(C), four u32 and one u64 (24 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: repr(C), u64 + 4 x u32/i32 (24 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::AggKey {}
    // SAFETY: repr(C), u64 + 2 x u32 (16 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::HoldKey {}
    // SAFETY: repr(C), u64 + u32 + i32 (16 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::HoldStart {}
    // SAFETY: repr(C), 4 x u64 + 16 bytes + 96 x u32 (432 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::AggVal {}
    // SAFETY: repr(C), PendingWait + u64 + u32 + i32 (48 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::TaskWait {}
    // SAFETY: repr(C), two u64; any bits valid.
    unsafe impl aya::Pod for super::StackBudget {}
    // SAFETY: repr(C), 2 x u64 + 10 x u32/i32 + 2 x 16 bytes (88 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::YieldEvent {}
    // SAFETY: repr(C), u64 + 4 x u32/i32 + 16 bytes (40 bytes, no padding); any bits valid.
    unsafe impl aya::Pod for super::YieldStart {}
    // SAFETY: repr(C), four u32; any bits valid.
    unsafe impl aya::Pod for super::TaskOffsets {}
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
        assert_eq!(core::mem::size_of::<Config>(), 24);
        assert_eq!(core::mem::size_of::<AggKey>(), 24);
        assert_eq!(core::mem::size_of::<AggVal>(), 432);
        assert_eq!(core::mem::size_of::<YieldEvent>(), 88);
        assert_eq!(core::mem::size_of::<YieldStart>(), 40);
        // Readers tell records apart by `kind` at the same offset.
        assert_eq!(core::mem::offset_of!(YieldEvent, kind), core::mem::offset_of!(ContentionEvent, kind));
    }

    #[test]
    fn histogram_buckets_are_monotonic_and_invertible() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1), 1);
        assert_eq!(hist_bucket(2), 2);
        assert_eq!(hist_bucket(3), 3);
        assert_eq!(hist_bucket(4), 4);
        assert_eq!(hist_bucket(6), 5);
        assert_eq!(hist_bucket(7), 5);
        assert_eq!(hist_bucket(8), 6);
        let mut prev = 0;
        for shift in 0..47 {
            for v in [1u64 << shift, (1u64 << shift) + (1u64 << shift) / 2, (2u64 << shift) - 1] {
                let b = hist_bucket(v);
                assert!(b >= prev, "{v}");
                prev = b;
                assert!(hist_bucket_low(b) <= v, "{v} below its bucket start {}", hist_bucket_low(b));
                if b + 1 < HIST_BUCKETS {
                    assert!(hist_bucket_low(b + 1) > v, "{v} not below next bucket");
                }
            }
        }
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
    }
}
