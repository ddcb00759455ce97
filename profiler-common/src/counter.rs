//! Indices and names of the per-CPU failure and bookkeeping counters
//! (`COUNTERS` map), and the names of the counters userspace keeps ([`user`]).
//! Every counter name is defined here once; userspace's `Counters` says
//! which ones are losses.

/// Contention events submitted to the ring buffer.
pub const EVENTS: u32 = 0;
/// Ring buffer had no room: event lost.
pub const RINGBUF_FULL: u32 = 1;
/// A stack could not be walked (`bpf_get_stack`) or stored in the stack
/// map: event kept without stack.
pub const STACK_FAILED: u32 = 2;
/// Pending-wait map full at begin: contention not measured.
pub const PENDING_FULL: u32 = 3;
/// `contention_end` with no matching begin (attached mid-wait).
pub const END_WITHOUT_BEGIN: u32 = 4;
/// Begin while the same task (or, for spinning waits, this CPU at two
/// levels already) waited on another lock: the inner wait is skipped.
/// Spinning waits nested one level deep are measured ([`NESTED_WAITS`]).
pub const NESTED: u32 = 5;
/// Begin again on the same lock (mutex: spin then sleep): merged.
pub const REPEATED_BEGIN: u32 = 6;
/// A lock program fired while another lockprof program was running on
/// this CPU (e.g. a map's own lock contended): skipped, so that no
/// pending wait is ever left behind by a half-seen nested contention.
pub const REENTERED: u32 = 7;
/// Stack budget spent: the stack of the same thread's previous wait on the
/// same lock with the same flags (or a cut stack proven as for
/// [`STACK_PROVEN`]) was reused.
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
/// A mutex's optimistic-spin slot still held another wait when a new one
/// began: that wait's end was never seen (the kernel skipped our end program,
/// see `end_without_begin`); it is discarded, not measured.
pub const STALE_SPIN: u32 = 17;
/// The lock identity map was full: that lock is named from userspace only.
pub const IDENT_MAP_FULL: u32 = 18;
/// Owners: the holder map was full, so a lock with no owner field that
/// lockprof saw acquired has no known owner for later waiters.
pub const HOLDER_MAP_FULL: u32 = 19;
/// Stacks stored in the stack map: first seen, or seen again after the map
/// forgot them.
pub const STACKS_STORED: u32 = 20;
/// A user stack could not be walked or stored: the wait keeps its kernel
/// stack only.
pub const USER_STACK_FAILED: u32 = 21;
/// User stacks stored in the user stack map (each announced to userspace).
pub const USER_STACKS_STORED: u32 = 22;
/// Futex waits (system calls that may sleep) seen.
pub const FUTEX_WAITS: u32 = 23;
/// Futex waits that continued their thread's previous contention on the
/// same word (a lock loop's retry): time added, not counted again.
pub const FUTEX_REWAITS: u32 = 24;
/// Futex waits that returned `EAGAIN`: the word had changed, no sleep.
pub const FUTEX_AGAIN: u32 = 25;
/// Futex waits that timed out.
pub const FUTEX_TIMED_OUT: u32 = 26;
/// Futex waits interrupted by a signal.
pub const FUTEX_INTERRUPTED: u32 = 27;
/// Futex waits that failed otherwise (bad address, deadlock, ...): not
/// measured.
pub const FUTEX_FAILED: u32 = 28;
/// The futex wait map had no room: that wait is not measured.
pub const FUTEX_MAP_FULL: u32 = 29;
/// A long wait (at least `--outlier-us`) whose stack was skipped at its
/// begin (the budget spent): its kernel stack taken at its end instead.
pub const STACKS_LATE: u32 = 30;
/// `--owner-stacks`: a sleeping owner's stack not walked (budget spent).
pub const OWNER_STACK_SKIPPED: u32 = 31;
/// Aggregate mode: a wait (or blame, or hold) whose key found its slot of
/// the per-CPU aggregate cache taken by another key, folded into the
/// aggregate hash map instead (the slower path, inside the critical
/// section). Counted in the slot (`AggSlot::missed`), not by the programs
/// in `COUNTERS`: userspace adds what each drain finds to this index.
pub const AGG_CACHE_MISSED: u32 = 32;
/// `--user-stacks` (unwind mode): user stacks copied and sent to userspace
/// to be unwound (a call path not yet known by its signature).
pub const USER_STACK_COPIES: u32 = 33;
/// `--user-stacks` (unwind mode): waits whose user stack was known by its
/// signature (an unwound stack of the same words): no copy.
pub const USER_STACK_SIGNED: u32 = 34;
/// Waits whose kernel stack was walked only to their caller
/// ([`crate::CALLER_DEPTH`] frames): the `--stack-rate` budget spent and no
/// reusable stack known. The caller has no budget of its own.
pub const STACKS_CUT: u32 = 35;
/// Spinning waits that began inside another spinning wait on the same CPU
/// (qrwlock's `wait_lock`, an interrupt's spinlock): measured under their
/// own lock, in `NESTED_SPIN_SLOT`.
pub const NESTED_WAITS: u32 = 36;
/// Waits whose whole kernel stack was reused without a walk, and without
/// spending the `--stack-rate` budget: a stack walked before for a wait on
/// the same lock with the same flags, proven by the waiter's own kernel
/// stack (the same return address at the same place above the program).
pub const STACK_PROVEN: u32 = 37;
/// Number of counters.
pub const COUNT: u32 = 38;

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
    "stale_spin_discarded",
    "ident_map_full",
    "holder_map_full",
    "stacks_stored",
    "user_stack_failed",
    "user_stacks_stored",
    "futex_waits",
    "futex_rewaits",
    "futex_again",
    "futex_timed_out",
    "futex_interrupted",
    "futex_failed",
    "futex_map_full",
    "stacks_late",
    "owner_stack_skipped",
    "agg_cache_missed",
    "user_stack_copies",
    "user_stack_signed",
    "stacks_cut",
    "nested",
    "stack_proven",
];

/// Names of the counters userspace keeps (not in the `COUNTERS` map); what
/// each means is documented on its field of userspace's `Counters`.
pub mod user {
    /// Program runs the kernel skipped to avoid recursion.
    pub const RECURSION_MISSES: &str = "recursion_misses";
    /// Of those, runs of the `yield_to` programs: those calls not measured.
    pub const YIELD_SKIPPED: &str = "yield_skipped";
    /// Events submitted that never reached the aggregator.
    pub const USERSPACE_LOST: &str = "userspace_lost";
    /// Ring buffer records of the wrong size.
    pub const MALFORMED_RECORDS: &str = "malformed_records";
    /// Map operations the kernel refused mid-session (aggregate flip or drain).
    pub const MAP_OPS_REFUSED: &str = "map_ops_refused";
    /// Stacks the kernel's stack map forgot before userspace read them.
    pub const STACKS_EVICTED: &str = "stacks_evicted";
    /// Distinct stacks read from the kernel's stack map and symbolized.
    pub const STACKS_READ: &str = "stacks_read";
    /// User stacks whose process was gone before its mappings were read:
    /// their frames stay raw addresses.
    pub const USER_STACKS_UNPINNED: &str = "user_stacks_unpinned";
    /// User stacks the kernel's map forgot before userspace read them.
    pub const USER_STACKS_EVICTED: &str = "user_stacks_evicted";
    /// Distinct user stacks that end early (one frame, or an outermost
    /// frame outside any mapping: code built without frame pointers).
    pub const USER_STACK_TRUNCATED: &str = "user_stack_truncated";
    /// Distinct user stacks cut where the frame-pointer walk left mapped code.
    pub const USER_STACK_LEFT_CODE: &str = "user_stack_left_code";
    /// `--user-unwind copy`: copies the unwinder dropped because it was
    /// behind: those waits show no user stack.
    pub const UNWIND_DROPPED: &str = "unwind_dropped";
    /// Copies whose process was gone before its binaries were read: only
    /// the innermost frame is kept.
    pub const UNWIND_PROCESS_GONE: &str = "unwind_process_gone";
    /// Copies unwound.
    pub const UNWIND_STACKS: &str = "unwind_stacks";
    /// Unwound stacks cut because they needed stack beyond the copy.
    pub const UNWIND_COPY_SHORT: &str = "unwind_copy_short";
    /// Unwound stacks cut where no unwind rule applied.
    pub const UNWIND_NO_RULE: &str = "unwind_no_rule";
    /// Unwound stacks cut at the depth limit.
    pub const UNWIND_DEEP: &str = "unwind_deep";
    /// Unwound call paths that could not be given a signature.
    pub const UNWIND_PLAN_FULL: &str = "unwind_plan_full";
    /// Binaries the unwinder could not read or parse.
    pub const UNWIND_BINARIES_UNREADABLE: &str = "unwind_binaries_unreadable";
    /// Plan or signed-stack writes the kernel refused.
    pub const UNWIND_MAP_REFUSED: &str = "unwind_map_refused";
    /// Separate debug files fetched from debuginfod.
    pub const DEBUGINFOD_FETCHED: &str = "debuginfod_fetched";
    /// Binaries whose debug file debuginfod did not give.
    pub const DEBUGINFOD_MISSED: &str = "debuginfod_missed";
    /// Waits folded into the `[other]` cgroup row.
    pub const CGROUP_KEYS_OVERFLOW: &str = "cgroup_keys_overflow";
    /// Waits still open at stop, measured up to the stop.
    pub const OPEN_AT_STOP: &str = "open_at_stop";
    /// Waits folded into the `[other]` lock row.
    pub const LOCK_KEYS_OVERFLOW: &str = "lock_keys_overflow";
    /// Waits folded into a lock's `[other]` caller row.
    pub const CALLER_KEYS_OVERFLOW: &str = "caller_keys_overflow";
    /// Waits folded into the `[other]` thread row.
    pub const TASK_KEYS_OVERFLOW: &str = "task_keys_overflow";
    /// Lock rows aged out.
    pub const LOCK_ROWS_AGED: &str = "lock_rows_aged";
    /// Caller rows aged out.
    pub const CALLER_ROWS_AGED: &str = "caller_rows_aged";
    /// Thread rows aged out.
    pub const TASK_ROWS_AGED: &str = "task_rows_aged";
    /// `yield_to` calls folded into `[other]` caller or pair rows.
    pub const YIELD_KEYS_OVERFLOW: &str = "yield_keys_overflow";
    /// `lockprof serve`: pprof window rows folded at its row cap.
    pub const WINDOW_ROWS_FOLDED: &str = "window_rows_folded";
}
