//! Idempotent machine set-up for building and running lockprof.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::util::{cargo_home, in_ci, is_root, output, path_env, run};

/// bpf-linker version known to build working objects with aya 0.14 here.
const BPF_LINKER: &str = "bpf-linker@0.13.0";

/// Everything: toolchain, bpf-linker, tracefs, test tools.
pub fn all() -> Result<()> {
    toolchain()?;
    apt_tools(TEST_TOOLS)
}

/// What building needs: nightly with rust-src, bpf-linker; and tracefs.
pub fn toolchain() -> Result<()> {
    nightly()?;
    bpf_linker()?;
    tracefs();
    Ok(())
}

/// The programs the root tests drive: tmux drives the TUI test; promtool
/// and prometheus (Debian's prometheus) and go (golang-go, for `go tool
/// pprof`) read lockprof serve; curl reads its incidents; cc and objdump
/// build and read the user-stack test's C program.
pub const TEST_TOOLS: &[(&str, &str)] = &[
    ("tmux", "tmux"),
    ("promtool", "prometheus"),
    ("prometheus", "prometheus"),
    ("go", "golang-go"),
    ("curl", "curl"),
    ("cc", "gcc"),
    ("objdump", "binutils"),
    ("python3", "python3"),
    ("debuginfod-find", "debuginfod"),
    ("node", "nodejs"),
];

/// Debian packages the tests drive (tmux for the TUI test), installed when
/// missing and we are root; otherwise those tests skip and say why.
pub fn apt_tools(tools: &[(&str, &str)]) -> Result<()> {
    let mut missing: Vec<&str> =
        tools.iter().filter(|(bin, _)| Command::new(bin).arg("-V").output().is_err()).map(|(_, pkg)| *pkg).collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        eprintln!("xtask: {} missing and we are not root; the tests that need it will skip", missing.join(", "));
        return Ok(());
    }
    eprintln!("xtask: installing {}", missing.join(", "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing))
    .context("apt-get install")?;
    Ok(())
}

/// A Rust target's standard library (`rustup target add`), when missing.
pub fn rust_target(triple: &str) -> Result<()> {
    let installed = output(rustup().args(["target", "list", "--installed"])).unwrap_or_default();
    if !installed.lines().any(|l| l.trim() == triple) {
        run(rustup().args(["target", "add", triple]))?;
    }
    Ok(())
}

/// A tool of rustup's `llvm-tools` component (added when missing), e.g.
/// `llvm-strip`, which handles every architecture lockprof ships for.
pub fn llvm_tool(name: &str) -> Result<PathBuf> {
    let rustc = || {
        let mut c = Command::new("rustc");
        c.env("PATH", path_env());
        c
    };
    let sysroot = output(rustc().args(["--print", "sysroot"])).context("rustc --print sysroot")?;
    let host = output(rustc().arg("-vV"))
        .and_then(|v| v.lines().find_map(|l| l.strip_prefix("host: ").map(str::to_string)))
        .context("rustc -vV names no host")?;
    let tool = PathBuf::from(sysroot.trim()).join("lib/rustlib").join(host.trim()).join("bin").join(name);
    if !tool.exists() {
        eprintln!("xtask: adding rustup's llvm-tools component (for {name})");
        run(rustup().args(["component", "add", "llvm-tools"]))?;
    }
    if !tool.exists() {
        bail!("{} is missing after `rustup component add llvm-tools`", tool.display());
    }
    Ok(tool)
}

fn rustup() -> Command {
    let mut c = Command::new("rustup");
    c.env("PATH", path_env());
    c
}

/// Nightly with rust-src (aya-build runs `cargo +nightly build -Z build-std=core`).
fn nightly() -> Result<()> {
    let have = output(rustup().args(["toolchain", "list"])).unwrap_or_default();
    if !have.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("xtask: installing the nightly toolchain");
        run(rustup().args(["toolchain", "install", "nightly", "--profile", "minimal", "--component", "rust-src"]))?;
    }
    let comps =
        output(rustup().args(["component", "list", "--toolchain", "nightly", "--installed"])).unwrap_or_default();
    if !comps.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("xtask: adding rust-src to nightly");
        run(rustup().args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }
    Ok(())
}

/// Where the libLLVM shim lives (must outlive the bpf-linker binary: it is the rpath).
fn shim_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/lockprof/rust-llvm")
}

/// rustc nightly's libLLVM: (directory, soname file name).
fn nightly_llvm() -> Result<(PathBuf, String)> {
    let sysroot = output(rustup().args(["run", "nightly", "rustc", "--print", "sysroot"]))
        .context("rustc +nightly --print sysroot")?;
    let lib = PathBuf::from(sysroot.trim()).join("lib");
    let so = std::fs::read_dir(&lib)
        .with_context(|| format!("reading {}", lib.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        .with_context(|| format!("no libLLVM.so.*-rust-* in {}", lib.display()))?;
    Ok((lib, so))
}

/// bpf-linker linked against rustc's own LLVM (Debian's LLVM is too old).
fn bpf_linker() -> Result<()> {
    let (lib, so) = nightly_llvm()?;
    let bin = cargo_home().join("bin/bpf-linker");
    let stamp = shim_dir().join("bpf-linker.stamp");
    let works = output(Command::new(&bin).arg("--version").env("PATH", path_env())).is_some();
    let same_llvm = std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == so);
    let links_it = output(Command::new("ldd").arg(&bin)).is_some_and(|l| l.contains(&so));
    if works && (same_llvm || links_it) {
        return Ok(());
    }
    eprintln!("xtask: building bpf-linker against {so} (about 80 s, once)");
    let shim = shim_dir();
    let shim_lib = shim.join("lib");
    std::fs::create_dir_all(&shim_lib).with_context(|| format!("creating {}", shim_lib.display()))?;
    for name in ["libLLVM.so".to_string(), so.clone()] {
        let link = shim_lib.join(&name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib.join(&so), &link).with_context(|| format!("linking {}", link.display()))?;
    }
    run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .env("PATH", path_env())
        .env("LLVM_PREFIX", &shim)
        .args(["install", "--locked", "--force", BPF_LINKER, "--no-default-features", "--features", "llvm-22"]))
    .context("building bpf-linker")?;
    if output(Command::new(&bin).arg("--version")).is_none() {
        bail!("bpf-linker was built but does not run; see ../shared/docs/toolchain.md");
    }
    std::fs::write(&stamp, &so).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(())
}

/// Classic tracepoints need tracefs; tp_btf does not, so failure only warns.
fn tracefs() {
    let mounted = ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"]
        .iter()
        .any(|p| std::path::Path::new(p).is_dir());
    if mounted {
        return;
    }
    if !is_root() {
        eprintln!("xtask: tracefs is not mounted and we are not root; lockprof mounts it itself when run with sudo");
        return;
    }
    match Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status() {
        Ok(s) if s.success() => eprintln!("xtask: mounted tracefs at /sys/kernel/tracing"),
        r => {
            let msg =
                format!("xtask: could not mount tracefs ({r:?}); the classic tracepoint backend will be unavailable");
            if in_ci() {
                eprintln!("{msg} (CI: the tracepoint tests will fail)");
            } else {
                eprintln!("{msg}");
            }
        }
    }
}
