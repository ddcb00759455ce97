//! `cargo xtask vm-test`: lockprof inside real Debian kernels under QEMU
//! (TCG), x86_64 and arm64: the kprobe, fentry and tracepoint backends, hold
//! times and KVM directed yield, which the host kernel cannot show. The
//! guest runs a test binary (`profiler/tests/guest`) whose libtest verdict,
//! checked against `lockprof doctor --json`, is the result. `--matrix` boots
//! every kernel of [`kernel::Spec::MATRIX`], as many at a time as the host
//! has CPUs (each TCG guest runs on one host thread), longest first, and
//! prints one table. See ../shared/docs/vm-testing.md.

mod accel;
mod apt;
mod guest;
mod kernel;
mod packages;
mod results;
mod table;

use std::{
    collections::VecDeque,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};

use self::{
    guest::{Accel, Binaries, Payload},
    kernel::{Kernel, Spec},
    results::{Outcome, Run},
};
use crate::{
    dist::{self, AARCH64, Arch, X86_64},
    phases::Phases,
    setup,
    util::{cargo, run, workspace_root},
};

/// Options.
#[derive(Clone)]
pub struct Opts {
    /// An exact Debian kernel package (default: Debian stable's).
    pub kernel: Option<String>,
    /// Only this architecture's kernels (default: x86_64, or every one with `matrix`).
    pub arch: Option<Arch>,
    /// Boot every kernel of the matrix.
    pub matrix: bool,
    /// Only the newest x86_64 kernel of the matrix (`cargo xtask test --quick`).
    pub quick: bool,
    /// Give up on one guest after this long (default: [`guest::timeout`] of its architecture).
    pub timeout: Option<Duration>,
    /// Only resolve every kernel package of every suite from the indices.
    pub check_packages: bool,
    /// Only the guest checks whose names contain this (libtest's filter).
    pub filter: Option<String>,
    /// The release tarballs this run already made (`cargo xtask test`), by
    /// architecture; an architecture missing here gets its tarball made.
    pub tarballs: Vec<(Arch, PathBuf)>,
    /// Guests booted at a time (default: the host's CPUs).
    pub lanes: Option<usize>,
}

fn vm_dir() -> PathBuf {
    workspace_root().join("target/vm")
}

/// The static binaries an `arch` guest runs: lockprof from that
/// architecture's release tarball (`cargo xtask dist`'s, unpacked), the test
/// binary, busybox, the VMM (x86_64) and the C workload.
fn build(arch: Arch, made: Option<&Path>) -> Result<Binaries> {
    let tarball = match made {
        Some(t) => t.to_path_buf(),
        None => dist::tarball(arch)?,
    };
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
        .args(["test", "--release", "--package", "profiler", "--test", "guest"])
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
    accel: String,
}

/// A kernel's own working directory (its initramfs), so guests run side by side.
fn guest_dir(spec: &Spec) -> PathBuf {
    let slug: String =
        spec.label().chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
    vm_dir().join("guests").join(format!("{}-{slug}", spec.arch().name))
}

/// Boots prepared kernel `k` and runs the checks: its initramfs, the
/// accelerator, the boot; each part a phase of its own.
fn one(
    spec: &Spec,
    k: Result<Kernel>,
    bins: &Binaries,
    timeout: Duration,
    filter: Option<&str>,
    phases: &Phases,
) -> Outcome1 {
    let started = Instant::now();
    let label = spec.label();
    let mut accel_said = String::from("not booted");
    let attempt = || -> Result<(Kernel, Run)> {
        let k = k?;
        let dir = guest_dir(spec);
        std::fs::create_dir_all(&dir)?;
        let modules = match &k.modules {
            Ok(m) => kernel::module_order(m, guest::kvm_modules(bins.arch))?,
            Err(_) => Vec::new(),
        };
        let initrd = guest::initramfs(&dir, bins, &modules, k.modules.as_ref().err(), &Payload::Tests(filter))?;
        let t = Instant::now();
        let choice = accel::choose(bins.arch, &k.vmlinuz, &initrd, &label);
        phases.add(&format!("guest {label}: accelerator"), t, t.elapsed(), &choice.why);
        accel_said = choice.why.clone();
        eprintln!(
            "xtask: booting {} ({}) under {} ({}, 4 vCPUs): {}",
            k.package,
            k.release,
            guest::qemu(bins.arch).0,
            choice.accel.name(),
            choice.why
        );
        let t = Instant::now();
        let prefix = format!("vm {}| ", k.release);
        let c = guest::boot(&guest::Boot {
            arch: bins.arch,
            accel: choice.accel,
            vmlinuz: &k.vmlinuz,
            initrd: &initrd,
            append: "",
            timeout,
            prefix: &prefix,
            quiet: false,
        })?;
        let log = vm_dir().join(format!("{}.console.log", k.release));
        std::fs::write(&log, c.lines.join("\n") + "\n").with_context(|| format!("writing {}", log.display()))?;
        let run = results::parse(&c.lines);
        let (p, f, sk) = run.counts();
        let accel = choice.accel.name();
        phases.add(&format!("guest {label}: boot"), t, c.boot, &accel);
        phases.add(
            &format!("guest {label}: checks"),
            t + c.boot,
            c.payload,
            &format!(
                "{p} passed, {f} failed, {sk} skipped{}",
                c.killed.map(|k| format!("; killed: {k}")).unwrap_or_default()
            ),
        );
        phases.add(&format!("guest {label}: teardown"), t + c.boot + c.payload, c.teardown, "poweroff");
        Ok((k, run))
    };
    let out = attempt();
    let secs = started.elapsed().as_secs_f64();
    match out {
        Ok((k, run)) => {
            let problems = run.problems();
            Outcome1 {
                label: format!("{label}: {}", k.release),
                kernel: Some(k),
                run,
                problems,
                secs,
                accel: accel_said,
            }
        }
        Err(e) => Outcome1 {
            label,
            kernel: None,
            run: Run::default(),
            problems: vec![format!("{e:#}")],
            secs,
            accel: accel_said,
        },
    }
}

/// How long a kernel's guest is expected to take, for longest-first lanes:
/// what it took last time here (`target/vm/durations`), else a guess by
/// architecture (arm64's sessions are slower under TCG).
fn expected_secs(spec: &Spec, last: &[(String, f64)]) -> f64 {
    last.iter().find(|(l, _)| *l == spec.label()).map(|(_, s)| *s).unwrap_or(match (spec.arch(), spec.label()) {
        (AARCH64, l) if l.contains("newest") => 700.0,
        (AARCH64, _) => 300.0,
        (_, l) if l.contains("PREEMPT_RT") => 250.0,
        _ => 400.0,
    })
}

fn durations_file() -> PathBuf {
    vm_dir().join("durations")
}

/// `label<TAB>seconds` lines of the last run.
fn last_durations() -> Vec<(String, f64)> {
    std::fs::read_to_string(durations_file())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(l, s)| Some((l.to_string(), s.parse().ok()?)))
        .collect()
}

/// Runs `jobs` (index, expected seconds) on `lanes` threads, longest first;
/// `f` gets the index. Returns the outcomes in index order.
fn in_lanes<T: Send>(jobs: Vec<(usize, f64)>, lanes: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut order = jobs;
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    let queue: Mutex<VecDeque<usize>> = Mutex::new(order.iter().map(|(i, _)| *i).collect());
    let done: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..lanes.max(1) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some(i) = next else { break };
                    let out = f(i);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((i, out));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, t)| t).collect()
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

/// The Debian packages the guests of `arches` need: QEMU, busybox, the
/// unpackers of kernel packages and a C compiler (arm64's cross compiler).
pub fn guest_packages(arches: &[Arch]) -> Vec<(&'static str, &'static str)> {
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
    }
    tools
}

/// The guest packages of `arches` and the Rust target of each.
fn guest_tools(arches: &[Arch]) -> Result<()> {
    for arch in arches {
        setup::rust_target(arch.triple)?;
    }
    setup::apt_tools(&guest_packages(arches))
}

/// Boots the default guest kernel with `script` as its payload (after the
/// usual prelude); returns the kernel package, its release and the
/// console's lines. For guest-side benchmarks.
pub fn run_script(script: &str, timeout: Duration) -> Result<(String, String, Vec<String>)> {
    guest_tools(&[X86_64])?;
    let bins = build(X86_64, None)?;
    let k = kernel::prepare(&Spec::default_kernel(X86_64), &vm_dir())?;
    let initrd = guest::initramfs(&vm_dir(), &bins, &[], None, &Payload::Script(script))?;
    eprintln!("xtask: booting {} ({}) under QEMU (TCG, 4 vCPUs)", k.package, k.release);
    let prefix = format!("vm {}| ", k.release);
    let c = guest::boot(&guest::Boot {
        arch: X86_64,
        accel: Accel::Tcg,
        vmlinuz: &k.vmlinuz,
        initrd: &initrd,
        append: "",
        timeout,
        prefix: &prefix,
        quiet: false,
    })?;
    Ok((k.package, k.release, c.lines))
}

/// The kernels a run boots, fetched and unpacked, and the tools installed:
/// everything from the network, which `cargo xtask test` does while it
/// builds and lints.
pub struct Fetched {
    specs: Vec<Spec>,
    arches: Vec<Arch>,
    kernels: Vec<Result<Kernel>>,
}

/// The kernels `o` asks for (the architectures of the matrix, or one).
fn specs(o: &Opts) -> Result<Vec<Spec>> {
    Ok(match (&o.kernel, o.matrix) {
        (Some(k), _) => vec![Spec::package(k, o.arch.unwrap_or(X86_64))?],
        (None, true) => Spec::MATRIX.into_iter().filter(|s| o.arch.is_none_or(|a| s.arch() == a)).collect(),
        (None, false) if o.quick => vec![Spec::newest(X86_64)],
        (None, false) => vec![Spec::default_kernel(o.arch.unwrap_or(X86_64))],
    })
}

/// The architectures `o`'s guests run (what the release must be built for).
pub fn arches(o: &Opts) -> Result<Vec<Arch>> {
    let specs = specs(o)?;
    Ok(dist::ARCHES.into_iter().filter(|a| specs.iter().any(|s| s.arch() == *a)).collect())
}

/// Resolves (`--matrix`: every package of every suite first), installs the
/// tools, and fetches every kernel before any boots: kernels of one suite
/// and architecture share an apt state, which is not for two at once.
pub fn fetch(o: &Opts, phases: &Phases) -> Result<Fetched> {
    if let Some(f) = &o.filter {
        ensure!(
            !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "--filter {f:?}: a check name or part of one (letters, digits, _ and :)"
        );
    }
    if o.matrix {
        // Every kernel package the harness could be asked for resolves to an
        // image (and modules, where the archive has them), without downloads.
        let report = phases.time("guest kernels: resolve every package", || kernel::check_packages(&vm_dir()))?;
        eprint!("xtask: kernel packages of every suite:\n{report}");
    }
    let specs = specs(o)?;
    let arches = arches(o)?;
    phases.time("guest tools", || guest_tools(&arches))?;
    let kernels = phases.time("guest kernels: fetch and unpack", || {
        Ok(specs.iter().map(|s| kernel::prepare(s, &vm_dir())).collect())
    })?;
    Ok(Fetched { specs, arches, kernels })
}

/// Runs the guest tests on one kernel or the matrix, each part a phase of `phases`.
pub fn run_vm(o: &Opts, phases: &Phases) -> Result<()> {
    if o.check_packages {
        eprint!("xtask: kernel packages of every suite:\n{}", kernel::check_packages(&vm_dir())?);
        return Ok(());
    }
    let fetched = fetch(o, phases)?;
    boot_all(o, fetched, phases)
}

/// Builds each architecture's guest binaries, then boots every fetched
/// kernel, as many at a time as `o.lanes` (default: the CPUs), and prints
/// (and, for a whole matrix, writes into the README) the table.
pub fn boot_all(o: &Opts, fetched: Fetched, phases: &Phases) -> Result<()> {
    let started = Instant::now();
    let Fetched { specs, arches, kernels } = fetched;
    // Each architecture's binaries, built before any guest boots.
    let mut bins = Vec::new();
    for arch in arches {
        let made = o.tarballs.iter().find(|(a, _)| *a == arch).map(|(_, t)| t.as_path());
        bins.push(phases.time(&format!("cargo build: guest binaries ({})", arch.triple), || build(arch, made))?);
    }
    let lanes = o.lanes.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let last = last_durations();
    let jobs: Vec<(usize, f64)> = specs.iter().enumerate().map(|(i, s)| (i, expected_secs(s, &last))).collect();
    eprintln!("xtask: {} guest(s), {} at a time, longest first", specs.len(), lanes.min(specs.len()));
    let kernels: Vec<Mutex<Option<Result<Kernel>>>> = kernels.into_iter().map(|k| Mutex::new(Some(k))).collect();
    let outs: Vec<Outcome1> = in_lanes(jobs, lanes, |i| {
        let s = &specs[i];
        let k = kernels[i].lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(|| bail_taken(s));
        match bins.iter().find(|b| b.arch == s.arch()) {
            Some(b) => one(s, k, b, o.timeout.unwrap_or(guest::timeout(b.arch)), o.filter.as_deref(), phases),
            None => Outcome1 {
                label: s.label(),
                kernel: None,
                run: Run::default(),
                problems: vec!["no binaries for the kernel's architecture".into()],
                secs: 0.0,
                accel: String::new(),
            },
        }
    });
    // Only a whole run's times order the next one.
    if o.filter.is_none() {
        let mut durations: Vec<(String, f64)> =
            last.into_iter().filter(|(l, _)| !specs.iter().any(|s| s.label() == *l)).collect();
        durations.extend(specs.iter().zip(&outs).map(|(s, o)| (s.label(), o.secs)));
        let text: String = durations.iter().map(|(l, s)| format!("{l}\t{s:.0}\n")).collect();
        let _ = std::fs::write(durations_file(), text);
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
            "vm-test: {}: {p} passed, {} failed, {s} skipped in {:.0} s ({}; {})",
            out.label,
            f + out.problems.len(),
            out.secs,
            out.kernel.as_ref().map_or("not booted", |k| k.package.as_str()),
            out.accel
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
        crate::readme::write_section(table::BEGIN, table::END, &table::render(&rows), "kernel support table")?;
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

/// A kernel's slot was taken twice (cannot happen: each index runs once).
fn bail_taken(s: &Spec) -> Result<Kernel> {
    Err(anyhow::anyhow!("{}: kernel already booted", s.label()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_take_the_longest_first_and_give_outcomes_in_order() {
        let started = Mutex::new(Vec::new());
        let out = in_lanes(vec![(0, 10.0), (1, 700.0), (2, 300.0), (3, 400.0)], 1, |i| {
            started.lock().expect("lock").push(i);
            i * 10
        });
        assert_eq!(out, [0, 10, 20, 30]);
        assert_eq!(started.into_inner().expect("lock"), [1, 3, 2, 0]);
    }

    #[test]
    fn two_lanes_run_side_by_side() {
        // Each job waits for the other to have started: only two lanes at once let both see it.
        let started = std::sync::atomic::AtomicUsize::new(0);
        let out = in_lanes(vec![(0, 1.0), (1, 1.0)], 2, |_| {
            started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(60);
            while started.load(std::sync::atomic::Ordering::SeqCst) < 2 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            started.load(std::sync::atomic::Ordering::SeqCst)
        });
        assert_eq!(out, [2, 2]);
    }

    #[test]
    fn expected_durations_come_from_the_last_run_first() {
        let newest_arm = Spec::newest(AARCH64);
        assert_eq!(expected_secs(&newest_arm, &[]), 700.0);
        assert_eq!(expected_secs(&newest_arm, &[(newest_arm.label(), 512.0)]), 512.0);
        assert!(expected_secs(&Spec::default_kernel(X86_64), &[]) < 700.0);
    }
}
