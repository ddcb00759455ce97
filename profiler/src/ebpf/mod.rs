//! Loading, attaching and probing lockprof's eBPF programs.

mod aggregates;
pub mod btf;
mod caps;
mod counters;
pub mod features;
mod load;
mod pending;
pub mod probes;
mod tracefs;

pub use aggregates::{AggMaps, FLIP_GRACE, merge_cpus};
pub use caps::{Privileges, check_privileges};
pub use counters::{KernelCounters, recursion_misses};
pub use load::{BackendChoice, FloorProbes, KernelStacks, LoadError, LoadOptions, Probes, WaitBackend};
pub use pending::PendingMaps;
pub use tracefs::{TraceFs, TracefsError};

/// The eBPF object built by build.rs, embedded at compile time.
pub(crate) fn object_bytes() -> &'static [u8] {
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"))
}

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
