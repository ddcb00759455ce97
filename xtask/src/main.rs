//! Orchestration: `cargo xtask <setup|build|run|install|test>`.
//!
//! Everything a fresh machine needs is installed here, idempotently: the
//! nightly toolchain with rust-src, bpf-linker built against rustc's own LLVM
//! (../shared/docs/toolchain.md), and a tracefs mount.

mod bench;
mod dist;
mod phases;
mod readme;
mod setup;
mod test;
mod util;
mod vm;

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};

use util::{cargo, is_root, run, workspace_root};

#[derive(Parser)]
#[command(name = "xtask", about = "lockprof build, run and test orchestration")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building needs (nightly + rust-src, bpf-linker), mount tracefs.
    Setup,
    /// Set up, then build the release binary.
    Build,
    /// Set up, build, and run lockprof on the live kernel (default: `record --duration 10`).
    Run {
        /// Arguments for lockprof.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then `cargo install` lockprof into ~/.cargo/bin.
    Install,
    /// Release artifacts in target/dist/: static tarballs and .debs (x86_64, aarch64), SHA256SUMS.
    Dist {
        /// Only these architectures (repeatable: x86_64, aarch64; default both).
        #[arg(long = "arch", value_name = "ARCH")]
        arches: Vec<String>,
        /// Tarballs only: no .deb (and no cargo-deb or lintian).
        #[arg(long)]
        no_deb: bool,
        /// Then run the x86_64 tarball's binary as a user without Rust would (root): doctor and record.
        #[arg(long)]
        smoke: bool,
    },
    /// Overhead and fidelity beside perf -b on the seed workloads (root); rewrites BENCHMARKS.md.
    Bench {
        /// Rounds per workload (each runs every tracer once).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 3.0)]
        duration: f64,
        /// Workload threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Workloads, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "pipe,fork,unlink,prio,futex")]
        workloads: Vec<String>,
        /// Extra lockprof designs in the rotation, `label=record args` (repeatable).
        #[arg(long = "variant", value_name = "LABEL=ARGS")]
        variants: Vec<String>,
        /// Only the rotation (written to target/bench.md, BENCHMARKS.md untouched).
        #[arg(long)]
        rotation_only: bool,
        /// Seconds of the lockprof serve soak under pipe + fork/exit + mmap storms (0: skip it).
        #[arg(long, default_value_t = 1800)]
        soak_secs: u64,
        /// Only the serve soak (`--soak-secs`, 30 min by default): replaces its section of
        /// BENCHMARKS.md, the rest untouched.
        #[arg(long, conflicts_with_all = ["rotation_only", "costs_only"])]
        soak: bool,
        /// Skip the guest-kernel measurements (hold timing under QEMU).
        #[arg(long)]
        no_guest: bool,
        /// Only the per-program costs (bpf_stats on a short pipe storm per tracer): replaces
        /// their section of BENCHMARKS.md, the rest untouched.
        #[arg(long, conflicts_with = "rotation_only")]
        costs_only: bool,
        /// Only the user-space lock cost (the futex storm against the bpftrace floor, the other
        /// --workloads with and without --futex, the futex programs): replaces its section of
        /// BENCHMARKS.md, the rest untouched.
        #[arg(long, conflicts_with_all = ["rotation_only", "costs_only", "soak"])]
        futex_only: bool,
        /// Only the incident triggers' cost (the pipe storm with triggers armed that do not fire,
        /// the incident ring's memory at 100k keys): replaces its section of BENCHMARKS.md.
        #[arg(long, conflicts_with_all = ["rotation_only", "costs_only", "soak", "futex_only"])]
        incidents_only: bool,
        /// Only where lockprof's wait programs spend their time, source line by source line
        /// (perf-b samples during a pipe storm, mapped through the programs' jited line info);
        /// printed, BENCHMARKS.md untouched. Optional value: `lockprof record` arguments, quoted.
        #[arg(long, value_name = "RECORD_ARGS", num_args = 0..=1, default_missing_value = "", allow_hyphen_values = true,
              conflicts_with_all = ["rotation_only", "costs_only", "soak", "futex_only", "incidents_only"])]
        hot_lines: Option<String>,
    },
    /// Boot Debian kernels under QEMU and run the guest checks (backends, holds, yield_to) inside.
    VmTest {
        /// An exact Debian kernel package, any suite and flavour (default: Debian stable's).
        #[arg(long, conflicts_with = "matrix")]
        kernel: Option<String>,
        /// The guests' architecture: x86_64 (default) or aarch64 (Debian's arm64 kernels under
        /// qemu-system-aarch64); with --matrix, only that architecture's rows (default: both).
        #[arg(long, value_name = "ARCH")]
        arch: Option<String>,
        /// Every kernel of the matrix: x86_64 5.10, 6.1, the newest in backports, PREEMPT_RT;
        /// arm64 6.1 and the newest.
        #[arg(long)]
        matrix: bool,
        /// Give up on one guest after this many seconds [default: 720 on x86_64, 1080 on aarch64].
        #[arg(long)]
        timeout: Option<u64>,
        /// Only resolve every kernel package of every suite to its image and modules packages,
        /// from the package indices (no download, no boot); --matrix does this first.
        #[arg(long, conflicts_with_all = ["kernel", "matrix"])]
        check_packages: bool,
        /// Only the guest checks whose names contain this (`yield_to`, `kprobe::pipe_mutex`);
        /// the README's table is then left alone.
        #[arg(long, conflicts_with = "check_packages")]
        filter: Option<String>,
        /// Guests booted at a time [default: the host's CPUs; each TCG guest runs on one].
        #[arg(long)]
        lanes: Option<usize>,
    },
    /// Set up, then run every check: fmt, clippy, unit tests, root eBPF tests,
    /// the release artefacts, the guest kernels; ends with a table of where the time went.
    Test {
        /// Skip fmt and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Skip the guest-kernel (QEMU) tests of the kprobe and fentry backends.
        #[arg(long, conflicts_with = "quick")]
        no_vm: bool,
        /// The developer's path: host checks, the x86_64 tarball (no .debs) and
        /// one guest (the newest x86_64 kernel) instead of the whole matrix.
        #[arg(long)]
        quick: bool,
    },
}

fn release_binary() -> PathBuf {
    workspace_root().join("target/release/lockprof")
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Setup => setup::all(),
        Cmd::Build => {
            setup::all()?;
            run(cargo().args(["build", "--release", "--package", "profiler"]))
        }
        Cmd::Run { args } => {
            setup::all()?;
            run(cargo().args(["build", "--release", "--package", "profiler"]))?;
            let args = if args.is_empty() { vec!["record".into(), "--duration".into(), "10".into()] } else { args };
            let mut cmd = if is_root() {
                std::process::Command::new(release_binary())
            } else {
                eprintln!("xtask: lockprof needs root; running it through sudo");
                let mut c = std::process::Command::new("sudo");
                c.arg(release_binary());
                c
            };
            run(cmd.args(&args))
        }
        Cmd::Install => {
            setup::all()?;
            run(cargo().args(["install", "--locked", "--path"]).arg(workspace_root().join("profiler")))?;
            eprintln!(
                "xtask: installed `lockprof`; run it with `sudo lockprof doctor` or `sudo lockprof record --duration 10`"
            );
            Ok(())
        }
        Cmd::Dist { arches, no_deb, smoke } => {
            setup::all()?;
            let arches = if arches.is_empty() {
                dist::ARCHES.to_vec()
            } else {
                arches.iter().map(|a| dist::Arch::named(a)).collect::<Result<Vec<_>>>()?
            };
            let phases = phases::Phases::default();
            let tarballs = dist::run_dist(&dist::Opts { arches, deb: !no_deb, docs_exe: None }, &phases)?;
            if smoke { test::dist_smoke(&tarballs) } else { Ok(()) }
        }
        Cmd::Test { no_lint, no_vm, quick } => test::run_all(&test::Opts { no_lint, no_vm, quick }),
        Cmd::VmTest { kernel, arch, matrix, timeout, check_packages, filter, lanes } => vm_test(vm::Opts {
            kernel,
            arch: arch.as_deref().map(dist::Arch::named).transpose()?,
            matrix,
            quick: false,
            timeout: timeout.map(std::time::Duration::from_secs),
            check_packages,
            filter,
            tarballs: Vec::new(),
            lanes,
        }),
        Cmd::Bench {
            rounds,
            duration,
            threads,
            workloads,
            variants,
            rotation_only,
            soak_secs,
            no_guest,
            costs_only,
            soak,
            futex_only,
            incidents_only,
            hot_lines,
        } => {
            if !is_root() {
                bail!("cargo xtask bench attaches BPF programs: run it as root");
            }
            setup::all()?;
            run(cargo().args(["build", "--release", "--package", "profiler", "--bin", "lockprof"]))?;
            run(cargo().args([
                "build",
                "--release",
                "--package",
                "profiler",
                "--features",
                "bench",
                "--bin",
                "lockprof-bench",
            ]))?;
            bench::run(&bench::Opts {
                rounds: rounds.max(1),
                duration,
                threads,
                workloads,
                variants,
                rotation_only,
                soak_secs,
                guest: !no_guest && !rotation_only,
                costs_only,
                soak_only: soak,
                futex_only,
                incidents_only,
                hot_lines: hot_lines.map(|a| a.split_whitespace().map(str::to_string).collect()),
            })
        }
    }
}

fn vm_test(opts: vm::Opts) -> Result<()> {
    if !is_root() {
        bail!("cargo xtask vm-test installs QEMU with apt and loads eBPF programs in guests: run it as root");
    }
    let phases = phases::Phases::default();
    let out = setup::all().and_then(|()| vm::run_vm(&opts, &phases));
    println!("\n{}", phases.render("`cargo xtask vm-test`:"));
    out
}
