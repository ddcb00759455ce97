//! What the root-only test files share: the CI switch and the one place
//! that decides, saying why, whether a kernel test can run here.

/// Whether this is CI (`CI=true`): then a missing privilege or feature is a
/// failure, never a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `true` if `test` can run; otherwise prints `reason` (fails in CI).
pub fn ready_unless(test: &str, reason: Option<String>) -> bool {
    match reason {
        None => true,
        Some(r) if in_ci() => panic!("{test}: CI=true but {r}"),
        Some(r) => {
            eprintln!("skipping test {test} - {r}");
            false
        }
    }
}

/// Why the lock tracepoints cannot be traced here, if they cannot.
pub fn tracepoints_missing() -> Option<String> {
    if !lockprof::ebpf::check_privileges().can_trace() {
        Some("needs root (CAP_BPF and CAP_PERFMON)".to_string())
    } else if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
        && !std::path::Path::new("/sys/kernel/tracing/events/lock/contention_begin").exists()
        && !std::path::Path::new("/sys/kernel/debug/tracing/events/lock/contention_begin").exists()
    {
        Some("kernel has neither BTF nor the lock:contention_* tracepoints".to_string())
    } else {
        None
    }
}
