//! Offsets of kernel structure members the programs read, found in the
//! running kernel's BTF by userspace and written into `Config::layout`.

/// Offset of a member the kernel lacks (the reads that need it are off).
pub const UNKNOWN_OFFSET: u32 = u32::MAX;

/// Member offsets (bytes; [`UNKNOWN_OFFSET`] when this kernel lacks the
/// member) and the few sizes the programs need.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `struct mutex` `owner` (the owner task pointer with flag bits; not on
    /// PREEMPT_RT, whose mutex is an rt_mutex).
    pub mutex_owner: u32,
    /// `task_struct.__state` (`state` before 5.14): tells a mutex's first
    /// optimistic spin (task running) from a woken sleeper's re-spin.
    pub task_state: u32,
    /// `task_struct.mm`.
    pub task_mm: u32,
    /// `task_struct.pi_lock`.
    pub task_pi_lock: u32,
    /// `task_struct.alloc_lock`.
    pub task_alloc_lock: u32,
    /// `task_struct.sighand`.
    pub task_sighand: u32,
    /// `task_struct.signal`.
    pub task_signal: u32,
    /// `task_struct.files`.
    pub task_files: u32,
    /// `task_struct.se.cfs_rq`: the run queue the task is queued on.
    pub task_cfs_rq: u32,
    /// `mm_struct.mmap_lock` (`mmap_sem` before 5.8).
    pub mm_mmap_lock: u32,
    /// `sighand_struct.siglock`.
    pub sighand_siglock: u32,
    /// `signal_struct.cred_guard_mutex`.
    pub signal_cred_guard_mutex: u32,
    /// `signal_struct.exec_update_lock` (`exec_update_mutex` before 5.11).
    pub signal_exec_update_lock: u32,
    /// `files_struct.file_lock`.
    pub files_file_lock: u32,
    /// `cfs_rq.rq` (group scheduling kernels; else the cfs_rq is inside the rq).
    pub cfs_rq_rq: u32,
    /// `rq.cfs` (used when `cfs_rq_rq` is unknown).
    pub rq_cfs: u32,
    /// `rq.__lock` (`lock` before 5.14).
    pub rq_lock: u32,
    /// `zone.lock`.
    pub zone_lock: u32,
    /// `zone.zone_pgdat`.
    pub zone_pgdat: u32,
    /// `pglist_data.node_zones`.
    pub pgdat_node_zones: u32,
    /// `sizeof(struct zone)`.
    pub zone_size: u32,
    /// Elements of `pglist_data.node_zones` (MAX_NR_ZONES).
    pub nr_zones: u32,
    /// `kmem_cache.name`.
    pub cache_name: u32,
    /// `kmem_cache.size` (object stride in its slab).
    pub cache_size: u32,
    /// `kmem_cache.object_size`.
    pub cache_object_size: u32,
    /// `kmem_cache.oo` (order in the high 16 bits).
    pub cache_oo: u32,
    /// `kmem_cache.red_left_pad` (unknown: 0 is assumed).
    pub cache_red_left_pad: u32,
    /// `rw_semaphore.owner` (task pointer with flag bits).
    pub rwsem_owner: u32,
    /// `rw_semaphore.count` (readers above bit 8).
    pub rwsem_count: u32,
    /// `rt_mutex_base.owner` (PREEMPT_RT's mutexes and rwsems' writer side).
    pub rtmutex_owner: u32,
    /// BTF id of `struct mutex` (0: unknown), for `bpf_rdonly_cast`.
    pub btf_mutex: u32,
    /// BTF id of `struct rw_semaphore` (0: unknown).
    pub btf_rwsem: u32,
    /// BTF id of `struct task_struct` (0: unknown).
    pub btf_task: u32,
    /// PREEMPT_RT: `rwbase_rt.readers` within an rwsem or rwlock (their
    /// `rwbase` is the first member of both).
    pub rwbase_readers: u32,
    /// PREEMPT_RT: `rwbase_rt.rtmutex` within an rwsem or rwlock (its owner
    /// is the writer).
    pub rwbase_rtmutex: u32,
    /// `task_struct.real_parent`: a forked child that has not exec'd
    /// shares its parent's memory layout (user stacks are read against the
    /// parent's mappings, which outlive the child).
    pub task_real_parent: u32,
    /// `mm_struct.exe_file` (a child that exec'd has another one).
    pub mm_exe_file: u32,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn` and
    /// `kernfs_node.id`: the current task's cgroup (v2) id read with plain
    /// loads, as `bpf_get_current_cgroup_id` does behind a helper call.
    pub task_cgroups: u32,
    /// `css_set.dfl_cgrp`.
    pub css_set_dfl_cgrp: u32,
    /// `cgroup.kn`.
    pub cgroup_kn: u32,
    /// `kernfs_node.id`.
    pub kernfs_node_id: u32,
    /// `task_struct.nvcsw`: a task's voluntary switches, one more at each
    /// sleep, so (task, count) names one sleep (`--owner-stacks` walks a
    /// sleeping owner's stack once per sleep).
    pub task_nvcsw: u32,
}

impl Layout {
    /// Nothing known.
    pub const UNKNOWN: Layout = Layout {
        mutex_owner: UNKNOWN_OFFSET,
        task_state: UNKNOWN_OFFSET,
        task_mm: UNKNOWN_OFFSET,
        task_pi_lock: UNKNOWN_OFFSET,
        task_alloc_lock: UNKNOWN_OFFSET,
        task_sighand: UNKNOWN_OFFSET,
        task_signal: UNKNOWN_OFFSET,
        task_files: UNKNOWN_OFFSET,
        task_cfs_rq: UNKNOWN_OFFSET,
        mm_mmap_lock: UNKNOWN_OFFSET,
        sighand_siglock: UNKNOWN_OFFSET,
        signal_cred_guard_mutex: UNKNOWN_OFFSET,
        signal_exec_update_lock: UNKNOWN_OFFSET,
        files_file_lock: UNKNOWN_OFFSET,
        cfs_rq_rq: UNKNOWN_OFFSET,
        rq_cfs: UNKNOWN_OFFSET,
        rq_lock: UNKNOWN_OFFSET,
        zone_lock: UNKNOWN_OFFSET,
        zone_pgdat: UNKNOWN_OFFSET,
        pgdat_node_zones: UNKNOWN_OFFSET,
        zone_size: UNKNOWN_OFFSET,
        nr_zones: UNKNOWN_OFFSET,
        cache_name: UNKNOWN_OFFSET,
        cache_size: UNKNOWN_OFFSET,
        cache_object_size: UNKNOWN_OFFSET,
        cache_oo: UNKNOWN_OFFSET,
        cache_red_left_pad: UNKNOWN_OFFSET,
        rwsem_owner: UNKNOWN_OFFSET,
        rwsem_count: UNKNOWN_OFFSET,
        rtmutex_owner: UNKNOWN_OFFSET,
        btf_mutex: 0,
        btf_rwsem: 0,
        btf_task: 0,
        rwbase_readers: UNKNOWN_OFFSET,
        rwbase_rtmutex: UNKNOWN_OFFSET,
        task_real_parent: UNKNOWN_OFFSET,
        mm_exe_file: UNKNOWN_OFFSET,
        task_cgroups: UNKNOWN_OFFSET,
        css_set_dfl_cgrp: UNKNOWN_OFFSET,
        cgroup_kn: UNKNOWN_OFFSET,
        kernfs_node_id: UNKNOWN_OFFSET,
        task_nvcsw: UNKNOWN_OFFSET,
    };
}

impl Default for Layout {
    fn default() -> Self {
        Layout::UNKNOWN
    }
}

/// Whether `off` is a known offset.
#[inline(always)]
pub const fn known(off: u32) -> bool {
    off != UNKNOWN_OFFSET
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_all_u32_and_unknown_by_default() {
        assert_eq!(core::mem::size_of::<Layout>(), 42 * 4);
        assert!(!known(Layout::default().task_mm));
        assert!(known(0));
    }
}
