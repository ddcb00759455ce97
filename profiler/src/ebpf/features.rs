//! What this kernel supports, tried for real (`lockprof doctor`).

use aya::{
    Btf, EbpfLoader,
    programs::{FEntry, KProbe},
};
use serde::Serialize;

use super::{Privileges, TraceFs, check_privileges};
use crate::symbols::Kallsyms;

/// Outcome of trying one backend.
#[derive(Clone, Debug, Serialize)]
pub struct BackendCheck {
    /// Backend name.
    pub name: &'static str,
    /// Whether the programs loaded and attached.
    pub available: bool,
    /// What was tried and the kernel's answer.
    pub detail: String,
}

/// Facts about kallsyms.
#[derive(Clone, Debug, Serialize)]
pub struct KallsymsFacts {
    /// Readable with real addresses.
    pub readable: bool,
    /// Text symbols.
    pub text_symbols: usize,
    /// Data symbols (many with CONFIG_KALLSYMS_ALL).
    pub data_symbols: usize,
    /// Address of `tasklist_lock`, if listed.
    pub tasklist_lock: Option<String>,
    /// Error text when unreadable.
    pub error: Option<String>,
}

/// Everything `doctor` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Doctor {
    /// `uname -r`.
    pub kernel: String,
    /// /sys/kernel/btf/vmlinux present.
    pub btf: bool,
    /// tracefs mount point, if mounted (doctor mounts it when it can).
    pub tracefs: Option<String>,
    /// lock:contention_* tracepoints exist.
    pub lock_tracepoints: bool,
    /// Root, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_RESOURCE.
    pub privileges: PrivilegeFacts,
    /// Backends tried.
    pub backends: Vec<BackendCheck>,
    /// kallsyms facts.
    pub kallsyms: KallsymsFacts,
    /// Backend `--backend auto` picks, if any.
    pub auto_pick: Option<&'static str>,
    /// Why.
    pub auto_reason: String,
}

/// Serializable privileges.
#[derive(Clone, Debug, Serialize)]
pub struct PrivilegeFacts {
    /// uid 0.
    pub root: bool,
    /// CAP_BPF.
    pub cap_bpf: bool,
    /// CAP_PERFMON.
    pub cap_perfmon: bool,
    /// CAP_SYS_ADMIN.
    pub cap_sys_admin: bool,
    /// CAP_SYS_RESOURCE.
    pub cap_sys_resource: bool,
}

impl From<Privileges> for PrivilegeFacts {
    fn from(p: Privileges) -> Self {
        PrivilegeFacts {
            root: p.root,
            cap_bpf: p.cap_bpf,
            cap_perfmon: p.cap_perfmon,
            cap_sys_admin: p.cap_sys_admin,
            cap_sys_resource: p.cap_sys_resource,
        }
    }
}

/// Functions probed to test kprobe/fentry support, first present wins.
const PROBE_TARGETS: [&str; 4] = ["__mutex_lock_slowpath", "mutex_unlock", "up_write", "vfs_read"];

/// Kernel release string.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn check_kallsyms() -> (KallsymsFacts, Option<Kallsyms>) {
    match Kallsyms::load() {
        Ok(ks) => (
            KallsymsFacts {
                readable: true,
                text_symbols: ks.text_symbol_count(),
                data_symbols: ks.data_symbol_count(),
                tasklist_lock: ks.address_of("tasklist_lock").map(|a| format!("{a:#x}")),
                error: None,
            },
            Some(ks),
        ),
        Err(e) => (
            KallsymsFacts {
                readable: false,
                text_symbols: 0,
                data_symbols: 0,
                tasklist_lock: None,
                error: Some(e.to_string()),
            },
            None,
        ),
    }
}

/// The first probe target the kernel has (any name is fine when kallsyms is unreadable).
fn probe_target(ks: Option<&Kallsyms>) -> &'static str {
    ks.and_then(|ks| PROBE_TARGETS.iter().copied().find(|f| ks.address_of(f).is_some())).unwrap_or(PROBE_TARGETS[0])
}

fn try_wait_backend(backend: super::BackendChoice) -> (bool, String) {
    let opts = super::LoadOptions { backend, ..Default::default() };
    match super::Probes::load(&opts) {
        Ok(mut p) => {
            p.detach();
            (true, "loaded and attached contention_begin/end, then detached".into())
        }
        Err(e) => (false, e.to_string()),
    }
}

fn try_kprobe(target: &str) -> (bool, String) {
    let mut ebpf = match EbpfLoader::new().load(super::object_bytes()) {
        Ok(e) => e,
        Err(e) => return (false, format!("loading the object: {e}")),
    };
    let Some(prog) = ebpf.program_mut("probe_kprobe") else { return (false, "probe program missing".into()) };
    let p: &mut KProbe = match prog.try_into() {
        Ok(p) => p,
        Err(e) => return (false, e.to_string()),
    };
    if let Err(e) = p.load() {
        return (false, format!("loading a kprobe program: {}", super::error_chain(&e)));
    }
    match p.attach(target, 0) {
        Ok(_) => (true, format!("attached a kprobe to {target}")),
        Err(e) => {
            let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
                || TraceFs::find().is_some_and(|t| t.root().join("kprobe_events").exists());
            let hint = if kprobes {
                ""
            } else {
                " (this kernel has no kprobe PMU or kprobe_events: built without CONFIG_KPROBES)"
            };
            (false, format!("attaching a kprobe to {target}: {}{hint}", super::error_chain(&e)))
        }
    }
}

fn try_fentry(target: &str) -> (bool, String) {
    let btf = match Btf::from_sys_fs() {
        Ok(b) => b,
        Err(e) => return (false, format!("no kernel BTF: {e}")),
    };
    let mut ebpf = match EbpfLoader::new().btf(Some(&btf)).load(super::object_bytes()) {
        Ok(e) => e,
        Err(e) => return (false, format!("loading the object: {e}")),
    };
    let Some(prog) = ebpf.program_mut("probe_fentry") else { return (false, "probe program missing".into()) };
    let p: &mut FEntry = match prog.try_into() {
        Ok(p) => p,
        Err(e) => return (false, e.to_string()),
    };
    if let Err(e) = p.load(target, &btf) {
        return (
            false,
            format!(
                "loading an fentry program on {target}: {} (the kernel refused BPF trampolines; needs CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS and no lockdown)",
                super::error_chain(&e)
            ),
        );
    }
    match p.attach() {
        Ok(_) => (true, format!("attached fentry to {target}")),
        Err(e) => (false, format!("attaching fentry to {target}: {}", super::error_chain(&e))),
    }
}

/// Runs every check.
pub fn run() -> Doctor {
    let privs = check_privileges();
    let tracefs = if privs.cap_sys_admin { TraceFs::find_or_mount().ok() } else { TraceFs::find() };
    let lock_tracepoints = tracefs.as_ref().is_some_and(TraceFs::has_lock_events);
    let (kallsyms, ks) = check_kallsyms();
    let mut backends = Vec::new();
    if privs.can_trace() {
        let target = probe_target(ks.as_ref());
        for (name, (ok, detail)) in [
            ("tp_btf", try_wait_backend(super::BackendChoice::TpBtf)),
            ("tracepoint", try_wait_backend(super::BackendChoice::Tracepoint)),
            ("kprobe", try_kprobe(target)),
            ("fentry", try_fentry(target)),
        ] {
            backends.push(BackendCheck { name, available: ok, detail });
        }
    } else {
        let why = privs.missing().unwrap_or_default();
        for name in ["tp_btf", "tracepoint", "kprobe", "fentry"] {
            backends.push(BackendCheck { name, available: false, detail: format!("not tried: {why}") });
        }
    }
    let avail = |n: &str| backends.iter().any(|b| b.name == n && b.available);
    let (auto_pick, auto_reason) = if avail("tp_btf") {
        (Some("tp_btf"), "tp_btf attaches: typed arguments, no tracefs needed, lowest overhead".to_string())
    } else if avail("tracepoint") {
        (Some("tracepoint"), "tp_btf is unavailable here; classic tracepoints attach".to_string())
    } else if !privs.can_trace() {
        (None, privs.missing().unwrap_or_default())
    } else {
        (None, "neither tp_btf nor classic lock tracepoints attach (kernel < 5.19?); kprobe/fentry wait backends are not implemented yet".to_string())
    };
    Doctor {
        kernel: kernel_release(),
        btf: std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        tracefs: tracefs.map(|t| t.root().display().to_string()),
        lock_tracepoints,
        privileges: privs.into(),
        backends,
        kallsyms,
        auto_pick,
        auto_reason,
    }
}
