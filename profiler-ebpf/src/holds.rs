//! Hold times: a contended acquisition (tracked by `waits::complete`) is
//! timed until its release function runs, then aggregated in the kernel
//! like waits (aggregate mode) or streamed.

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_ktime_get_ns,
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};
use aya_log_ebpf::warn;
use profiler_common::{AGG_HOLD, AggKey, EVENT_HOLD, HoldKey, MODE_AGGREGATE, Owner, PendingWait, counter};

use crate::{
    aggregate::aggregate,
    context::{Ids, config, count, fentry_lock, guarded},
    maps::HOLDS,
    owners::{forget_acquired, forget_holder},
    ringbuf,
    waits::record,
};

/// A release (mutex_unlock, up_read, up_write, rwlock unlocks): one map
/// lookup when the lock is not tracked; else the hold is measured.
#[inline(always)]
fn on_release<C: EbpfContext>(ctx: &C, lock_addr: u64) -> Result<u32, u32> {
    let ids = Ids::current();
    let key = HoldKey { lock_addr, tid: ids.tid, _pad: 0 };
    // SAFETY: plain value read from a live entry, copied out.
    let Some(start) = (unsafe { HOLDS.get(key) }).copied() else {
        return Ok(0);
    };
    let _ = HOLDS.remove(key);
    forget_holder(lock_addr, ids.tid);
    forget_acquired(lock_addr, ids.tid);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let held = PendingWait {
        begin_ns: start.start_ns,
        lock_addr,
        flags: start.flags,
        stack_id: start.stack_id,
        user_stack_id: start.user_stack_id,
        cgroup_id: 0,
        tgid: ids.tgid,
        tid: ids.tid,
        stack_cut: 0,
        owner: Owner::default(),
    };
    count(counter::HOLDS);
    if config().mode == MODE_AGGREGATE {
        let key = AggKey {
            lock_addr,
            stack_id: start.stack_id,
            user_stack_id: start.user_stack_id,
            cgroup_id: 0,
            tid: ids.tid,
            tgid: ids.tgid,
            flags: start.flags | AGG_HOLD,
            _pad: 0,
        };
        if aggregate(&key, now.saturating_sub(start.start_ns)) {
            return Ok(0);
        }
        if count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, streaming instead");
        }
    }
    ringbuf::send(ctx, record(EVENT_HOLD, &held, ids, now));
    Ok(0)
}

/// kprobe on a release function whose first argument is the lock.
#[kprobe]
pub fn kp_release(ctx: ProbeContext) -> u32 {
    let lock: u64 = ctx.arg(0).unwrap_or(0);
    match guarded(|| on_release(&ctx, lock)) {
        Ok(r) | Err(r) => r,
    }
}

macro_rules! fentry_releases {
    ($($fe:ident),* $(,)?) => {$(
        /// fentry on a release function.
        #[fentry]
        pub fn $fe(ctx: FEntryContext) -> i32 {
            // Read as a scalar (see `fentry_lock`): `on_release` keys maps with it.
            let lock = fentry_lock(&ctx);
            match on_release(&ctx, lock) {
                Ok(r) | Err(r) => r as i32,
            }
        }
    )*};
}

fentry_releases!(
    fr_mutex_unlock,
    fr_up_read,
    fr_up_write,
    fr_read_unlock,
    fr_write_unlock,
    fr_read_unlock_irq,
    fr_write_unlock_irq,
    fr_read_unlock_irqrestore,
    fr_write_unlock_irqrestore,
    fr_read_unlock_bh,
    fr_write_unlock_bh,
    fr_rt_read_unlock,
    fr_rt_write_unlock,
);
