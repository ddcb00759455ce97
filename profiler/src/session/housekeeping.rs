//! Every interval: drain the aggregate maps (aggregate mode), reap the
//! pending-wait and futex-wait entries of exited threads, and report the
//! kernel counters.

use std::time::Duration;

use profiler_common::counter;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{cgroups::FilterWatch, refusals::Refusals};
use crate::{
    ebpf::{AggMaps, CounterValues, FutexMaps, KernelCounters, PendingMaps, ProgramFd, recursion_misses},
    pipeline::{Msg, Record, aggregator::KernelStatus},
};

/// Grace period between flipping the aggregate maps and reading the old
/// generation: programs that read the old generation run for microseconds
/// (see `ebpf::maps::aggregates`).
const FLIP_GRACE: Duration = Duration::from_millis(5);

/// The maps serviced every interval.
pub struct Housekeeping {
    /// The aggregate maps (aggregate mode).
    pub aggs: Option<AggMaps>,
    /// Pending waits.
    pub pending: PendingMaps,
    /// Futex contentions in progress (`--futex`).
    pub futex: Option<FutexMaps>,
    /// The programs' own counters (without the aggregate cache's misses:
    /// read them through [`Housekeeping::counters`]).
    pub programs_counters: KernelCounters,
    /// Program fds, for their recursion misses.
    pub program_fds: Vec<ProgramFd>,
    /// Map operations the kernel refused.
    pub refused: Refusals,
    /// The `--cgroup` filter, kept up to date.
    pub cgroup_filter: Option<FilterWatch>,
}

impl Housekeeping {
    /// The programs' counters now, with the aggregate cache's misses of the
    /// generations drained so far (the cache slots count those).
    pub fn counters(&self) -> CounterValues {
        let mut c = self.programs_counters.read();
        if let Some(aggs) = &self.aggs {
            c.add(counter::AGG_CACHE_MISSED, aggs.cache_missed());
        }
        c
    }

    /// The kernel side's counters now.
    pub fn status(&self) -> KernelStatus {
        KernelStatus {
            counters: self.counters(),
            recursion_misses: recursion_misses(&self.program_fds),
            map_ops_refused: self.refused.count(),
        }
    }

    /// Counts a refused map operation; the first is said (once).
    fn refused(&mut self, what: &str, err: &dyn std::fmt::Display) {
        if let Some(line) = self.refused.note(what, err) {
            log::warn!("{line}");
        }
    }

    /// Flips the aggregate maps and sends what the inactive one held.
    async fn drain_aggregates(&mut self, tx: &mpsc::Sender<Msg>) {
        let Some(maps) = self.aggs.as_mut() else { return };
        // A refused flip loses nothing: the programs keep writing the
        // current generation, drained at the next flip or at stop.
        let epoch = match maps.flip() {
            Ok(i) => i,
            Err(e) => return self.refused("flipping the aggregate maps", &e),
        };
        tokio::time::sleep(FLIP_GRACE).await;
        let mut out = Vec::new();
        let drained = maps.drain(epoch, &mut out);
        if let Err(e) = drained {
            self.refused("draining the aggregate maps", &e);
        }
        if !out.is_empty() {
            let _ = tx.send(Msg::Aggregates(out)).await;
        }
    }

    /// Once the programs are detached the current generation is final
    /// (earlier ones were drained at their flips): drains it.
    pub async fn final_drain(&mut self, tx: &mpsc::Sender<Msg>) {
        let Some(maps) = self.aggs.as_mut() else { return };
        let mut out = Vec::new();
        let drained = maps.drain(maps.epoch(), &mut out);
        if let Err(e) = drained {
            self.refused("the final drain of the aggregate maps", &e);
        }
        if !out.is_empty() {
            let _ = tx.send(Msg::Aggregates(out)).await;
        }
    }

    /// Runs until `stop`; returns the maps.
    pub async fn run(mut self, tx: mpsc::Sender<Msg>, stop: CancellationToken, interval: Duration) -> Housekeeping {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = tick.tick() => {
                    self.drain_aggregates(&tx).await;
                    if let Some(f) = self.cgroup_filter.as_mut() {
                        let added = f.refresh();
                        if added > 0 {
                            log::debug!("--cgroup: {added} new cgroups below the filtered ones");
                        }
                    }
                    let reaped = self.pending.reap_exited();
                    if reaped > 0 {
                        log::debug!("reaped {reaped} pending-wait entries of exited threads");
                    }
                    // A thread that exited between its futex waits and its
                    // release: its contention is over, account it now.
                    let ended = self.futex.as_mut().map(FutexMaps::reap_exited).unwrap_or_default();
                    if !ended.is_empty() {
                        let _ = tx.send(Msg::Records(ended.into_iter().map(Record::Wait).collect())).await;
                    }
                    let _ = tx.send(Msg::Kernel(Box::new(self.status()))).await;
                }
            }
        }
        self
    }
}
