//! Naming locks, once per address: kallsyms data symbols first, then what
//! the kernel confirmed (per-task, run-queue and zone locks, slab cache and
//! struct member), then inference from callers.

use profiler_common::LockType;

use super::{Kallsyms, caller::base_name};
use crate::model::{NameSource, placeholders::is_placeholder, type_name};

/// Functions that contend on `tasklist_lock` (an rwlock) in fork, exit, wait,
/// ptrace, setpgid and get/setpriority paths.
pub const TASKLIST_CALLERS: &[&str] = &[
    "copy_process",
    "do_exit",
    "exit_notify",
    "release_task",
    "__do_wait",
    "do_wait",
    "wait_task_zombie",
    "wait_consider_task",
    "getpriority",
    "setpriority",
    "__do_sys_getpriority",
    "__do_sys_setpriority",
    "__x64_sys_getpriority",
    "__x64_sys_setpriority",
    // arm64's syscall wrappers, into which the system call's body is inlined.
    "__arm64_sys_getpriority",
    "__arm64_sys_setpriority",
    "__arm64_sys_setpgid",
    "__arm64_sys_kill",
    "__arm64_sys_getsid",
    "__arm64_sys_setsid",
    "exit_ptrace",
    "forget_original_parent",
    "ptrace_attach",
    "__do_sys_setpgid",
    "ksys_setsid",
    "__do_sys_getsid",
    "kill_pgrp",
    "__kill_pgrp_info",
    "kill_something_info",
    "zap_pid_ns_processes",
    "do_notify_parent",
    "session_of_pgrp",
    "will_become_orphaned_pgrp",
    "is_current_pgrp_orphaned",
];

/// Callers of a task's `mmap_lock` (an rwsem).
const MMAP_LOCK_CALLERS: &[&str] = &[
    "lock_mm_and_find_vma",
    "do_user_addr_fault",
    "vm_mmap_pgoff",
    "__vm_munmap",
    "vm_munmap",
    "do_mprotect_pkey",
    "__do_sys_brk",
    "__x64_sys_brk",
    "dup_mmap",
    "exit_mmap",
    "mmap_read_lock_killable",
    "get_user_pages_unlocked",
];

/// Callers of a directory inode's `i_rwsem` (an rwsem) in create/unlink/lookup.
const I_RWSEM_CALLERS: &[&str] = &[
    "open_last_lookups",
    "do_unlinkat",
    "do_rmdir",
    "filename_create",
    "lookup_slow",
    "do_renameat2",
    "lock_rename",
    "path_openat",
    "vfs_unlink",
];

/// Callers of `pidmap_lock` (a global spinlock) when pids are allocated and freed.
const PIDMAP_LOCK_CALLERS: &[&str] = &["alloc_pid", "free_pid", "free_pid_ns", "idr_alloc_cyclic"];

/// Callers of `css_set_lock` (a global spinlock) on fork, exit and cgroup moves.
const CSS_SET_LOCK_CALLERS: &[&str] = &[
    "cgroup_exit",
    "cgroup_post_fork",
    "cgroup_release",
    "cgroup_can_fork",
    "cgroup_migrate_execute",
    "css_set_move_task",
    "put_css_set",
];

/// Callers of a page table's split lock (`ptl`, a spinlock in the page
/// table's `struct ptdesc`, not slab memory).
const PTL_CALLERS: &[&str] =
    &["__pte_offset_map_lock", "pte_offset_map_lock", "pte_offset_map_rw_nolock", "pmd_lock", "__pmd_trans_huge_lock"];

/// A lock's name, its provenance, and a caller-derived class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockName {
    /// Symbolic name, if any.
    pub name: Option<String>,
    /// Where the name came from.
    pub source: Option<NameSource>,
    /// `type @ top caller function`, always present (with `in &cache` when
    /// the slab cache is all the kernel could say).
    pub class: String,
    /// Slab cache of the object holding the lock.
    pub slab: Option<String>,
    /// Member path of the lock in its object's struct.
    pub field: Option<String>,
}

/// What the kernel confirmed about a lock address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelIdentity {
    /// Per-task, run-queue or zone lock (`mmap_lock`, `rq_lock`, `zone_lock`).
    pub kind: Option<String>,
    /// Slab cache of the object holding the lock (`kmalloc-cg-192`).
    pub slab: Option<String>,
    /// Member path in the object's struct (`task_struct.pi_lock`).
    pub field: Option<String>,
}

/// Where kernel-confirmed identities come from (the live kernel's maps, or
/// nothing for tests and recordings).
pub trait Identities: Send {
    /// The identity of `addr`, if the kernel confirmed one.
    fn identity(&mut self, addr: u64) -> Option<KernelIdentity>;
}

/// No kernel identities.
pub struct NoIdentities;

impl Identities for NoIdentities {
    fn identity(&mut self, _addr: u64) -> Option<KernelIdentity> {
        None
    }
}

/// Share of the contentions coming from a known caller set above which the
/// lock is named after that set.
const INFER_SHARE: f64 = 0.5;

/// Share of the contentions with a known call site that come from `set`
/// (placeholders such as "[stack not captured ...]" are left out).
fn share(callers: &[(String, u64)], set: &[&str]) -> f64 {
    let total: u64 = callers.iter().filter(|(f, _)| !is_placeholder(f)).map(|(_, n)| n).sum();
    if total == 0 {
        return 0.0;
    }
    let hit: u64 = callers.iter().filter(|(f, _)| set.contains(&base_name(f))).map(|(_, n)| n).sum();
    hit as f64 / total as f64
}

/// The type whose naming rules apply: a PREEMPT_RT lock is named like what
/// it is underneath (an `rwlock-rt` that is an rwlock_t like an rwlock).
fn effective_type(ty: LockType, rt_base: Option<&str>) -> LockType {
    match (ty, rt_base) {
        (LockType::RwlockRt, Some("rwlock")) => LockType::Rwlock,
        (LockType::RwlockRt, Some("rwsem")) => LockType::Rwsem,
        (LockType::RtMutex, Some("mutex")) => LockType::Mutex,
        (LockType::RtMutex, Some("spinlock")) => LockType::Spinlock,
        (t, _) => t,
    }
}

/// The class of one row of a lock: `type @ top caller`, and the slab cache
/// when that is all the kernel could say about the object.
pub fn lock_class(addr: u64, ty: LockType, callers: &[(String, u64)], ident: Option<&KernelIdentity>) -> String {
    lock_class_by(addr, ty, callers, ident, base_name)
}

/// [`lock_class`] with `short` making a caller's name the class's (kernel
/// functions lose their `.isra.0`-like suffixes; user-space functions, whose
/// names may hold dots, are taken as given).
pub fn lock_class_by(
    addr: u64,
    ty: LockType,
    callers: &[(String, u64)],
    ident: Option<&KernelIdentity>,
    short: fn(&str) -> &str,
) -> String {
    // Placeholders such as "[stack not captured ...]" are not call sites.
    let top = callers
        .iter()
        .filter(|(f, _)| !is_placeholder(f))
        .max_by_key(|(f, n)| (*n, std::cmp::Reverse(f.clone())))
        .map(|(f, _)| short(f).to_string());
    let class = match &top {
        Some(f) => format!("{} @ {f}", type_name(ty)),
        None => format!("{} @ {addr:#x}", type_name(ty)),
    };
    match ident {
        Some(KernelIdentity { kind: None, field: None, slab: Some(slab) }) => format!("{class} in &{slab}"),
        _ => class,
    }
}

/// Names a lock. `callers` holds (caller function name, contentions), any
/// order, of every row of the address; `ty` is its dominant type; `rt_base`
/// is what a PREEMPT_RT lock is underneath, if known; `ident` is what the
/// kernel confirmed.
pub fn name_lock(
    addr: u64,
    ty: LockType,
    rt_base: Option<&str>,
    callers: &[(String, u64)],
    ks: &Kallsyms,
    ident: Option<&KernelIdentity>,
) -> LockName {
    let class = lock_class(addr, ty, callers, ident);
    let slab = ident.and_then(|i| i.slab.clone());
    let field = ident.and_then(|i| i.field.clone());
    let named = |name: String, source| LockName {
        name: Some(name),
        source: Some(source),
        class: class.clone(),
        slab: slab.clone(),
        field: field.clone(),
    };
    if let Some(sym) = ks.data_symbol(addr) {
        return named(sym.to_string(), NameSource::Kallsyms);
    }
    if let Some(i) = ident {
        let kernel = i.kind.clone().or_else(|| i.field.clone()).or_else(|| i.slab.as_ref().map(|s| format!("&{s}")));
        if let Some(n) = kernel {
            return named(n, NameSource::Btf);
        }
    }
    let inferred = match effective_type(ty, rt_base) {
        LockType::Rwlock if share(callers, TASKLIST_CALLERS) > INFER_SHARE => Some("tasklist_lock"),
        LockType::Rwsem if share(callers, MMAP_LOCK_CALLERS) > INFER_SHARE => Some("mmap_lock"),
        LockType::Rwsem if share(callers, I_RWSEM_CALLERS) > INFER_SHARE => Some("i_rwsem"),
        LockType::Spinlock if share(callers, PIDMAP_LOCK_CALLERS) > INFER_SHARE => Some("pidmap_lock"),
        LockType::Spinlock if share(callers, CSS_SET_LOCK_CALLERS) > INFER_SHARE => Some("css_set_lock"),
        LockType::Spinlock if share(callers, PTL_CALLERS) > INFER_SHARE => Some("ptl"),
        _ => None,
    };
    LockName { name: inferred.map(str::to_string), source: inferred.map(|_| NameSource::Inferred), class, slab, field }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn callers(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(f, n)| (f.to_string(), *n)).collect()
    }

    #[test]
    fn kallsyms_data_symbol_wins() {
        let ks = Kallsyms::parse("ffffffff82a00000 D tasklist_lock\n".as_bytes()).expect("parse");
        let n = name_lock(0xffffffff82a00000, LockType::Rwlock, None, &callers(&[("copy_process", 3)]), &ks, None);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        assert_eq!(n.source, Some(NameSource::Kallsyms));
        assert_eq!(n.class, "rwlock @ copy_process");
    }

    #[test]
    fn tasklist_lock_is_inferred_from_fork_exit_callers() {
        let ks = Kallsyms::default();
        let c = callers(&[("copy_process", 40), ("release_task", 30), ("__do_wait.isra.0", 20), ("other_fn", 5)]);
        let n = name_lock(0xffff888000001000, LockType::Rwlock, None, &c, &ks, None);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        assert_eq!(n.source, Some(NameSource::Inferred));
        assert_eq!(n.class, "rwlock @ copy_process");
    }

    #[test]
    fn arm64_syscall_wrappers_name_tasklist_lock() {
        // arm64 6.1: setpgid's body inlined into its wrapper (seen in the guest).
        let c = callers(&[("__arm64_sys_setpgid", 694)]);
        let n = name_lock(0xffff000000001000, LockType::Rwlock, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
    }

    #[test]
    fn same_callers_on_a_mutex_are_not_tasklist_lock() {
        let c = callers(&[("copy_process", 40)]);
        let n = name_lock(0x1000, LockType::Mutex, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name, None);
        assert_eq!(n.source, None);
        assert_eq!(n.class, "mutex @ copy_process");
    }

    #[test]
    fn minority_tasklist_callers_do_not_name_the_lock() {
        let c = callers(&[("copy_process", 1), ("some_driver_fn", 9)]);
        let n = name_lock(0x1000, LockType::Rwlock, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name, None);
        assert_eq!(n.class, "rwlock @ some_driver_fn");
    }

    #[test]
    fn pipe_mutex_gets_a_caller_class() {
        let c = callers(&[("anon_pipe_write", 100), ("anon_pipe_read", 7)]);
        let n = name_lock(0xffff0000, LockType::Mutex, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name, None);
        assert_eq!(n.class, "mutex @ anon_pipe_write");
    }

    #[test]
    fn unlink_storm_rwsem_is_i_rwsem() {
        let c = callers(&[("do_unlinkat", 50), ("open_last_lookups", 50)]);
        let n = name_lock(0x2000, LockType::Rwsem, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name.as_deref(), Some("i_rwsem"));
        assert_eq!(n.source, Some(NameSource::Inferred));
    }

    #[test]
    fn placeholders_do_not_dilute_the_inference() {
        let c = callers(&[("[stack not captured: --stack-rate budget spent]", 900), ("__do_sys_setpgid", 100)]);
        let n = name_lock(0x1000, LockType::Rwlock, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
    }

    #[test]
    fn placeholders_never_name_the_class() {
        let c = callers(&[("[stack not captured: --stack-rate budget spent]", 100), ("__task_rq_lock", 3)]);
        let n = name_lock(0xabc, LockType::Spinlock, None, &c, &Kallsyms::default(), None);
        assert_eq!(n.class, "spinlock @ __task_rq_lock");
    }

    #[test]
    fn rt_locks_are_named_like_what_they_are_underneath() {
        let c = callers(&[("__do_sys_setpgid", 40), ("copy_process", 20)]);
        let n = name_lock(0x1000, LockType::RwlockRt, Some("rwlock"), &c, &Kallsyms::default(), None);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        let n = name_lock(0x1000, LockType::RwlockRt, Some("rwsem"), &c, &Kallsyms::default(), None);
        assert_eq!(n.name, None, "an rwsem is not tasklist_lock");
        let c = callers(&[("lock_mm_and_find_vma", 40)]);
        let n = name_lock(0x2000, LockType::RwlockRt, Some("rwsem"), &c, &Kallsyms::default(), None);
        assert_eq!(n.name.as_deref(), Some("mmap_lock"));
    }

    #[test]
    fn kernel_identities_name_the_lock_and_kmalloc_keeps_the_caller_class() {
        let ks = Kallsyms::default();
        let c = callers(&[("anon_pipe_write", 100)]);
        let kmalloc = KernelIdentity { slab: Some("kmalloc-cg-192".into()), ..KernelIdentity::default() };
        let n = name_lock(0xffff0000, LockType::Mutex, None, &c, &ks, Some(&kmalloc));
        assert_eq!(n.name.as_deref(), Some("&kmalloc-cg-192"));
        assert_eq!(n.source, Some(NameSource::Btf));
        assert_eq!(n.class, "mutex @ anon_pipe_write in &kmalloc-cg-192");
        let field = KernelIdentity {
            slab: Some("task_struct".into()),
            field: Some("task_struct.pi_lock".into()),
            ..KernelIdentity::default()
        };
        let n = name_lock(0xffff1000, LockType::Spinlock, None, &callers(&[("try_to_wake_up", 5)]), &ks, Some(&field));
        assert_eq!(n.name.as_deref(), Some("task_struct.pi_lock"));
        assert_eq!((n.slab.as_deref(), n.field.as_deref()), (Some("task_struct"), Some("task_struct.pi_lock")));
        assert_eq!(n.class, "spinlock @ try_to_wake_up", "a named field needs no cache in the class");
        let mm = KernelIdentity { kind: Some("mmap_lock".into()), ..field.clone() };
        let c = callers(&[("do_exit", 10)]);
        let n = name_lock(0xffff2000, LockType::Rwsem, None, &c, &ks, Some(&mm));
        assert_eq!(n.name.as_deref(), Some("mmap_lock"), "the kind wins over the field path and any inference");
        let ks = Kallsyms::parse("ffff2000 D some_global\n".as_bytes()).expect("parse");
        let n = name_lock(0xffff2000, LockType::Rwsem, None, &c, &ks, Some(&mm));
        assert_eq!(n.source, Some(NameSource::Kallsyms), "an exact data symbol wins");
    }

    #[test]
    fn global_spinlocks_of_the_fork_exit_paths_are_inferred() {
        let ks = Kallsyms::default();
        let n = name_lock(0x1000, LockType::Spinlock, None, &callers(&[("free_pid", 9), ("alloc_pid", 3)]), &ks, None);
        assert_eq!(n.name.as_deref(), Some("pidmap_lock"));
        let n = name_lock(0x2000, LockType::Spinlock, None, &callers(&[("cgroup_exit", 9)]), &ks, None);
        assert_eq!((n.name.as_deref(), n.source), (Some("css_set_lock"), Some(NameSource::Inferred)));
        let n = name_lock(0x2000, LockType::Mutex, None, &callers(&[("cgroup_exit", 9)]), &ks, None);
        assert_eq!(n.name, None, "a mutex is not css_set_lock");
        let n = name_lock(0x3000, LockType::Spinlock, None, &callers(&[("__pte_offset_map_lock", 9)]), &ks, None);
        assert_eq!(n.name.as_deref(), Some("ptl"));
    }

    #[test]
    fn no_callers_falls_back_to_address() {
        let n = name_lock(0xabc, LockType::Spinlock, None, &[], &Kallsyms::default(), None);
        assert_eq!(n.class, "spinlock @ 0xabc");
    }
}
