//! Snapshot -> symbolized [`Profile`].

use std::collections::BTreeMap;

use crate::{
    model::{CallerProfile, LockProfile, Meta, Profile, SlowWait, Stats, TaskProfile},
    symbols::{Resolver, StackSource, name_lock},
};

use super::aggregator::{OVERFLOW_TID, Snapshot};

/// Resolves stacks and names locks, producing a profile sorted by total wait.
pub fn to_profile<S: StackSource>(snap: &Snapshot, resolver: &mut Resolver<S>, mut meta: Meta) -> Profile {
    meta.events = snap.events;
    for (name, n) in [
        ("lock_keys_overflow", snap.overflow.locks),
        ("caller_keys_overflow", snap.overflow.callers),
        ("task_keys_overflow", snap.overflow.tasks),
    ] {
        meta.drops.insert(name.to_string(), n);
    }

    let mut locks = Vec::with_capacity(snap.locks.len());
    for (key, agg) in &snap.locks {
        // Callers with the same symbolized stack are merged.
        let mut by_stack: BTreeMap<Vec<String>, CallerProfile> = BTreeMap::new();
        let mut caller_fns: BTreeMap<String, u64> = BTreeMap::new();
        for (sid, stats) in &agg.callers {
            let rs = resolver.stack(*sid);
            *caller_fns.entry(rs.caller_fn.clone()).or_default() += stats.count();
            let group_key = if rs.frames.is_empty() { vec![rs.caller.clone()] } else { rs.frames.clone() };
            let hold = agg.hold_callers.get(sid);
            by_stack
                .entry(group_key)
                .and_modify(|c| {
                    c.wait.merge(stats);
                    if let Some(h) = hold {
                        c.hold.get_or_insert_with(|| Stats::new(h.sigfig_of())).merge(h);
                    }
                })
                .or_insert_with(|| CallerProfile {
                    caller: rs.caller.clone(),
                    stack: rs.frames.clone(),
                    wait: stats.clone(),
                    hold: hold.cloned(),
                });
        }
        let mut callers: Vec<CallerProfile> = by_stack.into_values().collect();
        callers.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then_with(|| a.caller.cmp(&b.caller)));
        let caller_fns: Vec<(String, u64)> = caller_fns.into_iter().collect();
        let named = name_lock(key.addr, key.lock_type, key.mode, &caller_fns, resolver.kallsyms());
        let (name, name_source, class) = if key.addr == 0 {
            (None, None, "[other locks: key limit reached]".to_string())
        } else {
            (named.name, named.source, named.class)
        };
        locks.push(LockProfile {
            addr: key.addr,
            lock_type: key.lock_type,
            mode: key.mode,
            name,
            name_source,
            class,
            wait: agg.wait.clone(),
            hold: agg.hold.clone(),
            callers,
        });
    }
    locks.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.addr.cmp(&b.addr)));

    let mut tasks: Vec<TaskProfile> = snap
        .tasks
        .iter()
        .map(|(tid, t)| TaskProfile { tid: *tid, tgid: t.tgid, comm: comm_str(&t.comm), wait: t.wait.clone() })
        .collect();
    tasks.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.tid.cmp(&b.tid)));
    debug_assert!(tasks.iter().filter(|t| t.tid == OVERFLOW_TID).count() <= 1);

    let slowest = snap
        .slowest
        .iter()
        .map(|ev| {
            let key = super::LockKey::of(ev);
            let lock = locks
                .iter()
                .find(|l| l.addr == key.addr && l.lock_type == key.lock_type && l.mode == key.mode)
                .map(|l| l.display_name().to_string())
                .unwrap_or_else(|| format!("{:#x}", key.addr));
            let rs = resolver.stack(ev.stack_id);
            SlowWait {
                wait_ns: ev.wait_ns,
                end_monotonic_ns: ev.end_ns,
                addr: ev.lock_addr,
                lock_type: key.lock_type,
                mode: key.mode,
                lock,
                tid: ev.tid,
                tgid: ev.tgid,
                comm: comm_str(&ev.comm),
                caller: rs.caller.clone(),
                stack: rs.frames.clone(),
            }
        })
        .collect();

    Profile { meta, locks, tasks, slowest }
}

/// A NUL-padded kernel comm as a string.
pub fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Sum of a set of statistics (used by views that merge rows).
pub fn merged<'a>(sigfig: u8, it: impl IntoIterator<Item = &'a Stats>) -> Stats {
    let mut s = Stats::new(sigfig);
    for x in it {
        s.merge(x);
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use profiler_common::lcb;

    use super::*;
    use crate::{
        model::NameSource,
        pipeline::aggregator::{Aggregator, Limits, tests::ev},
        symbols::Kallsyms,
    };

    const KS: &str = "\
ffffffff81200000 T __mutex_lock.constprop.0
ffffffff816e4c40 t anon_pipe_write
ffffffff816e5000 T vfs_write
ffffffff8135d6d0 T copy_process
ffffffff81365410 T release_task
ffffffff8226e870 T __lock_text_start
ffffffff8226fb60 T queued_write_lock_slowpath
ffffffff822702f1 T __lock_text_end
";

    #[test]
    fn profile_names_locks_and_merges_identical_stacks() {
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks: HashMap<u32, Vec<u64>> = HashMap::from([
            (1, vec![0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004]),
            (2, vec![0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004]),
            (3, vec![0xffffffff8226fb70, 0xffffffff8135d700]),
            (4, vec![0xffffffff8226fb70, 0xffffffff81365420]),
        ]);
        let mut agg = Aggregator::new(Limits::default());
        agg.ingest(&ev(0xffff_8880_0000_1000, lcb::MUTEX, 4000, 100, 1));
        agg.ingest(&ev(0xffff_8880_0000_1000, lcb::MUTEX, 6000, 101, 2));
        agg.ingest(&ev(0xffff_8880_0000_2000, lcb::SPIN | lcb::WRITE, 9000, 102, 3));
        agg.ingest(&ev(0xffff_8880_0000_2000, lcb::SPIN | lcb::WRITE, 2000, 103, 4));
        let mut r = Resolver::new(ks, stacks);
        let p = to_profile(&agg.snapshot(), &mut r, Meta::default());

        assert_eq!(p.meta.events, 4);
        assert_eq!(p.locks.len(), 2);
        let tl = &p.locks[0];
        assert_eq!(tl.wait.total_ns(), 11000);
        assert_eq!(tl.name.as_deref(), Some("tasklist_lock"));
        assert_eq!(tl.name_source, Some(NameSource::Inferred));
        assert_eq!(tl.callers[0].caller, "copy_process+0x30");
        assert_eq!(tl.callers[1].caller, "release_task+0x10");

        let pipe = &p.locks[1];
        assert_eq!(pipe.name, None);
        assert_eq!(pipe.class, "mutex @ anon_pipe_write");
        assert_eq!(pipe.callers.len(), 1, "stacks 1 and 2 are identical once symbolized");
        assert_eq!(pipe.callers[0].wait.count(), 2);
        assert_eq!(pipe.callers[0].stack, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10", "vfs_write+0x4"]);
        assert_eq!(p.tasks.len(), 4);
        assert_eq!(p.tasks[0].comm, "task102");
        assert_eq!(p.meta.drops["lock_keys_overflow"], 0);
    }

    #[test]
    fn comm_is_trimmed_at_nul() {
        assert_eq!(comm_str(b"bash\0\0\0\0\0\0\0\0\0\0\0\0"), "bash");
        assert_eq!(comm_str(b"0123456789abcdef"), "0123456789abcdef");
    }
}
