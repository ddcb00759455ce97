//! User-space locks: futex waits from the futex system calls' tracepoints
//! (`profiler_common::futex` has the model). Entries check the command and
//! start or continue the thread's contention; the return adds the wait's
//! time; the thread's own wake of the word (its release) accounts the
//! contention and its hold, and so does its next wait that does not
//! continue it.
//!
//! These programs do not take the per-CPU busy guard: syscall tracepoints
//! may run preemptible on newer kernels (faultable tracepoints), and a
//! preempted guard holder would make other tasks' lock programs on that CPU
//! skip their work. Their state is per thread; only the stack scratch is per
//! CPU, shared with fentry programs under the same rules (see `context`).

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_user},
    macros::tracepoint,
    programs::TracePointContext,
};
use aya_log_ebpf::warn;
use profiler_common::{
    AGG_BLAME, AGG_HOLD, AggKey, Config, ContentionEvent, EVENT_AGG_OVERFLOW, EVENT_CONTENTION, EVENT_HOLD,
    EVENT_OUTLIER, LockType, MODE_AGGREGATE, Owner, STACK_SKIPPED, STACK_USER_LOCK, counter,
    futex::{
        FUTEX_CMD_MASK, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_TID_MASK, FUTEX_UNLOCK_PI, FUTEX_WAIT, FUTEX_WAIT_BITSET,
        FUTEX_WAIT_REQUEUE_PI, FUTEX_WAKE, FUTEX_WAKE_BITSET, FUTEX_WAKE_OP, FutexWait, GLIBC_MUTEX_OWNER_OFFSET,
        LLL_LOCK_CONTENDED, PID_MAX_LIMIT, PROTO_ENDED, PROTO_LLL, PROTO_PI, SYSCALL_ARG0, SYSCALL_RET, continues,
    },
    lcb, owner,
};

use crate::{
    aggregate::aggregate,
    context::{Ids, cgroup, config, count, current_comm, wanted},
    maps::FUTEX_WAITS,
    ringbuf,
    stack::user_stack_for,
};

/// Argument `i` of a syscall tracepoint.
#[inline(always)]
fn arg(ctx: &TracePointContext, i: usize) -> Result<u64, u32> {
    // SAFETY: syscall tracepoints lay their arguments out as 8-byte fields
    // after the common header and `__syscall_nr` (see `SYSCALL_ARG0`);
    // read_at reads through the helper, which checks the offset.
    unsafe { ctx.read_at::<u64>(SYSCALL_ARG0 + 8 * i) }.map_err(|_| 0u32)
}

/// A `u32` of user memory, if it can be read without faulting.
#[inline(always)]
fn user_u32(addr: u64) -> Option<u32> {
    // SAFETY: bpf_probe_read_user checks the address and fails (instead of
    // faulting) when the page is not present.
    unsafe { bpf_probe_read_user(addr as *const u32) }.ok()
}

/// `sys_enter_futex(uaddr, op, val, ...)`.
#[tracepoint(category = "syscalls", name = "sys_enter_futex")]
pub fn futex_enter(ctx: TracePointContext) -> u32 {
    match try_futex_enter(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_futex_enter(ctx: &TracePointContext) -> Result<u32, u32> {
    let uaddr = arg(ctx, 0)?;
    let op = arg(ctx, 1)? as u32;
    match op & FUTEX_CMD_MASK {
        FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_WAIT_REQUEUE_PI => {
            let val = arg(ctx, 2)? as u32;
            wait(ctx, uaddr, lcb::FUTEX, val == LLL_LOCK_CONTENDED)
        }
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => wait(ctx, uaddr, lcb::FUTEX | lcb::RT, false),
        FUTEX_WAKE | FUTEX_WAKE_BITSET | FUTEX_WAKE_OP | FUTEX_UNLOCK_PI => release(ctx, uaddr),
        _ => Ok(0),
    }
}

/// `sys_enter_futex_wait(uaddr, val, mask, flags, timeout, clockid)` (6.7+).
#[tracepoint(category = "syscalls", name = "sys_enter_futex_wait")]
pub fn futex_wait_enter(ctx: TracePointContext) -> u32 {
    let r = arg(&ctx, 0).and_then(|uaddr| {
        let val = arg(&ctx, 1)? as u32;
        wait(&ctx, uaddr, lcb::FUTEX, val == LLL_LOCK_CONTENDED)
    });
    match r {
        Ok(r) | Err(r) => r,
    }
}

/// `sys_enter_futex_waitv(waiters, nr_futexes, ...)` (5.16+): keyed by the
/// first futex of the vector (`struct futex_waitv { u64 val; u64 uaddr; ... }`).
#[tracepoint(category = "syscalls", name = "sys_enter_futex_waitv")]
pub fn futex_waitv_enter(ctx: TracePointContext) -> u32 {
    let r = arg(&ctx, 0).and_then(|waiters| {
        // SAFETY: bpf_probe_read_user checks the address.
        let uaddr = unsafe { bpf_probe_read_user((waiters + 8) as *const u64) }.map_err(|_| 0u32)?;
        wait(&ctx, uaddr, lcb::FUTEX, false)
    });
    match r {
        Ok(r) | Err(r) => r,
    }
}

/// `sys_enter_futex_wake(uaddr, mask, nr, flags)` (6.7+).
#[tracepoint(category = "syscalls", name = "sys_enter_futex_wake")]
pub fn futex_wake_enter(ctx: TracePointContext) -> u32 {
    match arg(&ctx, 0).and_then(|uaddr| release(&ctx, uaddr)) {
        Ok(r) | Err(r) => r,
    }
}

/// `sys_exit_futex`, `sys_exit_futex_wait`, `sys_exit_futex_waitv`.
#[tracepoint(category = "syscalls", name = "sys_exit_futex")]
pub fn futex_exit(ctx: TracePointContext) -> u32 {
    match try_futex_exit(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// The thread's entry in `FUTEX_WAITS`, if it has one.
#[inline(always)]
fn entry(tid: u32) -> Option<&'static mut FutexWait> {
    // SAFETY: a live map value owned by this thread: only its own system
    // calls' programs read or write it (userspace deletes entries of exited
    // threads only).
    FUTEX_WAITS.get_ptr_mut(tid).map(|p| unsafe { &mut *p })
}

/// Who holds the futex when a wait on it begins: a PI futex's word names
/// its owner; glibc's mutex names it in `__owner` (only read for waits with
/// the low-level lock's contended value).
#[inline(always)]
fn owner_of(uaddr: u64, flags: u32, lll: bool, ids: Ids) -> Owner {
    let tid = if flags & lcb::RT != 0 {
        user_u32(uaddr).map_or(0, |w| w & FUTEX_TID_MASK)
    } else if lll {
        user_u32(uaddr + GLIBC_MUTEX_OWNER_OFFSET).unwrap_or(0)
    } else {
        0
    };
    if tid == 0 || tid >= PID_MAX_LIMIT || tid == ids.tid {
        return Owner { stack_id: STACK_USER_LOCK, ..Owner::default() };
    }
    // The owner took the lock after a contention lockprof saw (its waits
    // on the word are over, its release not seen yet): where it took it.
    // SAFETY: plain value copied out of a live entry.
    let stack_id = match unsafe { FUTEX_WAITS.get(tid) } {
        Some(o) if o.uaddr == uaddr && o.enter_ns == 0 && o.exit_ns != 0 => o.user_stack_id,
        _ => STACK_SKIPPED,
    };
    Owner { kind: owner::TASK, tid, tgid: ids.tgid, _pad: 0, stack_id, task: 0, comm: [0; 16] }
}

/// Whether a futex wait of the current thread (`ids`) on `uaddr` is
/// recorded: its cgroup id (0 when not recorded) if so.
#[inline(always)]
fn recorded(cfg: &Config, uaddr: u64, flags: u32, ids: Ids) -> Option<u64> {
    if uaddr == 0 || cfg.type_mask & LockType::from_flags(flags).bit() == 0 {
        return None;
    }
    if ids.tgid == cfg.self_tgid || !wanted(cfg, ids.tgid) {
        return None;
    }
    cgroup::<true>(cfg, core::ptr::null())
}

/// A futex wait begins: it continues the thread's open contention on the
/// same word, or (accounting the open one first) starts a new one.
#[inline(always)]
fn wait(ctx: &TracePointContext, uaddr: u64, flags: u32, lll: bool) -> Result<u32, u32> {
    if wait_continues(ctx, uaddr, flags) {
        return Ok(0);
    }
    wait_begin(ctx, uaddr, flags, lll)
}

/// The first half of [`wait`]: true when the wait is not recorded or
/// continues the thread's open contention; else the open one, if any, is
/// accounted and closed.
// A function of its own (a BPF-to-BPF call), apart from `wait_begin`:
// 5.10's and 6.1's verifiers refuse a chain of frames over 512 bytes, and
// `wait_begin`'s (user stacks, owner), `account`'s and the ring buffer's
// warning under it were such a chain.
#[inline(never)]
fn wait_continues(ctx: &TracePointContext, uaddr: u64, flags: u32) -> bool {
    let cfg = config();
    let ids = Ids::current();
    if recorded(cfg, uaddr, flags, ids).is_none() {
        return true;
    }
    count(counter::FUTEX_WAITS);
    let Some(st) = entry(ids.tid) else {
        return false;
    };
    if st.uaddr == 0 || st.enter_ns != 0 {
        return false;
    }
    if continues(st.protocol, st.uaddr, st.flags, uaddr, flags) {
        // The lock loop's retry: the same contention.
        // SAFETY: helper without preconditions.
        st.enter_ns = unsafe { bpf_ktime_get_ns() };
        st.waits += 1;
        count(counter::FUTEX_REWAITS);
        return true;
    }
    account(ctx, st, ids, cfg.mode, cfg.outlier_ns);
    st.uaddr = 0;
    false
}

/// The second half of [`wait`]: a new contention.
// A function of its own (a BPF-to-BPF call): its stack frame is its own.
#[inline(never)]
fn wait_begin(ctx: &TracePointContext, uaddr: u64, flags: u32, lll: bool) -> Result<u32, u32> {
    let cfg = config();
    let ids = Ids::current();
    let Some(cgroup_id) = recorded(cfg, uaddr, flags, ids) else {
        return Ok(0);
    };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let st = match entry(ids.tid) {
        Some(st) => st,
        None => {
            if !insert_entry(ids.tid) {
                if count(counter::FUTEX_MAP_FULL) {
                    warn!(ctx, "lockprof: futex wait map full");
                }
                return Ok(0);
            }
            entry(ids.tid).ok_or(0u32)?
        }
    };
    st.uaddr = uaddr;
    st.enter_ns = now;
    st.exit_ns = 0;
    st.total_ns = 0;
    st.stack_id = STACK_USER_LOCK;
    st.user_stack_id = user_stack_for(ctx, cfg, now, uaddr, flags, (ids.tid, ids.tgid));
    st.cgroup_id = cgroup_id;
    st.flags = flags;
    st.tgid = ids.tgid;
    st.waits = 1;
    st.protocol = if flags & lcb::RT != 0 {
        PROTO_PI
    } else if lll {
        PROTO_LLL
    } else {
        0
    };
    st.owner = owner_of(uaddr, flags, lll, ids);
    Ok(0)
}

/// Gives thread `tid` an empty entry in `FUTEX_WAITS`; false when the map
/// is full.
// A function of its own (a BPF-to-BPF call): the value it inserts is built
// on its own frame, not on `wait_begin`'s.
#[inline(never)]
fn insert_entry(tid: u32) -> bool {
    FUTEX_WAITS.insert(tid, FutexWait::default(), 0).is_ok()
}

/// A futex system call returns: a wait in progress adds its time.
fn try_futex_exit(ctx: &TracePointContext) -> Result<u32, u32> {
    let Some(st) = entry(Ids::current().tid) else {
        return Ok(0);
    };
    if st.enter_ns == 0 {
        return Ok(0); // not a wait (a wake's return), or one not recorded
    }
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: `long ret` of the sys_exit tracepoints' fixed layout.
    let ret: i64 = unsafe { ctx.read_at(SYSCALL_RET) }.map_err(|_| 0u32)?;
    // EINTR, ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK.
    let interrupted = matches!(ret, -4 | -512 | -513 | -514 | -516);
    let timed_out = ret == -110;
    let failed = ret < 0 && ret != -11 && !timed_out && !interrupted;
    if ret == -11 {
        count(counter::FUTEX_AGAIN);
    } else if timed_out {
        count(counter::FUTEX_TIMED_OUT);
    } else if interrupted {
        count(counter::FUTEX_INTERRUPTED);
    } else if failed {
        count(counter::FUTEX_FAILED);
    }
    // Not a wait (a bad address, a PI deadlock), or a wait that is not a
    // lock's and timed out (a timed sleep on a condition, not contention):
    // counted above, not accounted.
    if (failed && st.waits == 1) || (timed_out && st.protocol == 0) {
        st.uaddr = 0;
        st.enter_ns = 0;
        return Ok(0);
    }
    st.total_ns += now.saturating_sub(st.enter_ns);
    st.enter_ns = 0;
    st.exit_ns = now;
    // A PI wait that returns with the lock, or any wait that timed out (the
    // caller gave up): the contention is over, the next wait is a new one.
    if timed_out || (ret == 0 && st.protocol == PROTO_PI) {
        st.protocol |= PROTO_ENDED;
    }
    Ok(0)
}

/// The thread wakes `uaddr` (`FUTEX_WAKE`, `FUTEX_UNLOCK_PI`, ...): if its
/// open contention is on that word, this is its release.
// A function of its own (a BPF-to-BPF call): its stack frame is its own.
#[inline(never)]
fn release(ctx: &TracePointContext, uaddr: u64) -> Result<u32, u32> {
    let ids = Ids::current();
    let Some(st) = entry(ids.tid) else {
        return Ok(0);
    };
    if st.uaddr != uaddr || st.enter_ns != 0 || st.exit_ns == 0 {
        return Ok(0);
    }
    let cfg = config();
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    account(ctx, st, ids, cfg.mode, cfg.outlier_ns);
    account_hold(ctx, st, ids, cfg.mode, now);
    st.uaddr = 0;
    Ok(0)
}

/// Accounts the hold of the contention in `st` that this release at `now`
/// ends (aggregated in `mode` [`MODE_AGGREGATE`], else streamed).
// A function of its own (a BPF-to-BPF call), apart from `release`: with
// its aggregate folded into `release`'s frame, the chain of `release`,
// `account` and the ring buffer's send was 544 bytes, and 5.10's verifier
// refuses chains over 512.
#[inline(never)]
fn account_hold(ctx: &TracePointContext, st: &FutexWait, ids: Ids, mode: u32, now: u64) {
    let held = now.saturating_sub(st.exit_ns);
    count(counter::HOLDS);
    let key = AggKey {
        lock_addr: st.uaddr,
        stack_id: st.stack_id,
        user_stack_id: st.user_stack_id,
        cgroup_id: 0,
        tid: ids.tid,
        tgid: ids.tgid,
        flags: st.flags | AGG_HOLD,
        _pad: 0,
    };
    if mode != MODE_AGGREGATE || !aggregate(&key, held) {
        if mode == MODE_AGGREGATE && count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, streaming instead");
        }
        let mut ev = event(EVENT_HOLD, st, ids, now);
        ev.wait_ns = held;
        ev.owner = Owner::default();
        ringbuf::send(ctx, ev);
    }
}

/// A record of the contention in `st`, ended at its last return.
#[inline(always)]
fn event(kind: u32, st: &FutexWait, ids: Ids, now: u64) -> ContentionEvent {
    ContentionEvent {
        kind,
        cpu: ids.cpu,
        lock_addr: st.uaddr,
        wait_ns: st.total_ns,
        end_ns: if kind == EVENT_HOLD { now } else { st.exit_ns },
        tid: ids.tid,
        tgid: st.tgid,
        flags: st.flags,
        _pad: 0,
        stack_id: st.stack_id,
        user_stack_id: st.user_stack_id,
        cgroup_id: st.cgroup_id,
        comm: current_comm(),
        owner: st.owner,
    }
}

/// Accounts the contention in `st` (its waits are over): aggregated with
/// its blame (`mode` [`MODE_AGGREGATE`], records of at least `outlier_ns`
/// streamed too), or streamed.
// A function of its own (a BPF-to-BPF call): its stack frame is its own.
#[inline(never)]
fn account(ctx: &TracePointContext, st: &FutexWait, ids: Ids, mode: u32, outlier_ns: u64) {
    let wait = st.total_ns;
    // The records end at the contention's last return.
    let now = st.exit_ns;
    if mode != MODE_AGGREGATE {
        ringbuf::send(ctx, event(EVENT_CONTENTION, st, ids, now));
        return;
    }
    let o = &st.owner;
    let mut blamed = false;
    if o.kind == owner::TASK {
        let key = AggKey {
            lock_addr: st.uaddr,
            tid: o.tid,
            tgid: o.tgid,
            flags: st.flags | AGG_BLAME,
            // A user-space lock's owner stack is a user stack.
            stack_id: STACK_USER_LOCK,
            user_stack_id: o.stack_id,
            // No owner's stack while asleep (see `AGG_BLAME`).
            cgroup_id: STACK_SKIPPED,
            _pad: 0,
        };
        blamed = aggregate(&key, wait);
        if !blamed && count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, blame lost");
        }
    }
    let key = AggKey {
        lock_addr: st.uaddr,
        tid: ids.tid,
        tgid: st.tgid,
        flags: st.flags,
        stack_id: st.stack_id,
        user_stack_id: st.user_stack_id,
        cgroup_id: st.cgroup_id,
        _pad: 0,
    };
    if !aggregate(&key, wait) {
        if count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, streaming instead");
        }
        let mut ev = event(EVENT_AGG_OVERFLOW, st, ids, now);
        if blamed {
            ev.owner.kind = owner::UNKNOWN;
        }
        ringbuf::send(ctx, ev);
    } else if outlier_ns != 0 && wait >= outlier_ns {
        count(counter::OUTLIERS);
        ringbuf::send(ctx, event(EVENT_OUTLIER, st, ids, now));
    }
}
