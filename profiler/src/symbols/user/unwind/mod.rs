//! User stacks through code without frame pointers: the programs copy the
//! user registers and stack at a wait ([`UserStackCopy`]); this thread
//! unwinds each copy with framehop from the binaries' `.eh_frame` and
//! `.debug_frame`, keeps the frames under the copy's id, and teaches the
//! programs the stack's signature so the same call path is not copied again
//! (see `profiler_common::UnwindPlan`).

mod audit;
mod modules;
mod prologue;
mod walk;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, Receiver, SyncSender, TrySendError},
    },
    thread,
};

use framehop::Module;
use profiler_common::{
    MAX_STACK_DEPTH, ROOT_LR, ROOT_NONE, StackId, StoredUserStack, UNWIND_PLAN_SLOTS, UnwindPlan, UnwindPlanKey,
    UserStackCopy, signature,
};
use serde::Serialize;

pub use self::audit::{AuditError, FramePointers, MappedBinary, ReadError, UnwindAudit, UnwindInfo, Verdict, audit};
use self::{
    modules::{Binaries, ProcessModule},
    walk::{Copy, End, NativeCache, NativeUnwinder},
};
use super::UserStackSource;

/// Copies waiting to be unwound beyond which new ones are dropped (counted).
const QUEUE: usize = 4096;
/// Processes whose modules are kept before the cache starts afresh.
const MAX_PROCESSES: usize = 512;

/// Where the unwinder writes: the programs' plan map and user stack map.
pub trait UnwindSink: Send + 'static {
    /// Sets the root (first return address slot) of `key` (`ra` 0); false
    /// if the kernel refused.
    fn set_root(&mut self, key: UnwindPlanKey, root: u32) -> bool;
    /// Sets the plan of `key`; false if the kernel refused.
    fn set_plan(&mut self, key: UnwindPlanKey, plan: &UnwindPlan) -> bool;
    /// Stores a stack under its signature; false if the kernel refused.
    fn set_stack(&mut self, id: StackId, stack: &StoredUserStack) -> bool;
}

/// Unwound stacks by id (a copy's own id, or a signature).
pub type Unwound = Arc<Mutex<HashMap<StackId, (u32, Vec<u64>)>>>;

/// What the unwinder did, for the counters lockprof shows.
#[derive(Debug, Default)]
pub struct UnwindStats {
    /// Copies unwound.
    pub unwound: AtomicU64,
    /// Copies whose stack was already known by its signature (taken before
    /// the programs learned it): not unwound again.
    pub known: AtomicU64,
    /// Of those, stacks that reached their outermost frame.
    pub complete: AtomicU64,
    /// Stacks cut because the unwind needed stack beyond the copy.
    pub copy_short: AtomicU64,
    /// Stacks cut because no unwind rule applied (no unwind information,
    /// or one that led nowhere).
    pub no_rule: AtomicU64,
    /// Stacks cut at the depth limit.
    pub deep: AtomicU64,
    /// Copies whose process was gone before its binaries were read: only
    /// the innermost frame is kept.
    pub no_process: AtomicU64,
    /// Copies dropped because the unwinder was behind.
    pub dropped: AtomicU64,
    /// Call paths that could not be given a signature (their ip's plan is
    /// full): each of their waits is copied.
    pub plan_full: AtomicU64,
    /// Signatures taught to the programs.
    pub signatures: AtomicU64,
    /// Plan or stack writes the kernel refused.
    pub map_refused: AtomicU64,
    /// Binaries that could not be read or parsed (their frames unwind by
    /// frame pointer, if at all).
    pub binaries_unreadable: AtomicU64,
}

/// A snapshot of [`UnwindStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UnwindCounters {
    pub unwound: u64,
    pub complete: u64,
    pub copy_short: u64,
    pub no_rule: u64,
    pub deep: u64,
    pub no_process: u64,
    pub dropped: u64,
    pub plan_full: u64,
    pub signatures: u64,
    pub map_refused: u64,
    pub binaries_unreadable: u64,
}

impl UnwindStats {
    /// The counts now.
    pub fn snapshot(&self) -> UnwindCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UnwindCounters {
            unwound: g(&self.unwound),
            complete: g(&self.complete),
            copy_short: g(&self.copy_short),
            no_rule: g(&self.no_rule),
            deep: g(&self.deep),
            no_process: g(&self.no_process),
            dropped: g(&self.dropped),
            plan_full: g(&self.plan_full),
            signatures: g(&self.signatures),
            map_refused: g(&self.map_refused),
            binaries_unreadable: g(&self.binaries_unreadable),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The reader's end: hands copies to the unwinder thread.
#[derive(Clone)]
pub struct CopySender {
    tx: SyncSender<Box<UserStackCopy>>,
    stats: Arc<UnwindStats>,
}

impl CopySender {
    /// Queues a copy; counts it dropped when the unwinder is behind.
    pub fn send(&self, copy: Box<UserStackCopy>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(copy) {
            bump(&self.stats.dropped);
        }
    }
}

/// Starts the unwinder thread: unwound ids go to `announce` (to be pinned
/// while the process lives).
pub fn spawn(
    sink: impl UnwindSink,
    unwound: Unwound,
    stats: Arc<UnwindStats>,
    announce: impl Fn(StackId) + Send + 'static,
) -> std::io::Result<CopySender> {
    let (tx, rx) = mpsc::sync_channel::<Box<UserStackCopy>>(QUEUE);
    let worker_stats = stats.clone();
    thread::Builder::new().name("lockprof-unwind".into()).spawn(move || {
        let mut w = Worker::new(sink, unwound, worker_stats);
        run(&mut w, rx, &announce);
    })?;
    Ok(CopySender { tx, stats })
}

fn run(w: &mut Worker<impl UnwindSink>, rx: Receiver<Box<UserStackCopy>>, announce: &dyn Fn(StackId)) {
    for copy in rx {
        for id in w.unwind(&copy) {
            announce(id);
        }
    }
}

/// A process's modules and the unwinder over them.
struct Process {
    unwinder: NativeUnwinder,
    code: Vec<std::ops::Range<u64>>,
}

struct Worker<S> {
    sink: S,
    unwound: Unwound,
    stats: Arc<UnwindStats>,
    binaries: Binaries,
    processes: HashMap<u32, Process>,
    cache: NativeCache,
    /// The roots given to the programs.
    roots: HashMap<UnwindPlanKey, u32>,
    /// The plans given to the programs.
    plans: HashMap<UnwindPlanKey, UnwindPlan>,
}

impl<S: UnwindSink> Worker<S> {
    fn new(sink: S, unwound: Unwound, stats: Arc<UnwindStats>) -> Self {
        Worker {
            sink,
            unwound,
            stats,
            binaries: Binaries::default(),
            processes: HashMap::new(),
            cache: NativeCache::new(),
            roots: HashMap::new(),
            plans: HashMap::new(),
        }
    }

    /// Unwinds one copy; the ids that now have frames.
    fn unwind(&mut self, copy: &UserStackCopy) -> Vec<StackId> {
        let len = (copy.len as usize / 8).min(copy.words.len());
        let c = Copy { regs: copy.regs, words: &copy.words[..len] };
        let tgid = copy.tgid;
        if let Some(frames) = self.known(&c, tgid) {
            // A copy taken before the programs learned its signature (a
            // storm's first milliseconds queue many): no unwind.
            bump(&self.stats.known);
            self.keep(copy.id, tgid, frames);
            return vec![copy.id];
        }
        if !ensure_process(&mut self.processes, &mut self.binaries, &self.stats, tgid, c.regs.ip) {
            bump(&self.stats.no_process);
            self.keep(copy.id, tgid, vec![c.regs.ip]);
            return vec![copy.id];
        }
        let Some(process) = self.processes.get(&tgid) else {
            return Vec::new();
        };
        let unwinder = &process.unwinder;
        let w = walk::walk(unwinder, &mut self.cache, &c);
        bump(&self.stats.unwound);
        bump(match w.end {
            End::Complete => &self.stats.complete,
            End::CopyShort => &self.stats.copy_short,
            End::Deep => &self.stats.deep,
            End::Stuck => &self.stats.no_rule,
        });
        let (slots, flags) = walk::plan(unwinder, &mut self.cache, &c, &w);
        log::debug!("unwound in {tgid}: {} frames, {:?}; plan {slots:?}, flags {flags}", w.frames.len(), w.end);
        let mut ids = vec![copy.id];
        self.keep(copy.id, tgid, w.frames.clone());
        let (root, ra) = root_of(&w, &c);
        let key = UnwindPlanKey { tgid, _pad: 0, ip: c.regs.ip, ra: 0 };
        // Given again when the programs found no plan: their LRU map may
        // have forgotten the root (as `learn` gives a forgotten plan again).
        if self.roots.get(&key) != Some(&root) || copy.plan.n == 0 {
            if !self.sink.set_root(key, root) {
                bump(&self.stats.map_refused);
            }
            self.roots.insert(key, root);
        }
        match self.learn(UnwindPlanKey { ra, ..key }, &slots, flags, &copy.plan) {
            Some(plan) => {
                let word = |s: u16| c.words.get(s as usize).copied().unwrap_or(0);
                let sig = signature(tgid, &c.regs, &plan, word);
                let mut stored = StoredUserStack { nr: 0, tgid, ips: [0; MAX_STACK_DEPTH] };
                let n = w.frames.len().min(MAX_STACK_DEPTH);
                stored.ips[..n].copy_from_slice(&w.frames[..n]);
                stored.nr = n as u32;
                self.keep(sig, tgid, w.frames);
                if self.sink.set_stack(sig, &stored) {
                    bump(&self.stats.signatures);
                } else {
                    bump(&self.stats.map_refused);
                }
                ids.push(sig);
            }
            None => bump(&self.stats.plan_full),
        }
        ids
    }

    /// The frames of copy `c` when its signature under the plan learned for
    /// it is already known: equal words at the slots its unwinding depends
    /// on are the same stack (see `profiler_common::UnwindPlan`).
    fn known(&self, c: &Copy<'_>, tgid: u32) -> Option<Vec<u64>> {
        let word = |s: u16| c.words.get(usize::from(s)).copied().unwrap_or(0);
        let key = UnwindPlanKey { tgid, _pad: 0, ip: c.regs.ip, ra: 0 };
        let ra = match *self.roots.get(&key)? {
            ROOT_LR => c.regs.lr,
            ROOT_NONE => 0,
            slot => c.words.get(usize::try_from(slot).ok()?).copied()?,
        };
        let plan = self.plans.get(&UnwindPlanKey { ra, ..key })?;
        let sig = signature(tgid, &c.regs, plan, word);
        self.unwound.lock().ok()?.get(&sig).map(|(_, frames)| frames.clone())
    }

    /// The plan for `key` that covers `slots` and `flags` (given to the
    /// programs if it changed, or if theirs is not it: a map that forgot
    /// it); None when the union would not fit.
    fn learn(&mut self, key: UnwindPlanKey, slots: &[u16], flags: u32, theirs: &UnwindPlan) -> Option<UnwindPlan> {
        let old = self.plans.get(&key).copied().unwrap_or(UnwindPlan::EMPTY);
        let plan = union(&old, slots, flags)?;
        if plan != *theirs {
            if !self.sink.set_plan(key, &plan) {
                bump(&self.stats.map_refused);
            }
            self.plans.insert(key, plan);
        }
        Some(plan)
    }

    fn keep(&self, id: StackId, tgid: u32, frames: Vec<u64>) {
        if let Ok(mut t) = self.unwound.lock() {
            t.insert(id, (tgid, frames));
        }
    }
}

/// The root of unwind `w` of `c` (where its first return address is) and
/// that address.
fn root_of(w: &walk::Walk, c: &Copy<'_>) -> (u32, u64) {
    match (w.frames.get(1), w.ra_slots.first()) {
        (None, _) => (ROOT_NONE, 0),
        // Every return address was read from the stack.
        (Some(ra), Some(slot)) if w.ra_slots.len() + 1 == w.frames.len() => {
            (u32::from(*slot), c.words.get(usize::from(*slot)).copied().unwrap_or(*ra))
        }
        // The first came from the link register.
        (Some(_), _) => (ROOT_LR, c.regs.lr),
    }
}

/// Makes sure `processes` has process `tgid`'s modules, read again when
/// `ip` is in none of them (code loaded since); false when the process is
/// gone.
fn ensure_process(
    processes: &mut HashMap<u32, Process>,
    binaries: &mut Binaries,
    stats: &UnwindStats,
    tgid: u32,
    ip: u64,
) -> bool {
    if processes.get(&tgid).is_some_and(|p| p.code.iter().any(|r| r.contains(&ip))) {
        return true;
    }
    let before = binaries.unreadable;
    // An exiting process's maps read empty: gone too.
    let Some(modules) = binaries.modules(tgid).filter(|m| !m.is_empty()) else {
        return false;
    };
    stats.binaries_unreadable.fetch_add(binaries.unreadable - before, Ordering::Relaxed);
    if processes.len() >= MAX_PROCESSES {
        processes.clear();
    }
    processes.insert(tgid, process_of(&modules));
    true
}

/// `old` widened to `slots` and `flags`; None when it would not fit.
fn union(old: &UnwindPlan, slots: &[u16], flags: u32) -> Option<UnwindPlan> {
    let mut all: Vec<u16> = old.slots().iter().chain(slots).copied().collect();
    all.sort_unstable();
    all.dedup();
    if all.len() > UNWIND_PLAN_SLOTS || all.iter().any(|s| *s as usize >= profiler_common::USER_STACK_COPY_WORDS) {
        return None;
    }
    let mut plan = UnwindPlan { flags: old.flags | flags, n: all.len() as u32, ..UnwindPlan::EMPTY };
    plan.slots[..all.len()].copy_from_slice(&all);
    Some(plan)
}

fn process_of(modules: &[ProcessModule]) -> Process {
    let code = modules.iter().map(|m| m.mapping.range.clone()).collect();
    let unwinder = walk::unwinder(
        modules
            .iter()
            .map(|m| Module::new(m.mapping.path.clone(), m.mapping.range.clone(), m.base, m.binary.sections.clone())),
    );
    Process { unwinder, code }
}

/// Stacks from the unwinder first, else from the kernel's map.
pub struct UnwoundOr<S> {
    pub unwound: Unwound,
    pub kernel: S,
    pub stats: Arc<UnwindStats>,
}

impl<S: UserStackSource> UserStackSource for UnwoundOr<S> {
    fn get(&self, id: StackId) -> Option<(u32, Vec<u64>)> {
        if let Some(s) = self.unwound.lock().ok().and_then(|t| t.get(&id).cloned()) {
            return Some(s);
        }
        self.kernel.get(id)
    }

    fn unwind(&self) -> Option<UnwindCounters> {
        Some(self.stats.snapshot())
    }
}

#[cfg(test)]
mod tests;
