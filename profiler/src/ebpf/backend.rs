//! Wait backends: the user's choice, what attached, and the tracepoint pair.

use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, TracePoint},
};
use profiler_common::names::prog;

use super::{
    TraceFs, TracefsError, error_chain,
    probes::{ProbeKind, WAIT_TARGETS, program},
};

/// The user's `--backend` choice.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// tp_btf if the kernel takes it, else classic tracepoints, fentry, kprobe.
    #[default]
    Auto,
    /// BTF-typed raw tracepoints (no tracefs needed).
    TpBtf,
    /// Classic tracepoints through tracefs.
    Tracepoint,
    /// fentry/fexit on the lock slowpaths (BPF trampolines).
    Fentry,
    /// kprobe/kretprobe on the lock slowpaths.
    Kprobe,
}

impl BackendChoice {
    /// Every choice.
    pub const ALL: [BackendChoice; 5] = [
        BackendChoice::Auto,
        BackendChoice::TpBtf,
        BackendChoice::Tracepoint,
        BackendChoice::Fentry,
        BackendChoice::Kprobe,
    ];

    /// Stable name, as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::TpBtf => "tp_btf",
            BackendChoice::Tracepoint => "tracepoint",
            BackendChoice::Fentry => "fentry",
            BackendChoice::Kprobe => "kprobe",
        }
    }

    /// Backends to try, in order.
    pub fn order(self) -> &'static [WaitBackend] {
        match self {
            BackendChoice::Auto => {
                &[WaitBackend::TpBtf, WaitBackend::Tracepoint, WaitBackend::Fentry, WaitBackend::Kprobe]
            }
            BackendChoice::TpBtf => &[WaitBackend::TpBtf],
            BackendChoice::Tracepoint => &[WaitBackend::Tracepoint],
            BackendChoice::Fentry => &[WaitBackend::Fentry],
            BackendChoice::Kprobe => &[WaitBackend::Kprobe],
        }
    }
}

/// The wait backend actually attached.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WaitBackend {
    /// `tp_btf/contention_{begin,end}`.
    TpBtf,
    /// `tracepoint/lock/contention_{begin,end}`.
    Tracepoint,
    /// fentry/fexit on the slowpaths.
    Fentry,
    /// kprobe/kretprobe on the slowpaths.
    Kprobe,
}

impl WaitBackend {
    /// Stable name, as in reports.
    pub fn name(self) -> &'static str {
        match self {
            WaitBackend::TpBtf => "tp_btf",
            WaitBackend::Tracepoint => "tracepoint",
            WaitBackend::Fentry => "fentry",
            WaitBackend::Kprobe => "kprobe",
        }
    }

    /// The probe mechanism of a slowpath backend.
    pub fn probe_kind(self) -> Option<ProbeKind> {
        match self {
            WaitBackend::Fentry => Some(ProbeKind::Fentry),
            WaitBackend::Kprobe => Some(ProbeKind::Kprobe),
            WaitBackend::TpBtf | WaitBackend::Tracepoint => None,
        }
    }

    /// Its programs. End first: attaching begin before end could leave waits
    /// whose end was never seen in the pending map.
    pub fn programs(self) -> Vec<&'static str> {
        match self {
            WaitBackend::TpBtf => vec![prog::END_BTF, prog::BEGIN_BTF],
            WaitBackend::Tracepoint => vec![prog::END_TP, prog::BEGIN_TP],
            WaitBackend::Fentry => WAIT_TARGETS.iter().flat_map(|t| [t.fexit, t.fentry]).collect(),
            WaitBackend::Kprobe => {
                let mut v = vec![prog::KRP_SLEEP, prog::KRP_SPIN];
                for t in WAIT_TARGETS {
                    if !v.contains(&t.kprobe) {
                        v.push(t.kprobe);
                    }
                }
                v
            }
        }
    }
}

/// The `lock:contention_{end,begin}` tracepoints' tp_btf programs.
pub(super) fn attach_tp_btf(ebpf: &mut Ebpf, btf: Option<&Btf>) -> Result<(), String> {
    let btf = btf.ok_or("no kernel BTF (/sys/kernel/btf/vmlinux): tp_btf needs CONFIG_DEBUG_INFO_BTF")?;
    for (name, tp) in [(prog::END_BTF, "contention_end"), (prog::BEGIN_BTF, "contention_begin")] {
        let p: &mut BtfTracePoint = program(ebpf, name)?;
        p.load(tp, btf).map_err(|e| format!("loading {name}: {}", error_chain(&e)))?;
        p.attach().map_err(|e| format!("attaching {name}: {}", error_chain(&e)))?;
    }
    Ok(())
}

/// The same tracepoints through tracefs.
pub(super) fn attach_tracepoint(ebpf: &mut Ebpf) -> Result<(), String> {
    let tfs = TraceFs::find_or_mount().map_err(|e| e.to_string())?;
    if !tfs.has_lock_events() {
        return Err(TracefsError::NoLockEvents.to_string());
    }
    for (name, tp) in [(prog::END_TP, "contention_end"), (prog::BEGIN_TP, "contention_begin")] {
        let p: &mut TracePoint = program(ebpf, name)?;
        p.load().map_err(|e| format!("loading {name}: {}", error_chain(&e)))?;
        p.attach("lock", tp).map_err(|e| format!("attaching {name}: {}", error_chain(&e)))?;
    }
    Ok(())
}
