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

/// The first of `tools` (a program and the Debian package that has it) not
/// installed here, said as a reason to skip.
#[allow(dead_code)] // not every test file needs a tool
pub fn tools_missing(tools: &[(&str, &str)]) -> Option<String> {
    let have = |bin: &str| {
        std::process::Command::new(bin)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok()
    };
    tools
        .iter()
        .find(|(bin, _)| !have(bin))
        .map(|(bin, pkg)| format!("needs {bin} (Debian's {pkg}; cargo xtask setup installs it)"))
}

/// `go tool pprof <view> <profile>`'s output, after checking it succeeded.
#[allow(dead_code)] // only the test files that read pprof profiles
pub fn go_pprof(view: &str, profile: &std::path::Path) -> String {
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", view])
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof {view}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}
