//! The offsets the programs read, from the running kernel's BTF: the
//! `task_struct` members of yield_to targets and the [`Layout`] of the
//! structures behind lock identities and mutex spins.

use profiler_common::{Layout, TaskOffsets, UNKNOWN_OFFSET, UserRegsLayout};

use super::types::{BtfError, Types};

/// `pid`, `tgid` and `comm` offsets of `struct task_struct`.
pub fn task_offsets(t: &Types<'_>) -> Result<TaskOffsets, BtfError> {
    Ok(TaskOffsets {
        pid: t.member_offset("task_struct", "pid")?,
        tgid: t.member_offset("task_struct", "tgid")?,
        comm: t.member_offset("task_struct", "comm")?,
        _pad: 0,
    })
}

/// The first of `candidates` (member paths of `st`, newest kernels' name
/// first) this kernel has, else [`UNKNOWN_OFFSET`].
fn first(t: &Types<'_>, st: &str, candidates: &[&str]) -> u32 {
    candidates.iter().find_map(|m| t.path_offset(st, m).ok()).unwrap_or(UNKNOWN_OFFSET)
}

/// Whether a `task_struct` begins with an 8-byte integer
/// (`thread_info.flags`, x86_64 and arm64): then the programs may read any
/// kernel stack word through `bpf_rdonly_cast` to `task_struct`
/// ([`profiler_common::STACK_WORDS`]).
pub fn task_starts_with_word(t: &Types<'_>) -> bool {
    t.path_offset("task_struct", "thread_info.flags").ok() == Some(0)
        && t.member_size("thread_info", "flags").ok() == Some(8)
}

/// Offsets of the members the programs read ([`UNKNOWN_OFFSET`] for those
/// this kernel lacks).
pub fn layout(t: &Types<'_>) -> Layout {
    let size = |s: &str| t.struct_size(s).unwrap_or(UNKNOWN_OFFSET);
    Layout {
        mutex_owner: first(t, "mutex", &["owner"]),
        task_state: first(t, "task_struct", &["__state", "state"]),
        task_mm: first(t, "task_struct", &["mm"]),
        task_pi_lock: first(t, "task_struct", &["pi_lock"]),
        task_alloc_lock: first(t, "task_struct", &["alloc_lock"]),
        task_sighand: first(t, "task_struct", &["sighand"]),
        task_signal: first(t, "task_struct", &["signal"]),
        task_files: first(t, "task_struct", &["files"]),
        task_cfs_rq: first(t, "task_struct", &["se.cfs_rq"]),
        mm_mmap_lock: first(t, "mm_struct", &["mmap_lock", "mmap_sem"]),
        sighand_siglock: first(t, "sighand_struct", &["siglock"]),
        signal_cred_guard_mutex: first(t, "signal_struct", &["cred_guard_mutex"]),
        signal_exec_update_lock: first(t, "signal_struct", &["exec_update_lock", "exec_update_mutex"]),
        files_file_lock: first(t, "files_struct", &["file_lock"]),
        cfs_rq_rq: first(t, "cfs_rq", &["rq"]),
        rq_cfs: first(t, "rq", &["cfs"]),
        rq_lock: first(t, "rq", &["__lock", "lock"]),
        zone_lock: first(t, "zone", &["lock"]),
        zone_pgdat: first(t, "zone", &["zone_pgdat"]),
        pgdat_node_zones: first(t, "pglist_data", &["node_zones"]),
        zone_size: size("zone"),
        nr_zones: t.array_len("pglist_data", "node_zones").unwrap_or(UNKNOWN_OFFSET),
        cache_name: first(t, "kmem_cache", &["name"]),
        cache_size: first(t, "kmem_cache", &["size"]),
        cache_object_size: first(t, "kmem_cache", &["object_size"]),
        cache_oo: first(t, "kmem_cache", &["oo"]),
        cache_red_left_pad: first(t, "kmem_cache", &["red_left_pad"]),
        rwsem_owner: first(t, "rw_semaphore", &["owner"]),
        rwsem_count: first(t, "rw_semaphore", &["count"]),
        rtmutex_owner: first(t, "rt_mutex_base", &["owner"]),
        btf_mutex: t.struct_id("mutex"),
        btf_rwsem: t.struct_id("rw_semaphore"),
        btf_task: t.struct_id("task_struct"),
        rwbase_readers: first(t, "rw_semaphore", &["rwbase.readers"]),
        rwbase_rtmutex: first(t, "rw_semaphore", &["rwbase.rtmutex"]),
        task_real_parent: first(t, "task_struct", &["real_parent"]),
        mm_exe_file: first(t, "mm_struct", &["exe_file"]),
        task_cgroups: first(t, "task_struct", &["cgroups"]),
        css_set_dfl_cgrp: first(t, "css_set", &["dfl_cgrp"]),
        cgroup_kn: first(t, "cgroup", &["kn"]),
        kernfs_node_id: first(t, "kernfs_node", &["id"]),
        task_nvcsw: first(t, "task_struct", &["nvcsw"]),
    }
}

/// The kernel stack's size (`THREAD_SIZE`) on the architectures lockprof
/// runs on: 16 KiB on x86_64 and arm64 (kernels built with KASAN double it;
/// the programs then find no user state where they look and take no copy).
const THREAD_SIZE: u32 = 16 << 10;

/// Where a task's user registers are ([`UserRegsLayout`]).
pub fn user_regs_layout(t: &Types<'_>) -> UserRegsLayout {
    UserRegsLayout {
        task_stack: first(t, "task_struct", &["stack"]),
        stack_user_regs: t.struct_size("pt_regs").map_or(UNKNOWN_OFFSET, |size| THREAD_SIZE.saturating_sub(size)),
    }
}

/// The running kernel's BTF blob.
pub fn kernel_blob() -> Result<Vec<u8>, BtfError> {
    std::fs::read("/sys/kernel/btf/vmlinux").map_err(|e| BtfError::Io(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{super::types::build::Blob, *};

    #[test]
    fn old_member_names_are_found_when_new_ones_are_missing() {
        let mut b = Blob::new();
        let int = b.int("int", 4);
        let long = b.int("long", 8);
        b.composite(false, "task_struct", 64, &[("state", long, 0), ("pid", int, 8), ("tgid", int, 12)]);
        b.composite(false, "mm_struct", 64, &[("x", long, 0), ("mmap_sem", long, 40)]);
        b.composite(false, "rq", 256, &[("lock", int, 0), ("cfs", long, 64)]);
        let blob = b.build();
        let t = Types::parse(&blob).expect("parse");
        let l = layout(&t);
        assert_eq!((l.task_state, l.mm_mmap_lock, l.rq_lock, l.rq_cfs), (0, 40, 0, 64));
        assert_eq!(l.cfs_rq_rq, UNKNOWN_OFFSET, "no group scheduling: the cfs_rq is inside the rq");
        assert_eq!(l.task_mm, UNKNOWN_OFFSET);
        assert_eq!(l.zone_size, UNKNOWN_OFFSET);
        assert!(task_offsets(&t).is_err(), "no comm member");
    }

    #[test]
    fn reads_the_running_kernel_when_it_has_btf() {
        let Ok(blob) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("skipped: no /sys/kernel/btf/vmlinux on this machine");
            return;
        };
        let t = Types::parse(&blob).expect("parse the kernel BTF");
        let o = task_offsets(&t).expect("task_struct offsets from the kernel BTF");
        // pid and tgid are adjacent pid_t members; comm lies after them.
        assert_eq!(o.tgid, o.pid + 4);
        assert!(o.comm > o.tgid && o.pid > 0);
        let l = layout(&t);
        for (name, off) in
            [("task_struct.mm", l.task_mm), ("mm_struct.mmap_lock", l.mm_mmap_lock), ("rq lock", l.rq_lock)]
        {
            assert_ne!(off, UNKNOWN_OFFSET, "{name} missing from the kernel BTF");
        }
    }
}
