//! kprobe/kretprobe and fentry/fexit attachment: the slowpath wait backends
//! and the release-function hold backends. Each function that fails to
//! attach (renamed, inlined, not traceable) degrades only itself, with a note.

use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, KProbe, Program, ProgramError},
};

use super::error_chain;

/// A probed slowpath and the programs for it.
pub struct WaitTarget {
    /// Kernel function.
    pub func: &'static str,
    /// kprobe program at entry (shared by the family).
    pub kprobe: &'static str,
    /// fentry program (one per function).
    pub fentry: &'static str,
    /// fexit program (one per function).
    pub fexit: &'static str,
    /// A spinning slowpath (rwlock), tracked per CPU.
    pub spinning: bool,
}

/// The lock slowpaths lockprof probes.
pub const WAIT_TARGETS: &[WaitTarget] = &[
    WaitTarget {
        func: "__mutex_lock_slowpath",
        kprobe: "kp_mutex",
        fentry: "fe_mutex",
        fexit: "fx_mutex",
        spinning: false,
    },
    WaitTarget {
        func: "__mutex_lock_killable_slowpath",
        kprobe: "kp_mutex",
        fentry: "fe_mutex_killable",
        fexit: "fx_mutex_killable",
        spinning: false,
    },
    WaitTarget {
        func: "__mutex_lock_interruptible_slowpath",
        kprobe: "kp_mutex",
        fentry: "fe_mutex_interruptible",
        fexit: "fx_mutex_interruptible",
        spinning: false,
    },
    WaitTarget {
        func: "rwsem_down_read_slowpath",
        kprobe: "kp_rwsem_read",
        fentry: "fe_rwsem_read",
        fexit: "fx_rwsem_read",
        spinning: false,
    },
    WaitTarget {
        func: "rwsem_down_write_slowpath",
        kprobe: "kp_rwsem_write",
        fentry: "fe_rwsem_write",
        fexit: "fx_rwsem_write",
        spinning: false,
    },
    WaitTarget {
        func: "queued_read_lock_slowpath",
        kprobe: "kp_rwlock_read",
        fentry: "fe_rwlock_read",
        fexit: "fx_rwlock_read",
        spinning: true,
    },
    WaitTarget {
        func: "queued_write_lock_slowpath",
        kprobe: "kp_rwlock_write",
        fentry: "fe_rwlock_write",
        fexit: "fx_rwlock_write",
        spinning: true,
    },
];

/// Release functions (first argument: the lock) and their fentry programs.
pub const RELEASE_TARGETS: &[(&str, &str)] = &[
    ("mutex_unlock", "fr_mutex_unlock"),
    ("up_read", "fr_up_read"),
    ("up_write", "fr_up_write"),
    ("_raw_read_unlock", "fr_read_unlock"),
    ("_raw_write_unlock", "fr_write_unlock"),
    ("_raw_read_unlock_irq", "fr_read_unlock_irq"),
    ("_raw_write_unlock_irq", "fr_write_unlock_irq"),
    ("_raw_read_unlock_irqrestore", "fr_read_unlock_irqrestore"),
    ("_raw_write_unlock_irqrestore", "fr_write_unlock_irqrestore"),
    ("_raw_read_unlock_bh", "fr_read_unlock_bh"),
    ("_raw_write_unlock_bh", "fr_write_unlock_bh"),
];

/// Which probe mechanism.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// fentry/fexit (BPF trampolines).
    Fentry,
    /// kprobe/kretprobe.
    Kprobe,
}

impl ProbeKind {
    /// Name, as in reports.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Fentry => "fentry",
            ProbeKind::Kprobe => "kprobe",
        }
    }
}

/// What attached and what did not.
#[derive(Debug, Default)]
pub struct Attached {
    /// Functions probed.
    pub ok: Vec<&'static str>,
    /// (function, why not).
    pub failed: Vec<(&'static str, String)>,
}

impl Attached {
    /// One line: how many functions failed, the first error, and what it means.
    pub fn summary(&self, kind: ProbeKind) -> String {
        let Some((f, e)) = self.failed.first() else { return String::new() };
        let hint = if e.contains("kprobe/type") {
            " (no kprobe PMU: the kernel was built without CONFIG_KPROBES)"
        } else if kind == ProbeKind::Fentry && e.contains("Operation not permitted") {
            " (the kernel refused a BPF trampoline: fentry/fexit need CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, and lockdown or the hypervisor may forbid them)"
        } else {
            ""
        };
        let e = e.trim_end_matches(". Verifier output: ").trim_end_matches(" Verifier output:").trim_end();
        if self.failed.len() == 1 {
            format!("{f}: {e}{hint}")
        } else {
            format!("{} of {} functions failed; {f}: {e}{hint}", self.failed.len(), self.failed.len() + self.ok.len())
        }
    }
}

/// Program `name` of the object as its concrete type.
fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing"))?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())
}

/// Loads kprobe program `prog` (once: one program serves several functions)
/// and attaches it to `func`.
fn attach_kprobe(ebpf: &mut Ebpf, prog: &str, func: &str) -> Result<(), String> {
    let p: &mut KProbe = program(ebpf, prog)?;
    if p.fd().is_err() {
        p.load().map_err(|e| format!("loading {prog}: {}", error_chain(&e)))?;
    }
    p.attach(func, 0).map(drop).map_err(|e| error_chain(&e))
}

/// Loads fentry program `prog` for `func` and attaches it.
fn attach_fentry(ebpf: &mut Ebpf, prog: &str, func: &str, btf: &Btf) -> Result<(), String> {
    let p: &mut FEntry = program(ebpf, prog)?;
    p.load(func, btf).map_err(|e| format!("loading fentry: {}", error_chain(&e)))?;
    p.attach().map(drop).map_err(|e| format!("attaching fentry: {}", error_chain(&e)))
}

/// Loads fexit program `prog` for `func` and attaches it.
fn attach_fexit(ebpf: &mut Ebpf, prog: &str, func: &str, btf: &Btf) -> Result<(), String> {
    let p: &mut FExit = program(ebpf, prog)?;
    p.load(func, btf).map_err(|e| format!("loading fexit: {}", error_chain(&e)))?;
    p.attach().map(drop).map_err(|e| format!("attaching fexit: {}", error_chain(&e)))
}

/// Attaches the slowpath wait programs.
pub fn attach_waits(ebpf: &mut Ebpf, kind: ProbeKind, btf: Option<&Btf>) -> Attached {
    let mut out = Attached::default();
    for t in WAIT_TARGETS {
        let r = match kind {
            ProbeKind::Kprobe => attach_kprobe(ebpf, t.kprobe, t.func)
                .and_then(|()| attach_kprobe(ebpf, if t.spinning { "krp_spin" } else { "krp_sleep" }, t.func)),
            ProbeKind::Fentry => match btf {
                None => Err("no kernel BTF".to_string()),
                Some(btf) => {
                    attach_fentry(ebpf, t.fentry, t.func, btf).and_then(|()| attach_fexit(ebpf, t.fexit, t.func, btf))
                }
            },
        };
        match r {
            Ok(()) => out.ok.push(t.func),
            Err(e) => out.failed.push((t.func, e)),
        }
    }
    out
}

/// Attaches the release (hold) programs.
pub fn attach_releases(ebpf: &mut Ebpf, kind: ProbeKind, btf: Option<&Btf>) -> Attached {
    let mut out = Attached::default();
    for (func, fentry) in RELEASE_TARGETS {
        let r = match kind {
            ProbeKind::Kprobe => attach_kprobe(ebpf, "kp_release", func),
            ProbeKind::Fentry => match btf {
                None => Err("no kernel BTF".to_string()),
                Some(btf) => attach_fentry(ebpf, fentry, func, btf),
            },
        };
        match r {
            Ok(()) => out.ok.push(func),
            Err(e) => out.failed.push((func, e)),
        }
    }
    out
}

/// The KVM directed-yield function lockprof probes.
pub const YIELD_FUNC: &str = "yield_to";

/// Programs of the yield_to probes, by kind: (entry, return).
pub fn yield_programs(kind: ProbeKind) -> [&'static str; 2] {
    match kind {
        ProbeKind::Fentry => ["fe_yield_to", "fx_yield_to"],
        ProbeKind::Kprobe => ["kp_yield_to", "krp_yield_to"],
    }
}

/// Attaches the yield_to entry and return programs of one kind (return first,
/// so no entry is left without its return).
pub fn attach_yield(ebpf: &mut Ebpf, kind: ProbeKind, btf: Option<&Btf>) -> Result<(), String> {
    let [entry, ret] = yield_programs(kind);
    match kind {
        ProbeKind::Kprobe => {
            attach_kprobe(ebpf, ret, YIELD_FUNC)?;
            attach_kprobe(ebpf, entry, YIELD_FUNC)
        }
        ProbeKind::Fentry => {
            let btf = btf.ok_or_else(|| "no kernel BTF".to_string())?;
            attach_fexit(ebpf, ret, YIELD_FUNC, btf)?;
            attach_fentry(ebpf, entry, YIELD_FUNC, btf)
        }
    }
}

/// What [`attach_yield`]'s error means, for messages.
pub fn yield_hint(kind: ProbeKind, e: &str) -> String {
    let a = Attached { ok: Vec::new(), failed: vec![(YIELD_FUNC, e.to_string())] };
    a.summary(kind)
}
