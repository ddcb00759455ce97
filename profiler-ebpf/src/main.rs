//! lockprof's eBPF programs.
//!
//! Wait backends share one implementation: the `lock:contention_begin/end`
//! tracepoints as tp_btf (preferred: no tracefs, typed arguments) or classic
//! tracepoints, and kprobe/kretprobe or fentry/fexit on the lock slowpaths.
//! Hold backends: kprobe or fentry on the release functions, timing
//! contended acquisitions from the end of their wait to their release.
//!
//! Cost model: everything costly (the stack walk) happens when a wait
//! begins, while the task is waiting anyway. When it ends the task has just
//! acquired the lock, so only CPU-local map work (or one ring-buffer record)
//! happens there.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_comm, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf, StackTrace},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext,
        tracing::StackIdContext,
    },
};
use aya_log_ebpf::warn;
use profiler_common::{
    AggKey, AggVal, Config, ContentionEvent, DEFAULT_AGG_ENTRIES, DEFAULT_PENDING_ENTRIES, DEFAULT_RINGBUF_BYTES,
    DEFAULT_STACK_ENTRIES, EVENT_AGG_OVERFLOW, EVENT_CONTENTION, EVENT_HOLD, EVENT_OUTLIER, EVENT_YIELD, HoldKey,
    HoldStart, LockType, MODE_AGGREGATE, MODE_STREAM, PendingWait, STACK_SKIPPED, StackBudget, TaskOffsets, TaskWait,
    YieldEvent, YieldStart, counter, hist_bucket, lcb, probe_flags, task_key,
};

/// Filters, written by userspace before load.
#[unsafe(no_mangle)]
static CONFIG: Global<Config> =
    Global::new(Config { type_mask: u32::MAX, filter_tgid: 0, stacks_per_window: 0, mode: MODE_STREAM, outlier_ns: 0 });

/// Offsets of the classic tracepoint fields, read by userspace from
/// /sys/kernel/tracing/events/lock/*/format (defaults: 6.x layout).
/// Wake the reader only when this many bytes are waiting; below that the
/// reader polls on a timer. Per-event wakeups cost more than the events
/// themselves on a busy machine (measured: pipe storm 0.43x -> 0.8x+).
#[unsafe(no_mangle)]
static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

#[unsafe(no_mangle)]
static TP_BEGIN_LOCK_OFF: Global<u32> = Global::new(8);
#[unsafe(no_mangle)]
static TP_BEGIN_FLAGS_OFF: Global<u32> = Global::new(16);
#[unsafe(no_mangle)]
static TP_END_LOCK_OFF: Global<u32> = Global::new(8);

/// `struct task_struct` offsets of `pid`, `tgid` and `comm`, found by
/// userspace in the kernel's BTF (0: unknown; the yield target is then
/// reported without identity).
#[unsafe(no_mangle)]
static TASK_OFFSETS: Global<TaskOffsets> = Global::new(TaskOffsets { pid: 0, tgid: 0, comm: 0, _pad: 0 });

/// Completed contentions for userspace.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RINGBUF_BYTES, 0);

/// Waits that may sleep, keyed by `task_key`. Entries stay resident (idle
/// when `lock_addr == 0`) and are reused; userspace deletes those of exited
/// tasks every interval. (An LRU map was tried: it evicted entries of tasks
/// sleeping in a wait under fork-storm churn, losing those waits.)
#[map]
static PENDING: HashMap<u64, TaskWait> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Aggregate mode: two per-CPU maps, one active (written by the programs)
/// while userspace drains the other; `ACTIVE[0]` says which.
#[map]
static AGG_A: PerCpuHashMap<AggKey, AggVal> = PerCpuHashMap::with_max_entries(DEFAULT_AGG_ENTRIES, 0);
#[map]
static AGG_B: PerCpuHashMap<AggKey, AggVal> = PerCpuHashMap::with_max_entries(DEFAULT_AGG_ENTRIES, 0);
#[map]
static ACTIVE: Array<u32> = Array::with_max_entries(1, 0);
/// Scratch space to build a new aggregate value.
#[map]
static AGG_SCRATCH: PerCpuArray<AggVal> = PerCpuArray::with_max_entries(1, 0);

/// `HOLD_ON[0]` is set by userspace once release probes are attached:
/// contended acquisitions then start hold tracking.
#[map]
static HOLD_ON: Array<u32> = Array::with_max_entries(1, 0);

/// Holds in progress of contended acquisitions.
#[map]
static HOLDS: HashMap<HoldKey, HoldStart> = HashMap::with_max_entries(DEFAULT_PENDING_ENTRIES, 0);

/// Nesting depth of probed spinning slowpaths on this CPU (kretprobes do not
/// see the lock, so nested irq entries must be told apart from the outer one).
#[map]
static SPIN_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU stack walk budget.
#[map]
static STACK_BUDGET: PerCpuArray<StackBudget> = PerCpuArray::with_max_entries(1, 0);

/// Pure spinning waits, per CPU (free when `lock_addr == 0`).
#[map]
static SPIN_PENDING: PerCpuArray<PendingWait> = PerCpuArray::with_max_entries(1, 0);

/// Kernel stacks captured at `contention_begin`.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(DEFAULT_STACK_ENTRIES, 0);

/// Per-CPU counters, indexed by `profiler_common::counter`.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Per-CPU re-entrancy guard: non-zero while a lockprof program runs on this
/// CPU. Tracepoint programs run with preemption disabled, so a per-CPU flag is
/// exact.
#[map]
static BUSY: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// `yield_to` calls in progress, by yielding thread.
#[map]
static YIELD_PENDING: HashMap<u32, YieldStart> = HashMap::with_max_entries(4096, 0);

/// Processes to record when `Config::filter_tgid` is set.
#[map]
static TGID_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);

/// Adds one to a per-CPU counter; returns true the first time it moves off
/// zero on this CPU, so failure paths can log once without flooding.
#[inline(always)]
fn count(idx: u32) -> bool {
    match COUNTERS.get_ptr_mut(idx) {
        Some(slot) => {
            // SAFETY: the pointer comes from a successful per-CPU array lookup
            // of a valid index; only this CPU touches its slot and BPF
            // programs do not preempt each other on one CPU for this map.
            unsafe {
                *slot += 1;
                *slot == 1
            }
        }
        None => false,
    }
}

/// Runs `f` unless another lockprof program is already running on this CPU
/// (a lock taken inside our own map or ring-buffer operations).
#[inline(always)]
fn guarded(f: impl FnOnce() -> Result<u32, u32>) -> Result<u32, u32> {
    let Some(busy) = BUSY.get_ptr_mut(0) else {
        return Err(0);
    };
    // SAFETY: per-CPU slot from a successful lookup; preemption is disabled
    // while tracepoint programs run, so nothing else touches it meanwhile.
    unsafe {
        if *busy != 0 {
            count(counter::REENTERED);
            return Ok(0);
        }
        *busy = 1;
    }
    let r = f();
    // SAFETY: as above.
    unsafe { *busy = 0 };
    r
}

#[inline(always)]
fn current_ids() -> (u32, u32) {
    let pid_tgid = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

#[inline(always)]
fn wanted(cfg: &Config, tgid: u32) -> bool {
    if cfg.filter_tgid == 0 {
        return true;
    }
    // SAFETY: the value is a plain u8 and is only read.
    unsafe { TGID_FILTER.get(tgid).is_some() }
}

/// Pure spinning waits (spinlock, rwlock) cannot sleep or migrate while
/// they spin, so they are tracked per CPU; everything that may sleep (mutex,
/// including its optimistic spin, rwsem, rt) per task.
#[inline(always)]
fn is_spinning(flags: u32) -> bool {
    flags & lcb::SPIN != 0 && flags & lcb::MUTEX == 0
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

#[inline(always)]
fn capture_stack<C: StackIdContext>(ctx: &C) -> i32 {
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

/// Whether this CPU may walk one more stack in the current 100 ms window.
/// A kernel stack walk costs ~1.5-2 us here, by far the largest part of a
/// traced contention; under a storm the budget bounds that cost.
#[inline(always)]
fn stack_budget_allows(limit: u32, now: u64) -> bool {
    if limit == 0 {
        return true;
    }
    let Some(b) = STACK_BUDGET.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: this CPU's slot; preemption is disabled in tracepoint programs.
    let b = unsafe { &mut *b };
    if now.wrapping_sub(b.window_ns) >= 100_000_000 {
        b.window_ns = now;
        b.used = 0;
    }
    if b.used >= limit as u64 {
        return false;
    }
    b.used += 1;
    true
}

/// The stack for a new wait: walked when the budget allows (and remembered
/// in the task's entry), else the task's last stack for the same lock and
/// flags, else [`STACK_SKIPPED`].
#[inline(always)]
fn stack_for<C: StackIdContext>(
    ctx: &C,
    cfg: &Config,
    now: u64,
    lock_addr: u64,
    flags: u32,
    task: Option<&mut TaskWait>,
) -> i32 {
    if stack_budget_allows(cfg.stacks_per_window, now) {
        let id = capture_stack(ctx);
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

#[inline(always)]
fn on_begin<C: StackIdContext>(ctx: &C, lock_addr: u64, flags: u32) -> Result<u32, u32> {
    let cfg = CONFIG.load();
    if lock_addr == 0 || cfg.type_mask & LockType::from_flags(flags).bit() == 0 {
        return Ok(0);
    }
    let (tid, tgid) = current_ids();
    if !wanted(&cfg, tgid) {
        return Ok(0);
    }
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let key = task_key(tid, cpu);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let wait = |stack_id| PendingWait { begin_ns: now, lock_addr, flags, stack_id, tgid, tid };

    if is_spinning(flags) {
        let slot = SPIN_PENDING.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: this CPU's slot; preemption is disabled in tracepoint programs.
        let slot = unsafe { &mut *slot };
        if merge_begin(slot, lock_addr, flags) {
            // The task entry is only consulted when the stack budget is spent.
            let task = if stack_budget_allows(cfg.stacks_per_window, now) {
                let id = capture_stack(ctx);
                *slot = wait(id);
                // Remember it for this thread, for when the budget is spent.
                if let Some(t) = PENDING.get_ptr_mut(key) {
                    // SAFETY: live map value owned by this task (see below).
                    let t = unsafe { &mut *t };
                    t.last_lock = lock_addr;
                    t.last_flags = flags;
                    t.last_stack_id = id;
                }
                return Ok(0);
            } else {
                // SAFETY: live map value owned by this task (see below).
                PENDING.get_ptr_mut(key).map(|t| unsafe { &mut *t })
            };
            let id = match task {
                Some(t) if t.last_lock == lock_addr && t.last_flags == flags && t.last_stack_id >= 0 => {
                    count(counter::STACK_REUSED);
                    t.last_stack_id
                }
                _ => {
                    count(counter::STACK_SKIPPED);
                    STACK_SKIPPED
                }
            };
            *slot = wait(id);
        }
        return Ok(0);
    }

    if let Some(entry) = PENDING.get_ptr_mut(key) {
        // SAFETY: a live map value owned by this task (or, for tid 0, this
        // CPU); entries stay resident and are reused, so no insert or delete
        // (with their bucket locks) happens on the hot path.
        let entry = unsafe { &mut *entry };
        if merge_begin(&mut entry.wait, lock_addr, flags) {
            let id = stack_for(ctx, &cfg, now, lock_addr, flags, Some(entry));
            entry.wait = wait(id);
        }
        return Ok(0);
    }
    // First contention of this task: one insert for its lifetime.
    let mut entry = TaskWait::default();
    let id = stack_for(ctx, &cfg, now, lock_addr, flags, Some(&mut entry));
    entry.wait = wait(id);
    if let Err(e) = PENDING.insert(key, entry, BPF_NOEXIST as u64) {
        if count(counter::PENDING_FULL) {
            warn!(ctx, "lockprof: pending-wait map insert failed: {}", e);
        }
        return Err(0);
    }
    Ok(0)
}

/// Takes the wait on `lock_addr` out of the per-CPU or per-task slot.
#[inline(always)]
fn take_pending(lock_addr: u64, key: u64) -> Option<PendingWait> {
    // Whether some wait is pending here: then an end we cannot match is the
    // end of a nested wait that begin skipped, not an end without a begin.
    let mut busy = false;
    if let Some(slot) = SPIN_PENDING.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; preemption is disabled.
        let slot = unsafe { &mut *slot };
        if slot.lock_addr == lock_addr {
            let p = *slot;
            slot.lock_addr = 0;
            return Some(p);
        }
        busy = slot.lock_addr != 0;
    }
    if let Some(e) = PENDING.get_ptr_mut(key) {
        // SAFETY: live map value owned by this task.
        let entry = unsafe { &mut (*e).wait };
        if entry.lock_addr == lock_addr {
            let p = *entry;
            entry.lock_addr = 0;
            return Some(p);
        }
        busy |= entry.lock_addr != 0;
    }
    if !busy {
        unmatched_end();
    }
    None
}

#[inline(always)]
fn unmatched_end() {
    // With filters on, ends of filtered waits are expected here.
    if !CONFIG.load().filtering() {
        count(counter::END_WITHOUT_BEGIN);
    }
}

/// Ring-buffer submit flags: wake the reader only once enough is waiting.
#[inline(always)]
fn submit_flags() -> u64 {
    let f = if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    f as u64
}

/// Sends one record through the ring buffer.
#[inline(always)]
fn stream<C: EbpfContext>(ctx: &C, kind: u32, p: &PendingWait, lock_addr: u64, ids: (u32, u32, u32), now: u64) {
    let (tid, tgid, cpu) = ids;
    match EVENTS.reserve::<ContentionEvent>(0) {
        Some(mut entry) => {
            let ev = ContentionEvent {
                lock_addr,
                wait_ns: now.saturating_sub(p.begin_ns),
                end_ns: now,
                tid,
                tgid,
                flags: p.flags,
                cpu,
                stack_id: p.stack_id,
                kind,
                comm: bpf_get_current_comm().unwrap_or([0u8; 16]),
            };
            entry.write(ev);
            entry.submit(submit_flags());
            count(counter::EVENTS);
        }
        None => {
            if count(counter::RINGBUF_FULL) {
                warn!(ctx, "lockprof: ring buffer full, events are being lost");
            }
        }
    }
}

#[inline(always)]
fn add_wait(v: &mut AggVal, wait: u64) {
    if v.count == 0 || wait < v.min_ns {
        v.min_ns = wait;
    }
    if wait > v.max_ns {
        v.max_ns = wait;
    }
    v.count += 1;
    v.total_ns += wait;
    let b = hist_bucket(wait);
    if let Some(slot) = v.hist.get_mut(b) {
        *slot += 1;
    }
}

/// Folds a wait into this CPU's value in the active aggregate map: CPU-local
/// work only, since the lock has just been acquired. False if the map is full.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "passing *v by value would copy the 432-byte value onto the 512-byte BPF stack"
)]
fn aggregate(key: &AggKey, wait: u64) -> bool {
    let active = ACTIVE.get(0).copied().unwrap_or(0);
    let map = if active == 0 { &AGG_A } else { &AGG_B };
    if let Some(v) = map.get_ptr_mut(key) {
        // SAFETY: this CPU's value of a live per-CPU hash entry; preemption is off.
        add_wait(unsafe { &mut *v }, wait);
        return true;
    }
    // A new key: build its value in per-CPU scratch space (too big for the
    // 512-byte BPF stack) and insert it.
    let Some(scratch) = AGG_SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's scratch slot; preemption is off.
    let v = unsafe { &mut *scratch };
    // SAFETY: AggVal is plain old data; all-zero bytes are a valid value.
    unsafe { core::ptr::write_bytes(scratch, 0, 1) };
    v.comm = bpf_get_current_comm().unwrap_or([0u8; 16]);
    add_wait(v, wait);
    match map.insert(key, &*v, BPF_NOEXIST as u64) {
        Ok(()) => true,
        // Another CPU created it meanwhile: update ours in place.
        Err(_) => match map.get_ptr_mut(key) {
            Some(existing) => {
                // SAFETY: as above.
                add_wait(unsafe { &mut *existing }, wait);
                true
            }
            None => false,
        },
    }
}

#[inline(always)]
fn on_end<C: EbpfContext>(ctx: &C, lock_addr: u64) -> Result<u32, u32> {
    let (tid, tgid) = current_ids();
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(pending) = take_pending(lock_addr, task_key(tid, cpu)) else {
        return Ok(0);
    };
    complete(ctx, &pending, (tid, tgid, cpu));
    Ok(0)
}

/// A wait ended with the lock acquired: account it (stream or aggregate)
/// and, when release probes are attached, start timing the hold.
#[inline(always)]
fn complete<C: EbpfContext>(ctx: &C, pending: &PendingWait, ids: (u32, u32, u32)) {
    let (tid, tgid, _cpu) = ids;
    let lock_addr = pending.lock_addr;
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if HOLD_ON.get(0).is_some_and(|v| *v != 0) {
        let key = HoldKey { lock_addr, tid, _pad: 0 };
        let start = HoldStart { start_ns: now, flags: pending.flags, stack_id: pending.stack_id };
        if HOLDS.insert(key, start, 0).is_err() && count(counter::HOLD_MAP_FULL) {
            warn!(ctx, "lockprof: hold map full");
        }
    }
    let cfg = CONFIG.load();
    if cfg.mode != MODE_AGGREGATE {
        stream(ctx, EVENT_CONTENTION, pending, lock_addr, ids, now);
        return;
    }
    let wait = now.saturating_sub(pending.begin_ns);
    let key = AggKey { lock_addr, tid, tgid, flags: pending.flags, stack_id: pending.stack_id };
    if !aggregate(&key, wait) {
        if count(counter::AGG_FULL) {
            warn!(ctx, "lockprof: aggregate map full, streaming instead");
        }
        stream(ctx, EVENT_AGG_OVERFLOW, pending, lock_addr, ids, now);
    } else if cfg.outlier_ns != 0 && wait >= cfg.outlier_ns {
        count(counter::OUTLIERS);
        stream(ctx, EVENT_OUTLIER, pending, lock_addr, ids, now);
    }
}

/// A release (mutex_unlock, up_read, up_write, rwlock unlocks): one map
/// lookup when the lock is not tracked; else the hold is measured.
#[inline(always)]
fn on_release<C: EbpfContext>(ctx: &C, lock_addr: u64) -> Result<u32, u32> {
    let (tid, tgid) = current_ids();
    let key = HoldKey { lock_addr, tid, _pad: 0 };
    // SAFETY: plain value read from a live entry, copied out.
    let Some(start) = (unsafe { HOLDS.get(key) }).copied() else {
        return Ok(0);
    };
    let _ = HOLDS.remove(key);
    // SAFETY: helpers without preconditions.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    let held =
        PendingWait { begin_ns: start.start_ns, lock_addr, flags: start.flags, stack_id: start.stack_id, tgid, tid };
    count(counter::HOLDS);
    stream(ctx, EVENT_HOLD, &held, lock_addr, (tid, tgid, cpu), now);
    Ok(0)
}

/// Entry of a probed slowpath (kprobe/fentry wait backends).
#[inline(always)]
fn probe_begin<C: StackIdContext>(ctx: &C, lock_addr: u64, flags: u32) -> Result<u32, u32> {
    if is_spinning(flags) {
        let depth = SPIN_DEPTH.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: this CPU's slot; probe programs run with preemption off.
        let d = unsafe { &mut *depth };
        *d += 1;
        if *d > 1 {
            count(counter::NESTED);
            return Ok(0);
        }
    }
    on_begin(ctx, lock_addr, flags)
}

/// Return of a probed slowpath: the wait it began is over.
#[inline(always)]
fn probe_end<C: EbpfContext>(ctx: &C, spinning: bool) -> Result<u32, u32> {
    let (tid, tgid) = current_ids();
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let pending = if spinning {
        let depth = SPIN_DEPTH.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: this CPU's slot; preemption is off.
        let d = unsafe { &mut *depth };
        *d = d.saturating_sub(1);
        if *d != 0 {
            return Ok(0);
        }
        let slot = SPIN_PENDING.get_ptr_mut(0).ok_or(0u32)?;
        // SAFETY: as above.
        let slot = unsafe { &mut *slot };
        let p = *slot;
        slot.lock_addr = 0;
        p
    } else {
        let entry = PENDING.get_ptr_mut(task_key(tid, cpu)).ok_or(0u32)?;
        // SAFETY: live map value owned by this task.
        let w = unsafe { &mut (*entry).wait };
        let p = *w;
        w.lock_addr = 0;
        p
    };
    if pending.lock_addr == 0 {
        unmatched_end();
        return Ok(0);
    }
    complete(ctx, &pending, (tid, tgid, cpu));
    Ok(0)
}

macro_rules! kprobe_entries {
    ($($kp:ident, $flags:expr;)*) => {$(
        /// kprobe at a slowpath's entry (one program, attached to each function of its family).
        #[kprobe]
        pub fn $kp(ctx: ProbeContext) -> u32 {
            let lock: u64 = ctx.arg(0).unwrap_or(0);
            match guarded(|| probe_begin(&ctx, lock, $flags)) {
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
}

/// kretprobe of the sleeping slowpaths (mutex, rwsem).
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

/// kprobe on a release function whose first argument is the lock.
#[kprobe]
pub fn kp_release(ctx: ProbeContext) -> u32 {
    let lock: u64 = ctx.arg(0).unwrap_or(0);
    match guarded(|| on_release(&ctx, lock)) {
        Ok(r) | Err(r) => r,
    }
}

// fentry/fexit programs are bound to one function at load time, so each
// probed function gets its own pair. They run preemptible (migrate_disable
// only), so they do not take the per-CPU busy guard: a preempted holder of
// the guard would make other tasks' programs on that CPU skip their work.
// Nothing they call takes a lock they probe, so they cannot nest into
// themselves through our own map operations.
macro_rules! fentry_waits {
    ($($fe:ident, $fx:ident, $flags:expr, $spinning:expr;)*) => {$(
        /// fentry at a slowpath's entry.
        #[fentry]
        pub fn $fe(ctx: FEntryContext) -> i32 {
            let lock: u64 = ctx.arg(0);
            match probe_begin(&ctx, lock, $flags) {
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
}

macro_rules! fentry_releases {
    ($($fe:ident),* $(,)?) => {$(
        /// fentry on a release function.
        #[fentry]
        pub fn $fe(ctx: FEntryContext) -> i32 {
            let lock: u64 = ctx.arg(0);
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
);

/// `yield_to(p, preempt)` entered: remember when, the caller stack and the
/// target's identity (read through the BTF offsets) for the return.
#[inline(always)]
fn yield_entry<C: StackIdContext>(ctx: &C, task: u64, preempt: u32) -> Result<u32, u32> {
    let (tid, tgid) = current_ids();
    let cfg = CONFIG.load();
    if !wanted(&cfg, tgid) {
        return Ok(0);
    }
    // Under a pause-loop-exit storm yield_to is itself hot: stack walks share
    // the per-CPU budget of the waits (beyond it the call is kept, stackless).
    // SAFETY: helper without preconditions.
    let stack_id = if stack_budget_allows(cfg.stacks_per_window, unsafe { bpf_ktime_get_ns() }) {
        capture_stack(ctx)
    } else {
        count(counter::STACK_SKIPPED);
        STACK_SKIPPED
    };
    let off = TASK_OFFSETS.load();
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
    if YIELD_PENDING.insert(tid, start, 0).is_err() && count(counter::YIELD_MAP_FULL) {
        warn!(ctx, "lockprof: yield_to entry map full");
    }
    Ok(0)
}

/// `yield_to` returned `ret`: one record with the outcome and latency.
#[inline(always)]
fn yield_return<C: EbpfContext>(ctx: &C, ret: i32) -> Result<u32, u32> {
    let (tid, tgid) = current_ids();
    // SAFETY: plain value copied out of a live entry.
    let Some(start) = (unsafe { YIELD_PENDING.get(tid) }).copied() else {
        if wanted(&CONFIG.load(), tgid) {
            count(counter::YIELD_UNMATCHED);
        }
        return Ok(0);
    };
    let _ = YIELD_PENDING.remove(tid);
    // SAFETY: helpers without preconditions.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    count(counter::YIELDS);
    match EVENTS.reserve::<YieldEvent>(0) {
        Some(mut entry) => {
            entry.write(YieldEvent {
                latency_ns: now.saturating_sub(start.start_ns),
                end_ns: now,
                target_pid: start.target_pid,
                target_tgid: start.target_tgid,
                tid,
                tgid,
                ret,
                preempt: start.preempt,
                cpu,
                kind: EVENT_YIELD,
                stack_id: start.stack_id,
                _pad: 0,
                comm: bpf_get_current_comm().unwrap_or([0u8; 16]),
                target_comm: start.target_comm,
            });
            entry.submit(submit_flags());
            count(counter::EVENTS);
        }
        None => {
            if count(counter::RINGBUF_FULL) {
                warn!(ctx, "lockprof: ring buffer full, events are being lost");
            }
        }
    }
    Ok(0)
}

/// fentry on `yield_to`.
#[fentry]
pub fn fe_yield_to(ctx: FEntryContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let preempt: u64 = ctx.arg(1);
    match yield_entry(&ctx, task, (preempt & 0xff != 0) as u32) {
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
    match guarded(|| yield_entry(&ctx, task, (preempt & 0xff != 0) as u32)) {
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

#[btf_tracepoint(function = "contention_begin")]
pub fn contention_begin_btf(ctx: BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let flags: u32 = ctx.arg(1);
    match guarded(|| on_begin(&ctx, lock, flags)) {
        Ok(r) | Err(r) => r as i32,
    }
}

#[btf_tracepoint(function = "contention_end")]
pub fn contention_end_btf(ctx: BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    match guarded(|| on_end(&ctx, lock)) {
        Ok(r) | Err(r) => r as i32,
    }
}

#[tracepoint(category = "lock", name = "contention_begin")]
pub fn contention_begin_tp(ctx: TracePointContext) -> u32 {
    match try_contention_begin_tp(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_contention_begin_tp(ctx: &TracePointContext) -> Result<u32, u32> {
    // SAFETY: offsets come from the tracepoint's format file (or its
    // documented default layout); read_at bounds-checks through the helper.
    let lock: u64 = unsafe { ctx.read_at(TP_BEGIN_LOCK_OFF.load() as usize) }.map_err(|_| 0u32)?;
    // SAFETY: as above.
    let flags: u32 = unsafe { ctx.read_at(TP_BEGIN_FLAGS_OFF.load() as usize) }.map_err(|_| 0u32)?;
    guarded(|| on_begin(ctx, lock, flags))
}

#[tracepoint(category = "lock", name = "contention_end")]
pub fn contention_end_tp(ctx: TracePointContext) -> u32 {
    match try_contention_end_tp(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_contention_end_tp(ctx: &TracePointContext) -> Result<u32, u32> {
    // SAFETY: see try_contention_begin_tp.
    let lock: u64 = unsafe { ctx.read_at(TP_END_LOCK_OFF.load() as usize) }.map_err(|_| 0u32)?;
    guarded(|| on_end(ctx, lock))
}

/// Overhead floor for `cargo xtask bench`: the cheapest possible program on
/// the same tracepoints, counting calls and nothing else.
#[map]
static FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn floor_count() -> i32 {
    if let Some(slot) = FLOOR.get_ptr_mut(0) {
        // SAFETY: per-CPU slot from a successful lookup; preemption is off.
        unsafe { *slot += 1 };
    }
    0
}

#[btf_tracepoint(function = "contention_begin")]
pub fn floor_begin_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count()
}

#[btf_tracepoint(function = "contention_end")]
pub fn floor_end_btf(_ctx: BtfTracePointContext) -> i32 {
    floor_count()
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
