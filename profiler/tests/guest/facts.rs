//! What the running kernel has, read from the kernel itself (kallsyms,
//! BTF, tracefs, sysfs, debugfs), never from a version table: every check
//! that needs something the kernel lacks is skipped with that reason, and
//! everything the kernel has must pass.

use std::path::Path;

use lockprof::{ebpf::probes::WAIT_TARGETS, symbols::Kallsyms};

/// Facts about this kernel.
pub struct Facts {
    /// The kernel's symbols (Debian's kernels list data symbols too).
    pub kallsyms: Kallsyms,
    /// `/sys/kernel/btf/vmlinux`.
    pub btf: bool,
    /// The kprobe PMU (CONFIG_KPROBES).
    pub kprobes: bool,
    /// `register_ftrace_direct` in kallsyms (BPF trampolines can attach:
    /// CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS).
    pub direct_calls: bool,
    /// The kernel refuses BPF trampolines outright (EPERM from a policy such
    /// as lockdown or a hypervisor), with its answer.
    pub trampolines_refused: Option<String>,
    /// `lock:contention_{begin,end}` in tracefs (Linux >= 5.19).
    pub lock_tracepoints: bool,
    /// `/dev/kvm` exists (the KVM modules loaded), or why not.
    pub kvm: Result<(), String>,
}

/// Whether the kernel answers EPERM to any BPF trampoline: one fentry on
/// every release function of a fresh copy of the object, detached again.
fn trampolines_refused() -> Option<String> {
    let mut ebpf = aya::EbpfLoader::new().load(lockprof::ebpf::object_bytes()).ok()?;
    let btf = aya::Btf::from_sys_fs().ok();
    let a = lockprof::ebpf::probes::attach_releases(&mut ebpf, lockprof::ebpf::probes::ProbeKind::Fentry, btf.as_ref());
    let refused = a.ok.is_empty() && a.failed.iter().all(|(_, e)| e.contains("Operation not permitted"));
    refused.then(|| format!("the kernel refuses BPF trampolines (EPERM: {})", a.failed.first().map_or("", |(f, _)| f)))
}

impl Facts {
    /// Reads the facts.
    pub fn read() -> Facts {
        let kallsyms = Kallsyms::load().unwrap_or_default();
        let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
        let kvm = if Path::new("/dev/kvm").exists() {
            Ok(())
        } else {
            let log = std::fs::read_to_string("/tmp/kvm-modules.log").unwrap_or_default();
            Err(format!("no /dev/kvm after loading the KVM modules ({})", log.trim().replace('\n', "; ")))
        };
        Facts {
            trampolines_refused: trampolines_refused(),
            btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
            kprobes: Path::new("/sys/bus/event_source/devices/kprobe/type").exists(),
            direct_calls: kallsyms.address_of("register_ftrace_direct").is_some(),
            lock_tracepoints: tracefs.iter().any(|t| Path::new(t).join("events/lock/contention_begin").is_dir()),
            kvm,
            kallsyms,
        }
    }

    /// Whether kallsyms lists the function (not inlined, not renamed).
    pub fn has_function(&self, name: &str) -> bool {
        self.kallsyms.address_of(name).is_some()
    }

    /// Why fentry/fexit cannot work on this kernel, if so.
    pub fn fentry_missing(&self) -> Option<String> {
        if !self.btf {
            Some("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into())
        } else if !self.direct_calls {
            Some("no register_ftrace_direct in kallsyms: BPF trampolines are not built in".into())
        } else {
            self.trampolines_refused.clone()
        }
    }

    /// Why kprobes cannot work on this kernel, if so.
    pub fn kprobe_missing(&self) -> Option<String> {
        (!self.kprobes).then(|| "no kprobe PMU (/sys/bus/event_source/devices/kprobe): CONFIG_KPROBES is off".into())
    }

    /// Why the slowpath backends have nothing to probe, if so.
    pub fn slowpaths_missing(&self) -> Option<String> {
        let any = WAIT_TARGETS.iter().any(|t| self.has_function(t.func));
        (!any).then(|| {
            format!(
                "none of the probed slowpaths is in kallsyms ({})",
                WAIT_TARGETS.iter().map(|t| t.func).collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Why the lock tracepoints are missing, if so.
    pub fn tracepoints_missing(&self) -> Option<String> {
        (!self.lock_tracepoints)
            .then(|| "the kernel has no lock:contention_* tracepoints (they appeared in 5.19)".into())
    }

    /// Why holds of locks released through `release` cannot be seen with a
    /// given probe kind, if so.
    pub fn release_missing(&self, release: &str) -> Option<String> {
        (!self.has_function(release))
            .then(|| format!("the kernel has no out-of-line {release} (inlined): its releases cannot be probed"))
    }
}
