//! KVM directed yield: `yield_to(p, preempt)` timed from entry to return,
//! with the caller stack, the outcome and the target's identity.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use aya_log_ebpf::warn;
use profiler_common::{EVENT_YIELD, YieldEvent, YieldStart, counter};

use crate::{
    context::{Ids, cgroup, config, count, current_comm, guarded, wanted},
    maps::YIELD_PENDING,
    ringbuf,
    stack::{WalkContext, stack_for},
};

/// `yield_to` entered: remember when, the caller stack and the target's
/// identity (read through the BTF offsets) for the return.
#[inline(always)]
fn yield_entry<C: WalkContext>(ctx: &C, task: u64, preempt: u32) -> Result<u32, u32> {
    let ids = Ids::current();
    let cfg = config();
    if !wanted(cfg, ids.tgid) || cgroup::<true>(cfg, core::ptr::null()).is_none() {
        return Ok(0);
    }
    // Under a pause-loop-exit storm yield_to is itself hot: stack walks share
    // the per-CPU budget of the waits (beyond it the call is kept, stackless).
    // SAFETY: helper without preconditions.
    let (stack_id, _, _) =
        stack_for::<_, false>(ctx, cfg, unsafe { bpf_ktime_get_ns() }, 0, 0, (ids.tid, ids.tgid), false);
    let off = cfg.task;
    let mut start = YieldStart { stack_id, preempt, ..YieldStart::default() };
    if task != 0 && off.pid != 0 {
        // SAFETY: `task` is the kernel's `struct task_struct *` argument and the
        // offsets come from the running kernel's BTF; bpf_probe_read_kernel
        // validates the address and fails cleanly.
        unsafe {
            start.target_pid = bpf_probe_read_kernel((task + u64::from(off.pid)) as *const u32).unwrap_or(0);
            start.target_tgid = bpf_probe_read_kernel((task + u64::from(off.tgid)) as *const u32).unwrap_or(0);
            if off.comm != 0 {
                start.target_comm =
                    bpf_probe_read_kernel((task + u64::from(off.comm)) as *const [u8; 16]).unwrap_or([0u8; 16]);
            }
        }
    }
    // SAFETY: helper without preconditions.
    start.start_ns = unsafe { bpf_ktime_get_ns() };
    if YIELD_PENDING.insert(ids.tid, start, 0).is_err() && count(counter::YIELD_MAP_FULL) {
        warn!(ctx, "lockprof: yield_to entry map full");
    }
    Ok(0)
}

/// `yield_to` returned `ret`: one record with the outcome and latency.
#[inline(always)]
fn yield_return<C: EbpfContext>(ctx: &C, ret: i32) -> Result<u32, u32> {
    let ids = Ids::current();
    // SAFETY: plain value copied out of a live entry.
    let Some(start) = (unsafe { YIELD_PENDING.get(ids.tid) }).copied() else {
        if wanted(config(), ids.tgid) {
            count(counter::YIELD_UNMATCHED);
        }
        return Ok(0);
    };
    let _ = YIELD_PENDING.remove(ids.tid);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    count(counter::YIELDS);
    ringbuf::send(
        ctx,
        YieldEvent {
            kind: EVENT_YIELD,
            cpu: ids.cpu,
            latency_ns: now.saturating_sub(start.start_ns),
            end_ns: now,
            target_pid: start.target_pid,
            target_tgid: start.target_tgid,
            tid: ids.tid,
            tgid: ids.tgid,
            ret,
            preempt: start.preempt,
            stack_id: start.stack_id,
            comm: current_comm(),
            target_comm: start.target_comm,
        },
    );
    Ok(0)
}

/// fentry on `yield_to`.
#[fentry]
pub fn fe_yield_to(ctx: FEntryContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let preempt: u64 = ctx.arg(1);
    match yield_entry(&ctx, task, u32::from(preempt & 0xff != 0)) {
        Ok(r) | Err(r) => r as i32,
    }
}

/// fexit of `yield_to`: arguments, then the return value.
#[fexit]
pub fn fx_yield_to(ctx: FExitContext) -> i32 {
    let ret: i64 = ctx.arg(2);
    match yield_return(&ctx, ret as i32) {
        Ok(r) | Err(r) => r as i32,
    }
}

/// kprobe on `yield_to` (when trampolines are unavailable).
#[kprobe]
pub fn kp_yield_to(ctx: ProbeContext) -> u32 {
    let task: u64 = ctx.arg(0).unwrap_or(0);
    let preempt: u64 = ctx.arg(1).unwrap_or(0);
    match guarded(|| yield_entry(&ctx, task, u32::from(preempt & 0xff != 0))) {
        Ok(r) | Err(r) => r,
    }
}

/// kretprobe of `yield_to`.
#[kretprobe]
pub fn krp_yield_to(ctx: RetProbeContext) -> u32 {
    let ret: i64 = ctx.ret();
    match guarded(|| yield_return(&ctx, ret as i32)) {
        Ok(r) | Err(r) => r,
    }
}
