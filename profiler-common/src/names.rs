//! Names of the programs, maps and globals in lockprof's eBPF object, as
//! userspace asks for them. The eBPF side declares them as identifiers
//! (aya's macros take the function or static name); a unit test of the
//! profiler checks that the built object holds exactly these names.

/// The global userspace overrides before loading (`Config`).
pub const CONFIG: &str = "CONFIG";

/// The global holding the address of the kernel's kretprobe trampoline
/// (`__kretprobe_trampoline`, `arch_rethook_trampoline`), set on arm64: a
/// link register holding it was rewritten by another tool's kretprobe.
pub const KRETPROBE_TRAMPOLINE: &str = "KRETPROBE_TRAMPOLINE";

/// Global: where a task's user registers are (`UserRegsLayout`), for
/// `--user-unwind copy`.
pub const USER_REGS_LAYOUT: &str = "USER_REGS_LAYOUT";

/// Map names.
pub mod map {
    /// Ring buffer of records.
    pub const EVENTS: &str = "EVENTS";
    /// Waits that may sleep, per task.
    pub const PENDING: &str = "PENDING";
    /// Pure spinning waits, per CPU.
    pub const SPIN_PENDING: &str = "SPIN_PENDING";
    /// Per-CPU scratch for a task's first wait that may sleep, before its insert.
    pub const NEW_WAIT: &str = "NEW_WAIT";
    /// Per-CPU cache of recent stacks per thread slot.
    pub const STACK_CACHE: &str = "STACK_CACHE";
    /// First aggregate map.
    pub const AGG_A: &str = "AGG_A";
    /// Second aggregate map.
    pub const AGG_B: &str = "AGG_B";
    /// Per-CPU direct-mapped aggregate cache in front of the hash maps.
    pub const AGG_CACHE: &str = "AGG_CACHE";
    /// Per-CPU log of waits that missed the aggregate cache.
    pub const AGG_LOG: &str = "AGG_LOG";
    /// Entries used in each generation of the per-CPU log.
    pub const AGG_LOG_LEN: &str = "AGG_LOG_LEN";
    /// Which aggregate map the programs write.
    pub const ACTIVE: &str = "ACTIVE";
    /// An all-zero aggregate value: the initial value of a new key.
    pub const AGG_ZERO: &str = "AGG_ZERO";
    /// Set once release probes are attached.
    pub const HOLD_ON: &str = "HOLD_ON";
    /// Holds in progress.
    pub const HOLDS: &str = "HOLDS";
    /// Nesting depth of probed spinning slowpaths.
    pub const SPIN_DEPTH: &str = "SPIN_DEPTH";
    /// Per-CPU stack budget.
    pub const STACK_BUDGET: &str = "STACK_BUDGET";
    /// Kernel stacks, keyed by their id (an LRU hash map).
    pub const STACKS: &str = "STACKS";
    /// Per-CPU buffer a stack is walked into before it is stored.
    pub const STACK_SCRATCH: &str = "STACK_SCRATCH";
    /// Lock identities confirmed in the kernel.
    pub const IDENTITIES: &str = "IDENTITIES";
    /// Per-CPU last identified lock per slot.
    pub const IDENT_SEEN: &str = "IDENT_SEEN";
    /// Per-CPU run-queue lock, once recorded.
    pub const RQ_SEEN: &str = "RQ_SEEN";
    /// Each thread's last waits on locks that record their owner (one slot per thread).
    pub const ACQUIRED: &str = "ACQUIRED";
    /// Holders of locks with no owner field, while their holds are timed.
    pub const HOLDERS: &str = "HOLDERS";
    /// Per-CPU counters.
    pub const COUNTERS: &str = "COUNTERS";
    /// Per-CPU re-entrancy guard.
    pub const BUSY: &str = "BUSY";
    /// `yield_to` calls in progress.
    pub const YIELD_PENDING: &str = "YIELD_PENDING";
    /// `--pid` filter.
    pub const TGID_FILTER: &str = "TGID_FILTER";
    /// `--cgroup` filter (cgroup v2 ids).
    pub const CGROUP_FILTER: &str = "CGROUP_FILTER";
    /// User stacks, keyed by their id (an LRU hash map).
    pub const USER_STACKS: &str = "USER_STACKS";
    /// Per-CPU buffer a user stack is walked into before it is stored.
    pub const USER_STACK_SCRATCH: &str = "USER_STACK_SCRATCH";
    /// `--user-stacks` (unwind mode): the stack slot of the first return
    /// address, per (process, ip) (an LRU hash map userspace writes).
    pub const UNWIND_ROOTS: &str = "UNWIND_ROOTS";
    /// `--user-stacks` (unwind mode): the stack slots to compare, per
    /// (process, ip, first return address) (an LRU hash map userspace writes).
    pub const UNWIND_PLANS: &str = "UNWIND_PLANS";
    /// Per-CPU buffer a user stack is copied into before it is sent.
    pub const USER_STACK_COPY_SCRATCH: &str = "USER_STACK_COPY_SCRATCH";
    /// Futex contentions in progress, per thread.
    pub const FUTEX_WAITS: &str = "FUTEX_WAITS";
    /// `--owner-stacks`: the stack of a waiter's sleeping owner, per waiting task.
    pub const OWNER_ASLEEP: &str = "OWNER_ASLEEP";

    /// Every map of the product object.
    pub const ALL: &[&str] = &[
        EVENTS,
        PENDING,
        SPIN_PENDING,
        NEW_WAIT,
        STACK_CACHE,
        AGG_A,
        AGG_B,
        AGG_CACHE,
        AGG_LOG,
        AGG_LOG_LEN,
        ACTIVE,
        AGG_ZERO,
        HOLD_ON,
        HOLDS,
        SPIN_DEPTH,
        STACK_BUDGET,
        STACKS,
        STACK_SCRATCH,
        IDENTITIES,
        IDENT_SEEN,
        RQ_SEEN,
        ACQUIRED,
        HOLDERS,
        COUNTERS,
        BUSY,
        YIELD_PENDING,
        TGID_FILTER,
        CGROUP_FILTER,
        USER_STACKS,
        USER_STACK_SCRATCH,
        UNWIND_ROOTS,
        UNWIND_PLANS,
        USER_STACK_COPY_SCRATCH,
        FUTEX_WAITS,
        OWNER_ASLEEP,
    ];
}

/// Program names.
pub mod prog {
    /// `tp_btf/contention_begin`.
    pub const BEGIN_BTF: &str = "contention_begin_btf";
    /// `tp_btf/contention_end`.
    pub const END_BTF: &str = "contention_end_btf";
    /// `tracepoint/lock/contention_begin`.
    pub const BEGIN_TP: &str = "contention_begin_tp";
    /// [`BEGIN_BTF`] built for kernels without `bpf_rdonly_cast` (before 6.2).
    pub const BEGIN_BTF_V61: &str = "contention_begin_btf_v61";
    /// [`BEGIN_TP`] built for kernels without `bpf_rdonly_cast` (before 6.2).
    pub const BEGIN_TP_V61: &str = "contention_begin_tp_v61";
    /// `tracepoint/lock/contention_end`.
    pub const END_TP: &str = "contention_end_tp";

    /// kprobe at the mutex slowpaths' entry.
    pub const KP_MUTEX: &str = "kp_mutex";
    /// kprobe at `rwsem_down_read_slowpath`.
    pub const KP_RWSEM_READ: &str = "kp_rwsem_read";
    /// kprobe at `rwsem_down_write_slowpath`.
    pub const KP_RWSEM_WRITE: &str = "kp_rwsem_write";
    /// kprobe at `queued_read_lock_slowpath`.
    pub const KP_RWLOCK_READ: &str = "kp_rwlock_read";
    /// kprobe at `queued_write_lock_slowpath`.
    pub const KP_RWLOCK_WRITE: &str = "kp_rwlock_write";
    /// kprobe at PREEMPT_RT's `rt_mutex_slowlock`.
    pub const KP_RT_MUTEX: &str = "kp_rt_mutex";
    /// kprobe at PREEMPT_RT's `rtlock_slowlock_locked`.
    pub const KP_RTLOCK: &str = "kp_rtlock";
    /// kprobe at PREEMPT_RT's `__rwbase_read_lock`.
    pub const KP_RWBASE_READ: &str = "kp_rwbase_read";
    /// kretprobe of the sleeping slowpaths.
    pub const KRP_SLEEP: &str = "krp_sleep";
    /// kretprobe of the spinning slowpaths.
    pub const KRP_SPIN: &str = "krp_spin";

    /// fentry/fexit pairs of the slowpaths.
    pub const FE_MUTEX: &str = "fe_mutex";
    /// fexit of `__mutex_lock_slowpath`.
    pub const FX_MUTEX: &str = "fx_mutex";
    /// fentry of `__mutex_lock_killable_slowpath`.
    pub const FE_MUTEX_KILLABLE: &str = "fe_mutex_killable";
    /// fexit of `__mutex_lock_killable_slowpath`.
    pub const FX_MUTEX_KILLABLE: &str = "fx_mutex_killable";
    /// fentry of `__mutex_lock_interruptible_slowpath`.
    pub const FE_MUTEX_INTERRUPTIBLE: &str = "fe_mutex_interruptible";
    /// fexit of `__mutex_lock_interruptible_slowpath`.
    pub const FX_MUTEX_INTERRUPTIBLE: &str = "fx_mutex_interruptible";
    /// fentry of `rwsem_down_read_slowpath`.
    pub const FE_RWSEM_READ: &str = "fe_rwsem_read";
    /// fexit of `rwsem_down_read_slowpath`.
    pub const FX_RWSEM_READ: &str = "fx_rwsem_read";
    /// fentry of `rwsem_down_write_slowpath`.
    pub const FE_RWSEM_WRITE: &str = "fe_rwsem_write";
    /// fexit of `rwsem_down_write_slowpath`.
    pub const FX_RWSEM_WRITE: &str = "fx_rwsem_write";
    /// fentry of `queued_read_lock_slowpath`.
    pub const FE_RWLOCK_READ: &str = "fe_rwlock_read";
    /// fexit of `queued_read_lock_slowpath`.
    pub const FX_RWLOCK_READ: &str = "fx_rwlock_read";
    /// fentry of `queued_write_lock_slowpath`.
    pub const FE_RWLOCK_WRITE: &str = "fe_rwlock_write";
    /// fexit of `queued_write_lock_slowpath`.
    pub const FX_RWLOCK_WRITE: &str = "fx_rwlock_write";
    /// fentry of PREEMPT_RT's `rt_mutex_slowlock`.
    pub const FE_RT_MUTEX: &str = "fe_rt_mutex";
    /// fexit of PREEMPT_RT's `rt_mutex_slowlock`.
    pub const FX_RT_MUTEX: &str = "fx_rt_mutex";
    /// fentry of PREEMPT_RT's `rtlock_slowlock_locked`.
    pub const FE_RTLOCK: &str = "fe_rtlock";
    /// fexit of PREEMPT_RT's `rtlock_slowlock_locked`.
    pub const FX_RTLOCK: &str = "fx_rtlock";
    /// fentry of PREEMPT_RT's `__rwbase_read_lock`.
    pub const FE_RWBASE_READ: &str = "fe_rwbase_read";
    /// fexit of PREEMPT_RT's `__rwbase_read_lock`.
    pub const FX_RWBASE_READ: &str = "fx_rwbase_read";

    /// kprobe on any release function.
    pub const KP_RELEASE: &str = "kp_release";
    /// fentry on `mutex_unlock`.
    pub const FR_MUTEX_UNLOCK: &str = "fr_mutex_unlock";
    /// fentry on `up_read`.
    pub const FR_UP_READ: &str = "fr_up_read";
    /// fentry on `up_write`.
    pub const FR_UP_WRITE: &str = "fr_up_write";
    /// fentry on `_raw_read_unlock`.
    pub const FR_READ_UNLOCK: &str = "fr_read_unlock";
    /// fentry on `_raw_write_unlock`.
    pub const FR_WRITE_UNLOCK: &str = "fr_write_unlock";
    /// fentry on `_raw_read_unlock_irq`.
    pub const FR_READ_UNLOCK_IRQ: &str = "fr_read_unlock_irq";
    /// fentry on `_raw_write_unlock_irq`.
    pub const FR_WRITE_UNLOCK_IRQ: &str = "fr_write_unlock_irq";
    /// fentry on `_raw_read_unlock_irqrestore`.
    pub const FR_READ_UNLOCK_IRQRESTORE: &str = "fr_read_unlock_irqrestore";
    /// fentry on `_raw_write_unlock_irqrestore`.
    pub const FR_WRITE_UNLOCK_IRQRESTORE: &str = "fr_write_unlock_irqrestore";
    /// fentry on `_raw_read_unlock_bh`.
    pub const FR_READ_UNLOCK_BH: &str = "fr_read_unlock_bh";
    /// fentry on `_raw_write_unlock_bh`.
    pub const FR_WRITE_UNLOCK_BH: &str = "fr_write_unlock_bh";
    /// fentry on PREEMPT_RT's `rt_read_unlock` (rwlock_t readers).
    pub const FR_RT_READ_UNLOCK: &str = "fr_rt_read_unlock";
    /// fentry on PREEMPT_RT's `rt_write_unlock` (rwlock_t writers).
    pub const FR_RT_WRITE_UNLOCK: &str = "fr_rt_write_unlock";

    /// fentry on `yield_to`.
    pub const FE_YIELD_TO: &str = "fe_yield_to";
    /// fexit of `yield_to`.
    pub const FX_YIELD_TO: &str = "fx_yield_to";
    /// kprobe on `yield_to`.
    pub const KP_YIELD_TO: &str = "kp_yield_to";
    /// kretprobe of `yield_to`.
    pub const KRP_YIELD_TO: &str = "krp_yield_to";
    /// The `yield_to` programs of every backend (their kernel-skipped runs are counted apart).
    pub const YIELD: &[&str] = &[FE_YIELD_TO, FX_YIELD_TO, KP_YIELD_TO, KRP_YIELD_TO];

    /// The `kmem_cache` iterator.
    pub const SLAB_CACHES: &str = "slab_caches";

    /// `syscalls:sys_enter_futex`.
    pub const FUTEX_ENTER: &str = "futex_enter";
    /// `syscalls:sys_enter_futex_wait` (6.7+).
    pub const FUTEX_WAIT_ENTER: &str = "futex_wait_enter";
    /// `syscalls:sys_enter_futex_waitv` (5.16+).
    pub const FUTEX_WAITV_ENTER: &str = "futex_waitv_enter";
    /// `syscalls:sys_enter_futex_wake` (6.7+).
    pub const FUTEX_WAKE_ENTER: &str = "futex_wake_enter";
    /// `syscalls:sys_exit_futex`, `sys_exit_futex_wait` and `sys_exit_futex_waitv`.
    pub const FUTEX_EXIT: &str = "futex_exit";

    /// Every program of the product object.
    pub const ALL: &[&str] = &[
        SLAB_CACHES,
        BEGIN_BTF,
        END_BTF,
        BEGIN_TP,
        END_TP,
        BEGIN_BTF_V61,
        BEGIN_TP_V61,
        KP_MUTEX,
        KP_RWSEM_READ,
        KP_RWSEM_WRITE,
        KP_RWLOCK_READ,
        KP_RWLOCK_WRITE,
        KP_RT_MUTEX,
        KP_RTLOCK,
        KP_RWBASE_READ,
        KRP_SLEEP,
        KRP_SPIN,
        FE_MUTEX,
        FX_MUTEX,
        FE_MUTEX_KILLABLE,
        FX_MUTEX_KILLABLE,
        FE_MUTEX_INTERRUPTIBLE,
        FX_MUTEX_INTERRUPTIBLE,
        FE_RWSEM_READ,
        FX_RWSEM_READ,
        FE_RWSEM_WRITE,
        FX_RWSEM_WRITE,
        FE_RWLOCK_READ,
        FX_RWLOCK_READ,
        FE_RWLOCK_WRITE,
        FX_RWLOCK_WRITE,
        FE_RT_MUTEX,
        FX_RT_MUTEX,
        FE_RTLOCK,
        FX_RTLOCK,
        FE_RWBASE_READ,
        FX_RWBASE_READ,
        KP_RELEASE,
        FR_MUTEX_UNLOCK,
        FR_UP_READ,
        FR_UP_WRITE,
        FR_READ_UNLOCK,
        FR_WRITE_UNLOCK,
        FR_READ_UNLOCK_IRQ,
        FR_WRITE_UNLOCK_IRQ,
        FR_READ_UNLOCK_IRQRESTORE,
        FR_WRITE_UNLOCK_IRQRESTORE,
        FR_READ_UNLOCK_BH,
        FR_WRITE_UNLOCK_BH,
        FR_RT_READ_UNLOCK,
        FR_RT_WRITE_UNLOCK,
        FE_YIELD_TO,
        FX_YIELD_TO,
        KP_YIELD_TO,
        KRP_YIELD_TO,
        FUTEX_ENTER,
        FUTEX_WAIT_ENTER,
        FUTEX_WAITV_ENTER,
        FUTEX_WAKE_ENTER,
        FUTEX_EXIT,
    ];
}

/// The futex system calls' tracepoints (category `syscalls`), each with the
/// program attached to it; a kernel without one (5.10 has no `futex_wait`)
/// goes without it.
pub mod futex {
    use super::prog;

    /// Tracepoint category.
    pub const CATEGORY: &str = "syscalls";
    /// (tracepoint, program), in attach order: exits before entries, so no
    /// entry is recorded whose return would be missed.
    pub const TRACEPOINTS: &[(&str, &str)] = &[
        ("sys_exit_futex", prog::FUTEX_EXIT),
        ("sys_exit_futex_wait", prog::FUTEX_EXIT),
        ("sys_exit_futex_waitv", prog::FUTEX_EXIT),
        ("sys_enter_futex", prog::FUTEX_ENTER),
        ("sys_enter_futex_wait", prog::FUTEX_WAIT_ENTER),
        ("sys_enter_futex_waitv", prog::FUTEX_WAITV_ENTER),
        ("sys_enter_futex_wake", prog::FUTEX_WAKE_ENTER),
    ];
    /// The ones every futex-capable kernel has: without them, no futex tracing.
    pub const REQUIRED: &[&str] = &["sys_exit_futex", "sys_enter_futex"];
}

/// The benchmark floor (only in objects built with the `floor` feature).
pub mod floor {
    /// Counts per CPU.
    pub const MAP: &str = "FLOOR";
    /// `tp_btf/contention_begin`, counting only.
    pub const BEGIN_BTF: &str = "floor_begin_btf";
    /// `tp_btf/contention_end`, counting only.
    pub const END_BTF: &str = "floor_end_btf";
    /// Index in `FLOOR`: `contention_begin` calls.
    pub const BEGINS: u32 = 0;
    /// Index in `FLOOR`: `contention_end` calls (one per contention).
    pub const ENDS: u32 = 1;
    /// Index in `FLOOR`: begins of spinlock waits (a pure spinning wait
    /// begins once, so these are its waits).
    pub const SPINLOCK_BEGINS: u32 = 2;
    /// Index in `FLOOR`: begins of rwlock waits.
    pub const RWLOCK_BEGINS: u32 = 3;
    /// Entries of `FLOOR`.
    pub const SLOTS: u32 = 4;
}
