//! Debian packages for the guest kernels, fetched through private apt
//! states (one per suite, under target/vm/apt): the host's apt sources,
//! lists and installed packages are never touched, so nothing the harness
//! configures can change what the host installs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use super::packages::Index;
use crate::{
    dist::Arch,
    util::{output, run},
};

/// A Debian suite (with its security suite where it has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suite {
    /// Name, e.g. `bookworm`, `trixie-backports`.
    pub name: &'static str,
    /// Archive components (`dists/<x>`) to list.
    pub dists: &'static [(&'static str, &'static str)],
}

const DEBIAN: &str = "http://deb.debian.org/debian";
const SECURITY: &str = "http://deb.debian.org/debian-security";

/// The suites the matrix uses; `--kernel PKG` looks for PKG in all of them.
pub const SUITES: &[Suite] = &[
    Suite { name: "bookworm", dists: &[(DEBIAN, "bookworm"), (SECURITY, "bookworm-security")] },
    Suite { name: "bullseye", dists: &[(DEBIAN, "bullseye"), (SECURITY, "bullseye-security")] },
    Suite { name: "trixie", dists: &[(DEBIAN, "trixie"), (SECURITY, "trixie-security")] },
    Suite { name: "trixie-backports", dists: &[(DEBIAN, "trixie-backports")] },
    Suite { name: "bookworm-backports", dists: &[(DEBIAN, "bookworm-backports")] },
];

/// A private apt state for one suite and one architecture.
pub struct Apt {
    dir: PathBuf,
    /// The suite.
    pub suite: Suite,
}

impl Apt {
    /// The state of `suite` for `arch`'s packages under `root`, created and
    /// updated once per run.
    pub fn open(root: &Path, suite: Suite, arch: Arch) -> Result<Apt> {
        let dir = root.join(format!("{}-{}", suite.name, arch.deb));
        for d in ["lists/partial", "cache/archives/partial", "debs"] {
            std::fs::create_dir_all(dir.join(d)).with_context(|| format!("creating {}", dir.join(d).display()))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let sources: String =
            suite.dists.iter().map(|(url, dist)| format!("deb [signed-by={keyring}] {url} {dist} main\n")).collect();
        std::fs::write(dir.join("sources.list"), sources)?;
        let status = dir.join("status");
        if !status.exists() {
            std::fs::write(&status, "")?;
        }
        let d = dir.display();
        let conf = format!(
            "Dir::Etc::SourceList \"{d}/sources.list\";\nDir::Etc::SourceParts \"/dev/null\";\n\
             Dir::Etc::Preferences \"/dev/null\";\nDir::Etc::PreferencesParts \"/dev/null\";\n\
             Dir::State \"{d}\";\nDir::State::Lists \"{d}/lists\";\nDir::State::status \"{d}/status\";\n\
             Dir::Cache \"{d}/cache\";\nDir::Cache::pkgcache \"pkgcache.bin\";\nDir::Cache::srcpkgcache \"srcpkgcache.bin\";\n\
             Acquire::Languages \"none\";\nAcquire::IndexTargets::deb::DEP-11::DefaultEnabled \"false\";\n\
             Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled \"false\";\n\
             Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled \"false\";\n\
             Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled \"false\";\nAPT::Sandbox::User \"root\";\n\
             APT::Architecture \"{deb}\";\nAPT::Architectures \"{deb}\";\n",
            deb = arch.deb
        );
        std::fs::write(dir.join("apt.conf"), conf)?;
        let apt = Apt { dir, suite };
        let stamp = apt.dir.join("updated");
        let fresh = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|e| e.as_secs() < 6 * 3600));
        if !fresh {
            eprintln!("xtask: apt-get update ({}, {})", suite.name, arch.deb);
            run(apt.cmd("apt-get").args(["update", "-qq"]))
                .with_context(|| format!("apt-get update for {} (private state {})", suite.name, apt.dir.display()))?;
            std::fs::write(stamp, "")?;
        }
        Ok(apt)
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("APT_CONFIG", self.dir.join("apt.conf"));
        c
    }

    /// The suite's kernel packages, from its package index (no download).
    pub fn index(&self) -> Result<Index> {
        let dump = output(self.cmd("apt-cache").arg("dumpavail"))
            .with_context(|| format!("apt-cache dumpavail for {} ({})", self.suite.name, self.dir.display()))?;
        Ok(Index::parse(&dump))
    }

    /// The packages `pkg` (optionally `pkg=version`) depends on, alternatives flattened.
    pub fn depends(&self, pkg: &str) -> Vec<String> {
        output(self.cmd("apt-cache").args(["depends", pkg]))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches('|');
                l.strip_prefix("Depends:").map(|p| p.trim().trim_matches(['<', '>']).to_string())
            })
            .collect()
    }

    /// Versions of `pkg`, newest first.
    pub fn versions(&self, pkg: &str) -> Vec<String> {
        output(self.cmd("apt-cache").args(["madison", pkg]))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split('|').nth(1).map(|v| v.trim().to_string()))
            .collect()
    }

    /// Downloads `pkg` (or `pkg=version`) into the suite's cache; returns the .deb.
    pub fn download(&self, pkg: &str) -> Result<PathBuf> {
        let debs = self.dir.join("debs");
        let name = pkg.split('=').next().unwrap_or(pkg);
        let find = || {
            std::fs::read_dir(&debs).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{name}_")) && n.ends_with(".deb"))
            })
        };
        if let Some(d) = find() {
            return Ok(d);
        }
        eprintln!("xtask: downloading {pkg} ({})", self.suite.name);
        let status = self.cmd("apt-get").current_dir(&debs).args(["download", "-qq", pkg]).status()?;
        if !status.success() {
            bail!("apt-get download {pkg} failed ({status})");
        }
        find().with_context(|| format!("{pkg}: no .deb after apt-get download"))
    }
}
