//! What this kernel supports, tried for real (`lockprof doctor`).

use aya::Btf;
use serde::{Serialize, Serializer};

use profiler_common::{Config, KFUNC_GET_KMEM_CACHE, Layout};

use super::{
    BackendChoice, LoadOptions, NamingMethods, Privileges, Probes, TraceFs,
    btf::{BtfError, Types},
    check_privileges, error_chain,
    load::{KernelBtf, load_slab_iter},
    object::fresh_object,
    probes::{Attached, ProbeKind, attach_releases, attach_yield},
};
use crate::symbols::Kallsyms;

/// Outcome of trying one backend.
#[derive(Clone, Debug, Serialize)]
pub struct BackendCheck {
    /// Backend name.
    pub name: &'static str,
    /// Whether the programs loaded and attached.
    pub available: bool,
    /// What was tried and the kernel's answer, one line.
    pub detail: String,
    /// The verifier's logs of what it rejected (`-v` prints them under the
    /// line), empty when it rejected nothing.
    pub verifier_log: String,
}

impl BackendCheck {
    fn not_tried(name: &'static str, why: &str) -> BackendCheck {
        BackendCheck { name, available: false, detail: format!("not tried: {why}"), verifier_log: String::new() }
    }
}

/// The verifier's logs, each under the program or function it rejected.
fn joined_logs(logs: impl IntoIterator<Item = (&'static str, String)>) -> String {
    logs.into_iter().map(|(f, log)| format!("{f}:\n{}\n", log.trim_end())).collect()
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
    /// The futex system calls' tracepoints this kernel has (`--futex`).
    #[serde(default)]
    pub futex_tracepoints: Vec<String>,
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
    /// Hold backends tried (release-function probes).
    pub holds: Vec<BackendCheck>,
    /// Hold backend `auto` uses, if any.
    pub hold_pick: Option<&'static str>,
    /// yield_to probes tried (KVM directed yield).
    pub yield_to: Vec<BackendCheck>,
    /// How `record` probes yield_to, if it can.
    pub yield_pick: Option<&'static str>,
    /// The kvm module is loaded (yield_to is only called by KVM).
    pub kvm_loaded: bool,
    /// `struct task_struct` offsets for naming yield targets, or why not.
    #[serde(serialize_with = "ok_or_error_text")]
    pub task_offsets: Result<String, BtfError>,
    /// How locks are named on this kernel.
    pub naming: NamingFacts,
    /// Per lock type, whether waits can be blamed on an owner here.
    pub owners: Vec<OwnerSupport>,
}

/// `{"Ok": ...}` or `{"Err": "the error's text"}`.
fn ok_or_error_text<S: Serializer>(r: &Result<String, BtfError>, s: S) -> Result<S::Ok, S::Error> {
    r.as_ref().map_err(ToString::to_string).serialize(s)
}

/// Whether owners of one lock type are seen on this kernel.
#[derive(Clone, Debug, Serialize)]
pub struct OwnerSupport {
    /// Lock type.
    pub lock_type: &'static str,
    /// Owners are seen.
    pub owners: bool,
    /// How, or why not.
    pub detail: String,
}

/// Owner support per lock type: the owner fields in BTF, the cheap read
/// (`bpf_rdonly_cast`), release probes for the types without an owner field.
fn owner_support(layout: &Layout, rdonly: bool, hold_pick: Option<&'static str>) -> Vec<OwnerSupport> {
    let how =
        if rdonly { "plain loads through bpf_rdonly_cast" } else { "bpf_probe_read_kernel (no bpf_rdonly_cast, 6.2+)" };
    let field = |ty: &'static str, off: u32, member: &str| OwnerSupport {
        lock_type: ty,
        owners: off != profiler_common::UNKNOWN_OFFSET,
        detail: if off != profiler_common::UNKNOWN_OFFSET {
            format!(
                "{member} read when a wait begins ({how}); owner stack: its acquire stack when it acquired after a wait"
            )
        } else {
            format!("the kernel BTF has no {member}")
        },
    };
    let tracked = |ty: &'static str| OwnerSupport {
        lock_type: ty,
        owners: hold_pick.is_some(),
        detail: match hold_pick {
            Some(k) => {
                format!("no owner field: the holder is tracked while release probes ({k}) time its hold (writers only)")
            }
            None => "no owner field, and release functions cannot be probed here: owner unknown".into(),
        },
    };
    vec![
        field("mutex", layout.mutex_owner, "mutex.owner"),
        field("rwsem", layout.rwsem_owner, "rw_semaphore.owner (readers counted)"),
        field("rt-mutex", layout.rtmutex_owner, "rt_mutex_base.owner (PREEMPT_RT)"),
        field(
            "rwlock-rt",
            layout.rwbase_rtmutex,
            "rwbase_rt.rtmutex's owner (PREEMPT_RT rwsems and rwlocks; readers counted)",
        ),
        OwnerSupport {
            lock_type: "rwlock",
            owners: true,
            detail: match hold_pick {
                Some(k) => format!(
                    "readers counted from the lock word; a writer tracked while release probes ({k}) time its hold"
                ),
                None => "readers counted from the lock word; a writer is unknown (release functions cannot be \
                         probed here)"
                    .into(),
            },
        },
        tracked("spinlock"),
    ]
}

/// Lock naming methods, tried for real.
#[derive(Clone, Debug, Serialize)]
pub struct NamingFacts {
    /// Which methods work.
    #[serde(flatten)]
    pub methods: NamingMethods,
    /// Slab caches the iterator listed.
    pub slab_caches: usize,
}

/// Which naming methods this kernel supports: offsets from BTF, the slab
/// kfunc (bound into the object; the tp_btf check above loads it), and the
/// slab iterator (loaded and read).
fn naming_facts(kallsyms_data: bool, kernel: &KernelBtf, types: Option<&Types<'_>>) -> NamingFacts {
    let config = Config {
        layout: types.map_or(Layout::UNKNOWN, super::btf::layout),
        kfuncs: if types.is_some_and(|t| t.has_func("bpf_get_kmem_cache")) { KFUNC_GET_KMEM_CACHE } else { 0 },
        ..Config::default()
    };
    let mut methods = NamingMethods::of(&config, types);
    let mut slab_caches = 0;
    match fresh_object(types) {
        Ok(mut ebpf) => {
            if let Some(it) = load_slab_iter(&mut ebpf, kernel.aya.as_ref(), &mut methods) {
                match it.read() {
                    Ok(r) => slab_caches = r.len(),
                    Err(e) => {
                        methods.slab_iterator = false;
                        methods.missing.push(format!("slab cache names: reading the kmem_cache iterator: {e}"));
                    }
                }
            }
        }
        Err(e) => methods.missing.push(format!("slab cache names: loading the object: {}", error_chain(&e))),
    }
    if !kallsyms_data {
        methods.missing.push("global locks by symbol: kallsyms lists no data symbols (CONFIG_KALLSYMS_ALL off, or kptr_restrict); global locks are inferred from their callers".into());
    }
    NamingFacts { methods, slab_caches }
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

fn try_wait_backend(backend: BackendChoice) -> BackendCheck {
    let opts = LoadOptions { backend, holds: false, yield_to: false, ..Default::default() };
    let (available, detail, verifier_log) = match Probes::load(&opts) {
        Ok(mut p) => {
            let mut detail = "loaded and attached, then detached".to_string();
            if !p.notes().is_empty() {
                detail = format!("{detail}; {}", p.notes().join("; "));
            }
            p.detach();
            (true, detail, String::new())
        }
        Err(super::LoadError::NoBackend(tried)) => (
            false,
            tried.iter().map(|(b, e)| format!("{}: {e}", b.name())).collect::<Vec<_>>().join("; "),
            joined_logs(tried.iter().flat_map(|(_, e)| e.verifier_logs())),
        ),
        Err(e) => (false, e.to_string(), String::new()),
    };
    BackendCheck { name: backend.name(), available, detail, verifier_log }
}

/// Attaches one kind of probes on a fresh copy of the object (dropped,
/// hence detached, afterwards), reporting function by function.
fn try_probes(
    kind: ProbeKind,
    attach: fn(&mut aya::Ebpf, ProbeKind, Option<&Btf>) -> Attached,
    what: &str,
    kernel: &KernelBtf,
    types: Option<&Types<'_>>,
) -> BackendCheck {
    let check = |available, detail, verifier_log| BackendCheck { name: kind.name(), available, detail, verifier_log };
    let mut ebpf = match fresh_object(types) {
        Ok(o) => o,
        Err(e) => return check(false, format!("loading the object: {}", error_chain(&e)), String::new()),
    };
    let a = attach(&mut ebpf, kind, kernel.aya.as_ref());
    let mut parts = Vec::new();
    if !a.ok.is_empty() {
        parts.push(format!("{what} {}", a.ok.join(", ")));
    }
    if !a.failed.is_empty() {
        let names: Vec<&str> = a.failed.iter().map(|(f, _)| *f).collect();
        parts.push(format!("not probed: {} ({})", names.join(", "), a.summary()));
    }
    check(!a.ok.is_empty(), parts.join("; "), joined_logs(a.verifier_logs()))
}

/// Runs every check.
pub fn run() -> Doctor {
    let privs = check_privileges();
    let tracefs = if privs.cap_sys_admin { TraceFs::find_or_mount().ok() } else { TraceFs::find() };
    let lock_tracepoints = tracefs.as_ref().is_some_and(TraceFs::has_lock_events);
    let futex_tracepoints = tracefs
        .as_ref()
        .map(|t| super::futex::available(t).into_iter().map(String::from).collect())
        .unwrap_or_default();
    let (kallsyms, _) = check_kallsyms();
    // The kernel's BTF, read once for every check below.
    let kernel = KernelBtf::read();
    let types = kernel.types().ok();
    let mut backends = Vec::new();
    let mut holds = Vec::new();
    let mut yields = Vec::new();
    if privs.can_trace() {
        for choice in &BackendChoice::ALL[1..] {
            backends.push(try_wait_backend(*choice));
        }
        for kind in ProbeKind::ALL {
            holds.push(try_probes(kind, attach_releases, "releases seen through", &kernel, types.as_ref()));
            yields.push(try_probes(kind, attach_yield, "probed:", &kernel, types.as_ref()));
        }
    } else {
        let why = privs.missing().unwrap_or_default();
        for name in ["tp_btf", "tracepoint", "fentry", "kprobe"] {
            backends.push(BackendCheck::not_tried(name, &why));
        }
        for name in ["fentry", "kprobe"] {
            holds.push(BackendCheck::not_tried(name, &why));
            yields.push(BackendCheck::not_tried(name, &why));
        }
    }
    let avail = |n: &str| backends.iter().any(|b| b.name == n && b.available);
    let (auto_pick, auto_reason) = if avail("tp_btf") {
        (Some("tp_btf"), "tp_btf attaches: typed arguments, no tracefs needed, lowest overhead".to_string())
    } else if avail("tracepoint") {
        (Some("tracepoint"), "tp_btf is unavailable here; classic tracepoints attach".to_string())
    } else if avail("fentry") {
        (Some("fentry"), "no lock tracepoints; fentry/fexit on the slowpaths attach".to_string())
    } else if avail("kprobe") {
        (Some("kprobe"), "no lock tracepoints or fentry; kprobes on the slowpaths attach".to_string())
    } else if !privs.can_trace() {
        (None, privs.missing().unwrap_or_default())
    } else {
        (None, "no wait backend attaches on this kernel".to_string())
    };
    let hold_pick = holds.iter().find(|h| h.available).map(|h| h.name);
    let yield_pick = yields.iter().find(|h| h.available).map(|h| h.name);
    let task_offsets = kernel
        .types()
        .and_then(|t| super::btf::task_offsets(&t))
        .map(|o| format!("pid at {}, tgid at {}, comm at {}", o.pid, o.tgid, o.comm));
    let naming = naming_facts(kallsyms.data_symbols > 0, &kernel, types.as_ref());
    let owners = {
        let layout = types.as_ref().map_or(Layout::UNKNOWN, super::btf::layout);
        let rdonly = types.as_ref().is_some_and(|t| t.has_func("bpf_rdonly_cast"));
        owner_support(&layout, rdonly, hold_pick)
    };
    Doctor {
        kernel: kernel_release(),
        btf: std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        tracefs: tracefs.map(|t| t.root().display().to_string()),
        lock_tracepoints,
        futex_tracepoints,
        privileges: privs.into(),
        backends,
        kallsyms,
        auto_pick,
        auto_reason,
        holds,
        hold_pick,
        yield_to: yields,
        yield_pick,
        kvm_loaded: std::path::Path::new("/sys/module/kvm").exists(),
        task_offsets,
        naming,
        owners,
    }
}
