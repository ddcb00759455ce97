//! Ring buffer reader: drains every record into a batch on a poll timer, or
//! sooner when the kernel side forces a wakeup because the ring is filling
//! (the programs submit with BPF_RB_NO_WAKEUP below a threshold: per-event
//! wakeups were the largest cost of tracing a pipe storm). Batches go down a
//! bounded channel; backpressure reaches the kernel, whose ring-buffer-full
//! counter then says what was lost.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::ContentionEvent;
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

/// Events sent to the aggregator together.
pub type Batch = Vec<ContentionEvent>;

/// What flows to the aggregator.
#[derive(Debug)]
pub enum Msg {
    /// Ring buffer records.
    Events(Batch),
    /// Drained in-kernel aggregates (aggregate mode).
    Aggregates(Vec<(profiler_common::AggKey, profiler_common::AggVal)>),
}

/// Reader bookkeeping, shared with the session.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records of the wrong size.
    pub malformed: AtomicU64,
    /// Records decoded.
    pub received: AtomicU64,
}

/// Decodes one ring buffer record; `None` if it has the wrong size.
pub fn decode(bytes: &[u8]) -> Option<ContentionEvent> {
    if bytes.len() != std::mem::size_of::<ContentionEvent>() {
        return None;
    }
    // SAFETY: the length equals size_of::<ContentionEvent>(), the type is
    // repr(C) plain old data valid for any bit pattern, and read_unaligned
    // makes no alignment assumption.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<ContentionEvent>()) })
}

/// Moves every available record into `batch`; counts them.
pub fn drain(ring: &mut RingBuf<MapData>, batch: &mut Batch, stats: &ReaderStats) {
    let before = batch.len();
    while let Some(item) = ring.next() {
        match decode(&item) {
            Some(ev) => batch.push(ev),
            None => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    stats.received.fetch_add((batch.len() - before) as u64, Ordering::Relaxed);
}

/// Reads until `stop`, then drains once more and returns the ring buffer
/// (the caller detaches the programs before cancelling, so nothing is missed).
pub async fn run(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<Msg>,
    stop: CancellationToken,
    stats: Arc<ReaderStats>,
    poll: std::time::Duration,
) -> std::io::Result<RingBuf<MapData>> {
    // SAFETY: the ring buffer owns its map fd, which stays open and unchanged
    // for as long as the AsyncFd owns the ring buffer.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                let mut batch = Vec::with_capacity(1024);
                drain(afd.get_mut(), &mut batch, &stats);
                if !batch.is_empty() && tx.send(Msg::Events(batch)).await.is_err() {
                    break;
                }
            }
            guard = afd.readable_mut() => {
                let mut guard = guard?;
                let mut batch = Vec::with_capacity(1024);
                drain(guard.get_inner_mut(), &mut batch, &stats);
                guard.clear_ready();
                // Records that landed between the drain and clear_ready have
                // already signalled; pick them up now rather than at the next edge.
                drain(guard.get_inner_mut(), &mut batch, &stats);
                if !batch.is_empty() && tx.send(Msg::Events(batch)).await.is_err() {
                    break;
                }
            }
        }
    }
    let mut ring = afd.into_inner();
    let mut batch = Vec::new();
    drain(&mut ring, &mut batch, &stats);
    if !batch.is_empty() {
        let _ = tx.send(Msg::Events(batch)).await;
    }
    Ok(ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_exact_size_records_only() {
        let ev = ContentionEvent { lock_addr: 0xdead, wait_ns: 42, tid: 7, stack_id: -14, ..Default::default() };
        // SAFETY: reading the bytes of a repr(C) POD value we own.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&ev as *const ContentionEvent).cast::<u8>(),
                std::mem::size_of::<ContentionEvent>(),
            )
        };
        assert_eq!(decode(bytes), Some(ev));
        let mut unaligned = vec![0u8; bytes.len() + 1];
        unaligned[1..].copy_from_slice(bytes);
        assert_eq!(decode(&unaligned[1..]), Some(ev));
        assert_eq!(decode(&bytes[..10]), None);
        assert_eq!(decode(&[]), None);
    }
}
