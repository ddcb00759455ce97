//! Snapshot -> symbolized [`Profile`], off any draw path: the builder keeps
//! its resolver (and so every stack symbolized once) for the whole session,
//! and reuses the profile of each lock whose row did not change.

use std::{collections::BTreeMap, sync::Arc};

use profiler_common::{ContentionEvent, LockType, STACK_SKIPPED, STACK_USER_LOCK, StackId, is_stack, owner};
use rustc_hash::FxHashMap;

use crate::{
    model::{
        CallerProfile, CgroupLock, CgroupProfile, CgroupShare, Frames, LockKey, LockProfile, Meta, NameSource,
        OwnerKind, OwnerProfile, Profile, RqContention, SlowWait, Stats, TaskProfile, YieldCaller, YieldPair,
        YieldProfile, merge_shares, placeholders,
    },
    symbols::{
        Identities, Kallsyms, NoIdentities, ResolvedStack, Resolver, StackSource, frame_fn, lock_class, lock_class_by,
        name_lock, rt_base, user::UserStack, yield_caller_index,
    },
};

use super::aggregator::{BlameKey, CGROUP_OVERFLOW, LockAgg, OVERFLOW_TID, Snapshot, YieldAgg, YieldPairKey};

/// Looks up a thread's name by thread id (the session reads
/// `/proc/<tid>/comm`; the pipeline itself reads no files).
pub type TaskNames = fn(u32) -> Option<String>;

/// Names cgroups by id (the session walks the cgroup2 mount; the pipeline
/// itself reads no files).
pub trait CgroupNames: Send {
    /// The short name and the path (relative to the cgroup2 mount, `None`
    /// when the cgroup is gone) of cgroup `id`.
    fn name(&mut self, id: u64) -> (String, Option<String>);
}

/// cgroups named by their id only (tests, and sessions without a cgroup2 mount).
pub struct NoCgroupNames;

impl CgroupNames for NoCgroupNames {
    fn name(&mut self, id: u64) -> (String, Option<String>) {
        (format!("cgroup {id}"), None)
    }
}

/// Symbolizes user stacks by id (the session's user-stack resolver).
pub trait UserStacks: Send {
    /// Frames of user stack `id`, innermost first.
    fn frames(&mut self, id: StackId) -> Vec<String>;
    /// Reads user stack `id` and its process's mappings now, if it is not
    /// yet: as soon as the kernel announces it (the process may exit), and
    /// for every stack a snapshot refers to (see `ProfileBuilder::prefetch`).
    fn pin(&mut self, id: StackId);
    /// Forgets the stacks `keep` says no row uses.
    fn retain(&mut self, keep: &dyn Fn(StackId) -> bool);
    /// What became of the user stacks so far.
    fn counters(&self) -> UserStackTally;
    /// User stack `id` with its binaries, if symbolized (`frames` says why not).
    fn stack(&mut self, _id: StackId) -> Option<Arc<UserStack>> {
        None
    }
}

/// User stacks: how many were unpinned (process gone), evicted (the kernel's
/// map forgot them), truncated, and cut where the walk left mapped code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserStackTally {
    /// Process gone before its mappings were read.
    pub unpinned: u64,
    /// Forgotten by the kernel's map before read.
    pub evicted: u64,
    /// Ending early.
    pub truncated: u64,
    /// Cut where the walk left mapped code (of those truncated).
    pub left_code: u64,
    /// Debug files fetched from debuginfod.
    pub debuginfod_fetched: u64,
    /// Binaries whose debug file debuginfod did not give.
    pub debuginfod_missed: u64,
    /// The unwinder's counts (`--user-unwind copy`).
    pub unwind: crate::symbols::user::unwind::UnwindCounters,
}

/// No user-stack symbolizer: user frames are shown by their id.
pub struct NoUserStacks;

impl UserStacks for NoUserStacks {
    fn frames(&mut self, id: StackId) -> Vec<String> {
        vec![format!("[user stack {id:016x}]")]
    }
    fn pin(&mut self, _: StackId) {}
    fn retain(&mut self, _: &dyn Fn(StackId) -> bool) {}
    fn counters(&self) -> UserStackTally {
        UserStackTally::default()
    }
}

/// The stacks behind caller ids: the kernel's resolver, the user stacks,
/// and which ids join the two.
struct Stacks<'a, S> {
    resolver: &'a mut Resolver<S>,
    user: &'a mut dyn UserStacks,
    joined: &'a FxHashMap<StackId, (StackId, StackId)>,
    user_locks: &'a mut dyn UserLockNames,
}

impl<S: StackSource> Stacks<'_, S> {
    /// Caller id `id` symbolized: its kernel stack, and for a joined id the
    /// user frames after a `[kernel]` marker (innermost first, so read
    /// root-first: the application's frames, then the kernel's).
    fn caller(&mut self, id: StackId) -> (ResolvedStack, Option<Arc<UserStack>>) {
        let Some(&(kernel, user)) = self.joined.get(&id) else {
            return (self.resolver.stack(id).clone(), None);
        };
        if kernel == STACK_USER_LOCK {
            return user_lock_stack(self.user, user);
        }
        let mut rs = self.resolver.stack(kernel).clone();
        let mut frames = rs.frames.to_vec();
        if frames.is_empty() {
            frames.push(rs.caller.clone());
        }
        frames.push(placeholders::KERNEL_MARKER.into());
        frames.extend(self.user.frames(user));
        rs.frames = frames.into();
        (rs, self.user.stack(user))
    }
}

/// A user-space lock's wait (or owner): its stack is user stack `id` alone,
/// its caller the innermost application frame.
fn user_lock_stack(user: &mut dyn UserStacks, id: StackId) -> (ResolvedStack, Option<Arc<UserStack>>) {
    let frames = user.frames(id);
    let stack = user.stack(id);
    let caller = stack
        .as_ref()
        .and_then(|s| s.app_frame())
        .or_else(|| frames.first().cloned())
        .unwrap_or_else(|| placeholders::UNKNOWN_CALLER.into());
    // Its class is named in `name_user_lock`, from the application function.
    let caller_fn = frame_fn(&caller).to_string();
    (ResolvedStack { frames: frames.into(), caller, caller_fn }, stack)
}

/// Frames shown in a yield caller's path.
const YIELD_PATH_FRAMES: usize = 4;

/// The yield_to part of a profile: callers symbolized and merged by stack,
/// pairs named, and the run-queue lock waits whose stacks pass through
/// `yield_to` (tracepoint backends see `double_rq_lock` contention).
fn yield_profile<S: StackSource>(y: &YieldAgg, resolver: &mut Resolver<S>, locks: &[LockProfile]) -> YieldProfile {
    let mut by_stack: BTreeMap<Frames, YieldCaller> = BTreeMap::new();
    for (sid, stats) in &y.callers {
        let rs = resolver.stack(*sid);
        let (caller, path) = match yield_caller_index(&rs.frames) {
            Some(i) => (
                rs.frames[i].clone(),
                rs.frames[i..].iter().take(YIELD_PATH_FRAMES).map(|f| frame_fn(f)).collect::<Vec<_>>().join(" <- "),
            ),
            None => (rs.caller.clone(), rs.caller.clone()),
        };
        by_stack.entry(rs.group_key()).and_modify(|c| c.stats.merge(stats)).or_insert_with(|| YieldCaller {
            caller,
            path,
            stack: rs.frames.to_vec(),
            stats: stats.clone(),
        });
    }
    let mut callers: Vec<YieldCaller> = by_stack.into_values().collect();
    callers.sort_by(|a, b| b.stats.calls().cmp(&a.stats.calls()).then_with(|| a.caller.cmp(&b.caller)));
    let mut pairs: Vec<YieldPair> = y
        .pairs
        .iter()
        .map(|(k, p)| YieldPair {
            tid: k.tid,
            pid: p.tgid,
            comm: if *k == YieldPairKey::OVERFLOW { placeholders::OTHER_PAIRS.into() } else { comm_str(&p.comm) },
            target_tid: k.target_tid,
            target_pid: p.target_tgid,
            target_comm: comm_str(&p.target_comm),
            stats: p.stats.clone(),
        })
        .collect();
    pairs.sort_by(|a, b| {
        b.stats.calls().cmp(&a.stats.calls()).then(a.tid.cmp(&b.tid)).then(a.target_tid.cmp(&b.target_tid))
    });
    let mut rq = RqContention::default();
    for l in locks {
        let mut hit = false;
        for c in l.callers.iter().filter(|c| c.stack.iter().any(|f| frame_fn(f) == "yield_to")) {
            hit = true;
            rq.waits += c.wait.count();
            rq.wait_total_ns += c.wait.total_ns();
            rq.wait_max_ns = rq.wait_max_ns.max(c.wait.max_ns());
        }
        if hit {
            rq.locks.push(l.display_name().to_string());
        }
    }
    YieldProfile { total: y.total.clone(), callers, pairs, rq_contention: rq }
}

/// The owners of a lock (blame), merged by owner and symbolized acquire
/// stack, with an `unknown` row for the waits no owner was seen for, so the
/// rows sum to the lock's waits. Empty for locks that record no owner and
/// were never blamed. An owner whose comm the kernel did not give is named
/// by `task_name`.
fn owners<S: StackSource>(
    key: &LockKey,
    agg: &LockAgg,
    stacks: &mut Stacks<'_, S>,
    task_name: TaskNames,
) -> Vec<OwnerProfile> {
    if agg.blame.is_empty() && !key.lock_type.records_owner() {
        return Vec::new();
    }
    type Merge = (u32, Vec<String>, String, Vec<String>);
    let mut merged: BTreeMap<Merge, OwnerProfile> = BTreeMap::new();
    for (who, b) in &agg.blame {
        // A user-space lock's owner read from the lock's memory is one only
        // if it is a thread of the lock's process (a Rust Mutex keeps its
        // data where glibc's keeps `__owner`): else its waits stay unknown.
        if key.pid != 0 && who.owner_tid != 0 && !stacks.user_locks.is_thread(key.pid, who.owner_tid) {
            continue;
        }
        let kind = match who.owner_tid {
            0 => OwnerKind::Readers,
            owner::WRITER_TID => OwnerKind::Writer,
            _ => OwnerKind::Task,
        };
        let (caller, stack) = match kind {
            OwnerKind::Readers => (placeholders::HELD_BY_READERS.to_string(), Vec::new()),
            OwnerKind::Writer => (placeholders::HELD_BY_WRITER.to_string(), Vec::new()),
            _ if who.stack_id == STACK_SKIPPED => (placeholders::ACQUIRED_UNSEEN.to_string(), Vec::new()),
            _ => {
                let (rs, _) = stacks.caller(who.stack_id);
                (rs.caller, rs.frames.to_vec())
            }
        };
        let asleep = if is_stack(who.asleep_stack_id) {
            stacks.caller(who.asleep_stack_id).0.frames.to_vec()
        } else {
            Vec::new()
        };
        let mut comm = comm_str(&b.comm);
        if comm.is_empty() && kind == OwnerKind::Task && who != &BlameKey::OVERFLOW {
            comm = task_name(who.owner_tid).unwrap_or_default();
        }
        if who == &BlameKey::OVERFLOW {
            comm = placeholders::OTHER_OWNERS.into();
        }
        let o = merged.entry((who.owner_tid, stack.clone(), caller.clone(), asleep.clone())).or_insert_with(|| {
            OwnerProfile {
                kind,
                tid: if kind == OwnerKind::Task { who.owner_tid } else { 0 },
                pid: b.tgid,
                comm,
                caller,
                stack,
                asleep_stack: asleep,
                waits: 0,
                wait_caused_ns: 0,
                wait_caused_max_ns: 0,
            }
        });
        o.waits += b.waits;
        o.wait_caused_ns = o.wait_caused_ns.saturating_add(b.wait_ns);
        o.wait_caused_max_ns = o.wait_caused_max_ns.max(b.max_ns);
    }
    let mut out: Vec<OwnerProfile> = merged.into_values().collect();
    let (waits, ns): (u64, u64) =
        out.iter().fold((0, 0), |(w, n), o| (w + o.waits, n.saturating_add(o.wait_caused_ns)));
    let (rest_waits, rest_ns) = (agg.wait.count().saturating_sub(waits), agg.wait.total_ns().saturating_sub(ns));
    if rest_waits > 0 || rest_ns > 0 {
        out.push(OwnerProfile::unknown(rest_waits, rest_ns));
    }
    out.sort_by(|a, b| b.wait_caused_ns.cmp(&a.wait_caused_ns).then(a.tid.cmp(&b.tid)));
    out
}

/// The cgroup shares of each caller id of `agg`.
fn caller_shares(agg: &LockAgg) -> FxHashMap<StackId, Vec<CgroupShare>> {
    let mut out: FxHashMap<StackId, Vec<CgroupShare>> = FxHashMap::default();
    for (&(sid, id), c) in &agg.caller_cgroups {
        out.entry(sid).or_default().push(CgroupShare { id, count: c.count, wait_ns: c.wait_ns, max_ns: c.max_ns });
    }
    out
}

/// One lock's profile: callers symbolized and merged by stack, named.
fn lock_profile<S: StackSource>(
    key: &LockKey,
    agg: &LockAgg,
    stacks: &mut Stacks<'_, S>,
    task_name: TaskNames,
) -> LockProfile {
    // Callers with the same symbolized stack are merged.
    let mut by_stack: BTreeMap<Frames, CallerProfile> = BTreeMap::new();
    let mut caller_fns: BTreeMap<String, u64> = BTreeMap::new();
    let mut shares = caller_shares(agg);
    for (sid, stats) in &agg.callers {
        let (rs, user) = stacks.caller(*sid);
        *caller_fns.entry(rs.caller_fn.clone()).or_default() += stats.count();
        let hold = agg.hold_callers.get(sid);
        let cgroups = shares.remove(sid).unwrap_or_default();
        by_stack
            .entry(rs.group_key())
            .and_modify(|c| {
                c.wait.merge(stats);
                if let Some(h) = hold {
                    c.hold.get_or_insert_with(|| Stats::new(h.sigfig_of())).merge(h);
                }
                merge_shares(&mut c.cgroups, &cgroups);
            })
            .or_insert_with(|| {
                let mut c = CallerProfile {
                    caller: rs.caller.clone(),
                    stack: rs.frames.clone(),
                    wait: Stats::clone(stats),
                    hold: hold.map(|h| Stats::clone(h)),
                    // A user-space lock's caller is its application frame already.
                    user_caller: user.as_ref().filter(|_| !key.lock_type.is_user()).and_then(|u| u.app_frame()),
                    cgroups: Vec::new(),
                    user,
                };
                merge_shares(&mut c.cgroups, &cgroups);
                c
            });
    }
    let mut callers: Vec<CallerProfile> = by_stack.into_values().collect();
    callers.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then_with(|| a.caller.cmp(&b.caller)));
    let caller_fns: Vec<(String, u64)> = caller_fns.into_iter().collect();
    let rt = matches!(key.lock_type, LockType::RtMutex | LockType::RwlockRt);
    let rt_base = callers.iter().filter(|_| rt).find_map(|c| rt_base(&c.stack)).map(str::to_string);
    let class = if key.addr == 0 {
        placeholders::OTHER_LOCKS.to_string()
    } else {
        lock_class(key.addr, key.lock_type, &caller_fns, None)
    };
    LockProfile {
        addr: key.addr,
        lock_type: key.lock_type,
        mode: key.mode,
        pid: (key.pid != 0).then_some(key.pid),
        process: None,
        name: None,
        name_source: None,
        class,
        slab: None,
        field: None,
        addresses: None,
        processes: None,
        owners: owners(key, agg, stacks, task_name),
        rt_base,
        wait: agg.wait.clone(),
        hold: agg.hold.clone(),
        callers: callers.into(),
    }
}

/// Names of user-space locks (futexes) and of their processes, looked up
/// while the process lives and kept.
pub trait UserLockNames: Send {
    /// The data symbol holding `addr` in process `pid` (`big_lock`,
    /// `app::STATE+0x8`), and the mapping it lies in (`[heap]`, `libfoo.so`).
    fn lock(&mut self, pid: u32, addr: u64) -> (Option<String>, Option<String>);
    /// The process's name.
    fn process(&mut self, pid: u32) -> Option<String>;
    /// Whether `tid` is (or was, when first asked) a thread of process `pid`.
    fn is_thread(&mut self, pid: u32, tid: u32) -> bool;
}

/// No names for user-space locks.
pub struct NoUserLockNames;

impl UserLockNames for NoUserLockNames {
    fn lock(&mut self, _pid: u32, _addr: u64) -> (Option<String>, Option<String>) {
        (None, None)
    }

    fn process(&mut self, _pid: u32) -> Option<String> {
        None
    }

    fn is_thread(&mut self, _pid: u32, _tid: u32) -> bool {
        true
    }
}

/// Names a user-space lock's rows (one address in one process): its data
/// symbol if it has one, its class from its callers and its mapping.
fn name_user_lock(rows: &mut [&mut LockProfile], key: (u32, u64), names: &mut dyn UserLockNames) {
    let (pid, addr) = key;
    // The process's name before the lock's: `comm` outlives the process
    // until it is reaped, its maps (which naming the lock reads) do not.
    let process = names.process(pid);
    let mut fns: BTreeMap<String, u64> = BTreeMap::new();
    for l in rows.iter() {
        for c in l.callers.iter() {
            // The application's function, short (no C++ parameters, no
            // perf-map annotation, dots kept), else the caller's text.
            let f = c.user.as_ref().and_then(|u| u.app_function()).unwrap_or_else(|| frame_fn(&c.caller).to_string());
            *fns.entry(f).or_default() += c.wait.count();
        }
    }
    let fns: Vec<(String, u64)> = fns.into_iter().collect();
    let Some(ty) = rows.iter().max_by_key(|l| l.wait.count()).map(|l| l.lock_type) else { return };
    let (symbol, mapping) = names.lock(pid, addr);
    let class = lock_class_by(addr, ty, &fns, None, |f| f);
    let class = match mapping {
        Some(m) => format!("{class} in {m}"),
        None => class,
    };
    for l in rows.iter_mut() {
        l.class.clone_from(&class);
        l.name.clone_from(&symbol);
        l.name_source = symbol.as_ref().map(|_| NameSource::Symbol);
        l.process.clone_from(&process);
    }
}

/// Caller function names of a lock row with their contentions.
fn caller_fns(l: &LockProfile) -> impl Iterator<Item = (&str, u64)> {
    l.callers.iter().map(|c| (frame_fn(&c.caller), c.wait.count()))
}

/// Names every lock once per address, from all of its rows (every type and
/// mode): the rows of one address always carry the same name.
fn name_by_address(
    locks: &mut [LockProfile],
    ks: &Kallsyms,
    idents: &mut dyn Identities,
    user_names: &mut dyn UserLockNames,
) {
    let mut by_addr: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut user: BTreeMap<(u32, u64), Vec<&mut LockProfile>> = BTreeMap::new();
    for (i, l) in locks.iter_mut().enumerate() {
        match l.pid {
            Some(pid) if l.addr != 0 => user.entry((pid, l.addr)).or_default().push(l),
            _ if l.addr != 0 => by_addr.entry(l.addr).or_default().push(i),
            _ => {}
        }
    }
    for (key, mut rows) in user {
        name_user_lock(&mut rows, key, user_names);
    }
    for (addr, rows) in by_addr {
        let mut fns: BTreeMap<String, u64> = BTreeMap::new();
        for &r in &rows {
            for (f, n) in caller_fns(&locks[r]) {
                *fns.entry(f.to_string()).or_default() += n;
            }
        }
        let fns: Vec<(String, u64)> = fns.into_iter().collect();
        let Some(&main) = rows.iter().max_by_key(|&&r| (locks[r].wait.count(), std::cmp::Reverse(r))) else {
            continue;
        };
        let ident = idents.identity(addr);
        let (ty, rt) = (locks[main].lock_type, locks[main].rt_base.clone());
        let n = name_lock(addr, ty, rt.as_deref(), &fns, ks, ident.as_ref());
        // One address, one name: the class too comes from every row's
        // callers (a rwlock's readers and writers call from different places).
        for &r in &rows {
            let l = &mut locks[r];
            l.class.clone_from(&n.class);
            l.name.clone_from(&n.name);
            l.name_source = n.source;
            l.slab.clone_from(&n.slab);
            l.field.clone_from(&n.field);
        }
    }
}

/// Every stack id `snap` refers to (callers, holds, owners, yield_to
/// callers, the slowest waits), repeats included: kernel stack ids, and
/// the user stack ids of joined callers.
fn stack_ids(snap: &Snapshot) -> impl Iterator<Item = (StackId, Option<StackId>)> + '_ {
    let locks = snap.locks.values().flat_map(|l| {
        let asleep = l.blame.keys().map(|b| b.asleep_stack_id).filter(|&id| is_stack(id));
        let blame = l.blame.keys().map(|b| b.stack_id).chain(asleep);
        l.callers.keys().chain(l.hold_callers.keys()).copied().chain(blame)
    });
    snap.yields.callers.keys().copied().chain(snap.slowest.iter().map(|e| e.stack_id)).chain(locks).map(|id| match snap
        .joined
        .get(&id)
    {
        Some(&(kernel, user)) => (kernel, Some(user)),
        None => (id, None),
    })
}

/// Builds profiles from snapshots for the whole session.
pub struct ProfileBuilder<S> {
    resolver: Resolver<S>,
    /// The last profile of each lock, with the row it was built from.
    locks: FxHashMap<LockKey, (Arc<LockAgg>, LockProfile)>,
    /// What the kernel confirmed about lock addresses.
    idents: Box<dyn Identities>,
    /// Names of owner threads the kernel gave no comm for.
    task_names: TaskNames,
    /// Names of cgroups.
    cgroup_names: Box<dyn CgroupNames>,
    /// User stacks of joined callers.
    user: Box<dyn UserStacks>,
    /// Names of user-space locks.
    user_locks: Box<dyn UserLockNames>,
}

impl<S: StackSource> ProfileBuilder<S> {
    /// A builder over a resolver (whose stack cache it keeps), without
    /// kernel identities.
    pub fn new(resolver: Resolver<S>) -> Self {
        ProfileBuilder {
            resolver,
            locks: FxHashMap::default(),
            idents: Box::new(NoIdentities),
            task_names: |_| None,
            cgroup_names: Box::new(NoCgroupNames),
            user: Box::new(NoUserStacks),
            user_locks: Box::new(NoUserLockNames),
        }
    }

    /// Names user-space locks with `names`.
    pub fn with_user_lock_names(mut self, names: Box<dyn UserLockNames>) -> Self {
        self.user_locks = names;
        self
    }

    /// Names cgroups with `names`.
    pub fn with_cgroup_names(mut self, names: Box<dyn CgroupNames>) -> Self {
        self.cgroup_names = names;
        self
    }

    /// Symbolizes the user part of joined callers with `user`.
    pub fn with_user_stacks(mut self, user: Box<dyn UserStacks>) -> Self {
        self.user = user;
        self
    }

    /// Names owner threads the kernel gave no comm for with `names`.
    pub fn with_task_names(mut self, names: TaskNames) -> Self {
        self.task_names = names;
        self
    }

    /// Names locks with what the kernel confirmed, too.
    pub fn with_identities(mut self, idents: Box<dyn Identities>) -> Self {
        self.idents = idents;
        self
    }

    /// Names the user-space locks `snap` holds and their processes, then
    /// reads and symbolizes every stack it refers to that is not yet, so
    /// that the kernel's stack map may forget it: what a session with no
    /// live view does every interval (a live view's `build` does it).
    pub fn prefetch(&mut self, snap: &Snapshot) {
        // User-space locks are named, and their owners checked, while
        // their process lives: before the stacks, whose user halves can
        // take seconds to pin when a busy process's waits each bring a new
        // one. Each process's name first: `comm` outlives the process until
        // it is reaped, its maps do not, and naming a lock can read a whole
        // image first. (Measured beside two CPU hogs: a 5 s workload that
        // ended before either was read was left nameless.)
        let user_locks = snap.locks.iter().filter(|(k, _)| k.pid != 0);
        for key in user_locks.clone().map(|(k, _)| k) {
            self.user_locks.process(key.pid);
        }
        for (key, agg) in user_locks {
            self.user_locks.lock(key.pid, key.addr);
            for who in agg.blame.keys() {
                self.user_locks.is_thread(key.pid, who.owner_tid);
            }
        }
        for (id, user) in stack_ids(snap) {
            self.resolver.prefetch(id);
            if let Some(user) = user {
                self.user.pin(user);
            }
        }
    }

    /// The stack of a streamed wait: its kernel stack, or a user-space
    /// lock's user stack.
    fn event_stack(&mut self, ev: &ContentionEvent) -> ResolvedStack {
        if ev.stack_id == STACK_USER_LOCK && is_stack(ev.user_stack_id) {
            return user_lock_stack(self.user.as_mut(), ev.user_stack_id).0;
        }
        let id = if ev.stack_id == STACK_USER_LOCK { ev.user_stack_id } else { ev.stack_id };
        self.resolver.stack(id).clone()
    }

    /// Pins user stack `id` (just announced by the kernel).
    pub fn pin_user_stack(&mut self, id: StackId) {
        self.user.pin(id);
    }

    /// Resolves stacks and names locks, producing a profile sorted by total
    /// wait. Locks whose rows are the same as last time are not rebuilt.
    pub fn build(&mut self, snap: &Snapshot, meta: Meta) -> Profile {
        self.build_with(snap, meta, true)
    }

    /// [`build`](Self::build) for a snapshot that is not the session's
    /// latest (a time window: [`Snapshot::since`]): the per-lock cache and
    /// the stacks in use stay as the session's snapshots left them.
    pub fn build_window(&mut self, snap: &Snapshot, meta: Meta) -> Profile {
        self.build_with(snap, meta, false)
    }

    fn build_with(&mut self, snap: &Snapshot, mut meta: Meta, latest: bool) -> Profile {
        meta.events = snap.events;
        let kept = &mut meta.drops.bookkeeping;
        kept.lock_keys_overflow = snap.overflow.locks;
        kept.caller_keys_overflow = snap.overflow.callers;
        kept.task_keys_overflow = snap.overflow.tasks;
        kept.lock_rows_aged = snap.overflow.aged_locks;
        kept.task_rows_aged = snap.overflow.aged_tasks;
        kept.caller_rows_aged = snap.overflow.aged_callers;
        kept.yield_keys_overflow = snap.yields.overflow;
        kept.cgroup_keys_overflow = snap.overflow.cgroups;
        if latest {
            self.locks.retain(|k, _| snap.locks.contains_key(k));
        }
        let mut locks = Vec::with_capacity(snap.locks.len());
        for (key, agg) in &snap.locks {
            match self.locks.get(key) {
                Some((seen, built)) if latest && Arc::ptr_eq(seen, agg) => locks.push(built.clone()),
                _ => {
                    let mut stacks = Stacks {
                        resolver: &mut self.resolver,
                        user: self.user.as_mut(),
                        joined: &snap.joined,
                        user_locks: self.user_locks.as_mut(),
                    };
                    let built = lock_profile(key, agg, &mut stacks, self.task_names);
                    if latest {
                        self.locks.insert(*key, (agg.clone(), built.clone()));
                    }
                    locks.push(built);
                }
            }
        }
        name_by_address(&mut locks, self.resolver.kallsyms(), self.idents.as_mut(), self.user_locks.as_mut());
        locks.sort_by(|a, b| {
            b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.addr.cmp(&b.addr)).then(a.mode.cmp(&b.mode))
        });

        let mut tasks: Vec<TaskProfile> = snap
            .tasks
            .iter()
            .map(|(tid, t)| TaskProfile {
                tid: *tid,
                tgid: t.tgid,
                comm: if *tid == OVERFLOW_TID { placeholders::OTHER_TASKS.into() } else { comm_str(&t.comm) },
                wait: t.wait.clone(),
            })
            .collect();
        tasks.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.tid.cmp(&b.tid)));
        debug_assert!(tasks.iter().filter(|t| t.tid == OVERFLOW_TID).count() <= 1);

        let slowest = snap
            .slowest
            .iter()
            .map(|ev| {
                let key = LockKey::of(ev);
                let lock = locks
                    .iter()
                    .find(|l| l.key() == key)
                    .map(|l| l.display_name().to_string())
                    .unwrap_or_else(|| format!("{:#x}", key.addr));
                let rs = self.event_stack(ev);
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
                    stack: rs.frames.to_vec(),
                }
            })
            .collect();

        let yield_to = (meta.yield_backend.is_some() || snap.yields.total.calls() > 0)
            .then(|| yield_profile(&snap.yields, &mut self.resolver, &locks));
        if latest && snap.overflow.aged_callers > 0 {
            // Rows were aged out: forget the stacks nothing refers to any more.
            let used: rustc_hash::FxHashSet<StackId> =
                stack_ids(snap).flat_map(|(k, u)| std::iter::once(k).chain(u)).collect();
            self.resolver.retain(|id| used.contains(&id));
            self.user.retain(&|id| used.contains(&id));
        }
        let cgroups = self.cgroups(snap, &locks);
        let user = self.user.counters();
        meta.drops.losses.user_stacks_unpinned = user.unpinned;
        meta.drops.losses.user_stacks_evicted = user.evicted;
        meta.drops.bookkeeping.user_stack_truncated = user.truncated;
        meta.drops.bookkeeping.user_stack_left_code = user.left_code;
        (meta.drops.bookkeeping.debuginfod_fetched, meta.drops.bookkeeping.debuginfod_missed) =
            (user.debuginfod_fetched, user.debuginfod_missed);
        let (u, b, l) = (user.unwind, &mut meta.drops.bookkeeping, &mut meta.drops.losses);
        (l.unwind_dropped, l.unwind_process_gone) = (u.dropped, u.no_process);
        (b.unwind_stacks, b.unwind_copy_short, b.unwind_no_rule, b.unwind_deep) =
            (u.unwound, u.copy_short, u.no_rule, u.deep);
        (b.unwind_plan_full, b.unwind_binaries_unreadable, b.unwind_map_refused) =
            (u.plan_full, u.binaries_unreadable, u.map_refused);
        meta.drops.losses.stacks_evicted = self.resolver.evicted();
        meta.drops.bookkeeping.stacks_read = self.resolver.read();
        Profile { meta, locks, tasks, slowest, yield_to, cgroups, incident: None }
    }

    /// The cgroup rows: each cgroup's waits, and its part of each lock.
    fn cgroups(&mut self, snap: &Snapshot, locks: &[LockProfile]) -> Vec<CgroupProfile> {
        let mut per_lock: FxHashMap<u64, Vec<CgroupLock>> = FxHashMap::default();
        for l in locks {
            let mut shares: Vec<CgroupShare> = Vec::new();
            // Each cgroup's main caller of the lock: (wait, caller index).
            let mut top: FxHashMap<u64, (u64, usize)> = FxHashMap::default();
            for (i, c) in l.callers.iter().enumerate() {
                merge_shares(&mut shares, &c.cgroups);
                for s in &c.cgroups {
                    let t = top.entry(s.id).or_insert((s.wait_ns, i));
                    if s.wait_ns > t.0 {
                        *t = (s.wait_ns, i);
                    }
                }
            }
            for s in shares {
                let c = top.get(&s.id).map(|(_, i)| &l.callers[*i]);
                per_lock.entry(s.id).or_default().push(CgroupLock {
                    lock: l.process_name(),
                    addr: l.addr,
                    lock_type: l.lock_type,
                    mode: l.mode,
                    pid: l.pid,
                    count: s.count,
                    wait_ns: s.wait_ns,
                    max_ns: s.max_ns,
                    caller: c.map(|c| c.caller.clone()).unwrap_or_default(),
                    user_caller: c.and_then(|c| c.user_caller.clone()),
                });
            }
        }
        let mut out: Vec<CgroupProfile> = snap
            .cgroups
            .iter()
            .map(|(&id, c)| {
                let (name, path) = if id == CGROUP_OVERFLOW {
                    (placeholders::OTHER_CGROUPS.to_string(), None)
                } else {
                    self.cgroup_names.name(id)
                };
                let mut locks = per_lock.remove(&id).unwrap_or_default();
                locks.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.addr.cmp(&b.addr)));
                CgroupProfile { id, name, path, wait: c.wait.clone(), locks }
            })
            .collect();
        out.sort_by(|a, b| b.wait.total_ns().cmp(&a.wait.total_ns()).then(a.id.cmp(&b.id)));
        out
    }
}

/// A one-off profile of a snapshot (tests, tools).
pub fn to_profile<S: StackSource>(snap: &Snapshot, resolver: Resolver<S>, meta: Meta) -> Profile {
    ProfileBuilder::new(resolver).build(snap, meta)
}

/// A NUL-padded kernel comm as a string.
pub fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

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
    fn owners_plus_unknown_sum_to_the_lock_and_merge_by_symbolized_stack() {
        use profiler_common::{Owner, owner};
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks: HashMap<profiler_common::StackId, Vec<u64>> = HashMap::from([
            (1, vec![0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004]),
            (2, vec![0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004]),
        ]);
        let mut agg = Aggregator::new(Limits::default());
        let lock = 0xffff_8880_0000_1000;
        let owned =
            |tid, stack_id| Owner { kind: owner::TASK, tid, tgid: 7, stack_id, comm: [b'w'; 16], ..Owner::default() };
        for (wait, o) in [
            (1_000, owned(50, 1)),
            (2_000, owned(50, 2)), // the same stack once symbolized
            (4_000, owned(51, STACK_SKIPPED)),
            (8_000, Owner { kind: owner::READERS, stack_id: STACK_SKIPPED, ..Owner::default() }),
            (16_000, Owner::default()),
        ] {
            let mut e = ev(lock, lcb::MUTEX, wait, 100, 1);
            e.owner = o;
            agg.ingest(&e);
        }
        let p = to_profile(&agg.snapshot(), Resolver::new(Arc::new(ks), stacks), Meta::default());
        let l = &p.locks[0];
        // The unknown row is the rest by construction: what can be wrong is
        // the known part, so check that against the input.
        let known = l.owners.iter().filter(|o| o.kind != OwnerKind::Unknown);
        let (waits, ns) = known.fold((0, 0), |(w, n), o| (w + o.waits, n + o.wait_caused_ns));
        assert!(waits <= l.wait.count() && ns <= l.wait.total_ns(), "known owners within the lock's waits");
        assert_eq!((waits, ns), (4, 15_000), "four waits had an owner (tasks 50, 51, readers)");
        assert_eq!(l.owners[0].kind, OwnerKind::Unknown);
        assert_eq!((l.owners[0].waits, l.owners[0].wait_caused_ns), (1, 16_000), "the ownerless wait");
        assert_eq!(l.owners[1].kind, OwnerKind::Readers);
        let w = l.owners.iter().find(|o| o.tid == 50).expect("owner 50");
        assert_eq!((w.waits, w.wait_caused_ns, w.wait_caused_max_ns), (2, 3_000, 2_000), "stacks 1 and 2 merge");
        assert_eq!(w.caller, "anon_pipe_write+0x10");
        assert_eq!(w.comm, "wwwwwwwwwwwwwwww");
        let u = l.owners.iter().find(|o| o.tid == 51).expect("owner 51");
        assert!(u.stack.is_empty() && u.caller.starts_with("[acquired without"), "{u:?}");
        // A spinlock records no owner: no owner rows at all.
        let mut agg = Aggregator::new(Limits::default());
        agg.ingest(&ev(0x1000, lcb::SPIN, 10, 1, 1));
        let p =
            to_profile(&agg.snapshot(), Resolver::new(Arc::new(Kallsyms::default()), HashMap::new()), Meta::default());
        assert!(p.locks[0].owners.is_empty());
    }

    #[test]
    fn an_rwlock_held_by_a_writer_says_so_rather_than_owner_unknown() {
        use profiler_common::Owner;
        let mut agg = Aggregator::new(Limits::default());
        let lock = 0xffff_ffff_8300_0040;
        for (wait, kind) in [(1_000, owner::WRITER), (2_000, owner::WRITER), (4_000, owner::READERS), (8_000, 0)] {
            let mut e = ev(lock, lcb::SPIN | lcb::WRITE, wait, 100, 1);
            e.owner = Owner { kind, stack_id: STACK_SKIPPED, ..Owner::default() };
            agg.ingest(&e);
        }
        let p =
            to_profile(&agg.snapshot(), Resolver::new(Arc::new(Kallsyms::default()), HashMap::new()), Meta::default());
        let kinds: Vec<(OwnerKind, u64, u64)> =
            p.locks[0].owners.iter().map(|o| (o.kind, o.waits, o.wait_caused_ns)).collect();
        assert_eq!(
            kinds,
            [(OwnerKind::Unknown, 1, 8_000), (OwnerKind::Readers, 1, 4_000), (OwnerKind::Writer, 2, 3_000)],
        );
        let w = &p.locks[0].owners[2];
        assert_eq!((w.tid, w.caller.as_str()), (0, placeholders::HELD_BY_WRITER));
        assert_eq!(w.frames(), [placeholders::HELD_BY_WRITER]);
    }

    #[test]
    fn a_user_space_locks_class_is_its_application_function_short_and_whole() {
        use crate::symbols::user::{JIT_MODULE, UserFrame, UserStack};
        let frame = |function: &str, module: &str| UserFrame {
            function: Some(function.into()),
            module: Arc::from(module),
            ..UserFrame::unmapped(0x1000)
        };
        let row = |frames: Vec<UserFrame>| {
            let user = Arc::new(UserStack { frames, truncated: false });
            let mut wait = Stats::new(crate::model::LOCK_SIGFIG);
            wait.record(1_000);
            LockProfile {
                addr: 0x7f00_0000_1000,
                lock_type: LockType::Futex,
                mode: profiler_common::LockMode::Exclusive,
                pid: Some(42),
                process: None,
                name: None,
                name_source: None,
                class: String::new(),
                slab: None,
                field: None,
                addresses: None,
                processes: None,
                owners: Vec::new(),
                rt_base: None,
                wait: wait.clone(),
                hold: None,
                callers: vec![CallerProfile {
                    caller: user.app_frame().unwrap_or_default(),
                    stack: Vec::new().into(),
                    wait,
                    hold: None,
                    user_caller: None,
                    cgroups: Vec::new(),
                    user: Some(user),
                }]
                .into(),
            }
        };
        let class = |frames| {
            let mut l = row(frames);
            name_user_lock(&mut [&mut l], (42, 0x7f00_0000_1000), &mut NoUserLockNames);
            l.class
        };
        let cpp = "v8::base::ConditionVariable::WaitFor(v8::base::Mutex*, v8::base::TimeDelta const&)";
        assert_eq!(
            class(vec![frame("__futex_abstimed_wait_common", "libc.so.6"), frame(cpp, "node")]),
            "futex @ v8::base::ConditionVariable::WaitFor"
        );
        // Dots are part of JIT and Java names, not compiler suffixes.
        let jit = frame("JS:~Module._compile node:internal/modules/cjs/loader:1483:37", JIT_MODULE);
        assert_eq!(class(vec![frame("syscall", "libc.so.6"), jit]), "futex @ JS:~Module._compile");
        let rust = frame("<myapp::Pool as myapp::Get>::get", "myapp");
        assert_eq!(class(vec![frame("syscall", "libc.so.6"), rust]), "futex @ <myapp::Pool as myapp::Get>::get");
    }

    #[test]
    fn snapshot_overflows_become_bookkeeping_counters() {
        use crate::pipeline::aggregator::Overflow;
        let mut snap = Aggregator::new(Limits::default()).snapshot();
        snap.overflow = Overflow {
            locks: 1,
            callers: 2,
            tasks: 3,
            aged_locks: 4,
            aged_tasks: 5,
            aged_callers: 6,
            ..Overflow::default()
        };
        snap.yields = Arc::new(YieldAgg { overflow: 7, ..YieldAgg::default() });
        let mut meta = Meta::default();
        meta.drops.losses.ringbuf_full = 9;
        let p = to_profile(&snap, Resolver::new(Arc::new(Kallsyms::default()), HashMap::new()), meta);
        let b = &p.meta.drops.bookkeeping;
        let folded = [b.lock_keys_overflow, b.caller_keys_overflow, b.task_keys_overflow, b.yield_keys_overflow];
        assert_eq!(folded, [1, 2, 3, 7]);
        assert_eq!([b.lock_rows_aged, b.task_rows_aged, b.caller_rows_aged], [4, 5, 6]);
        assert_eq!(p.meta.drops.losses.ringbuf_full, 9, "the session's counters are kept");
    }

    #[test]
    fn rows_of_one_address_get_one_name_and_class() {
        // A fork + ptrace storm: tasklist_lock's readers wait in __do_wait,
        // its writers in do_exit; both rows must read the same.
        const TL_KS: &str = "\
ffffffff81300000 T do_exit
ffffffff81310000 T __do_wait
ffffffff8226e870 T __lock_text_start
ffffffff8226fb60 T queued_write_lock_slowpath
ffffffff8226fc00 T queued_read_lock_slowpath
ffffffff822702f1 T __lock_text_end
";
        let ks = Kallsyms::parse(TL_KS.as_bytes()).expect("parse");
        let stacks: HashMap<profiler_common::StackId, Vec<u64>> = HashMap::from([
            (1, vec![0xffffffff8226fb70, 0xffffffff81300040]),
            (2, vec![0xffffffff8226fc10, 0xffffffff81310040]),
        ]);
        let addr = 0xffffffff83008080;
        let mut agg = Aggregator::new(Limits::default());
        for tid in 0..3 {
            agg.ingest(&ev(addr, lcb::SPIN | lcb::WRITE, 1_000, 100 + tid, 1));
        }
        agg.ingest(&ev(addr, lcb::SPIN | lcb::READ, 9_000, 200, 2));
        let p = to_profile(&agg.snapshot(), Resolver::new(Arc::new(ks), stacks), Meta::default());
        assert_eq!(p.locks.len(), 2, "a read row and a write row");
        let named = |l: &LockProfile| (l.name.clone(), l.name_source, l.class.clone());
        assert_eq!(named(&p.locks[0]), named(&p.locks[1]), "one address, one name");
        assert_eq!(p.locks[0].class, "rwlock @ do_exit", "the class of all of the address's contentions");
        assert_eq!(p.locks[0].display_name(), p.locks[1].display_name());
    }

    #[test]
    fn profile_names_locks_and_merges_identical_stacks() {
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks: HashMap<profiler_common::StackId, Vec<u64>> = HashMap::from([
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
        let p = to_profile(&agg.snapshot(), Resolver::new(Arc::new(ks), stacks), Meta::default());

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
        assert_eq!(*pipe.callers[0].stack, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10", "vfs_write+0x4"]);
        assert_eq!(p.tasks.len(), 4);
        assert_eq!(p.tasks[0].comm, "task102");
    }

    #[test]
    fn yield_profile_resolves_kvm_callers_pairs_and_rq_waits() {
        const KVM_KS: &str = "\
ffffffff81100000 T yield_to
ffffffff81101000 T double_rq_lock
ffffffff81102000 T _raw_spin_lock
ffffffffc0100000 t kvm_vcpu_yield_to\t[kvm]
ffffffffc0101000 t kvm_sched_yield\t[kvm]
ffffffffc0102000 t kvm_emulate_hypercall\t[kvm]
ffffffffc0103000 t kvm_vcpu_on_spin\t[kvm]
";
        let ks = Kallsyms::parse(KVM_KS.as_bytes()).expect("parse");
        let stacks: HashMap<profiler_common::StackId, Vec<u64>> = HashMap::from([
            (1, vec![0xffffffff81100005, 0xffffffffc0100050, 0xffffffffc0101020, 0xffffffffc0102010]),
            (2, vec![0xffffffff81100005, 0xffffffffc0100050, 0xffffffffc0103040]),
            // A run-queue lock wait inside yield_to.
            (3, vec![0xffffffff81102010, 0xffffffff81101010, 0xffffffff81100040, 0xffffffffc0100050]),
        ]);
        let mut agg = Aggregator::new(Limits::default());
        use crate::pipeline::aggregator::tests::yield_ev;
        for _ in 0..3 {
            agg.ingest_yield(&yield_ev(10, 11, 1, 2_000, 1));
        }
        agg.ingest_yield(&yield_ev(10, 11, 0, 1_000, 1));
        agg.ingest_yield(&yield_ev(11, 10, -3, 500, 2));
        agg.ingest(&ev(0xffff_8880_0000_3000, lcb::SPIN, 700, 10, 3));
        let meta = Meta { yield_backend: Some("fentry".into()), ..Meta::default() };
        let p = to_profile(&agg.snapshot(), Resolver::new(Arc::new(ks), stacks), meta);
        let y = p.yield_to.expect("yield_to profile");
        assert_eq!((y.total.calls(), y.total.yielded, y.total.failed, y.total.errors), (5, 3, 1, 1));
        assert_eq!(y.callers.len(), 2);
        assert_eq!(y.callers[0].caller, "kvm_vcpu_yield_to+0x50 [kvm]");
        assert_eq!(y.callers[0].path, "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall");
        assert_eq!(y.callers[0].stats.calls(), 4);
        assert_eq!(y.callers[1].path, "kvm_vcpu_yield_to <- kvm_vcpu_on_spin");
        assert_eq!(y.pairs.len(), 2);
        assert_eq!((y.pairs[0].tid, y.pairs[0].target_tid, y.pairs[0].stats.yielded), (10, 11, 3));
        assert_eq!(y.pairs[0].comm, "vcpu-thr");
        assert_eq!((y.rq_contention.waits, y.rq_contention.wait_total_ns), (1, 700));
        assert_eq!(y.rq_contention.locks.len(), 1);
    }

    #[test]
    fn no_yield_profile_without_probe_or_calls() {
        let r = Resolver::new(Arc::new(Kallsyms::default()), HashMap::<profiler_common::StackId, Vec<u64>>::new());
        let p = to_profile(&Aggregator::new(Limits::default()).snapshot(), r, Meta::default());
        assert!(p.yield_to.is_none());
    }

    #[test]
    fn overflow_rows_are_named_here_not_in_the_aggregator() {
        let mut agg = Aggregator::new(Limits { max_tasks: 1, ..Limits::default() });
        agg.ingest(&ev(0x1000, lcb::MUTEX, 10, 1, 1));
        agg.ingest(&ev(0x1000, lcb::MUTEX, 10, 2, 1));
        let snap = agg.snapshot();
        assert_eq!(snap.tasks[&OVERFLOW_TID].comm, [0; 16], "the aggregator keeps no display text");
        let r = Resolver::new(Arc::new(Kallsyms::default()), HashMap::<profiler_common::StackId, Vec<u64>>::new());
        let p = to_profile(&snap, r, Meta::default());
        let other = p.tasks.iter().find(|t| t.tid == OVERFLOW_TID).expect("overflow row");
        assert_eq!(other.comm, placeholders::OTHER_TASKS);
    }

    #[test]
    fn comm_is_trimmed_at_nul() {
        assert_eq!(comm_str(b"bash\0\0\0\0\0\0\0\0\0\0\0\0"), "bash");
        assert_eq!(comm_str(b"0123456789abcdef"), "0123456789abcdef");
    }

    /// The calls a prefetch makes to its user-lock namer, in order.
    struct Calls(Arc<std::sync::Mutex<Vec<String>>>);

    impl UserLockNames for Calls {
        fn lock(&mut self, pid: u32, addr: u64) -> (Option<String>, Option<String>) {
            self.0.lock().expect("calls").push(format!("lock {pid} {addr:#x}"));
            (None, None)
        }

        fn process(&mut self, pid: u32) -> Option<String> {
            self.0.lock().expect("calls").push(format!("process {pid}"));
            None
        }

        fn is_thread(&mut self, _pid: u32, _tid: u32) -> bool {
            true
        }
    }

    #[test]
    fn prefetch_names_each_process_before_reading_its_locks() {
        let mut agg = Aggregator::new(Limits::default());
        for (pid, addr) in [(100, 0x1000), (100, 0x2000), (200, 0x1000)] {
            let key = profiler_common::AggKey {
                lock_addr: addr,
                tid: pid + 1,
                tgid: pid,
                flags: lcb::FUTEX,
                stack_id: profiler_common::STACK_USER_LOCK,
                user_stack_id: profiler_common::USER_STACK_OFF,
                cgroup_id: 0,
                _pad: 0,
            };
            agg.ingest_agg(&key, &profiler_common::AggVal { count: 1, total_ns: 10, ..Default::default() });
        }
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let r = Resolver::new(Arc::new(Kallsyms::default()), HashMap::<profiler_common::StackId, Vec<u64>>::new());
        let mut b = ProfileBuilder::new(r).with_user_lock_names(Box::new(Calls(calls.clone())));
        b.prefetch(&agg.snapshot());
        let calls = calls.lock().expect("calls").clone();
        let first_lock = calls.iter().position(|c| c.starts_with("lock ")).expect("a lock named");
        let processes: BTreeSet<&str> = calls[..first_lock].iter().map(String::as_str).collect();
        // Both processes are asked for their names before any lock is read
        // (naming a lock can take long enough for another to exit).
        assert_eq!(processes, BTreeSet::from(["process 100", "process 200"]), "{calls:?}");
        assert_eq!(calls.iter().filter(|c| c.starts_with("lock ")).count(), 3, "{calls:?}");
    }
}
