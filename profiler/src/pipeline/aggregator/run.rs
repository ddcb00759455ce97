//! The aggregator's run loop (like tokio-console's): it owns a bounded
//! receiver, drains it without blocking, and publishes a snapshot every
//! interval while anyone is watching.

use std::{sync::Arc, time::Duration};

use profiler_common::{AggKey, AggVal};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use super::{Aggregator, KernelStatus, Snapshot};
use crate::pipeline::record::Record;

/// What flows to the aggregator.
#[derive(Debug)]
pub enum Msg {
    /// Ring buffer records.
    Records(Vec<Record>),
    /// Drained in-kernel aggregates (aggregate mode).
    Aggregates(Vec<(AggKey, AggVal)>),
    /// The kernel side's counters.
    /// (Boxed: the counters make it the largest message by far.)
    Kernel(Box<KernelStatus>),
}

/// Commands to the aggregator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Forget all statistics (the TUI's `r`).
    Reset,
}

/// A running aggregator.
pub struct Handle {
    /// Snapshots, one per interval.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// Commands.
    pub control: mpsc::Sender<Control>,
    tx: Option<mpsc::Sender<Msg>>,
    task: JoinHandle<Aggregator>,
}

impl Handle {
    /// A sender for producers (the reader, housekeeping).
    pub fn sender(&self) -> Option<mpsc::Sender<Msg>> {
        self.tx.clone()
    }

    /// Waits until every producer has hung up and everything queued is
    /// folded; returns the aggregator.
    pub async fn finish(mut self) -> Result<Aggregator, tokio::task::JoinError> {
        drop(self.tx.take());
        self.task.await
    }
}

fn handle(agg: &mut Aggregator, msg: Msg) {
    match msg {
        Msg::Records(records) => records.iter().for_each(|r| agg.apply(r)),
        Msg::Aggregates(recs) => recs.iter().for_each(|(k, v)| agg.ingest_agg(k, v)),
        Msg::Kernel(k) => agg.set_kernel_status(*k),
    }
}

/// Starts the run loop: `capacity` batches may queue before producers wait.
pub fn spawn(mut agg: Aggregator, capacity: usize, interval: Duration) -> Handle {
    let (tx, mut rx) = mpsc::channel(capacity.max(1));
    let (ctrl_tx, mut ctrl) = mpsc::channel(16);
    let (publish, snapshots) = watch::channel(Arc::new(Snapshot::default()));
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => {
                        handle(&mut agg, msg);
                        // Drain whatever else is queued without waiting.
                        while let Ok(msg) = rx.try_recv() {
                            handle(&mut agg, msg);
                        }
                    }
                    None => break,
                },
                Some(c) = ctrl.recv() => match c {
                    Control::Reset => agg.reset(),
                },
                _ = tick.tick() => {
                    agg.age();
                    if publish.receiver_count() > 0 {
                        publish.send_replace(Arc::new(agg.snapshot()));
                    }
                }
            }
        }
        agg
    });
    Handle { snapshots, control: ctrl_tx, tx: Some(tx), task }
}
