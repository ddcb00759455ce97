//! One guest boot: an initramfs of busybox, the static lockprof, the guest
//! test binary, the yield_to VMM (x86_64) and the kernel's own KVM modules;
//! QEMU (TCG: `qemu-system-x86_64`, or `qemu-system-aarch64 -machine virt`
//! for arm64) boots it and the console is captured line by line.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::{
    dist::{AARCH64, Arch},
    util::run,
};

/// The binaries the guest runs, all static and for the guest's architecture.
pub struct Binaries {
    /// The architecture.
    pub arch: Arch,
    /// busybox (the guest's shell and tools).
    pub busybox: PathBuf,
    /// Static lockprof (doctor --json).
    pub lockprof: PathBuf,
    /// Static guest test binary (libtest-mimic harness).
    pub tests: PathBuf,
    /// Static yield_to VMM (x86_64 only: it runs a real-mode x86 guest and
    /// makes x86's `KVM_HC_SCHED_YIELD` hypercall).
    pub vmm: Option<PathBuf>,
    /// Static C workload with known user frames (`profiler/tests/data/ustack/lockprof_test.c`).
    pub workload: PathBuf,
}

/// The KVM modules of `arch`'s guest kernel, dependencies resolved by the
/// caller (Debian builds arm64's KVM into the kernel).
pub fn kvm_modules(arch: Arch) -> &'static [&'static str] {
    if arch == AARCH64 { &[] } else { &["kvm-amd"] }
}

/// What every guest does first: mount the pseudo file systems, say hello.
const PRELUDE: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tracefs nodev /sys/kernel/tracing
mount -t debugfs nodev /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
# cgroup v2 where the kernel has it: the cgroup checks make child cgroups here.
if grep -qw cgroup2 /proc/filesystems; then
  mkdir -p /sys/fs/cgroup
  mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "cgroup2: mount failed"
fi
echo LOCKPROF-VM-BEGIN $(uname -r)
cd /tmp
"#;

/// The test payload: doctor's facts, the KVM modules, the guest test binary.
const TESTS: &str = r#"echo LOCKPROF-DOCTOR-BEGIN
/lockprof doctor --json
echo LOCKPROF-DOCTOR-END
cat /modules/missing > /tmp/kvm-modules.log 2>/dev/null || : > /tmp/kvm-modules.log
for m in $(cat /modules/order); do
  insmod /modules/$m.ko 2>> /tmp/kvm-modules.log || echo "insmod $m failed" >> /tmp/kvm-modules.log
done
# Why KVM did not come up, in the kernel's words.
[ -c /dev/kvm ] || dmesg | grep -i -E 'kvm|svm' | grep -v 'CPU features' | sed 's/^\[[ 0-9.]*\] //' | sort -u | tail -3 >> /tmp/kvm-modules.log
sed 's/^/kvm-modules: /' /tmp/kvm-modules.log
LOCKPROF_YIELD_VMM=/yield_vmm /guest --test-threads 1 --color never @FILTER@
echo LOCKPROF-VM-EXIT=$?
"#;

/// What the guest runs after the prelude.
pub enum Payload<'a> {
    /// The guest test binary (`vm-test`), with libtest's name filter (checked:
    /// letters, digits, `_` and `:` only, so it is safe in the shell script).
    Tests(Option<&'a str>),
    /// A shell script (`bench --guest`).
    Script(&'a str),
}

fn init(payload: &Payload<'_>) -> String {
    let body = match payload {
        Payload::Tests(filter) => TESTS.replace("@FILTER@", filter.unwrap_or_default()),
        Payload::Script(s) => s.to_string(),
    };
    format!("{PRELUDE}{body}\npoweroff -f\n")
}

/// Builds the initramfs in `dir`; returns the archive.
/// `no_modules` says why `modules` is empty, when the kernel has none here.
pub fn initramfs(
    dir: &Path,
    bins: &Binaries,
    modules: &[(String, Vec<u8>)],
    no_modules: Option<&String>,
    payload: &Payload<'_>,
) -> Result<PathBuf> {
    let root = dir.join("initramfs");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("bin"))?;
    std::fs::create_dir_all(root.join("modules"))?;
    std::fs::copy(&bins.busybox, root.join("bin/busybox"))?;
    std::fs::copy(&bins.lockprof, root.join("lockprof"))?;
    std::fs::copy(&bins.tests, root.join("guest"))?;
    let mut executables = String::from("init lockprof guest lockprof_test bin/busybox");
    if let Some(vmm) = &bins.vmm {
        std::fs::copy(vmm, root.join("yield_vmm"))?;
        executables.push_str(" yield_vmm");
    }
    std::fs::copy(&bins.workload, root.join("lockprof_test"))?;
    let mut order = String::new();
    for (name, bytes) in modules {
        std::fs::write(root.join("modules").join(format!("{name}.ko")), bytes)?;
        order.push_str(name);
        order.push('\n');
    }
    std::fs::write(root.join("modules/order"), order)?;
    if let Some(why) = no_modules {
        std::fs::write(root.join("modules/missing"), format!("booted without modules: {why}\n"))?;
    }
    std::fs::write(root.join("init"), init(payload))?;
    let out = dir.join("initrd.gz");
    let script = format!("chmod 755 {executables} && find . | cpio -o -H newc --quiet | gzip -1 > '{}'", out.display());
    run(Command::new("sh").current_dir(&root).args(["-c", &script])).context("building the initramfs")?;
    Ok(out)
}

/// How long an `arch` guest may take, booting included. The guest test
/// binary's budget (`profiler/tests/guest/until.rs`) fits inside it: keep both
/// in step. arm64 under TCG sets up each session more slowly (its newest
/// kernel's checks take ~580 s on this 2-CPU host when all pass).
pub fn timeout(arch: Arch) -> Duration {
    Duration::from_secs(if arch == AARCH64 { 1080 } else { 720 })
}

/// The QEMU that emulates `arch`, its machine options and the guest's console.
pub fn qemu(arch: Arch) -> (&'static str, &'static [&'static str], &'static str) {
    if arch == AARCH64 {
        // `pauth-impdef`: pointer authentication with QEMU's cheap hash instead
        // of QARMA, which TCG computes slowly on every signed return.
        ("qemu-system-aarch64", &["-machine", "virt", "-cpu", "max,pauth-impdef=on"], "ttyAMA0")
    } else {
        ("qemu-system-x86_64", &["-cpu", "max"], "ttyS0")
    }
}

/// Boots `vmlinuz` with `initrd` under QEMU (TCG, 4 vCPUs, one host thread)
/// and returns the console's lines, each also echoed with `prefix`. Killed
/// after `timeout`.
pub fn boot(arch: Arch, vmlinuz: &Path, initrd: &Path, timeout: Duration, prefix: &str) -> Result<Vec<String>> {
    let (program, machine, console) = qemu(arch);
    let mut child = Command::new(program)
        .args(["-accel", "tcg,thread=single", "-m", "2G", "-smp", "4"])
        .args(machine)
        .args(["-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console={console} panic=-1 quiet"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let done = Arc::new(AtomicBool::new(false));
    let pid = child.id() as i32;
    {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() > timeout {
                    eprintln!("xtask: the guest ran past {} s; killing it", timeout.as_secs());
                    // SAFETY: kill(2) on our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    }
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        println!("{prefix}{line}");
        lines.push(line);
    }
    let _ = child.wait();
    done.store(true, Ordering::Relaxed);
    Ok(lines)
}
