//! `cargo xtask vm-test`: lockprof's kprobe, fentry and tracepoint backends
//! and its KVM directed-yield (yield_to) profiling, tested inside a real
//! Debian kernel under QEMU (TCG), since the host kernel has no kprobes and
//! refuses fentry. The guest loads the package's KVM modules (QEMU's
//! `-cpu max` emulates SVM) and runs a tiny VMM. See ../shared/docs/vm-testing.md.

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

use anyhow::{Context as _, Result, bail};

use crate::{
    setup,
    util::{cargo, output, path_env, run, workspace_root},
};

/// Options.
pub struct Opts {
    /// Debian kernel image package (default: what linux-image-amd64 depends on).
    pub kernel: Option<String>,
    /// Give up after this long.
    pub timeout: Duration,
}

const MUSL: &str = "x86_64-unknown-linux-musl";

fn vm_dir() -> PathBuf {
    workspace_root().join("target/vm")
}

/// The kernel image package to test.
fn kernel_package(o: &Opts) -> Result<String> {
    if let Some(k) = &o.kernel {
        return Ok(k.clone());
    }
    let deps = output(Command::new("apt-cache").args(["depends", "linux-image-amd64"])).unwrap_or_default();
    let found = deps.lines().find_map(|l| l.trim().strip_prefix("Depends:").map(|p| p.trim().to_string()));
    if let Some(p) = found {
        return Ok(p);
    }
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    let deps = output(Command::new("apt-cache").args(["depends", "linux-image-amd64"])).unwrap_or_default();
    deps.lines()
        .find_map(|l| l.trim().strip_prefix("Depends:").map(|p| p.trim().to_string()))
        .context("apt-cache depends linux-image-amd64 names no kernel package")
}

/// Downloads and unpacks the kernel package (cached); returns the vmlinuz path.
fn kernel(pkg: &str) -> Result<PathBuf> {
    let dir = vm_dir().join(pkg);
    let boot = dir.join("boot");
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(&boot)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-")))
    };
    if let Some(v) = find() {
        return Ok(v);
    }
    let cache = vm_dir().join("cache");
    std::fs::create_dir_all(&cache)?;
    eprintln!("xtask: downloading {pkg}");
    run(Command::new("apt-get").current_dir(&cache).args(["download", pkg]))?;
    let deb = std::fs::read_dir(&cache)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
        })
        .with_context(|| format!("{pkg}: no .deb after apt-get download"))?;
    std::fs::create_dir_all(&dir)?;
    let script =
        format!("dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' ./boot ./lib/modules", deb.display(), dir.display());
    run(Command::new("sh").args(["-c", &script])).context("unpacking the kernel package")?;
    find().context("no vmlinuz in the kernel package")
}

const INIT: &str = r#"#!/bin/busybox sh
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
echo LOCKPROF-VM-BEGIN $(uname -r)
cd /tmp
rc=0
/lockprof doctor || rc=1
/lockprof selftest --backend kprobe --agree || rc=1
/lockprof selftest --backend fentry || rc=1
/lockprof selftest --backend tracepoint || rc=1
# KVM directed yield: nested SVM (QEMU TCG -cpu max) runs a tiny VMM whose
# vCPU yields to the other through KVM_HC_SCHED_YIELD.
for m in $(cat /modules/order); do insmod /modules/$m.ko || echo "insmod $m failed"; done
if [ -c /dev/kvm ]; then
  /lockprof selftest --backend auto --yield-vmm /yield_vmm --yield-probe fentry || rc=1
  /lockprof selftest --backend tracepoint --yield-vmm /yield_vmm --yield-probe kprobe || rc=1
else
  echo "selftest: FAIL yield_to: no /dev/kvm after loading $(cat /modules/order)"
  rc=1
fi
echo LOCKPROF-VM-EXIT=$rc
poweroff -f
"#;

/// The KVM modules of the guest kernel, dependencies first.
const KVM_MODULES: &[&str] = &["kvm-amd"];

/// Finds `name.ko` under the package's module tree.
fn find_module(root: &Path, name: &str) -> Option<PathBuf> {
    let want = format!("{}.ko", name.replace('_', "-"));
    let want_us = format!("{}.ko", name.replace('-', "_"));
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == want || n == want_us) {
                return Some(p);
            }
        }
    }
    None
}

/// The `depends=` field of a module's .modinfo section.
fn module_depends(ko: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(ko).with_context(|| format!("reading {}", ko.display()))?;
    let key = b"depends=";
    let Some(at) = bytes.windows(key.len()).position(|w| w == key) else { return Ok(Vec::new()) };
    let rest = &bytes[at + key.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let deps = String::from_utf8_lossy(&rest[..end]).into_owned();
    Ok(deps.split(',').filter(|d| !d.is_empty()).map(str::to_string).collect())
}

/// Modules to insmod for `wanted`, dependencies first: (name, path).
fn module_order(root: &Path, wanted: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    fn visit(root: &Path, name: &str, out: &mut Vec<(String, PathBuf)>, depth: u32) -> Result<()> {
        if depth > 16 || out.iter().any(|(n, _)| n == name) {
            return Ok(());
        }
        let ko = find_module(root, name).with_context(|| format!("module {name} not in the kernel package"))?;
        for d in module_depends(&ko)? {
            visit(root, &d, out, depth + 1)?;
        }
        out.push((name.to_string(), ko));
        Ok(())
    }
    let mut out = Vec::new();
    for w in wanted {
        visit(root, w, &mut out, 0)?;
    }
    Ok(out)
}

/// Builds the initramfs with busybox, the static lockprof, the yield_to VMM,
/// the KVM modules and /init.
fn initramfs(bin: &Path, vmm: &Path, modules: &[(String, PathBuf)]) -> Result<PathBuf> {
    let root = vm_dir().join("initramfs");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("bin"))?;
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("busybox not found")?;
    std::fs::copy(&busybox, root.join("bin/busybox"))?;
    std::fs::copy(bin, root.join("lockprof"))?;
    std::fs::copy(vmm, root.join("yield_vmm"))?;
    std::fs::create_dir_all(root.join("modules"))?;
    let mut order = String::new();
    for (name, ko) in modules {
        std::fs::copy(ko, root.join("modules").join(format!("{name}.ko")))?;
        order.push_str(name);
        order.push('\n');
    }
    std::fs::write(root.join("modules/order"), order)?;
    std::fs::write(root.join("init"), INIT)?;
    let script =
        "chmod 755 init lockprof yield_vmm bin/busybox && find . | cpio -o -H newc --quiet | gzip -1 > ../initrd.gz";
    run(Command::new("sh").current_dir(&root).args(["-c", script])).context("building the initramfs")?;
    Ok(vm_dir().join("initrd.gz"))
}

/// Runs the whole guest test.
pub fn run_vm(o: &Opts) -> Result<()> {
    setup::apt_tools(&[("qemu-system-x86_64", "qemu-system-x86"), ("busybox", "busybox-static"), ("cpio", "cpio")])?;
    let targets = output(Command::new("rustup").env("PATH", path_env()).args(["target", "list", "--installed"]))
        .unwrap_or_default();
    if !targets.lines().any(|l| l.trim() == MUSL) {
        run(Command::new("rustup").env("PATH", path_env()).args(["target", "add", MUSL]))?;
    }
    run(cargo().args(["build", "--release", "--package", "profiler", "--target", MUSL]))?;
    run(cargo().args(["build", "--release", "--package", "profiler", "--example", "yield_vmm", "--target", MUSL]))?;
    let bin = workspace_root().join(format!("target/{MUSL}/release/lockprof"));
    let vmm = workspace_root().join(format!("target/{MUSL}/release/examples/yield_vmm"));
    let pkg = kernel_package(o)?;
    let vmlinuz = kernel(&pkg)?;
    let modules = module_order(&vm_dir().join(&pkg).join("lib/modules"), KVM_MODULES)?;
    let initrd = initramfs(&bin, &vmm, &modules)?;
    eprintln!("xtask: booting {} under QEMU (TCG, 4 vCPUs)", vmlinuz.display());

    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max",
            "-m",
            "2G",
            "-smp",
            "4",
            "-nographic",
            "-no-reboot",
            "-nodefaults",
        ])
        .args(["-serial", "stdio", "-kernel"])
        .arg(&vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let done = Arc::new(AtomicBool::new(false));
    let pid = child.id() as i32;
    {
        let (done, timeout) = (done.clone(), o.timeout);
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
    let (mut exit, mut oops, mut began) = (None, Vec::new(), false);
    let (mut doctor_fentry, mut doctor_kprobe, mut fails, mut passes, mut yield_passes) = (0, 0, 0, 0, 0);
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        println!("vm| {line}");
        if line.contains("LOCKPROF-VM-BEGIN") {
            began = true;
        }
        if ["Oops", "BUG:", "Kernel panic", "general protection fault"].iter().any(|m| line.contains(m)) {
            oops.push(line.clone());
        }
        if line.trim_start().starts_with("fentry      yes") {
            doctor_fentry += 1;
        }
        if line.trim_start().starts_with("kprobe      yes") {
            doctor_kprobe += 1;
        }
        if line.starts_with("selftest: FAIL") {
            fails += 1;
        }
        if line.starts_with("selftest: PASS") {
            passes += 1;
        }
        if line.starts_with("selftest: PASS yield_to-") {
            yield_passes += 1;
        }
        if let Some(code) = line.trim().strip_prefix("LOCKPROF-VM-EXIT=") {
            exit = code.trim().parse::<i32>().ok();
        }
    }
    let _ = child.wait();
    done.store(true, Ordering::Relaxed);
    // The plain closing line CI reads: guest checks passed and failed.
    println!("vm-test: {passes} passed, {fails} failed");
    if !oops.is_empty() {
        bail!("the guest kernel oopsed: {oops:?}");
    }
    if !began {
        bail!("the guest never reached /init");
    }
    if doctor_fentry < 2 || doctor_kprobe < 2 {
        bail!("doctor in the guest did not report fentry and kprobe available for waits and holds");
    }
    if yield_passes < 2 {
        bail!("the yield_to checks (fentry and kprobe) did not both pass in the guest");
    }
    match exit {
        Some(0) if fails == 0 => {
            eprintln!("xtask: vm-test passed on {pkg}");
            Ok(())
        }
        Some(c) => bail!("vm-test failed on {pkg}: exit {c}, {fails} failed checks"),
        None => bail!("the guest did not report an exit status (timeout or crash)"),
    }
}
