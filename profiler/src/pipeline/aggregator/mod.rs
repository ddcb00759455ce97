//! The aggregator: pure, kernel-free folding of records into per-lock,
//! per-caller-stack and per-task statistics with bounded memory. It owns its
//! run loop ([`run`]): records in through a bounded channel, snapshots out
//! on an interval.

mod run;
mod since;
mod tables;

use std::sync::Arc;

use profiler_common::{
    AGG_BLAME, AGG_HOLD, AggKey, AggVal, ContentionEvent, HIST_BUCKETS, STACK_OVERFLOW, STACK_USER_LOCK, StackId,
    YieldEvent, hist_bucket_low, is_stack, owner, stack_hash_finish, stack_hash_step,
};
use rustc_hash::FxHashMap;

pub use run::{Control, Handle, Msg, spawn};
pub use tables::{
    BlameAgg, BlameKey, CGROUP_OVERFLOW, CgroupAgg, CgroupSums, KernelStatus, Limits, LockAgg, OVERFLOW_TID, Overflow,
    RECENT_KEPT, SLOWEST_KEPT, Snapshot, TaskAgg, YieldAgg, YieldPairAgg, YieldPairKey, capped,
};

use super::record::Record;
use crate::model::{DETAIL_SIGFIG, LOCK_SIGFIG, LockKey, Stats, YieldStats};

/// The row of lock `key`, or the overflow row when the lock cap is reached
/// (then the flag is true).
fn lock_row<'a>(
    locks: &'a mut FxHashMap<LockKey, Arc<LockAgg>>,
    limits: &Limits,
    key: LockKey,
    tick: u64,
) -> (&'a mut LockAgg, bool) {
    let (key, overflow) = capped(locks, key, limits.max_locks, LockKey::OVERFLOW);
    let row = locks.entry(key).or_insert_with(|| {
        Arc::new(LockAgg {
            wait: Stats::new(LOCK_SIGFIG),
            callers: FxHashMap::default(),
            hold: None,
            hold_callers: FxHashMap::default(),
            blame: FxHashMap::default(),
            caller_cgroups: FxHashMap::default(),
            touched: tick,
            caller_touched: FxHashMap::default(),
        })
    });
    let row = Arc::make_mut(row);
    row.touched = tick;
    (row, overflow)
}

/// The caller slot of `stack_id` in `lock`, created empty if new, or the
/// overflow stack's when the caller cap is reached (then the flag is true).
fn caller_slot(lock: &mut LockAgg, callers: &mut usize, max_callers: usize, stack_id: StackId) -> (StackId, bool) {
    if lock.callers.contains_key(&stack_id) {
        return (stack_id, false);
    }
    let overflow = *callers >= max_callers;
    let sid = if overflow { STACK_OVERFLOW } else { stack_id };
    if let std::collections::hash_map::Entry::Vacant(e) = lock.callers.entry(sid) {
        *callers += 1;
        e.insert(Arc::new(Stats::new(DETAIL_SIGFIG)));
    }
    (sid, overflow)
}

/// Seed of a joined caller id's hash.
const JOINED_SEED: u64 = 0x6a09_e667_f3bc_c908;

/// The caller id of a wait: its kernel stack id, or, when it carries a user
/// stack, an id of the pair (noted in `joined`, so the profile builder can
/// take it apart).
fn caller_id(joined: &mut Arc<FxHashMap<StackId, (StackId, StackId)>>, kernel: StackId, user: StackId) -> StackId {
    if !is_stack(user) {
        // A user-space lock's wait: its user stack is its stack, or the
        // reason there is none (a futex wait has no kernel stack).
        return if kernel == STACK_USER_LOCK { user } else { kernel };
    }
    let id = stack_hash_finish(stack_hash_step(stack_hash_step(JOINED_SEED, kernel), user), 2);
    if !joined.contains_key(&id) {
        Arc::make_mut(joined).insert(id, (kernel, user));
    }
    id
}

/// Who waited, from where.
#[derive(Clone, Copy)]
struct Waiter<'a> {
    /// Caller id (see [`caller_id`]).
    stack_id: StackId,
    tid: u32,
    tgid: u32,
    cgroup_id: u64,
    comm: &'a [u8; 16],
}

/// Folds records into a [`Snapshot`].
#[derive(Debug, Default)]
pub struct Aggregator {
    state: Snapshot,
    limits: Limits,
    callers: usize,
    /// Publish intervals so far (rows note the last one that updated them).
    tick: u64,
    /// Waits at least this long are kept in `Snapshot::recent`.
    recent_min_ns: u64,
}

impl Aggregator {
    /// An empty aggregator with the given key limits.
    pub fn new(limits: Limits) -> Self {
        Aggregator { state: Snapshot::default(), limits, callers: 0, tick: 0, recent_min_ns: u64::MAX }
    }

    /// Also keeps the latest waits at least `min_ns` long in
    /// `Snapshot::recent` (what incident triggers on single waits read).
    pub fn with_recent(mut self, min_ns: u64) -> Self {
        self.recent_min_ns = min_ns;
        self
    }

    /// Folds one record.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Wait(ev) => self.ingest(ev),
            Record::Outlier(ev) => self.note_slow(ev),
            Record::Hold(ev) => self.ingest_hold(ev),
            Record::Yield(y) => self.ingest_yield(y),
            // For the symbolizer (the reader hands these to it directly).
            Record::UserStack(_) => {}
        }
    }

    /// Adds one completed wait (streamed, or found open at stop).
    pub fn ingest(&mut self, ev: &ContentionEvent) {
        self.note_slow(ev);
        let stack_id = caller_id(&mut self.state.joined, ev.stack_id, ev.user_stack_id);
        let who = Waiter { stack_id, tid: ev.tid, tgid: ev.tgid, cgroup_id: ev.cgroup_id, comm: &ev.comm };
        self.fold(LockKey::of(ev), &who, (1, ev.wait_ns, ev.wait_ns), |s| s.record(ev.wait_ns));
        let o = &ev.owner;
        if o.kind != owner::UNKNOWN {
            let tid = o.blame_tid();
            let b = BlameAgg { tgid: o.tgid, comm: o.comm, waits: 1, wait_ns: ev.wait_ns, max_ns: ev.wait_ns };
            // A user-space lock's owner stack is a user stack.
            let stack_id = if ev.stack_id == STACK_USER_LOCK {
                caller_id(&mut self.state.joined, STACK_USER_LOCK, o.stack_id)
            } else {
                o.stack_id
            };
            // Streamed waits carry no owner's stack while asleep (aggregate mode does).
            self.fold_blame(LockKey::of(ev), BlameKey::acquired(tid, stack_id), &b);
        }
    }

    /// Adds waits an owner caused to the lock's blame.
    fn fold_blame(&mut self, key: LockKey, who: BlameKey, add: &BlameAgg) {
        let cap = self.limits.max_callers;
        let (lock, _) = lock_row(&mut self.state.locks, &self.limits, key, self.tick);
        let (who, _) = capped(&lock.blame, who, cap, BlameKey::OVERFLOW);
        let b = lock.blame.entry(who).or_default();
        if b.waits == 0 {
            (b.tgid, b.comm) = (add.tgid, add.comm);
        }
        b.waits += add.waits;
        b.wait_ns = b.wait_ns.saturating_add(add.wait_ns);
        b.max_ns = b.max_ns.max(add.max_ns);
    }

    /// Adds one `yield_to` call.
    pub fn ingest_yield(&mut self, ev: &YieldEvent) {
        let limits = self.limits;
        let y = Arc::make_mut(&mut self.state.yields);
        y.total.record(ev.ret, ev.latency_ns);
        let (sid, caller_overflow) = capped(&y.callers, ev.stack_id, limits.max_callers, STACK_OVERFLOW);
        y.callers.entry(sid).or_default().record(ev.ret, ev.latency_ns);
        let pair = YieldPairKey { tid: ev.tid, target_tid: ev.target_pid };
        let (key, pair_overflow) = capped(&y.pairs, pair, limits.max_tasks, YieldPairKey::OVERFLOW);
        let is_overflow = key == YieldPairKey::OVERFLOW;
        y.pairs
            .entry(key)
            .or_insert_with(|| YieldPairAgg {
                tgid: if is_overflow { 0 } else { ev.tgid },
                comm: if is_overflow { [0; 16] } else { ev.comm },
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
        let buckets = || {
            (0..HIST_BUCKETS).filter(|&i| v.hist[i] > 0).map(|i| {
                let hi = if i + 1 < HIST_BUCKETS { hist_bucket_low(i + 1).saturating_sub(1) } else { u64::MAX / 2 };
                (hist_bucket_low(i), hi, u64::from(v.hist[i]))
            })
        };
        if key.flags & AGG_BLAME != 0 {
            let lock = LockKey::new(key.lock_addr, key.flags & !AGG_BLAME, key.tgid);
            let stack_id = caller_id(&mut self.state.joined, key.stack_id, key.user_stack_id);
            // A blame key's cgroup field carries the owner's stack while asleep.
            let who = BlameKey { owner_tid: key.tid, stack_id, asleep_stack_id: key.cgroup_id };
            let b = BlameAgg { tgid: key.tgid, comm: v.comm, waits: v.count, wait_ns: v.total_ns, max_ns: v.max_ns };
            self.fold_blame(lock, who, &b);
            return;
        }
        let add = |s: &mut Stats| s.add_buckets(v.count, v.total_ns, v.min_ns, v.max_ns, buckets());
        let stack_id = caller_id(&mut self.state.joined, key.stack_id, key.user_stack_id);
        if key.flags & AGG_HOLD != 0 {
            self.fold_hold(LockKey::new(key.lock_addr, key.flags & !AGG_HOLD, key.tgid), stack_id, add);
            return;
        }
        let who = Waiter { stack_id, tid: key.tid, tgid: key.tgid, cgroup_id: key.cgroup_id, comm: &v.comm };
        self.fold(LockKey::new(key.lock_addr, key.flags, key.tgid), &who, (v.count, v.total_ns, v.max_ns), add);
    }

    /// A streamed hold (wait_ns carries the hold time).
    fn ingest_hold(&mut self, ev: &ContentionEvent) {
        let stack_id = caller_id(&mut self.state.joined, ev.stack_id, ev.user_stack_id);
        self.fold_hold(LockKey::of(ev), stack_id, |s| s.record(ev.wait_ns));
    }

    /// Applies `add` to the lock's and the acquirer stack's hold statistics.
    /// A hold can arrive before its wait (holds and waits reach userspace
    /// separately), so the lock and caller rows are created here when
    /// missing, with no waits yet.
    fn fold_hold(&mut self, key: LockKey, stack_id: StackId, add: impl Fn(&mut Stats)) {
        let (lock, _) = lock_row(&mut self.state.locks, &self.limits, key, self.tick);
        add(lock.hold.get_or_insert_with(|| Stats::new(LOCK_SIGFIG)));
        let (sid, _) = caller_slot(lock, &mut self.callers, self.limits.max_callers, stack_id);
        if self.limits.max_idle.is_some() {
            lock.caller_touched.insert(sid, self.tick);
        }
        let h = lock.hold_callers.entry(sid).or_insert_with(|| Arc::new(Stats::new(DETAIL_SIGFIG)));
        add(Arc::make_mut(h));
    }

    /// Keeps `ev` if it is among the longest waits seen.
    fn note_slow(&mut self, ev: &ContentionEvent) {
        if ev.wait_ns >= self.recent_min_ns {
            let recent = Arc::make_mut(&mut self.state.recent);
            if recent.len() >= RECENT_KEPT {
                recent.pop_front();
            }
            recent.push_back(*ev);
            self.state.recent_seq += 1;
        }
        let slow = &self.state.slowest;
        if slow.len() >= SLOWEST_KEPT && slow.last().is_some_and(|l| l.wait_ns >= ev.wait_ns) {
            return;
        }
        let slow = Arc::make_mut(&mut self.state.slowest);
        let at = slow.partition_point(|s| s.wait_ns >= ev.wait_ns);
        slow.insert(at, *ev);
        slow.truncate(SLOWEST_KEPT);
    }

    /// Applies `add` to the lock's, the caller's, the task's and the
    /// cgroup's statistics, respecting the key limits. `sums`: the waits'
    /// count, total and longest.
    fn fold(&mut self, key: LockKey, who: &Waiter<'_>, sums: (u64, u64, u64), add: impl Fn(&mut Stats)) {
        let Waiter { stack_id, tid, tgid, cgroup_id, comm } = *who;
        let n = sums.0;
        let st = &mut self.state;
        st.events += n;

        let (lock, lock_overflow) = lock_row(&mut st.locks, &self.limits, key, self.tick);
        if lock_overflow {
            st.overflow.locks += n;
        }
        add(&mut lock.wait);
        let (sid, caller_overflow) = caller_slot(lock, &mut self.callers, self.limits.max_callers, stack_id);
        if caller_overflow {
            st.overflow.callers += n;
        }
        if let Some(c) = lock.callers.get_mut(&sid) {
            add(Arc::make_mut(c));
        }
        if self.limits.max_idle.is_some() {
            lock.caller_touched.insert(sid, self.tick);
        }
        if cgroup_id != 0 {
            let (cg, cg_overflow) = capped(&st.cgroups, cgroup_id, self.limits.max_cgroups, CGROUP_OVERFLOW);
            if cg_overflow {
                st.overflow.cgroups += n;
            }
            lock.caller_cgroups.entry((sid, cg)).or_default().add(sums.0, sums.1, sums.2);
            let row = st
                .cgroups
                .entry(cg)
                .or_insert_with(|| Arc::new(CgroupAgg { wait: Stats::new(DETAIL_SIGFIG), touched: self.tick }));
            let row = Arc::make_mut(row);
            row.touched = self.tick;
            add(&mut row.wait);
        }

        let (tid, task_overflow) = capped(&st.tasks, tid, self.limits.max_tasks, OVERFLOW_TID);
        if task_overflow {
            st.overflow.tasks += n;
        }
        let task = st.tasks.entry(tid).or_insert_with(|| {
            Arc::new(TaskAgg {
                tgid: if tid == OVERFLOW_TID { 0 } else { tgid },
                comm: if tid == OVERFLOW_TID { [0; 16] } else { *comm },
                wait: Stats::new(DETAIL_SIGFIG),
                touched: self.tick,
            })
        });
        let task = Arc::make_mut(task);
        task.touched = self.tick;
        add(&mut task.wait);
    }

    /// Ends a publish interval: with `Limits::max_idle`, drops the lock,
    /// (lock, stack) and task rows that no wait updated for that many
    /// intervals (counted in `Overflow::aged_*`; their waits stay in
    /// `events`, and a lock's own statistics keep its aged callers' waits).
    pub fn age(&mut self) {
        self.tick += 1;
        let Some(idle) = self.limits.max_idle else { return };
        let Some(oldest) = self.tick.checked_sub(idle) else { return };
        let st = &mut self.state;
        let before = (st.locks.len(), st.tasks.len(), st.cgroups.len());
        let mut callers = 0;
        st.locks.retain(|_, l| {
            let keep = l.touched >= oldest;
            if !keep {
                callers += l.callers.len();
            }
            keep
        });
        st.tasks.retain(|_, t| t.touched >= oldest);
        st.cgroups.retain(|_, c| c.touched >= oldest);
        let mut aged_callers = 0;
        for l in st.locks.values_mut() {
            // Copy-on-write only the rows that have something to drop.
            if !l.caller_touched.values().any(|&t| t < oldest) {
                continue;
            }
            let l = Arc::make_mut(l);
            let stale: Vec<StackId> = l.caller_touched.iter().filter(|(_, t)| **t < oldest).map(|(s, _)| *s).collect();
            if !stale.is_empty() {
                l.caller_cgroups.retain(|(sid, _), _| l.caller_touched.get(sid).is_none_or(|&t| t >= oldest));
            }
            for sid in stale {
                l.caller_touched.remove(&sid);
                l.hold_callers.remove(&sid);
                if l.callers.remove(&sid).is_some() {
                    aged_callers += 1;
                }
            }
        }
        callers += aged_callers;
        st.overflow.aged_callers += aged_callers as u64;
        self.callers = self.callers.saturating_sub(callers);
        st.overflow.aged_locks += (before.0 - st.locks.len()) as u64;
        st.overflow.aged_tasks += (before.1 - st.tasks.len()) as u64;
        st.overflow.aged_cgroups += (before.2 - st.cgroups.len()) as u64;
        if aged_callers > 0 {
            // Forget joined ids no caller row uses any more.
            let used: rustc_hash::FxHashSet<StackId> =
                st.locks.values().flat_map(|l| l.callers.keys().chain(l.hold_callers.keys()).copied()).collect();
            if st.joined.keys().any(|id| !used.contains(id)) {
                Arc::make_mut(&mut st.joined).retain(|id, _| used.contains(id));
            }
        }
    }

    /// Records what the kernel side reported.
    pub fn set_kernel_status(&mut self, k: KernelStatus) {
        self.state.kernel = k;
    }

    /// A snapshot of the current tables: cheap (rows are shared until they
    /// change), numbered by publication.
    pub fn snapshot(&mut self) -> Snapshot {
        self.state.generation += 1;
        self.state.clone()
    }

    /// Borrow of the current tables.
    pub fn state(&self) -> &Snapshot {
        &self.state
    }

    /// Forgets everything (the TUI's reset key) but the kernel's counters.
    pub fn reset(&mut self) {
        let (generation, kernel, recent_seq) = (self.state.generation, self.state.kernel, self.state.recent_seq);
        self.state = Snapshot { generation, kernel, recent_seq, ..Snapshot::default() };
        self.callers = 0;
    }

    /// Distinct (lock, stack) slots in use (bounded by `Limits::max_callers`).
    pub fn callers(&self) -> usize {
        self.callers
    }

    /// Events ingested since the last reset.
    pub fn events(&self) -> u64 {
        self.state.events
    }
}

#[cfg(test)]
pub(crate) mod tests;
