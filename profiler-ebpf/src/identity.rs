//! Which lock an address is, confirmed against the kernel's own structures
//! the first time a CPU sees the address: the current task's per-task locks
//! (`mmap_lock`, `siglock`, ...), run-queue and zone locks, and the slab
//! cache the address lies in (`bpf_get_kmem_cache`, where the kernel has it).
//! On the hot path this costs one per-CPU array slot compared with the lock
//! address; the rest runs once per (CPU, address) until another address
//! takes the slot.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use profiler_common::{
    Config, KFUNC_CALL_GET_KMEM_CACHE, KFUNC_GET_KMEM_CACHE, Layout, LockIdent, counter, ident_seen_index, is_spinning,
    kind, known,
};

use crate::{
    context::count,
    maps::{IDENT_SEEN, IDENTITIES, RQ_SEEN},
};

/// A kernel pointer-sized read (0 when the read faults).
#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

/// `base + off` when both are known and `base` is non-null.
#[inline(always)]
fn field(base: u64, off: u32) -> Option<u64> {
    (base != 0 && known(off)).then(|| base.wrapping_add(u64::from(off)))
}

/// The pointer stored at `base + off`.
#[inline(always)]
fn deref(base: u64, off: u32) -> u64 {
    field(base, off).map_or(0, read_u64)
}

/// The lock of this CPU's run queue, reached through the current task's
/// CFS run queue (`se.cfs_rq->rq`, or the rq that embeds the cfs_rq on
/// kernels without group scheduling).
#[inline(always)]
fn current_rq_lock(l: &Layout, task: u64) -> Option<u64> {
    let cfs_rq = deref(task, l.task_cfs_rq);
    if cfs_rq == 0 {
        return None;
    }
    let rq = if known(l.cfs_rq_rq) {
        deref(cfs_rq, l.cfs_rq_rq)
    } else if known(l.rq_cfs) {
        cfs_rq.wrapping_sub(u64::from(l.rq_cfs))
    } else {
        0
    };
    field(rq, l.rq_lock)
}

/// Whether `lock` is a zone's lock: the zone it would belong to points to a
/// node whose zone array holds that zone. Returns the zone index.
#[inline(always)]
fn zone_index(l: &Layout, lock: u64) -> Option<u32> {
    if !known(l.zone_lock) || !known(l.zone_size) || l.zone_size == 0 || !known(l.nr_zones) {
        return None;
    }
    let zone = lock.wrapping_sub(u64::from(l.zone_lock));
    let pgdat = deref(zone, l.zone_pgdat);
    let zones = field(pgdat, l.pgdat_node_zones)?;
    let delta = zone.wrapping_sub(zones);
    let size = u64::from(l.zone_size);
    let idx = delta / size;
    (delta % size == 0 && idx < u64::from(l.nr_zones)).then_some(idx as u32)
}

/// The kind of `lock`, compared against the current task's structures.
#[inline(always)]
fn kind_of(l: &Layout, lock: u64, flags: u32, task: u64) -> (u32, u32) {
    if field(task, l.task_pi_lock) == Some(lock) {
        return (kind::PI_LOCK, 0);
    }
    if field(task, l.task_alloc_lock) == Some(lock) {
        return (kind::ALLOC_LOCK, 0);
    }
    if field(deref(task, l.task_mm), l.mm_mmap_lock) == Some(lock) {
        return (kind::MMAP_LOCK, 0);
    }
    if field(deref(task, l.task_sighand), l.sighand_siglock) == Some(lock) {
        return (kind::SIGLOCK, 0);
    }
    let signal = deref(task, l.task_signal);
    if field(signal, l.signal_cred_guard_mutex) == Some(lock) {
        return (kind::CRED_GUARD_MUTEX, 0);
    }
    if field(signal, l.signal_exec_update_lock) == Some(lock) {
        return (kind::EXEC_UPDATE_LOCK, 0);
    }
    if field(deref(task, l.task_files), l.files_file_lock) == Some(lock) {
        return (kind::FILE_LOCK, 0);
    }
    if current_rq_lock(l, task) == Some(lock) {
        return (kind::RQ_LOCK, 0);
    }
    if is_spinning(flags)
        && let Some(idx) = zone_index(l, lock)
    {
        return (kind::ZONE_LOCK, idx);
    }
    (kind::NONE, 0)
}

/// The `struct kmem_cache` `lock` lies in (0: none or unknown).
#[inline(always)]
fn kmem_cache_of(cfg: &Config, lock: u64) -> u64 {
    if cfg.kfuncs & KFUNC_GET_KMEM_CACHE == 0 {
        return 0;
    }
    // SAFETY: the placeholder id is a call the loader rewrote into a kfunc
    // call bound to this kernel's `bpf_get_kmem_cache(u64 addr)`; the
    // `kfuncs` bit (a load-time constant) is set only then, so the verifier
    // never sees the call otherwise.
    let f: unsafe extern "C" fn(u64) -> u64 = unsafe { core::mem::transmute(KFUNC_CALL_GET_KMEM_CACHE as usize) };
    // SAFETY: takes any address; returns NULL for non-slab memory.
    unsafe { f(lock) }
}

/// A new identity (counted when the map is full).
#[inline(always)]
fn insert(lock: u64, id: LockIdent) {
    if IDENTITIES.insert(lock, id, 0).is_err() {
        count(counter::IDENT_MAP_FULL);
    }
}

/// Records this CPU's run-queue lock once (so the run queues of the other
/// CPUs are known by address when they are contended from here).
#[inline(always)]
fn note_rq_lock(l: &Layout, task: u64) {
    let Some(seen) = RQ_SEEN.get_ptr_mut(0) else { return };
    let Some(rq_lock) = current_rq_lock(l, task) else { return };
    // SAFETY: this CPU's slot from a successful lookup (see `context`).
    let seen = unsafe { &mut *seen };
    if *seen != rq_lock {
        *seen = rq_lock;
        insert(rq_lock, LockIdent { kind: kind::RQ_LOCK, aux: 0, cache: 0 });
    }
}

/// Identifies `lock` unless this CPU already did (the hot path: one slot).
/// `slab` says whether this program type may call the slab kfunc.
#[inline(always)]
pub fn identify(cfg: &Config, lock: u64, flags: u32, slab: bool) {
    let Some(slot) = IDENT_SEEN.get_ptr_mut(ident_seen_index(lock)) else { return };
    // SAFETY: this CPU's slot from a successful lookup (see `context`).
    let slot = unsafe { &mut *slot };
    if *slot == lock {
        return;
    }
    *slot = lock;
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let l = &cfg.layout;
    note_rq_lock(l, task);
    let (k, aux) = kind_of(l, lock, flags, task);
    let cache = if slab { kmem_cache_of(cfg, lock) } else { 0 };
    if k == kind::NONE && cache == 0 {
        return;
    }
    match IDENTITIES.get_ptr_mut(lock) {
        Some(e) => {
            // SAFETY: a live entry; concurrent identifiers write the same facts.
            let e = unsafe { &mut *e };
            if k != kind::NONE {
                e.kind = k;
                e.aux = aux;
            }
            if cache != 0 {
                e.cache = cache;
            }
        }
        None => insert(lock, LockIdent { kind: k, aux, cache }),
    }
}
