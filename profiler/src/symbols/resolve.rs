//! Turning stack ids into symbolized frames and a caller.

use std::{collections::HashMap, sync::Arc};

use super::{Kallsyms, caller::is_trace_frame, select_caller};
use crate::model::{Frames, placeholders};

/// Where raw stacks come from: the kernel's stack map, or a fixture in tests.
pub trait StackSource {
    /// Instruction pointers of stack `id`, innermost first; `None` if unknown.
    fn frames(&mut self, id: u32) -> Option<Vec<u64>>;
}

impl StackSource for HashMap<u32, Vec<u64>> {
    fn frames(&mut self, id: u32) -> Option<Vec<u64>> {
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

/// Stack id used for waits folded into the overflow row.
pub const OVERFLOW_STACK: i32 = i32::MIN;

/// Resolves and caches stacks (stack ids are stable for a session: the
/// kernel's stack map never reuses an id for another stack).
pub struct Resolver<S> {
    ks: Arc<Kallsyms>,
    source: S,
    cache: HashMap<i32, ResolvedStack>,
}

impl<S: StackSource> Resolver<S> {
    /// A resolver over a (shared) symbol table and a stack source.
    pub fn new(ks: Arc<Kallsyms>, source: S) -> Self {
        Resolver { ks, source, cache: HashMap::new() }
    }

    /// The symbol table.
    pub fn kallsyms(&self) -> &Kallsyms {
        &self.ks
    }

    /// Forgets the symbolized stacks whose ids `keep` rejects (rows that
    /// referenced them were aged out); they are resolved again if they return.
    pub fn retain(&mut self, keep: impl Fn(i32) -> bool) {
        self.cache.retain(|id, _| keep(*id));
    }

    /// Stacks cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Resolves stack `id` (negative ids are capture failures).
    pub fn stack(&mut self, id: i32) -> &ResolvedStack {
        if !self.cache.contains_key(&id) {
            let resolved = self.resolve(id);
            self.cache.insert(id, resolved);
        }
        &self.cache[&id]
    }

    fn resolve(&mut self, id: i32) -> ResolvedStack {
        let placeholder = |why: String| ResolvedStack { frames: Frames::from([]), caller: why.clone(), caller_fn: why };
        if id == OVERFLOW_STACK {
            return placeholder(placeholders::OTHER_STACKS.into());
        }
        if id == profiler_common::STACK_SKIPPED {
            return placeholder(placeholders::STACK_SKIPPED.into());
        }
        if id < 0 {
            return placeholder(placeholders::stack_not_recorded(-id));
        }
        let Some(ips) = self.source.frames(id as u32) else {
            return placeholder(placeholders::STACK_NOT_FOUND.into());
        };
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
            7u32,
            vec![0xffffffffa0000010, 0xffffffff81100008, 0xffffffff81200010, 0xffffffff816e4c50, 0xffffffff816e5004],
        )]);
        let mut r = Resolver::new(Arc::new(ks), stacks);
        let s = r.stack(7).clone();
        assert_eq!(*s.frames, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10", "vfs_write+0x4"]);
        assert_eq!(s.caller, "anon_pipe_write+0x10");
        assert_eq!(s.caller_fn, "anon_pipe_write");
    }

    #[test]
    fn unnamed_bpf_program_frame_is_stripped_too() {
        // With net.core.bpf_jit_kallsyms=0 the program's address has no symbol.
        let ks = Kallsyms::parse(KS.as_bytes()).expect("parse");
        let stacks = HashMap::from([(
            1u32,
            vec![0xffffffffc0026ac5, 0xffffffff81100008, 0xffffffff81200010, 0xffffffff816e4c50],
        )]);
        let mut r = Resolver::new(Arc::new(ks), stacks);
        assert_eq!(*r.stack(1).frames, ["__mutex_lock.constprop.0+0x10", "anon_pipe_write+0x10"]);
    }

    #[test]
    fn failures_and_missing_stacks_get_reasons() {
        let mut r = Resolver::new(Arc::new(Kallsyms::default()), HashMap::new());
        assert_eq!(r.stack(-17).caller, "[stack not recorded: stack map hash collision (raise --stack-map-size)]");
        assert_eq!(r.stack(-12).caller, "[stack not recorded: stack map full (raise --stack-map-size)]");
        assert_eq!(r.stack(3).caller, "[stack not found in stack map]");
        assert_eq!(r.stack(OVERFLOW_STACK).caller, "[other stacks: key limit reached]");
        assert!(r.stack(3).frames.is_empty());
    }
}
