//! Every map of the object and the `CONFIG` and `KRETPROBE_TRAMPOLINE` globals. Names are the
//! identifiers; userspace spells them through `profiler_common::names`, and
//! a profiler unit test checks that both agree.

use aya_ebpf::{
    Global,
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use profiler_common::{
    ACQUIRED_SLOTS, AGG_CACHE_SLOTS, AGG_LOG_ENTRIES, Acquired, AggKey, AggLogEntry, AggSlot, AggVal,
    CGROUP_FILTER_ENTRIES, CachedStack, Config, DEFAULT_AGG_ENTRIES, DEFAULT_PENDING_ENTRIES, DEFAULT_RINGBUF_BYTES,
    DEFAULT_STACK_ENTRIES, HoldKey, HoldStart, Holder, IDENT_ENTRIES, IDENT_SEEN_SLOTS, LockIdent, OwnerAsleep,
    PendingWait, SPIN_SLOTS, STACK_CACHE_SLOTS, StackBudget, StackId, StoredStack, StoredUserStack,
    TGID_FILTER_ENTRIES, UNWIND_PLAN_ENTRIES, UnwindPlan, UnwindPlanKey, UserRegsLayout, UserStackCopy,
    YIELD_PENDING_ENTRIES, YieldStart, counter,
    futex::{FUTEX_WAIT_ENTRIES, FutexWait},
};

/// Filters and knobs, written by userspace before load.
#[unsafe(no_mangle)]
pub static CONFIG: Global<Config> = Global::new(Config::DEFAULT);

/// The kernel's kretprobe trampoline (0 where userspace did not look it up).
#[unsafe(no_mangle)]
pub static KRETPROBE_TRAMPOLINE: Global<u64> = Global::new(0);

/// Where a task's user registers are (unknown: no user stack copies).
#[unsafe(no_mangle)]
pub static USER_REGS_LAYOUT: Global<UserRegsLayout> = Global::new(UserRegsLayout::UNKNOWN);

/// Records for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RINGBUF_BYTES, 0);

/// Waits that sleep, keyed by `task_key`. Entries stay resident (idle when
/// `lock_addr == 0`) and are reused; userspace deletes those of exited tasks
/// every interval. (An LRU map was tried: it evicted entries of tasks
/// sleeping in a wait under fork-storm churn, losing those waits.)
#[map]
pub static PENDING: HashMap<u64, PendingWait> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Waits that run with preemption disabled until they end, per CPU: pure
/// spinning waits and a mutex's first optimistic spin (`SPIN_SLOT`,
/// `MUTEX_SPIN_SLOT`; free when `lock_addr == 0`).
#[map]
pub static SPIN_PENDING: PerCpuArray<PendingWait> = PerCpuArray::with_max_entries(SPIN_SLOTS, 0);

/// A task's first wait that may sleep, filled in here and then inserted
/// into `PENDING` (88 bytes the 512-byte BPF stack cannot spare). Programs
/// on one CPU do not nest (the `BUSY` guard): one slot per CPU.
#[map]
pub static NEW_WAIT: PerCpuArray<PendingWait> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's cached kernel stacks. In the tp_btf default build: sets of
/// [`profiler_common::STACK_CACHE_WAYS`] entries by (lock, flags)
/// (`stack_cache_set`), each with its proof (`stack_proof`). Elsewhere: the
/// last stack captured per (thread, flags) slot (`stack_cache_index`),
/// reused when the stack budget is spent.
#[map]
pub static STACK_CACHE: PerCpuArray<CachedStack> = PerCpuArray::with_max_entries(STACK_CACHE_SLOTS, 0);

/// Aggregate mode: two per-CPU maps, one active (written by the programs)
/// while userspace drains the other; `ACTIVE[0]` says which.
#[map]
pub static AGG_A: PerCpuHashMap<AggKey, AggVal> = PerCpuHashMap::with_max_entries(DEFAULT_AGG_ENTRIES, 0);
/// The second aggregate map.
#[map]
pub static AGG_B: PerCpuHashMap<AggKey, AggVal> = PerCpuHashMap::with_max_entries(DEFAULT_AGG_ENTRIES, 0);
/// Per-CPU direct-mapped aggregate cache in front of the hash maps, two
/// generations of `AGG_CACHE_SLOTS` slots.
#[map]
pub static AGG_CACHE: PerCpuArray<AggSlot> = PerCpuArray::with_max_entries(2 * AGG_CACHE_SLOTS, 0);
/// Per-CPU log of waits that missed the cache, two generations of
/// `AGG_LOG_ENTRIES` (see `profiler_common::AGG_LOG_ENTRIES`); userspace
/// sizes it to one entry in stream mode.
#[map]
pub static AGG_LOG: PerCpuArray<AggLogEntry> = PerCpuArray::with_max_entries(2 * AGG_LOG_ENTRIES, 0);
/// Entries used per generation of `AGG_LOG`, per CPU.
#[map]
pub static AGG_LOG_LEN: PerCpuArray<u32> = PerCpuArray::with_max_entries(2, 0);
/// Generation the programs write: `ACTIVE[0] & 1` picks the aggregate map
/// and the cache half.
#[map]
pub static ACTIVE: Array<u32> = Array::with_max_entries(1, 0);
/// An all-zero aggregate value, never written: the initial value of a new
/// aggregate key (too big for the 512-byte BPF stack).
#[map]
pub static AGG_ZERO: Array<AggVal> = Array::with_max_entries(1, 0);

/// `HOLD_ON[0]` is set by userspace once release probes are attached:
/// contended acquisitions then start hold tracking.
#[map]
pub static HOLD_ON: Array<u32> = Array::with_max_entries(1, 0);

/// Holds in progress of contended acquisitions.
#[map]
pub static HOLDS: HashMap<HoldKey, HoldStart> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Nesting depth of probed spinning slowpaths on this CPU (kretprobes do not
/// see the lock, so nested irq entries must be told apart from the outer one).
#[map]
pub static SPIN_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU stack walk budget.
#[map]
pub static STACK_BUDGET: PerCpuArray<StackBudget> = PerCpuArray::with_max_entries(1, 0);

/// Kernel stacks captured when waits begin, keyed by their id (the hash of
/// their frames, see `profiler_common::StackId`). LRU: stacks nothing used
/// for a while make room; an id never comes to name another stack.
#[map]
pub static STACKS: LruHashMap<StackId, StoredStack> = LruHashMap::with_max_entries(DEFAULT_STACK_ENTRIES, 0);

/// The stack being captured, per CPU (too big for the 512-byte BPF stack).
#[map]
pub static STACK_SCRATCH: PerCpuArray<StoredStack> = PerCpuArray::with_max_entries(1, 0);

/// User stacks captured with `--user-stacks`, keyed by their id (a hash of
/// the process and its frames). LRU like `STACKS`; userspace sizes it to
/// one entry when user stacks are off.
#[map]
pub static USER_STACKS: LruHashMap<StackId, StoredUserStack> = LruHashMap::with_max_entries(DEFAULT_STACK_ENTRIES, 0);

/// The user stack being captured, per CPU.
#[map]
pub static USER_STACK_SCRATCH: PerCpuArray<StoredUserStack> = PerCpuArray::with_max_entries(1, 0);

/// `--user-stacks` (unwind mode): per (process, ip), the stack slots whose
/// words decide its unwinding, written by userspace (see `unwind`);
/// userspace sizes it to one entry in other modes.
#[map]
pub static UNWIND_PLANS: LruHashMap<UnwindPlanKey, UnwindPlan> = LruHashMap::with_max_entries(UNWIND_PLAN_ENTRIES, 0);

/// `--user-stacks` (unwind mode): per (process, ip), the stack slot of the
/// first return address (`ROOT_LR`: the link register), written by
/// userspace; sized to one entry in other modes.
#[map]
pub static UNWIND_ROOTS: LruHashMap<UnwindPlanKey, u32> = LruHashMap::with_max_entries(UNWIND_PLAN_ENTRIES, 0);

/// The user stack being copied, per CPU.
#[map]
pub static USER_STACK_COPY_SCRATCH: PerCpuArray<CopyScratch> = PerCpuArray::with_max_entries(1, 0);

/// A copy being made, and the map keys looked up for it: in map memory,
/// not on the BPF stack (the pre-6.2 begin programs, which copy `Config`
/// to theirs, leave the copy's call little room).
#[repr(C)]
pub struct CopyScratch {
    pub copy: UserStackCopy,
    pub key: UnwindPlanKey,
    pub id: StackId,
}

/// Futex contentions in progress, per thread id (see `futex`); userspace
/// reaps the entries of exited threads and sizes the map to one entry when
/// futex tracing is off.
#[map]
pub static FUTEX_WAITS: HashMap<u32, FutexWait> = HashMap::with_max_entries(FUTEX_WAIT_ENTRIES, 0);

/// `--owner-stacks`: the stack a waiter's owner slept in, holding the lock,
/// when the wait began, per waiting task (`task_key`), until the wait
/// ends; userspace sizes it to one entry when owner stacks are off.
#[map]
pub static OWNER_ASLEEP: HashMap<u64, OwnerAsleep> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Identities of lock addresses, confirmed in the kernel (see `identity`).
#[map]
pub static IDENTITIES: HashMap<u64, LockIdent> = HashMap::with_max_entries(IDENT_ENTRIES, 0);

/// The last lock address identified per slot, per CPU.
#[map]
pub static IDENT_SEEN: PerCpuArray<u64> = PerCpuArray::with_max_entries(IDENT_SEEN_SLOTS, 0);

/// This CPU's run-queue lock, once recorded in `IDENTITIES`.
#[map]
pub static RQ_SEEN: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Each thread's last wait on a lock that records its owner, one slot per
/// thread (`acquired_index`): which lock, with which stack (once it holds
/// the lock, the owner's stack for later waiters). Mmapable only for its
/// layout: the kernel then puts the values on a page boundary, so each
/// 64-byte slot is one cache line. A plain array's values start 56 bytes
/// into a line, and a thread noting its wait dirtied the lines of the
/// threads with the ids beside its own (a storm's threads have consecutive
/// ids): 10% of the begin program's samples were the misses on its own slot.
#[map]
pub static ACQUIRED: Array<Acquired> = Array::with_max_entries(ACQUIRED_SLOTS, BPF_F_MMAPABLE);

/// The holder of each lock with no owner field whose hold is being timed.
#[map]
pub static HOLDERS: HashMap<u64, Holder> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Per-CPU counters, indexed by `profiler_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Per-CPU re-entrancy guard of the programs that run with preemption
/// disabled (tracepoints, kprobes): non-zero while one runs on this CPU.
#[map]
pub static BUSY: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// `yield_to` calls in progress, by yielding thread.
#[map]
pub static YIELD_PENDING: HashMap<u32, YieldStart> = HashMap::with_max_entries(YIELD_PENDING_ENTRIES, 0);

/// Processes to record when `Config::filter_tgid` is set.
#[map]
pub static TGID_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(TGID_FILTER_ENTRIES, 0);

/// cgroups (v2 ids) to record when `Config::filter_cgroup` is set: the
/// `--cgroup` cgroups and their descendants.
#[map]
pub static CGROUP_FILTER: HashMap<u64, u8> = HashMap::with_max_entries(CGROUP_FILTER_ENTRIES, 0);
