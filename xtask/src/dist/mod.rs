//! `cargo xtask dist`: the release artifacts, in `target/dist/`: per
//! architecture a static (musl) tarball and a `.deb` (cargo-deb, checked
//! with lintian), and `SHA256SUMS`. The guests of `vm-test` boot the
//! tarball's binary, so what users download is what the matrix tested.

mod deb;
mod elf;
mod smoke;
mod tarball;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

pub use self::{
    deb::{LINTIAN, cargo_deb},
    smoke::smoke_test,
    tarball::extract_binary,
};
use crate::{
    phases::Phases,
    setup,
    util::{cargo, output, run, workspace_root},
};

/// One architecture lockprof ships for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// Short name (`--arch`).
    pub name: &'static str,
    /// The static Rust target.
    pub triple: &'static str,
    /// Debian's name for it.
    pub deb: &'static str,
}

/// x86_64.
pub const X86_64: Arch = Arch { name: "x86_64", triple: "x86_64-unknown-linux-musl", deb: "amd64" };
/// arm64.
pub const AARCH64: Arch = Arch { name: "aarch64", triple: "aarch64-unknown-linux-musl", deb: "arm64" };
/// Every architecture, in release order.
pub const ARCHES: [Arch; 2] = [X86_64, AARCH64];

impl Arch {
    /// By `--arch` name.
    pub fn named(name: &str) -> Result<Arch> {
        ARCHES
            .into_iter()
            .find(|a| a.name == name)
            .with_context(|| format!("no architecture {name:?}: {}", ARCHES.map(|a| a.name).join(", ")))
    }
}

/// What `cargo xtask dist` makes.
pub struct Opts {
    /// The architectures.
    pub arches: Vec<Arch>,
    /// Also the `.deb`s (cargo-deb, lintian).
    pub deb: bool,
    /// The `lockprof-docs` example already built (by `cargo xtask test`'s
    /// test build); None: built here.
    pub docs_exe: Option<PathBuf>,
}

/// `target/dist`.
pub fn dist_dir() -> PathBuf {
    workspace_root().join("target/dist")
}

/// The profiler package's version.
fn version() -> Result<String> {
    let meta = output(cargo().args(["metadata", "--no-deps", "--format-version", "1"])).context("cargo metadata")?;
    let v: serde_json::Value = serde_json::from_str(&meta).context("cargo metadata's JSON")?;
    v["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "profiler"))
        .and_then(|p| p["version"].as_str())
        .map(str::to_string)
        .context("no profiler package in cargo metadata")
}

/// Builds the static `lockprof` for `arch` (its eBPF object built for that
/// architecture by aya-build) and checks it needs no loader.
pub fn build(arch: Arch) -> Result<PathBuf> {
    Ok(build_all(&[arch])?.remove(0))
}

/// [`build`] for each of `arches`, in one cargo run: its jobs fill both
/// CPUs where one target's build would leave one idle (a crate's serial
/// front end, a link).
fn build_all(arches: &[Arch]) -> Result<Vec<PathBuf>> {
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--package", "profiler", "--bin", "lockprof"]);
    for arch in arches {
        setup::rust_target(arch.triple)?;
        cmd.args(["--target", arch.triple]);
    }
    run(&mut cmd)?;
    let mut bins = Vec::new();
    for &arch in arches {
        let bin = workspace_root().join(format!("target/{}/release/lockprof", arch.triple));
        elf::check_static(&bin, arch)?;
        bins.push(bin);
    }
    Ok(bins)
}

/// The man pages and completions, from the clap definitions: `exe`, the
/// `lockprof-docs` example, or (None) that example built here.
fn docs(exe: Option<&Path>) -> Result<PathBuf> {
    let dir = dist_dir().join("docs");
    let _ = std::fs::remove_dir_all(&dir);
    let exe = match exe {
        Some(e) => e.to_path_buf(),
        None => {
            let built = output(
                cargo()
                    .args(["build", "--package", "profiler", "--example", "lockprof-docs"])
                    .args(["--message-format", "json"]),
            )
            .context("building the lockprof-docs example")?;
            built
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "lockprof-docs")
                .find_map(|v| v["executable"].as_str().map(PathBuf::from))
                .context("cargo named no lockprof-docs executable")?
        }
    };
    run(Command::new(exe).arg(&dir).stdout(std::process::Stdio::null()))
        .context("generating the man pages and completions")?;
    Ok(dir)
}

/// The tarball of `arch` (built when missing or older than its binary):
/// what `vm-test` boots.
pub fn tarball(arch: Arch) -> Result<PathBuf> {
    let version = version()?;
    let bin = build(arch)?;
    let docs = docs(None)?;
    tarball::make(arch, &version, &bin, &docs)
}

/// `cargo xtask dist`, each build and check a phase of `phases`; returns
/// the tarball of each architecture.
pub fn run_dist(o: &Opts, phases: &Phases) -> Result<Vec<(Arch, PathBuf)>> {
    if o.arches.is_empty() {
        bail!("no architecture to build");
    }
    // Artifacts of an earlier run (another version, or an architecture not
    // asked for now) would sit unlisted beside SHA256SUMS.
    for entry in std::fs::read_dir(dist_dir()).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tar.gz") || name.ends_with(".deb") || name == "SHA256SUMS" {
            std::fs::remove_file(entry.path()).with_context(|| format!("removing {name}"))?;
        }
    }
    let version = version()?;
    let docs = phases.time("dist: man pages and completions", || docs(o.docs_exe.as_deref()))?;
    let mut made = Vec::new();
    let mut debs = Vec::new();
    let mut tarballs = Vec::new();
    let triples: Vec<&str> = o.arches.iter().map(|a| a.triple).collect();
    let bins = phases.time(&format!("cargo build: release {}", triples.join(" + ")), || build_all(&o.arches))?;
    for (&arch, bin) in o.arches.iter().zip(bins) {
        let t = phases.time(&format!("dist: {} tarball", arch.name), || tarball::make(arch, &version, &bin, &docs))?;
        tarballs.push((arch, t.clone()));
        made.push(t);
        if o.deb {
            let d = phases.time(&format!("dist: {} .deb", arch.name), || deb::make(arch, &bin))?;
            debs.push(d.clone());
            made.push(d);
        }
    }
    if o.deb {
        phases.time("dist: lintian", || deb::lintian(&debs))?;
    }
    let sums = sha256sums(&made)?;
    let mut s = String::new();
    for path in made.iter().chain([&sums]) {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let _ = writeln!(s, "  {} ({:.1} MiB)", path.display(), size as f64 / (1024.0 * 1024.0));
    }
    eprintln!("xtask: dist:\n{s}");
    Ok(tarballs)
}

/// `SHA256SUMS` next to the artifacts (`sha256sum -c` reads it).
fn sha256sums(files: &[PathBuf]) -> Result<PathBuf> {
    let names: Vec<&str> = files.iter().filter_map(|f| f.file_name().and_then(|n| n.to_str())).collect::<Vec<_>>();
    let sums = output(Command::new("sha256sum").current_dir(dist_dir()).args(&names)).context("sha256sum")?;
    let path = dist_dir().join("SHA256SUMS");
    std::fs::write(&path, sums).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Copies `from` to `to`, creating `to`'s directory, with `mode`.
fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", to.display()))?;
    Ok(())
}
