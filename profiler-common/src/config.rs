//! What userspace writes into the programs' `CONFIG` global before loading,
//! and the sizes both sides agree on.

use crate::layout::Layout;

/// Every completed wait goes through the ring buffer.
pub const MODE_STREAM: u32 = 0;
/// Waits are folded into per-CPU maps in the kernel, drained every interval.
pub const MODE_AGGREGATE: u32 = 1;

/// Length of one stack-budget window: `Config::stacks_per_window` stack
/// walks are allowed per CPU per window.
pub const STACK_WINDOW_NS: u64 = 100_000_000;
/// Stack-budget windows per second (`--stack-rate` is per second).
pub const STACK_WINDOWS_PER_S: u32 = (1_000_000_000 / STACK_WINDOW_NS) as u32;

/// Default number of ring buffer bytes (must be a power of two multiple of the page size).
pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;
/// Default capacity of the pending-wait map (concurrently waiting tasks).
pub const DEFAULT_PENDING_ENTRIES: u32 = 32768;
/// Default capacity of the stack trace map (distinct stacks).
pub const DEFAULT_STACK_ENTRIES: u32 = 16384;
/// Default capacity of each aggregate map (distinct lock, thread, flags, stack).
pub const DEFAULT_AGG_ENTRIES: u32 = 16384;
/// Capacity of the `yield_to` calls-in-progress map.
pub const YIELD_PENDING_ENTRIES: u32 = 4096;
/// Capacity of the `--pid` filter map.
pub const TGID_FILTER_ENTRIES: u32 = 1024;
/// Capacity of the `--cgroup` filter map (the cgroups and their descendants).
pub const CGROUP_FILTER_ENTRIES: u32 = 4096;
/// Depth of captured kernel stacks (`PERF_MAX_STACK_DEPTH`).
pub const MAX_STACK_DEPTH: usize = 127;

/// Field offsets in the classic `lock:contention_{begin,end}` tracepoint
/// records, read by userspace from tracefs (the defaults are the 6.x layout).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TpOffsets {
    /// `contention_begin.lock_addr`.
    pub begin_lock: u32,
    /// `contention_begin.flags`.
    pub begin_flags: u32,
    /// `contention_end.lock_addr`.
    pub end_lock: u32,
    /// Reserved, zero.
    pub _pad: u32,
}

impl TpOffsets {
    /// The layout of every kernel with these tracepoints so far.
    pub const DEFAULT: TpOffsets = TpOffsets { begin_lock: 8, begin_flags: 16, end_lock: 8, _pad: 0 };
}

/// Offsets inside `struct task_struct`, found in the kernel's BTF by
/// userspace (0: unknown).
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

/// Filters and knobs the userspace writes into the eBPF programs' `CONFIG`
/// global before loading.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bitmask of `LockType::bit`s to record; all ones records every type.
    pub type_mask: u32,
    /// Non-zero: only record processes present in the `TGID_FILTER` map.
    pub filter_tgid: u32,
    /// Stack walks allowed per CPU per [`STACK_WINDOW_NS`] window (0: unlimited).
    pub stacks_per_window: u32,
    /// [`MODE_STREAM`] or [`MODE_AGGREGATE`].
    pub mode: u32,
    /// Aggregate mode: waits at least this long are also streamed as
    /// outlier records (0: none).
    pub outlier_ns: u64,
    /// Wake the reader only when this many ring-buffer bytes are waiting;
    /// below that it polls on a timer (per-event wakeups cost more than the
    /// events themselves on a busy machine).
    pub wakeup_bytes: u64,
    /// Classic tracepoint field offsets.
    pub tp: TpOffsets,
    /// `struct task_struct` offsets (yield_to targets).
    pub task: TaskOffsets,
    /// Other kernel structure offsets.
    pub layout: Layout,
    /// Kernel functions the programs may call ([`KFUNC_GET_KMEM_CACHE`]):
    /// set only when userspace bound the call to this kernel's BTF id; and
    /// [`STACK_WORDS`], not a function: the programs may read their kernel
    /// stack through `bpf_rdonly_cast` (proven stacks).
    pub kfuncs: u32,
    /// Non-zero: read the owner of mutexes and rwsems when a wait begins
    /// (blame); with [`OWNER_STACKS`] set, also the stack of an owner found
    /// asleep.
    pub owners: u32,
    /// Non-zero: record each waiter's cgroup (v2 id).
    pub cgroups: u32,
    /// Non-zero: only record tasks whose cgroup is in the `CGROUP_FILTER` map.
    pub filter_cgroup: u32,
    /// Non-zero: record each waiter's user stack with its kernel stack.
    pub user_stacks: u32,
    /// lockprof's own process: its futex waits (its idle threads) are not
    /// recorded (0: none excluded).
    pub self_tgid: u32,
}

/// `Config::owners` bit: read owners (blame).
pub const OWNERS_ON: u32 = 1;
/// `Config::owners` bit (`--owner-stacks`): when a waiter finds a mutex or
/// rwsem owner asleep, walk the owner's current kernel stack (what it is
/// doing while it holds the lock), once per sleep, under the stack budget.
/// A bit of `owners` rather than a field: the 6.1-era begin programs copy
/// the configuration to their stack, and 8 more bytes there put 6.1's
/// verifier past its limit with `--cgroup`.
pub const OWNER_STACKS: u32 = 2;

/// `Config::kfuncs` bit: `bpf_get_kmem_cache` (6.13+) is callable.
pub const KFUNC_GET_KMEM_CACHE: u32 = 1;
/// `Config::kfuncs` bit: `bpf_rdonly_cast` (6.2+) is callable: kernel
/// structures at known addresses are read with plain (fault-safe) loads
/// instead of `bpf_probe_read_kernel`.
pub const KFUNC_RDONLY_CAST: u32 = 2;
/// `Config::kfuncs` bit: `bpf_task_from_pid` (6.2+) is callable.
pub const KFUNC_TASK_FROM_PID: u32 = 4;
/// `Config::kfuncs` bit: `bpf_task_release` (6.2+) is callable.
pub const KFUNC_TASK_RELEASE: u32 = 8;
/// `Config::kfuncs` bit: the programs may read their thread's kernel stack
/// with plain fault-safe loads (`bpf_rdonly_cast` to `task_struct`, whose
/// first 8 bytes are `thread_info.flags`, an integer, on this kernel): the
/// stack cache proves a reused stack against the stack itself. Set by
/// userspace with [`KFUNC_RDONLY_CAST`] only when the kernel's BTF says so.
pub const STACK_WORDS: u32 = 16;
/// The `Config::kfuncs` bits `--owner-stacks` needs: a trusted reference to
/// the owner task (which `bpf_get_task_stack` takes), its release, and plain
/// loads of the owner's state.
pub const KFUNCS_OWNER_STACKS: u32 = KFUNC_TASK_FROM_PID | KFUNC_TASK_RELEASE | KFUNC_RDONLY_CAST;

impl Config {
    /// Record every type and process, stream mode, no stack budget.
    pub const DEFAULT: Config = Config {
        type_mask: u32::MAX,
        filter_tgid: 0,
        stacks_per_window: 0,
        mode: MODE_STREAM,
        outlier_ns: 0,
        wakeup_bytes: (DEFAULT_RINGBUF_BYTES / 4) as u64,
        tp: TpOffsets::DEFAULT,
        task: TaskOffsets { pid: 0, tgid: 0, comm: 0, _pad: 0 },
        layout: Layout::UNKNOWN,
        kfuncs: 0,
        owners: 0,
        cgroups: 0,
        filter_cgroup: 0,
        user_stacks: 0,
        self_tgid: 0,
    };

    /// Whether a type or process filter is on (then unmatched ends are expected).
    pub const fn filtering(&self) -> bool {
        self.type_mask != u32::MAX || self.filter_tgid != 0 || self.filter_cgroup != 0
    }

    /// Whether the tracepoint backends load the default `contention_begin`
    /// build (the kernel has `bpf_rdonly_cast`, 6.2+) rather than its
    /// 6.1-era one, which leaves some of its work to `contention_end`.
    pub const fn modern_begin(&self) -> bool {
        self.kfuncs & KFUNC_RDONLY_CAST != 0
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout() {
        assert_eq!(core::mem::size_of::<Config>(), 64 + core::mem::size_of::<Layout>() + 24);
        assert_eq!(STACK_WINDOWS_PER_S, 10);
        assert!(!Config::DEFAULT.filtering());
    }
}
