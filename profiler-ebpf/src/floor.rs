//! The overhead floor of `cargo xtask bench` (feature `floor`, never in the
//! product object): the cheapest possible programs on the same tracepoints,
//! counting calls and nothing else.

use aya_ebpf::{macros::btf_tracepoint, macros::map, maps::PerCpuArray, programs::BtfTracePointContext};

/// Calls counted per CPU: `[begins, ends]`.
#[map]
static FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

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
pub fn floor_begin_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count(0)
}

#[btf_tracepoint(function = "contention_end")]
pub fn floor_end_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count(1)
}
