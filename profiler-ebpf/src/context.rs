//! What every program needs: counters, the re-entrancy guard, the current
//! task, the process filter.
//!
//! Per-CPU slots are updated with plain loads and stores. Tracepoint and
//! kprobe programs run with preemption disabled, so nothing else on the CPU
//! touches the slot meanwhile. fentry/fexit programs run with migration
//! disabled but may be preempted (fully preemptible kernels): another task's
//! program on the same CPU can then interleave and one counter increment or
//! budget update can be lost. The slot itself stays valid (per-CPU array
//! values live as long as the map), so that is a miscount, never a bad access.

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task_btf,
        bpf_get_smp_processor_id, bpf_probe_read_kernel,
    },
    programs::FEntryContext,
};
use profiler_common::{Config, KFUNC_RDONLY_CAST, counter, known};

use crate::maps::{BUSY, CGROUP_FILTER, CONFIG, COUNTERS, TGID_FILTER};

/// Adds one to a per-CPU counter; returns true the first time it moves off
/// zero on this CPU, so failure paths can log once without flooding.
#[inline(always)]
pub fn count(idx: u32) -> bool {
    match COUNTERS.get_ptr_mut(idx) {
        Some(slot) => {
            // SAFETY: the pointer comes from a successful per-CPU array lookup
            // of a valid index and stays valid for the map's lifetime; see the
            // module comment for what concurrent updates can do.
            unsafe {
                *slot += 1;
                *slot == 1
            }
        }
        None => false,
    }
}

/// This CPU's re-entrancy guard, held: another lockprof program on this
/// CPU (a lock taken inside our own map or ring-buffer operations) finds
/// it and skips its work. Only for programs that run with preemption
/// disabled (tracepoints, kprobes): a preempted holder would make other
/// tasks' programs skip theirs.
pub struct Guard(*mut u32);

impl Guard {
    /// Takes the guard; `Err(0)` when the slot is missing, `Ok(0)` (counted)
    /// when another program on this CPU holds it: what the program returns.
    #[inline(always)]
    pub fn enter() -> Result<Guard, Result<u32, u32>> {
        let Some(busy) = BUSY.get_ptr_mut(0) else {
            return Err(Err(0));
        };
        // SAFETY: this CPU's slot from a successful lookup; the callers run
        // with preemption disabled, so nothing else on this CPU touches it
        // meanwhile except a nested program, which is what the flag detects.
        unsafe {
            if *busy != 0 {
                count(counter::REENTERED);
                return Err(Ok(0));
            }
            *busy = 1;
        }
        Ok(Guard(busy))
    }

    /// Releases the guard.
    #[inline(always)]
    pub fn leave(self) {
        // SAFETY: as in `enter`.
        unsafe { *self.0 = 0 };
    }
}

/// Runs `f` holding this CPU's [`Guard`]. The hot wait programs take the
/// guard themselves instead, so that their body is not a call of its own
/// (a closure LLVM keeps out of line: one more call and return, which cost
/// on hosts whose returns go through a mitigation thunk).
#[inline(always)]
pub fn guarded(f: impl FnOnce() -> Result<u32, u32>) -> Result<u32, u32> {
    let guard = match Guard::enter() {
        Ok(g) => g,
        Err(r) => return r,
    };
    let r = f();
    guard.leave();
    r
}

/// The running thread: tid, tgid and CPU.
#[derive(Copy, Clone)]
pub struct Ids {
    /// Thread id (0 for the idle tasks).
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// CPU.
    pub cpu: u32,
}

impl Ids {
    /// The current task.
    #[inline(always)]
    pub fn current() -> Ids {
        let pid_tgid = bpf_get_current_pid_tgid();
        // SAFETY: helper without preconditions.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        Ids { tid: pid_tgid as u32, tgid: (pid_tgid >> 32) as u32, cpu }
    }

    /// The current task `task` ([`current_task`]), its ids read with plain
    /// loads where this kernel's offsets are known: one helper call (and
    /// return) fewer than [`Ids::current`], which it falls back to (`task`
    /// null, or offsets unknown).
    #[inline(always)]
    pub fn of(cfg: &Config, task: *const u8) -> Ids {
        let t = &cfg.task;
        if task.is_null() || t.pid == 0 || t.tgid == 0 {
            return Ids::current();
        }
        let at = |off: u32| task.wrapping_add(off as usize) as *const u32;
        // SAFETY: `task` is the BTF-typed current task; the offsets of its
        // `pid` and `tgid` are load-time constants from this kernel's BTF
        // (frozen read-only data), so the verifier checks both loads
        // against the members' types.
        let (tid, tgid) = unsafe { (core::ptr::read_volatile(at(t.pid)), core::ptr::read_volatile(at(t.tgid))) };
        // SAFETY: helper without preconditions.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        Ids { tid, tgid, cpu }
    }
}

/// The current task's `comm` (zeros if the helper fails).
#[inline(always)]
pub fn current_comm() -> [u8; 16] {
    bpf_get_current_comm().unwrap_or([0u8; 16])
}

/// Whether `tgid` passes the `--pid` filter.
#[inline(always)]
pub fn wanted(cfg: &Config, tgid: u32) -> bool {
    if cfg.filter_tgid == 0 {
        return true;
    }
    // SAFETY: the value is a plain u8 and is only read.
    unsafe { TGID_FILTER.get(tgid).is_some() }
}

/// The current task as a BTF-typed pointer (never null in task context).
/// A helper call: a program that needs it twice asks once.
#[inline(always)]
pub fn current_task() -> *const u8 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_task_btf() as *const u8 }
}

/// The current task's cgroup (v2 id) when the configuration records or
/// filters by cgroup, else 0; `None` when the `--cgroup` filter rejects it.
/// `LOADS`: may read it with plain loads from `task` (the current task, or
/// null to ask for it; see [`current_cgroup_id`]); else the helper.
#[inline(always)]
pub fn cgroup<const LOADS: bool>(cfg: &Config, task: *const u8) -> Option<u64> {
    if cfg.cgroups | cfg.filter_cgroup == 0 {
        return Some(0);
    }
    let id = if LOADS {
        current_cgroup_id(cfg, task)
    } else {
        // SAFETY: helper without preconditions.
        unsafe { bpf_get_current_cgroup_id() }
    };
    // SAFETY: the value is a plain u8 and is only read.
    if cfg.filter_cgroup != 0 && unsafe { CGROUP_FILTER.get(id) }.is_none() {
        return None;
    }
    Some(if cfg.cgroups != 0 { id } else { 0 })
}

/// The current task's cgroup (v2) id: `task->cgroups->dfl_cgrp->kn->id`
/// with plain BTF-typed loads where the kernel allows them (6.2+, the same
/// gate as `bpf_rdonly_cast`), which costs less on the begin path than the
/// helper's call and RCU bookkeeping (the program already runs in an RCU
/// read-side section); else `bpf_get_current_cgroup_id`. `task`: the
/// current task ([`current_task`]), or null.
#[inline(always)]
fn current_cgroup_id(cfg: &Config, task: *const u8) -> u64 {
    let l = &cfg.layout;
    if cfg.kfuncs & KFUNC_RDONLY_CAST != 0
        && known(l.task_cgroups)
        && known(l.css_set_dfl_cgrp)
        && known(l.cgroup_kn)
        && known(l.kernfs_node_id)
    {
        let task = if task.is_null() { current_task() } else { task };
        // SAFETY: each pointer is BTF-typed (the current task, then members
        // the verifier types from this kernel's BTF: offsets are load-time
        // constants of frozen read-only data), loaded by the verifier's
        // fault-safe BTF loads and checked for null before the next one.
        unsafe {
            let css = ptr_at(task, l.task_cgroups);
            let cgrp = ptr_at(css, l.css_set_dfl_cgrp);
            let kn = ptr_at(cgrp, l.cgroup_kn);
            if !kn.is_null() {
                return core::ptr::read_volatile(kn.wrapping_add(l.kernfs_node_id as usize) as *const u64);
            }
        }
    }
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_cgroup_id() }
}

/// The pointer member at `off` of the BTF-typed object at `base` (null
/// stays null).
///
/// # Safety
/// `base` is null or a BTF-typed pointer the verifier tracks, and `off` the
/// offset of a pointer member of its type.
#[inline(always)]
unsafe fn ptr_at(base: *const u8, off: u32) -> *const u8 {
    if base.is_null() {
        return base;
    }
    // SAFETY: per the function's contract.
    unsafe { core::ptr::read_volatile(base.wrapping_add(off as usize) as *const *const u8) }
}

/// The configuration userspace wrote before loading, read field by field
/// where it is used. Not a copy: `Global::load` copied the whole `Config`
/// (240 bytes: ~58 loads, most spilled to the BPF stack) at each call. The
/// pointer is laundered through a volatile read so the compiler cannot fold
/// the fields to the object's defaults; the verifier still sees each load as
/// one from a frozen read-only map, a known constant, and prunes the branches
/// it decides.
#[inline(always)]
pub fn config() -> &'static Config {
    let p = core::ptr::addr_of!(CONFIG).cast::<Config>();
    // SAFETY: a read of a local; `Global` is `repr(transparent)` over a
    // `MaybeUninit<Config>` the loader always initialises, and the map is
    // read-only to programs, so the shared reference is never written
    // through while it lives.
    unsafe { &*core::ptr::read_volatile(&p) }
}

/// A copy of the whole configuration (240 bytes, mostly spilled to the BPF
/// stack): the begin programs built for kernels before 6.2 (see
/// `waits::on_begin`).
#[inline(always)]
pub fn config_copy() -> Config {
    CONFIG.load()
}

/// The lock a fentry program gets (its first argument) as a plain number.
/// The verifier types a struct pointer argument (`struct mutex *`) and, on
/// older kernels (5.10), forbids arithmetic on it, which the slot hash
/// (`ident_seen_index`) needs: a copy read through the helper is a scalar.
/// Every fentry program that hashes its lock, or keys a map with it, reads
/// it here.
#[inline(always)]
pub fn fentry_lock(ctx: &FEntryContext) -> u64 {
    // SAFETY: the first u64 of the trampoline's argument array, read through
    // the helper (which checks the address).
    unsafe { bpf_probe_read_kernel(ctx.as_ptr() as *const u64) }.unwrap_or(0)
}
