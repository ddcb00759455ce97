//! Kernel stacks: walked under a per-CPU budget (reused when it is spent),
//! stored under their content hash (see `profiler_common::StackId`).

use aya_ebpf::bindings::BPF_F_USER_STACK;
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_task, bpf_get_stack, bpf_get_task_stack, bpf_probe_read_kernel},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext,
        tracing::StackIdContext,
    },
};
use profiler_common::{
    CALLER_DEPTH, CachedStack, Config, EVENT_USER_STACK, KFUNC_CALL_TASK_FROM_PID, KFUNC_CALL_TASK_RELEASE,
    MAX_STACK_DEPTH, STACK_CUT, STACK_HASH_SEED, STACK_SKIPPED, STACK_WINDOW_NS, StackId, StoredStack, StoredUserStack,
    USER_STACK_NONE, USER_STACK_OFF, USER_STACKS_UNWIND, UserStackEvent, counter, is_stack, known, stack_cache_index,
    stack_error, stack_hash_finish, stack_hash_step, user_stack_seed,
};

use crate::{
    context::count,
    maps::{STACK_BUDGET, STACK_CACHE, STACK_SCRATCH, STACKS, USER_STACK_SCRATCH, USER_STACKS},
    ringbuf,
};

/// A program's context, and the frame a kernel stack walk from it misses.
pub trait WalkContext: StackIdContext {
    /// The probed function's return address, when the program runs at the
    /// function's entry and the kernel's walk from there does not report it:
    /// on arm64 the caller is still only in the link register, and the walk
    /// from a kprobe's registers goes from the probed function straight to
    /// its caller's caller (6.1: `queued_write_lock_slowpath` called from an
    /// `_raw_write_lock_irq` inlined into `__arm64_sys_setpgid` walked as
    /// `queued_write_lock_slowpath, invoke_syscall`). 0 when nothing is missed.
    #[inline(always)]
    fn entry_return(&self) -> u64 {
        0
    }

    /// Whether the program may reuse stacks proven by the kernel stack
    /// ([`crate::stack_proof`]): its context lies on the waiting thread's
    /// kernel stack, in the frames the kernel pushed to run it (a raw
    /// tracepoint's argument array), and its default build loads only where
    /// `bpf_rdonly_cast` exists (6.2+), so that its `bpf_loop` callback (a
    /// function reference, which 5.10's verifier refuses anywhere in a
    /// program) is never sent to an older kernel. The kprobe and fentry wait
    /// programs also load on 5.10; a classic tracepoint's record lies in a
    /// per-CPU buffer.
    const PROVEN_STACKS: bool = false;
}

impl WalkContext for TracePointContext {}
impl WalkContext for BtfTracePointContext {
    const PROVEN_STACKS: bool = true;
}
impl WalkContext for FEntryContext {}
impl WalkContext for FExitContext {}
impl WalkContext for RetProbeContext {}

impl WalkContext for ProbeContext {
    #[cfg(bpf_target_arch = "aarch64")]
    #[inline(always)]
    fn entry_return(&self) -> u64 {
        // SAFETY: a kprobe's context is the probed task's `struct pt_regs`;
        // the verifier allows aligned 8-byte loads inside it. x30 is the link
        // register, the return address at a function's first instruction.
        let lr = unsafe { core::ptr::read_volatile(&(*self.regs).regs[30]) };
        // A kretprobe registered after this kprobe (another session's, another
        // tool's) ran first and parked the real return address where only
        // the kernel finds it: the caller stays unknown rather than wrong.
        if lr == crate::maps::KRETPROBE_TRAMPOLINE.load() { 0 } else { lr }
    }
}

/// `-EEXIST`: another CPU stored the same stack first.
const EEXIST: i64 = 17;

/// A failed capture (`what`, for the reader): counted in `counter`, its
/// errno as the id, which the report names in the stack's place. Not
/// logged: aya-log's formatting at each of these sites, verified on every
/// path into a walk, was 70% of the tp_btf begin program's verification
/// (924k of its million instructions with it, 265k without).
#[inline(always)]
fn failed(counter: u32, _what: &str, errno: i64) -> StackId {
    count(counter);
    stack_error(errno.unsigned_abs() as u32)
}

/// Folds the first `nr` of `ips` into `seed` (bounded for the verifier),
/// finished with `tag` (`nr`, and for kernel stacks [`STACK_CUT`]).
#[inline(always)]
fn hash_frames(seed: u64, ips: &[u64; MAX_STACK_DEPTH], nr: u64, tag: u64) -> StackId {
    let mut h = seed;
    let mut i = 0usize;
    while i < MAX_STACK_DEPTH && (i as u64) < nr {
        if let Some(ip) = ips.get(i) {
            h = stack_hash_step(h, *ip);
        }
        i += 1;
    }
    stack_hash_finish(h, tag)
}

/// [`hash_frames`] of a kernel walk (`buf.nr` its tag), one frame per step
/// of a `bpf_loop`: the verifier checks a step a few times rather than each
/// of 127 frames on every path into a walk, which took the tp_btf begin
/// program to 92% of its million instructions.
#[inline(always)]
fn hash_looped(buf: &StoredStack, nr: u64) -> StackId {
    let mut state = HashLoop { walk: buf, h: STACK_HASH_SEED };
    // SAFETY: `hash_step` has the callback signature bpf_loop calls, and
    // `state` lives on this frame for the whole call.
    unsafe {
        aya_ebpf::helpers::bpf_loop(
            nr as u32,
            hash_step as *const () as *mut aya_ebpf::cty::c_void,
            core::ptr::addr_of_mut!(state).cast(),
            0,
        )
    };
    stack_hash_finish(state.h, buf.nr)
}

/// [`hash_looped`]'s state, handed to each step by `bpf_loop`.
#[repr(C)]
struct HashLoop {
    /// The walk.
    walk: *const StoredStack,
    /// The hash so far.
    h: u64,
}

/// One step of [`hash_looped`]: folds frame `index`.
#[inline(never)]
unsafe extern "C" fn hash_step(index: u64, state: *mut aya_ebpf::cty::c_void) -> i64 {
    // SAFETY: bpf_loop hands back `hash_looped`'s state, alive during the
    // loop; its walk is this CPU's scratch slot.
    let s = unsafe { &mut *state.cast::<HashLoop>() };
    // SAFETY: as above.
    match unsafe { (*s.walk).ips.get(index as usize) } {
        Some(&ip) => {
            s.h = stack_hash_step(s.h, ip);
            0
        }
        None => 1,
    }
}

/// The pointer-sized value at `base + off` (0 when unknown or unreadable).
#[inline(always)]
fn read_at(base: u64, off: u32) -> u64 {
    if base == 0 || !known(off) {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const u64) }.unwrap_or(0)
}

/// The process whose mappings the current task's user stack is read
/// against: its parent's when it is a forked (or vfork'd) child that has not
/// exec'd (the same memory layout, and a parent that outlives a fork
/// storm's children), else its own. Read only when a user stack is walked.
#[inline(always)]
fn address_space_owner(cfg: &Config, tgid: u32) -> u32 {
    let l = &cfg.layout;
    if cfg.task.tgid == 0 || !known(l.task_real_parent) || !known(l.mm_exe_file) {
        return tgid;
    }
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let mm = read_at(task, l.task_mm);
    let parent = read_at(task, l.task_real_parent);
    let parent_mm = read_at(parent, l.task_mm);
    if mm == 0 || parent_mm == 0 {
        return tgid;
    }
    let shared = mm == parent_mm || {
        let exe = read_at(mm, l.mm_exe_file);
        exe != 0 && exe == read_at(parent_mm, l.mm_exe_file)
    };
    if !shared {
        return tgid;
    }
    // SAFETY: as in `read_at`.
    match unsafe { bpf_probe_read_kernel((parent + u64::from(cfg.task.tgid)) as *const u32) } {
        Ok(p) if p != 0 => p,
        _ => tgid,
    }
}

/// Walks the current task's user stack and stores it; its id, or why
/// there is none. A stack stored for the first time is announced to
/// userspace, which reads the process's mappings while it is alive.
#[inline(always)]
fn capture_user<C: StackIdContext>(ctx: &C, cfg: &Config, tgid: u32) -> StackId {
    if tgid == 0 {
        return USER_STACK_NONE;
    }
    if cfg.user_stacks == USER_STACKS_UNWIND {
        return crate::unwind::capture_copy(address_space_owner(cfg, tgid));
    }
    let Some(buf) = USER_STACK_SCRATCH.get_ptr_mut(0) else {
        return failed(counter::USER_STACK_FAILED, "user stack scratch lookup", -7);
    };
    // SAFETY: this CPU's scratch slot from a successful lookup, valid for the
    // map's lifetime; programs on one CPU do not nest (the BUSY guard).
    let buf: &mut StoredUserStack = unsafe { &mut *buf };
    let size = core::mem::size_of_val(&buf.ips) as u32;
    // SAFETY: `buf.ips` is `size` writable bytes of map memory; the context
    // pointer is the program's own.
    let n = unsafe { bpf_get_stack(ctx.as_ptr(), buf.ips.as_mut_ptr().cast(), size, u64::from(BPF_F_USER_STACK)) };
    if n < 0 {
        return failed(counter::USER_STACK_FAILED, "bpf_get_stack (user)", n);
    }
    let nr = (n as u64 / 8).min(MAX_STACK_DEPTH as u64);
    if nr == 0 {
        // A kernel thread, or a task with no user frames to walk.
        return USER_STACK_NONE;
    }
    let tgid = address_space_owner(cfg, tgid);
    buf.nr = nr as u32;
    buf.tgid = tgid;
    let id = hash_frames(user_stack_seed(tgid), &buf.ips, nr, nr);
    if USER_STACKS.get_ptr(id).is_some() {
        return id;
    }
    let stored: &StoredUserStack = buf;
    match USER_STACKS.insert(id, stored, u64::from(BPF_NOEXIST)) {
        Ok(()) => {
            count(counter::USER_STACKS_STORED);
            ringbuf::send(ctx, UserStackEvent { kind: EVENT_USER_STACK, tgid, id });
            id
        }
        Err(e) if i64::from(e) == -EEXIST => id,
        Err(e) => failed(counter::USER_STACK_FAILED, "storing a user stack", i64::from(e)),
    }
}

/// Walks the kernel stack and stores it; its id, or why there is none.
/// A frame the walk misses ([`WalkContext::entry_return`]) is put back in
/// second place, after the probed function. `cut`: walk only
/// [`CALLER_DEPTH`] frames, to the caller; a stack that ends there is
/// stored as [`STACK_CUT`] (one that ends sooner is whole). `looped`: hash
/// the frames in a `bpf_loop` (see [`hash_looped`]; 5.17+, so only in the
/// builds that load on 6.2+).
#[inline(always)]
pub(crate) fn capture<C: WalkContext>(ctx: &C, cut: bool, looped: bool) -> StackId {
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return failed(counter::STACK_FAILED, "stack scratch lookup", -7);
    };
    // SAFETY: this CPU's scratch slot from a successful lookup, valid for the
    // map's lifetime; programs on one CPU do not nest (the BUSY guard).
    let buf: &mut StoredStack = unsafe { &mut *buf };
    let ret = ctx.entry_return();
    let skip = usize::from(ret != 0);
    let size = if cut { CALLER_DEPTH * 8 } else { (core::mem::size_of_val(&buf.ips) - skip * 8) as u32 };
    // SAFETY: from `skip` (0 or 1) on, `buf.ips` has at least `size` writable
    // bytes of map memory (CALLER_DEPTH is far below MAX_STACK_DEPTH - 1);
    // the context pointer is the program's own.
    let n = unsafe { bpf_get_stack(ctx.as_ptr(), buf.ips.as_mut_ptr().add(skip).cast(), size, 0) };
    if n < 0 {
        return failed(counter::STACK_FAILED, "bpf_get_stack", n);
    }
    let mut nr = (n as u64 / 8).min(MAX_STACK_DEPTH as u64);
    let cut = cut && nr >= u64::from(CALLER_DEPTH);
    if skip == 1 && nr > 0 {
        // [_, probed function, caller's caller, ...] -> [probed function, caller, caller's caller, ...]
        buf.ips[0] = buf.ips[1];
        buf.ips[1] = ret;
        nr = (nr + 1).min(MAX_STACK_DEPTH as u64);
    }
    store(buf, nr, cut, looped)
}

/// Stores the `nr` frames walked into `buf` (this CPU's scratch slot) under
/// their hash; their id, or why there is none.
#[inline(always)]
fn store(buf: &mut StoredStack, nr: u64, cut: bool, looped: bool) -> StackId {
    buf.nr = if cut { nr | STACK_CUT } else { nr };
    let id = if looped { hash_looped(buf, nr) } else { hash_frames(STACK_HASH_SEED, &buf.ips, nr, buf.nr) };
    if STACKS.get_ptr(id).is_some() {
        return id;
    }
    // Stored from the scratch slot itself (1 KiB: not through the BPF stack).
    let stored: &StoredStack = buf;
    match STACKS.insert(id, stored, u64::from(BPF_NOEXIST)) {
        Ok(()) => {
            count(counter::STACKS_STORED);
            id
        }
        Err(e) if i64::from(e) == -EEXIST => id,
        Err(e) => failed(counter::STACK_FAILED, "storing a stack", i64::from(e)),
    }
}

/// Walks the kernel stack of another task, thread `tid` (a lock owner found
/// asleep), and stores it; its id, or why there is none.
/// `bpf_get_task_stack` takes a trusted task reference, which
/// `bpf_task_from_pid` gives (tracing programs, 6.2+); the caller checks
/// `Config::kfuncs` ([`profiler_common::KFUNCS_OWNER_STACKS`]). Stored like
/// [`capture`]'s.
#[inline(always)]
pub(crate) fn capture_task(tid: u32) -> StackId {
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return failed(counter::STACK_FAILED, "stack scratch lookup", -7);
    };
    // SAFETY: as in `capture`.
    let buf: &mut StoredStack = unsafe { &mut *buf };
    // SAFETY: the placeholders are rewritten into calls of the kernel's
    // `bpf_task_from_pid(s32 pid)` and `bpf_task_release(struct task_struct
    // *)` before loading, and the `kfuncs` bits the caller checks (load-time
    // constants) are set only then.
    let (from_pid, release) = unsafe {
        (
            core::mem::transmute::<usize, unsafe extern "C" fn(i32) -> u64>(KFUNC_CALL_TASK_FROM_PID as usize),
            core::mem::transmute::<usize, unsafe extern "C" fn(u64)>(KFUNC_CALL_TASK_RELEASE as usize),
        )
    };
    // SAFETY: takes any pid; returns a counted reference or null.
    let t = unsafe { from_pid(tid as i32) };
    if t == 0 {
        // The owner exited since its ids were read.
        return stack_error(ESRCH);
    }
    // Not compared with the owner's `task_struct`: the compiler would then
    // pass that (a scalar to the verifier) for `t`. A pid reused between the
    // owner's read and this lookup would give another task's stack, a
    // window of microseconds against pid_max allocations.
    // SAFETY: `t` is a trusted, counted task reference (released below);
    // `buf.ips` is map memory of exactly `size_of_val` bytes.
    let n = unsafe {
        bpf_get_task_stack(t as *mut _, buf.ips.as_mut_ptr().cast(), core::mem::size_of_val(&buf.ips) as u32, 0)
    };
    // SAFETY: releases the reference `from_pid` gave.
    unsafe { release(t) };
    if n < 0 {
        return failed(counter::STACK_FAILED, "bpf_get_task_stack", n);
    }
    store(buf, (n as u64 / 8).min(MAX_STACK_DEPTH as u64), false, false)
}

/// `ESRCH`: no such task.
const ESRCH: u32 = 3;

/// Whether this CPU may walk one more stack in the current window. A kernel
/// stack walk costs ~1.5-2 us, by far the largest part of a traced
/// contention; under a storm the budget bounds that cost.
#[inline(always)]
pub(crate) fn budget_allows(limit: u32, now: u64) -> bool {
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

/// Stores in cache entry `c` the stacks `ids` (kernel, user) of a wait
/// (lock, flags, thread), whether the kernel stack is `cut`, and its proof's
/// hash (0: none; the caller writes the proof's words). Field by field: no
/// copy of the entry on the BPF stack.
///
/// # Safety
/// `c` is a stack cache entry from a successful lookup.
#[inline(always)]
pub(crate) unsafe fn remember(
    c: *mut CachedStack,
    wait: (u64, u32, u32),
    ids: (StackId, StackId),
    cut: bool,
    hash: u64,
) {
    // SAFETY: the caller's.
    let c = unsafe { &mut *c };
    c.lock_addr = wait.0;
    c.flags = wait.1;
    c.tid = wait.2;
    c.stack_id = ids.0;
    c.user_stack_id = ids.1;
    c.cut = u16::from(cut);
    c.proof_hash = hash;
}

/// Whether cache entry `c` is thread `tid`'s stack for `lock_addr` and
/// `flags`.
#[inline(always)]
fn is_hit(c: &CachedStack, tid: u32, lock_addr: u64, flags: u32) -> bool {
    c.tid == tid && c.lock_addr == lock_addr && c.flags == flags && is_stack(c.stack_id)
}

/// The user stack for a new futex wait of thread `tid` on `uaddr` (its
/// kernel stack is [`profiler_common::STACK_USER_LOCK`]), under the same
/// budget and cache as [`stack_for`]; [`USER_STACK_OFF`] without user stacks.
#[inline(always)]
pub fn user_stack_for<C: StackIdContext>(
    ctx: &C,
    cfg: &Config,
    now: u64,
    uaddr: u64,
    flags: u32,
    ids: (u32, u32),
) -> StackId {
    let (tid, tgid) = ids;
    if cfg.user_stacks == 0 {
        return USER_STACK_OFF;
    }
    let cached = STACK_CACHE.get_ptr_mut(stack_cache_index(tid, flags));
    if budget_allows(cfg.stacks_per_window, now) {
        let user_id = capture_user(ctx, cfg, tgid);
        if let Some(c) = cached {
            // SAFETY: this CPU's cache entry from a successful lookup, valid
            // for the map's lifetime (see `context` for concurrent updates).
            unsafe { remember(c, (uaddr, flags, tid), (profiler_common::STACK_USER_LOCK, user_id), false, 0) };
        }
        return user_id;
    }
    // SAFETY: as above; only read.
    match cached.map(|c| unsafe { &*c }) {
        Some(c) if c.tid == tid && c.lock_addr == uaddr && c.flags == flags && is_stack(c.user_stack_id) => {
            count(counter::STACK_REUSED);
            c.user_stack_id
        }
        _ => {
            count(counter::STACK_SKIPPED);
            STACK_SKIPPED
        }
    }
}

/// The stacks for a new wait (or call) of thread `tid`, kernel and user
/// (`with_user`: the configuration asks for user stacks and the program
/// records them), and whether the kernel stack was cut at the caller.
///
/// `PROVEN` (the default begin build, 6.2+; tp_btf only, see
/// [`WalkContext::PROVEN_STACKS`]): where the program can read its
/// kernel stack and no user stack is asked for, a stack proven by the
/// kernel stack is reused without a walk ([`crate::stack_proof`]). Else:
/// walked whole when the budget allows (one budget unit for both,
/// remembered in this CPU's stack cache), else the thread's last stacks on
/// this CPU for the same lock and flags, else the kernel stack walked to its
/// caller only ([`CALLER_DEPTH`] frames, no user stack), so that every wait
/// has a caller. Each outcome is counted.
///
/// The cache has an entry per thread and flags ([`stack_cache_index`]): a
/// thread's first spins and its sleeping waits on one mutex no longer evict
/// each other's stacks, which left 1-19% of a storm's waits without one.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn stack_for<C: WalkContext, const PROVEN: bool>(
    ctx: &C,
    cfg: &Config,
    now: u64,
    lock_addr: u64,
    flags: u32,
    ids: (u32, u32),
    with_user: bool,
) -> (StackId, StackId, bool) {
    let (tid, tgid) = ids;
    let user = with_user && cfg.user_stacks != 0;
    if PROVEN && C::PROVEN_STACKS && !user {
        let here = crate::stack_proof::anchor(ctx, cfg);
        if here != 0 {
            let (id, cut) = crate::stack_proof::proven_stack(ctx, cfg, now, (lock_addr, flags, tid), here);
            return (id, USER_STACK_OFF, cut);
        }
    }
    let cached = STACK_CACHE.get_ptr_mut(stack_cache_index(tid, flags));
    let whole = budget_allows(cfg.stacks_per_window, now);
    if !whole {
        // SAFETY: this CPU's cache entry from a successful lookup, valid for
        // the map's lifetime (see `context` for concurrent updates); only read.
        if let Some(c) = cached.map(|c| unsafe { &*c })
            && is_hit(c, tid, lock_addr, flags)
        {
            count(counter::STACK_REUSED);
            return (c.stack_id, if user { c.user_stack_id } else { USER_STACK_OFF }, c.cut != 0);
        }
        count(counter::STACKS_CUT);
    }
    // One walk for both outcomes (one call site: the 6.1-era begin build's
    // stack has no room for a second).
    let id = capture(ctx, !whole, PROVEN && C::PROVEN_STACKS);
    let user_id = match (user, whole) {
        (true, true) => capture_user(ctx, cfg, tgid),
        (true, false) => STACK_SKIPPED,
        (false, _) => USER_STACK_OFF,
    };
    if let Some(c) = cached {
        // SAFETY: as above.
        unsafe { remember(c, (lock_addr, flags, tid), (id, user_id), !whole, 0) };
    }
    (id, user_id, !whole)
}
