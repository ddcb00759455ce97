//! Loading, attaching and probing lockprof's eBPF programs, in phases like
//! perf's `bpf_lock_contention.c`: [`object`] prepares the object (globals,
//! map sizes), [`load`] attaches what the kernel allows (holds, yield_to,
//! then a wait backend, tried in order), [`maps`] owns the maps userspace
//! services while recording, [`features`] tries everything for `doctor`.

mod attach_error;
mod backend;
pub mod btf;
mod caps;
pub mod features;
#[cfg(feature = "bench")]
mod floor;
mod futex;
mod identities;
mod kfuncs;
mod load;
pub mod maps;
mod object;
mod probe_kind;
pub mod probes;
mod slabs;
mod tracefs;

pub use attach_error::{AttachError, Cause};
pub use backend::{BackendChoice, BackendFailure, WaitBackend};
pub use caps::{Privileges, check_privileges};
#[cfg(feature = "bench")]
pub use floor::FloorProbes;
pub use identities::{KernelIdentities, NamingMethods};
pub use load::{LoadError, Probes};
pub use maps::{
    AggMaps, CgroupFilter, CounterValues, FutexMaps, KernelCounters, KernelStacks, KernelUnwindSink, KernelUserStacks,
    PendingMaps, ProgramFd, RecursionMisses, merge_cpus, recursion_misses,
};
pub use object::{LoadOptions, object_bytes};
pub use tracefs::{TraceFs, TracefsError};

/// An error with its sources, `outer: inner: innermost` (aya's messages often
/// keep the kernel's answer in the source).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let msg = src.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = src.source();
    }
    s
}
