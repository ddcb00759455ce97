//! A wait's begin and end, shared by every wait backend, and what happens
//! once the lock is acquired (account the wait, start timing the hold).

use aya_ebpf::{EbpfContext, bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns};
use aya_log_ebpf::warn;
use profiler_common::{
    AGG_BLAME, AggKey, Config, ContentionEvent, EVENT_AGG_OVERFLOW, EVENT_CONTENTION, EVENT_OUTLIER, HoldKey,
    HoldStart, LockType, MODE_AGGREGATE, MUTEX_SPIN_SLOT, NESTED_SPIN_SLOT, PendingWait, SPIN_SLOT, STACK_SKIPPED,
    StackId, UNKNOWN_OFFSET, USER_STACK_OFF, counter, is_spinning, lcb, owner, task_key,
};

use crate::{
    aggregate::{aggregate, aggregate_as},
    context::{Ids, cgroup, config, config_copy, count, current_comm, current_task, wanted},
    identity::identify,
    maps::{HOLD_ON, HOLDS, NEW_WAIT, PENDING, SPIN_DEPTH, SPIN_PENDING},
    owners::{
        mutex_word, note_asleep, note_holder, note_waiting, owner_comm, owner_of, set_owner, spin_owner, take_asleep,
    },
    ringbuf,
    stack::{self, WalkContext, stack_for},
};

/// The slot a pure spinning wait on `lock_addr` begins in: this CPU's
/// `SPIN_SLOT`, or, when a spinning wait on another lock is pending there
/// (qrwlock's `wait_lock` inside an rwlock's wait; an interrupt's spinlock),
/// `NESTED_SPIN_SLOT`, so the inner wait is measured under its own lock as
/// the kernel reported it. `None` when the begin merges into a pending
/// wait on the same lock or nests deeper (counted).
#[inline(always)]
fn spin_target(lock_addr: u64, flags: u32) -> Option<&'static mut PendingWait> {
    let outer = spin_slot(SPIN_SLOT)?;
    if outer.lock_addr == 0 || outer.lock_addr == lock_addr {
        return merge_begin(outer, lock_addr, flags).then_some(outer);
    }
    let inner = spin_slot(NESTED_SPIN_SLOT)?;
    if inner.lock_addr == 0 {
        count(counter::NESTED_WAITS);
        return Some(inner);
    }
    merge_begin(inner, lock_addr, flags).then_some(inner)
}

/// Starts (or merges into) a wait in `slot`; returns true if the caller
/// should capture a stack and fill the slot.
#[inline(always)]
fn merge_begin(slot: &mut PendingWait, lock_addr: u64, flags: u32) -> bool {
    if slot.lock_addr == 0 {
        return true;
    }
    if slot.lock_addr == lock_addr {
        // Mutex: optimistic spin, then sleep. Keep the first timestamp.
        slot.flags |= flags;
        count(counter::REPEATED_BEGIN);
    } else {
        // Contention on another lock inside this wait: irq nesting or
        // qrwlock's internal wait_lock. Measure the outer wait only.
        count(counter::NESTED);
    }
    false
}

/// The task's resident entry in `PENDING`, if it has one.
#[inline(always)]
fn task_entry(key: u64) -> Option<&'static mut PendingWait> {
    // SAFETY: a live map value owned by this task (or, for tid 0, this CPU):
    // only this task's programs read or write it, and entries stay resident
    // (userspace deletes only idle entries of exited threads).
    PENDING.get_ptr_mut(key).map(|t| unsafe { &mut *t })
}

/// This CPU's `SPIN_PENDING` slot `idx`.
#[inline(always)]
fn spin_slot(idx: u32) -> Option<&'static mut PendingWait> {
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime. A waiter in one of these slots cannot be preempted or
    // migrate while its wait is there (pure spinning: its lock's fast path
    // disabled preemption; a mutex's first spin: the mutex slowpath
    // disabled it), so only a nested program (an interrupt's wait) can
    // touch the slot meanwhile, which the callers tell apart.
    SPIN_PENDING.get_ptr_mut(idx).map(|p| unsafe { &mut *p })
}

/// This CPU's scratch entry for a task's first wait (see `NEW_WAIT`).
#[inline(always)]
fn new_wait() -> Option<&'static mut PendingWait> {
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime; programs on one CPU do not nest (the BUSY guard), and the
    // slot is only used between its fill and the insert that copies it.
    NEW_WAIT.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// Whether the current task is running (state 0). A mutex's first
/// optimistic spin runs in the caller's running state; a woken sleeper's
/// re-spin runs after the slowpath set the state for its next sleep. When
/// the kernel's layout is unknown, every spin counts as a re-spin (the
/// per-task path, correct for both). `task`: the current task, or null
/// (then asked for).
#[inline(always)]
fn task_running(cfg: &Config, task: *const u8) -> bool {
    let off = cfg.layout.task_state;
    if off == UNKNOWN_OFFSET {
        return false;
    }
    let task = if task.is_null() { current_task() } else { task };
    if task.is_null() {
        return false;
    }
    // SAFETY: a BTF-typed pointer to the current task_struct; `off` is a
    // load-time constant (CONFIG is frozen read-only data) taken from this
    // kernel's BTF, so the verifier checks this load against the member's
    // type. The low 32 bits hold the state on every layout (`unsigned int
    // __state`, or `long state` before 5.14).
    unsafe { core::ptr::read_volatile(task.wrapping_add(off as usize) as *const u32) == 0 }
}

/// A wait begins (`contention_begin`, or a probed slowpath's entry).
/// `slab`: the program type may call the slab-cache kfunc (tracing programs).
///
/// `MODERN`: built for kernels with `bpf_rdonly_cast` (6.2+, what userspace
/// loads there): the configuration read field by field where it is used, a
/// mutex's owner word read first thing, the cgroup id read with plain loads.
/// Otherwise the 6.1-era shape: a copy of the configuration (its fields then
/// sit in the stack, where 6.1's verifier, without precision tracking in
/// programs with subprograms, keeps its state count low: read by reference,
/// its state count passed the 1M-instruction limit with `--cgroup` or
/// `--user-stacks`), no owner word at first spins (no fault-safe plain load
/// there), and the cgroup helper.
#[inline(always)]
// Inserting by reference: a by-value argument would be copied to the
// stack first, and the stack is what this function is short of.
#[allow(clippy::needless_borrows_for_generic_args)]
pub fn on_begin<C: WalkContext, const MODERN: bool>(
    ctx: &C,
    lock_addr: u64,
    flags: u32,
    slab: bool,
) -> Result<u32, u32> {
    let copy;
    let cfg: &Config = if MODERN {
        config()
    } else {
        copy = config_copy();
        &copy
    };
    if lock_addr == 0 || cfg.type_mask & LockType::from_flags(flags).bit() == 0 {
        return Ok(0);
    }
    // The owner word first: the later it is read, the likelier a short
    // critical section has ended and the owner is lost. Read for every lock
    // type (a fault-safe load; only a mutex's first spin uses it): a branch
    // on the flags here would split the verifier's states for the whole
    // program.
    let word = if MODERN { mutex_word(cfg, lock_addr) } else { 0 };
    // The current task, asked once (a helper call) where plain loads of
    // its ids, its cgroup id and its state use it. Only where the kernel
    // has `bpf_rdonly_cast` (6.2+): the gate is frozen configuration, so the
    // verifier drops the call on kernels without `bpf_get_current_task_btf`
    // (5.10, whose kprobe and fentry programs are built `MODERN` too).
    let task = if MODERN && cfg.modern_begin() { current_task() } else { core::ptr::null() };
    let ids = Ids::of(cfg, task);
    if !wanted(cfg, ids.tgid) {
        return Ok(0);
    }
    let Some(cgroup_id) = cgroup::<MODERN>(cfg, task) else {
        return Ok(0);
    };
    identify(cfg, lock_addr, flags, slab);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let key = task_key(ids.tid, ids.cpu);
    // The one place a new wait is filled in (the slot, the task's entry, or
    // the task's first entry, built in NEW_WAIT), so the owner and stack
    // reads are inlined once: the probe-read path of kernels before 6.2
    // needs stack space for each, and the verifier's limit is 512 bytes.
    let mut insert = false;
    // A mutex's first optimistic spin reads only the owner word, the
    // owner's ids and its `ACQUIRED` slot (`spin_owner`), the pipe storm's
    // hot path. A wait that goes on to sleep reads the owner again then
    // (below).
    let mut first_spin = false;
    let target: &mut PendingWait = if is_spinning(flags) {
        let Some(slot) = spin_target(lock_addr, flags) else {
            return Ok(0);
        };
        slot
    } else if flags == lcb::MUTEX | lcb::SPIN && task_running(cfg, task) {
        // A mutex's first optimistic spin: mutexes are not taken in
        // interrupts, so a busy slot is a wait whose end was never seen.
        let slot = spin_slot(MUTEX_SPIN_SLOT).ok_or(0u32)?;
        if slot.lock_addr != 0 {
            count(counter::STALE_SPIN);
        }
        first_spin = true;
        slot
    } else {
        // A wait that may sleep: per task. A mutex that stops spinning to
        // sleep carries its wait over from the spin slot.
        let carried = spin_slot(MUTEX_SPIN_SLOT).filter(|s| s.lock_addr == lock_addr && s.tid == ids.tid);
        match (carried, task_entry(key)) {
            (Some(slot), entry) => {
                count(counter::REPEATED_BEGIN);
                slot.flags |= flags;
                set_owner(&mut slot.owner, &owner_of::<MODERN>(cfg, lock_addr, flags));
                if MODERN && slab {
                    note_asleep(cfg, &slot.owner, now, key, (lock_addr, slot.begin_ns));
                }
                let r = match entry {
                    Some(entry) if entry.lock_addr == 0 => {
                        *entry = *slot;
                        Ok(())
                    }
                    Some(_) => {
                        count(counter::NESTED);
                        Ok(())
                    }
                    // First contention of this task that may sleep.
                    None => PENDING.insert(key, &*slot, u64::from(BPF_NOEXIST)),
                };
                slot.lock_addr = 0;
                return pending_inserted(ctx, r);
            }
            (None, Some(entry)) => {
                if !merge_begin(entry, lock_addr, flags) {
                    return Ok(0);
                }
                entry
            }
            // First contention of this task that may sleep: one insert for
            // its lifetime.
            (None, None) => {
                insert = true;
                new_wait().ok_or(0u32)?
            }
        }
    };
    target.begin_ns = now;
    target.lock_addr = lock_addr;
    target.flags = flags;
    target.tgid = ids.tgid;
    target.tid = ids.tid;
    target.cgroup_id = cgroup_id;
    let cut;
    (target.stack_id, target.user_stack_id, cut) =
        stack_for::<C, MODERN>(ctx, cfg, now, lock_addr, flags, (ids.tid, ids.tgid), true);
    target.stack_cut = u32::from(cut);
    set_owner(
        &mut target.owner,
        &if first_spin {
            spin_owner::<MODERN>(cfg, lock_addr, word)
        } else {
            owner_of::<MODERN>(cfg, lock_addr, flags)
        },
    );
    if MODERN {
        // Where a later waiter finds this thread's acquire stack. (The 6.1-era
        // build has no room left for it: `complete` notes it on kernels
        // before 6.2, where the tracepoint backends load that build.)
        note_waiting(cfg, ids.tid, lock_addr, target.stack_id, flags);
    }
    if MODERN && slab && !first_spin {
        // Tracing programs on 6.2+ (the kfuncs the owner's stack needs).
        note_asleep(cfg, &target.owner, now, key, (lock_addr, now));
    }
    if insert {
        let first: &PendingWait = target;
        return pending_inserted(ctx, PENDING.insert(key, first, u64::from(BPF_NOEXIST)));
    }
    Ok(0)
}

/// Counts (and warns once about) a failed insert into `PENDING`.
#[inline(always)]
fn pending_inserted<C: EbpfContext>(ctx: &C, r: Result<(), i32>) -> Result<u32, u32> {
    if let Err(e) = r {
        if count(counter::PENDING_FULL) {
            warn!(ctx, "lockprof: pending-wait map insert failed: {}", e);
        }
        return Err(0);
    }
    Ok(0)
}

/// Takes the wait on `lock_addr` of thread `tid` out of the per-CPU slots
/// or the per-task entry.
#[inline(always)]
fn take_pending(lock_addr: u64, tid: u32, key: u64) -> Option<PendingWait> {
    // Whether some wait is pending here: then an end we cannot match is the
    // end of a nested wait that begin skipped, not an end without a begin.
    let mut busy = false;
    if let Some(slot) = spin_slot(SPIN_SLOT) {
        if slot.lock_addr == lock_addr {
            let p = *slot;
            slot.lock_addr = 0;
            return Some(p);
        }
        busy = slot.lock_addr != 0;
    }
    // A nested spinning wait (only ever pending while `SPIN_SLOT` is).
    if busy
        && let Some(slot) = spin_slot(NESTED_SPIN_SLOT)
        && slot.lock_addr == lock_addr
    {
        let p = *slot;
        slot.lock_addr = 0;
        return Some(p);
    }
    if let Some(slot) = spin_slot(MUTEX_SPIN_SLOT)
        && slot.lock_addr == lock_addr
        && slot.tid == tid
    {
        let p = *slot;
        slot.lock_addr = 0;
        return Some(p);
    }
    if let Some(w) = task_entry(key) {
        if w.lock_addr == lock_addr {
            let p = *w;
            w.lock_addr = 0;
            return Some(p);
        }
        busy |= w.lock_addr != 0;
    }
    if !busy {
        unmatched_end();
    }
    None
}

/// An end whose begin was not seen (expected with filters on, not counted then).
#[inline(always)]
fn unmatched_end() {
    if !config().filtering() {
        count(counter::END_WITHOUT_BEGIN);
    }
}

/// A wait ends (`contention_end`).
#[inline(always)]
pub fn on_end<C: WalkContext>(ctx: &C, lock_addr: u64) -> Result<u32, u32> {
    let ids = Ids::current();
    if let Some(mut pending) = take_pending(lock_addr, ids.tid, task_key(ids.tid, ids.cpu)) {
        restack_long(ctx, &mut pending);
        complete(ctx, &pending, ids);
    }
    Ok(0)
}

/// A long wait (at least `--outlier-us`) whose stack was skipped or cut at its
/// begin, the budget spent (a storm elsewhere spends it): its stack taken
/// now, at its end, in the same slowpath. Long waits are few, and they are
/// the ones the slowest-waits list and incident triggers show. (Not when a
/// mutex wait goes to sleep, in `on_begin`: kernels before 6.2 refuse the
/// begin programs' frames with one more call, 544 of 512 bytes on 6.1.)
#[inline(always)]
fn restack_long<C: WalkContext>(ctx: &C, p: &mut PendingWait) {
    if p.stack_id != STACK_SKIPPED && p.stack_cut == 0 {
        return;
    }
    let cfg = config();
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if cfg.outlier_ns == 0 || now.saturating_sub(p.begin_ns) < cfg.outlier_ns {
        return;
    }
    p.stack_id = late_stack(ctx);
    p.stack_cut = 0;
    // Its begin noted the wait without a whole stack.
    note_waiting(cfg, p.tid, p.lock_addr, p.stack_id, p.flags);
}

/// A kernel stack taken outside the budget, counted. A function of its own
/// (a BPF-to-BPF call), so that its walk and store do not grow the end
/// program's own frame. (The user stack is not retaken: it keeps its
/// reason.)
#[inline(never)]
fn late_stack<C: WalkContext>(ctx: &C) -> StackId {
    count(counter::STACKS_LATE);
    stack::capture(ctx, false, false)
}

/// A record of the wait (or hold) in `p`, ended at `now`.
#[inline(always)]
pub fn record(kind: u32, p: &PendingWait, ids: Ids, now: u64) -> ContentionEvent {
    let mut owner = p.owner;
    owner.comm = owner_comm(config(), &owner);
    ContentionEvent {
        owner,
        kind,
        cpu: ids.cpu,
        lock_addr: p.lock_addr,
        wait_ns: now.saturating_sub(p.begin_ns),
        end_ns: now,
        tid: ids.tid,
        tgid: ids.tgid,
        flags: p.flags,
        _pad: 0,
        stack_id: p.stack_id,
        user_stack_id: p.user_stack_id,
        cgroup_id: p.cgroup_id,
        comm: current_comm(),
    }
}

/// A wait ended with the lock acquired: account it (stream or aggregate)
/// and, when release probes are attached, start timing the hold.
#[inline(always)]
fn complete<C: EbpfContext>(ctx: &C, pending: &PendingWait, ids: Ids) {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if HOLD_ON.get(0).is_some_and(|v| *v != 0) {
        let key = HoldKey { lock_addr: pending.lock_addr, tid: ids.tid, _pad: 0 };
        let start = HoldStart {
            start_ns: now,
            stack_id: pending.stack_id,
            user_stack_id: pending.user_stack_id,
            flags: pending.flags,
            _pad: 0,
        };
        if !LockType::from_flags(pending.flags).records_owner() && pending.flags & lcb::READ == 0 {
            // Locks with no owner field: the holder is known while its hold is timed.
            note_holder(pending.lock_addr, ids.tid, ids.tgid, pending.stack_id);
        }
        if HOLDS.insert(key, start, 0).is_err() && count(counter::HOLD_MAP_FULL) {
            warn!(ctx, "lockprof: hold map full");
        }
    }
    let cfg = config();
    let o = &pending.owner;
    if !cfg.modern_begin() {
        // Kernels before 6.2: the wait noted once it has ended, inside the
        // critical section (their tracepoint begin build is at the verifier's
        // limit; the kprobe and fentry backends noted it at begin too, and
        // this finds the slot unchanged unless the wait's flags grew).
        note_waiting(cfg, ids.tid, pending.lock_addr, pending.stack_id, pending.flags);
    }
    if cfg.mode != MODE_AGGREGATE {
        ringbuf::send(ctx, record(EVENT_CONTENTION, pending, ids, now));
        return;
    }
    let wait = now.saturating_sub(pending.begin_ns);
    let mut blamed = false;
    if o.kind != owner::UNKNOWN {
        // Blame: the wait charged to whoever held the lock (readers: tid 0).
        let key = AggKey {
            lock_addr: pending.lock_addr,
            tid: o.blame_tid(),
            tgid: o.tgid,
            flags: pending.flags | AGG_BLAME,
            stack_id: o.stack_id,
            user_stack_id: USER_STACK_OFF,
            cgroup_id: take_asleep(cfg, task_key(ids.tid, ids.cpu), pending.lock_addr, pending.begin_ns),
            _pad: 0,
        };
        blamed = aggregate_as(&key, wait, || owner_comm(cfg, o));
        if !blamed && count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, blame lost");
        }
    }
    let key = AggKey {
        lock_addr: pending.lock_addr,
        tid: ids.tid,
        tgid: ids.tgid,
        flags: pending.flags,
        stack_id: pending.stack_id,
        user_stack_id: pending.user_stack_id,
        cgroup_id: pending.cgroup_id,
        _pad: 0,
    };
    if !aggregate(&key, wait) {
        if count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, streaming instead");
        }
        let mut ev = record(EVENT_AGG_OVERFLOW, pending, ids, now);
        if blamed {
            // Its blame is in the aggregates already.
            ev.owner.kind = owner::UNKNOWN;
        }
        ringbuf::send(ctx, ev);
    } else if cfg.outlier_ns != 0 && wait >= cfg.outlier_ns {
        count(counter::OUTLIERS);
        ringbuf::send(ctx, record(EVENT_OUTLIER, pending, ids, now));
    }
}

/// Entry of a probed slowpath (kprobe/fentry wait backends). Spinning
/// slowpaths run with preemption disabled (their lock's fast path disabled
/// it), so their per-CPU nesting depth is exact.
#[inline(always)]
pub fn probe_begin<C: WalkContext>(ctx: &C, lock_addr: u64, flags: u32, slab: bool) -> Result<u32, u32> {
    if is_spinning(flags) {
        let depth = SPIN_DEPTH.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: this CPU's slot; preemption is disabled on this path.
        let d = unsafe { &mut *depth };
        *d += 1;
        if *d > 1 {
            count(counter::NESTED);
            return Ok(0);
        }
    }
    on_begin::<C, true>(ctx, lock_addr, flags, slab)
}

/// Return of a probed slowpath: the wait it began is over.
#[inline(always)]
pub fn probe_end<C: EbpfContext>(ctx: &C, spinning: bool) -> Result<u32, u32> {
    let ids = Ids::current();
    let pending = if spinning {
        let depth = SPIN_DEPTH.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: this CPU's slot; preemption is disabled on this path.
        let d = unsafe { &mut *depth };
        *d = d.saturating_sub(1);
        if *d != 0 {
            return Ok(0);
        }
        let slot = spin_slot(SPIN_SLOT).ok_or(0u32)?;
        let p = *slot;
        slot.lock_addr = 0;
        p
    } else {
        let entry = task_entry(task_key(ids.tid, ids.cpu)).ok_or(0u32)?;
        let p = *entry;
        entry.lock_addr = 0;
        p
    };
    if pending.lock_addr == 0 {
        unmatched_end();
        return Ok(0);
    }
    complete(ctx, &pending, ids);
    Ok(0)
}
