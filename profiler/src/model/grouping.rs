//! Lock rows summed into one row per group: per name (`--group-by name`) or
//! per call site (`--group-by site`).
//!
//! By name, like lock_stat's classes: every `mmap_lock` in one row, every
//! `mutex @ anon_pipe_write in &kmalloc-cg-192` in another (rows group under
//! their display name, which is the class when only a generic slab cache is
//! known).
//!
//! By site, like `perf lock contention`'s default rows: one row per class,
//! the lock type and the call site that waits on it most (`futex @
//! PGSemaphoreLock in [shm: /dev/zero (deleted)]`, `rwsem @ vm_mmap_pgoff`,
//! `mutex @ anon_pipe_write in &kmalloc-cg-192`). A user-space lock's row
//! also keeps its process's name (not its pid; the pid when the name is
//! unknown), so one code path of a program run as many processes (each
//! PostgreSQL backend sleeping on its own semaphore) is one row, and another
//! program's is another. The rule is the same for every lock: a name does
//! not change the key, so a named lock (`tasklist_lock` from kallsyms,
//! `mmap_lock` confirmed by the kernel) groups by its class too: the
//! `mmap_lock`s waited for in `vm_mmap_pgoff` sum into one row, those waited
//! for in `__vm_munmap` into another. A name stays on a row when every lock
//! in it has that name.
//!
//! Either way rows also split by type and mode; callers merge by stack, and
//! owners by who held the lock. A summed row says how many locks it sums
//! (`addresses`: a user-space lock is an address in one process) and, for
//! user-space locks, in how many processes (`processes`); `addr` is the
//! busiest lock's, and `pid`, `process`, `name`, `field` and `slab` stay only
//! where every lock in the row shares them.

use std::collections::{BTreeMap, BTreeSet};

use super::{CallerProfile, LockProfile, OwnerProfile, Profile};

/// `p` with its lock rows summed by name, type and mode.
pub fn grouped_by_name(p: &Profile) -> Profile {
    grouped_by(p, |l| (l.display_name().to_string(), l.lock_type as u8, l.mode as u8))
}

/// `p` with its lock rows summed by call site: class, type and mode, and a
/// user-space lock's process name (its pid when the name is unknown).
pub fn grouped_by_site(p: &Profile) -> Profile {
    grouped_by(p, |l| {
        let process = l.pid.map(|pid| l.process.clone().ok_or(pid));
        (process, l.class.clone(), l.lock_type as u8, l.mode as u8)
    })
}

/// A group being summed: the row, and the locks (pid, address) and
/// processes it holds.
struct Group {
    row: LockProfile,
    locks: BTreeSet<(Option<u32>, u64)>,
    pids: BTreeSet<u32>,
    /// The busiest row's contentions so far (its address is the group's).
    busiest: u64,
}

/// `p` with the lock rows of one `key` summed into one.
fn grouped_by<K: Ord>(p: &Profile, key: impl Fn(&LockProfile) -> K) -> Profile {
    use std::collections::btree_map::Entry;
    let mut groups: BTreeMap<K, Group> = BTreeMap::new();
    for l in &p.locks {
        let g = match groups.entry(key(l)) {
            Entry::Vacant(v) => v.insert(Group {
                row: l.clone(),
                locks: BTreeSet::new(),
                pids: BTreeSet::new(),
                busiest: l.wait.count(),
            }),
            Entry::Occupied(o) => {
                let g = o.into_mut();
                merge(&mut g.row, l);
                if l.wait.count() > g.busiest {
                    (g.busiest, g.row.addr) = (l.wait.count(), l.addr);
                }
                g
            }
        };
        g.locks.insert((l.pid, l.addr));
        g.pids.extend(l.pid);
    }
    let mut locks: Vec<LockProfile> = groups
        .into_values()
        .map(|g| {
            let mut l = g.row;
            l.addresses = Some(count(g.locks.len()));
            // Kernel locks live in no process.
            l.processes = (!g.pids.is_empty()).then(|| count(g.pids.len()));
            std::sync::Arc::make_mut(&mut l.callers)
                .sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then_with(|| a.caller.cmp(&b.caller)));
            l.owners.sort_by(|a, b| b.wait_caused_ns.cmp(&a.wait_caused_ns).then(a.tid.cmp(&b.tid)));
            l
        })
        .collect();
    locks.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.addr.cmp(&b.addr)));
    Profile { locks, ..p.clone() }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Adds lock row `l` to the group's row `g`.
fn merge(g: &mut LockProfile, l: &LockProfile) {
    // Set from both sides before the waits merge (a lock without owners
    // becomes one unknown owner of all its waits).
    if !g.owners.is_empty() || !l.owners.is_empty() {
        let mut owners = owners_or_unknown(g);
        for o in owners_or_unknown(l) {
            merge_owner(&mut owners, o);
        }
        g.owners = owners;
    }
    g.wait.merge(&l.wait);
    merge_hold(&mut g.hold, l.hold.as_ref());
    let mut callers = g.callers.to_vec();
    for c in l.callers.iter() {
        match callers.iter_mut().find(|gc| gc.stack == c.stack) {
            Some(gc) => merge_caller(gc, c),
            None => callers.push(c.clone()),
        }
    }
    g.callers = callers.into();
    if g.pid != l.pid {
        g.pid = None;
    }
    if g.process != l.process {
        g.process = None;
    }
    if g.name != l.name {
        (g.name, g.name_source) = (None, None);
    }
    if g.field != l.field {
        g.field = None;
    }
    if g.slab != l.slab {
        g.slab = None;
    }
}

fn merge_hold(into: &mut Option<super::Stats>, add: Option<&super::Stats>) {
    if let Some(h) = add {
        match into {
            Some(gh) => gh.merge(h),
            None => *into = Some(h.clone()),
        }
    }
}

fn merge_caller(gc: &mut CallerProfile, c: &CallerProfile) {
    gc.wait.merge(&c.wait);
    super::merge_shares(&mut gc.cgroups, &c.cgroups);
    merge_hold(&mut gc.hold, c.hold.as_ref());
}

/// `l`'s owners, or, when it has none, one unknown owner of all its waits
/// (so that a summed row's owners still sum to its waits).
fn owners_or_unknown(l: &LockProfile) -> Vec<OwnerProfile> {
    if !l.owners.is_empty() {
        return l.owners.clone();
    }
    vec![OwnerProfile::unknown(l.wait.count(), l.wait.total_ns())]
}

/// Adds `o` to the owner in `owners` that is the same holder in the same
/// stacks, or appends it.
fn merge_owner(owners: &mut Vec<OwnerProfile>, o: OwnerProfile) {
    let same = |a: &OwnerProfile| {
        (a.kind, a.tid, a.pid, &a.caller, &a.stack, &a.asleep_stack)
            == (o.kind, o.tid, o.pid, &o.caller, &o.stack, &o.asleep_stack)
    };
    match owners.iter_mut().find(|a| same(a)) {
        Some(a) => {
            a.waits += o.waits;
            a.wait_caused_ns = a.wait_caused_ns.saturating_add(o.wait_caused_ns);
            a.wait_caused_max_ns = a.wait_caused_max_ns.max(o.wait_caused_max_ns);
        }
        None => owners.push(o),
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{LockMode, LockType};

    use super::*;
    use crate::model::{LOCK_SIGFIG, NameSource, OwnerKind, Stats};

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
            processes: None,
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
    fn the_group_keeps_the_busiest_locks_address_not_the_first_to_pass_a_running_sum() {
        let btf = Some(NameSource::Btf);
        let p = Profile {
            locks: vec![
                lock(0xa, Some("mmap_lock"), btf, "rwsem @ f", &[1, 1, 1]),
                lock(0xb, Some("mmap_lock"), btf, "rwsem @ f", &[1, 1]),
                lock(0xc, Some("mmap_lock"), btf, "rwsem @ f", &[1, 1, 1, 1]),
            ],
            ..Profile::default()
        };
        let g = grouped_by_name(&p);
        assert_eq!((g.locks[0].addr, g.locks[0].wait.count()), (0xc, 9));
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

    const SEM: &str = "futex @ PGSemaphoreLock in [shm: /dev/zero (deleted)]";

    /// A futex of process `pid` (`comm`).
    fn futex(pid: u32, comm: &str, addr: u64, class: &str, waits: &[u64]) -> LockProfile {
        let mut l = lock(addr, None, None, class, waits);
        (l.lock_type, l.mode, l.pid, l.process) = (LockType::Futex, LockMode::Exclusive, Some(pid), Some(comm.into()));
        l
    }

    #[test]
    fn one_code_path_in_many_processes_is_one_site_row() {
        let mut first = futex(8510, "postgres", 0x7ffa_1000, SEM, &[100, 200]);
        first.owners = vec![OwnerProfile {
            kind: OwnerKind::Task,
            tid: 8520,
            pid: 8520,
            comm: "postgres".into(),
            caller: String::new(),
            stack: Vec::new(),
            asleep_stack: Vec::new(),
            waits: 2,
            wait_caused_ns: 300,
            wait_caused_max_ns: 200,
        }];
        let p = Profile {
            locks: vec![
                first,
                futex(8511, "postgres", 0x7ffa_1040, SEM, &[1_000]),
                futex(8512, "postgres", 0x7ffa_1080, SEM, &[5, 7]),
                futex(8513, "postgres", 0x7ffa_2000, "futex @ LWLockAcquire in [shm: /dev/zero (deleted)]", &[9]),
                futex(9000, "pgbouncer", 0x5555_1000, SEM, &[11]),
                lock(0x10, Some("mmap_lock"), Some(NameSource::Btf), "rwsem @ vm_mmap_pgoff", &[3]),
            ],
            ..Profile::default()
        };
        let g = grouped_by_site(&p);
        assert_eq!(g.locks.len(), 4, "{:?}", g.locks.iter().map(|l| &l.class).collect::<Vec<_>>());
        let sem = &g.locks[0];
        assert_eq!(
            (sem.class.as_str(), sem.process.as_deref(), sem.pid, sem.processes, sem.addresses),
            (SEM, Some("postgres"), None, Some(3), Some(3))
        );
        assert_eq!((sem.wait.count(), sem.wait.total_ns()), (5, 1_312), "the three backends' waits summed");
        assert_eq!(sem.addr, 0x7ffa_1000, "the busiest address");
        assert_eq!((sem.callers.len(), sem.callers[0].wait.count()), (1, 5), "callers merge by stack");
        let owned: (u64, u64) =
            sem.owners.iter().map(|o| (o.waits, o.wait_caused_ns)).fold((0, 0), |a, o| (a.0 + o.0, a.1 + o.1));
        assert_eq!(owned, (5, 1_312), "owners still sum to the row's waits");
        assert_eq!(sem.owners[0].kind, OwnerKind::Unknown, "the others' waits are unknown owners'");
        let by = |process: &str, class: &str| {
            g.locks.iter().find(|l| l.process.as_deref() == Some(process) && l.class == class).expect(class)
        };
        let lw = by("postgres", "futex @ LWLockAcquire in [shm: /dev/zero (deleted)]");
        assert_eq!((lw.pid, lw.processes, lw.addresses), (Some(8513), Some(1), Some(1)), "another class");
        let bouncer = by("pgbouncer", SEM);
        assert_eq!(
            (bouncer.pid, bouncer.processes, bouncer.addresses),
            (Some(9000), Some(1), Some(1)),
            "another program"
        );
        let mm = g.locks.iter().find(|l| l.pid.is_none() && l.process.is_none()).expect("the kernel lock");
        assert_eq!((mm.processes, mm.addresses), (None, Some(1)), "kernel locks are in no process");
        assert_eq!(g.contended(), p.contended(), "nothing lost or counted twice");

        // One address in two processes is two locks.
        let p = Profile {
            locks: vec![futex(1, "postgres", 0x7ffa_1000, SEM, &[1]), futex(2, "postgres", 0x7ffa_1000, SEM, &[1])],
            ..Profile::default()
        };
        let g = grouped_by_site(&p);
        assert_eq!((g.locks.len(), g.locks[0].processes, g.locks[0].addresses), (1, Some(2), Some(2)));
    }

    #[test]
    fn kernel_locks_group_by_site_whatever_their_name() {
        let btf = Some(NameSource::Btf);
        let p = Profile {
            locks: vec![
                lock(0x10, Some("mmap_lock"), btf, "rwsem @ vm_mmap_pgoff", &[100, 200]),
                lock(0x20, Some("mmap_lock"), btf, "rwsem @ vm_mmap_pgoff", &[50]),
                lock(0x30, Some("mmap_lock"), btf, "rwsem @ __vm_munmap", &[1_000]),
                lock(0x40, None, None, "rwsem @ b", &[9]),
                lock(0x50, Some("some_sem"), Some(NameSource::Kallsyms), "rwsem @ b", &[7]),
            ],
            ..Profile::default()
        };
        let g = grouped_by_site(&p);
        let rows: Vec<_> = g
            .locks
            .iter()
            .map(|l| (l.class.as_str(), l.name.as_deref(), l.addresses, l.processes, l.wait.count()))
            .collect();
        assert_eq!(
            rows,
            [
                ("rwsem @ __vm_munmap", Some("mmap_lock"), Some(1), None, 1),
                ("rwsem @ vm_mmap_pgoff", Some("mmap_lock"), Some(2), None, 3),
                ("rwsem @ b", None, Some(2), None, 2),
            ],
            "the mmap_locks split by where they were waited for; a name stays where every lock has it"
        );
        assert_eq!(grouped_by_name(&p).locks.len(), 3, "by name: mmap_lock, rwsem @ b, some_sem");
    }

    #[test]
    fn by_name_a_user_lock_row_of_several_processes_has_no_pid() {
        let p = Profile {
            locks: vec![futex(1, "postgres", 0x10, SEM, &[1]), futex(2, "pgbouncer", 0x10, SEM, &[1])],
            ..Profile::default()
        };
        let g = grouped_by_name(&p);
        let l = &g.locks[0];
        assert_eq!(
            (g.locks.len(), l.pid, l.process.as_deref(), l.processes, l.addresses),
            (1, None, None, Some(2), Some(2))
        );
    }
}
