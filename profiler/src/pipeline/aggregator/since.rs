//! What a snapshot added since an earlier one: the tables of a time window
//! (an incident's seconds before and after its trigger), built by the
//! profile builder like any snapshot. Rows the aggregator did not touch in
//! between are the same `Arc` in both and are skipped without a look; the
//! others are subtracted statistic by statistic ([`Stats::since`]).

use std::{collections::HashMap, hash::Hash, sync::Arc};

use profiler_common::ContentionEvent;
use rustc_hash::FxHashMap;

use super::{BlameAgg, CgroupAgg, CgroupSums, LockAgg, Overflow, SLOWEST_KEPT, Snapshot, TaskAgg};
use crate::model::Stats;

/// Rows of `now` grown since `base` (same key), each reduced to its growth
/// by `grow` (None: nothing grew). Shared rows are skipped unread.
fn rows_since<K: Copy + Eq + Hash, V, S: std::hash::BuildHasher + Default>(
    now: &HashMap<K, Arc<V>, S>,
    base: &HashMap<K, Arc<V>, S>,
    grow: impl Fn(&V, Option<&V>) -> Option<V>,
) -> HashMap<K, Arc<V>, S> {
    now.iter()
        .filter_map(|(k, v)| match base.get(k) {
            Some(b) if Arc::ptr_eq(b, v) => None,
            b => grow(v, b.map(|b| &**b)).map(|g| (*k, Arc::new(g))),
        })
        .collect()
}

/// A statistic's growth, None when nothing was added.
fn stats_since(now: &Stats, base: Option<&Stats>) -> Option<Stats> {
    let d = match base {
        Some(b) => now.since(b),
        None => now.clone(),
    };
    (d.count() > 0).then_some(d)
}

/// Sums' growth: a longest wait is not kept per interval, so the window's
/// is bounded by the whole's and by the window's total.
fn sums_since(now: &CgroupSums, base: Option<&CgroupSums>) -> Option<CgroupSums> {
    let d = match base {
        Some(b) if b.count <= now.count && b.wait_ns <= now.wait_ns => CgroupSums {
            count: now.count - b.count,
            wait_ns: now.wait_ns - b.wait_ns,
            max_ns: now.max_ns.min(now.wait_ns - b.wait_ns),
        },
        _ => *now,
    };
    (d.count > 0).then_some(d)
}

fn blame_since(now: &BlameAgg, base: Option<&BlameAgg>) -> Option<BlameAgg> {
    let sums = sums_since(
        &CgroupSums { count: now.waits, wait_ns: now.wait_ns, max_ns: now.max_ns },
        base.map(|b| CgroupSums { count: b.waits, wait_ns: b.wait_ns, max_ns: b.max_ns }).as_ref(),
    )?;
    Some(BlameAgg { waits: sums.count, wait_ns: sums.wait_ns, max_ns: sums.max_ns, ..now.clone() })
}

/// Plain (not shared) rows of `now` grown since `base`.
fn plain_since<K: Copy + Eq + Hash, V>(
    now: &FxHashMap<K, V>,
    base: Option<&FxHashMap<K, V>>,
    grow: impl Fn(&V, Option<&V>) -> Option<V>,
) -> FxHashMap<K, V> {
    now.iter().filter_map(|(k, v)| grow(v, base.and_then(|b| b.get(k))).map(|g| (*k, g))).collect()
}

fn lock_since(now: &LockAgg, base: Option<&LockAgg>) -> Option<LockAgg> {
    let wait = stats_since(&now.wait, base.map(|b| &b.wait));
    let hold = now.hold.as_ref().and_then(|h| stats_since(h, base.and_then(|b| b.hold.as_ref())));
    let blame = plain_since(&now.blame, base.map(|b| &b.blame), blame_since);
    if wait.is_none() && hold.is_none() && blame.is_empty() {
        return None;
    }
    let empty = FxHashMap::default();
    let (callers, hold_callers) = match base {
        Some(b) => (&b.callers, &b.hold_callers),
        None => (&empty, &empty),
    };
    Some(LockAgg {
        wait: wait.unwrap_or_else(|| Stats::new(now.wait.sigfig_of())),
        callers: rows_since(&now.callers, callers, stats_since),
        hold,
        hold_callers: rows_since(&now.hold_callers, hold_callers, stats_since),
        blame,
        caller_cgroups: plain_since(&now.caller_cgroups, base.map(|b| &b.caller_cgroups), sums_since),
        touched: now.touched,
        caller_touched: FxHashMap::default(),
    })
}

fn overflow_since(now: &Overflow, base: &Overflow) -> Overflow {
    let d = |n: u64, b: u64| if n >= b { n - b } else { n };
    Overflow {
        locks: d(now.locks, base.locks),
        callers: d(now.callers, base.callers),
        tasks: d(now.tasks, base.tasks),
        cgroups: d(now.cgroups, base.cgroups),
        aged_locks: d(now.aged_locks, base.aged_locks),
        aged_tasks: d(now.aged_tasks, base.aged_tasks),
        aged_callers: d(now.aged_callers, base.aged_callers),
        aged_cgroups: d(now.aged_cgroups, base.aged_cgroups),
    }
}

impl Snapshot {
    /// What this snapshot added since `base` (an earlier snapshot of the
    /// same session, or an empty one for "since the start"). The slowest
    /// waits are those of `long` (the latest long waits, see
    /// [`Snapshot::recent`]) and of this snapshot's slowest list that ended
    /// after `from_ns` (CLOCK_MONOTONIC), the longest first. KVM directed
    /// yield is not windowed: the result has none.
    pub fn since(&self, base: &Snapshot, from_ns: u64, long: &[ContentionEvent]) -> Snapshot {
        let mut slowest: Vec<ContentionEvent> = Vec::new();
        for ev in self.slowest.iter().chain(long).filter(|e| e.end_ns > from_ns) {
            if !slowest.iter().any(|s| s.tid == ev.tid && s.end_ns == ev.end_ns && s.lock_addr == ev.lock_addr) {
                slowest.push(*ev);
            }
        }
        slowest.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.end_ns.cmp(&b.end_ns)));
        slowest.truncate(SLOWEST_KEPT);
        Snapshot {
            generation: self.generation,
            slowest: Arc::new(slowest),
            recent: Arc::default(),
            recent_seq: self.recent_seq,
            locks: rows_since(&self.locks, &base.locks, lock_since),
            tasks: rows_since(&self.tasks, &base.tasks, |n: &TaskAgg, b| {
                stats_since(&n.wait, b.map(|b| &b.wait)).map(|wait| TaskAgg { wait, ..n.clone() })
            }),
            cgroups: rows_since(&self.cgroups, &base.cgroups, |n: &CgroupAgg, b| {
                stats_since(&n.wait, b.map(|b| &b.wait)).map(|wait| CgroupAgg { wait, touched: n.touched })
            }),
            joined: self.joined.clone(),
            overflow: overflow_since(&self.overflow, &base.overflow),
            events: self.events.saturating_sub(base.events),
            yields: Arc::default(),
            kernel: self.kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{EVENT_CONTENTION, EVENT_OUTLIER, lcb, owner};

    use super::*;
    use crate::{model::LockKey, pipeline::aggregator::Aggregator, pipeline::aggregator::Limits};

    fn wait(addr: u64, ns: u64, tid: u32, stack: u64, end_ns: u64) -> ContentionEvent {
        ContentionEvent {
            kind: EVENT_CONTENTION,
            lock_addr: addr,
            wait_ns: ns,
            end_ns,
            tid,
            tgid: tid,
            flags: lcb::MUTEX,
            stack_id: stack,
            user_stack_id: profiler_common::USER_STACK_OFF,
            ..Default::default()
        }
    }

    #[test]
    fn the_window_holds_exactly_what_was_added() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&wait(0x100, 1_000, 1, 7, 10));
        a.ingest(&wait(0x200, 5_000, 2, 8, 20));
        let base = a.snapshot();
        a.ingest(&wait(0x100, 3_000, 3, 7, 30));
        a.ingest(&wait(0x100, 4_000, 3, 9, 40));
        let mut blamed = wait(0x100, 6_000, 4, 9, 50);
        blamed.owner.kind = owner::TASK;
        blamed.owner.tid = 1;
        a.ingest(&blamed);
        let now = a.snapshot();
        let d = now.since(&base, 25, &[]);
        assert_eq!(d.events, 3);
        assert_eq!(d.locks.len(), 1, "the untouched lock is not in the window");
        let key = LockKey::of(&wait(0x100, 0, 0, 0, 0));
        let l = &d.locks[&key];
        assert_eq!((l.wait.count(), l.wait.total_ns(), l.wait.max_ns()), (3, 13_000, 6_000));
        assert_eq!(l.callers[&7].count(), 1);
        assert_eq!(l.callers[&9].count(), 2);
        assert_eq!(l.blame.values().map(|b| b.waits).sum::<u64>(), 1);
        assert_eq!(d.tasks.keys().copied().collect::<std::collections::BTreeSet<_>>(), [3, 4].into());
        assert_eq!(d.slowest.iter().map(|e| e.wait_ns).collect::<Vec<_>>(), [6_000, 4_000, 3_000]);
        // Since an empty snapshot: everything.
        let all = now.since(&Snapshot::default(), 0, &[]);
        assert_eq!(all.events, 5);
        assert_eq!(all.locks.values().map(|l| l.wait.count()).sum::<u64>(), 5);
    }

    #[test]
    fn long_waits_beyond_the_slowest_list_are_in_the_window() {
        let mut a = Aggregator::new(Limits::default()).with_recent(1_000);
        for i in 0..SLOWEST_KEPT as u64 + 5 {
            let mut e = wait(0x100, 1_000_000 + i, 1, 7, 10 + i);
            e.kind = EVENT_OUTLIER;
            a.apply(&crate::pipeline::record::Record::Outlier(e));
        }
        let base = a.snapshot();
        let late = wait(0x100, 2_000, 5, 7, 1_000);
        a.ingest(&late);
        let now = a.snapshot();
        let d = now.since(&base, 500, &now.recent.iter().copied().collect::<Vec<_>>());
        assert_eq!(d.slowest.len(), 1, "the earlier, longer waits ended before the window");
        assert_eq!(d.slowest[0].tid, 5);
    }
}
