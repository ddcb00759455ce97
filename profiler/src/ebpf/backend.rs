//! Wait backends: the user's choice, what attached, and the tracepoint pair.

use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, TracePoint},
};
use profiler_common::names::prog;

use super::{
    TraceFs, TracefsError,
    attach_error::AttachError,
    probes::{Attached, ProbeKind, WAIT_TARGETS, program},
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
            WaitBackend::TpBtf => vec![prog::END_BTF, prog::BEGIN_BTF, prog::BEGIN_BTF_V61],
            WaitBackend::Tracepoint => vec![prog::END_TP, prog::BEGIN_TP, prog::BEGIN_TP_V61],
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

/// Why one wait backend did not attach.
#[derive(Debug, thiserror::Error)]
pub enum BackendFailure {
    /// A tracepoint program (tp_btf, classic) did not load or attach.
    #[error(transparent)]
    Tracepoints(#[from] AttachError),
    /// No slowpath could be probed (each function's error is kept).
    #[error("{0}")]
    Slowpaths(Attached),
}

impl BackendFailure {
    /// The verifier's logs of the failures: (program or function, log).
    pub fn verifier_logs(&self) -> Vec<(&'static str, String)> {
        match self {
            BackendFailure::Tracepoints(e @ AttachError::Load { prog, .. }) => {
                e.verifier_log().map(|l| (*prog, l)).into_iter().collect()
            }
            BackendFailure::Tracepoints(_) => Vec::new(),
            BackendFailure::Slowpaths(a) => a.verifier_logs().collect(),
        }
    }
}

/// The `lock:contention_{end,begin}` tracepoints' tp_btf programs; `modern`:
/// the kernel has `bpf_rdonly_cast` (6.2+), which the default begin program
/// is built for, else its 6.1-era build.
pub(super) fn attach_tp_btf(ebpf: &mut Ebpf, btf: Option<&Btf>, modern: bool) -> Result<(), AttachError> {
    let btf = btf.ok_or(AttachError::NoBtf)?;
    let begin = if modern { prog::BEGIN_BTF } else { prog::BEGIN_BTF_V61 };
    let pair = [(prog::END_BTF, "contention_end"), (begin, "contention_begin")];
    // Both verified before either attaches (see `attach_tracepoint`).
    for (prog, tp) in pair {
        let p: &mut BtfTracePoint = program(ebpf, prog)?;
        p.load(tp, btf).map_err(|error| AttachError::Load { prog, error })?;
    }
    for (prog, tp) in pair {
        let p: &mut BtfTracePoint = program(ebpf, prog)?;
        p.attach().map_err(|error| AttachError::Attach { prog, target: tp.into(), error })?;
    }
    Ok(())
}

/// The same tracepoints through tracefs (`modern` as for tp_btf).
pub(super) fn attach_tracepoint(ebpf: &mut Ebpf, modern: bool) -> Result<(), AttachError> {
    let tfs = TraceFs::find_or_mount()?;
    if !tfs.has_lock_events() {
        return Err(TracefsError::NoLockEvents.into());
    }
    let begin = if modern { prog::BEGIN_TP } else { prog::BEGIN_TP_V61 };
    let pair = [(prog::END_TP, "contention_end"), (begin, "contention_begin")];
    // Both verified before either attaches, the end first: attached while
    // the begin program was being verified (a tenth of a second on a
    // storm), the end program saw every wait end unbegun (9k of 277k in a
    // 4 s recording of a running getpriority storm).
    for (prog, _) in pair {
        let p: &mut TracePoint = program(ebpf, prog)?;
        p.load().map_err(|error| AttachError::Load { prog, error })?;
    }
    for (prog, tp) in pair {
        let p: &mut TracePoint = program(ebpf, prog)?;
        p.attach("lock", tp).map_err(|error| AttachError::Attach { prog, target: format!("lock:{tp}"), error })?;
    }
    Ok(())
}
