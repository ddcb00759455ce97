//! Lock identities the programs confirm against kernel structures when a
//! lock address is first seen on a CPU (`IDENTITIES` map), and the records
//! of the `kmem_cache` iterator that name slab caches.

/// What a lock address was confirmed to be (`LockIdent::kind`).
pub mod kind {
    /// Nothing confirmed.
    pub const NONE: u32 = 0;
    /// `&current->mm->mmap_lock`.
    pub const MMAP_LOCK: u32 = 1;
    /// `&current->sighand->siglock`.
    pub const SIGLOCK: u32 = 2;
    /// `&current->pi_lock`.
    pub const PI_LOCK: u32 = 3;
    /// `&current->alloc_lock` (task_lock()).
    pub const ALLOC_LOCK: u32 = 4;
    /// `&current->signal->cred_guard_mutex`.
    pub const CRED_GUARD_MUTEX: u32 = 5;
    /// `&current->signal->exec_update_lock`.
    pub const EXEC_UPDATE_LOCK: u32 = 6;
    /// `&current->files->file_lock`.
    pub const FILE_LOCK: u32 = 7;
    /// A run queue's lock (`rq->__lock`); `aux` is unused.
    pub const RQ_LOCK: u32 = 8;
    /// A memory zone's lock (`zone->lock`); `aux` is the zone index in its node.
    pub const ZONE_LOCK: u32 = 9;
    /// Number of kinds.
    pub const COUNT: u32 = 10;

    /// Names, indexed by kind (lock_stat-style short names).
    pub const NAMES: [&str; COUNT as usize] = [
        "",
        "mmap_lock",
        "siglock",
        "pi_lock",
        "alloc_lock",
        "cred_guard_mutex",
        "exec_update_lock",
        "file_lock",
        "rq_lock",
        "zone_lock",
    ];
}

/// Value of the `IDENTITIES` map (keyed by lock address).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockIdent {
    /// [`kind`] constant.
    pub kind: u32,
    /// Kind-specific detail (zone index).
    pub aux: u32,
    /// The `struct kmem_cache` the address lies in (0: not slab memory, or
    /// the kernel cannot say).
    pub cache: u64,
}

/// Entries of the `IDENTITIES` map.
pub const IDENT_ENTRIES: u32 = 16_384;
/// Slots of the per-CPU `IDENT_SEEN` array: the last lock address identified
/// per slot, so a lock is identified once per CPU, not per contention.
pub const IDENT_SEEN_SLOTS: u32 = 256;

/// Slot of `lock` in `IDENT_SEEN`.
#[inline(always)]
pub const fn ident_seen_index(lock: u64) -> u32 {
    // Locks are at least 4-byte aligned; mix the bits above that.
    ((lock >> 3) ^ (lock >> 11) ^ (lock >> 19)) as u32 & (IDENT_SEEN_SLOTS - 1)
}

/// Placeholder helper id of `bpf_get_kmem_cache` in the eBPF object: the
/// loader rewrites these calls into kfunc calls bound to the kernel's BTF id
/// (aya 0.14 has no kfunc support), and the programs only reach them when
/// `Config::kfuncs` says the binding happened.
pub const KFUNC_CALL_GET_KMEM_CACHE: u32 = 0x7ff0_0001;
/// Placeholder helper id of `bpf_rdonly_cast(void *obj, u32 btf_id)`.
pub const KFUNC_CALL_RDONLY_CAST: u32 = 0x7ff0_0002;
/// Placeholder helper id of `bpf_task_from_pid(s32 pid)` (a task reference).
pub const KFUNC_CALL_TASK_FROM_PID: u32 = 0x7ff0_0003;
/// Placeholder helper id of `bpf_task_release(struct task_struct *)`.
pub const KFUNC_CALL_TASK_RELEASE: u32 = 0x7ff0_0004;

/// Bytes of a slab cache name in a [`SlabRecord`].
pub const SLAB_NAME_LEN: usize = 40;

/// One slab cache, written by the `kmem_cache` iterator program.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SlabRecord {
    /// Address of the `struct kmem_cache`.
    pub cache: u64,
    /// Object stride in its slabs.
    pub size: u32,
    /// Object size.
    pub object_size: u32,
    /// Slab page order.
    pub order: u32,
    /// Red zone before each object (debug caches).
    pub red_left_pad: u32,
    /// NUL-terminated name.
    pub name: [u8; SLAB_NAME_LEN],
}

impl Default for SlabRecord {
    fn default() -> Self {
        SlabRecord { cache: 0, size: 0, object_size: 0, order: 0, red_left_pad: 0, name: [0; SLAB_NAME_LEN] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_names() {
        assert_eq!(core::mem::size_of::<LockIdent>(), 16);
        assert_eq!(core::mem::size_of::<SlabRecord>(), 64);
        assert_eq!(kind::NAMES[kind::RQ_LOCK as usize], "rq_lock");
        assert!(IDENT_SEEN_SLOTS.is_power_of_two());
        assert!(ident_seen_index(u64::MAX) < IDENT_SEEN_SLOTS);
        assert_ne!(ident_seen_index(0xffff_8881_0000_1040), ident_seen_index(0xffff_8881_0000_1048));
    }
}
