//! Entry points of the wait backends: `lock:contention_{begin,end}` as
//! tp_btf or classic tracepoints, and kprobe/kretprobe or fentry/fexit on
//! the lock slowpaths. All of them feed `waits`.

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, tracepoint},
    programs::{BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};
use profiler_common::probe_flags;

use crate::{
    context::{Guard, config, fentry_lock, guarded},
    waits::{on_begin, on_end, probe_begin, probe_end},
};

// Inlined into the program the macro wraps around it: a body of its own is
// one more call and return per wait (a return costs a mitigation thunk on
// some hosts).
#[btf_tracepoint(function = "contention_begin")]
#[inline(always)]
pub fn contention_begin_btf(ctx: BtfTracePointContext) -> i32 {
    begin_btf::<true>(&ctx)
}

/// `contention_begin_btf` for kernels before 6.2 (see `waits::on_begin`).
#[btf_tracepoint(function = "contention_begin")]
#[inline(always)]
pub fn contention_begin_btf_v61(ctx: BtfTracePointContext) -> i32 {
    begin_btf::<false>(&ctx)
}

#[inline(always)]
fn begin_btf<const MODERN: bool>(ctx: &BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let flags: u32 = ctx.arg(1);
    let r = match Guard::enter() {
        Ok(guard) => {
            let r = on_begin::<_, MODERN>(ctx, lock, flags, true);
            guard.leave();
            r
        }
        Err(r) => r,
    };
    match r {
        Ok(r) | Err(r) => r as i32,
    }
}

#[btf_tracepoint(function = "contention_end")]
pub fn contention_end_btf(ctx: BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let r = match Guard::enter() {
        Ok(guard) => {
            let r = on_end(&ctx, lock);
            guard.leave();
            r
        }
        Err(r) => r,
    };
    match r {
        Ok(r) | Err(r) => r as i32,
    }
}

#[tracepoint(category = "lock", name = "contention_begin")]
pub fn contention_begin_tp(ctx: TracePointContext) -> u32 {
    match try_contention_begin_tp::<true>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// `contention_begin_tp` for kernels before 6.2 (see `waits::on_begin`).
#[tracepoint(category = "lock", name = "contention_begin")]
pub fn contention_begin_tp_v61(ctx: TracePointContext) -> u32 {
    match try_contention_begin_tp::<false>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn try_contention_begin_tp<const MODERN: bool>(ctx: &TracePointContext) -> Result<u32, u32> {
    let tp = &config().tp;
    // SAFETY: offsets come from the tracepoint's format file (or its
    // documented default layout); read_at bounds-checks through the helper.
    let lock: u64 = unsafe { ctx.read_at(tp.begin_lock as usize) }.map_err(|_| 0u32)?;
    // SAFETY: as above.
    let flags: u32 = unsafe { ctx.read_at(tp.begin_flags as usize) }.map_err(|_| 0u32)?;
    guarded(|| on_begin::<_, MODERN>(ctx, lock, flags, false))
}

#[tracepoint(category = "lock", name = "contention_end")]
pub fn contention_end_tp(ctx: TracePointContext) -> u32 {
    match try_contention_end_tp(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_contention_end_tp(ctx: &TracePointContext) -> Result<u32, u32> {
    // SAFETY: see try_contention_begin_tp.
    let lock: u64 = unsafe { ctx.read_at(config().tp.end_lock as usize) }.map_err(|_| 0u32)?;
    guarded(|| on_end(ctx, lock))
}

macro_rules! kprobe_entries {
    ($($kp:ident, $flags:expr;)*) => {$(
        /// kprobe at a slowpath's entry (one program, attached to each function of its family).
        #[kprobe]
        pub fn $kp(ctx: ProbeContext) -> u32 {
            let lock: u64 = ctx.arg(0).unwrap_or(0);
            match guarded(|| probe_begin(&ctx, lock, $flags, false)) {
                Ok(r) | Err(r) => r,
            }
        }
    )*};
}

kprobe_entries! {
    kp_mutex, probe_flags::MUTEX;
    kp_rwsem_read, probe_flags::RWSEM_READ;
    kp_rwsem_write, probe_flags::RWSEM_WRITE;
    kp_rwlock_read, probe_flags::RWLOCK_READ;
    kp_rwlock_write, probe_flags::RWLOCK_WRITE;
    kp_rt_mutex, probe_flags::RT_MUTEX;
    kp_rtlock, probe_flags::RTLOCK;
    kp_rwbase_read, probe_flags::RWBASE_READ;
}

/// kretprobe of the sleeping slowpaths (mutex, rwsem, and PREEMPT_RT's locks).
#[kretprobe]
pub fn krp_sleep(ctx: RetProbeContext) -> u32 {
    match guarded(|| probe_end(&ctx, false)) {
        Ok(r) | Err(r) => r,
    }
}

/// kretprobe of the spinning slowpaths (rwlock).
#[kretprobe]
pub fn krp_spin(ctx: RetProbeContext) -> u32 {
    match guarded(|| probe_end(&ctx, true)) {
        Ok(r) | Err(r) => r,
    }
}

// fentry/fexit programs are bound to one function at load time, so each
// probed function gets its own pair. They run with migration disabled but
// may be preempted, so they do not take the per-CPU busy guard: a preempted
// holder of the guard would make other tasks' programs on that CPU skip
// their work. Nothing they call takes a lock they probe, so they cannot
// nest into themselves through our own map operations.
macro_rules! fentry_waits {
    ($($fe:ident, $fx:ident, $flags:expr, $spinning:expr;)*) => {$(
        /// fentry at a slowpath's entry.
        #[fentry]
        pub fn $fe(ctx: FEntryContext) -> i32 {
            let lock = fentry_lock(&ctx);
            match probe_begin(&ctx, lock, $flags, true) {
                Ok(r) | Err(r) => r as i32,
            }
        }

        /// fexit of the same slowpath.
        #[fexit]
        pub fn $fx(ctx: FExitContext) -> i32 {
            match probe_end(&ctx, $spinning) {
                Ok(r) | Err(r) => r as i32,
            }
        }
    )*};
}

fentry_waits! {
    fe_mutex, fx_mutex, probe_flags::MUTEX, false;
    fe_mutex_killable, fx_mutex_killable, probe_flags::MUTEX, false;
    fe_mutex_interruptible, fx_mutex_interruptible, probe_flags::MUTEX, false;
    fe_rwsem_read, fx_rwsem_read, probe_flags::RWSEM_READ, false;
    fe_rwsem_write, fx_rwsem_write, probe_flags::RWSEM_WRITE, false;
    fe_rwlock_read, fx_rwlock_read, probe_flags::RWLOCK_READ, true;
    fe_rwlock_write, fx_rwlock_write, probe_flags::RWLOCK_WRITE, true;
    fe_rt_mutex, fx_rt_mutex, probe_flags::RT_MUTEX, false;
    fe_rtlock, fx_rtlock, probe_flags::RTLOCK, false;
    fe_rwbase_read, fx_rwbase_read, probe_flags::RWBASE_READ, false;
}
