//! Who holds a lock when a wait on it begins: the owner task recorded in
//! mutexes (`mutex.owner`), rwsems (`rw_semaphore.owner`, or readers) and
//! PREEMPT_RT's rt_mutex-based locks, flag bits masked; and the stack that
//! owner acquired the lock with, when it acquired it after a wait (the
//! `ACQUIRED` array: each thread's last wait, written when it began). Reads go
//! through `bpf_rdonly_cast` (plain fault-safe loads) where the kernel has
//! it, else `bpf_probe_read_kernel`.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use profiler_common::{
    Config, Holder, KFUNC_CALL_RDONLY_CAST, KFUNC_RDONLY_CAST, KFUNCS_OWNER_STACKS, LockType, OWNER_STACKS, Owner,
    OwnerAsleep, STACK_SKIPPED, StackId, acquired_index, counter, is_stack, known, lcb, owner,
};

use crate::{
    context::count,
    maps::{ACQUIRED, HOLD_ON, HOLDERS, OWNER_ASLEEP, STACK_BUDGET},
    stack::{budget_allows, capture_task},
};

/// Flag bits of `mutex.owner`.
const MUTEX_FLAGS: u64 = 0x07;
/// `rw_semaphore.owner`: readers hold it.
const RWSEM_READER_OWNED: u64 = 1;
/// Flag bits of `rw_semaphore.owner`.
const RWSEM_FLAGS: u64 = 0x07;
/// `rw_semaphore.count`: readers are counted from this bit up.
const RWSEM_READER_SHIFT: u64 = 8;
/// `rt_mutex_base.owner`: waiters are queued.
const RT_MUTEX_HAS_WAITERS: u64 = 1;
/// PREEMPT_RT `rwbase_rt.readers`: set while no writer is in (the count of
/// readers is below it).
const RWBASE_READER_BIAS: u32 = 1 << 31;
/// `qrwlock.cnts` (the first word of a non-RT `rwlock_t`): a writer holds it.
const QW_LOCKED: u32 = 0xff;
/// `qrwlock.cnts`: readers are counted from this bit up.
const QR_SHIFT: u32 = 9;

/// `obj` as a pointer to a BTF type `btf_id` the verifier knows (loads
/// through it cannot fault), or 0 when the kfunc is unbound.
#[inline(always)]
pub(crate) fn rdonly(cfg: &Config, obj: u64, btf_id: u32) -> u64 {
    if cfg.kfuncs & KFUNC_RDONLY_CAST == 0 || btf_id == 0 || obj == 0 {
        return 0;
    }
    // SAFETY: takes any address; `btf_id` is a load-time constant.
    unsafe { rdonly_cast()(obj, btf_id) }
}

/// The kernel's `bpf_rdonly_cast(void *obj, u32 btf_id)`, for a caller
/// that has checked `cfg.kfuncs` for [`KFUNC_RDONLY_CAST`] (a load-time
/// constant, set only when the placeholder is bound).
#[inline(always)]
pub(crate) fn rdonly_cast() -> unsafe extern "C" fn(u64, u32) -> u64 {
    // SAFETY: the placeholder is rewritten into a call of the kernel's
    // `bpf_rdonly_cast` before loading; callers call it only where the
    // `kfuncs` bit says so.
    unsafe { core::mem::transmute(KFUNC_CALL_RDONLY_CAST as usize) }
}

/// The `T` at `obj + off` (an object of BTF type `btf_id`); 0 on failure.
#[inline(always)]
fn load<T: Copy + Default>(cfg: &Config, obj: u64, off: u32, btf_id: u32) -> T {
    if obj == 0 || !known(off) {
        return T::default();
    }
    let typed = rdonly(cfg, obj, btf_id);
    if typed != 0 {
        // SAFETY: a BTF-typed pointer from bpf_rdonly_cast: the verifier
        // checks the member at this load-time constant offset and turns the
        // load into a fault-safe one.
        return unsafe { core::ptr::read_volatile((typed as *const u8).wrapping_add(off as usize) as *const T) };
    }
    // SAFETY: bpf_probe_read_kernel checks the address.
    unsafe { bpf_probe_read_kernel((obj + u64::from(off)) as *const T) }.unwrap_or_default()
}

/// `task`'s pid and tgid, through one `bpf_rdonly_cast` where it can.
#[inline(always)]
fn task_ids(cfg: &Config, task: u64) -> (u32, u32) {
    let t = &cfg.task;
    let typed = rdonly(cfg, task, cfg.layout.btf_task);
    if typed != 0 {
        let at = |off: u32| (typed as *const u8).wrapping_add(off as usize) as *const u32;
        // SAFETY: a BTF-typed pointer from bpf_rdonly_cast (see `load`);
        // both offsets are load-time constants from this kernel's BTF.
        return unsafe { (core::ptr::read_volatile(at(t.pid)), core::ptr::read_volatile(at(t.tgid))) };
    }
    (load(cfg, task, t.pid, 0), load(cfg, task, t.tgid, 0))
}

/// The owner word's offset, the BTF type of the lock, the flag bits.
#[inline(always)]
fn owner_word(cfg: &Config, flags: u32) -> Option<(u32, u32, u64)> {
    let l = &cfg.layout;
    match LockType::from_flags(flags) {
        LockType::Mutex => Some((l.mutex_owner, l.btf_mutex, MUTEX_FLAGS)),
        LockType::Rwsem => Some((l.rwsem_owner, l.btf_rwsem, RWSEM_FLAGS)),
        // PREEMPT_RT's mutex and spinlock_t start with their rt_mutex_base.
        LockType::RtMutex => Some((l.rtmutex_owner, 0, RT_MUTEX_HAS_WAITERS)),
        // PREEMPT_RT's rwsem and rwlock_t: a writer owns the rwbase's rt_mutex.
        LockType::RwlockRt if known(l.rwbase_rtmutex) && known(l.rtmutex_owner) => {
            Some((l.rwbase_rtmutex + l.rtmutex_owner, 0, RT_MUTEX_HAS_WAITERS))
        }
        _ => None,
    }
}

/// The holder of a lock with no owner field (rwlock writers, spinlocks),
/// known while release probes time its hold.
#[inline(always)]
fn tracked_holder(lock: u64) -> Option<Owner> {
    // SAFETY: plain value copied out of a live entry.
    let h = unsafe { HOLDERS.get(lock) }.copied()?;
    Some(Owner { kind: owner::TASK, tid: h.tid, tgid: h.tgid, _pad: 0, stack_id: h.stack_id, task: 0, comm: [0; 16] })
}

/// Who holds `lock` (waited on with `flags`) now.
#[inline(always)]
pub fn owner_of<const PREV: bool>(cfg: &Config, lock: u64, flags: u32) -> Owner {
    let mut o = Owner { stack_id: STACK_SKIPPED, ..Owner::default() };
    if cfg.owners == 0 {
        return o;
    }
    let Some((off, btf, mask)) = owner_word(cfg, flags) else {
        if HOLD_ON.get(0).is_some_and(|v| *v != 0)
            && let Some(h) = tracked_holder(lock)
        {
            return h;
        }
        if LockType::from_flags(flags) == LockType::Rwlock {
            // No owner field, but the lock word tells readers from a writer.
            // SAFETY: bpf_probe_read_kernel checks the address.
            let cnts: u32 = unsafe { bpf_probe_read_kernel(lock as *const u32) }.unwrap_or_default();
            if cnts & QW_LOCKED == QW_LOCKED {
                o.kind = owner::WRITER;
            } else if cnts >> QR_SHIFT != 0 {
                o.kind = owner::READERS;
                o.tid = cnts >> QR_SHIFT;
            }
        }
        return o;
    };
    let word: u64 = load(cfg, lock, off, btf);
    if LockType::from_flags(flags) == LockType::RwlockRt && word & !mask == 0 {
        // No writer in: the readers hold it (their count is below the bias).
        let readers: u32 = load(cfg, lock, cfg.layout.rwbase_readers, 0);
        if readers & RWBASE_READER_BIAS != 0 && readers & !RWBASE_READER_BIAS != 0 {
            o.kind = owner::READERS;
            o.tid = readers & !RWBASE_READER_BIAS;
        }
        return o;
    }
    if LockType::from_flags(flags) == LockType::Rwsem && word & RWSEM_READER_OWNED != 0 {
        o.kind = owner::READERS;
        let count: u64 = load(cfg, lock, cfg.layout.rwsem_count, btf);
        o.tid = (count >> RWSEM_READER_SHIFT) as u32;
        return o;
    }
    let task = word & !mask;
    if task == 0 || cfg.task.pid == 0 {
        return o;
    }
    o.kind = owner::TASK;
    o.task = task;
    (o.tid, o.tgid) = task_ids(cfg, task);
    o.stack_id = acquired_stack::<PREV>(o.tid, lock, flags);
    o
}

/// The stack owner `tid` acquired `lock` with: its last wait, if that was
/// on this lock, or (`PREV`) its wait before, if that one was (the hold it
/// is in, unless it took the lock again without contention since; a
/// release probe forgets the entry at release). A write-owned rwsem was
/// taken for write: an owner that waited as a reader earlier and then took
/// the write side uncontended must not show its read stack. (`PREV` off:
/// the 6.1-era begin build, at the verifier's limit; it notes a wait at its
/// end, so a thread waiting on a second lock still shows the first.)
#[inline(always)]
fn acquired_stack<const PREV: bool>(tid: u32, lock: u64, flags: u32) -> StackId {
    let rwsem = matches!(LockType::from_flags(flags), LockType::Rwsem | LockType::RwlockRt);
    let Some(a) = ACQUIRED.get(acquired_index(tid)) else {
        return STACK_SKIPPED;
    };
    if a.tid != tid {
        return STACK_SKIPPED;
    }
    if a.lock_addr == lock && (!rwsem || a.flags & lcb::WRITE != 0) {
        return a.stack_id;
    }
    if PREV && a.prev_lock_addr == lock && (!rwsem || a.prev_flags & lcb::WRITE != 0) {
        return a.prev_stack_id;
    }
    STACK_SKIPPED
}

/// The owner word of mutex `lock`, read as early as a waiter's first
/// optimistic spin allows (the waiter's failed fast path has just fetched its
/// line): through `bpf_rdonly_cast`, a plain load; 0 where the kernel lacks
/// the kfunc (the probe-read path costs a helper call and stack the begin
/// program does not have on 6.1), the layout is unknown or owners are off.
#[inline(always)]
pub fn mutex_word(cfg: &Config, lock: u64) -> u64 {
    let off = cfg.layout.mutex_owner;
    if cfg.owners == 0 || cfg.task.pid == 0 || !known(off) {
        return 0;
    }
    let typed = rdonly(cfg, lock, cfg.layout.btf_mutex);
    if typed == 0 {
        return 0;
    }
    // SAFETY: a BTF-typed pointer from bpf_rdonly_cast (see `load`); the
    // offset is a load-time constant from this kernel's BTF.
    unsafe { core::ptr::read_volatile((typed as *const u8).wrapping_add(off as usize) as *const u64) }
}

/// Who held mutex `lock` whose owner word [`mutex_word`] read at a first
/// spin: the owner's ids, and its acquire stack from its own last wait.
///
/// A word with no owner (released between the waiter's failed fast path and
/// the look) is read once more (`REREAD`: kernels with `bpf_rdonly_cast`),
/// at the end of the begin program: the waiter's own try comes after the
/// program, so whoever holds the lock then is the one it spins on. Still no
/// owner (or not read): an unknown owner, and the try likely succeeds at once.
#[inline(always)]
pub fn spin_owner<const REREAD: bool>(cfg: &Config, lock: u64, word: u64) -> Owner {
    let mut o = Owner { stack_id: STACK_SKIPPED, ..Owner::default() };
    let mut task = word & !MUTEX_FLAGS;
    if REREAD && task == 0 {
        task = mutex_word(cfg, lock) & !MUTEX_FLAGS;
    }
    if task == 0 {
        return o;
    }
    o.kind = owner::TASK;
    o.task = task;
    (o.tid, o.tgid) = task_ids(cfg, task);
    o.stack_id = acquired_stack::<true>(o.tid, lock, lcb::MUTEX);
    o
}

/// The stack owner `o` sleeps in while it holds the lock, when it is asleep
/// (`--owner-stacks`): what it is doing meanwhile (its acquire stack cannot
/// say). Walked once per sleep (a sleep is the task and its voluntary
/// switch count: the next waiter on the same sleep reuses the walk), under
/// the stack budget; [`STACK_SKIPPED`] for a running owner, without the
/// option, or with the budget spent (counted).
#[inline(always)]
fn asleep_stack(cfg: &Config, o: &Owner, now: u64) -> StackId {
    let btf = cfg.layout.btf_task;
    if cfg.owners & OWNER_STACKS == 0
        || cfg.kfuncs & KFUNCS_OWNER_STACKS != KFUNCS_OWNER_STACKS
        || o.kind != owner::TASK
        || o.tid == 0
        || !known(cfg.layout.task_nvcsw)
    {
        return STACK_SKIPPED;
    }
    let state: u32 = load(cfg, o.task, cfg.layout.task_state, btf);
    if state == 0 {
        // Running (or preempted, runnable): its stack moves under a walk.
        return STACK_SKIPPED;
    }
    let switches: u64 = load(cfg, o.task, cfg.layout.task_nvcsw, btf);
    let Some(slot) = STACK_BUDGET.get_ptr_mut(0) else {
        return STACK_SKIPPED;
    };
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime; programs on one CPU do not nest (the BUSY guard).
    let last = unsafe { &*slot };
    if last.asleep_task == o.task && last.asleep_switches == switches && is_stack(last.asleep_stack_id) {
        return last.asleep_stack_id;
    }
    if !budget_allows(cfg.stacks_per_window, now) {
        count(counter::OWNER_STACK_SKIPPED);
        return STACK_SKIPPED;
    }
    let id = capture_task(o.tid);
    // SAFETY: as above; the shared borrow ended before `budget_allows`.
    let b = unsafe { &mut *slot };
    (b.asleep_task, b.asleep_switches, b.asleep_stack_id) = (o.task, switches, id);
    id
}

/// Keeps the stack owner `o` sleeps in ([`asleep_stack`]), when it is
/// asleep, beside the wait (`wait`: its lock and begin) of the task keyed
/// `key` until it ends
/// ([`take_asleep`]); a full map is counted as a skipped owner stack.
#[inline(always)]
pub fn note_asleep(cfg: &Config, o: &Owner, now: u64, key: u64, wait: (u64, u64)) {
    let id = asleep_stack(cfg, o, now);
    let (lock_addr, begin_ns) = wait;
    if is_stack(id) && OWNER_ASLEEP.insert(key, OwnerAsleep { lock_addr, begin_ns, stack_id: id }, 0).is_err() {
        count(counter::OWNER_STACK_SKIPPED);
    }
}

/// The stack the owner of `lock` slept in when the wait of the task keyed
/// `key` that began at `begin_ns` began ([`note_asleep`]), taken out;
/// [`STACK_SKIPPED`] when none (an entry of an earlier wait that ended
/// without an acquisition is dropped).
#[inline(always)]
pub fn take_asleep(cfg: &Config, key: u64, lock: u64, begin_ns: u64) -> StackId {
    if cfg.owners & OWNER_STACKS == 0 {
        return STACK_SKIPPED;
    }
    // SAFETY: plain value copied out of a live entry.
    let Some(a) = (unsafe { OWNER_ASLEEP.get(key) }).copied() else {
        return STACK_SKIPPED;
    };
    let _ = OWNER_ASLEEP.remove(key);
    if a.lock_addr == lock && a.begin_ns == begin_ns { a.stack_id } else { STACK_SKIPPED }
}

/// Puts owner `o` in a pending wait's `dst`, all but `comm`: that is read
/// when a record or a blame aggregate needs it ([`owner_comm`]), so an
/// owner built for a wait never zeroes its 16 bytes (a byte loop in a
/// `memset` call on BPF, 6% of the begin program's samples).
#[inline(always)]
pub fn set_owner(dst: &mut Owner, o: &Owner) {
    dst.kind = o.kind;
    dst.tid = o.tid;
    dst.tgid = o.tgid;
    dst._pad = 0;
    dst.stack_id = o.stack_id;
    dst.task = o.task;
}

/// The owner's `comm` (read when a record or a blame aggregate needs it).
#[inline(always)]
pub fn owner_comm(cfg: &Config, o: &Owner) -> [u8; 16] {
    if o.kind != owner::TASK || cfg.task.comm == 0 {
        return [0; 16];
    }
    load(cfg, o.task, cfg.task.comm, cfg.layout.btf_task)
}

/// Thread `tid` of `tgid` holds `lock` (no owner field) from now until its
/// release probe runs.
#[inline(always)]
pub fn note_holder(lock: u64, tid: u32, tgid: u32, stack_id: StackId) {
    if HOLDERS.insert(lock, Holder { tid, tgid, stack_id }, 0).is_err() {
        count(counter::HOLDER_MAP_FULL);
    }
}

/// Thread `tid` released `lock`.
#[inline(always)]
pub fn forget_holder(lock: u64, tid: u32) {
    // SAFETY: plain value copied out of a live entry.
    if unsafe { HOLDERS.get(lock) }.is_some_and(|h| h.tid == tid) {
        let _ = HOLDERS.remove(lock);
    }
}

/// Thread `tid` begins a wait on `lock` with `stack_id`: once it acquires
/// the lock, the stack later waiters that find it the owner charge it with
/// (locks that record their owner, owners on; nothing otherwise). Written at the wait's begin, while the
/// thread spins or goes to sleep, not at its end inside the critical
/// section, and only when it changed (a thread waiting again at the same
/// call site leaves its slot as it is, so the waiters reading it keep their
/// copy of the line).
#[inline(always)]
pub fn note_waiting(cfg: &Config, tid: u32, lock: u64, stack_id: StackId, flags: u32) {
    if cfg.owners == 0 || !LockType::from_flags(flags).records_owner() {
        return;
    }
    let Some(slot) = ACQUIRED.get_ptr_mut(acquired_index(tid)) else {
        return;
    };
    // SAFETY: a slot of a global array, valid for the map's lifetime. Only
    // thread `tid` (or one `ACQUIRED_SLOTS` ids away) writes it. Readers on
    // other CPUs check the thread and the lock; one that races this write
    // can pair a lock with the other wait's stack (a wrong stack for one
    // wait, as rare as a read landing between two stores).
    let a = unsafe { &mut *slot };
    if a.lock_addr == lock && a.stack_id == stack_id && a.tid == tid && a.flags == flags {
        return;
    }
    if a.tid != tid {
        a.prev_lock_addr = 0;
    } else if a.lock_addr != lock && a.lock_addr != 0 {
        // A wait on another lock, perhaps while holding this one.
        a.prev_lock_addr = a.lock_addr;
        a.prev_stack_id = a.stack_id;
        a.prev_flags = a.flags;
    }
    a.lock_addr = lock;
    a.stack_id = stack_id;
    a.tid = tid;
    a.flags = flags;
}

/// Thread `tid` released `lock` (a hold lockprof timed): its acquisition
/// is no longer the one a later owner read would be in.
#[inline(always)]
pub fn forget_acquired(lock: u64, tid: u32) {
    if let Some(slot) = ACQUIRED.get_ptr_mut(acquired_index(tid)) {
        // SAFETY: as in `note_waiting`.
        let a = unsafe { &mut *slot };
        if a.tid == tid && a.lock_addr == lock {
            a.lock_addr = 0;
        }
        if a.tid == tid && a.prev_lock_addr == lock {
            a.prev_lock_addr = 0;
        }
    }
}
