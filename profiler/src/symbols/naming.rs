//! Naming locks: kallsyms data symbols first, then inference from callers.

use profiler_common::{LockMode, LockType};

use super::{Kallsyms, caller::base_name};
use crate::model::{NameSource, type_name};

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

/// A lock's name, its provenance, and a caller-derived class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockName {
    /// Symbolic name, if any.
    pub name: Option<String>,
    /// Where the name came from.
    pub source: Option<NameSource>,
    /// `type @ top caller function`, always present.
    pub class: String,
}

/// Share of the contentions coming from a known caller set above which the
/// lock is named after that set.
const INFER_SHARE: f64 = 0.5;

/// Share of the contentions with a known call site that come from `set`
/// (placeholders such as "[stack not captured ...]" are left out).
fn share(callers: &[(String, u64)], set: &[&str]) -> f64 {
    let total: u64 = callers.iter().filter(|(f, _)| !f.starts_with('[')).map(|(_, n)| n).sum();
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

/// Names a lock. `callers` holds (caller function name, contentions), any
/// order; `rt_base` is what a PREEMPT_RT lock is underneath, if known.
pub fn name_lock(
    addr: u64,
    ty: LockType,
    _mode: LockMode,
    rt_base: Option<&str>,
    callers: &[(String, u64)],
    ks: &Kallsyms,
) -> LockName {
    // Placeholders such as "[stack not captured ...]" are not call sites.
    let top = callers
        .iter()
        .filter(|(f, _)| !f.starts_with('['))
        .max_by_key(|(f, n)| (*n, std::cmp::Reverse(f.clone())))
        .map(|(f, _)| base_name(f).to_string());
    let class = match &top {
        Some(f) => format!("{} @ {f}", type_name(ty)),
        None => format!("{} @ {addr:#x}", type_name(ty)),
    };
    if let Some(sym) = ks.data_symbol(addr) {
        return LockName { name: Some(sym.to_string()), source: Some(NameSource::Kallsyms), class };
    }
    let inferred = match effective_type(ty, rt_base) {
        LockType::Rwlock if share(callers, TASKLIST_CALLERS) > INFER_SHARE => Some("tasklist_lock"),
        LockType::Rwsem if share(callers, MMAP_LOCK_CALLERS) > INFER_SHARE => Some("mmap_lock"),
        LockType::Rwsem if share(callers, I_RWSEM_CALLERS) > INFER_SHARE => Some("i_rwsem"),
        _ => None,
    };
    LockName { name: inferred.map(str::to_string), source: inferred.map(|_| NameSource::Inferred), class }
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
        let n = name_lock(
            0xffffffff82a00000,
            LockType::Rwlock,
            LockMode::Write,
            None,
            &callers(&[("copy_process", 3)]),
            &ks,
        );
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        assert_eq!(n.source, Some(NameSource::Kallsyms));
        assert_eq!(n.class, "rwlock @ copy_process");
    }

    #[test]
    fn tasklist_lock_is_inferred_from_fork_exit_callers() {
        let ks = Kallsyms::default();
        let c = callers(&[("copy_process", 40), ("release_task", 30), ("__do_wait.isra.0", 20), ("other_fn", 5)]);
        let n = name_lock(0xffff888000001000, LockType::Rwlock, LockMode::Write, None, &c, &ks);
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        assert_eq!(n.source, Some(NameSource::Inferred));
        assert_eq!(n.class, "rwlock @ copy_process");
    }

    #[test]
    fn same_callers_on_a_mutex_are_not_tasklist_lock() {
        let c = callers(&[("copy_process", 40)]);
        let n = name_lock(0x1000, LockType::Mutex, LockMode::Exclusive, None, &c, &Kallsyms::default());
        assert_eq!(n.name, None);
        assert_eq!(n.source, None);
        assert_eq!(n.class, "mutex @ copy_process");
    }

    #[test]
    fn minority_tasklist_callers_do_not_name_the_lock() {
        let c = callers(&[("copy_process", 1), ("some_driver_fn", 9)]);
        let n = name_lock(0x1000, LockType::Rwlock, LockMode::Read, None, &c, &Kallsyms::default());
        assert_eq!(n.name, None);
        assert_eq!(n.class, "rwlock @ some_driver_fn");
    }

    #[test]
    fn pipe_mutex_gets_a_caller_class() {
        let c = callers(&[("anon_pipe_write", 100), ("anon_pipe_read", 7)]);
        let n = name_lock(0xffff0000, LockType::Mutex, LockMode::Exclusive, None, &c, &Kallsyms::default());
        assert_eq!(n.name, None);
        assert_eq!(n.class, "mutex @ anon_pipe_write");
    }

    #[test]
    fn unlink_storm_rwsem_is_i_rwsem() {
        let c = callers(&[("do_unlinkat", 50), ("open_last_lookups", 50)]);
        let n = name_lock(0x2000, LockType::Rwsem, LockMode::Write, None, &c, &Kallsyms::default());
        assert_eq!(n.name.as_deref(), Some("i_rwsem"));
        assert_eq!(n.source, Some(NameSource::Inferred));
    }

    #[test]
    fn placeholders_do_not_dilute_the_inference() {
        let c = callers(&[("[stack not captured: --stack-rate budget spent]", 900), ("__do_sys_setpgid", 100)]);
        let n = name_lock(0x1000, LockType::Rwlock, LockMode::Write, None, &c, &Kallsyms::default());
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
    }

    #[test]
    fn placeholders_never_name_the_class() {
        let c = callers(&[("[stack not captured: --stack-rate budget spent]", 100), ("__task_rq_lock", 3)]);
        let n = name_lock(0xabc, LockType::Spinlock, LockMode::Exclusive, None, &c, &Kallsyms::default());
        assert_eq!(n.class, "spinlock @ __task_rq_lock");
    }

    #[test]
    fn rt_locks_are_named_like_what_they_are_underneath() {
        let c = callers(&[("__do_sys_setpgid", 40), ("copy_process", 20)]);
        let n = name_lock(0x1000, LockType::RwlockRt, LockMode::Write, Some("rwlock"), &c, &Kallsyms::default());
        assert_eq!(n.name.as_deref(), Some("tasklist_lock"));
        let n = name_lock(0x1000, LockType::RwlockRt, LockMode::Write, Some("rwsem"), &c, &Kallsyms::default());
        assert_eq!(n.name, None, "an rwsem is not tasklist_lock");
        let c = callers(&[("lock_mm_and_find_vma", 40)]);
        let n = name_lock(0x2000, LockType::RwlockRt, LockMode::Read, Some("rwsem"), &c, &Kallsyms::default());
        assert_eq!(n.name.as_deref(), Some("mmap_lock"));
    }

    #[test]
    fn no_callers_falls_back_to_address() {
        let n = name_lock(0xabc, LockType::Spinlock, LockMode::Exclusive, None, &[], &Kallsyms::default());
        assert_eq!(n.class, "spinlock @ 0xabc");
    }
}
