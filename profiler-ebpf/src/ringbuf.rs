//! The one routine that sends a record to userspace.

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
};
use aya_log_ebpf::warn;
use profiler_common::counter;

use crate::{
    context::{config, count},
    maps::EVENTS,
};

/// Ring-buffer submit flags: wake the reader only once enough is waiting
/// (below that the reader polls on a timer).
#[inline(always)]
fn submit_flags() -> u64 {
    let f = if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= config().wakeup_bytes {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    u64::from(f)
}

/// Sends `record` (a `#[repr(C)]` record led by its kind); counts it, or
/// counts the loss when the ring buffer is full.
#[inline(always)]
pub fn send<C: EbpfContext, T: 'static>(ctx: &C, record: T) {
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(record);
            entry.submit(submit_flags());
            count(counter::EVENTS);
        }
        None => {
            if count(counter::RINGBUF_FULL) {
                warn!(ctx, "lockprof: ring buffer full, events are being lost");
            }
        }
    }
}
