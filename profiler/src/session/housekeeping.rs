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

/// The soonest flip after another. When the per-CPU log of cache misses
/// fills fast (many more keys than cache slots, as on a fork storm, where
/// each child's waits are new keys), the next flip comes when, at the last
/// generation's rate, the log would be half full, instead of after the
/// interval: a full log sends waits to the hash map, whose insert of a new
/// key costs the programs far more, inside the critical section.
const FAST_FLIP: Duration = Duration::from_millis(20);

/// When to flip next, after a generation that lasted `lasted` and logged
/// `most` entries on one CPU: soonest after a full log, sooner while it
/// fills past half, later (up to `interval`) while it stays under a quarter.
fn next_flip(most: usize, lasted: Duration, interval: Duration) -> Duration {
    let cap = profiler_common::AGG_LOG_ENTRIES as usize;
    let next = if most >= cap {
        // Full: how fast it filled is unknown.
        FAST_FLIP
    } else if most > cap / 2 {
        lasted / 2
    } else if most < cap / 4 {
        lasted * 2
    } else {
        lasted
    };
    next.clamp(FAST_FLIP, interval)
}

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

    /// Flips the aggregate maps and sends what the inactive one held; the
    /// most entries one CPU logged in it (see [`next_flip`]).
    async fn drain_aggregates(&mut self, tx: &mpsc::Sender<Msg>) -> usize {
        let Some(maps) = self.aggs.as_mut() else { return 0 };
        // A refused flip loses nothing: the programs keep writing the
        // current generation, drained at the next flip or at stop.
        let epoch = match maps.flip() {
            Ok(i) => i,
            Err(e) => {
                self.refused("flipping the aggregate maps", &e);
                return 0;
            }
        };
        tokio::time::sleep(FLIP_GRACE).await;
        let mut out = Vec::new();
        let drained = maps.drain(epoch, &mut out);
        let most = maps.log_most();
        if let Err(e) = drained {
            self.refused("draining the aggregate maps", &e);
        }
        if !out.is_empty() {
            let _ = tx.send(Msg::Aggregates(out)).await;
        }
        most
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
        let mut fast_flip: Option<tokio::time::Instant> = None;
        let mut flipped = tokio::time::Instant::now();
        let mut flip = |most: usize, fast_flip: &mut Option<tokio::time::Instant>| {
            let now = tokio::time::Instant::now();
            let next = next_flip(most, now - flipped, interval);
            flipped = now;
            *fast_flip = (next < interval).then(|| now + next);
        };
        loop {
            let fast = async {
                match fast_flip {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = fast => {
                    let most = self.drain_aggregates(&tx).await;
                    flip(most, &mut fast_flip);
                }
                _ = tick.tick() => {
                    let most = self.drain_aggregates(&tx).await;
                    flip(most, &mut fast_flip);
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

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_full_log_flips_soonest_and_a_quiet_one_backs_off_to_the_interval() {
        let cap = profiler_common::AGG_LOG_ENTRIES as usize;
        assert_eq!(next_flip(cap, SEC, SEC), FAST_FLIP);
        assert_eq!(next_flip(0, SEC, SEC), SEC);
        // Past half: twice as often; under a quarter: half as often.
        assert_eq!(next_flip(cap * 3 / 4, Duration::from_millis(200), SEC), Duration::from_millis(100));
        assert_eq!(next_flip(cap / 8, Duration::from_millis(200), SEC), Duration::from_millis(400));
        assert_eq!(next_flip(cap / 3, Duration::from_millis(200), SEC), Duration::from_millis(200));
        // Never sooner than FAST_FLIP, never later than the interval.
        assert_eq!(next_flip(cap * 3 / 4, FAST_FLIP, SEC), FAST_FLIP);
        assert_eq!(next_flip(1, Duration::from_millis(800), SEC), SEC);
    }
}
