//! kprobe/kretprobe and fentry/fexit attachment: the slowpath wait backends,
//! the release-function hold backends and `yield_to`. Each function that
//! fails to attach (renamed, inlined, not traceable) degrades only itself,
//! with a note.

use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, KProbe, Program, ProgramError},
};
use profiler_common::names::prog;

use super::attach_error::AttachError;
pub use super::probe_kind::ProbeKind;
use crate::symbols::KRETPROBE_TRAMPOLINES;

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
        kprobe: prog::KP_MUTEX,
        fentry: prog::FE_MUTEX,
        fexit: prog::FX_MUTEX,
        spinning: false,
    },
    WaitTarget {
        func: "__mutex_lock_killable_slowpath",
        kprobe: prog::KP_MUTEX,
        fentry: prog::FE_MUTEX_KILLABLE,
        fexit: prog::FX_MUTEX_KILLABLE,
        spinning: false,
    },
    WaitTarget {
        func: "__mutex_lock_interruptible_slowpath",
        kprobe: prog::KP_MUTEX,
        fentry: prog::FE_MUTEX_INTERRUPTIBLE,
        fexit: prog::FX_MUTEX_INTERRUPTIBLE,
        spinning: false,
    },
    WaitTarget {
        func: "rwsem_down_read_slowpath",
        kprobe: prog::KP_RWSEM_READ,
        fentry: prog::FE_RWSEM_READ,
        fexit: prog::FX_RWSEM_READ,
        spinning: false,
    },
    WaitTarget {
        func: "rwsem_down_write_slowpath",
        kprobe: prog::KP_RWSEM_WRITE,
        fentry: prog::FE_RWSEM_WRITE,
        fexit: prog::FX_RWSEM_WRITE,
        spinning: false,
    },
    WaitTarget {
        func: "queued_read_lock_slowpath",
        kprobe: prog::KP_RWLOCK_READ,
        fentry: prog::FE_RWLOCK_READ,
        fexit: prog::FX_RWLOCK_READ,
        spinning: true,
    },
    WaitTarget {
        func: "queued_write_lock_slowpath",
        kprobe: prog::KP_RWLOCK_WRITE,
        fentry: prog::FE_RWLOCK_WRITE,
        fexit: prog::FX_RWLOCK_WRITE,
        spinning: true,
    },
    // PREEMPT_RT: mutexes, rt_mutexes, spinlock_t and rw_semaphore readers
    // sleep in these (rwlock_t's and rwsem writers' slowpaths are inlined
    // into rt_read_lock/rt_write_lock and rwbase_write_lock there: the
    // tracepoint backends see those).
    WaitTarget {
        func: "rt_mutex_slowlock",
        kprobe: prog::KP_RT_MUTEX,
        fentry: prog::FE_RT_MUTEX,
        fexit: prog::FX_RT_MUTEX,
        spinning: false,
    },
    WaitTarget {
        func: "rtlock_slowlock_locked",
        kprobe: prog::KP_RTLOCK,
        fentry: prog::FE_RTLOCK,
        fexit: prog::FX_RTLOCK,
        spinning: false,
    },
    WaitTarget {
        func: "__rwbase_read_lock",
        kprobe: prog::KP_RWBASE_READ,
        fentry: prog::FE_RWBASE_READ,
        fexit: prog::FX_RWBASE_READ,
        spinning: false,
    },
];

/// Release functions (first argument: the lock) and their fentry programs.
pub const RELEASE_TARGETS: &[(&str, &str)] = &[
    ("mutex_unlock", prog::FR_MUTEX_UNLOCK),
    ("up_read", prog::FR_UP_READ),
    ("up_write", prog::FR_UP_WRITE),
    ("_raw_read_unlock", prog::FR_READ_UNLOCK),
    ("_raw_write_unlock", prog::FR_WRITE_UNLOCK),
    ("_raw_read_unlock_irq", prog::FR_READ_UNLOCK_IRQ),
    ("_raw_write_unlock_irq", prog::FR_WRITE_UNLOCK_IRQ),
    ("_raw_read_unlock_irqrestore", prog::FR_READ_UNLOCK_IRQRESTORE),
    ("_raw_write_unlock_irqrestore", prog::FR_WRITE_UNLOCK_IRQRESTORE),
    ("_raw_read_unlock_bh", prog::FR_READ_UNLOCK_BH),
    ("_raw_write_unlock_bh", prog::FR_WRITE_UNLOCK_BH),
    ("rt_read_unlock", prog::FR_RT_READ_UNLOCK),
    ("rt_write_unlock", prog::FR_RT_WRITE_UNLOCK),
];

/// What attached with one probe kind and what did not.
#[derive(Debug)]
pub struct Attached {
    /// How the functions were probed.
    pub kind: ProbeKind,
    /// Functions probed.
    pub ok: Vec<&'static str>,
    /// (function, why not).
    pub failed: Vec<(&'static str, AttachError)>,
}

impl Attached {
    fn new(kind: ProbeKind) -> Attached {
        Attached { kind, ok: Vec::new(), failed: Vec::new() }
    }

    /// One line: how many functions failed, the first error, and what it means.
    pub fn summary(&self) -> String {
        let Some((f, e)) = self.failed.first() else { return String::new() };
        let hint = e.cause(self.kind).map_or(String::new(), |c| format!(" ({})", c.explained()));
        if self.failed.len() == 1 {
            format!("{f}: {e}{hint}")
        } else {
            format!("{} of {} functions failed; {f}: {e}{hint}", self.failed.len(), self.failed.len() + self.ok.len())
        }
    }

    /// The short reason: the cause of the first failure, or its error.
    pub fn reason(&self) -> String {
        match self.failed.first() {
            Some((_, e)) => e.cause(self.kind).map_or_else(|| e.to_string(), |c| c.short().to_string()),
            None => String::new(),
        }
    }

    /// The verifier's logs of the failures: (function, log).
    pub fn verifier_logs(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        self.failed.iter().filter_map(|(f, e)| e.verifier_log().map(|l| (*f, l)))
    }
}

impl std::fmt::Display for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Program `name` of the object as its concrete type.
pub(super) fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, AttachError>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(AttachError::Missing(name))?
        .try_into()
        .map_err(|error: ProgramError| AttachError::WrongType { prog: name, error })
}

/// Detaches and unloads one program (a no-op when it was not loaded).
pub(super) fn unload_program(p: &mut Program) {
    let r = match p {
        Program::BtfTracePoint(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        _ => Ok(()),
    };
    if let Err(e) = r {
        log::debug!("unloading: {e}");
    }
}

/// Unloads the programs named `names`.
pub(super) fn unload_named(ebpf: &mut Ebpf, names: impl IntoIterator<Item = &'static str>) {
    for name in names {
        if let Some(p) = ebpf.program_mut(name) {
            unload_program(p);
        }
    }
}

/// `(address, kind, name)` of the kernel's own symbols in /proc/kallsyms
/// text (module symbols, which carry a fourth `[module]` field, left out).
fn kernel_symbols(text: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    text.lines().filter_map(|l| {
        let mut it = l.split_whitespace();
        let symbol = (it.next()?, it.next()?, it.next()?);
        it.next().is_none().then_some(symbol)
    })
}

/// What the probes need from /proc/kallsyms, read once per process (a
/// doctor run loads several fresh objects).
struct TextSymbols {
    /// Text symbols whose names carry a compiler suffix (`name.constprop.0`, `name.isra.0`).
    suffixed: Vec<String>,
    /// The kretprobe trampoline's address (arm64 only; 0 elsewhere or hidden).
    kretprobe_trampoline: u64,
}

fn text_symbols() -> &'static TextSymbols {
    static SYMBOLS: std::sync::OnceLock<TextSymbols> = std::sync::OnceLock::new();
    SYMBOLS.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let mut out = TextSymbols { suffixed: Vec::new(), kretprobe_trampoline: 0 };
        for (addr, kind, name) in kernel_symbols(&text) {
            if matches!(kind, "t" | "T") && name.contains('.') {
                out.suffixed.push(name.to_string());
            } else if cfg!(target_arch = "aarch64") && KRETPROBE_TRAMPOLINES.contains(&name) {
                out.kretprobe_trampoline = u64::from_str_radix(addr, 16).unwrap_or(0);
            }
        }
        out
    })
}

/// Address of the kernel's kretprobe trampoline, on arm64 (the kprobe entry
/// programs read the caller from the link register, which a kretprobe
/// registered later rewrites to it); 0 elsewhere or when kallsyms hides it.
pub fn kretprobe_trampoline() -> u64 {
    text_symbols().kretprobe_trampoline
}

/// The kallsyms name of `func` when the compiler only left a suffixed clone
/// of it (`rt_mutex_slowlock.constprop.0` on Debian's PREEMPT_RT kernels).
fn suffixed_variant(func: &str) -> Option<&'static str> {
    let prefix = format!("{func}.");
    text_symbols().suffixed.iter().find(|n| n.starts_with(&prefix)).map(String::as_str)
}

/// Loads kprobe program `prog` (once: one program serves several functions).
fn load_kprobe(ebpf: &mut Ebpf, prog: &'static str) -> Result<(), AttachError> {
    let p: &mut KProbe = program(ebpf, prog)?;
    if p.fd().is_err() {
        p.load().map_err(|error| AttachError::Load { prog, error })?;
    }
    Ok(())
}

/// Loads kprobe program `prog` (see `load_kprobe`) and attaches it to
/// `func`, or to its suffixed clone when only that exists.
fn attach_kprobe(ebpf: &mut Ebpf, prog: &'static str, func: &str) -> Result<(), AttachError> {
    load_kprobe(ebpf, prog)?;
    let p: &mut KProbe = program(ebpf, prog)?;
    let attach = |p: &mut KProbe, target: &str| {
        p.attach(target, 0).map(drop).map_err(|error| AttachError::Attach { prog, target: target.into(), error })
    };
    match attach(p, func) {
        Err(e) if e.os_error() == Some(libc::ENOENT) => match suffixed_variant(func) {
            Some(clone) => attach(p, clone),
            None => Err(e),
        },
        r => r,
    }
}

/// Loads fentry program `prog` for `func` and attaches it.
fn attach_fentry(ebpf: &mut Ebpf, prog: &'static str, func: &str, btf: &Btf) -> Result<(), AttachError> {
    let p: &mut FEntry = program(ebpf, prog)?;
    p.load(func, btf).map_err(|error| AttachError::Load { prog, error })?;
    p.attach().map(drop).map_err(|error| AttachError::Attach { prog, target: func.into(), error })
}

/// Loads the fexit program `exit` and the fentry program `entry` for
/// `func`, then attaches the exit first (see `attach_waits`).
fn attach_fentry_pair(
    ebpf: &mut Ebpf,
    (entry, exit): (&'static str, &'static str),
    func: &str,
    btf: &Btf,
) -> Result<(), AttachError> {
    let x: &mut FExit = program(ebpf, exit)?;
    x.load(func, btf).map_err(|error| AttachError::Load { prog: exit, error })?;
    let e: &mut FEntry = program(ebpf, entry)?;
    e.load(func, btf).map_err(|error| AttachError::Load { prog: entry, error })?;
    let x: &mut FExit = program(ebpf, exit)?;
    x.attach().map(drop).map_err(|error| AttachError::Attach { prog: exit, target: func.into(), error })?;
    let e: &mut FEntry = program(ebpf, entry)?;
    e.attach().map(drop).map_err(|error| AttachError::Attach { prog: entry, target: func.into(), error })
}

fn need_btf(btf: Option<&Btf>) -> Result<&Btf, AttachError> {
    btf.ok_or(AttachError::NoBtf)
}

/// Attaches the slowpath wait programs.
pub fn attach_waits(ebpf: &mut Ebpf, kind: ProbeKind, btf: Option<&Btf>) -> Attached {
    let mut out = Attached::new(kind);
    for t in WAIT_TARGETS {
        let ret = if t.spinning { prog::KRP_SPIN } else { prog::KRP_SLEEP };
        // Both programs verified before either attaches, then the return
        // probe first: no entry is left without its return, and no return
        // fires unbegun while the entry program is still being verified.
        let r = match kind {
            ProbeKind::Kprobe => load_kprobe(ebpf, t.kprobe)
                .and_then(|()| attach_kprobe(ebpf, ret, t.func))
                .and_then(|()| attach_kprobe(ebpf, t.kprobe, t.func)),
            ProbeKind::Fentry => {
                need_btf(btf).and_then(|btf| attach_fentry_pair(ebpf, (t.fentry, t.fexit), t.func, btf))
            }
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
    let mut out = Attached::new(kind);
    for (func, fentry) in RELEASE_TARGETS {
        let r = match kind {
            ProbeKind::Kprobe => attach_kprobe(ebpf, prog::KP_RELEASE, func),
            ProbeKind::Fentry => need_btf(btf).and_then(|btf| attach_fentry(ebpf, fentry, func, btf)),
        };
        match r {
            Ok(()) => out.ok.push(func),
            Err(e) => out.failed.push((func, e)),
        }
    }
    out
}

/// Programs of the release probes, of both kinds.
pub fn release_programs() -> impl Iterator<Item = &'static str> {
    RELEASE_TARGETS.iter().map(|(_, p)| *p).chain([prog::KP_RELEASE])
}

/// The KVM directed-yield function lockprof probes.
pub const YIELD_FUNC: &str = "yield_to";

/// Programs of the yield_to probes, by kind: (entry, return).
pub fn yield_programs(kind: ProbeKind) -> [&'static str; 2] {
    match kind {
        ProbeKind::Fentry => [prog::FE_YIELD_TO, prog::FX_YIELD_TO],
        ProbeKind::Kprobe => [prog::KP_YIELD_TO, prog::KRP_YIELD_TO],
    }
}

/// Attaches the yield_to entry and return programs of one kind (both
/// verified first, then the return, as in `attach_waits`).
pub fn attach_yield(ebpf: &mut Ebpf, kind: ProbeKind, btf: Option<&Btf>) -> Attached {
    let [entry, ret] = yield_programs(kind);
    let r = match kind {
        ProbeKind::Kprobe => load_kprobe(ebpf, entry)
            .and_then(|()| attach_kprobe(ebpf, ret, YIELD_FUNC))
            .and_then(|()| attach_kprobe(ebpf, entry, YIELD_FUNC)),
        ProbeKind::Fentry => need_btf(btf).and_then(|btf| attach_fentry_pair(ebpf, (entry, ret), YIELD_FUNC, btf)),
    };
    let mut out = Attached::new(kind);
    match r {
        Ok(()) => out.ok.push(YIELD_FUNC),
        Err(e) => out.failed.push((YIELD_FUNC, e)),
    }
    out
}
