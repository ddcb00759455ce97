//! What the running kernel has, read from the kernel itself (kallsyms,
//! BTF, tracefs, sysfs, debugfs), never from a version table: every check
//! that needs something the kernel lacks is skipped with that reason, and
//! everything the kernel has must pass.

use std::path::Path;

use lockprof::{
    ebpf::{BackendChoice, btf::Types, probes::WAIT_TARGETS},
    symbols::Kallsyms,
};

/// Which slowpath a check needs the slowpath backends to probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Mutexes (the pipe mutex).
    Mutex,
    /// rwlock_t (tasklist_lock).
    Rwlock,
    /// rw_semaphore (mmap_lock).
    Rwsem,
}

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
    /// A PREEMPT_RT kernel (`rt_spin_lock` in kallsyms).
    pub rt: bool,
    /// Function names the kernel's BTF describes (fentry/fexit targets).
    btf_funcs: Vec<String>,
    /// The `bpf_get_kmem_cache` kfunc (6.13+): slab caches of lock addresses.
    pub slab_kfunc: bool,
    /// The kfuncs `--owner-stacks` needs (6.2+): `bpf_task_from_pid`,
    /// `bpf_task_release`, `bpf_rdonly_cast`.
    pub task_kfuncs: bool,
}

/// The kfuncs `--owner-stacks` needs.
const TASK_KFUNCS: [&str; 3] = ["bpf_task_from_pid", "bpf_task_release", "bpf_rdonly_cast"];

/// Whether the kernel answers EPERM to any BPF trampoline: one fentry on
/// every release function of a fresh copy of the object, detached again.
fn trampolines_refused() -> Option<String> {
    let mut ebpf = aya::EbpfLoader::new().load(lockprof::ebpf::object_bytes()).ok()?;
    let btf = aya::Btf::from_sys_fs().ok();
    let a = lockprof::ebpf::probes::attach_releases(&mut ebpf, lockprof::ebpf::probes::ProbeKind::Fentry, btf.as_ref());
    let refused = a.ok.is_empty()
        && a.failed.iter().all(|(_, e)| e.cause(a.kind) == Some(lockprof::ebpf::Cause::TrampolinesRefused));
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
        let mut wanted: Vec<&str> = WAIT_TARGETS.iter().map(|t| t.func).collect();
        wanted.push("bpf_get_kmem_cache");
        wanted.extend(TASK_KFUNCS);
        let btf_funcs: Vec<String> = std::fs::read("/sys/kernel/btf/vmlinux")
            .ok()
            .and_then(|b| {
                Types::parse(&b).ok().map(|t| wanted.iter().filter(|f| t.has_func(f)).map(|f| f.to_string()).collect())
            })
            .unwrap_or_default();
        Facts {
            slab_kfunc: btf_funcs.iter().any(|f| f == "bpf_get_kmem_cache"),
            task_kfuncs: TASK_KFUNCS.iter().all(|k| btf_funcs.iter().any(|f| f == k)),
            rt: kallsyms.address_of("rt_spin_lock").is_some(),
            btf_funcs,
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

    /// Whether kallsyms lists the function, or only a compiler clone of it
    /// (`name.constprop.0`), which kprobes reach too.
    fn has_function_or_clone(&self, name: &str) -> bool {
        self.has_function(name) || self.kallsyms.has_text_prefix(&format!("{name}."))
    }

    /// Why the slowpath `backend` cannot see waits of `family` here, if so.
    pub fn slowpath_missing(&self, backend: BackendChoice, family: Family) -> Option<String> {
        let funcs: &[&str] = match (self.rt, family) {
            (false, Family::Mutex) => &["__mutex_lock_slowpath"],
            (false, Family::Rwlock) => &["queued_write_lock_slowpath"],
            (false, Family::Rwsem) => &["rwsem_down_read_slowpath", "rwsem_down_write_slowpath"],
            (true, Family::Mutex) => &["rt_mutex_slowlock"],
            (true, Family::Rwlock) => {
                return Some(
                    "PREEMPT_RT inlines rwlock_t's slowpath into rt_read_lock/rt_write_lock: no contended path to probe (the tracepoint backends see it)"
                        .into(),
                );
            }
            (true, Family::Rwsem) => &["__rwbase_read_lock"],
        };
        let probed = |f: &&str| match backend {
            BackendChoice::Fentry => self.btf_funcs.iter().any(|b| b == f),
            _ => self.has_function_or_clone(f),
        };
        (!funcs.iter().any(probed)).then(|| match backend {
            BackendChoice::Fentry => format!(
                "the kernel's BTF describes none of {} (inlined or only cloned): fentry cannot attach",
                funcs.join(", ")
            ),
            _ => format!("kallsyms lists none of {} (inlined)", funcs.join(", ")),
        })
    }

    /// The function that releases `tasklist_lock` for writers here.
    pub fn rwlock_write_release(&self) -> &'static str {
        if self.rt { "rt_write_unlock" } else { "_raw_write_unlock_irq" }
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
