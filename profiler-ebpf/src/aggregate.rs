//! Aggregate mode: waits folded into this CPU's aggregates right after the
//! lock was acquired, while it is held. The hot keys live in a per-CPU
//! direct-mapped cache (array arithmetic only); the rest go to the active
//! per-CPU hash map.

use aya_ebpf::bindings::BPF_NOEXIST;
use profiler_common::{AGG_LOG_ENTRIES, AggKey, AggVal, agg_cache_index, hist_bucket};

use crate::{
    context::current_comm,
    maps::{ACTIVE, AGG_A, AGG_B, AGG_CACHE, AGG_LOG, AGG_LOG_LEN, AGG_ZERO},
};

#[inline(always)]
fn add_wait(v: &mut AggVal, wait: u64, comm: impl FnOnce() -> [u8; 16]) {
    if v.count == 0 {
        v.comm = comm();
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

/// Folds a wait into this CPU's aggregate for `key` (a new key takes the
/// current task's `comm`); false if the hash map is full.
#[inline(always)]
pub fn aggregate(key: &AggKey, wait: u64) -> bool {
    fold(key, wait, current_comm)
}

/// [`aggregate`], a new key taking its `comm` from `comm`.
#[inline(always)]
pub fn aggregate_as(key: &AggKey, wait: u64, comm: impl FnOnce() -> [u8; 16]) -> bool {
    fold(key, wait, comm)
}

/// Folds a wait into the cache slot of `key`, or, when another key holds
/// the slot (counted in that slot: see `cached`), appends it to this CPU's
/// log, or, with the log full, folds it into the hash map.
#[inline(always)]
fn fold(key: &AggKey, wait: u64, comm: impl FnOnce() -> [u8; 16]) -> bool {
    let epoch = ACTIVE.get(0).copied().unwrap_or(0);
    if let Some(v) = cached(key, epoch) {
        add_wait(v, wait, comm);
        return true;
    }
    if let Some((len, n)) = log_room(epoch) {
        let idx = (epoch & 1) * AGG_LOG_ENTRIES + n;
        if let Some(e) = AGG_LOG.get_ptr_mut(idx) {
            // SAFETY: this CPU's entry from a successful lookup, valid for
            // the map's lifetime; userspace reads a generation's entries
            // only after the programs moved to the next one.
            let e = unsafe { &mut *e };
            e.key = *key;
            e.wait_ns = wait;
            e.comm = comm();
            *len = n + 1;
            return true;
        }
    }
    let Some(v) = hashed(key, epoch) else {
        return false;
    };
    add_wait(v, wait, comm);
    true
}

/// This CPU's entry count of generation `epoch`'s log, and its value,
/// when the log has room.
#[inline(always)]
fn log_room(epoch: u32) -> Option<(&'static mut u32, u32)> {
    let len = AGG_LOG_LEN.get_ptr_mut(epoch & 1)?;
    // SAFETY: this CPU's counter from a successful lookup, valid for the
    // map's lifetime (see `context` for what a preempted fexit program can
    // do: at worst an entry written twice).
    let len = unsafe { &mut *len };
    let n = *len;
    (n < AGG_LOG_ENTRIES).then_some((len, n))
}

/// `key`'s value in this CPU's cache: its slot if the key owns it, or the
/// slot claimed for it if the slot is free in this generation. A slot
/// another key owns counts the miss (`missed`, drained with the slot).
#[inline(always)]
fn cached(key: &AggKey, epoch: u32) -> Option<&'static mut AggVal> {
    let slot = AGG_CACHE.get_ptr_mut(agg_cache_index(key, epoch))?;
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime (see `context` for what a preempted fexit program can do: at
    // worst a lost update). Userspace reads a generation's half only after
    // the programs moved to the next one.
    let slot = unsafe { &mut *slot };
    if slot.epoch == epoch && slot.val.count != 0 {
        if slot.key == *key {
            return Some(&mut slot.val);
        }
        slot.missed = slot.missed.wrapping_add(1);
        return None;
    }
    let zero = AGG_ZERO.get(0)?;
    slot.key = *key;
    slot.epoch = epoch;
    slot.missed = 0;
    slot.val = *zero;
    Some(&mut slot.val)
}

/// `key`'s value in this CPU's part of the active hash map. A new key is
/// inserted all-zero (from `AGG_ZERO`, never written) and then updated in
/// place like an existing one.
#[inline(always)]
fn hashed(key: &AggKey, epoch: u32) -> Option<&'static mut AggVal> {
    let map = if epoch & 1 == 0 { &AGG_A } else { &AGG_B };
    let value = match map.get_ptr_mut(key) {
        Some(v) => v,
        None => {
            let zero = AGG_ZERO.get(0)?;
            // Another CPU may create the key meanwhile: then this CPU's
            // (zeroed) value already exists and the lookup below finds it.
            let _ = map.insert(key, zero, u64::from(BPF_NOEXIST));
            map.get_ptr_mut(key)?
        }
    };
    // SAFETY: this CPU's value of a live per-CPU hash entry (see `context`
    // for what a preempted fexit program can do: at worst a lost update).
    Some(unsafe { &mut *value })
}
