//! The engine's ring of recent snapshots, in bounded memory.
//!
//! A snapshot shares every row the aggregator did not change since the one
//! before it (`Arc`s copied on write), so a slot costs what changed in its
//! second: nothing on a quiet machine, up to a generation of every row when
//! every lock and stack is busy. The ring keeps every slot of the last
//! seconds the triggers read (`dense`), then one slot every `step` back to
//! `keep` (a window's start needs no finer grain), and drops its oldest
//! slots, counted, while the rows only it holds are estimated above its
//! budget, down to its newest two (a window then starts later than
//! `--before` asked, and the incident says when; rates and percentiles are
//! judged over the seconds there are).

use std::{
    collections::VecDeque,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{clock, model::Stats, pipeline::Snapshot};

/// What the ring may hold beyond the aggregator's own rows, by default.
pub const BUDGET_BYTES: usize = 64 << 20;

/// One snapshot and when it was taken.
#[derive(Clone)]
pub struct Slot {
    /// When.
    pub at: Instant,
    /// When, CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
    /// When, Unix ms.
    pub unix_ms: u64,
    /// The snapshot.
    pub snap: Arc<Snapshot>,
}

impl Slot {
    /// A slot of `snap`, taken now.
    pub fn now(snap: Arc<Snapshot>) -> Slot {
        Slot { at: Instant::now(), mono_ns: clock::monotonic_ns(), unix_ms: clock::unix_ms(), snap }
    }
}

fn stats_bytes(s: &Stats) -> usize {
    std::mem::size_of::<Stats>() + s.heap_bytes()
}

/// Estimated bytes of the rows of `a` that `b` does not share (what
/// dropping `a` frees, when `b` stays).
pub fn exclusive_bytes(a: &Snapshot, b: &Snapshot) -> usize {
    const ARC: usize = 2 * std::mem::size_of::<usize>();
    let mut n = 0;
    for (k, l) in &a.locks {
        let other = b.locks.get(k);
        if other.is_some_and(|o| Arc::ptr_eq(o, l)) {
            continue;
        }
        n += ARC + std::mem::size_of_val(&**l) + stats_bytes(&l.wait);
        n += l.hold.as_ref().map_or(0, stats_bytes);
        n += (l.callers.capacity() + l.hold_callers.capacity()) * 2 * std::mem::size_of::<usize>();
        n += l.blame.capacity() * 64 + l.caller_cgroups.capacity() * 48;
        for (id, c) in l.callers.iter().chain(&l.hold_callers) {
            let shared = other.is_some_and(|o| {
                o.callers.get(id).or_else(|| o.hold_callers.get(id)).is_some_and(|x| Arc::ptr_eq(x, c))
            });
            if !shared {
                n += ARC + stats_bytes(c);
            }
        }
    }
    for (k, t) in &a.tasks {
        if !b.tasks.get(k).is_some_and(|o| Arc::ptr_eq(o, t)) {
            n += ARC + std::mem::size_of_val(&**t) + t.wait.heap_bytes();
        }
    }
    for (k, c) in &a.cgroups {
        if !b.cgroups.get(k).is_some_and(|o| Arc::ptr_eq(o, c)) {
            n += ARC + std::mem::size_of_val(&**c) + c.wait.heap_bytes();
        }
    }
    n
}

/// See the module documentation.
pub struct Ring {
    slots: VecDeque<Slot>,
    /// Per slot, the bytes only it holds (the newest: 0, the aggregator
    /// holds its rows).
    exclusive: VecDeque<usize>,
    budget: usize,
    /// Slots dropped for the budget.
    pub dropped: u64,
}

impl Ring {
    /// An empty ring of at most `budget` bytes (beyond its dense part).
    pub fn new(budget: usize) -> Ring {
        Ring { slots: VecDeque::new(), exclusive: VecDeque::new(), budget, dropped: 0 }
    }

    /// The newest slot.
    pub fn back(&self) -> Option<&Slot> {
        self.slots.back()
    }

    /// The latest slot taken at or before `t`, else the oldest.
    pub fn at_or_before(&self, t: Instant) -> Option<&Slot> {
        self.slots.iter().rev().find(|s| s.at <= t).or(self.slots.front())
    }

    /// Estimated bytes the ring holds beyond the aggregator's rows.
    pub fn bytes(&self) -> usize {
        self.exclusive.iter().sum()
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds no slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Adds the newest slot, then thins and trims (see the module doc).
    pub fn push(&mut self, s: Slot, keep: Duration, dense: Duration, step: Duration) {
        if let (Some(last), Some(x)) = (self.slots.back(), self.exclusive.back_mut()) {
            *x = exclusive_bytes(&last.snap, &s.snap);
        }
        let now = s.at;
        self.slots.push_back(s);
        self.exclusive.push_back(0);
        while self.slots.front().is_some_and(|f| now.saturating_duration_since(f.at) > keep) {
            self.pop_front();
        }
        // Thin the slots older than `dense` to one per `step`.
        let mut i = 1;
        while i + 1 < self.slots.len() {
            let (prev, this) = (self.slots[i - 1].at, self.slots[i].at);
            let old = now.saturating_duration_since(this) > dense;
            if old && this.saturating_duration_since(prev) < step {
                self.remove(i);
            } else {
                i += 1;
            }
        }
        // The budget holds even when every row changes every second: the
        // oldest slots go first, the dense part's too, down to the newest two.
        while self.bytes() > self.budget && self.slots.len() > 2 {
            self.pop_front();
            self.dropped += 1;
        }
    }

    fn pop_front(&mut self) {
        self.slots.pop_front();
        self.exclusive.pop_front();
    }

    /// Removes slot `i` (not the first or the last): its predecessor's
    /// exclusive rows are now those it does not share with `i`'s successor.
    fn remove(&mut self, i: usize) {
        self.slots.remove(i);
        self.exclusive.remove(i);
        let x = exclusive_bytes(&self.slots[i - 1].snap, &self.slots[i].snap);
        self.exclusive[i - 1] = x;
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{ContentionEvent, EVENT_CONTENTION, USER_STACK_OFF, lcb};

    use super::*;
    use crate::pipeline::{Aggregator, Limits};

    fn feed(a: &mut Aggregator, locks: std::ops::Range<u64>) {
        for l in locks {
            a.ingest(&ContentionEvent {
                kind: EVENT_CONTENTION,
                lock_addr: 0x1000 + l * 64,
                wait_ns: 1_000 + l,
                tid: 1,
                flags: lcb::MUTEX,
                stack_id: l,
                user_stack_id: USER_STACK_OFF,
                ..Default::default()
            });
        }
    }

    #[test]
    fn shared_rows_cost_nothing_and_changed_rows_count() {
        let mut a = Aggregator::new(Limits::default());
        feed(&mut a, 0..100);
        let s1 = a.snapshot();
        let s2 = a.snapshot();
        assert_eq!(exclusive_bytes(&s1, &s2), 0, "nothing changed");
        feed(&mut a, 0..10);
        let s3 = a.snapshot();
        let ten = exclusive_bytes(&s2, &s3);
        feed(&mut a, 0..50);
        let s4 = a.snapshot();
        let fifty = exclusive_bytes(&s3, &s4);
        assert!(ten > 0 && fifty > 4 * ten, "{ten} {fifty}");
    }

    #[test]
    fn old_slots_thin_out_and_the_budget_drops_the_oldest() {
        let mut a = Aggregator::new(Limits::default());
        let t0 = Instant::now();
        let slot = |a: &mut Aggregator, s: u64| Slot {
            at: t0 + Duration::from_secs(s),
            mono_ns: s,
            unix_ms: s,
            snap: Arc::new(a.snapshot()),
        };
        let (keep, dense, step) = (Duration::from_secs(30), Duration::from_secs(5), Duration::from_secs(4));
        let mut r = Ring::new(usize::MAX);
        for s in 0..40 {
            feed(&mut a, 0..20);
            r.push(slot(&mut a, s), keep, dense, step);
        }
        let ages: Vec<u64> = r.slots.iter().map(|x| 39 - x.at.duration_since(t0).as_secs()).collect();
        assert!(ages.iter().all(|&g| g <= 30), "{ages:?}");
        assert!(ages.windows(2).all(|w| w[0] - w[1] >= 4 || w[1] <= 5), "one per step beyond the dense part: {ages:?}");
        assert_eq!(ages.iter().filter(|&&g| g <= 5).count(), 6, "every slot of the dense part: {ages:?}");
        assert!(r.at_or_before(t0 + Duration::from_secs(12)).is_some_and(|x| x.at <= t0 + Duration::from_secs(12)));
        // A budget of one slot's rows: the oldest go, the dense part's too,
        // down to what fits (never fewer than the newest two).
        let one = r.exclusive.iter().copied().max().unwrap_or(0);
        let mut r2 = Ring::new(one);
        for s in 40..80 {
            feed(&mut a, 0..20);
            r2.push(slot(&mut a, s), keep, dense, step);
            assert!(r2.bytes() <= one || r2.len() == 2, "{} bytes in {} slots", r2.bytes(), r2.len());
        }
        assert!(r2.dropped > 0);
        assert!(r2.len() >= 2 && r2.len() < 6, "{}", r2.len());
    }
}
