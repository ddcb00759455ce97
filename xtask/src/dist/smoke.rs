//! The release binary as a user without Rust runs it: copied into an empty
//! directory, started with a bare environment (no cargo or rustup on PATH),
//! `--version`, `doctor`, then `record` while its own pipe storm runs.

use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail, ensure};

use super::{Arch, install};

/// A command for the copied binary: empty environment but a system PATH.
fn bare(bin: &Path, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(dir).env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").env("HOME", dir);
    c
}

fn stdout(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output().with_context(|| format!("starting {what}"))?;
    ensure!(out.status.success(), "{what} failed ({})", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the checks on a copy of `release_bin` in `dir` (emptied first).
/// Needs root (doctor and record attach for real).
pub fn smoke_test(release_bin: &Path, arch: Arch, dir: &Path) -> Result<String> {
    let _ = std::fs::remove_dir_all(dir);
    let bin = dir.join("lockprof");
    install(release_bin, &bin, 0o755)?;
    let version = stdout(bare(&bin, dir).arg("--version"), "lockprof --version")?;
    ensure!(version.contains(arch.triple), "--version does not name the target {}: {version}", arch.triple);
    let doctor = stdout(bare(&bin, dir).args(["doctor", "--json"]), "lockprof doctor --json")?;
    let d: serde_json::Value = serde_json::from_str(&doctor).context("doctor --json output")?;
    let usable: Vec<&str> = d["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["available"] == true)
        .filter_map(|b| b["name"].as_str())
        .collect();
    ensure!(!usable.is_empty(), "doctor found no usable wait backend: {doctor}");
    // The storm outlives the recording: it starts first, is told to run longer, and is reaped after.
    let mut storm = bare(&bin, dir)
        .args(["stress", "pipe", "--threads", "4", "--duration", "8"])
        .stdout(Stdio::null())
        .spawn()
        .context("starting lockprof stress pipe")?;
    let recorded =
        stdout(bare(&bin, dir).args(["record", "--duration", "3", "--output", "rec.json"]), "lockprof record");
    let _ = storm.kill();
    let _ = storm.wait();
    recorded?;
    let report = stdout(
        bare(&bin, dir).args(["report", "--input", "rec.json", "--format", "json"]),
        "lockprof report --format json",
    )?;
    let r: serde_json::Value = serde_json::from_str(&report).context("report --format json output")?;
    let mutex_waits: u64 = r["locks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["type"] == "mutex")
        .filter_map(|l| l["contended"].as_u64())
        .sum();
    if mutex_waits == 0 {
        bail!("the tarball's lockprof recorded no mutex contention under its own pipe storm: {report:.2000}");
    }
    Ok(format!(
        "{} ran as shipped: backends {}; {mutex_waits} mutex contentions recorded",
        version.trim(),
        usable.join(", ")
    ))
}
