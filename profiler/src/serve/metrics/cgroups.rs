//! The per-cgroup split of the per-lock counters: which cgroups' tasks
//! waited on each lock. Like the locks, cardinality is bounded: the
//! `max_cgroups` cgroups with the most wait recently (decayed) have a
//! `cgroup` label of their own, the others fold into `cgroup="[other]"`,
//! and every profile's growth goes to exactly one series, so the series of
//! a lock add up to its waits (those recorded with a cgroup).

use std::collections::{BTreeMap, HashMap, HashSet};

use profiler_common::{LockMode, LockType};

use super::{DECAY, HYSTERESIS, OTHER};
use crate::model::{LockKey, Profile};

/// A series' labels: cgroup, lock, type, mode.
pub type CgroupSeriesKey = (String, String, LockType, LockMode);

/// Waits and their total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Waits.
    pub count: u64,
    /// Their total, ns.
    pub wait_ns: u64,
}

/// The per-cgroup series.
#[derive(Debug)]
pub struct CgroupSeries {
    max_cgroups: usize,
    /// Cumulative (count, wait) per (lock, cgroup id) in the last profile.
    last: HashMap<(LockKey, u64), Sums>,
    /// Recent wait per cgroup id (decayed).
    scores: HashMap<u64, f64>,
    /// cgroups with a label of their own: id -> name.
    named: HashMap<u64, String>,
    /// The counters.
    pub series: BTreeMap<CgroupSeriesKey, Sums>,
}

impl CgroupSeries {
    /// At most `max_cgroups` cgroups get series of their own.
    pub fn new(max_cgroups: usize) -> CgroupSeries {
        CgroupSeries {
            max_cgroups,
            last: HashMap::new(),
            scores: HashMap::new(),
            named: HashMap::new(),
            series: BTreeMap::new(),
        }
    }

    /// cgroups with a label of their own now.
    pub fn named(&self) -> usize {
        self.named.len()
    }

    /// Folds a new profile in; `lock_label` is the `lock` label each lock's
    /// growth goes to (its own series' name, or `[other]`).
    pub fn update(&mut self, p: &Profile, lock_label: impl Fn(&LockKey) -> String) {
        let mut now: HashMap<(LockKey, u64), Sums> = HashMap::new();
        for c in &p.cgroups {
            for l in &c.locks {
                let key = LockKey { addr: l.addr, lock_type: l.lock_type, mode: l.mode, pid: l.pid.unwrap_or(0) };
                now.insert((key, c.id), Sums { count: l.count, wait_ns: l.wait_ns });
            }
        }
        let mut grew: Vec<((LockKey, u64), Sums)> = Vec::new();
        let mut wait_by_cgroup: HashMap<u64, u64> = HashMap::new();
        for (k, s) in &now {
            let last = self.last.get(k).copied().unwrap_or_default();
            // A row that shrank was dropped and created again: all of it is new.
            let d = if s.count < last.count || s.wait_ns < last.wait_ns {
                *s
            } else {
                Sums { count: s.count - last.count, wait_ns: s.wait_ns - last.wait_ns }
            };
            if d.count > 0 || d.wait_ns > 0 {
                grew.push((*k, d));
                *wait_by_cgroup.entry(k.1).or_default() += d.wait_ns;
            }
        }
        self.last = now;
        let ids: HashSet<u64> = p.cgroups.iter().map(|c| c.id).collect();
        self.scores.retain(|id, _| ids.contains(id));
        for id in &ids {
            let s = self.scores.entry(*id).or_default();
            *s = *s * DECAY + wait_by_cgroup.get(id).copied().unwrap_or(0) as f64;
        }
        self.select(p);
        for ((lock, id), d) in grew {
            let cgroup = self.named.get(&id).cloned().unwrap_or_else(|| OTHER.to_string());
            let s = self.series.entry((cgroup, lock_label(&lock), lock.lock_type, lock.mode)).or_default();
            s.count += d.count;
            s.wait_ns = s.wait_ns.saturating_add(d.wait_ns);
        }
    }

    /// The top cgroups by score get labels, incumbents kept unless clearly
    /// beaten; a cgroup that loses its label loses its series.
    fn select(&mut self, p: &Profile) {
        let score = |id: &u64| {
            let s = self.scores.get(id).copied().unwrap_or(0.0);
            if self.named.contains_key(id) { s * HYSTERESIS } else { s }
        };
        let mut ranked: Vec<(f64, u64, &str)> =
            p.cgroups.iter().map(|c| (score(&c.id), c.id, c.name.as_str())).collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let top: HashMap<u64, String> = ranked
            .into_iter()
            .filter(|(s, id, _)| *s > 0.0 || self.named.contains_key(id))
            .take(self.max_cgroups)
            .map(|(_, id, name)| (id, self.named.get(&id).cloned().unwrap_or_else(|| name.to_string())))
            .collect();
        let gone: HashSet<String> =
            self.named.iter().filter(|(id, _)| !top.contains_key(id)).map(|(_, n)| n.clone()).collect();
        let kept: HashSet<&String> = top.values().collect();
        self.series.retain(|k, _| !gone.contains(&k.0) || kept.contains(&k.0));
        self.named = top;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CgroupLock, CgroupProfile, LOCK_SIGFIG, Stats};

    fn profile(rows: &[(u64, &str, u64, u64, u64)]) -> Profile {
        let mut p = Profile::default();
        for &(id, name, addr, count, wait_ns) in rows {
            let lock = CgroupLock {
                lock: format!("lock{addr:x}"),
                addr,
                lock_type: LockType::Mutex,
                mode: LockMode::Exclusive,
                pid: None,
                count,
                wait_ns,
                max_ns: wait_ns,
                caller: String::new(),
                user_caller: None,
            };
            match p.cgroups.iter_mut().find(|c| c.id == id) {
                Some(c) => c.locks.push(lock),
                None => p.cgroups.push(CgroupProfile {
                    id,
                    name: name.into(),
                    path: Some(format!("/{name}")),
                    wait: Stats::new(LOCK_SIGFIG),
                    locks: vec![lock],
                }),
            }
        }
        p
    }

    fn sum(s: &CgroupSeries, lock: &str) -> Sums {
        s.series
            .iter()
            .filter(|(k, _)| k.1 == lock)
            .fold(Sums::default(), |a, (_, v)| Sums { count: a.count + v.count, wait_ns: a.wait_ns + v.wait_ns })
    }

    #[test]
    fn cgroups_past_the_cap_fold_into_other_and_sums_stay_exact() {
        let mut s = CgroupSeries::new(2);
        let label = |k: &LockKey| format!("lock{:x}", k.addr);
        s.update(
            &profile(&[(10, "a.service", 1, 5, 500), (11, "b.service", 1, 3, 300), (12, "c.service", 1, 1, 10)]),
            label,
        );
        assert_eq!(s.named(), 2);
        assert_eq!(sum(&s, "lock1"), Sums { count: 9, wait_ns: 810 });
        let other: Vec<_> = s.series.keys().filter(|k| k.0 == OTHER).collect();
        assert_eq!(other.len(), 1, "the smallest cgroup folds into [other]: {:?}", s.series);
        // Growth only: the next profile adds 1 wait of 100 ns to a.service.
        s.update(
            &profile(&[(10, "a.service", 1, 6, 600), (11, "b.service", 1, 3, 300), (12, "c.service", 1, 1, 10)]),
            label,
        );
        assert_eq!(sum(&s, "lock1"), Sums { count: 10, wait_ns: 910 });
        assert_eq!(
            s.series[&("a.service".to_string(), "lock1".to_string(), LockType::Mutex, LockMode::Exclusive)].count,
            6
        );
    }

    #[test]
    fn a_cgroup_that_goes_away_loses_its_series_and_comes_back_whole() {
        let mut s = CgroupSeries::new(5);
        let label = |_: &LockKey| "l".to_string();
        s.update(&profile(&[(10, "a", 1, 5, 500)]), label);
        assert_eq!(sum(&s, "l"), Sums { count: 5, wait_ns: 500 });
        s.update(&profile(&[]), label);
        assert!(s.series.is_empty(), "a vanished cgroup's series stops");
        // Its rows aged out and came back smaller: all of it is new growth.
        s.update(&profile(&[(10, "a", 1, 2, 200)]), label);
        assert_eq!(sum(&s, "l"), Sums { count: 2, wait_ns: 200 });
    }
}
