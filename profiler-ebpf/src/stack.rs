//! Kernel stacks: captured under a per-CPU budget, reused when it is spent.

use aya_ebpf::programs::tracing::StackIdContext;
use aya_log_ebpf::warn;
use profiler_common::{Config, STACK_SKIPPED, STACK_WINDOW_NS, TaskWait, counter};

use crate::{
    context::count,
    maps::{STACK_BUDGET, STACKS},
};

/// Walks the kernel stack into the stack map; a negative errno on failure.
#[inline(always)]
fn capture<C: StackIdContext>(ctx: &C) -> i32 {
    match ctx.get_stackid(&STACKS, 0) {
        Ok(id) => id as i32,
        Err(e) => {
            if count(counter::STACK_FAILED) {
                warn!(ctx, "lockprof: bpf_get_stackid failed: {}", e);
            }
            e
        }
    }
}

/// Whether this CPU may walk one more stack in the current window. A kernel
/// stack walk costs ~1.5-2 us, by far the largest part of a traced
/// contention; under a storm the budget bounds that cost.
#[inline(always)]
fn budget_allows(limit: u32, now: u64) -> bool {
    if limit == 0 {
        return true;
    }
    let Some(b) = STACK_BUDGET.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime (see `context` for concurrent updates: at worst a miscount).
    let b = unsafe { &mut *b };
    if now.wrapping_sub(b.window_ns) >= STACK_WINDOW_NS {
        b.window_ns = now;
        b.used = 0;
    }
    if b.used >= u64::from(limit) {
        return false;
    }
    b.used += 1;
    true
}

/// The stack for a new wait (or call): walked when the budget allows (and
/// remembered in the task's entry), else the task's last stack for the same
/// lock and flags, else [`STACK_SKIPPED`]. Both outcomes are counted.
#[inline(always)]
pub fn stack_for<C: StackIdContext>(
    ctx: &C,
    cfg: &Config,
    now: u64,
    lock_addr: u64,
    flags: u32,
    task: Option<&mut TaskWait>,
) -> i32 {
    if budget_allows(cfg.stacks_per_window, now) {
        let id = capture(ctx);
        if let Some(t) = task {
            t.last_lock = lock_addr;
            t.last_flags = flags;
            t.last_stack_id = id;
        }
        return id;
    }
    match task {
        Some(t) if t.last_lock == lock_addr && t.last_flags == flags && t.last_stack_id >= 0 => {
            count(counter::STACK_REUSED);
            t.last_stack_id
        }
        _ => {
            count(counter::STACK_SKIPPED);
            STACK_SKIPPED
        }
    }
}
