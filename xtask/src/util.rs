//! Small process helpers.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// The workspace root (parent of xtask/).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// `$CARGO_HOME` (default ~/.cargo).
pub fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cargo"))
}

/// PATH with `$CARGO_HOME/bin` first, so freshly installed tools are found.
pub fn path_env() -> String {
    let bin = cargo_home().join("bin");
    let old = std::env::var("PATH").unwrap_or_default();
    format!("{}:{old}", bin.display())
}

/// The cargo that runs us.
pub fn cargo_path() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// A cargo command in the workspace root with the right PATH.
pub fn cargo() -> Command {
    let mut c = Command::new(cargo_path());
    c.current_dir(workspace_root()).env("PATH", path_env());
    c
}

/// Runs a command, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout if it succeeds.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Effective uid is 0.
pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

/// Running under CI.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
