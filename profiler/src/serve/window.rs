//! The rolling window behind `?seconds=N`: what each profile added, per
//! (lock, caller stack), kept for `--window` seconds and at most
//! `max_entries` rows in all (beyond that, a profile's new rows fold into
//! one `[window full]` row per lock, counted).

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use super::{Values, metrics::Totals};
use crate::model::{CallerProfile, LockKey, LockProfile, OwnerProfile, Profile, placeholders};

/// What the window knows of a lock: its labels.
#[derive(Debug)]
pub struct LockInfo {
    /// Display name.
    pub name: String,
    /// Type label (`rwlock:W`).
    pub type_label: String,
    /// Address.
    pub addr: u64,
}

/// One (lock, stack) row of one profile's growth.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The lock.
    pub lock: Arc<LockInfo>,
    /// Frames, innermost first (or the caller alone).
    pub stack: Arc<[String]>,
    /// The growth.
    pub values: Values,
}

#[derive(Debug)]
struct Slot {
    at: Instant,
    entries: Vec<Entry>,
}

/// A lock's last cumulative figures, per caller stack.
#[derive(Debug)]
struct LastLock {
    info: Arc<LockInfo>,
    totals: Totals,
    callers: HashMap<Arc<[String]>, Values>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Window {
    length: Duration,
    max_entries: usize,
    entries: usize,
    slots: VecDeque<Slot>,
    last: HashMap<LockKey, LastLock>,
    folded: u64,
}

/// A caller's cumulative figures.
pub fn caller_values(c: &CallerProfile) -> Values {
    Values {
        count: c.wait.count(),
        wait_ns: c.wait.total_ns(),
        hold_count: c.hold.as_ref().map_or(0, |h| h.count()),
        hold_ns: c.hold.as_ref().map_or(0, |h| h.total_ns()),
        ..Values::default()
    }
}

/// An owner row's figures: the waits it caused.
pub fn owner_values(o: &OwnerProfile) -> Values {
    Values { blame_count: o.waits, blame_ns: o.wait_caused_ns, ..Values::default() }
}

/// The frames an owner row is keyed and drawn by ([`OwnerProfile::frames`]).
pub fn owner_frames(o: &OwnerProfile) -> Arc<[String]> {
    o.frames().into()
}

/// The frames a caller is keyed and drawn by ([`CallerProfile::frames`]).
pub fn caller_frames(c: &CallerProfile) -> &[String] {
    c.frames()
}

fn lock_info(l: &LockProfile) -> Arc<LockInfo> {
    Arc::new(LockInfo { name: l.display_name().to_string(), type_label: l.type_label(), addr: l.addr })
}

impl Window {
    /// A window of `length` holding at most `max_entries` rows.
    pub fn new(length: Duration, max_entries: usize) -> Window {
        Window { length, max_entries, entries: 0, slots: VecDeque::new(), last: HashMap::new(), folded: 0 }
    }

    /// Its length.
    pub fn length(&self) -> Duration {
        self.length
    }

    /// Rows folded into `[window full]` rows so far.
    pub fn folded(&self) -> u64 {
        self.folded
    }

    /// Rows held.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Records what `p` added since the previous profile, at `now`.
    pub fn update(&mut self, p: &Profile, now: Instant) {
        while self.slots.front().is_some_and(|s| now.saturating_duration_since(s.at) >= self.length) {
            if let Some(s) = self.slots.pop_front() {
                self.entries -= s.entries.len();
            }
        }
        let mut entries = Vec::new();
        let mut full: HashMap<LockKey, Values> = HashMap::new();
        let mut last = HashMap::with_capacity(p.locks.len());
        for l in &p.locks {
            let id = l.key();
            let totals = Totals::of(l);
            let (info, mut before) = match self.last.remove(&id) {
                // Unchanged lock: nothing to add, its callers neither.
                Some(prev) if prev.totals == totals => {
                    last.insert(id, prev);
                    continue;
                }
                Some(prev) if prev.totals.wait.count <= totals.wait.count => (prev.info, prev.callers),
                _ => (lock_info(l), HashMap::new()),
            };
            let mut callers = HashMap::with_capacity(l.callers.len() + l.owners.len());
            let mut keep = |key: Arc<[String]>, now_v: Values, d: Values| {
                if !d.is_zero() {
                    if self.entries + entries.len() < self.max_entries {
                        entries.push(Entry { lock: info.clone(), stack: key.clone(), values: d });
                    } else {
                        self.folded += 1;
                        full.entry(id).or_default().add(&d);
                    }
                }
                callers.insert(key, now_v);
            };
            for c in l.callers.iter() {
                let frames = c.frames();
                let now_v = caller_values(c);
                let (key, d) = match before.remove_entry(frames) {
                    Some((k, was)) => (k, now_v.since(&was)),
                    // Shares the profile's frames (and so the symbol cache's).
                    None if !c.stack.is_empty() => (c.stack.clone(), now_v),
                    None => (Arc::from(frames), now_v),
                };
                keep(key, now_v, d);
            }
            // Owners of one comm and acquire stack share their frames: one row.
            let mut owners: HashMap<Arc<[String]>, Values> = HashMap::new();
            for o in &l.owners {
                owners.entry(owner_frames(o)).or_default().add(&owner_values(o));
            }
            for (frames, now_v) in owners {
                let (key, d) = match before.remove_entry(&frames[..]) {
                    Some((k, was)) => (k, now_v.since(&was)),
                    None => (frames, now_v),
                };
                keep(key, now_v, d);
            }
            if let Some(v) = full.remove(&id) {
                entries.push(Entry {
                    lock: info.clone(),
                    stack: Arc::from([placeholders::WINDOW_FULL.to_string()]),
                    values: v,
                });
            }
            last.insert(id, LastLock { info, totals, callers });
        }
        self.last = last;
        self.entries += entries.len();
        if !entries.is_empty() {
            self.slots.push_back(Slot { at: now, entries });
        }
    }

    /// The rows added within `seconds` before `now`, merged by (lock, stack).
    pub fn last(&self, seconds: Duration, now: Instant) -> Vec<Entry> {
        let mut merged: HashMap<(u64, String, Arc<[String]>), Entry> = HashMap::new();
        for s in self.slots.iter().filter(|s| now.saturating_duration_since(s.at) < seconds) {
            for e in &s.entries {
                merged
                    .entry((e.lock.addr, e.lock.type_label.clone(), e.stack.clone()))
                    .and_modify(|m| m.values.add(&e.values))
                    .or_insert_with(|| e.clone());
            }
        }
        let mut out: Vec<Entry> = merged.into_values().collect();
        out.sort_by(|a, b| b.values.wait_ns.cmp(&a.values.wait_ns).then_with(|| a.stack.cmp(&b.stack)));
        out
    }
}

#[cfg(test)]
mod tests;
