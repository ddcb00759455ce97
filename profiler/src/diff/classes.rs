//! Names for the locks that have none, stable across recordings.
//!
//! A lock without a name is known by its class, `type @ top caller`, and its
//! top caller can change from one recording to the next where two callers
//! are close: a pipe's mutex is `mutex @ anon_pipe_write` in one round and
//! `mutex @ anon_pipe_read` in the next. Matched by class alone, one lock
//! would become two rows, each missing from half the rounds. So the unnamed
//! locks of every recording compared are grouped by type, mode, slab cache
//! (and process, for user-space locks), and joined when they share a main
//! caller (one with at least a tenth of the lock's waits); each group is
//! named after its busiest caller over all of them.
//!
//! A name lockprof inferred from a lock's callers (`css_set_lock`,
//! `tasklist_lock`) may be missing in a round where too few waits were seen
//! to infer it: the lock then shows as its class (`spinlock @ cgroup_exit`).
//! Inferred locks join the groups too, and a group holding one takes its
//! name (two different inferred names never join).

use std::collections::{BTreeMap, HashMap};

use super::side::caller_key_name;
use crate::model::{LockProfile, NameSource, Profile, mode_name, type_name};

/// A caller is a lock's main caller with at least this share of its waits.
const MAIN_SHARE: f64 = 0.1;

/// Whether `l` is known by its class only.
fn unnamed(l: &LockProfile) -> bool {
    l.display_name() == l.class && l.addr != 0
}

/// The name lockprof inferred for `l`, if that is how it is named.
fn inferred(l: &LockProfile) -> Option<&str> {
    (l.name_source == Some(NameSource::Inferred)).then_some(l.name.as_deref()).flatten()
}

/// The class's head (`mutex`) and ` in &slab` tail, and what else must
/// match for two unnamed locks to be one class: type, mode, the process of a
/// user-space lock.
fn group_of(l: &LockProfile) -> (String, String, String) {
    let tail = l.class.find(" in &").map_or("", |i| &l.class[i..]);
    let head = l.class.split(" @ ").next().unwrap_or(type_name(l.lock_type));
    let group = format!(
        "{head}\u{0}{tail}\u{0}{}\u{0}{}\u{0}{}",
        type_name(l.lock_type),
        mode_name(l.mode),
        l.process.as_deref().unwrap_or("")
    );
    (head.to_string(), tail.to_string(), group)
}

/// Caller functions of `l` and their waits, placeholders left out.
fn callers(l: &LockProfile) -> BTreeMap<String, u64> {
    let mut by_fn: BTreeMap<String, u64> = BTreeMap::new();
    for c in l.callers.iter().filter(|c| !c.caller.starts_with('[')) {
        *by_fn.entry(caller_key_name(&c.caller)).or_default() += c.wait.count();
    }
    by_fn
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// The name each unnamed lock is matched by, keyed by (recording, lock
/// index); locks with a name are not in it.
#[derive(Debug, Default)]
pub struct Classes(HashMap<(usize, usize), String>);

impl Classes {
    /// Groups the unnamed locks of `recordings`.
    pub fn of<'p>(recordings: impl IntoIterator<Item = &'p Profile>) -> Classes {
        struct Node {
            at: (usize, usize),
            head: String,
            tail: String,
            group: String,
            callers: BTreeMap<String, u64>,
        }
        let mut nodes: Vec<Node> = Vec::new();
        // The inferred name of each component's root, if it has one.
        let mut named: Vec<Option<String>> = Vec::new();
        for (ri, p) in recordings.into_iter().enumerate() {
            for (li, l) in p.locks.iter().enumerate().filter(|(_, l)| unnamed(l) || inferred(l).is_some()) {
                let (head, tail, group) = group_of(l);
                nodes.push(Node { at: (ri, li), head, tail, group, callers: callers(l) });
                named.push(inferred(l).map(str::to_string));
            }
        }
        // Keyed by the group and a main caller: the first node seen with it.
        let mut parent: Vec<usize> = (0..nodes.len()).collect();
        let mut first: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let total: u64 = n.callers.values().sum();
            let top = n.callers.iter().max_by_key(|(f, c)| (**c, std::cmp::Reverse((*f).clone()))).map(|(f, _)| f);
            let main = n.callers.iter().filter(|(_, c)| **c as f64 >= MAIN_SHARE * total as f64).map(|(f, _)| f);
            for f in main.chain(top) {
                match first.get(&(n.group.as_str(), f.as_str())) {
                    Some(&j) => {
                        let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                        match (&named[a], &named[b]) {
                            (Some(x), Some(y)) if x != y => {}
                            _ => {
                                named[b] = named[b].take().or_else(|| named[a].take());
                                parent[a] = b;
                            }
                        }
                    }
                    None => {
                        first.insert((n.group.as_str(), f.as_str()), i);
                    }
                }
            }
        }
        // Each component is named after its busiest caller over all its locks.
        let mut waits: HashMap<usize, BTreeMap<&str, u64>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let root = find(&mut parent, i);
            let w = waits.entry(root).or_default();
            for (f, c) in &n.callers {
                *w.entry(f.as_str()).or_default() += c;
            }
        }
        let mut names = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let root = find(&mut parent, i);
            if let Some(name) = &named[root] {
                names.insert(n.at, name.clone());
                continue;
            }
            let busiest = waits.get(&root).and_then(|w| w.iter().max_by_key(|(f, c)| (**c, std::cmp::Reverse(**f))));
            if let Some((f, _)) = busiest {
                names.insert(n.at, format!("{} @ {f}{}", n.head, n.tail));
            }
        }
        Classes(names)
    }

    /// The name recording `recording`'s lock `lock` is matched by, if it has none of its own.
    pub fn name(&self, recording: usize, lock: usize) -> Option<&str> {
        self.0.get(&(recording, lock)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    fn pipe_round(read: u64, write: u64, class_fn: &str) -> Profile {
        let mut p = fixture::profile();
        let pipe = &mut p.locks[1];
        pipe.class = format!("mutex @ {class_fn} in &kmalloc-cg-192");
        let mut w = pipe.callers[0].clone();
        w.wait = crate::model::Stats::new(1);
        w.wait.record_n(700, write);
        let mut r = w.clone();
        r.caller = "anon_pipe_read+0x54".into();
        r.wait = crate::model::Stats::new(1);
        r.wait.record_n(700, read);
        pipe.callers = vec![w, r].into();
        p
    }

    #[test]
    fn a_lock_whose_top_caller_flips_keeps_one_name() {
        let rounds = [
            pipe_round(100, 90, "anon_pipe_read"),
            pipe_round(90, 100, "anon_pipe_write"),
            pipe_round(5, 300, "anon_pipe_write"),
        ];
        let c = Classes::of(&rounds);
        let names: Vec<Option<&str>> = (0..3).map(|r| c.name(r, 1)).collect();
        assert_eq!(
            names,
            [Some("mutex @ anon_pipe_write in &kmalloc-cg-192"); 3],
            "the busiest caller over all rounds"
        );
        assert_eq!(c.name(0, 0), Some("tasklist_lock"), "an inferred name stays");
    }

    #[test]
    fn a_round_that_could_not_infer_the_name_keeps_it() {
        let lock = |name: Option<&str>, callers: &[(&str, u64)]| {
            let mut p = fixture::profile();
            let l = &mut p.locks[1];
            l.lock_type = profiler_common::LockType::Spinlock;
            l.class = format!("spinlock @ {}", callers[0].0);
            l.name = name.map(str::to_string);
            l.name_source = name.map(|_| NameSource::Inferred);
            let c: Vec<_> = callers
                .iter()
                .map(|(f, n)| {
                    let mut c = l.callers[0].clone();
                    c.caller = format!("{f}+0x23");
                    c.wait = crate::model::Stats::new(1);
                    c.wait.record_n(3_000, *n);
                    c
                })
                .collect();
            l.callers = c.into();
            p
        };
        let rounds = [
            lock(Some("css_set_lock"), &[("cgroup_post_fork", 50), ("cgroup_exit", 40)]),
            lock(None, &[("cgroup_exit", 9), ("cgroup_post_fork", 2)]),
            lock(Some("pidmap_lock"), &[("alloc_pid", 30), ("free_pid", 20)]),
            lock(Some("css_set_lock"), &[("cgroup_post_fork", 10), ("free_pid", 1)]),
        ];
        let c = Classes::of(&rounds);
        assert_eq!(c.name(1, 1), Some("css_set_lock"), "the unnamed round joins the lock it shares callers with");
        assert_eq!(c.name(2, 1), Some("pidmap_lock"), "another inferred name never joins");
        assert_eq!(c.name(3, 1), Some("css_set_lock"));
    }

    #[test]
    fn locks_of_other_types_slabs_or_callers_stay_apart() {
        let a = pipe_round(100, 90, "anon_pipe_read");
        let mut b = pipe_round(100, 90, "anon_pipe_read");
        b.locks[1].class = "mutex @ anon_pipe_read in &kmalloc-cg-256".into();
        let mut other = fixture::profile();
        other.locks[1].class = "mutex @ some_other_fn".into();
        let mut cp = other.locks[1].callers[0].clone();
        cp.caller = "some_other_fn+0x10".into();
        other.locks[1].callers = vec![cp].into();
        let c = Classes::of([&a, &b, &other]);
        assert_eq!(c.name(0, 1), Some("mutex @ anon_pipe_read in &kmalloc-cg-192"));
        assert_eq!(c.name(1, 1), Some("mutex @ anon_pipe_read in &kmalloc-cg-256"), "another slab cache");
        assert_eq!(c.name(2, 1), Some("mutex @ some_other_fn"));
    }
}
