//! Aggregate mode: waits folded into this CPU's value of the active per-CPU
//! hash map, right after the lock was acquired (CPU-local work only).

use aya_ebpf::bindings::BPF_NOEXIST;
use profiler_common::{AggKey, AggVal, hist_bucket};

use crate::maps::{ACTIVE, AGG_A, AGG_B, AGG_ZERO};

#[inline(always)]
fn add_wait(v: &mut AggVal, wait: u64) {
    if v.count == 0 {
        v.comm = aya_ebpf::helpers::bpf_get_current_comm().unwrap_or([0u8; 16]);
        v.min_ns = wait;
    } else if wait < v.min_ns {
        v.min_ns = wait;
    }
    if wait > v.max_ns {
        v.max_ns = wait;
    }
    v.count += 1;
    v.total_ns += wait;
    if let Some(slot) = v.hist.get_mut(hist_bucket(wait)) {
        *slot += 1;
    }
}

/// Folds a wait into this CPU's value for `key`; false if the map is full.
/// A new key is inserted all-zero (from `AGG_ZERO`, never written) and then
/// updated in place like an existing one.
#[inline(always)]
pub fn aggregate(key: &AggKey, wait: u64) -> bool {
    let active = ACTIVE.get(0).copied().unwrap_or(0);
    let map = if active == 0 { &AGG_A } else { &AGG_B };
    let value = match map.get_ptr_mut(key) {
        Some(v) => v,
        None => {
            let Some(zero) = AGG_ZERO.get(0) else {
                return false;
            };
            // Another CPU may create the key meanwhile: then this CPU's
            // (zeroed) value already exists and the lookup below finds it.
            let _ = map.insert(key, zero, u64::from(BPF_NOEXIST));
            match map.get_ptr_mut(key) {
                Some(v) => v,
                None => return false,
            }
        }
    };
    // SAFETY: this CPU's value of a live per-CPU hash entry (see `context`
    // for what a preempted fexit program can do: at worst a lost update).
    add_wait(unsafe { &mut *value }, wait);
    true
}
