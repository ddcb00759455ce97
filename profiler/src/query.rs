//! Which rows, in which order: one filter, sort and top-N for the text
//! report, JSON, CSV, exports and the TUI.

use profiler_common::LockType;

use crate::model::{
    CallerProfile, CgroupLock, CgroupProfile, LockProfile, OwnerProfile, Profile, Stats, TaskProfile, YieldCaller,
    YieldPair,
};

/// Sort key, descending.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Number of contentions.
    Contended,
    /// Total wait time.
    #[default]
    WaitTotal,
    /// Longest wait.
    WaitMax,
    /// Mean wait.
    WaitAvg,
    /// 99th percentile wait.
    WaitP99,
}

impl SortKey {
    /// Every key, in the TUI's `s` order.
    pub const ALL: [SortKey; 5] =
        [SortKey::WaitTotal, SortKey::Contended, SortKey::WaitAvg, SortKey::WaitMax, SortKey::WaitP99];

    /// Stable name, as typed after `--sort`.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Contended => "contended",
            SortKey::WaitTotal => "wait_total",
            SortKey::WaitMax => "wait_max",
            SortKey::WaitAvg => "wait_avg",
            SortKey::WaitP99 => "wait_p99",
        }
    }

    /// The sort value of a set of statistics.
    pub fn value(self, s: &Stats) -> u64 {
        match self {
            SortKey::Contended => s.count(),
            SortKey::WaitTotal => s.total_ns(),
            SortKey::WaitMax => s.max_ns(),
            SortKey::WaitAvg => s.avg_ns(),
            SortKey::WaitP99 => s.quantile_ns(0.99),
        }
    }
}

/// Whether `l` matches a `--lock` filter: its name (`mmap_lock`), slab
/// cache (`&task_struct`), member (`task_struct.pi_lock`), class or hex
/// address.
pub fn lock_matches(l: &LockProfile, filter: &str) -> bool {
    let f = filter.trim();
    if let Some(hex) = f.strip_prefix("0x").or_else(|| f.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).is_ok_and(|a| a == l.addr);
    }
    l.name.as_deref() == Some(f)
        || l.class == f
        || l.field.as_deref() == Some(f)
        || l.slab.as_deref().is_some_and(|s| f.strip_prefix('&') == Some(s))
}

/// Filters, order and cut of a view.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// Sort key (descending).
    pub sort: SortKey,
    /// Keep only the first N rows.
    pub top: Option<usize>,
    /// Only locks matching this name, class or hex address (perf's `-L`).
    pub lock: Option<String>,
    /// Only these lock types (empty: all).
    pub types: Vec<LockType>,
    /// Only rows whose lock name, class, caller or thread name contains
    /// this text, case-insensitively (the TUI's `/`).
    pub text: String,
}

fn contains(hay: &str, needle_lower: &str) -> bool {
    needle_lower.is_empty() || hay.to_lowercase().contains(needle_lower)
}

impl Query {
    fn lock_ok(&self, l: &LockProfile) -> bool {
        self.lock.as_deref().is_none_or(|f| lock_matches(l, f))
            && (self.types.is_empty() || self.types.contains(&l.lock_type))
    }

    fn text_lower(&self) -> String {
        self.text.to_lowercase()
    }

    /// Rows sorted by the key on `stats` (descending), ties broken by `tie`, cut to `top`.
    fn sort_cut<'s, T>(
        &self,
        mut v: Vec<T>,
        stats: impl Fn(&T) -> &'s Stats,
        tie: impl Fn(&T, &T) -> std::cmp::Ordering,
    ) -> Vec<T> {
        v.sort_by(|a, b| self.sort.value(stats(b)).cmp(&self.sort.value(stats(a))).then_with(|| tie(a, b)));
        if let Some(n) = self.top {
            v.truncate(n);
        }
        v
    }

    /// Indices into `p.locks` of the locks shown, filtered, sorted and cut.
    pub fn lock_indices(&self, p: &Profile) -> Vec<usize> {
        let t = self.text_lower();
        let v = (0..p.locks.len())
            .filter(|&i| {
                let l = &p.locks[i];
                self.lock_ok(l)
                    && (contains(l.display_name(), &t)
                        || contains(&l.class, &t)
                        || l.callers.iter().any(|c| contains(&c.caller, &t)))
            })
            .collect();
        let l = |i: &usize| &p.locks[*i];
        self.sort_cut(v, |i| &l(i).wait, |a, b| l(a).addr.cmp(&l(b).addr).then(l(a).mode.cmp(&l(b).mode)))
    }

    /// Locks, filtered, sorted and cut.
    pub fn locks<'a>(&self, p: &'a Profile) -> Vec<&'a LockProfile> {
        self.lock_indices(p).into_iter().map(|i| &p.locks[i]).collect()
    }

    /// (lock, caller) index pairs of the rows shown, filtered, sorted and cut.
    pub fn caller_indices(&self, p: &Profile) -> Vec<(usize, usize)> {
        let t = self.text_lower();
        let v = p
            .locks
            .iter()
            .enumerate()
            .filter(|(_, l)| self.lock_ok(l))
            .flat_map(|(i, l)| (0..l.callers.len()).map(move |j| (i, j)))
            .filter(|&(i, j)| {
                let (l, c) = (&p.locks[i], &p.locks[i].callers[j]);
                contains(l.display_name(), &t) || contains(&l.class, &t) || contains(&c.caller, &t)
            })
            .collect();
        let c = |(i, j): &(usize, usize)| (&p.locks[*i], &p.locks[*i].callers[*j]);
        self.sort_cut(v, |x| &c(x).1.wait, |a, b| c(a).0.addr.cmp(&c(b).0.addr).then(c(a).1.caller.cmp(&c(b).1.caller)))
    }

    /// (lock, caller) rows, filtered, sorted and cut.
    pub fn callers<'a>(&self, p: &'a Profile) -> Vec<(&'a LockProfile, &'a CallerProfile)> {
        self.caller_indices(p).into_iter().map(|(i, j)| (&p.locks[i], &p.locks[i].callers[j])).collect()
    }

    /// (lock, owner) rows: owners of the locks shown, largest caused wait
    /// first (the sort key does not apply: owners carry plain sums), cut.
    pub fn owners<'a>(&self, p: &'a Profile) -> Vec<(&'a LockProfile, &'a OwnerProfile)> {
        let t = self.text_lower();
        let mut v: Vec<(&LockProfile, &OwnerProfile)> = p
            .locks
            .iter()
            .filter(|l| self.lock_ok(l))
            .flat_map(|l| l.owners.iter().map(move |o| (l, o)))
            .filter(|(l, o)| contains(l.display_name(), &t) || contains(&o.comm, &t) || contains(&o.caller, &t))
            .collect();
        v.sort_by(|a, b| {
            b.1.wait_caused_ns.cmp(&a.1.wait_caused_ns).then(a.0.addr.cmp(&b.0.addr)).then(a.1.tid.cmp(&b.1.tid))
        });
        if let Some(n) = self.top {
            v.truncate(n);
        }
        v
    }

    /// Indices into `p.tasks` of the threads shown, filtered by name, sorted and cut.
    pub fn task_indices(&self, p: &Profile) -> Vec<usize> {
        let t = self.text_lower();
        let v = (0..p.tasks.len()).filter(|&i| contains(&p.tasks[i].comm, &t)).collect();
        self.sort_cut(v, |i| &p.tasks[*i].wait, |a, b| p.tasks[*a].tid.cmp(&p.tasks[*b].tid))
    }

    /// Threads, filtered by name, sorted and cut.
    pub fn tasks<'a>(&self, p: &'a Profile) -> Vec<&'a TaskProfile> {
        self.task_indices(p).into_iter().map(|i| &p.tasks[i]).collect()
    }

    /// cgroups, filtered by name or path (and, with a lock filter, to those
    /// that waited on a matching lock), sorted and cut.
    pub fn cgroups<'a>(&self, p: &'a Profile) -> Vec<&'a CgroupProfile> {
        self.cgroup_indices(p).into_iter().map(|i| &p.cgroups[i]).collect()
    }

    /// Indices into `p.cgroups` of the cgroups shown (see [`Query::cgroups`]).
    pub fn cgroup_indices(&self, p: &Profile) -> Vec<usize> {
        let t = self.text_lower();
        let shown: Vec<&LockProfile> = p.locks.iter().filter(|l| self.lock_ok(l)).collect();
        let v = (0..p.cgroups.len())
            .filter(|&i| {
                let c = &p.cgroups[i];
                contains(&c.name, &t) || c.path.as_deref().is_some_and(|path| contains(path, &t))
            })
            .filter(|&i| {
                self.lock.is_none() && self.types.is_empty()
                    || p.cgroups[i].locks.iter().any(|cl| shown.iter().any(|l| l.addr == cl.addr && l.mode == cl.mode))
            })
            .collect();
        self.sort_cut(v, |i| &p.cgroups[*i].wait, |a, b| p.cgroups[*a].id.cmp(&p.cgroups[*b].id))
    }

    /// The locks of cgroup `c` the filters keep.
    pub fn cgroup_locks<'a>(&self, p: &Profile, c: &'a CgroupProfile) -> Vec<&'a CgroupLock> {
        c.locks
            .iter()
            .filter(|cl| {
                self.lock.is_none() && self.types.is_empty()
                    || p.locks.iter().any(|l| l.addr == cl.addr && l.mode == cl.mode && self.lock_ok(l))
            })
            .collect()
    }

    /// `yield_to` call paths, sorted on latency (`contended` = calls) and cut.
    pub fn yield_callers<'a>(&self, p: &'a Profile) -> Vec<&'a YieldCaller> {
        let t = self.text_lower();
        let v = p.yield_to.iter().flat_map(|y| &y.callers).filter(|c| contains(&c.path, &t)).collect();
        self.sort_cut(v, |c| &c.stats.latency, |a, b| a.path.cmp(&b.path))
    }

    /// `yield_to` (yielder, target) pairs, sorted and cut.
    pub fn yield_pairs<'a>(&self, p: &'a Profile) -> Vec<&'a YieldPair> {
        let t = self.text_lower();
        let v = p
            .yield_to
            .iter()
            .flat_map(|y| &y.pairs)
            .filter(|x| contains(&x.comm, &t) || contains(&x.target_comm, &t))
            .collect();
        self.sort_cut(v, |x| &x.stats.latency, |a, b| a.tid.cmp(&b.tid).then(a.target_tid.cmp(&b.target_tid)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn sort_top_and_filters_pick_rows() {
        let p = fixture::profile();
        let q = Query { sort: SortKey::Contended, top: Some(1), ..Default::default() };
        assert_eq!(q.locks(&p).len(), 1);
        assert_eq!(q.locks(&p)[0].name.as_deref(), Some("tasklist_lock"));
        let q = Query { lock: Some("0xffff888004a1b2c0".into()), ..Default::default() };
        assert_eq!(q.locks(&p).len(), 1);
        assert_eq!(q.callers(&p).len(), 1);
        let q = Query { types: vec![LockType::Mutex], ..Default::default() };
        assert!(q.locks(&p).iter().all(|l| l.lock_type == LockType::Mutex));
        let q = Query { text: "RELEASE".into(), ..Default::default() };
        assert_eq!(q.locks(&p).len(), 1, "matches a caller, case-insensitively");
        assert_eq!(q.callers(&p).len(), 1);
        let q = Query { text: "forker".into(), ..Default::default() };
        assert_eq!(q.tasks(&p).len(), 1);
        for k in SortKey::ALL {
            assert!(!k.name().is_empty());
        }
    }

    #[test]
    fn lock_filter_takes_every_name_form() {
        let mut p = fixture::profile();
        let l = &mut p.locks[1];
        l.name = Some("task_struct.pi_lock".into());
        l.name_source = Some(crate::model::NameSource::Btf);
        l.slab = Some("task_struct".into());
        l.field = Some("task_struct.pi_lock".into());
        let l = &p.locks[1];
        for f in ["task_struct.pi_lock", "&task_struct", "0xffff888004a1b2c0", " task_struct.pi_lock "] {
            assert!(lock_matches(l, f), "{f}");
        }
        for f in ["task_struct", "&kmalloc-cg-192", "pi_lock", "0x1"] {
            assert!(!lock_matches(l, f), "{f}");
        }
        assert!(lock_matches(&p.locks[0], "tasklist_lock"));
        assert!(lock_matches(&p.locks[0], "rwlock @ copy_process"), "the class");
    }
}
