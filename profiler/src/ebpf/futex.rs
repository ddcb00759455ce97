//! User-space locks: the futex system calls' tracepoints, attached after
//! the lock families (`--futex`). Each tracepoint the kernel has is
//! attached; one it lacks (5.10 has neither `futex_wait` nor
//! `futex_waitv`) is listed in the notes, and without `sys_enter_futex`
//! there is no futex tracing at all.

use aya::{Ebpf, programs::TracePoint};
use profiler_common::names::futex::{CATEGORY, REQUIRED, TRACEPOINTS};

use super::{
    TraceFs, error_chain,
    probe_kind::Unavailable,
    probes::{program, unload_named},
};

/// The futex tracepoints this kernel has.
pub(super) fn available(tfs: &TraceFs) -> Vec<&'static str> {
    TRACEPOINTS.iter().map(|(tp, _)| *tp).filter(|tp| tfs.has_event(CATEGORY, tp)).collect()
}

/// Attaches every futex tracepoint the kernel has; the ones attached, or
/// why futex waits cannot be traced.
pub(super) fn attach(ebpf: &mut Ebpf, notes: &mut Vec<String>) -> Result<Vec<&'static str>, Unavailable> {
    let tfs = TraceFs::find_or_mount().map_err(|e| Unavailable {
        reason: format!("futex waits need tracefs for the syscall tracepoints ({e})"),
        detail: String::new(),
    })?;
    let have = available(&tfs);
    if let Some(tp) = REQUIRED.iter().find(|tp| !have.contains(tp)) {
        return Err(Unavailable {
            reason: format!(
                "this kernel has no {CATEGORY}:{tp} tracepoint (CONFIG_FTRACE_SYSCALLS is off): futex waits cannot be traced"
            ),
            detail: String::new(),
        });
    }
    let mut attached = Vec::new();
    for (tp, name) in TRACEPOINTS {
        if !have.contains(tp) {
            notes.push(format!("futex: this kernel has no {CATEGORY}:{tp} (those waits are not seen)"));
            continue;
        }
        let r = program::<TracePoint>(ebpf, name).map_err(|e| e.to_string()).and_then(|p| {
            if p.fd().is_err() {
                p.load().map_err(|e| error_chain(&e))?;
            }
            p.attach(CATEGORY, tp).map(|_| ()).map_err(|e| error_chain(&e))
        });
        match r {
            Ok(()) => attached.push(*tp),
            Err(e) if REQUIRED.contains(tp) => {
                log::info!("futex: {CATEGORY}:{tp}: {e}");
                unload_named(ebpf, TRACEPOINTS.iter().map(|(_, p)| *p));
                return Err(Unavailable {
                    reason: format!("futex waits cannot be traced: {CATEGORY}:{tp} did not attach"),
                    detail: e,
                });
            }
            Err(e) => notes.push(format!("futex: {CATEGORY}:{tp} did not attach ({e}); those waits are not seen")),
        }
    }
    Ok(attached)
}
