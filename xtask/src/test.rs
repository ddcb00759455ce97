//! `cargo xtask test`: every check, each artefact built once, every part
//! timed ([`Phases`]). Set-up; fmt and clippy; one debug build of every test
//! binary, then each binary run on its own (unit tests as built, the root
//! eBPF test files as root); the `bench` build and its tests; the release
//! artefacts (`dist`), whose x86_64 tarball the smoke test runs as shipped
//! and whose tarballs the guests boot; the guest kernels, side by side.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    dist::{self, Arch, X86_64},
    phases::{self, Phases},
    readme, setup,
    util::{self, cargo, in_ci, is_root, run, workspace_root},
    vm,
};

/// What to run.
pub struct Opts {
    /// Skip fmt and clippy.
    pub no_lint: bool,
    /// Skip the guest kernels.
    pub no_vm: bool,
    /// Host tests and one guest (the newest x86_64 kernel), tarballs without .debs.
    pub quick: bool,
}

/// Runs everything `o` asks for; the phase table is printed (and kept in
/// `target/phases.md`) whatever the outcome, and a whole passing run
/// writes it into the README.
pub fn run_all(o: &Opts) -> Result<()> {
    let phases = Phases::default();
    let out = steps(o, &phases);
    let whole = out.is_ok() && !o.no_lint && !o.no_vm && !o.quick;
    let header = format!(
        "`cargo xtask test`{} on {} ({} CPUs, kernel {}), {}:",
        if whole { "" } else { " (part)" },
        util::output(&mut Command::new("hostname")).unwrap_or_default().trim(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        util::output(Command::new("uname").arg("-r")).unwrap_or_default().trim(),
        if out.is_ok() { "passed" } else { "FAILED" },
    );
    let table = phases.render(&header);
    println!("\n{table}");
    let _ = std::fs::write(workspace_root().join("target/phases.md"), &table);
    if whole {
        readme::write_section(phases::BEGIN, phases::END, &table, "phase table")?;
    }
    out
}

fn steps(o: &Opts, phases: &Phases) -> Result<()> {
    let vm_opts = vm::Opts {
        kernel: None,
        arch: None,
        matrix: !o.quick,
        quick: o.quick,
        timeout: None,
        check_packages: false,
        filter: None,
        tarballs: Vec::new(),
        lanes: None,
    };
    let guests = !o.no_vm && is_root();
    if !o.no_vm && !is_root() {
        bail!("the guest kernels need root (apt installs QEMU): run as root, or pass --no-vm");
    }
    let arches = if guests { vm::arches(&vm_opts)? } else { vec![X86_64] };
    // What comes from the network (Debian's packages, the kernels, Rust
    // targets) is fetched beside the CPU's work: the toolchain, lint and
    // the host build. Only this thread runs apt until it is joined.
    let (vm_ref, arches_ref) = (&vm_opts, &arches);
    std::thread::scope(|scope| {
        let fetching = scope.spawn(move || fetch(o, guests, arches_ref, vm_ref, phases));
        let toolchain = phases.time("set-up: toolchain (nightly, bpf-linker)", setup::toolchain);
        let linted = toolchain.and_then(|()| if o.no_lint { Ok(()) } else { lint(phases) });
        let built = linted.and_then(|()| {
            phases.time("cargo build: host debug (tests, bins, examples)", || build_tests(&["--workspace"]))
        });
        let fetched = fetching.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the fetching thread panicked")));
        let bins = built?;
        let fetched = fetched?;
        host_tests(&bins.tests, phases)?;
        // The release artefacts, made as `cargo xtask dist` makes them: a
        // fresh machine proves it can.
        let docs_exe = bins.examples.iter().find(|(n, _)| n == "lockprof-docs").map(|(_, p)| p.clone());
        let tarballs =
            dist::run_dist(&dist::Opts { arches: arches.clone(), deb: is_root() && !o.quick, docs_exe }, phases)?;
        if is_root() {
            let x86 =
                tarballs.iter().find(|(a, _)| *a == X86_64).map(|(_, t)| t.clone()).context("no x86_64 tarball")?;
            phases.time("smoke: the x86_64 tarball as shipped", || smoke(&x86))?;
        } else if in_ci() {
            bail!("CI=true but not root: the release smoke test and the guests need root");
        } else {
            eprintln!("xtask: not root: no .debs (apt installs lintian), no smoke test, no guests");
        }
        match fetched {
            Some(f) => vm::boot_all(&vm::Opts { tarballs, ..vm_ref.clone() }, f, phases),
            None => {
                eprintln!("xtask: --no-vm: the guest-kernel tests were not run");
                Ok(())
            }
        }
    })
}

/// Everything from the network, in one thread: Debian's packages for the
/// tests, the guests and lintian (one apt run); cargo-deb (built once) and
/// rustup's llvm-tools; then (with `guests`) the Rust targets and every kernel.
fn fetch(o: &Opts, guests: bool, arches: &[Arch], vm_opts: &vm::Opts, phases: &Phases) -> Result<Option<vm::Fetched>> {
    let mut packages = setup::TEST_TOOLS.to_vec();
    if guests {
        packages.extend(vm::guest_packages(arches));
    }
    let deb = is_root() && !o.quick;
    if deb {
        packages.push(dist::LINTIAN);
    }
    phases.time("set-up: Debian packages", || setup::apt_tools(&packages))?;
    if deb {
        // The .debs' binaries are stripped with rustup's llvm-strip.
        phases.time("set-up: cargo-deb, llvm-tools", || {
            dist::cargo_deb().and_then(|()| setup::llvm_tool("llvm-strip").map(drop))
        })?;
    }
    if guests { vm::fetch(vm_opts, phases).map(Some) } else { Ok(None) }
}

/// fmt; clippy on every host target (the feature-gated ones included) and on
/// the eBPF crate for the BPF target, with and without the benchmark floor.
fn lint(phases: &Phases) -> Result<()> {
    phases.time("fmt", || {
        run(cargo().args(["fmt", "--all", "--check"])).context("cargo fmt --check: run `cargo fmt --all`")
    })?;
    phases.time("clippy (host, every target)", || {
        run(cargo()
            .args(["clippy", "--workspace", "--exclude", "profiler-ebpf", "--all-targets", "--test", "guest"])
            .args(["--features", "profiler/bench", "--", "-D", "warnings"]))
    })?;
    for features in ["", "floor"] {
        let name =
            format!("clippy (eBPF{})", if features.is_empty() { String::new() } else { format!(", {features}") });
        phases.time(&name, || {
            run(Command::new("rustup")
                .current_dir(workspace_root())
                .env("PATH", util::path_env())
                .args(["run", "nightly", "cargo", "clippy", "--package", "profiler-ebpf", "--features", features])
                .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core", "--", "-D", "warnings"]))
        })?;
    }
    Ok(())
}

/// A test executable cargo built.
struct TestBin {
    /// `package target` (`profiler live_faults`, `xtask (unit)`).
    name: String,
    /// An integration test of `profiler/tests/` (needs root to test anything).
    root: bool,
    /// The executable.
    path: PathBuf,
    /// Its package's directory (cargo runs tests there).
    dir: PathBuf,
}

/// What a `cargo test --no-run` built.
struct Built {
    /// The test executables.
    tests: Vec<TestBin>,
    /// The examples (name, executable).
    examples: Vec<(String, PathBuf)>,
}

/// Builds the test executables `args` select (`cargo test --no-run`) and lists them.
fn build_tests(args: &[&str]) -> Result<Built> {
    let out = cargo()
        .args(["test", "--no-run", "--message-format", "json-render-diagnostics"])
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the tests ({}) failed", args.join(" "));
    }
    let mut bins = Vec::new();
    let mut examples = Vec::new();
    for v in
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(path) = v["executable"].as_str() else { continue };
        let kind = v["target"]["kind"][0].as_str().unwrap_or_default();
        let target = v["target"]["name"].as_str().unwrap_or_default();
        if kind == "example" {
            examples.push((target.to_string(), PathBuf::from(path)));
            continue;
        }
        if v["profile"]["test"] != true {
            continue;
        }
        let manifest = v["manifest_path"].as_str().map(PathBuf::from).unwrap_or_default();
        let package = manifest.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
        let package = package.unwrap_or_default();
        let name = match kind {
            "lib" => format!("{package} (unit)"),
            "bin" => format!("{package} bin {target} (unit)"),
            _ => format!("{package} {target}"),
        };
        bins.push(TestBin {
            name,
            root: kind == "test",
            path: PathBuf::from(path),
            dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
        });
    }
    // Unit tests first: quick, and a broken build of the pure code says so before the kernel tests run.
    bins.sort_by_key(|b| b.root);
    Ok(Built { tests: bins, examples })
}

/// How the root tests run: as root, through passwordless sudo, or (neither)
/// as this user, each test skipping and saying why.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Privilege {
    Root,
    Sudo,
    User,
}

fn privilege() -> Result<Privilege> {
    if is_root() {
        return Ok(Privilege::Root);
    }
    let sudo = Command::new("sudo").args(["-n", "true"]).status().is_ok_and(|s| s.success());
    if !sudo && in_ci() {
        bail!("CI=true but not root and no passwordless sudo: the kernel tests must run in CI");
    }
    if sudo {
        eprintln!("xtask: running the kernel tests through sudo");
        Ok(Privilege::Sudo)
    } else {
        eprintln!("xtask: not root and no passwordless sudo: the kernel tests will skip, each saying why");
        Ok(Privilege::User)
    }
}

/// Runs each of `bins` on its own, each a phase.
fn run_tests(bins: &[TestBin], how: Privilege, phases: &Phases) -> Result<()> {
    for b in bins {
        let mut cmd = if b.root && how == Privilege::Sudo {
            let mut c = Command::new("sudo");
            c.args(["-E", "env", &format!("PATH={}", util::path_env())]).arg(&b.path);
            c
        } else {
            Command::new(&b.path)
        };
        cmd.current_dir(&b.dir).env("PATH", util::path_env());
        eprintln!("xtask: running {}", b.name);
        phases.time(&format!("tests: {}", b.name), || run(&mut cmd))?;
    }
    Ok(())
}

/// The test binaries of the debug build, each run on its own; the doc
/// tests; the `bench` feature's build (the floor-backed count test and
/// lockprof-bench's unit tests) and its tests.
fn host_tests(bins: &[TestBin], phases: &Phases) -> Result<()> {
    let how = privilege()?;
    run_tests(bins, how, phases)?;
    phases.time("tests: doc", || run(cargo().args(["test", "--workspace", "--doc"])))?;
    let bench = phases.time("cargo build: host debug, feature bench (lockprof-bench, live_counts)", || {
        build_tests(&[
            "--package",
            "profiler",
            "--features",
            "bench",
            "--bin",
            "lockprof-bench",
            "--test",
            "live_counts",
        ])
    })?;
    run_tests(&bench.tests, how, phases)
}

/// The x86_64 tarball's binary, unpacked and run on this host as shipped.
fn smoke(tarball: &Path) -> Result<()> {
    let dir = workspace_root().join("target/dist/smoke");
    let bin = dist::extract_binary(tarball, &dir.join("unpacked"))?;
    let said = dist::smoke_test(&bin, X86_64, &dir.join("run"))?;
    eprintln!("xtask: release tarball {}: {said}", tarball.display());
    Ok(())
}

/// `cargo xtask dist --smoke`: the tarball of `arch` made now, then smoked.
pub fn dist_smoke(tarballs: &[(Arch, PathBuf)]) -> Result<()> {
    if !is_root() {
        bail!("the release smoke test runs lockprof doctor and record: it needs root");
    }
    let t = tarballs.iter().find(|(a, _)| *a == X86_64).map(|(_, t)| t.clone()).context("no x86_64 tarball made")?;
    smoke(&t)
}
