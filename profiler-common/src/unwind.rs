//! User stacks through code without frame pointers (`--user-stacks`, the
//! unwind mode): at a wait the programs copy the user registers and the top
//! of the user stack; userspace unwinds the copy from the binaries'
//! `.eh_frame`/`.debug_frame` and stores the frames.
//!
//! So that a call path is copied and unwound once, not at every wait,
//! userspace hands the programs an [`UnwindPlan`] per (process, user
//! instruction pointer at the wait): the stack slots its unwinds of that ip
//! read. A wait whose words at the plan's slots equal those of a stack
//! already unwound *is* that stack (each unwind step depends only on the ip
//! and the words it reads, so equal words give equal steps), and takes its
//! id, its [`signature`], without a copy. Any other wait is copied and
//! unwound under an id of its own.

use crate::{StackId, stack_hash_finish, stack_hash_step, user_stack_seed};

/// Bytes of user stack copied, from the stack pointer up.
pub const USER_STACK_COPY_BYTES: usize = 8192;
/// Words in a copy.
pub const USER_STACK_COPY_WORDS: usize = USER_STACK_COPY_BYTES / 8;
/// A copy shorter than [`USER_STACK_COPY_BYTES`] (the top of the stack
/// came first) ends on a multiple of this many bytes.
pub const USER_STACK_COPY_TAIL: usize = 64;
/// Stack slots a plan can name.
pub const UNWIND_PLAN_SLOTS: usize = 40;
/// Plans (and roots) kept (least recently used forgotten).
pub const UNWIND_PLAN_ENTRIES: u32 = 8192;

/// `Config::user_stacks`: off.
pub const USER_STACKS_OFF: u32 = 0;
/// `Config::user_stacks`: the frame-pointer walk (`bpf_get_stack`).
pub const USER_STACKS_FRAME_POINTERS: u32 = 1;
/// `Config::user_stacks`: a copy of the stack, unwound in userspace.
pub const USER_STACKS_UNWIND: u32 = 2;

/// [`UnwindPlan::flags`]: the unwinds of this ip used the frame-pointer
/// register (a rule relative to it, or the frame-pointer fallback), so its
/// distance from the stack pointer is part of the signature.
pub const PLAN_USES_FP: u32 = 1;

/// Where the current task's user registers are (the `USER_REGS_LAYOUT`
/// global: apart from `Config`, which some programs copy to their stack).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UserRegsLayout {
    /// `task_struct.stack`: the base of the task's kernel stack.
    pub task_stack: u32,
    /// From a task's `stack` to the `struct pt_regs` of its user state
    /// (`THREAD_SIZE - sizeof(struct pt_regs)`; x86_64 with FRED pads 16
    /// bytes more, which the programs check).
    pub stack_user_regs: u32,
}

impl UserRegsLayout {
    /// Unknown: no copies.
    pub const UNKNOWN: UserRegsLayout =
        UserRegsLayout { task_stack: crate::UNKNOWN_OFFSET, stack_user_regs: crate::UNKNOWN_OFFSET };
}

/// A thread's user registers at the wait, as far as unwinding needs them.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer (`rip`, `pc`).
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (`rbp`, `x29`).
    pub fp: u64,
    /// Link register (`x30`; 0 on x86_64).
    pub lr: u64,
}

/// Key of the `UNWIND_ROOTS` map (with `ra` 0) and of `UNWIND_PLANS`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UnwindPlanKey {
    /// The process whose address space the stack is in.
    pub tgid: u32,
    pub _pad: u32,
    /// User instruction pointer at the wait.
    pub ip: u64,
    /// The first return address (read at the ip's root slot, or the link
    /// register): call paths through different callers of the function
    /// that waits have plans of their own, so that words only one of them
    /// depends on do not split the other's signatures.
    pub ra: u64,
}

/// `UNWIND_ROOTS` value: the first return address is in the link register.
pub const ROOT_LR: u32 = u32::MAX;
/// `UNWIND_ROOTS` value: the stack ends at the ip (no return address).
pub const ROOT_NONE: u32 = u32::MAX - 1;

/// The stack slots (words from the stack pointer, ascending) whose values
/// decide how a stack from one ip unwinds.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UnwindPlan {
    /// [`PLAN_USES_FP`].
    pub flags: u32,
    /// Slots used, at most [`UNWIND_PLAN_SLOTS`].
    pub n: u32,
    /// Word indices from the stack pointer, each below [`USER_STACK_COPY_WORDS`].
    pub slots: [u16; UNWIND_PLAN_SLOTS],
}

impl UnwindPlan {
    /// No plan: no slot.
    pub const EMPTY: UnwindPlan = UnwindPlan { flags: 0, n: 0, slots: [0; UNWIND_PLAN_SLOTS] };

    /// The slots in use.
    pub fn slots(&self) -> &[u16] {
        let n = if self.n as usize > UNWIND_PLAN_SLOTS { UNWIND_PLAN_SLOTS } else { self.n as usize };
        &self.slots[..n]
    }

    /// Bytes of stack the plan's slots reach (0 without slots).
    pub fn reach(&self) -> usize {
        match self.slots().last() {
            Some(s) => (*s as usize + 1) * 8,
            None => 0,
        }
    }
}

/// A copy of a user stack at a wait (ring buffer record), to be unwound.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct UserStackCopy {
    /// Record kind, [`crate::EVENT_USER_STACK_COPY`].
    pub kind: u32,
    /// The process whose address space the stack is in.
    pub tgid: u32,
    /// The id this wait's stack is recorded under (this copy's own).
    pub id: StackId,
    /// The stack's [`signature`] under `plan` (0: there was no plan).
    pub signature: StackId,
    /// The registers.
    pub regs: UserRegs,
    /// Bytes copied from `regs.sp`.
    pub len: u32,
    pub _pad: u32,
    /// The plan the signature was taken under.
    pub plan: UnwindPlan,
    /// The stack, from `regs.sp` up (`len` bytes valid).
    pub words: [u64; USER_STACK_COPY_WORDS],
}

/// Start of a signature: the process, the ip, the link register and, when
/// the plan says so, the frame pointer's distance from the stack pointer.
#[inline(always)]
pub const fn signature_start(tgid: u32, regs: &UserRegs, flags: u32) -> u64 {
    let mut h = stack_hash_step(user_stack_seed(tgid), SIGNATURE_SEED);
    h = stack_hash_step(h, regs.ip);
    h = stack_hash_step(h, regs.lr);
    h = stack_hash_step(h, flags as u64);
    if flags & PLAN_USES_FP != 0 {
        h = stack_hash_step(h, regs.fp.wrapping_sub(regs.sp));
    }
    h
}

/// One slot of a signature: its index and its word.
#[inline(always)]
pub const fn signature_step(h: u64, slot: u16, word: u64) -> u64 {
    stack_hash_step(stack_hash_step(h, slot as u64), word)
}

/// The signature of a stack under `plan`: `word(slot)` is the word at that
/// slot (0 when it was not copied).
pub fn signature(tgid: u32, regs: &UserRegs, plan: &UnwindPlan, word: impl Fn(u16) -> u64) -> StackId {
    let mut h = signature_start(tgid, regs, plan.flags);
    for s in plan.slots() {
        h = signature_step(h, *s, word(*s));
    }
    stack_hash_finish(h, plan.n as u64)
}

/// Folded first into every signature: signatures and frame hashes differ.
pub const SIGNATURE_SEED: u64 = 0x5851_f42d_4c95_7f2d;

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(flags: u32, slots: &[u16]) -> UnwindPlan {
        let mut p = UnwindPlan { flags, n: slots.len() as u32, ..UnwindPlan::EMPTY };
        p.slots[..slots.len()].copy_from_slice(slots);
        p
    }

    #[test]
    fn a_signature_depends_on_the_planned_words_only() {
        let regs = UserRegs { ip: 0x7f00_0000_1234, sp: 0x7ffc_0000_0000, fp: 17, lr: 0 };
        let p = plan(0, &[1, 5]);
        let words = |s: u16| u64::from(s) * 100;
        let base = signature(7, &regs, &p, words);
        assert_eq!(base, signature(7, &regs, &p, |s| if s == 3 { 99 } else { words(s) }), "slot 3 is not planned");
        assert_ne!(base, signature(7, &regs, &p, |s| if s == 5 { 99 } else { words(s) }));
        assert_ne!(base, signature(8, &regs, &p, words), "another process");
        assert_ne!(base, signature(7, &UserRegs { ip: 1, ..regs }, &p, words), "another ip");
        // The frame pointer counts only when the plan uses it, as a distance.
        assert_eq!(base, signature(7, &UserRegs { fp: 99, ..regs }, &p, words));
        let fp = plan(PLAN_USES_FP, &[1, 5]);
        assert_ne!(signature(7, &regs, &fp, words), signature(7, &UserRegs { fp: 99, ..regs }, &fp, words));
        let moved = UserRegs { sp: regs.sp + 64, fp: regs.fp + 64, ..regs };
        assert_eq!(signature(7, &regs, &fp, words), signature(7, &moved, &fp, words));
        assert_ne!(base, signature(7, &regs, &plan(0, &[1, 6]), words), "other slots");
        assert!(crate::is_stack(base));
    }

    #[test]
    fn plan_reach_and_copy_layout() {
        assert_eq!(plan(0, &[]).reach(), 0);
        assert_eq!(plan(0, &[0, 9]).reach(), 80);
        assert_eq!(UnwindPlan { n: 999, ..UnwindPlan::EMPTY }.slots().len(), UNWIND_PLAN_SLOTS);
        assert_eq!(core::mem::size_of::<UnwindPlan>(), 8 + 2 * UNWIND_PLAN_SLOTS);
        assert_eq!(core::mem::size_of::<UserStackCopy>() % 8, 0);
        assert_eq!(core::mem::offset_of!(UserStackCopy, kind), 0);
        assert_eq!(
            core::mem::size_of::<UserStackCopy>(),
            8 + 8 + 8 + 32 + 8 + core::mem::size_of::<UnwindPlan>() + USER_STACK_COPY_BYTES
        );
        assert_eq!(USER_STACK_COPY_BYTES % USER_STACK_COPY_TAIL, 0);
    }
}
