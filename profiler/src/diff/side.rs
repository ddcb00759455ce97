//! One side of a comparison: recordings (rounds) of one setup, their rows
//! matched by what stays the same across boots and kernel builds.
//!
//! A lock is matched by its name (the class, `mutex @ anon_pipe_write`, when
//! it has none), type and mode, never by address: addresses change across
//! boots and kernels, and every lock of one name (three pipes' mutexes,
//! both runqueue locks) is summed, as `--group-by name` does. A user-space
//! lock also keeps its process's name (not its pid). A caller is matched by
//! its function without offset or compiler suffix (`copy_process`, not
//! `copy_process.isra.0+0x13bf`): offsets change across kernel builds. A
//! lock without a name keeps one class name across the recordings compared
//! even where its top caller changes ([`Classes`]).

use std::collections::BTreeMap;

use profiler_common::{LockMode, LockType};

use super::classes::Classes;
use crate::{
    model::{LockProfile, Profile, Stats},
    query::lock_matches,
    symbols::frame_fn,
};

/// Rows per lock, or per (lock, caller).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum DiffBy {
    /// One row per lock (name, type, mode).
    #[default]
    Lock,
    /// One row per (lock, calling function).
    Caller,
}

impl DiffBy {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            DiffBy::Lock => "lock",
            DiffBy::Caller => "caller",
        }
    }
}

/// A row's identity across recordings.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowKey {
    /// The lock's name, or its class when it has none; a user-space lock's
    /// process name appended (`big_lock in myapp`).
    pub lock: String,
    /// Lock type name (`rwlock`).
    pub lock_type: &'static str,
    /// Mode name (`read`).
    pub mode: &'static str,
    /// The calling function (`--by caller`).
    pub caller: Option<String>,
}

/// The lock name a row is matched by.
pub fn lock_key_name(l: &LockProfile) -> String {
    match l.pid {
        Some(_) => format!("{} in {}", l.display_name(), l.process.as_deref().unwrap_or("?")),
        None => l.display_name().to_string(),
    }
}

/// The caller a row is matched by: the function, without `+0x..`, compiler
/// suffixes or module; a placeholder (`[stack not captured: ...]`) as it is.
pub fn caller_key_name(caller: &str) -> String {
    if caller.starts_with('[') { caller.to_string() } else { frame_fn(caller).to_string() }
}

/// A row's waits in one round.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Wait times.
    pub wait: Stats,
    /// Hold times, where the backend saw releases.
    pub hold: Option<Stats>,
}

/// One row on one side: a cell per round (None where the round did not see it).
#[derive(Clone, Debug)]
pub struct SideRow {
    /// Lock type.
    pub lock_type: LockType,
    /// Mode.
    pub mode: LockMode,
    /// Per round, in the side's order.
    pub cells: Vec<Option<Cell>>,
}

impl SideRow {
    /// Every round's waits merged.
    pub fn wait(&self) -> Option<Stats> {
        let mut cells = self.cells.iter().flatten();
        let mut s = cells.next()?.wait.clone();
        cells.for_each(|c| s.merge(&c.wait));
        Some(s)
    }

    /// Every round's holds merged (None when no round has any).
    pub fn hold(&self) -> Option<Stats> {
        let mut holds = self.cells.iter().flatten().filter_map(|c| c.hold.as_ref());
        let mut s = holds.next()?.clone();
        holds.for_each(|h| s.merge(h));
        Some(s)
    }

    /// Contentions over all rounds.
    pub fn contended(&self) -> u64 {
        self.cells.iter().flatten().map(|c| c.wait.count()).sum()
    }
}

/// What one recording says about itself, for the header.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundInfo {
    /// The file it came from.
    pub file: String,
    /// Seconds recorded (at least a millisecond, so rates stay finite).
    pub duration_s: f64,
    /// Kernel release.
    pub kernel: String,
    /// Wait backend.
    pub backend: String,
    /// aggregate or stream.
    pub mode: String,
    /// Host name.
    pub hostname: String,
    /// The command it lasted for, as a shell line.
    pub command: Option<String>,
    /// The command's exit status, as a shell says it.
    pub command_status: Option<String>,
    /// Filters in force.
    pub filters: Vec<String>,
    /// Counters that lost events, with their values (`ringbuf_full=3`).
    pub losses: Vec<String>,
}

impl RoundInfo {
    /// The facts of recording `p`, read from `file`.
    pub fn of(file: &str, p: &Profile) -> RoundInfo {
        let m = &p.meta;
        let losses = m
            .drops
            .iter()
            .filter(|c| c.kind == crate::model::CounterKind::Loss && c.value > 0)
            .map(|c| format!("{}={}", c.name, c.value))
            .collect();
        RoundInfo {
            file: file.to_string(),
            duration_s: m.duration_s.max(1e-3),
            kernel: m.kernel.clone(),
            backend: m.backend.clone(),
            mode: m.mode.clone(),
            hostname: m.hostname.clone(),
            command: m.command.as_ref().map(|c| c.line()),
            command_status: m.command.as_ref().map(|c| c.status.clone()),
            filters: m.filters.clone(),
            losses,
        }
    }
}

/// Recordings of one setup, their rows matched across rounds.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// The rounds, in the order given.
    pub rounds: Vec<RoundInfo>,
    /// Rows by identity.
    pub rows: BTreeMap<RowKey, SideRow>,
}

/// Which rows a side keeps.
#[derive(Clone, Debug, Default)]
pub struct SideOptions {
    /// Rows per lock or per caller.
    pub by: DiffBy,
    /// Only locks matching this (`--lock`: a name, class, member, slab cache).
    pub lock: Option<String>,
}

/// Both sides of a comparison, their unnamed locks named alike ([`Classes`]).
pub fn sides(before: &[(String, Profile)], after: &[(String, Profile)], o: &SideOptions) -> (Side, Side) {
    let classes = Classes::of(before.iter().chain(after).map(|(_, p)| p));
    (Side::with_classes(before, o, &classes, 0), Side::with_classes(after, o, &classes, before.len()))
}

impl Side {
    /// The side made of `recordings` (file name, profile), one round each.
    pub fn new(recordings: &[(String, Profile)], o: &SideOptions) -> Side {
        Side::with_classes(recordings, o, &Classes::of(recordings.iter().map(|(_, p)| p)), 0)
    }

    /// The side made of `recordings`, its unnamed locks named by `classes`
    /// (where these recordings start at index `first`).
    fn with_classes(recordings: &[(String, Profile)], o: &SideOptions, classes: &Classes, first: usize) -> Side {
        let n = recordings.len();
        let mut side = Side { rounds: Vec::with_capacity(n), rows: BTreeMap::new() };
        for (round, (file, p)) in recordings.iter().enumerate() {
            side.rounds.push(RoundInfo::of(file, p));
            for (li, l) in p.locks.iter().enumerate() {
                let lock = match (classes.name(first + round, li), l.pid) {
                    (Some(class), Some(_)) => format!("{class} in {}", l.process.as_deref().unwrap_or("?")),
                    (Some(class), None) => class.to_string(),
                    (None, _) => lock_key_name(l),
                };
                // By the name the row is matched by, too: a round whose own
                // name or class for the lock differs (not inferred there, or
                // another top caller) is still the lock asked for.
                if o.lock.as_deref().is_some_and(|f| !lock_matches(l, f) && lock != f) {
                    continue;
                }
                let key = |caller| RowKey {
                    lock: lock.clone(),
                    lock_type: crate::model::type_name(l.lock_type),
                    mode: crate::model::mode_name(l.mode),
                    caller,
                };
                match o.by {
                    DiffBy::Lock => side.add(key(None), l, round, n, &l.wait, l.hold.as_ref()),
                    DiffBy::Caller => {
                        for c in l.callers.iter() {
                            side.add(key(Some(caller_key_name(&c.caller))), l, round, n, &c.wait, c.hold.as_ref());
                        }
                    }
                }
            }
        }
        side
    }

    fn add(&mut self, key: RowKey, l: &LockProfile, round: usize, rounds: usize, wait: &Stats, hold: Option<&Stats>) {
        if wait.count() == 0 {
            return;
        }
        let row = self.rows.entry(key).or_insert_with(|| SideRow {
            lock_type: l.lock_type,
            mode: l.mode,
            cells: vec![None; rounds],
        });
        match &mut row.cells[round] {
            Some(c) => {
                c.wait.merge(wait);
                match (&mut c.hold, hold) {
                    (Some(h), Some(add)) => h.merge(add),
                    (h @ None, Some(add)) => *h = Some(add.clone()),
                    (_, None) => {}
                }
            }
            empty => *empty = Some(Cell { wait: wait.clone(), hold: hold.cloned() }),
        }
    }

    /// Round durations, seconds.
    pub fn durations(&self) -> Vec<f64> {
        self.rounds.iter().map(|r| r.duration_s).collect()
    }

    /// Per-round contentions per second of `row` (0 where a round did not see it).
    pub fn contended_per_s(&self, row: Option<&SideRow>) -> Vec<f64> {
        self.per_round(row, |c| c.wait.count() as f64)
    }

    /// Per-round wait per second of `row` (ns/s; 0 where a round did not see it).
    pub fn wait_ns_per_s(&self, row: Option<&SideRow>) -> Vec<f64> {
        self.per_round(row, |c| c.wait.total_ns() as f64)
    }

    /// Per-round `ln((v + pseudo) / seconds)` of `row` (`v` 0 where a round
    /// did not see it): the scale the test compares rates on.
    pub fn log_rate(&self, row: Option<&SideRow>, v: impl Fn(&Cell) -> f64, pseudo: f64) -> Vec<f64> {
        self.rounds
            .iter()
            .enumerate()
            .map(|(i, r)| ((row.and_then(|row| row.cells[i].as_ref()).map_or(0.0, &v) + pseudo) / r.duration_s).ln())
            .collect()
    }

    fn per_round(&self, row: Option<&SideRow>, v: impl Fn(&Cell) -> f64) -> Vec<f64> {
        self.rounds
            .iter()
            .enumerate()
            .map(|(i, r)| row.and_then(|row| row.cells[i].as_ref()).map_or(0.0, &v) / r.duration_s)
            .collect()
    }
}

/// Mean wait of each round that saw `row` (ns).
pub fn avg_per_round(row: Option<&SideRow>) -> Vec<f64> {
    row.map(|r| r.cells.iter().flatten().map(|c| c.wait.avg_ns() as f64).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn locks_match_by_name_type_and_mode_and_callers_by_function() {
        let mut a = fixture::profile();
        // Another boot: other addresses, another build: other offsets and suffixes.
        let mut b = fixture::profile();
        for l in &mut b.locks {
            l.addr ^= 0x1234_0000;
            let callers: Vec<_> = l
                .callers
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.caller = c.caller.replace("+0x", ".isra.0+0x9");
                    c
                })
                .collect();
            l.callers = callers.into();
        }
        a.meta.duration_s = 2.0;
        let side = Side::new(&[("a".into(), a), ("b".into(), b)], &SideOptions::default());
        assert_eq!(side.rows.len(), 2, "{:?}", side.rows.keys().collect::<Vec<_>>());
        let tl = side.rows.keys().find(|k| k.lock == "tasklist_lock").expect("tasklist_lock");
        assert_eq!((tl.lock_type, tl.mode), ("rwlock", "write"));
        let row = &side.rows[tl];
        assert!(row.cells.iter().all(Option::is_some), "matched in both rounds");
        assert_eq!(side.contended_per_s(Some(row)), [5.0 / 2.0, 5.0 / 5.0]);
        assert_eq!(row.contended(), 10);
        let pipe = side.rows.keys().find(|k| k.lock == "mutex @ anon_pipe_write").expect("unnamed: by class");
        assert_eq!(side.rows[pipe].wait().map(|w| w.count()), Some(8));

        let by_caller = SideOptions { by: DiffBy::Caller, lock: Some("tasklist_lock".into()) };
        let side = Side::new(&[("a".into(), fixture::profile()), ("b".into(), fixture::profile())], &by_caller);
        let callers: Vec<_> = side.rows.keys().filter_map(|k| k.caller.as_deref()).collect();
        assert_eq!(callers, ["copy_process", "release_task"], "--lock keeps one lock; callers by function");
    }

    #[test]
    fn absent_rounds_count_as_zero_and_same_named_locks_sum() {
        let a = fixture::profile();
        let mut b = fixture::profile();
        b.locks.remove(0);
        let mut twin = b.locks[0].clone();
        twin.addr += 0x1000;
        b.locks.push(twin);
        let side = Side::new(&[("a".into(), a), ("b".into(), b)], &SideOptions::default());
        let tl = side.rows.iter().find(|(k, _)| k.lock == "tasklist_lock").map(|(_, r)| r);
        assert_eq!(side.contended_per_s(tl), [1.0, 0.0]);
        let pipe = side.rows.iter().find(|(k, _)| k.lock.starts_with("mutex")).map(|(_, r)| r);
        assert_eq!(side.contended_per_s(pipe), [4.0 / 5.0, 8.0 / 5.0], "two pipes' mutexes summed");
        assert_eq!(avg_per_round(tl).len(), 1, "only rounds that saw it have a mean");
    }

    #[test]
    fn caller_keys_drop_offsets_suffixes_and_modules_but_keep_placeholders() {
        assert_eq!(caller_key_name("copy_process.isra.0+0x13bf"), "copy_process");
        assert_eq!(caller_key_name("kvm_vcpu_yield_to+0x5f [kvm]"), "kvm_vcpu_yield_to");
        let p = crate::model::placeholders::STACK_SKIPPED;
        assert_eq!(caller_key_name(p), p);
    }
}
