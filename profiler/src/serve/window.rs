//! The rolling window behind `?seconds=N`: what each profile added, per
//! (lock, caller stack), kept for `--window` seconds and at most
//! `max_entries` rows in all (beyond that, a profile's new rows fold into
//! one `[window full]` row per lock, counted).

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use super::Values;
use crate::model::{CallerProfile, LockKey, LockProfile, OwnerProfile, Profile, placeholders};
use crate::pipeline::delta::Deltas;

/// What the window knows of a lock: its labels.
#[derive(Debug)]
pub struct LockInfo {
    /// Display name.
    pub name: String,
    /// Type label (`rwlock:W`).
    pub type_label: String,
    /// Address.
    pub addr: u64,
    /// The lock row.
    pub key: LockKey,
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

/// See the module documentation.
#[derive(Debug)]
pub struct Window {
    length: Duration,
    max_entries: usize,
    entries: usize,
    slots: VecDeque<Slot>,
    /// What each profile added, per (lock, frames).
    deltas: Deltas,
    /// The labels of each lock of the last profile, fixed when it appeared.
    infos: HashMap<LockKey, Arc<LockInfo>>,
    folded: u64,
}

/// A caller's cumulative figures ([`Values::of_caller`]).
pub fn caller_values(c: &CallerProfile) -> Values {
    Values::of_caller(c)
}

/// An owner row's figures ([`Values::of_owner`]).
pub fn owner_values(o: &OwnerProfile) -> Values {
    Values::of_owner(o)
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
    Arc::new(LockInfo { name: l.display_name().to_string(), type_label: l.type_label(), addr: l.addr, key: l.key() })
}

impl Window {
    /// A window of `length` holding at most `max_entries` rows.
    pub fn new(length: Duration, max_entries: usize) -> Window {
        Window {
            length,
            max_entries,
            entries: 0,
            slots: VecDeque::new(),
            deltas: Deltas::with_rows(),
            infos: HashMap::new(),
            folded: 0,
        }
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
        let mut infos = HashMap::with_capacity(p.locks.len());
        for d in self.deltas.next(p) {
            let info = match self.infos.remove(&d.key) {
                Some(info) if !d.new => info,
                _ => lock_info(&p.locks[d.index]),
            };
            let mut full = Values::default();
            for (stack, values) in d.rows {
                if self.entries + entries.len() < self.max_entries {
                    entries.push(Entry { lock: info.clone(), stack, values });
                } else {
                    self.folded += 1;
                    full.add(&values);
                }
            }
            if !full.is_zero() {
                let stack = Arc::from([placeholders::WINDOW_FULL.to_string()]);
                entries.push(Entry { lock: info.clone(), stack, values: full });
            }
            infos.insert(d.key, info);
        }
        self.infos = infos;
        self.entries += entries.len();
        if !entries.is_empty() {
            self.slots.push_back(Slot { at: now, entries });
        }
    }

    /// The rows added within `seconds` before `now`, merged by (lock, stack).
    pub fn last(&self, seconds: Duration, now: Instant) -> Vec<Entry> {
        let mut merged: HashMap<(LockKey, Arc<[String]>), Entry> = HashMap::new();
        for s in self.slots.iter().filter(|s| now.saturating_duration_since(s.at) < seconds) {
            for e in &s.entries {
                merged
                    .entry((e.lock.key, e.stack.clone()))
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
