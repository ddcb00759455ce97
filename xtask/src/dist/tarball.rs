//! `lockprof-<version>-<target>.tar.gz`: the binary, README, licenses, the
//! systemd unit, man pages and completions, in one directory.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use super::{Arch, dist_dir, install};
use crate::util::{output, run, workspace_root};

/// The files beside the binary: (source in the workspace, name in the tarball).
const FILES: [(&str, &str); 4] = [
    ("README.md", "README.md"),
    ("LICENSE-MIT", "LICENSE-MIT"),
    ("LICENSE-APACHE", "LICENSE-APACHE"),
    ("packaging/lockprof.service", "lockprof.service"),
];

/// The tarball's top directory and file stem.
pub fn stem(arch: Arch, version: &str) -> String {
    format!("lockprof-{version}-{}", arch.triple)
}

/// Stages and packs the tarball; returns its path.
pub fn make(arch: Arch, version: &str, bin: &Path, docs: &Path) -> Result<PathBuf> {
    let stem = stem(arch, version);
    let stage_root = dist_dir().join("stage");
    let stage = stage_root.join(&stem);
    let _ = std::fs::remove_dir_all(&stage);
    install(bin, &stage.join("lockprof"), 0o755)?;
    let root = workspace_root();
    for (from, to) in FILES {
        install(&root.join(from), &stage.join(to), 0o644)?;
    }
    for (sub, to) in [("man1", "man/man1"), ("completions", "completions")] {
        for entry in std::fs::read_dir(docs.join(sub)).with_context(|| format!("reading {}", docs.display()))? {
            let from = entry?.path();
            if let Some(name) = from.file_name() {
                install(&from, &stage.join(to).join(name), 0o644)?;
            }
        }
    }
    let out = dist_dir().join(format!("{stem}.tar.gz"));
    // Reproducible: owned by root, sorted, dated from the commit, gzip
    // without a timestamp; the same inputs give the same bytes, so a rebuilt
    // tarball (vm-test makes one) still matches SHA256SUMS.
    let epoch = output(Command::new("git").current_dir(workspace_root()).args(["log", "-1", "--format=%ct"]))
        .map_or_else(|| "0".to_string(), |s| s.trim().to_string());
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "--sort=name"])
        .arg(format!("--mtime=@{epoch}"))
        .args(["--use-compress-program", "gzip -n -9", "-cf"])
        .arg(&out)
        .arg("-C")
        .arg(&stage_root)
        .arg(&stem))
    .with_context(|| format!("packing {}", out.display()))?;
    Ok(out)
}

/// Unpacks `tarball` into `dir` and returns its `lockprof`.
pub fn extract_binary(tarball: &Path, dir: &Path) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    run(Command::new("tar").arg("-xzf").arg(tarball).arg("-C").arg(dir))
        .with_context(|| format!("unpacking {}", tarball.display()))?;
    let top = tarball
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".tar.gz"))
        .context("a tarball named *.tar.gz")?;
    let bin = dir.join(top).join("lockprof");
    anyhow::ensure!(bin.is_file(), "{} has no {top}/lockprof", tarball.display());
    Ok(bin)
}
