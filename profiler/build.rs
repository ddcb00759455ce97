//! Builds the eBPF programs (profiler-ebpf) for the BPF target with aya-build
//! and leaves the object in OUT_DIR, where `ebpf::load` embeds it.
//! Needs the nightly toolchain with rust-src and bpf-linker: `cargo xtask setup`.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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
