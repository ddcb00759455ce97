//! Turning stack ids into symbolized frames and a caller.

use std::{collections::HashMap, sync::Arc};

use profiler_common::{STACK_OVERFLOW, STACK_SKIPPED, STACK_USER_LOCK, StackId, is_stack, stack_errno};

use super::{Kallsyms, caller::is_trace_frame, select_caller};
use crate::model::{Frames, placeholders};

/// Where raw stacks come from: the kernel's stack map, or a fixture in tests.
pub trait StackSource {
    /// Instruction pointers of stack `id`, innermost first, followed by
    /// [`CUT_MARK`] when the walk was cut at its caller; `None` if unknown.
    fn frames(&mut self, id: StackId) -> Option<Vec<u64>>;
}

/// Last entry of [`StackSource::frames`] for a stack the kernel walked only
/// to its caller (`profiler_common::STACK_CUT`): no kernel address.
pub const CUT_MARK: u64 = u64::MAX;

impl StackSource for HashMap<StackId, Vec<u64>> {
    fn frames(&mut self, id: StackId) -> Option<Vec<u64>> {
        self.get(&id).cloned()
    }
}

/// A symbolized stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedStack {
    /// `function+0xoff` frames, innermost first, tracing trampolines removed.
    pub frames: Frames,
    /// The caller frame (`function+0xoff`) or a bracketed reason.
    pub caller: String,
    /// The caller's function name (no offset), for naming heuristics.
    pub caller_fn: String,
}

impl ResolvedStack {
    /// What callers are merged by: the symbolized frames (stack ids that
    /// resolve alike are one caller), or the caller text when there are none.
    pub fn group_key(&self) -> Frames {
        if self.frames.is_empty() { Frames::from([self.caller.clone()]) } else { self.frames.clone() }
    }
}

/// How many top frames may belong to the tracing machinery.
const TRACE_PREFIX_MAX: usize = 6;

/// Resolves and caches stacks. An id names one stack for the whole session
/// (it is the hash of the frames, see `profiler_common::StackId`), so a
/// symbolized stack stays right however long it is kept; the kernel's map
/// may forget a stack once it has been read here.
pub struct Resolver<S> {
    ks: Arc<Kallsyms>,
    source: S,
    cache: HashMap<StackId, ResolvedStack>,
    evicted: u64,
    read: u64,
}

impl<S: StackSource> Resolver<S> {
    /// A resolver over a (shared) symbol table and a stack source.
    pub fn new(ks: Arc<Kallsyms>, source: S) -> Self {
        Resolver { ks, source, cache: HashMap::new(), evicted: 0, read: 0 }
    }

    /// The symbol table.
    pub fn kallsyms(&self) -> &Kallsyms {
        &self.ks
    }

    /// Forgets the symbolized stacks whose ids `keep` rejects (rows that
    /// referenced them were aged out); they are resolved again if they return.
    pub fn retain(&mut self, keep: impl Fn(StackId) -> bool) {
        self.cache.retain(|id, _| keep(*id));
    }

    /// Stacks cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Distinct stacks the kernel's map had forgotten before they were read.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Stacks read from the source and symbolized.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Reads and symbolizes stack `id` now if it is not cached yet, so that
    /// the kernel's map may forget it.
    pub fn prefetch(&mut self, id: StackId) {
        if !self.cache.contains_key(&id) {
            let resolved = self.resolve(id);
            self.cache.insert(id, resolved);
        }
    }

    /// Resolves stack `id` (ids that are not stacks get their reason).
    pub fn stack(&mut self, id: StackId) -> &ResolvedStack {
        self.prefetch(id);
        &self.cache[&id]
    }

    fn resolve(&mut self, id: StackId) -> ResolvedStack {
        let placeholder = |why: String| ResolvedStack { frames: Frames::from([]), caller: why.clone(), caller_fn: why };
        if id == STACK_OVERFLOW {
            return placeholder(placeholders::OTHER_STACKS.into());
        }
        if id == STACK_SKIPPED {
            return placeholder(placeholders::STACK_SKIPPED.into());
        }
        if id == STACK_USER_LOCK {
            return placeholder(placeholders::USER_LOCK.into());
        }
        if !is_stack(id) {
            return placeholder(placeholders::stack_not_recorded(stack_errno(id).unwrap_or(0)));
        }
        let Some(mut ips) = self.source.frames(id) else {
            self.evicted += 1;
            return placeholder(placeholders::STACK_EVICTED.into());
        };
        self.read += 1;
        let cut = ips.last() == Some(&CUT_MARK);
        if cut {
            ips.pop();
        }
        let caller_idx = select_caller(&ips, &self.ks);
        // tp_btf stacks start with the BPF program (unnamed when
        // bpf_jit_kallsyms is off) and the tracing trampoline: drop
        // everything up to the last tracing frame near the top.
        let skip = ips
            .iter()
            .take(TRACE_PREFIX_MAX)
            .rposition(|ip| self.ks.lookup(*ip).is_some_and(|(s, _)| is_trace_frame(&s.name)))
            .map_or(0, |i| i + 1);
        let mut frames = Vec::with_capacity(ips.len());
        let mut caller = None;
        for (i, ip) in ips.iter().enumerate().skip(skip) {
            let sym = self.ks.lookup(*ip);
            let text = self.ks.format(*ip);
            if Some(i) == caller_idx {
                caller = Some((text.clone(), sym.map(|(s, _)| s.name.clone()).unwrap_or_default()));
            }
            frames.push(text);
        }
        if cut {
            frames.push(placeholders::STACK_CUT.into());
        }
        match caller {
            Some((caller, caller_fn)) => ResolvedStack { frames: frames.into(), caller, caller_fn },
            None => ResolvedStack {
                frames: frames.into(),
                caller: placeholders::UNKNOWN_CALLER.into(),
                caller_fn: placeholders::UNKNOWN_FN.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KS: &str = "\
ffffffff81100000 T bpf_trace_run2
ffffffff81200000 T __mutex_lock.constprop.0
ffffffff816e4c40 t anon_pipe_write
ffffffff816e5000 T vfs_write
ffffffffa0000000 t bpf_prog_6deef7357e7b4530_contention_begin_btf\t[bpf]
";

    #[test]
    fn strips_trampolines_and_finds_caller() {
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks = HashMap::from([(
            7u64,
            vec![0xffffffffa0000010, 0xffffffff81100008, 0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004],
        )]);
        let mut r = Resolver::new(Arc::new(ks), stacks);
        let s = r.stack(7).clone();
        assert_eq!(*s.frames, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10", "vfs_write+0x4"]);
        assert_eq!(s.caller, "anon_pipe_write+0x10");
        r.prefetch(7);
        assert_eq!((r.read(), r.evicted()), (1, 0));
        assert_eq!(s.caller_fn, "anon_pipe_write");
    }

    #[test]
    fn a_stack_cut_at_its_caller_keeps_the_caller_and_says_where_it_stops() {
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks =
            HashMap::from([(3u64, vec![0xffffffff81100008, 0xffffffff81200010, 0xffffffff816e4c50, CUT_MARK])]);
        let mut r = Resolver::new(Arc::new(ks), stacks);
        let s = r.stack(3).clone();
        assert_eq!(s.caller, "anon_pipe_write+0x10");
        assert_eq!(*s.frames, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10", placeholders::STACK_CUT]);
    }

    #[test]
    fn unnamed_bpf_program_frame_is_stripped_too() {
        // With net.core.bpf_jit_kallsyms=0 the program's address has no symbol.
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks = HashMap::from([(
            1u64,
            vec![0xffffffffc0026ac5, 0xffffffff81100008, 0xffffffff81200010, 0xffffffff816e4c50],
        )]);
        let mut r = Resolver::new(Arc::new(ks), stacks);
        assert_eq!(*r.stack(1).frames, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10"]);
    }

    #[test]
    fn failures_and_missing_stacks_get_reasons() {
        let mut r = Resolver::new(Arc::new(Kallsyms::default()), HashMap::new());
        let error = profiler_common::stack_error;
        assert_eq!(r.stack(error(12)).caller, "[stack not recorded: the kernel had no memory to store it]");
        assert_eq!(r.stack(error(14)).caller, "[stack not recorded: the kernel could not walk it]");
        assert!(r.stack(error(16)).caller.contains("ring buffer was half full"));
        assert_eq!(r.stack(error(5)).caller, "[stack not recorded: errno 5]");
        assert_eq!(r.stack(STACK_SKIPPED).caller, "[stack not captured: --stack-rate budget spent]");
        assert_eq!(r.stack(STACK_OVERFLOW).caller, "[other stacks: key limit reached]");
        assert_eq!(r.evicted(), 0);
        assert_eq!(r.stack(3).caller, "[stack evicted from the stack map before it was read (raise --stack-map-size)]");
        assert!(r.stack(3).frames.is_empty());
        // Counted once per distinct stack, however often it is asked for.
        r.prefetch(3);
        assert_eq!(r.evicted(), 1);
    }
}
