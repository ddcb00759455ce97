//! `cargo xtask vm-test`: lockprof inside real Debian kernels under QEMU
//! (TCG), x86_64 and arm64: the kprobe, fentry and tracepoint backends, hold
//! times and KVM directed yield, which the host kernel cannot show. The
//! guest runs a test binary (`profiler/tests/guest`) whose libtest verdict,
//! checked against `lockprof doctor --json`, is the result. `--matrix` boots
//! every kernel of [`kernel::Spec::MATRIX`] in turn and prints one table.
//! See ../shared/docs/vm-testing.md.

mod apt;
mod guest;
mod kernel;
mod packages;
mod results;
mod table;

use std::{
    fmt::Write as _,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};

use self::{
    guest::{Binaries, Payload},
    kernel::{Kernel, Spec},
    results::{Outcome, Run},
};
use crate::{
    dist::{self, AARCH64, Arch, X86_64},
    setup,
    util::{cargo, run, workspace_root},
};

/// Options.
pub struct Opts {
    /// An exact Debian kernel package (default: Debian stable's).
    pub kernel: Option<String>,
    /// Only this architecture's kernels (default: x86_64, or every one with `matrix`).
    pub arch: Option<Arch>,
    /// Boot every kernel of the matrix.
    pub matrix: bool,
    /// Give up on one guest after this long (default: [`guest::timeout`] of its architecture).
    pub timeout: Option<Duration>,
    /// Only resolve every kernel package of every suite from the indices.
    pub check_packages: bool,
    /// Only the guest checks whose names contain this (libtest's filter).
    pub filter: Option<String>,
}

fn vm_dir() -> PathBuf {
    workspace_root().join("target/vm")
}

/// The static binaries an `arch` guest runs: lockprof from that
/// architecture's release tarball (`cargo xtask dist`'s, unpacked), the test
/// binary, busybox, the VMM (x86_64) and the C workload.
fn build(arch: Arch) -> Result<Binaries> {
    let tarball = dist::tarball(arch)?;
    let lockprof = dist::extract_binary(&tarball, &vm_dir().join("dist").join(arch.name))?;
    eprintln!("xtask: the guests run the release tarball's lockprof ({})", tarball.display());
    let target = arch.triple;
    let vmm = if arch == X86_64 {
        run(cargo().args([
            "build",
            "--release",
            "--package",
            "profiler",
            "--example",
            "yield_vmm",
            "--target",
            target,
        ]))?;
        Some(workspace_root().join(format!("target/{target}/release/examples/yield_vmm")))
    } else {
        None
    };
    let out = cargo()
        .args(["test", "--release", "--package", "profiler", "--features", "guest-tests", "--test", "guest"])
        .args(["--no-run", "--message-format", "json", "--target", target])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("building the guest test binary")?;
    if !out.status.success() {
        bail!("building the guest test binary for {target} failed");
    }
    let tests = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "guest")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo named no guest test executable")?;
    Ok(Binaries { arch, busybox: busybox(arch)?, lockprof, tests, vmm, workload: c_workload(arch)? })
}

/// A static busybox for `arch`: the host's for x86_64, Debian's
/// busybox-static for arm64 (fetched through the private apt state).
fn busybox(arch: Arch) -> Result<PathBuf> {
    if arch == X86_64 {
        return ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .context("busybox not found (apt-get install busybox-static)");
    }
    let dir = vm_dir().join(format!("busybox-{}", arch.deb));
    let bin = dir.join("bin/busybox");
    if !bin.exists() {
        let suite = apt::SUITES.iter().find(|s| s.name == "bookworm").context("no bookworm suite")?;
        let deb = apt::Apt::open(&vm_dir().join("apt"), *suite, arch)?.download("busybox-static")?;
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))
            .with_context(|| format!("unpacking {}", deb.display()))?;
    }
    ensure!(bin.exists(), "{}: no bin/busybox in Debian's busybox-static ({})", dir.display(), arch.deb);
    Ok(bin)
}

/// The C compiler that makes `arch`'s static binaries: the host's, or
/// Debian's cross compiler (with its static glibc).
fn c_compiler(arch: Arch) -> &'static str {
    if arch == AARCH64 { "aarch64-linux-gnu-gcc" } else { "cc" }
}

/// The user-stack checks' C workload, linked statically (glibc's `libc.a`)
/// so that the guest needs no loader; frame pointers kept everywhere, so a
/// frame-pointer walk sees `lockprof_test_thread -> lockprof_test_loop ->
/// lockprof_test_writer`.
fn c_workload(arch: Arch) -> Result<PathBuf> {
    let src = workspace_root().join("profiler/tests/data/ustack/lockprof_test.c");
    let out = vm_dir().join(format!("lockprof_test-{}", arch.name));
    std::fs::create_dir_all(vm_dir())?;
    let cc = c_compiler(arch);
    run(Command::new(cc)
        .args(["-static", "-O2", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"])
        .args(["-fno-optimize-sibling-calls", "-pthread", "-Wl,--build-id=sha1", "-o"])
        .arg(&out)
        .arg(&src))
    .with_context(|| {
        format!("building the static C workload for {} ({cc} -static: needs glibc's libc.a)", arch.name)
    })?;
    Ok(out)
}

/// One kernel: prepared, booted, parsed.
struct Outcome1 {
    label: String,
    kernel: Option<Kernel>,
    run: Run,
    problems: Vec<String>,
    secs: f64,
}

fn one(spec: &Spec, bins: &Binaries, timeout: Duration, filter: Option<&str>) -> Outcome1 {
    let started = Instant::now();
    let label = spec.label();
    let attempt = || -> Result<(Kernel, Run)> {
        let k = kernel::prepare(spec, &vm_dir())?;
        let modules = match &k.modules {
            Ok(m) => kernel::module_order(m, guest::kvm_modules(bins.arch))?,
            Err(_) => Vec::new(),
        };
        let initrd = guest::initramfs(&vm_dir(), bins, &modules, k.modules.as_ref().err(), &Payload::Tests(filter))?;
        eprintln!("xtask: booting {} ({}) under {} (TCG, 4 vCPUs)", k.package, k.release, guest::qemu(bins.arch).0);
        let lines = guest::boot(bins.arch, &k.vmlinuz, &initrd, timeout, &format!("vm {}| ", k.release))?;
        let log = vm_dir().join(format!("{}.console.log", k.release));
        std::fs::write(&log, lines.join("\n") + "\n").with_context(|| format!("writing {}", log.display()))?;
        Ok((k, results::parse(&lines)))
    };
    match attempt() {
        Ok((k, run)) => {
            let problems = run.problems();
            Outcome1 {
                label: format!("{label}: {}", k.release),
                kernel: Some(k),
                run,
                problems,
                secs: started.elapsed().as_secs_f64(),
            }
        }
        Err(e) => Outcome1 {
            label,
            kernel: None,
            run: Run::default(),
            problems: vec![format!("{e:#}")],
            secs: started.elapsed().as_secs_f64(),
        },
    }
}

fn table(outs: &[Outcome1]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| kernel | backend | check | result |\n|---|---|---|---|");
    for o in outs {
        for c in &o.run.checks {
            let (b, check) = c.split();
            let res = match &c.outcome {
                Outcome::Pass => "pass".to_string(),
                Outcome::Fail => "**FAIL**".to_string(),
                Outcome::Skip(why) => format!("skip: {why}"),
            };
            let _ = writeln!(s, "| {} | {b} | {check} | {res} |", o.label);
        }
        for p in &o.problems {
            let _ = writeln!(s, "| {} | - | harness | **FAIL**: {p} |", o.label);
        }
    }
    s
}

/// QEMU, busybox, the unpackers of kernel packages and a C compiler, for
/// each of `arches`; the Rust target of each.
fn guest_tools(arches: &[Arch]) -> Result<()> {
    let mut tools = vec![
        ("busybox", "busybox-static"),
        ("cpio", "cpio"),
        ("xz", "xz-utils"),
        ("zstd", "zstd"),
        ("cc", "build-essential"),
    ];
    for arch in arches {
        let (qemu, _, _) = guest::qemu(*arch);
        if *arch == AARCH64 {
            tools.extend([
                (qemu, "qemu-system-arm"),
                ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
                ("aarch64-linux-gnu-gcc", "libc6-dev-arm64-cross"),
            ]);
        } else {
            tools.push((qemu, "qemu-system-x86"));
        }
        setup::rust_target(arch.triple)?;
    }
    setup::apt_tools(&tools)?;
    Ok(())
}

/// Boots the default guest kernel with `script` as its payload (after the
/// usual prelude); returns the kernel package, its release and the
/// console's lines. For guest-side benchmarks.
pub fn run_script(script: &str, timeout: Duration) -> Result<(String, String, Vec<String>)> {
    guest_tools(&[X86_64])?;
    let bins = build(X86_64)?;
    let k = kernel::prepare(&Spec::default_kernel(X86_64), &vm_dir())?;
    let initrd = guest::initramfs(&vm_dir(), &bins, &[], None, &Payload::Script(script))?;
    eprintln!("xtask: booting {} ({}) under QEMU (TCG, 4 vCPUs)", k.package, k.release);
    let lines = guest::boot(X86_64, &k.vmlinuz, &initrd, timeout, &format!("vm {}| ", k.release))?;
    Ok((k.package, k.release, lines))
}

/// Runs the guest tests on one kernel or the matrix.
pub fn run_vm(o: &Opts) -> Result<()> {
    let started = Instant::now();
    if o.check_packages || o.matrix {
        // Every kernel package the harness could be asked for resolves to an
        // image (and modules, where the archive has them), without downloads.
        eprint!("xtask: kernel packages of every suite:\n{}", kernel::check_packages(&vm_dir())?);
        if o.check_packages {
            return Ok(());
        }
    }
    let specs: Vec<Spec> = match (&o.kernel, o.matrix) {
        (Some(k), _) => vec![Spec::package(k, o.arch.unwrap_or(X86_64))?],
        (None, true) => Spec::MATRIX.into_iter().filter(|s| o.arch.is_none_or(|a| s.arch() == a)).collect(),
        (None, false) => vec![Spec::default_kernel(o.arch.unwrap_or(X86_64))],
    };
    if let Some(f) = &o.filter {
        ensure!(
            !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "--filter {f:?}: a check name or part of one (letters, digits, _ and :)"
        );
    }
    let arches: Vec<Arch> = dist::ARCHES.into_iter().filter(|a| specs.iter().any(|s| s.arch() == *a)).collect();
    guest_tools(&arches)?;
    // Each architecture's binaries, built before any guest boots.
    let mut bins = Vec::new();
    for arch in arches {
        bins.push(build(arch)?);
    }
    let mut outs: Vec<Outcome1> = Vec::new();
    for s in &specs {
        let b = bins.iter().find(|b| b.arch == s.arch()).context("no binaries for a kernel's architecture")?;
        outs.push(one(s, b, o.timeout.unwrap_or(guest::timeout(b.arch)), o.filter.as_deref()));
    }
    let t = table(&outs);
    println!("\n{t}");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for out in &outs {
        let (p, f, s) = out.run.counts();
        passed += p;
        failed += f + out.problems.len();
        skipped += s;
        println!(
            "vm-test: {}: {p} passed, {} failed, {s} skipped in {:.0} s ({})",
            out.label,
            f + out.problems.len(),
            out.secs,
            out.kernel.as_ref().map_or("not booted", |k| k.package.as_str())
        );
    }
    let total = started.elapsed().as_secs_f64();
    println!("vm-test: {passed} passed, {failed} failed, {skipped} skipped in {total:.0} s");
    std::fs::create_dir_all(vm_dir())?;
    std::fs::write(vm_dir().join("summary.md"), &t)?;
    // A filtered run checks part of each kernel, one architecture's matrix
    // part of the kernels: neither is the README's table.
    if o.matrix && o.filter.is_none() && o.arch.is_none() {
        let rows: Vec<(String, &Run)> = outs.iter().map(|o| (o.label.clone(), &o.run)).collect();
        let kernels = table::render(&rows);
        let readme_path = workspace_root().join("README.md");
        let readme = std::fs::read_to_string(&readme_path).context("reading README.md")?;
        match table::splice(&readme, &kernels) {
            Some(new) if new != readme => {
                std::fs::write(&readme_path, new).context("writing README.md")?;
                eprintln!("xtask: README.md's kernel support table updated from this run");
            }
            Some(_) => {}
            None => eprintln!("xtask: README.md has no kernel-matrix marks; the table was not written"),
        }
    }
    // Last, so that a log's tail says why: each failure in the harness's words.
    for out in &outs {
        for c in out.run.checks.iter().filter(|c| c.outcome == Outcome::Fail) {
            println!("vm-test: FAILED {} {}: {}", out.label, c.name, c.message.as_deref().unwrap_or("(no message)"));
        }
        for p in &out.problems {
            println!("vm-test: FAILED {} harness: {p}", out.label);
        }
    }
    if failed > 0 {
        bail!("vm-test: {failed} guest check(s) failed");
    }
    Ok(())
}
