//! The frames each row kind is drawn and keyed by, innermost first: one
//! definition for folded stacks, flamegraphs, pprof files and `lockprof
//! serve` alike.
//!
//! Blame convention: an owner row's outermost (root) frame names the owner,
//! `[held by <comm>]`, `[held by readers]` or `[owner unknown]`, above the
//! stack the owner acquired the lock with. The bracketed root can never
//! merge with a waiter's stack or be taken for a kernel function.

use super::{CallerProfile, OwnerKind, OwnerProfile, YieldCaller, placeholders};

/// A stack, or its caller alone when the stack is unknown.
fn stack_or_caller<'a>(stack: &'a [String], caller: &'a String) -> &'a [String] {
    if stack.is_empty() { std::slice::from_ref(caller) } else { stack }
}

impl CallerProfile {
    /// The waiters' stack, innermost first (the caller alone when unknown).
    pub fn frames(&self) -> &[String] {
        stack_or_caller(&self.stack, &self.caller)
    }
}

impl YieldCaller {
    /// The yielders' stack, innermost first (the caller alone when unknown).
    pub fn frames(&self) -> &[String] {
        stack_or_caller(&self.stack, &self.caller)
    }
}

impl OwnerProfile {
    /// The owner's acquire stack (or what is known of it), innermost first,
    /// under a root frame naming the owner (see the module documentation);
    /// above it, when the owner was asleep holding the lock, the stack it
    /// slept in under [`placeholders::OWNER_ASLEEP`].
    pub fn frames(&self) -> Vec<String> {
        let mut frames = self.asleep_stack.clone();
        if !frames.is_empty() {
            frames.push(placeholders::OWNER_ASLEEP.to_string());
        }
        let (acquired, root) = match self.kind {
            OwnerKind::Task => (stack_or_caller(&self.stack, &self.caller).to_vec(), placeholders::held_by(&self.comm)),
            OwnerKind::Readers => (Vec::new(), placeholders::HELD_BY_READERS.to_string()),
            OwnerKind::Writer => (Vec::new(), placeholders::HELD_BY_WRITER.to_string()),
            OwnerKind::Unknown => (Vec::new(), placeholders::OWNER_UNKNOWN.to_string()),
        };
        frames.extend(acquired);
        frames.push(root);
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: OwnerKind, comm: &str, caller: &str, stack: &[&str]) -> OwnerProfile {
        OwnerProfile {
            kind,
            tid: 7,
            pid: 7,
            comm: comm.into(),
            caller: caller.into(),
            stack: stack.iter().map(|f| f.to_string()).collect(),
            asleep_stack: Vec::new(),
            waits: 1,
            wait_caused_ns: 1,
            wait_caused_max_ns: 1,
        }
    }

    #[test]
    fn owner_frames_end_in_a_root_naming_the_owner() {
        let w = owner(OwnerKind::Task, "writer", "pipe_write+0x5", &["mutex_lock+0x1", "pipe_write+0x5"]);
        assert_eq!(w.frames(), ["mutex_lock+0x1", "pipe_write+0x5", "[held by writer]"]);
        let unseen = owner(OwnerKind::Task, "", placeholders::ACQUIRED_UNSEEN, &[]);
        assert_eq!(unseen.frames(), [placeholders::ACQUIRED_UNSEEN, "[held by ?]"]);
        let readers = owner(OwnerKind::Readers, "", placeholders::HELD_BY_READERS, &[]);
        assert_eq!(readers.frames(), [placeholders::HELD_BY_READERS]);
        let unknown = owner(OwnerKind::Unknown, "", placeholders::OWNER_UNKNOWN, &[]);
        assert_eq!(unknown.frames(), [placeholders::OWNER_UNKNOWN]);
        let asleep = OwnerProfile { asleep_stack: vec!["schedule+0x2".into(), "unix_stream_sendmsg+0x9".into()], ..w };
        assert_eq!(
            asleep.frames(),
            [
                "schedule+0x2",
                "unix_stream_sendmsg+0x9",
                placeholders::OWNER_ASLEEP,
                "mutex_lock+0x1",
                "pipe_write+0x5",
                "[held by writer]"
            ]
        );
    }
}
