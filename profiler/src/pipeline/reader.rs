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
use profiler_common::{ContentionEvent, EVENT_YIELD, YieldEvent};
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
    /// `yield_to` calls (KVM directed yield).
    Yields(Vec<YieldEvent>),
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

/// Decodes one `yield_to` record; `None` if the size or kind is wrong.
pub fn decode_yield(bytes: &[u8]) -> Option<YieldEvent> {
    if bytes.len() != std::mem::size_of::<YieldEvent>() {
        return None;
    }
    // SAFETY: the length equals size_of::<YieldEvent>(), the type is repr(C)
    // plain old data valid for any bit pattern, and read_unaligned makes no
    // alignment assumption.
    let ev = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<YieldEvent>()) };
    (ev.kind == EVENT_YIELD).then_some(ev)
}

/// Records read in one drain.
#[derive(Debug, Default)]
pub struct Drained {
    /// Contention, hold and outlier records.
    pub events: Batch,
    /// `yield_to` records.
    pub yields: Vec<YieldEvent>,
}

impl Drained {
    fn with_capacity(n: usize) -> Drained {
        Drained { events: Vec::with_capacity(n), yields: Vec::new() }
    }

    /// Sends what was read; false if the aggregator is gone.
    async fn send(self, tx: &mpsc::Sender<Msg>) -> bool {
        if !self.yields.is_empty() && tx.send(Msg::Yields(self.yields)).await.is_err() {
            return false;
        }
        self.events.is_empty() || tx.send(Msg::Events(self.events)).await.is_ok()
    }
}

/// Moves every available record into `out`; counts them.
pub fn drain(ring: &mut RingBuf<MapData>, out: &mut Drained, stats: &ReaderStats) {
    let mut received = 0u64;
    while let Some(item) = ring.next() {
        if let Some(ev) = decode(&item) {
            out.events.push(ev);
        } else if let Some(y) = decode_yield(&item) {
            out.yields.push(y);
        } else {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        received += 1;
    }
    stats.received.fetch_add(received, Ordering::Relaxed);
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
                let mut batch = Drained::with_capacity(1024);
                drain(afd.get_mut(), &mut batch, &stats);
                if !batch.send(&tx).await {
                    break;
                }
            }
            guard = afd.readable_mut() => {
                let mut guard = guard?;
                let mut batch = Drained::with_capacity(1024);
                drain(guard.get_inner_mut(), &mut batch, &stats);
                guard.clear_ready();
                // Records that landed between the drain and clear_ready have
                // already signalled; pick them up now rather than at the next edge.
                drain(guard.get_inner_mut(), &mut batch, &stats);
                if !batch.send(&tx).await {
                    break;
                }
            }
        }
    }
    let mut ring = afd.into_inner();
    let mut batch = Drained::default();
    drain(&mut ring, &mut batch, &stats);
    batch.send(&tx).await;
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

    #[test]
    fn yield_records_are_told_apart_by_size_and_kind() {
        let y = YieldEvent { latency_ns: 5, tid: 3, target_pid: 4, ret: 1, kind: EVENT_YIELD, ..Default::default() };
        // SAFETY: reading the bytes of a repr(C) POD value we own.
        let bytes = unsafe {
            std::slice::from_raw_parts((&y as *const YieldEvent).cast::<u8>(), std::mem::size_of::<YieldEvent>())
        };
        assert_eq!(decode_yield(bytes), Some(y));
        assert_eq!(decode(bytes), None, "a yield record is not a contention record");
        let mut wrong = y;
        wrong.kind = profiler_common::EVENT_CONTENTION;
        // SAFETY: as above.
        let wrong_bytes = unsafe {
            std::slice::from_raw_parts((&wrong as *const YieldEvent).cast::<u8>(), std::mem::size_of::<YieldEvent>())
        };
        assert_eq!(decode_yield(wrong_bytes), None, "right size, wrong kind");
    }
}
