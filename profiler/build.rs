//! Builds the eBPF programs (profiler-ebpf) for the BPF target with aya-build
//! and leaves the object in OUT_DIR, where `ebpf::load` embeds it.
//! Needs the nightly toolchain with rust-src and bpf-linker: `cargo xtask setup`.
//! Also names the build for `lockprof --version`: the commit and the target.
//!
//! The object depends only on the architecture it is for (kprobe register
//! access) and on the `floor` feature, not on this package's profile, host
//! target or other features; yet each of those gets an OUT_DIR of its own,
//! where aya-build would compile the whole eBPF crate again (`-Z
//! build-std=core`, ~35 s). So aya-build works in one directory per
//! (architecture, features) under the workspace's target directory, where
//! cargo's own freshness check makes a second build a no-op, and the object
//! is copied from there into OUT_DIR.
use std::{path::Path, process::Command};

use anyhow::{Context as _, anyhow};

/// `git` in the package's directory; None when git or the repository is missing.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

/// The commit being built (`unknown` outside a git checkout), and a rerun
/// whenever HEAD moves: HEAD itself and the branch it points to.
fn version_env() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let watched = [Some("HEAD".to_string()), git(&["symbolic-ref", "-q", "HEAD"]), Some("packed-refs".into())];
    for path in watched.into_iter().flatten() {
        // Only files that exist: a missing one would rerun this script on every build.
        if let Some(file) = git(&["rev-parse", "--git-path", &path]).filter(|f| std::path::Path::new(f).exists()) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rustc-env=LOCKPROF_COMMIT={commit}");
    println!("cargo:rustc-env=LOCKPROF_TARGET={}", std::env::var("TARGET").unwrap_or_else(|_| "unknown".into()));
}

fn main() -> anyhow::Result<()> {
    version_env();
    let cargo_metadata::Metadata { packages, target_directory, .. } =
        cargo_metadata::MetadataCommand::new().no_deps().exec().context("cargo metadata")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "profiler-ebpf")
        .ok_or_else(|| anyhow!("profiler-ebpf package not found in the workspace"))?;
    let root = ebpf.manifest_path.parent().ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    // `--features bench` (cargo xtask bench) adds the counting-only floor programs.
    let features: &[&str] = if std::env::var_os("CARGO_FEATURE_BENCH").is_some() { &["floor"] } else { &[] };
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?;
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    let shared = target_directory
        .as_std_path()
        .join("ebpf")
        .join(format!("{arch}-{}", if features.is_empty() { "default" } else { "floor" }));
    std::fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;
    // aya-build reads OUT_DIR for where to build and where to put the object.
    // SAFETY: a build script is one thread here (no thread has been started,
    // cargo_metadata's child has exited), so nothing reads the environment concurrently.
    unsafe { std::env::set_var("OUT_DIR", &shared) };
    let built = aya_build::build_ebpf(
        [aya_build::Package { name: ebpf.name.as_str(), root_dir: root.as_str(), features, ..Default::default() }],
        aya_build::Toolchain::default(),
    );
    // SAFETY: as above; the only thread aya-build may leave running (its
    // stderr reader, when the build failed) prints and never reads the environment.
    unsafe { std::env::set_var("OUT_DIR", &out_dir) };
    built.context(
        "building the eBPF programs failed (if nightly rust-src or bpf-linker is missing, run `cargo xtask setup` to install \
         them)",
    )?;
    copy_object(&shared, Path::new(&out_dir))
}

/// Copies the object (`profiler`, the eBPF crate's binary) from `shared`
/// into `out_dir`, through a temporary file renamed into place.
fn copy_object(shared: &Path, out_dir: &Path) -> anyhow::Result<()> {
    let from = shared.join("profiler");
    let tmp = out_dir.join("profiler.tmp");
    std::fs::copy(&from, &tmp).with_context(|| format!("copying {} into {}", from.display(), out_dir.display()))?;
    std::fs::rename(&tmp, out_dir.join("profiler")).context("renaming the eBPF object into place")?;
    Ok(())
}
