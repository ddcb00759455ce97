//! The overhead floor of `cargo xtask bench` (feature `floor`, never in the
//! product object): the cheapest possible programs on the same tracepoints,
//! counting calls and nothing else.

use aya_ebpf::{macros::btf_tracepoint, macros::map, maps::PerCpuArray, programs::BtfTracePointContext};

/// Calls counted per CPU.
#[map]
static FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn floor_count() -> i32 {
    if let Some(slot) = FLOOR.get_ptr_mut(0) {
        // SAFETY: per-CPU slot from a successful lookup; tracepoint programs
        // run with preemption disabled.
        unsafe { *slot += 1 };
    }
    0
}

#[btf_tracepoint(function = "contention_begin")]
pub fn floor_begin_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count()
}

#[btf_tracepoint(function = "contention_end")]
pub fn floor_end_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count()
}
