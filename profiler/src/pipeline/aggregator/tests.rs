//! Aggregator tests: folding, key caps, records of every kind.

use std::sync::Arc;

use profiler_common::{EVENT_CONTENTION, EVENT_HOLD, EVENT_OUTLIER, EVENT_YIELD, LockMode, LockType, lcb};

use super::*;
use crate::{model::LockKey, pipeline::record::Record};

pub(crate) fn ev(addr: u64, flags: u32, wait_ns: u64, tid: u32, stack_id: profiler_common::StackId) -> ContentionEvent {
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
        _pad: 0,
        stack_id,
        user_stack_id: profiler_common::USER_STACK_OFF,
        cgroup_id: 0,
        kind: EVENT_CONTENTION,
        comm,
        owner: profiler_common::Owner::default(),
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
    let m = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive, pid: 0 }];
    assert_eq!(m.wait.count(), 3);
    assert_eq!(m.wait.total_ns(), 9000);
    assert_eq!((m.wait.min_ns(), m.wait.max_ns()), (1000, 5000));
    assert_eq!(m.callers[&1].count(), 2);
    assert_eq!(m.callers[&2].total_ns(), 5000);
    let rw = &s.locks[&LockKey { addr: 0x200, lock_type: LockType::Rwlock, mode: LockMode::Write, pid: 0 }];
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
    let limits = Limits { max_locks: 2, max_callers: 3, max_tasks: 2, ..Limits::default() };
    let mut a = Aggregator::new(limits);
    let mut total = 0;
    for i in 0..10u64 {
        let w = 100 + i;
        total += w;
        a.ingest(&ev(0x1000 + i, lcb::SPIN, w, i as u32 + 1, i));
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
    let key = AggKey {
        lock_addr: 0x100,
        tid: 7,
        tgid: 0,
        flags: lcb::MUTEX,
        stack_id: 3,
        user_stack_id: profiler_common::USER_STACK_OFF,
        cgroup_id: 0,
        _pad: 0,
    };
    a.ingest_agg(&key, &v);
    let s = a.snapshot();
    assert_eq!(s.events, 4);
    let lock = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive, pid: 0 }];
    assert_eq!((lock.wait.count(), lock.wait.total_ns(), lock.wait.max_ns()), (4, 7_000, 3_000));
    assert_eq!(lock.callers.len(), 1);
    assert_eq!(lock.callers[&3].count(), 4);
    assert_eq!(s.tasks[&7].wait.count(), 4);
}

#[test]
fn recent_long_waits_are_kept_in_order_with_a_sequence() {
    let mut a = Aggregator::new(Limits::default());
    a.ingest(&ev(0x100, lcb::MUTEX, 50_000_000, 7, 3));
    assert!(a.snapshot().recent.is_empty(), "nothing kept unless asked for");
    let mut a = Aggregator::new(Limits::default()).with_recent(10_000);
    for w in [5_000u64, 20_000, 10_000, 1_000] {
        a.ingest(&ev(0x100, lcb::MUTEX, w, 7, 3));
    }
    let s = a.snapshot();
    assert_eq!(s.recent.iter().map(|e| e.wait_ns).collect::<Vec<_>>(), [20_000, 10_000]);
    assert_eq!(s.recent_seq, 2);
    for w in 0..RECENT_KEPT as u64 + 5 {
        let mut e = ev(0x100, lcb::MUTEX, 10_000 + w, 7, 3);
        e.kind = EVENT_OUTLIER;
        a.apply(&Record::Outlier(e));
    }
    a.reset();
    let s = a.snapshot();
    assert_eq!(s.recent_seq, RECENT_KEPT as u64 + 7, "the sequence survives a reset");
    assert!(s.recent.is_empty());
}

#[test]
fn outliers_only_feed_the_slowest_list() {
    let mut a = Aggregator::new(Limits::default());
    for w in 1..=30u64 {
        let mut e = ev(0x100, lcb::MUTEX, w * 1_000, 7, 3);
        e.kind = EVENT_OUTLIER;
        a.apply(&Record::Outlier(e));
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
    a.apply(&Record::Hold(h));
    a.apply(&Record::Hold(h));
    // Aggregate mode: a hold (streamed) can arrive before its wait (drained).
    let mut early = ev(0x999, lcb::MUTEX, 10, 7, 4);
    early.kind = EVENT_HOLD;
    a.apply(&Record::Hold(early));
    let key = AggKey {
        lock_addr: 0x999,
        tid: 7,
        tgid: 0,
        flags: lcb::MUTEX,
        stack_id: 4,
        user_stack_id: profiler_common::USER_STACK_OFF,
        cgroup_id: 0,
        _pad: 0,
    };
    let mut v = AggVal { count: 1, total_ns: 500, min_ns: 500, max_ns: 500, ..AggVal::default() };
    v.hist[profiler_common::hist_bucket(500)] = 1;
    a.ingest_agg(&key, &v);
    let s = a.snapshot();
    assert_eq!(s.events, 2, "holds are not contentions");
    let lock = &s.locks[&LockKey { addr: 0x100, lock_type: LockType::Mutex, mode: LockMode::Exclusive, pid: 0 }];
    let hold = lock.hold.as_ref().expect("hold stats");
    assert_eq!((hold.count(), hold.total_ns()), (2, 100_000));
    assert_eq!(lock.hold_callers[&3].count(), 2);
    let late = &s.locks[&LockKey { addr: 0x999, lock_type: LockType::Mutex, mode: LockMode::Exclusive, pid: 0 }];
    assert_eq!(late.wait.count(), 1, "the wait drained after its hold lands on the same row");
    assert_eq!(late.hold.as_ref().map(Stats::count), Some(1));
    assert_eq!(late.callers[&4].count(), 1);
    assert_eq!(late.hold_callers[&4].count(), 1);
}

#[test]
fn in_kernel_hold_aggregates_land_in_hold_statistics_not_waits() {
    let mut a = Aggregator::new(Limits::default());
    let wait_key = AggKey {
        lock_addr: 0x500,
        tid: 9,
        tgid: 9,
        flags: lcb::MUTEX | lcb::SPIN,
        stack_id: 2,
        user_stack_id: profiler_common::USER_STACK_OFF,
        cgroup_id: 0,
        _pad: 0,
    };
    let mut w = AggVal { count: 3, total_ns: 300, min_ns: 100, max_ns: 100, ..AggVal::default() };
    w.hist[profiler_common::hist_bucket(100)] = 3;
    a.ingest_agg(&wait_key, &w);
    let hold_key = AggKey { flags: wait_key.flags | profiler_common::AGG_HOLD, ..wait_key };
    let mut h = AggVal { count: 2, total_ns: 9_000, min_ns: 4_000, max_ns: 5_000, ..AggVal::default() };
    h.hist[profiler_common::hist_bucket(4_000)] = 1;
    h.hist[profiler_common::hist_bucket(5_000)] = 1;
    a.ingest_agg(&hold_key, &h);
    let s = a.snapshot();
    assert_eq!(s.events, 3, "hold aggregates are not contentions");
    assert_eq!(s.locks.len(), 1, "the hold lands on its wait's lock row");
    let lock = s.locks.values().next().expect("one lock");
    assert_eq!((lock.wait.count(), lock.wait.total_ns()), (3, 300));
    let hold = lock.hold.as_ref().expect("hold stats");
    assert_eq!((hold.count(), hold.total_ns(), hold.max_ns()), (2, 9_000, 5_000));
    assert_eq!(lock.hold_callers[&2].count(), 2);
}

pub(crate) fn yield_ev(
    tid: u32,
    target: u32,
    ret: i32,
    latency_ns: u64,
    stack_id: profiler_common::StackId,
) -> YieldEvent {
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
        kind: EVENT_YIELD,
        stack_id,
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
    let p = &y.pairs[&YieldPairKey { tid: 1, target_tid: 2 }];
    assert_eq!((p.stats.yielded, p.stats.failed, p.tgid, p.target_tgid), (1, 1, 100, 100));
    assert_eq!(y.pairs.len(), 3);
    assert_eq!(y.overflow, 0);
    assert_eq!(a.events(), 0, "yields are not lock contentions");
}

#[test]
fn yield_pairs_beyond_the_limit_fold_into_one_row() {
    let mut a = Aggregator::new(Limits { max_locks: 10, max_callers: 1, max_tasks: 2, ..Limits::default() });
    for t in 0..5u32 {
        a.ingest_yield(&yield_ev(t, t + 1, 1, 10, u64::from(t)));
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

#[test]
fn snapshots_share_unchanged_rows_and_keep_their_values() {
    let mut a = Aggregator::new(Limits::default());
    a.ingest(&ev(0x100, lcb::MUTEX, 1_000, 7, 3));
    a.ingest(&ev(0x200, lcb::SPIN, 10, 8, 4));
    let first = a.snapshot();
    a.ingest(&ev(0x100, lcb::MUTEX, 5_000, 7, 3));
    let second = a.snapshot();
    let k100 = LockKey::kernel(0x100, lcb::MUTEX);
    let k200 = LockKey::kernel(0x200, lcb::SPIN);
    assert_eq!(first.locks[&k100].wait.count(), 1, "a published snapshot does not change");
    assert_eq!(second.locks[&k100].wait.count(), 2);
    assert!(Arc::ptr_eq(&first.locks[&k200], &second.locks[&k200]), "an unchanged row is shared, not copied");
    assert!(!Arc::ptr_eq(&first.locks[&k100], &second.locks[&k100]));
    assert_eq!(second.generation, first.generation + 1);
}

#[test]
fn blame_from_streams_and_aggregates_sums_per_owner() {
    use profiler_common::{AGG_BLAME, Owner, owner};
    let mut a = Aggregator::new(Limits::default());
    let task = |tid, stack_id| Owner {
        kind: owner::TASK,
        tid,
        tgid: 100,
        stack_id,
        comm: *b"writer\0\0\0\0\0\0\0\0\0\0",
        ..Owner::default()
    };
    let mut e = ev(0x700, lcb::MUTEX, 1_000, 1, 3);
    e.owner = task(42, 9);
    a.ingest(&e);
    e.wait_ns = 3_000;
    a.ingest(&e);
    let mut readers = ev(0x700, lcb::MUTEX, 500, 2, 3);
    readers.owner =
        Owner { kind: owner::READERS, tid: 3, stack_id: profiler_common::STACK_SKIPPED, ..Owner::default() };
    a.ingest(&readers);
    a.ingest(&ev(0x700, lcb::MUTEX, 250, 2, 3)); // owner unknown
    // An in-kernel blame aggregate of the same owner and stack.
    let key = AggKey {
        lock_addr: 0x700,
        tid: 42,
        tgid: 100,
        flags: lcb::MUTEX | AGG_BLAME,
        stack_id: 9,
        user_stack_id: profiler_common::USER_STACK_OFF,
        cgroup_id: profiler_common::STACK_SKIPPED,
        _pad: 0,
    };
    let v = AggVal { count: 2, total_ns: 6_000, min_ns: 2_000, max_ns: 4_000, ..AggVal::default() };
    a.ingest_agg(&key, &v);
    // The same owner found asleep (`--owner-stacks`), aggregated in the
    // kernel (the blame key's cgroup field carries its stack then).
    a.ingest_agg(&AggKey { cgroup_id: 77, ..key }, &AggVal { count: 2, total_ns: 15_000, max_ns: 8_000, ..v });
    let s = a.snapshot();
    assert_eq!(s.events, 4, "blame aggregates are not contentions");
    let lock = s.locks.values().next().expect("lock");
    let w = &lock.blame[&BlameKey::acquired(42, 9)];
    assert_eq!((w.waits, w.wait_ns, w.max_ns, w.tgid), (4, 10_000, 4_000, 100));
    assert_eq!(&w.comm[..6], b"writer");
    let r = &lock.blame[&BlameKey::acquired(0, profiler_common::STACK_SKIPPED)];
    assert_eq!((r.waits, r.wait_ns), (1, 500), "readers are blamed under tid 0");
    let z = &lock.blame[&BlameKey { asleep_stack_id: 77, ..BlameKey::acquired(42, 9) }];
    assert_eq!((z.waits, z.wait_ns, z.max_ns), (2, 15_000, 8_000), "blame with the owner asleep is its own row");
    assert_eq!(lock.blame.len(), 3, "the unknown owner is not a blame row");
}

#[test]
fn idle_rows_age_out_and_are_counted() {
    let mut a = Aggregator::new(Limits { max_idle: Some(2), max_tasks: 3, ..Limits::default() });
    a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 1));
    a.ingest(&ev(0x200, lcb::MUTEX, 10, 2, 2));
    for tick in 0..2 {
        a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 1));
        a.age();
        assert_eq!(a.state().locks.len(), 2, "tick {tick}: not idle long enough yet");
    }
    a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 1));
    a.age();
    let s = a.snapshot();
    assert_eq!(s.locks.len(), 1, "the idle lock is gone, the busy one stays");
    assert!(s.locks.contains_key(&LockKey::kernel(0x100, lcb::MUTEX)));
    assert_eq!((s.overflow.aged_locks, s.overflow.aged_tasks, s.overflow.aged_callers), (1, 1, 0));
    assert_eq!(s.events, 5, "aged rows' waits stay counted");
    assert_eq!(a.callers(), 1, "the aged lock's caller slot is free again");
    // New threads get rows again instead of folding into the overflow row.
    for tid in 10..12 {
        a.ingest(&ev(0x100, lcb::MUTEX, 10, tid, 1));
    }
    assert_eq!(a.state().overflow.tasks, 0);
}

#[test]
fn without_max_idle_nothing_ages() {
    let mut a = Aggregator::new(Limits::default());
    a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 1));
    for _ in 0..100 {
        a.age();
    }
    assert_eq!(a.state().locks.len(), 1);
    assert_eq!(a.state().tasks.len(), 1);
}

#[test]
fn idle_callers_of_a_busy_lock_age_out() {
    let mut a = Aggregator::new(Limits { max_idle: Some(2), ..Limits::default() });
    a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 7));
    for _ in 0..3 {
        a.ingest(&ev(0x100, lcb::MUTEX, 10, 1, 1));
        a.age();
    }
    let s = a.snapshot();
    let lock = &s.locks[&LockKey::kernel(0x100, lcb::MUTEX)];
    assert!(lock.callers.contains_key(&1) && !lock.callers.contains_key(&7), "{:?}", lock.callers.keys());
    assert_eq!(lock.wait.count(), 4, "the lock's own statistics keep every wait");
    assert_eq!(s.overflow.aged_callers, 1);
    assert_eq!(a.callers(), 1);
}

/// A wait of thread `tid` in cgroup `cgroup`, with user stack `user`.
fn ev_in(addr: u64, wait_ns: u64, tid: u32, stack_id: u64, user: u64, cgroup: u64) -> ContentionEvent {
    ContentionEvent { user_stack_id: user, cgroup_id: cgroup, ..ev(addr, lcb::MUTEX, wait_ns, tid, stack_id) }
}

#[test]
fn cgroups_split_each_caller_and_sum_to_the_lock() {
    use profiler_common::USER_STACK_OFF;
    let mut a = Aggregator::new(Limits::default());
    a.ingest(&ev_in(0x100, 1_000, 1, 7, USER_STACK_OFF, 50));
    a.ingest(&ev_in(0x100, 3_000, 2, 7, USER_STACK_OFF, 60));
    a.ingest(&ev_in(0x100, 5_000, 2, 7, USER_STACK_OFF, 60));
    // From the aggregate maps: two waits of cgroup 50.
    let key = AggKey {
        lock_addr: 0x100,
        tid: 1,
        tgid: 0,
        flags: lcb::MUTEX,
        stack_id: 7,
        user_stack_id: USER_STACK_OFF,
        cgroup_id: 50,
        _pad: 0,
    };
    let v = AggVal { count: 2, total_ns: 400, min_ns: 100, max_ns: 300, ..AggVal::default() };
    a.ingest_agg(&key, &v);
    let s = a.snapshot();
    let lock = &s.locks[&LockKey::kernel(0x100, lcb::MUTEX)];
    assert_eq!(lock.caller_cgroups[&(7, 50)], CgroupSums { count: 3, wait_ns: 1_400, max_ns: 1_000 });
    assert_eq!(lock.caller_cgroups[&(7, 60)], CgroupSums { count: 2, wait_ns: 8_000, max_ns: 5_000 });
    let (n, ns) = lock.caller_cgroups.values().fold((0, 0), |(n, ns), c| (n + c.count, ns + c.wait_ns));
    assert_eq!((n, ns), (lock.wait.count(), lock.wait.total_ns()));
    assert_eq!((s.cgroups[&50].wait.count(), s.cgroups[&60].wait.total_ns()), (3, 8_000));
    // cgroup 0 (not recorded) makes no cgroup row.
    a.ingest(&ev(0x100, lcb::MUTEX, 10, 3, 7));
    assert_eq!(a.state().cgroups.len(), 2);
}

#[test]
fn cgroups_past_the_cap_fold_into_one_row() {
    use profiler_common::USER_STACK_OFF;
    let mut a = Aggregator::new(Limits { max_cgroups: 2, ..Limits::default() });
    for cg in 1..=5u64 {
        a.ingest(&ev_in(0x100, 100, 1, 7, USER_STACK_OFF, cg));
    }
    let s = a.snapshot();
    assert_eq!(s.cgroups.len(), 3, "two cgroups and the overflow row");
    assert_eq!(s.cgroups[&CGROUP_OVERFLOW].wait.count(), 3);
    assert_eq!(s.overflow.cgroups, 3);
}

#[test]
fn a_user_stack_joins_its_kernel_stack_in_one_caller_id() {
    use profiler_common::{USER_STACK_NONE, USER_STACK_OFF, is_stack};
    let mut a = Aggregator::new(Limits { max_idle: Some(1), ..Limits::default() });
    a.ingest(&ev_in(0x100, 100, 1, 7, 0xabc, 0));
    a.ingest(&ev_in(0x100, 200, 1, 7, 0xdef, 0));
    a.ingest(&ev_in(0x100, 300, 1, 7, USER_STACK_OFF, 0));
    a.ingest(&ev_in(0x100, 400, 1, 7, USER_STACK_NONE, 0));
    let mut hold = ev_in(0x100, 50, 1, 7, 0xabc, 0);
    hold.kind = profiler_common::EVENT_HOLD;
    a.apply(&Record::Hold(hold));
    let s = a.snapshot();
    let lock = &s.locks[&LockKey::kernel(0x100, lcb::MUTEX)];
    assert_eq!(lock.callers.len(), 3, "two joined callers and the kernel-only one");
    assert_eq!(lock.callers[&7].total_ns(), 700, "without a user stack the caller is the kernel stack");
    assert_eq!(s.joined.len(), 2);
    for (id, (k, u)) in s.joined.iter() {
        assert!(is_stack(*id) && *k == 7 && [0xabc, 0xdef].contains(u));
        assert!(lock.callers.contains_key(id));
    }
    let abc = s.joined.iter().find(|(_, p)| p.1 == 0xabc).map(|(id, _)| *id).expect("joined");
    assert_eq!(lock.hold_callers[&abc].total_ns(), 50, "a hold joins the same caller as its wait");
    // Once those callers age out, so do their joined ids.
    for _ in 0..3 {
        a.ingest(&ev_in(0x100, 1, 1, 7, USER_STACK_OFF, 0));
        a.age();
    }
    assert!(a.state().joined.is_empty(), "{:?}", a.state().joined);
}

#[test]
fn a_futex_is_one_lock_per_process_with_its_hold_and_blame_on_that_row() {
    let mut a = Aggregator::new(Limits::default());
    let key = |tgid: u32, flags: u32, tid: u32| AggKey {
        lock_addr: 0x5555_0000_1000,
        tid,
        tgid,
        flags,
        stack_id: profiler_common::STACK_USER_LOCK,
        user_stack_id: 0x77,
        cgroup_id: 0,
        _pad: 0,
    };
    let val = |count: u64, ns: u64| {
        let mut v = AggVal { count, total_ns: count * ns, min_ns: ns, max_ns: ns, ..AggVal::default() };
        v.hist[profiler_common::hist_bucket(ns)] = count as u32;
        v
    };
    // The same address in processes 100 and 200: two locks.
    a.ingest_agg(&key(100, lcb::FUTEX, 101), &val(3, 1_000));
    a.ingest_agg(&key(200, lcb::FUTEX, 201), &val(5, 2_000));
    // Process 100's hold and blame (thread 102 held it) land on its row.
    a.ingest_agg(&key(100, lcb::FUTEX | profiler_common::AGG_HOLD, 101), &val(3, 500));
    let blame = AggKey { stack_id: profiler_common::STACK_USER_LOCK, ..key(100, lcb::FUTEX | AGG_BLAME, 102) };
    a.ingest_agg(&blame, &val(2, 1_000));
    let s = a.snapshot();
    let lock = |pid| LockKey { addr: 0x5555_0000_1000, lock_type: LockType::Futex, mode: LockMode::Exclusive, pid };
    assert_eq!(s.locks.len(), 2);
    let l100 = &s.locks[&lock(100)];
    assert_eq!(l100.wait.count(), 3);
    assert_eq!(l100.hold.as_ref().map(Stats::count), Some(3));
    assert_eq!(l100.blame.values().map(|b| b.waits).sum::<u64>(), 2);
    assert_eq!(s.locks[&lock(200)].wait.count(), 5);
    assert!(s.locks[&lock(200)].hold.is_none());
    // Its caller joins the user stack to the kernel's stand-in.
    let caller = l100.callers.keys().next().expect("a caller");
    assert_eq!(s.joined.get(caller), Some(&(profiler_common::STACK_USER_LOCK, 0x77)));
    // A PI futex is its own type.
    a.ingest_agg(&key(100, lcb::FUTEX | lcb::RT, 101), &val(1, 1_000));
    let pi = LockKey { lock_type: LockType::FutexPi, ..lock(100) };
    assert_eq!(a.snapshot().locks[&pi].wait.count(), 1);
}
