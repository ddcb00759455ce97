//! One guest boot: an initramfs of busybox, the static lockprof, the guest
//! test binary, the yield_to VMM (x86_64) and the kernel's own KVM modules;
//! QEMU (TCG: `qemu-system-x86_64`, or `qemu-system-aarch64 -machine virt`
//! for arm64) boots it and the console is captured line by line.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
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
# The accelerator probe (xtask/src/vm/accel.rs): booted is all it asks.
if grep -qw lockprof.probe /proc/cmdline; then echo LOCKPROF-VM-EXIT=0; poweroff -f; fi
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
        Payload::Script(s) => format!("{s}\necho {END_MARK}$?"),
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

/// One boot: what and how.
#[derive(Clone, Copy)]
pub struct Boot<'a> {
    /// The guest's architecture.
    pub arch: Arch,
    /// The accelerator.
    pub accel: Accel,
    /// The kernel image.
    pub vmlinuz: &'a Path,
    /// The initramfs.
    pub initrd: &'a Path,
    /// More of the kernel's command line.
    pub append: &'a str,
    /// Killed after this long.
    pub timeout: Duration,
    /// Each console line is echoed with this in front...
    pub prefix: &'a str,
    /// ...unless quiet.
    pub quiet: bool,
}

/// How QEMU runs a guest: KVM where the host can run this kernel under it
/// (see [`super::accel`]), TCG elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// `-accel kvm` with this `-cpu` model.
    Kvm(&'static str),
    /// `-accel tcg,thread=single`: one host thread for all vCPUs.
    Tcg,
}

impl Accel {
    /// QEMU's arguments for it, the machine's CPU model included.
    fn args(self, arch: Arch) -> Vec<&'static str> {
        let (_, machine, _) = qemu(arch);
        match self {
            Accel::Kvm(cpu) => {
                let mut a = vec!["-accel", "kvm"];
                // The machine options but the CPU model, which KVM's replaces.
                let mut m = machine.iter();
                while let Some(o) = m.next() {
                    if *o == "-cpu" {
                        m.next();
                    } else {
                        a.push(o);
                    }
                }
                a.extend(["-cpu", cpu]);
                a
            }
            Accel::Tcg => [&["-accel", "tcg,thread=single"][..], machine].concat(),
        }
    }

    /// `KVM (-cpu host)` or `TCG`.
    pub fn name(self) -> String {
        match self {
            Accel::Kvm(cpu) => format!("KVM (-cpu {cpu})"),
            Accel::Tcg => "TCG".into(),
        }
    }
}

/// Lines the guest's `/init` prints when it starts its payload.
pub const BEGIN_MARK: &str = "LOCKPROF-VM-BEGIN";

/// A guest's console and how long each part of its life took.
pub struct Console {
    /// The console's lines.
    pub lines: Vec<String>,
    /// QEMU started to `/init` running ([`BEGIN_MARK`]); the whole run when it never did.
    pub boot: Duration,
    /// `/init` running to the payload's last line (`LOCKPROF-VM-EXIT=`).
    pub payload: Duration,
    /// From there to QEMU's exit (poweroff).
    pub teardown: Duration,
    /// The last lines QEMU wrote to its stderr (why KVM stopped a guest).
    pub stderr: Vec<String>,
    /// Killed: past its time, or by `fatal_stderr`.
    pub killed: Option<String>,
}

/// Boots `vmlinuz` with `initrd` under QEMU (4 vCPUs) with `accel`, and
/// returns the console, each line also echoed with `prefix` (unless
/// `quiet`). Killed after `timeout`, or as soon as QEMU's stderr says KVM
/// stopped the guest (an emulation failure leaves QEMU paused, not gone).
pub fn boot(b: &Boot<'_>) -> Result<Console> {
    let Boot { arch, accel, vmlinuz, initrd, append, timeout, prefix, quiet } = *b;
    let (program, _, console) = qemu(arch);
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(accel.args(arch))
        .args(["-m", "2G", "-smp", "4"])
        .args(["-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console={console} panic=-1 quiet {append}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let stderr = child.stderr.take().context("qemu stderr")?;
    let done = Arc::new(AtomicBool::new(false));
    let killed: Arc<Mutex<Option<String>>> = Arc::default();
    let pid = child.id() as i32;
    let kill = {
        let killed = killed.clone();
        move |why: String| {
            let mut k = killed.lock().unwrap_or_else(|e| e.into_inner());
            if k.is_none() {
                *k = Some(why);
                // SAFETY: kill(2) on our own child, not yet reaped (the reaper sets `done` after wait).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    };
    {
        let (done, kill) = (done.clone(), kill.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if started.elapsed() > timeout {
                    if !quiet {
                        eprintln!("xtask: the guest ran past {} s; killing it", timeout.as_secs());
                    }
                    kill(format!("ran past {} s", timeout.as_secs()));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
    let errs = {
        let (kill, prefix) = (kill.clone(), prefix.to_string());
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            for line in BufReader::new(stderr).lines() {
                let line = line.unwrap_or_default();
                if !quiet {
                    eprintln!("{prefix}{line}");
                }
                if FATAL_STDERR.iter().any(|m| line.contains(m)) {
                    kill(format!("QEMU: {line}"));
                }
                tail.push(line);
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
            tail
        })
    };
    let (mut began, mut ended) = (None, None);
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        if !quiet {
            println!("{prefix}{line}");
        }
        if began.is_none() && line.contains(BEGIN_MARK) {
            began = Some(Instant::now());
        }
        if began.is_some() && ended.is_none() && line.trim_start().starts_with(END_MARK) {
            ended = Some(Instant::now());
        }
        lines.push(line);
    }
    let _ = child.wait();
    done.store(true, Ordering::Relaxed);
    let exited = Instant::now();
    let began = began.unwrap_or(exited);
    let ended = ended.unwrap_or(exited);
    Ok(Console {
        lines,
        boot: began - started,
        payload: ended.saturating_duration_since(began),
        teardown: exited.saturating_duration_since(ended),
        stderr: errs.join().unwrap_or_default(),
        killed: killed.lock().unwrap_or_else(|e| e.into_inner()).take(),
    })
}

/// The payload's last line: the test binary's exit status, or a script's `poweroff`.
const END_MARK: &str = "LOCKPROF-VM-EXIT=";

/// QEMU's words for a guest KVM could not run (it pauses the guest and waits).
const FATAL_STDERR: [&str; 3] = ["KVM internal error", "emulation failure", "kvm run failed"];
