//! The field a lock is inside an object: from the struct type a slab cache
//! holds and the lock's offset in the object, the member path BTF gives
//! (`task_struct.pi_lock`, `ext4_inode_info.vfs_inode.i_rwsem`).

use super::types::{Ty, Types};

/// Lock types, by struct or typedef name: a path ends at a member of one.
const LOCK_TYPES: &[&str] = &[
    "mutex",
    "rw_semaphore",
    "spinlock",
    "raw_spinlock",
    "spinlock_t",
    "raw_spinlock_t",
    "rwlock_t",
    "seqlock_t",
    "rt_mutex",
    "rt_mutex_base",
    "percpu_rw_semaphore",
    "ww_mutex",
];

/// Caches whose name is not their struct's (or its name plus `_cache`).
const CACHE_STRUCTS: &[(&str, &str)] = &[
    ("sighand_cache", "sighand_struct"),
    ("signal_cache", "signal_struct"),
    ("files_cache", "files_struct"),
    ("fs_cache", "fs_struct"),
    ("cred_jar", "cred"),
    ("inode_cache", "inode"),
    ("ext4_inode_cache", "ext4_inode_info"),
    ("shmem_inode_cache", "shmem_inode_info"),
    ("proc_inode_cache", "proc_inode"),
    ("sock_inode_cache", "socket_alloc"),
    ("eventpoll_epi", "epitem"),
    ("TCP", "tcp_sock"),
    ("UDP", "udp_sock"),
    ("UNIX", "unix_sock"),
];

/// The struct a slab cache holds, when one type does and BTF describes it
/// (generic `kmalloc-*` caches hold anything). Objects may be larger than
/// the struct (`task_struct` ends in the FPU state, `mm_struct` in a CPU
/// mask), never smaller, and not of another size class altogether.
pub fn slab_struct<'a>(t: &Types<'_>, cache: &'a str, object_size: u32) -> Option<&'a str> {
    if cache.starts_with("kmalloc-") || cache.contains("-kmalloc-") || cache.starts_with("dma-kmalloc") {
        return None;
    }
    let candidates = CACHE_STRUCTS
        .iter()
        .filter(|(c, _)| *c == cache)
        .map(|(_, s)| *s)
        .chain([cache, cache.strip_suffix("_cache").unwrap_or(cache)]);
    for name in candidates {
        // A merged cache can carry another type's name: the sizes must fit.
        if let Ok(size) = t.struct_size(name)
            && size > 0
            && object_size >= size
            && object_size <= 2 * size + 4096
        {
            return Some(name);
        }
    }
    None
}

/// Whether type `id` (before following typedefs) is a lock type.
fn is_lock(t: &Types<'_>, mut id: u32) -> bool {
    for _ in 0..16 {
        match t.types.get(id as usize) {
            Some(Ty::Typedef { name_off, target }) => {
                if LOCK_TYPES.iter().any(|l| l.as_bytes() == t.name(*name_off)) {
                    return true;
                }
                id = *target;
            }
            Some(Ty::Ref(next)) => id = *next,
            Some(Ty::Composite { name_off, .. }) => {
                return LOCK_TYPES.iter().any(|l| l.as_bytes() == t.name(*name_off));
            }
            _ => return false,
        }
    }
    false
}

/// The member path of the lock at byte `offset` in type `id`.
fn path_in(t: &Types<'_>, id: u32, offset: u32, depth: u32) -> Option<String> {
    if depth > 12 {
        return None;
    }
    match t.resolve(id)? {
        Ty::Composite { members, .. } => members.iter().find_map(|m| {
            if m.bit_offset % 8 != 0 {
                return None;
            }
            let start = m.bit_offset / 8;
            let size = t.size_of(m.type_id)?;
            if offset < start || offset >= start + size {
                return None;
            }
            let name = String::from_utf8_lossy(t.name(m.name_off)).into_owned();
            if offset == start && is_lock(t, m.type_id) {
                return (!name.is_empty()).then_some(name);
            }
            let inner = path_in(t, m.type_id, offset - start, depth + 1)?;
            Some(if name.is_empty() {
                inner
            } else if inner.starts_with('[') {
                format!("{name}{inner}")
            } else {
                format!("{name}.{inner}")
            })
        }),
        Ty::Array { elem, nelems } => {
            let size = t.size_of(*elem)?;
            let idx = offset.checked_div(size)?;
            if idx >= *nelems {
                return None;
            }
            let inner = path_in(t, *elem, offset - idx * size, depth + 1)?;
            Some(format!("[{idx}].{inner}"))
        }
        _ => None,
    }
}

/// `struct_name.member.path` of the lock at byte `offset` of a `struct_name`
/// object, if a lock-typed member starts exactly there.
pub fn field_path(t: &Types<'_>, struct_name: &str, offset: u32) -> Option<String> {
    let id = t
        .types
        .iter()
        .position(|ty| matches!(ty, Ty::Composite { name_off, .. } if t.name(*name_off) == struct_name.as_bytes()))?;
    path_in(t, id as u32, offset, 0).map(|p| format!("{struct_name}.{p}"))
}

#[cfg(test)]
mod tests {
    use super::{super::types::build::Blob, *};

    /// `struct inode { long x; struct rw_semaphore i_rwsem; }` inside
    /// `struct ext4_inode_info { int a; struct inode vfs_inode; }`, a task
    /// with a `spinlock_t pi_lock` behind a typedef and an int at another
    /// offset, and a node with an array of zones holding a lock.
    fn blob() -> Vec<u8> {
        let mut b = Blob::new();
        let int = b.int("int", 4);
        let long = b.int("long", 8);
        let rwsem = b.composite(false, "rw_semaphore", 40, &[("count", long, 0)]);
        let inode = b.composite(false, "inode", 48, &[("x", long, 0), ("i_rwsem", rwsem, 8)]);
        b.composite(false, "ext4_inode_info", 56, &[("a", int, 0), ("vfs_inode", inode, 8)]);
        let raw = b.composite(false, "spinlock", 4, &[("val", int, 0)]);
        let spinlock_t = b.typedef("spinlock_t", raw);
        let anon = b.composite(false, "", 8, &[("pi_lock", spinlock_t, 0), ("other", int, 4)]);
        b.composite(false, "task_struct", 16, &[("state", long, 0), ("", anon, 8)]);
        let zone = b.composite(false, "zone", 16, &[("pad", long, 0), ("lock", spinlock_t, 8)]);
        let zones = b.array(zone, 3);
        b.composite(false, "pglist_data", 56, &[("id", long, 0), ("node_zones", zones, 8)]);
        b.build()
    }

    #[test]
    fn paths_end_at_lock_members_through_nesting_typedefs_and_arrays() {
        let blob = blob();
        let t = Types::parse(&blob).expect("parse");
        assert_eq!(field_path(&t, "ext4_inode_info", 16).as_deref(), Some("ext4_inode_info.vfs_inode.i_rwsem"));
        assert_eq!(
            field_path(&t, "task_struct", 8).as_deref(),
            Some("task_struct.pi_lock"),
            "anonymous struct skipped"
        );
        assert_eq!(field_path(&t, "pglist_data", 8 + 16 + 8).as_deref(), Some("pglist_data.node_zones[1].lock"));
        assert_eq!(field_path(&t, "task_struct", 12), None, "an int is not a lock");
        assert_eq!(field_path(&t, "ext4_inode_info", 20), None, "inside a lock, not at its start");
        assert_eq!(field_path(&t, "pglist_data", 8 + 3 * 16 + 8), None, "past the array");
        assert_eq!(field_path(&t, "mm_struct", 0), None);
    }

    #[test]
    fn caches_map_to_their_struct_only_when_sizes_agree() {
        let blob = blob();
        let t = Types::parse(&blob).expect("parse");
        assert_eq!(slab_struct(&t, "ext4_inode_cache", 56), Some("ext4_inode_info"));
        assert_eq!(slab_struct(&t, "task_struct", 16), Some("task_struct"));
        assert_eq!(slab_struct(&t, "inode_cache", 48), Some("inode"));
        assert_eq!(slab_struct(&t, "task_struct", 16 + 2560), Some("task_struct"), "a trailing variable part");
        assert_eq!(slab_struct(&t, "task_struct", 8), None, "objects are never smaller than their struct");
        assert_eq!(slab_struct(&t, "task_struct", 65536), None, "a merged cache of another size class");
        assert_eq!(slab_struct(&t, "kmalloc-cg-192", 192), None);
        assert_eq!(slab_struct(&t, "dma-kmalloc-64", 64), None);
    }
}
