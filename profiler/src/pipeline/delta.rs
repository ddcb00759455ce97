//! What each profile added since the previous one: per-interval deltas
//! beside the cumulative profile (tokio console-subscriber's
//! `since_last_update`), computed here once for every face (serve's
//! counters and window, the TUI's rates) instead of by each of them.
//!
//! A [`Deltas`] belongs to one consumer and diffs against the profile *that
//! consumer* saw last: profiles travel over a `watch` channel, which keeps
//! only the newest, so a delta computed once per interval by the publisher
//! would be lost, with its waits, by a consumer that skipped a profile.
//! Rows are keyed by [`LockKey`] and, below a lock, by the frames each row
//! kind is drawn by (`CallerProfile::frames`, `OwnerProfile::frames`).

use std::{collections::HashMap, sync::Arc};

use crate::model::{CallerProfile, LockKey, LockProfile, OwnerProfile, Profile, Stats};

/// Histogram bucket bounds: powers of two nanoseconds, 1.024 us to 17.2 s
/// (a bucket counts the waits shorter than its bound; the statistics'
/// buckets never straddle a power of two, so these counts are exact).
pub const BUCKET_LOG2_NS: [u32; 13] = [10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34];

/// Count, sum and fixed-bucket counts of one statistic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hist {
    /// Observations.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// Observations below each bound of [`BUCKET_LOG2_NS`] (cumulative).
    pub below: [u64; BUCKET_LOG2_NS.len()],
}

impl Hist {
    /// The cumulative figures of `s`.
    pub fn of(s: &Stats) -> Hist {
        let mut below = [0; BUCKET_LOG2_NS.len()];
        for (b, k) in below.iter_mut().zip(BUCKET_LOG2_NS) {
            *b = s.count_at_or_below((1u64 << k) - 1);
        }
        Hist { count: s.count(), sum_ns: s.total_ns(), below }
    }

    /// Growth from `last` to `self`; all of `self` when it shrank (the row was
    /// dropped and created again).
    pub fn since(&self, last: &Hist) -> Hist {
        if self.count < last.count || self.sum_ns < last.sum_ns {
            return *self;
        }
        let mut below = [0; BUCKET_LOG2_NS.len()];
        for (i, b) in below.iter_mut().enumerate() {
            *b = self.below[i].saturating_sub(last.below[i]);
        }
        Hist { count: self.count - last.count, sum_ns: self.sum_ns - last.sum_ns, below }
    }

    /// Adds `d`.
    pub fn add(&mut self, d: &Hist) {
        self.count += d.count;
        self.sum_ns = self.sum_ns.saturating_add(d.sum_ns);
        for (b, x) in self.below.iter_mut().zip(d.below) {
            *b += x;
        }
    }
}

/// A lock's waits and holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Waits.
    pub wait: Hist,
    /// Holds of contended acquisitions.
    pub hold: Hist,
}

impl Totals {
    /// The cumulative figures of a lock.
    pub fn of(l: &LockProfile) -> Totals {
        Totals { wait: Hist::of(&l.wait), hold: l.hold.as_ref().map(Hist::of).unwrap_or_default() }
    }

    /// Growth from `last` (each statistic whole where it shrank).
    pub fn since(&self, last: &Totals) -> Totals {
        Totals { wait: self.wait.since(&last.wait), hold: self.hold.since(&last.hold) }
    }

    /// Adds `d`.
    pub fn add(&mut self, d: &Totals) {
        self.wait.add(&d.wait);
        self.hold.add(&d.hold);
    }

    /// Nothing in it.
    pub fn is_zero(&self) -> bool {
        self.wait.count == 0 && self.hold.count == 0
    }
}

/// Growth (or totals) of one row below a lock (a caller stack or an
/// owner): waits, holds and the waits an owner caused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values {
    /// Contentions.
    pub count: u64,
    /// Their wait, ns.
    pub wait_ns: u64,
    /// Holds seen.
    pub hold_count: u64,
    /// Their hold time, ns.
    pub hold_ns: u64,
    /// Waits this row's owner caused (owner rows only).
    pub blame_count: u64,
    /// Their wait, ns.
    pub blame_ns: u64,
}

impl Values {
    /// A caller's cumulative figures.
    pub fn of_caller(c: &CallerProfile) -> Values {
        Values {
            count: c.wait.count(),
            wait_ns: c.wait.total_ns(),
            hold_count: c.hold.as_ref().map_or(0, |h| h.count()),
            hold_ns: c.hold.as_ref().map_or(0, |h| h.total_ns()),
            ..Values::default()
        }
    }

    /// An owner row's figures: the waits it caused.
    pub fn of_owner(o: &OwnerProfile) -> Values {
        Values { blame_count: o.waits, blame_ns: o.wait_caused_ns, ..Values::default() }
    }

    /// Growth from `last`; all of `self` when it shrank (a row created again).
    pub fn since(&self, last: &Values) -> Values {
        if self.count < last.count || self.hold_count < last.hold_count || self.blame_count < last.blame_count {
            return *self;
        }
        Values {
            count: self.count - last.count,
            wait_ns: self.wait_ns.saturating_sub(last.wait_ns),
            hold_count: self.hold_count - last.hold_count,
            hold_ns: self.hold_ns.saturating_sub(last.hold_ns),
            blame_count: self.blame_count - last.blame_count,
            blame_ns: self.blame_ns.saturating_sub(last.blame_ns),
        }
    }

    /// Adds `d`.
    pub fn add(&mut self, d: &Values) {
        self.count += d.count;
        self.wait_ns = self.wait_ns.saturating_add(d.wait_ns);
        self.hold_count += d.hold_count;
        self.hold_ns = self.hold_ns.saturating_add(d.hold_ns);
        self.blame_count += d.blame_count;
        self.blame_ns = self.blame_ns.saturating_add(d.blame_ns);
    }

    /// Nothing in it.
    pub fn is_zero(&self) -> bool {
        self.count == 0 && self.hold_count == 0 && self.blame_count == 0
    }
}

/// What one lock row of the profile added.
#[derive(Clone, Debug)]
pub struct LockDelta {
    /// The row.
    pub key: LockKey,
    /// Its index in the profile's `locks`.
    pub index: usize,
    /// The row is new (or was created again): the delta is all of it.
    pub new: bool,
    /// Growth of its waits and holds.
    pub totals: Totals,
    /// Rows below it that grew (only with [`Deltas::with_rows`]): callers by
    /// their frames, then owners by theirs (owners drawn alike summed), with
    /// their growth. Frames share the profile's where they can.
    pub rows: Vec<(Arc<[String]>, Values)>,
}

/// What a lock looked like in the consumer's previous profile.
#[derive(Debug)]
struct Last {
    totals: Totals,
    rows: HashMap<Arc<[String]>, Values>,
}

/// One consumer's deltas (see the module documentation).
#[derive(Debug, Default)]
pub struct Deltas {
    rows: bool,
    last: HashMap<LockKey, Last>,
}

impl Deltas {
    /// Deltas of each lock's totals.
    pub fn new() -> Deltas {
        Deltas::default()
    }

    /// Deltas of each lock's caller and owner rows too.
    pub fn with_rows() -> Deltas {
        Deltas { rows: true, last: HashMap::new() }
    }

    /// Forgets the previous profile: the next delta is all of it.
    pub fn clear(&mut self) {
        self.last.clear();
    }

    /// What `p` added since the previous profile given, one entry per lock
    /// of `p` (zero for those that did not change), in `p`'s order. Locks
    /// absent from `p` are forgotten.
    pub fn next(&mut self, p: &Profile) -> Vec<LockDelta> {
        let mut out = Vec::with_capacity(p.locks.len());
        let mut last = HashMap::with_capacity(p.locks.len());
        for (index, l) in p.locks.iter().enumerate() {
            let key = l.key();
            let totals = Totals::of(l);
            let before = self.last.remove(&key);
            // A lock whose waits went down was dropped and created again.
            let before = before.filter(|b| b.totals.wait.count <= totals.wait.count);
            let new = before.is_none();
            let (was, mut before_rows) = before.map_or((Totals::default(), HashMap::new()), |b| (b.totals, b.rows));
            let mut delta = LockDelta { key, index, new, totals: totals.since(&was), rows: Vec::new() };
            if self.rows && (new || was != totals) {
                before_rows = rows_since(l, before_rows, &mut delta.rows);
            }
            last.insert(key, Last { totals, rows: before_rows });
            out.push(delta);
        }
        self.last = last;
        out
    }
}

/// Appends the rows of `l` that grew since `before` to `grew`; returns the
/// rows' cumulative figures, for next time.
fn rows_since(
    l: &LockProfile,
    mut before: HashMap<Arc<[String]>, Values>,
    grew: &mut Vec<(Arc<[String]>, Values)>,
) -> HashMap<Arc<[String]>, Values> {
    let mut now_rows = HashMap::with_capacity(l.callers.len() + l.owners.len());
    let mut keep = |key: Arc<[String]>, now: Values, d: Values| {
        if !d.is_zero() {
            grew.push((key.clone(), d));
        }
        now_rows.insert(key, now);
    };
    for c in l.callers.iter() {
        let now = Values::of_caller(c);
        let (key, d) = match before.remove_entry(c.frames()) {
            Some((k, was)) => (k, now.since(&was)),
            // Shares the profile's frames (and so the symbol cache's).
            None if !c.stack.is_empty() => (c.stack.clone(), now),
            None => (Arc::from(c.frames()), now),
        };
        keep(key, now, d);
    }
    // Owners of one comm and acquire stack share their frames: one row.
    let mut owners: HashMap<Arc<[String]>, Values> = HashMap::new();
    for o in &l.owners {
        owners.entry(o.frames().into()).or_default().add(&Values::of_owner(o));
    }
    for (frames, now) in owners {
        let (key, d) = match before.remove_entry(&frames[..]) {
            Some((k, was)) => (k, now.since(&was)),
            None => (frames, now),
        };
        keep(key, now, d);
    }
    now_rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{OwnerKind, placeholders},
        report::fixture,
    };

    /// `p` with one more wait of `ns` on lock `i`'s first caller.
    fn grown(p: &Profile, i: usize, ns: u64) -> Profile {
        let mut p = p.clone();
        let l = &mut p.locks[i];
        l.wait.record(ns);
        let mut callers = l.callers.to_vec();
        callers[0].wait.record(ns);
        l.callers = callers.into();
        p
    }

    fn sum(ds: &[LockDelta]) -> (u64, u64) {
        ds.iter().fold((0, 0), |(c, n), d| (c + d.totals.wait.count, n + d.totals.wait.sum_ns))
    }

    #[test]
    fn the_first_delta_is_everything_then_only_growth() {
        let p0 = fixture::profile();
        let mut d = Deltas::with_rows();
        let first = d.next(&p0);
        assert!(first.iter().all(|l| l.new));
        assert_eq!(sum(&first), (p0.contended(), p0.locks.iter().map(|l| l.wait.total_ns()).sum()));
        assert_eq!(first[0].rows.len(), p0.locks[0].callers.len(), "every caller row is new");

        let p1 = grown(&p0, 1, 7_000);
        let next = d.next(&p1);
        assert_eq!(next.len(), 2, "one delta per lock of the profile");
        assert!(next.iter().all(|l| !l.new));
        assert!(next[0].totals.is_zero() && next[0].rows.is_empty(), "an unchanged lock adds nothing");
        assert_eq!((next[1].totals.wait.count, next[1].totals.wait.sum_ns), (1, 7_000));
        assert_eq!(next[1].rows.len(), 1);
        assert_eq!(next[1].rows[0].0[..], *p1.locks[1].callers[0].frames());
        assert_eq!((next[1].rows[0].1.count, next[1].rows[0].1.wait_ns), (1, 7_000));
    }

    #[test]
    fn a_consumer_that_skips_profiles_loses_nothing() {
        let p0 = fixture::profile();
        let p1 = grown(&p0, 1, 7_000);
        let p2 = grown(&p1, 1, 9_000);
        let (mut every, mut skipping) = (Deltas::new(), Deltas::new());
        let seen: Vec<(u64, u64)> = [&p0, &p1, &p2].iter().map(|p| sum(&every.next(p))).collect();
        let skipped = [sum(&skipping.next(&p0)), sum(&skipping.next(&p2))];
        let total = |s: &[(u64, u64)]| s.iter().fold((0, 0), |(c, n), x| (c + x.0, n + x.1));
        assert_eq!(total(&seen), total(&skipped));
        assert_eq!(skipped[1], (2, 16_000));
    }

    #[test]
    fn a_row_created_again_counts_from_zero_and_owners_are_rows() {
        let p0 = fixture::profile();
        let mut d = Deltas::with_rows();
        d.next(&p0);
        let mut p1 = p0.clone();
        p1.locks[1].wait = Stats::new(2);
        p1.locks[1].wait.record(500);
        let mut callers = p1.locks[1].callers.to_vec();
        callers[0].wait = Stats::new(1);
        callers[0].wait.record(500);
        p1.locks[1].callers = callers.into();
        p1.locks[1].owners = vec![OwnerProfile {
            kind: OwnerKind::Unknown,
            tid: 0,
            pid: 0,
            comm: String::new(),
            caller: placeholders::OWNER_UNKNOWN.into(),
            stack: Vec::new(),
            asleep_stack: Vec::new(),
            waits: 1,
            wait_caused_ns: 500,
            wait_caused_max_ns: 500,
        }];
        let next = d.next(&p1);
        assert!(next[1].new, "waits went down: the row was dropped and created again");
        assert_eq!((next[1].totals.wait.count, next[1].totals.wait.sum_ns), (1, 500));
        let owner = next[1].rows.iter().find(|(f, _)| f[0] == placeholders::OWNER_UNKNOWN).expect("owner row");
        assert_eq!((owner.1.blame_count, owner.1.blame_ns, owner.1.count), (1, 500, 0));
        d.clear();
        assert!(d.next(&p1).iter().all(|l| l.new), "after clear, everything is new");
    }
}
