//! Ring buffer reader: drains every record into a batch on a poll timer, or
//! sooner when the kernel side forces a wakeup because the ring is filling
//! (the programs submit with BPF_RB_NO_WAKEUP below a threshold: per-event
//! wakeups were the largest cost of tracing a pipe storm). Batches of typed
//! [`Record`]s go down a bounded channel; backpressure reaches the kernel,
//! whose ring-buffer-full counter then says what was lost.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::StackId;
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use super::{
    Msg,
    record::{Record, decode, decode_copy},
};
use crate::symbols::user::unwind::CopySender;

/// Reader bookkeeping, shared with the session.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records that could not be decoded.
    pub malformed: AtomicU64,
    /// Records decoded.
    pub received: AtomicU64,
}

/// Where announcements of new user stacks go: to the symbolizer, which
/// reads the process's mappings while it is alive. A full channel leaves
/// the stack to be read at the next snapshot.
pub type Pins = mpsc::Sender<StackId>;

/// Where user stacks go: announcements of new ones to be pinned, copies
/// to be unwound.
#[derive(Clone, Default)]
pub struct UserStackSinks {
    pub pins: Option<Pins>,
    pub copies: Option<CopySender>,
}

/// Moves every available record into `out` (new user stacks and copies
/// into `user`); counts them.
pub fn drain(ring: &mut RingBuf<MapData>, out: &mut Vec<Record>, stats: &ReaderStats, user: &UserStackSinks) {
    let pins = user.pins.as_ref();
    let mut received = 0u64;
    while let Some(item) = ring.next() {
        if let Some(copy) = decode_copy(&item) {
            if let Some(c) = &user.copies {
                c.send(copy);
            }
            received += 1;
            continue;
        }
        match decode(&item) {
            Ok(Record::UserStack(u)) => {
                if let Some(p) = pins {
                    let _ = p.try_send(u.id);
                }
                received += 1;
            }
            Ok(r) => {
                out.push(r);
                received += 1;
            }
            Err(e) => {
                if stats.malformed.fetch_add(1, Ordering::Relaxed) == 0 {
                    log::warn!("ring buffer: {e}");
                }
            }
        }
    }
    stats.received.fetch_add(received, Ordering::Relaxed);
}

/// Sends a batch; false if the aggregator is gone.
async fn send(batch: Vec<Record>, tx: &mpsc::Sender<Msg>) -> bool {
    batch.is_empty() || tx.send(Msg::Records(batch)).await.is_ok()
}

/// Reads until `stop`, then drains once more and returns the ring buffer
/// (the caller detaches the programs before cancelling, so nothing is missed).
pub async fn run(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<Msg>,
    stop: CancellationToken,
    stats: Arc<ReaderStats>,
    poll: std::time::Duration,
    user: UserStackSinks,
) -> std::io::Result<RingBuf<MapData>> {
    let pins = &user;
    // SAFETY: the ring buffer owns its map fd, which stays open and unchanged
    // for as long as the AsyncFd owns the ring buffer.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut batch = Vec::with_capacity(1024);
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = tick.tick() => drain(afd.get_mut(), &mut batch, &stats, pins),
            guard = afd.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &mut batch, &stats, pins);
                guard.clear_ready();
                // Records that landed between the drain and clear_ready have
                // already signalled; pick them up now rather than at the next edge.
                drain(guard.get_inner_mut(), &mut batch, &stats, pins);
            }
        }
        if !send(batch, &tx).await {
            break;
        }
    }
    let mut ring = afd.into_inner();
    let mut batch = Vec::new();
    drain(&mut ring, &mut batch, &stats, pins);
    send(batch, &tx).await;
    Ok(ring)
}
