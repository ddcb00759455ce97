//! Which accelerator runs a guest: KVM where the host has it and the guest
//! kernel boots under it, TCG elsewhere, with the reason either way.
//!
//! `/dev/kvm` opening is not enough: the hosts of this project are PVM hosts
//! (`kvm_pvm`: no VMX or SVM in the CPU, KVM itself paravirtualized), where
//! `KVM_CREATE_VM` succeeds but an ordinary kernel dies in KVM's instruction
//! emulator. So each kernel is booted once under KVM to its `/init`, `-cpu
//! host` then `-cpu max`, before its checks are; the checks run under the
//! first that got there. The yield_to checks need a nested hypervisor inside
//! the guest: under KVM that takes the host's nested virtualization, so a
//! host without it keeps TCG (which emulates SVM) for the whole guest.

use std::{path::Path, time::Duration};

use super::guest::{self, Accel};
use crate::dist::{Arch, X86_64};

/// The accelerator and why it was chosen.
pub struct Choice {
    /// What runs the guest.
    pub accel: Accel,
    /// Why (printed, and in the phase table).
    pub why: String,
}

/// How long a kernel may take to reach `/init` under KVM: TCG gets there in
/// 3-4 s, so a KVM slower than this is no gain. (On this project's PVM hosts
/// a Debian kernel under KVM never gets past its decompressor: seen stalled
/// there after 60 s with both CPU models.)
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// Why this host cannot run `arch` guests under KVM at all, if so.
fn host_missing(arch: Arch) -> Option<String> {
    if arch != X86_64 || std::env::consts::ARCH != "x86_64" {
        return Some(format!("KVM runs guests of the host's architecture ({}) only", std::env::consts::ARCH));
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        return Some(format!("/dev/kvm: {e}"));
    }
    None
}

/// Why KVM guests here cannot run a hypervisor of their own (the yield_to
/// checks' nested guest), if so.
fn nested_missing() -> Option<String> {
    let nested = ["/sys/module/kvm_intel/parameters/nested", "/sys/module/kvm_amd/parameters/nested"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .any(|v| matches!(v.trim(), "1" | "Y" | "y"));
    if !nested {
        let pvm = Path::new("/sys/module/kvm_pvm").exists();
        return Some(format!(
            "the host's KVM has no nested virtualization{}, which the yield_to checks need inside the guest",
            if pvm { " (kvm_pvm: a PVM host)" } else { "" }
        ));
    }
    None
}

/// Boots `vmlinuz` under KVM to its `/init` with each CPU model in turn;
/// the first that gets there runs the guest (where the host can nest the
/// yield_to checks' hypervisor too), else TCG with what KVM said.
pub fn choose(arch: Arch, vmlinuz: &Path, initrd: &Path, label: &str) -> Choice {
    if let Some(why) = host_missing(arch) {
        return Choice { accel: Accel::Tcg, why: format!("TCG: {why}") };
    }
    let mut failures = Vec::new();
    for cpu in ["host", "max"] {
        let accel = Accel::Kvm(cpu);
        let boot = guest::Boot {
            arch,
            accel,
            vmlinuz,
            initrd,
            append: "lockprof.probe",
            timeout: PROBE_TIMEOUT,
            prefix: "",
            quiet: true,
        };
        match guest::boot(&boot) {
            Ok(c) if c.lines.iter().any(|l| l.contains(guest::BEGIN_MARK)) && c.killed.is_none() => {
                if let Some(why) = nested_missing() {
                    return Choice {
                        accel: Accel::Tcg,
                        why: format!("TCG: the kernel boots under KVM (-cpu {cpu}) but {why}"),
                    };
                }
                return Choice {
                    accel,
                    why: format!("{}: booted to /init in {:.1} s", accel.name(), c.boot.as_secs_f64()),
                };
            }
            Ok(c) => {
                let said = c
                    .killed
                    .or_else(|| c.stderr.last().cloned())
                    .unwrap_or_else(|| "no /init and no error".to_string());
                let said = if said.starts_with("ran past") {
                    format!("not at /init after {} s", PROBE_TIMEOUT.as_secs())
                } else {
                    said
                };
                failures.push(format!("-cpu {cpu}: {said}"));
            }
            Err(e) => failures.push(format!("-cpu {cpu}: {e:#}")),
        }
    }
    eprintln!("xtask: {label}: KVM did not boot it ({}); TCG runs it", failures.join("; "));
    Choice {
        accel: Accel::Tcg,
        why: format!("TCG: under KVM the kernel did not reach /init ({})", failures.join("; ")),
    }
}
