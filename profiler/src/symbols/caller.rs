//! Which stack frame is "the caller": the first one outside locking internals.

use super::Kallsyms;

/// Exact function names that are part of the locking or tracing machinery.
const INTERNAL_NAMES: &[&str] = &[
    "osq_lock",
    "schedule",
    "schedule_preempt_disabled",
    "schedule_timeout",
    "io_schedule",
    "lock_acquire",
    "trace_call_bpf",
    "kvm_wait",
];

/// Names of the kernel's kretprobe trampoline (where a kretprobe parks a
/// probed function's return), by kernel version.
pub const KRETPROBE_TRAMPOLINES: &[&str] =
    &["arch_rethook_trampoline", "__kretprobe_trampoline", "kretprobe_trampoline"];

/// Prefixes of locking, scheduling and tracing internals.
const INTERNAL_PREFIXES: &[&str] = &[
    // BPF and tracing trampolines (tp_btf stacks start with these).
    "bpf_prog_",
    "bpf_trampoline",
    "bpf_trace_run",
    "__bpf_trace_",
    "__bpf_prog_",
    "__traceiter_",
    "__trace_",
    "perf_trace_",
    "trace_contention_",
    // Slowpaths and lock entry points.
    "_raw_spin_",
    "_raw_read_",
    "_raw_write_",
    "do_raw_",
    "queued_spin_",
    "queued_read_",
    "queued_write_",
    "__pv_queued_",
    "native_queued_",
    "pv_queued_",
    "mutex_lock",
    "__mutex_lock",
    "mutex_trylock",
    "ww_mutex_lock",
    "__ww_mutex_lock",
    "down_read",
    "down_write",
    "__down_read",
    "__down_write",
    "rwsem_",
    "__rwsem_",
    "percpu_down_",
    "__percpu_down_",
    "percpu_rwsem_",
    "rt_mutex_",
    "__rt_mutex_",
    "rt_spin_",
    "rtlock_",
    "rwbase_",
    "rt_read_",
    "rt_write_",
    "__lock_acquire",
    "preempt_schedule",
    "__schedule",
];

/// Strips compiler suffixes such as `.isra.0`, `.constprop.0`, `.cold`.
pub(crate) fn base_name(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// Whether a function (by name) belongs to the locking/tracing internals.
pub fn is_lock_internal(name: &str) -> bool {
    let name = base_name(name);
    INTERNAL_NAMES.contains(&name)
        || KRETPROBE_TRAMPOLINES.contains(&name)
        || INTERNAL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether a frame is tracing machinery that precedes the real stack (tp_btf).
pub(crate) fn is_trace_frame(name: &str) -> bool {
    let name = base_name(name);
    ["bpf_prog_", "bpf_trampoline", "bpf_trace_run", "__bpf_trace_", "__traceiter_", "perf_trace_", "trace_call_bpf"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Function name of a symbolized frame (`name.isra.0+0x1f [mod]` -> `name`).
pub fn frame_fn(frame: &str) -> &str {
    base_name(frame.split(['+', ' ']).next().unwrap_or(frame))
}

/// Index of `yield_to`'s caller in symbolized frames (innermost first): the
/// frame after `yield_to`, or the first frame when `yield_to` itself is not on
/// the stack (fentry trampolines can hide it).
pub fn yield_caller_index(frames: &[String]) -> Option<usize> {
    match frames.iter().position(|f| frame_fn(f) == "yield_to") {
        Some(i) => (i + 1 < frames.len()).then_some(i + 1),
        None => (!frames.is_empty()).then_some(0),
    }
}

/// What a PREEMPT_RT lock (`rt-mutex`, `rwlock-rt`: the tracepoints' RT
/// flag hides the API) is underneath, told by the locking functions on a
/// waiter's stack (symbolized frames, innermost first): `rt_read_lock` /
/// `rt_write_lock` make an rwlock_t, `rt_spin_lock` / `rtlock_*` a
/// spinlock_t, `rt_mutex_lock*` an rt_mutex, `down_*` / `rwbase_*` an
/// rw_semaphore, and `rt_mutex_slowlock` without any of those a mutex (its
/// API entry is often a tail call that leaves no frame).
pub fn rt_base(frames: &[String]) -> Option<&'static str> {
    let fns: Vec<&str> = frames.iter().map(|f| frame_fn(f)).collect();
    let any = |pred: &dyn Fn(&str) -> bool| fns.iter().any(|f| pred(f));
    if any(&|f| f.starts_with("rt_read_lock") || f.starts_with("rt_write_lock")) {
        Some("rwlock")
    } else if any(&|f| f.starts_with("rt_spin_lock") || f.starts_with("rtlock_")) {
        Some("spinlock")
    } else if any(&|f| f.starts_with("rt_mutex_lock")) {
        Some("rt_mutex")
    } else if any(&|f| {
        f.starts_with("down_read") || f.starts_with("down_write") || f.starts_with("__down_") || f.contains("rwbase_")
    }) {
        Some("rwsem")
    } else if any(&|f| {
        f.starts_with("mutex_lock") || f.starts_with("__mutex_lock") || f.starts_with("rt_mutex_slowlock")
    }) {
        Some("mutex")
    } else {
        None
    }
}

/// Index of the caller in `frames` (innermost first): the first frame that is
/// neither in `__lock_text`/`__sched_text` nor a known internal. `None` when
/// every frame is internal or unknown.
pub fn select_caller(frames: &[u64], ks: &Kallsyms) -> Option<usize> {
    frames.iter().position(|&ip| {
        if ks.in_lock_or_sched_text(ip) {
            return false;
        }
        match ks.lookup(ip) {
            Some((sym, _)) => !is_lock_internal(&sym.name),
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KS: &str = "\
ffffffff81100000 T bpf_trace_run2
ffffffff81101000 T __bpf_trace_contention_begin
ffffffff81200000 T __mutex_lock.constprop.0
ffffffff81300000 T mutex_lock
ffffffff816e4c40 t anon_pipe_write
ffffffff816e5000 T vfs_write
ffffffff8135d6d0 T copy_process
ffffffff8226e870 T __lock_text_start
ffffffff8226fb60 T queued_write_lock_slowpath
ffffffff8226fc00 T _raw_write_lock_irq
ffffffff822702f1 T __lock_text_end
ffffffffa0000000 t bpf_prog_6deef7357e7b4530_contention_begin_btf\t[bpf]
";

    fn ks() -> Kallsyms {
        Kallsyms::parse(KS.as_bytes()).expect("parse")
    }

    #[test]
    fn tp_btf_pipe_stack_selects_anon_pipe_write() {
        // bpf_prog -> bpf_trace_run2 -> __mutex_lock -> mutex_lock -> anon_pipe_write -> vfs_write
        let frames = [
            0xffffffffa0000010,
            0xffffffff81100020,
            0xffffffff81200100,
            0xffffffff81300010,
            0xffffffff816e4c80,
            0xffffffff816e5010,
        ];
        let i = select_caller(&frames, &ks()).expect("caller");
        assert_eq!(ks().format(frames[i]), "anon_pipe_write+0x40");
    }

    #[test]
    fn lock_text_frames_are_skipped_by_address() {
        // queued_write_lock_slowpath (lock text) -> _raw_write_lock_irq (lock text) -> copy_process
        let frames = [0xffffffff8226fb70, 0xffffffff8226fc10, 0xffffffff8135d700];
        assert_eq!(select_caller(&frames, &ks()), Some(2));
    }

    #[test]
    fn all_internal_or_unknown_gives_none() {
        assert_eq!(select_caller(&[0xffffffff8226fb70, 0x10], &ks()), None);
        assert_eq!(select_caller(&[], &ks()), None);
    }

    #[test]
    fn yield_caller_is_the_frame_after_yield_to() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let kvm = f(&["yield_to+0x5", "kvm_vcpu_yield_to+0x5f [kvm]", "kvm_sched_yield+0x8a [kvm]"]);
        assert_eq!(yield_caller_index(&kvm), Some(1));
        assert_eq!(frame_fn(&kvm[1]), "kvm_vcpu_yield_to");
        assert_eq!(yield_caller_index(&f(&["kvm_vcpu_yield_to+0x5f [kvm]"])), Some(0));
        assert_eq!(yield_caller_index(&f(&["yield_to+0x0"])), None);
        assert_eq!(yield_caller_index(&[]), None);
        assert_eq!(frame_fn("do_exit.cold+0x3"), "do_exit");
    }

    #[test]
    fn rt_locks_are_told_apart_by_their_api_frame() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rt_base(&f(&["rwbase_write_lock+0x1", "rt_write_lock+0x20", "__do_sys_setpgid+0x9"])),
            Some("rwlock")
        );
        assert_eq!(
            rt_base(&f(&["__rwbase_read_lock+0x1", "down_read+0x20", "lock_mm_and_find_vma+0x9"])),
            Some("rwsem")
        );
        assert_eq!(
            rt_base(&f(&["rt_mutex_slowlock.constprop.0+0x1", "mutex_lock+0x20", "anon_pipe_write+0x9"])),
            Some("mutex")
        );
        assert_eq!(rt_base(&f(&["rtlock_slowlock_locked+0x1", "rt_spin_lock+0x20"])), Some("spinlock"));
        // mutex_lock tail-calls into the rt_mutex slowpath on RT: no frame of its own.
        assert_eq!(rt_base(&f(&["rt_mutex_slowlock.constprop.0+0x1", "anon_pipe_write+0x9"])), Some("mutex"));
        assert_eq!(rt_base(&f(&["rt_mutex_slowlock.constprop.0+0x1", "rt_mutex_lock+0x9"])), Some("rt_mutex"));
        assert_eq!(rt_base(&f(&["rwbase_write_lock+0x1", "vm_mmap_pgoff+0x9"])), Some("rwsem"));
        assert_eq!(rt_base(&f(&["anon_pipe_write+0x9"])), None);
    }

    #[test]
    fn suffixes_are_ignored_when_matching() {
        assert!(is_lock_internal("__mutex_lock.constprop.0"));
        assert!(is_lock_internal("rwsem_down_write_slowpath"));
        assert!(!is_lock_internal("anon_pipe_write"));
        assert!(!is_lock_internal("do_unlinkat"));
        assert!(is_trace_frame("bpf_prog_abc_contention_begin_btf"));
        assert!(!is_trace_frame("__mutex_lock"));
    }
}
