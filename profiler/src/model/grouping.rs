//! Locks of one name summed, like lock_stat's classes (`--group-by name`):
//! every `mmap_lock` in one row, every `mutex @ anon_pipe_write in
//! &kmalloc-cg-192` in another (rows group under their display name, which
//! is the class when only a generic slab cache is known). Rows of one name,
//! type and mode merge; callers merge by stack.

use std::collections::BTreeMap;

use super::{LockProfile, Profile};

/// `p` with its lock rows summed by name, type and mode.
pub fn grouped_by_name(p: &Profile) -> Profile {
    let mut groups: BTreeMap<(String, u8, u8), LockProfile> = BTreeMap::new();
    for l in &p.locks {
        let key = (l.display_name().to_string(), l.lock_type as u8, l.mode as u8);
        match groups.get_mut(&key) {
            None => {
                let mut g = l.clone();
                g.addresses = Some(1);
                groups.insert(key, g);
            }
            Some(g) => {
                if l.wait.count() > g.wait.count() {
                    g.addr = l.addr;
                }
                g.addresses = Some(g.addresses.unwrap_or(1) + 1);
                g.wait.merge(&l.wait);
                if let Some(h) = &l.hold {
                    match &mut g.hold {
                        Some(gh) => gh.merge(h),
                        None => g.hold = Some(h.clone()),
                    }
                }
                let mut callers = g.callers.to_vec();
                for c in l.callers.iter() {
                    match callers.iter_mut().find(|gc| gc.stack == c.stack) {
                        Some(gc) => {
                            gc.wait.merge(&c.wait);
                            super::merge_shares(&mut gc.cgroups, &c.cgroups);
                            if let Some(h) = &c.hold {
                                match &mut gc.hold {
                                    Some(gh) => gh.merge(h),
                                    None => gc.hold = Some(h.clone()),
                                }
                            }
                        }
                        None => callers.push(c.clone()),
                    }
                }
                g.callers = callers.into();
                if g.slab != l.slab {
                    g.slab = None;
                }
            }
        }
    }
    let mut locks: Vec<LockProfile> = groups.into_values().collect();
    for g in &mut locks {
        std::sync::Arc::make_mut(&mut g.callers)
            .sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then_with(|| a.caller.cmp(&b.caller)));
    }
    locks.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.addr.cmp(&b.addr)));
    Profile { locks, ..p.clone() }
}

#[cfg(test)]
mod tests {
    use profiler_common::{LockMode, LockType};

    use super::*;
    use crate::model::{CallerProfile, LOCK_SIGFIG, NameSource, Stats};

    fn lock(addr: u64, name: Option<&str>, source: Option<NameSource>, class: &str, waits: &[u64]) -> LockProfile {
        let mut s = Stats::new(LOCK_SIGFIG);
        waits.iter().for_each(|w| s.record(*w));
        LockProfile {
            addr,
            lock_type: LockType::Rwsem,
            mode: LockMode::Write,
            pid: None,
            process: None,
            name: name.map(str::to_string),
            name_source: source,
            class: class.into(),
            slab: None,
            field: None,
            addresses: None,
            owners: Vec::new(),
            rt_base: None,
            wait: s.clone(),
            hold: None,
            callers: vec![CallerProfile {
                caller: "f+0x1".into(),
                stack: vec!["f+0x1".into()].into(),
                wait: s,
                hold: None,
                cgroups: Vec::new(),
                user_caller: None,
                user: None,
            }]
            .into(),
        }
    }

    #[test]
    fn locks_of_one_name_sum_and_kmalloc_locks_group_by_class() {
        let btf = Some(NameSource::Btf);
        let p = Profile {
            locks: vec![
                lock(0x10, Some("mmap_lock"), btf, "rwsem @ vm_mmap_pgoff", &[100, 200]),
                lock(0x20, Some("mmap_lock"), btf, "rwsem @ __vm_munmap", &[1_000]),
                lock(0x30, Some("&kmalloc-cg-192"), btf, "rwsem @ a in &kmalloc-cg-192", &[5]),
                lock(0x40, Some("&kmalloc-cg-192"), btf, "rwsem @ b in &kmalloc-cg-192", &[7]),
                lock(0x50, None, None, "rwsem @ b", &[9]),
            ],
            ..Profile::default()
        };
        let g = grouped_by_name(&p);
        assert_eq!(g.locks.len(), 4);
        let mm = &g.locks[0];
        assert_eq!(
            (mm.name.as_deref(), mm.addresses, mm.wait.count(), mm.wait.total_ns()),
            (Some("mmap_lock"), Some(2), 3, 1_300)
        );
        assert_eq!(mm.addr, 0x10, "the busiest address");
        assert_eq!(mm.callers.len(), 1, "callers merge by stack");
        assert_eq!(mm.callers[0].wait.count(), 3);
        assert!(
            g.locks.iter().filter(|l| l.name.as_deref() == Some("&kmalloc-cg-192")).all(|l| l.addresses == Some(1))
        );
        let total: u64 = g.locks.iter().map(|l| l.wait.count()).sum();
        assert_eq!(total, 6, "nothing lost or counted twice");
    }
}
