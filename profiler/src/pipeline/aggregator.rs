//! The aggregator: pure, kernel-free folding of contention events into
//! per-lock, per-caller-stack and per-task statistics with bounded memory.

use profiler_common::{
    AggKey, AggVal, ContentionEvent, EVENT_HOLD, EVENT_OUTLIER, HIST_BUCKETS, LockMode, LockType, YieldEvent,
    hist_bucket_low,
};
use rustc_hash::FxHashMap;

use crate::{
    model::{DETAIL_SIGFIG, LOCK_SIGFIG, Stats, YieldStats},
    symbols::OVERFLOW_STACK,
};

/// Identity of a lock instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Kernel address.
    pub addr: u64,
    /// Type from the contention flags.
    pub lock_type: LockType,
    /// Reader/writer side.
    pub mode: LockMode,
}

impl LockKey {
    /// The key of the row that absorbs locks beyond the key limit.
    pub const OVERFLOW: LockKey = LockKey { addr: 0, lock_type: LockType::Unknown, mode: LockMode::Exclusive };

    /// Key of an event's lock.
    pub fn of(ev: &ContentionEvent) -> LockKey {
        LockKey { addr: ev.lock_addr, lock_type: LockType::from_flags(ev.flags), mode: LockMode::from_flags(ev.flags) }
    }
}

/// Thread id of the row that absorbs tasks beyond the key limit.
pub const OVERFLOW_TID: u32 = u32::MAX;

/// Caps on distinct keys; events beyond them are folded into overflow rows
/// (so totals stay exact) and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Distinct locks.
    pub max_locks: usize,
    /// Distinct (lock, stack) pairs.
    pub max_callers: usize,
    /// Distinct threads.
    pub max_tasks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_locks: 10_000, max_callers: 50_000, max_tasks: 10_000 }
    }
}

/// Statistics of one lock.
#[derive(Clone, Debug)]
pub struct LockAgg {
    /// All waits on the lock.
    pub wait: Stats,
    /// Waits per kernel stack id.
    pub callers: FxHashMap<i32, Stats>,
    /// Hold times of contended acquisitions (None until one is seen).
    pub hold: Option<Stats>,
    /// Hold times per acquirer stack id.
    pub hold_callers: FxHashMap<i32, Stats>,
}

/// Statistics of one thread.
#[derive(Clone, Debug)]
pub struct TaskAgg {
    /// Process id.
    pub tgid: u32,
    /// Thread name (NUL padded).
    pub comm: [u8; 16],
    /// Waits over all locks.
    pub wait: Stats,
}

/// Events folded into overflow rows because a key limit was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overflow {
    /// Events whose lock did not fit.
    pub locks: u64,
    /// Events whose (lock, stack) did not fit.
    pub callers: u64,
    /// Events whose thread did not fit.
    pub tasks: u64,
}

/// A yielding thread and the task it yielded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct YieldPairKey {
    /// Yielding thread.
    pub tid: u32,
    /// Target task id (0 when unknown).
    pub target_pid: u32,
}

impl YieldPairKey {
    /// The key of the row that absorbs pairs beyond the task limit.
    pub const OVERFLOW: YieldPairKey = YieldPairKey { tid: OVERFLOW_TID, target_pid: OVERFLOW_TID };
}

/// `yield_to` calls of one (yielder, target) pair.
#[derive(Clone, Debug)]
pub struct YieldPairAgg {
    /// Yielding process.
    pub tgid: u32,
    /// Yielding thread's name (NUL padded).
    pub comm: [u8; 16],
    /// Target's process.
    pub target_tgid: u32,
    /// Target's name (NUL padded).
    pub target_comm: [u8; 16],
    /// Outcomes and latency.
    pub stats: YieldStats,
}

/// KVM directed yield: all calls, per caller stack, per pair.
#[derive(Clone, Debug, Default)]
pub struct YieldAgg {
    /// Every call.
    pub total: YieldStats,
    /// Per caller stack id.
    pub callers: FxHashMap<i32, YieldStats>,
    /// Per (yielder, target).
    pub pairs: FxHashMap<YieldPairKey, YieldPairAgg>,
    /// Calls folded into overflow rows (caller or pair limit reached).
    pub overflow: u64,
}

/// How many of the longest individual waits are kept.
pub const SLOWEST_KEPT: usize = 20;

/// A point-in-time copy of the aggregator's tables.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The longest individual waits seen (stream mode: all; aggregate mode:
    /// the outliers), longest first.
    pub slowest: Vec<ContentionEvent>,
    /// Per-lock statistics.
    pub locks: FxHashMap<LockKey, LockAgg>,
    /// Per-thread statistics.
    pub tasks: FxHashMap<u32, TaskAgg>,
    /// Key-limit overflow counts.
    pub overflow: Overflow,
    /// Events ingested.
    pub events: u64,
    /// KVM directed yield.
    pub yields: YieldAgg,
}

/// `key` when it already has a row or `map` has room for one (fewer than
/// `cap` rows); else the `overflow` key, and true.
fn capped<K: Eq + std::hash::Hash, V>(map: &FxHashMap<K, V>, key: K, cap: usize, overflow: K) -> (K, bool) {
    if map.contains_key(&key) || map.len() < cap { (key, false) } else { (overflow, true) }
}

/// The row of lock `key`, or the overflow row when the lock cap is reached
/// (then the flag is true).
fn lock_row<'a>(locks: &'a mut FxHashMap<LockKey, LockAgg>, limits: &Limits, key: LockKey) -> (&'a mut LockAgg, bool) {
    let (key, overflow) = capped(locks, key, limits.max_locks, LockKey::OVERFLOW);
    let row = locks.entry(key).or_insert_with(|| LockAgg {
        wait: Stats::new(LOCK_SIGFIG),
        callers: FxHashMap::default(),
        hold: None,
        hold_callers: FxHashMap::default(),
    });
    (row, overflow)
}

/// The caller slot of `stack_id` in `lock`, created empty if new, or the
/// overflow stack's when the caller cap is reached (then the flag is true).
fn caller_slot(lock: &mut LockAgg, callers: &mut usize, max_callers: usize, stack_id: i32) -> (i32, bool) {
    if lock.callers.contains_key(&stack_id) {
        return (stack_id, false);
    }
    let overflow = *callers >= max_callers;
    let sid = if overflow { OVERFLOW_STACK } else { stack_id };
    if let std::collections::hash_map::Entry::Vacant(e) = lock.callers.entry(sid) {
        *callers += 1;
        e.insert(Stats::new(DETAIL_SIGFIG));
    }
    (sid, overflow)
}

/// Who waited, from where.
#[derive(Clone, Copy)]
struct Waiter<'a> {
    stack_id: i32,
    tid: u32,
    tgid: u32,
    comm: &'a [u8; 16],
}

/// Folds events into a [`Snapshot`].
#[derive(Debug, Default)]
pub struct Aggregator {
    state: Snapshot,
    limits: Limits,
    callers: usize,
}

impl Aggregator {
    /// An empty aggregator with the given key limits.
    pub fn new(limits: Limits) -> Self {
        Aggregator { state: Snapshot::default(), limits, callers: 0 }
    }

    /// Adds one completed contention from the ring buffer. Aggregate-mode
    /// outliers are already counted in the aggregates: they only feed the
    /// slowest-waits list.
    pub fn ingest(&mut self, ev: &ContentionEvent) {
        if ev.kind == EVENT_HOLD {
            self.ingest_hold(ev);
            return;
        }
        self.note_slow(ev);
        if ev.kind == EVENT_OUTLIER {
            return;
        }
        let who = Waiter { stack_id: ev.stack_id, tid: ev.tid, tgid: ev.tgid, comm: &ev.comm };
        self.fold(LockKey::of(ev), &who, 1, |s| s.record(ev.wait_ns));
    }

    /// Adds one `yield_to` call.
    pub fn ingest_yield(&mut self, ev: &YieldEvent) {
        let y = &mut self.state.yields;
        y.total.record(ev.ret, ev.latency_ns);
        let (sid, caller_overflow) = capped(&y.callers, ev.stack_id, self.limits.max_callers, OVERFLOW_STACK);
        y.callers.entry(sid).or_default().record(ev.ret, ev.latency_ns);
        let pair = YieldPairKey { tid: ev.tid, target_pid: ev.target_pid };
        let (key, pair_overflow) = capped(&y.pairs, pair, self.limits.max_tasks, YieldPairKey::OVERFLOW);
        let is_overflow = key == YieldPairKey::OVERFLOW;
        y.pairs
            .entry(key)
            .or_insert_with(|| YieldPairAgg {
                tgid: if is_overflow { 0 } else { ev.tgid },
                comm: if is_overflow { *b"[other pairs]\0\0\0" } else { ev.comm },
                target_tgid: if is_overflow { 0 } else { ev.target_tgid },
                target_comm: if is_overflow { [0; 16] } else { ev.target_comm },
                stats: YieldStats::default(),
            })
            .stats
            .record(ev.ret, ev.latency_ns);
        if caller_overflow || pair_overflow {
            y.overflow += 1;
        }
    }

    /// Adds a drained in-kernel aggregate.
    pub fn ingest_agg(&mut self, key: &AggKey, v: &AggVal) {
        if v.count == 0 {
            return;
        }
        let lock = LockKey {
            addr: key.lock_addr,
            lock_type: LockType::from_flags(key.flags),
            mode: LockMode::from_flags(key.flags),
        };
        let buckets = || {
            (0..HIST_BUCKETS).filter(|&i| v.hist[i] > 0).map(|i| {
                let hi = if i + 1 < HIST_BUCKETS { hist_bucket_low(i + 1).saturating_sub(1) } else { u64::MAX / 2 };
                (hist_bucket_low(i), hi, u64::from(v.hist[i]))
            })
        };
        let who = Waiter { stack_id: key.stack_id, tid: key.tid, tgid: key.tgid, comm: &v.comm };
        self.fold(lock, &who, v.count, |s| s.add_buckets(v.count, v.total_ns, v.min_ns, v.max_ns, buckets()));
    }

    /// A hold (wait_ns carries the hold time): into the lock's and the
    /// acquirer stack's hold statistics. In aggregate mode the hold (streamed)
    /// can arrive before its wait (drained every interval), so the lock and
    /// caller rows are created here when missing, with no waits yet.
    fn ingest_hold(&mut self, ev: &ContentionEvent) {
        let (lock, _) = lock_row(&mut self.state.locks, &self.limits, LockKey::of(ev));
        lock.hold.get_or_insert_with(|| Stats::new(LOCK_SIGFIG)).record(ev.wait_ns);
        let (sid, _) = caller_slot(lock, &mut self.callers, self.limits.max_callers, ev.stack_id);
        lock.hold_callers.entry(sid).or_insert_with(|| Stats::new(DETAIL_SIGFIG)).record(ev.wait_ns);
    }

    fn note_slow(&mut self, ev: &ContentionEvent) {
        let slow = &mut self.state.slowest;
        if slow.len() >= SLOWEST_KEPT && slow.last().is_some_and(|l| l.wait_ns >= ev.wait_ns) {
            return;
        }
        let at = slow.partition_point(|s| s.wait_ns >= ev.wait_ns);
        slow.insert(at, *ev);
        slow.truncate(SLOWEST_KEPT);
    }

    /// Applies `add` to the lock's, the caller's and the task's statistics,
    /// respecting the key limits.
    fn fold(&mut self, key: LockKey, who: &Waiter<'_>, n: u64, add: impl Fn(&mut Stats)) {
        let Waiter { stack_id, tid, tgid, comm } = *who;
        let st = &mut self.state;
        st.events += n;

        let (lock, lock_overflow) = lock_row(&mut st.locks, &self.limits, key);
        if lock_overflow {
            st.overflow.locks += n;
        }
        add(&mut lock.wait);
        let (sid, caller_overflow) = caller_slot(lock, &mut self.callers, self.limits.max_callers, stack_id);
        if caller_overflow {
            st.overflow.callers += n;
        }
        if let Some(c) = lock.callers.get_mut(&sid) {
            add(c);
        }

        let (tid, task_overflow) = capped(&st.tasks, tid, self.limits.max_tasks, OVERFLOW_TID);
        if task_overflow {
            st.overflow.tasks += n;
        }
        let task = st.tasks.entry(tid).or_insert_with(|| TaskAgg {
            tgid: if tid == OVERFLOW_TID { 0 } else { tgid },
            comm: if tid == OVERFLOW_TID { *b"[other tasks]\0\0\0" } else { *comm },
            wait: Stats::new(DETAIL_SIGFIG),
        });
        add(&mut task.wait);
    }

    /// A copy of the current tables.
    pub fn snapshot(&self) -> Snapshot {
        self.state.clone()
    }

    /// Borrow of the current tables.
    pub fn state(&self) -> &Snapshot {
        &self.state
    }

    /// Forgets everything (the TUI's reset key).
    pub fn reset(&mut self) {
        self.state = Snapshot::default();
        self.callers = 0;
    }

    /// Events ingested since the last reset.
    pub fn events(&self) -> u64 {
        self.state.events
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use profiler_common::{EVENT_CONTENTION, lcb};

    use super::*;

    pub(crate) fn ev(addr: u64, flags: u32, wait_ns: u64, tid: u32, stack_id: i32) -> ContentionEvent {
        let mut comm = [0u8; 16];
        let name = format!("task{tid}");
        comm[..name.len()].copy_from_slice(name.as_bytes());
        ContentionEvent {
            lock_addr: addr,
            wait_ns,
            end_ns: 1,
            tid,
            tgid: tid / 10,
            flags,
            cpu: 0,
            stack_id,
            kind: EVENT_CONTENTION,
            comm,
        }
    }

    #[test]
    fn aggregates_per_lock_caller_and_task() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&ev(0x100, lcb::MUTEX | lcb::SPIN, 1000, 11, 1));
        a.ingest(&ev(0x100, lcb::MUTEX, 3000, 12, 1));
        a.ingest(&ev(0x100, lcb::MUTEX, 5000, 11, 2));
        a.ingest(&ev(0x200, lcb::SPIN | lcb::WRITE, 700, 11, 3));
        let s = a.snapshot();
        assert_eq!(s.events, 4);
        let m = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive }];
        assert_eq!(m.wait.count(), 3);
        assert_eq!(m.wait.total_ns(), 9000);
        assert_eq!((m.wait.min_ns(), m.wait.max_ns()), (1000, 5000));
        assert_eq!(m.callers[&1].count(), 2);
        assert_eq!(m.callers[&2].total_ns(), 5000);
        let rw = &s.locks[&LockKey { addr: 0x200, lock_type: LockType::Rwlock, mode: LockMode::Write }];
        assert_eq!(rw.wait.count(), 1);
        assert_eq!(s.tasks[&11].wait.count(), 3);
        assert_eq!(s.tasks[&11].tgid, 1);
        assert_eq!(&s.tasks[&12].comm[..6], b"task12");
        assert_eq!(s.overflow, Overflow::default());
    }

    #[test]
    fn same_address_read_and_write_are_separate_rows() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&ev(0x100, lcb::SPIN | lcb::READ, 10, 1, 1));
        a.ingest(&ev(0x100, lcb::SPIN | lcb::WRITE, 10, 1, 1));
        assert_eq!(a.state().locks.len(), 2);
    }

    #[test]
    fn key_limits_fold_into_overflow_rows_and_keep_totals() {
        let limits = Limits { max_locks: 2, max_callers: 3, max_tasks: 2 };
        let mut a = Aggregator::new(limits);
        let mut total = 0;
        for i in 0..10u64 {
            let w = 100 + i;
            total += w;
            a.ingest(&ev(0x1000 + i, lcb::SPIN, w, i as u32 + 1, i as i32));
        }
        let s = a.snapshot();
        assert_eq!(s.locks.len(), 3, "two real locks and the overflow row");
        assert_eq!(s.overflow.locks, 8);
        let sum: u64 = s.locks.values().map(|l| l.wait.total_ns()).sum();
        assert_eq!(sum, total);
        let callers: usize = s.locks.values().map(|l| l.callers.len()).sum();
        assert!(callers <= 4, "3 callers plus one overflow stack, got {callers}");
        assert!(s.overflow.callers >= 7);
        let caller_sum: u64 = s.locks.values().flat_map(|l| l.callers.values()).map(|c| c.total_ns()).sum();
        assert_eq!(caller_sum, total);
        assert_eq!(s.tasks.len(), 3);
        assert_eq!(s.overflow.tasks, 8);
        assert_eq!(s.tasks[&OVERFLOW_TID].wait.count(), 8);
    }

    #[test]
    fn aggregates_and_events_fold_into_the_same_rows() {
        use profiler_common::hist_bucket;
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&ev(0x100, lcb::MUTEX, 1000, 7, 3));
        let mut v = AggVal { count: 3, total_ns: 6_000, min_ns: 1_000, max_ns: 3_000, ..AggVal::default() };
        for w in [1_000u64, 2_000, 3_000] {
            v.hist[hist_bucket(w)] += 1;
        }
        v.comm[..4].copy_from_slice(b"aggr");
        let key = AggKey { lock_addr: 0x100, tid: 7, tgid: 0, flags: lcb::MUTEX, stack_id: 3 };
        a.ingest_agg(&key, &v);
        let s = a.snapshot();
        assert_eq!(s.events, 4);
        let lock = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive }];
        assert_eq!((lock.wait.count(), lock.wait.total_ns(), lock.wait.max_ns()), (4, 7_000, 3_000));
        assert_eq!(lock.callers.len(), 1);
        assert_eq!(lock.callers[&3].count(), 4);
        assert_eq!(s.tasks[&7].wait.count(), 4);
    }

    #[test]
    fn outliers_only_feed_the_slowest_list() {
        let mut a = Aggregator::new(Limits::default());
        for w in 1..=30u64 {
            let mut e = ev(0x100, lcb::MUTEX, w * 1_000, 7, 3);
            e.kind = EVENT_OUTLIER;
            a.ingest(&e);
        }
        a.ingest(&ev(0x100, lcb::MUTEX, 500, 7, 3));
        let s = a.snapshot();
        assert_eq!(s.events, 1, "outliers are already in the aggregates");
        assert_eq!(s.slowest.len(), SLOWEST_KEPT);
        assert_eq!(s.slowest[0].wait_ns, 30_000);
        assert!(s.slowest.windows(2).all(|w| w[0].wait_ns >= w[1].wait_ns));
        assert_eq!(s.slowest.last().map(|e| e.wait_ns), Some(11_000));
    }

    #[test]
    fn holds_attach_to_the_lock_and_acquirer_stack() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&ev(0x100, lcb::MUTEX, 1_000, 7, 3));
        let mut h = ev(0x100, lcb::MUTEX, 50_000, 7, 3);
        h.kind = EVENT_HOLD;
        a.ingest(&h);
        a.ingest(&h);
        // Aggregate mode: a hold (streamed) can arrive before its wait (drained).
        let mut early = ev(0x999, lcb::MUTEX, 10, 7, 4);
        early.kind = EVENT_HOLD;
        a.ingest(&early);
        let key = AggKey { lock_addr: 0x999, tid: 7, tgid: 0, flags: lcb::MUTEX, stack_id: 4 };
        let mut v = AggVal { count: 1, total_ns: 500, min_ns: 500, max_ns: 500, ..AggVal::default() };
        v.hist[profiler_common::hist_bucket(500)] = 1;
        a.ingest_agg(&key, &v);
        let s = a.snapshot();
        assert_eq!(s.events, 2, "holds are not contentions");
        let lock = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive }];
        let hold = lock.hold.as_ref().expect("hold stats");
        assert_eq!((hold.count(), hold.total_ns()), (2, 100_000));
        assert_eq!(lock.hold_callers[&3].count(), 2);
        let late = &s.locks[&LockKey { addr: 0x999, lock_type: LockType::Mutex, mode: LockMode::Exclusive }];
        assert_eq!(late.wait.count(), 1, "the wait drained after its hold lands on the same row");
        assert_eq!(late.hold.as_ref().map(Stats::count), Some(1));
        assert_eq!(late.callers[&4].count(), 1);
        assert_eq!(late.hold_callers[&4].count(), 1);
    }

    pub(crate) fn yield_ev(tid: u32, target: u32, ret: i32, latency_ns: u64, stack_id: i32) -> YieldEvent {
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(b"vcpu-thr");
        YieldEvent {
            latency_ns,
            end_ns: 1,
            target_pid: target,
            target_tgid: 100,
            tid,
            tgid: 100,
            ret,
            preempt: 1,
            cpu: 0,
            kind: profiler_common::EVENT_YIELD,
            stack_id,
            _pad: 0,
            comm,
            target_comm: comm,
        }
    }

    #[test]
    fn yields_fold_per_caller_and_pair() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest_yield(&yield_ev(1, 2, 1, 1_000, 5));
        a.ingest_yield(&yield_ev(1, 2, 0, 500, 5));
        a.ingest_yield(&yield_ev(1, 3, -3, 200, 6));
        a.ingest_yield(&yield_ev(4, 2, 1, 4_000, 5));
        let y = &a.state().yields;
        assert_eq!((y.total.calls(), y.total.yielded, y.total.failed, y.total.errors), (4, 2, 1, 1));
        assert_eq!(y.total.latency.total_ns(), 5_700);
        assert_eq!(y.callers[&5].calls(), 3);
        assert_eq!(y.callers[&6].errors, 1);
        let p = &y.pairs[&YieldPairKey { tid: 1, target_pid: 2 }];
        assert_eq!((p.stats.yielded, p.stats.failed, p.tgid, p.target_tgid), (1, 1, 100, 100));
        assert_eq!(y.pairs.len(), 3);
        assert_eq!(y.overflow, 0);
        assert_eq!(a.events(), 0, "yields are not lock contentions");
    }

    #[test]
    fn yield_pairs_beyond_the_limit_fold_into_one_row() {
        let mut a = Aggregator::new(Limits { max_locks: 10, max_callers: 1, max_tasks: 2 });
        for t in 0..5u32 {
            a.ingest_yield(&yield_ev(t, t + 1, 1, 10, t as i32));
        }
        let y = &a.state().yields;
        assert_eq!(y.pairs.len(), 3, "two pairs and the overflow row");
        assert_eq!(y.pairs[&YieldPairKey::OVERFLOW].stats.calls(), 3);
        assert_eq!(y.callers.len(), 2, "one caller and the overflow stack");
        let pair_sum: u64 = y.pairs.values().map(|p| p.stats.calls()).sum();
        let caller_sum: u64 = y.callers.values().map(YieldStats::calls).sum();
        assert_eq!((pair_sum, caller_sum, y.total.calls()), (5, 5, 5));
        assert_eq!(y.overflow, 4);
    }

    #[test]
    fn reset_forgets_everything() {
        let mut a = Aggregator::new(Limits::default());
        a.ingest(&ev(0x100, lcb::SPIN, 10, 1, 1));
        a.reset();
        assert_eq!(a.events(), 0);
        assert!(a.state().locks.is_empty());
        assert!(a.state().tasks.is_empty());
    }
}
