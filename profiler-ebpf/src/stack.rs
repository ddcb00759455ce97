//! Kernel stacks: captured under a per-CPU budget, reused when it is spent.

use aya_ebpf::programs::tracing::StackIdContext;
use aya_log_ebpf::warn;
use profiler_common::{CachedStack, Config, STACK_CACHE_SLOTS, STACK_SKIPPED, STACK_WINDOW_NS, counter};

use crate::{
    context::count,
    maps::{STACK_BUDGET, STACK_CACHE, STACKS},
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

/// The stack for a new wait (or call) of thread `tid`: walked when the
/// budget allows (and remembered in this CPU's stack cache), else the
/// thread's last stack on this CPU for the same lock and flags, else
/// [`STACK_SKIPPED`]. Both outcomes are counted.
#[inline(always)]
pub fn stack_for<C: StackIdContext>(ctx: &C, cfg: &Config, now: u64, lock_addr: u64, flags: u32, tid: u32) -> i32 {
    let cached = STACK_CACHE.get_ptr_mut(tid % STACK_CACHE_SLOTS);
    if budget_allows(cfg.stacks_per_window, now) {
        let id = capture(ctx);
        if let Some(c) = cached {
            // SAFETY: this CPU's cache entry from a successful lookup, valid
            // for the map's lifetime (see `context` for concurrent updates).
            unsafe { *c = CachedStack { lock_addr, tid, flags, stack_id: id, _pad: 0 } };
        }
        return id;
    }
    // SAFETY: as above; only read.
    match cached.map(|c| unsafe { *c }) {
        Some(c) if c.tid == tid && c.lock_addr == lock_addr && c.flags == flags && c.stack_id >= 0 => {
            count(counter::STACK_REUSED);
            c.stack_id
        }
        _ => {
            count(counter::STACK_SKIPPED);
            STACK_SKIPPED
        }
    }
}
