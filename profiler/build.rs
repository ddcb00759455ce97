//! Builds the eBPF programs (profiler-ebpf) for the BPF target with aya-build
//! and leaves the object in OUT_DIR, where `ebpf::load` embeds it.
//! Needs the nightly toolchain with rust-src and bpf-linker: `cargo xtask setup`.
//! Also names the build for `lockprof --version`: the commit and the target.
use std::process::Command;

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
    let cargo_metadata::Metadata { packages, .. } =
        cargo_metadata::MetadataCommand::new().no_deps().exec().context("cargo metadata")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "profiler-ebpf")
        .ok_or_else(|| anyhow!("profiler-ebpf package not found in the workspace"))?;
    let root = ebpf.manifest_path.parent().ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    // `--features bench` (cargo xtask bench) adds the counting-only floor programs.
    let features: &[&str] = if std::env::var_os("CARGO_FEATURE_BENCH").is_some() { &["floor"] } else { &[] };
    aya_build::build_ebpf(
        [aya_build::Package { name: ebpf.name.as_str(), root_dir: root.as_str(), features, ..Default::default() }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF programs failed (if nightly rust-src or bpf-linker is missing, run `cargo xtask setup` to install \
         them)",
    )
}
