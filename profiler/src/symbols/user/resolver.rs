//! User stacks by id for the profile builder: each pinned when it is first
//! announced (or, failing that, first needed), symbolized when first shown,
//! both kept for the session.

use std::{collections::HashMap, sync::Arc};

use profiler_common::StackId;

use super::{PinnedStack, UserStack, UserSymbolizer};
use crate::pipeline::{UserStackTally, UserStacks};

/// Where user stacks come from: the kernel's map, or a fixture in tests.
pub trait UserStackSource: Send {
    /// The process and frames (innermost first) of user stack `id`, if known.
    fn get(&self, id: StackId) -> Option<(u32, Vec<u64>)>;
    /// The unwinder's counts, when stacks come from copies.
    fn unwind(&self) -> Option<super::unwind::UnwindCounters> {
        None
    }
}

impl UserStackSource for HashMap<StackId, (u32, Vec<u64>)> {
    fn get(&self, id: StackId) -> Option<(u32, Vec<u64>)> {
        HashMap::get(self, &id).cloned()
    }
}

/// Pins and symbolizes user stacks by id.
pub struct UserResolver<S, Y> {
    source: S,
    symbolizer: Y,
    pinned: HashMap<StackId, PinnedStack>,
    symbolized: HashMap<StackId, Arc<UserStack>>,
    /// Ids the map no longer held when they were first needed.
    evicted: u64,
}

impl<S: UserStackSource, Y: UserSymbolizer + Send> UserResolver<S, Y> {
    /// A resolver over the stacks of `source`.
    pub fn new(source: S, symbolizer: Y) -> Self {
        UserResolver { source, symbolizer, pinned: HashMap::new(), symbolized: HashMap::new(), evicted: 0 }
    }

    /// The pinned stack `id`, pinned now if it is not yet; None when the
    /// map forgot it before it was read.
    fn pinned(&mut self, id: StackId) -> Option<&PinnedStack> {
        if !self.pinned.contains_key(&id) {
            let Some((tgid, ips)) = self.source.get(id) else {
                self.evicted += 1;
                return None;
            };
            let p = self.symbolizer.pin(tgid, &ips);
            self.pinned.insert(id, p);
        }
        self.pinned.get(&id)
    }

    /// Symbolized stack `id`, or None when it was evicted before being read.
    pub fn stack(&mut self, id: StackId) -> Option<Arc<UserStack>> {
        if let Some(s) = self.symbolized.get(&id) {
            return Some(s.clone());
        }
        let pinned = self.pinned(id)?.clone();
        let s = self.symbolizer.symbolize(&pinned);
        self.symbolized.insert(id, s.clone());
        Some(s)
    }
}

/// What an evicted user stack shows.
pub const USER_STACK_EVICTED: &str =
    "[user stack evicted from the user stack map before it was read (raise --stack-map-size)]";

impl<S: UserStackSource, Y: UserSymbolizer + Send> UserStacks for UserResolver<S, Y> {
    fn frames(&mut self, id: StackId) -> Vec<String> {
        match self.stack(id) {
            Some(s) => s.frames.iter().map(|f| f.text()).collect(),
            None => vec![USER_STACK_EVICTED.to_string()],
        }
    }

    fn pin(&mut self, id: StackId) {
        let _ = self.pinned(id);
    }

    fn retain(&mut self, keep: &dyn Fn(StackId) -> bool) {
        self.pinned.retain(|id, _| keep(*id));
        self.symbolized.retain(|id, _| keep(*id));
    }

    fn stack(&mut self, id: StackId) -> Option<Arc<UserStack>> {
        UserResolver::stack(self, id)
    }

    fn counters(&self) -> UserStackTally {
        let c = self.symbolizer.counters();
        UserStackTally {
            unpinned: c.unpinned,
            evicted: self.evicted,
            truncated: c.truncated,
            left_code: c.left_code,
            debuginfod_fetched: c.debuginfod_fetched,
            debuginfod_missed: c.debuginfod_missed,
            unwind: self.source.unwind().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::user::{UserFrame, UserStackCounters};

    /// Names every ip `f<ip>`; pins only live pids (even ones).
    #[derive(Default)]
    struct Fake {
        pins: Vec<u32>,
        symbolized: usize,
    }

    impl UserSymbolizer for Fake {
        fn pin(&mut self, pid: u32, ips: &[u64]) -> PinnedStack {
            self.pins.push(pid);
            PinnedStack::unpinned(pid, ips)
        }
        fn symbolize(&mut self, pinned: &PinnedStack) -> Arc<UserStack> {
            self.symbolized += 1;
            let frames = pinned
                .ips()
                .map(|ip| UserFrame { function: Some(format!("f{ip}")), ..UserFrame::unpinned(ip) })
                .collect();
            Arc::new(UserStack { frames, truncated: false })
        }
        fn counters(&self) -> UserStackCounters {
            UserStackCounters::default()
        }
    }

    #[test]
    fn pins_once_symbolizes_once_and_says_when_the_map_forgot_a_stack() {
        let map: HashMap<StackId, (u32, Vec<u64>)> = [(1, (100, vec![7, 8])), (2, (200, vec![9]))].into();
        let mut r = UserResolver::new(map, Fake::default());
        UserStacks::pin(&mut r, 1);
        UserStacks::pin(&mut r, 1);
        assert_eq!(r.symbolizer.pins, [100], "pinned once, against its own process");
        assert_eq!(r.frames(1), ["f7+0x0", "f8+0x0"]);
        assert_eq!(r.frames(1).len(), 2);
        assert_eq!(r.symbolizer.symbolized, 1, "symbolized once");
        assert_eq!(r.frames(3), [USER_STACK_EVICTED]);
        assert_eq!(UserStacks::counters(&r).evicted, 1, "the forgotten stack is counted");
        r.retain(&|id| id == 2);
        assert!(r.pinned.is_empty() && r.symbolized.is_empty());
    }
}
