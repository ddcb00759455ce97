//! The overhead floor of `cargo xtask bench` (feature `floor`, never in the
//! product object): the cheapest possible programs on the same tracepoints,
//! counting calls and nothing else.

use aya_ebpf::{macros::btf_tracepoint, macros::map, maps::PerCpuArray, programs::BtfTracePointContext};
use profiler_common::{LockType, names::floor};

/// Calls counted per CPU (see [`floor`]'s indices).
#[map]
static FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(floor::SLOTS, 0);

#[inline(always)]
fn floor_count(idx: u32) -> i32 {
    if let Some(slot) = FLOOR.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot from a successful lookup; tracepoint programs
        // run with preemption disabled.
        unsafe { *slot += 1 };
    }
    0
}

#[btf_tracepoint(function = "contention_begin")]
pub fn floor_begin_btf(ctx: BtfTracePointContext) -> i32 {
    // contention_begin(void *lock, unsigned int flags): argument 1.
    let flags: u32 = ctx.arg(1);
    // A pure spinning wait begins once: its begins are its waits.
    match LockType::from_flags(flags) {
        LockType::Spinlock => floor_count(floor::SPINLOCK_BEGINS),
        LockType::Rwlock => floor_count(floor::RWLOCK_BEGINS),
        _ => 0,
    };
    floor_count(floor::BEGINS)
}

#[btf_tracepoint(function = "contention_end")]
pub fn floor_end_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count(floor::ENDS)
}
