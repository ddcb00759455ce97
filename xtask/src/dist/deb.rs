//! The `.deb`s: cargo-deb packs the release binary, the man pages, the
//! completions and the systemd unit (installed, not enabled) from
//! `[package.metadata.deb]` in profiler/Cargo.toml; lintian checks them.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use super::{Arch, dist_dir, install};
use crate::{
    setup,
    util::{cargo, cargo_home, is_root, output, path_env, run, workspace_root},
};

/// cargo-deb, pinned (built once with `cargo install --locked`).
const CARGO_DEB: &str = "cargo-deb@3.6.4";

/// The unit as the package installs it: the binary is /usr/bin/lockprof there
/// (the tarball's copy says /usr/local/bin, where `cargo xtask install` and a
/// hand install put it).
pub fn unit_for_deb(unit: &str) -> String {
    unit.replace("/usr/local/bin/lockprof", "/usr/bin/lockprof").replace(
        "install the binary as /usr/bin/lockprof,\n# copy this file to /etc/systemd/system/, then",
        "installed by the lockprof package (not enabled); start it with",
    )
}

/// cargo-deb, built once (`cargo install`) when missing.
pub fn cargo_deb() -> Result<()> {
    let installed = output(Command::new(cargo_home().join("bin/cargo-deb")).arg("--version").env("PATH", path_env()));
    let want = CARGO_DEB.trim_start_matches("cargo-deb@");
    if installed.is_some_and(|v| v.contains(want)) {
        return Ok(());
    }
    eprintln!("xtask: building {CARGO_DEB} (once)");
    run(cargo().args(["install", "--locked", CARGO_DEB])).context("cargo install cargo-deb")
}

/// Builds the `.deb` of `arch` from `bin`, the tarball's binary, stripped
/// (Debian ships stripped binaries; the tarball keeps lockprof's symbols for
/// its own stacks and backtraces); returns the package's path.
/// Its man pages and completions are the ones `dist` generated into
/// target/dist/docs, which the assets in profiler/Cargo.toml name.
pub fn make(arch: Arch, bin: &Path) -> Result<PathBuf> {
    cargo_deb()?;
    let unit = std::fs::read_to_string(workspace_root().join("packaging/lockprof.service"))
        .context("reading packaging/lockprof.service")?;
    let dir = dist_dir().join("deb");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("lockprof.service"), unit_for_deb(&unit))?;
    let stripped = dir.join("lockprof");
    install(bin, &stripped, 0o755)?;
    run(Command::new(setup::llvm_tool("llvm-strip")?).arg("--strip-all").arg(&stripped))
        .with_context(|| format!("stripping {}", stripped.display()))?;
    let out = output(
        cargo()
            .args(["deb", "--package", "profiler", "--no-build", "--no-strip", "--target", arch.triple])
            .arg("--output")
            .arg(dist_dir())
            .stderr(std::process::Stdio::inherit()),
    )
    .with_context(|| format!("cargo deb for {}", arch.triple))?;
    // cargo-deb prints the package's path last.
    let deb = out.lines().rev().map(str::trim).find(|l| l.ends_with(".deb")).map(PathBuf::from);
    match deb {
        Some(p) if p.is_file() => Ok(p),
        _ => bail!("cargo deb named no package: {out}"),
    }
}

/// The Debian package lintian comes in.
pub const LINTIAN: (&str, &str) = ("lintian", "lintian");

/// lintian on the packages: any error fails.
pub fn lintian(debs: &[PathBuf]) -> Result<()> {
    setup::apt_tools(&[LINTIAN])?;
    let mut cmd = Command::new("lintian");
    cmd.args(["--fail-on", "error", "--no-tag-display-limit", "--info"]);
    if is_root() {
        cmd.arg("--allow-root");
    }
    run(cmd.args(debs)).context("lintian found errors in the .deb packages")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_unit_runs_the_packaged_binary() {
        let unit = std::fs::read_to_string(workspace_root().join("packaging/lockprof.service")).expect("unit");
        let deb = unit_for_deb(&unit);
        assert!(deb.contains("ExecStart=/usr/bin/lockprof serve"), "{deb}");
        assert!(!deb.contains("/usr/local/bin"), "{deb}");
        assert!(deb.contains("installed by the lockprof package"), "the comment still says to copy it:\n{deb}");
    }
}
