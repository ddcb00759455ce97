//! Stack ids and the stored stacks.
//!
//! A captured stack's id is a 64-bit hash of its frames and the key of the
//! `STACKS` map (an LRU hash map). An id therefore names one stack for the
//! whole session: the map may forget stacks nothing has used for a while,
//! and a forgotten stack captured again comes back under the same id, so no
//! record, aggregate or state map entry ever comes to mean another stack.
//! Userspace keeps the stacks it has symbolized; the kernel's map only has
//! to hold those not yet read. (The kernel's own stack-trace map hands out
//! `hash & (buckets - 1)` and refuses a stack whose bucket is taken: ids run
//! out and collide over a daemon's life.)
//!
//! Ids with the top 16 bits all set are not stacks but the reason there is
//! none ([`stack_error`], [`STACK_SKIPPED`], [`STACK_OVERFLOW`]); a hash
//! landing there is moved out of that range ([`stack_hash_finish`]).

use crate::MAX_STACK_DEPTH;

/// A stack's id (see the module documentation).
pub type StackId = u64;

/// Ids from here up are reasons, not stacks.
pub const NO_STACK_BASE: StackId = 0xffff_0000_0000_0000;

/// The per-CPU stack budget was spent and no reusable stack was known.
pub const STACK_SKIPPED: StackId = u64::MAX;

/// Userspace: the row folds waits of many stacks (its key limit was reached).
pub const STACK_OVERFLOW: StackId = u64::MAX - 1;

/// User stack of a wait recorded without `--user-stacks` (and of blame
/// rows, whose owner is another task): no user part at all.
pub const USER_STACK_OFF: StackId = u64::MAX - 2;

/// The waiter has no user context (a kernel thread, the idle task): the
/// kernel stack is the whole story.
pub const USER_STACK_NONE: StackId = u64::MAX - 3;

/// Kernel stack of a user-space lock's wait (a futex): the kernel part is
/// the system call's entry and nothing else, so it is not walked; the
/// user stack is the wait's stack.
pub const STACK_USER_LOCK: StackId = u64::MAX - 4;

/// The stack could not be captured or stored: `errno` (positive) says why.
#[inline(always)]
pub const fn stack_error(errno: u32) -> StackId {
    NO_STACK_BASE | errno as u64
}

/// Whether `id` names a stored stack (not a reason).
#[inline(always)]
pub const fn is_stack(id: StackId) -> bool {
    id < NO_STACK_BASE
}

/// The errno of a [`stack_error`] id.
pub const fn stack_errno(id: StackId) -> Option<u32> {
    if id >= NO_STACK_BASE && id & 0x0000_ffff_0000_0000 == 0 { Some(id as u32) } else { None }
}

/// Seed of the frame hash.
pub const STACK_HASH_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Folds one frame into a stack hash.
#[inline(always)]
pub const fn stack_hash_step(h: u64, ip: u64) -> u64 {
    (h ^ ip).wrapping_mul(0xff51_afd7_ed55_8ccd).rotate_left(29)
}

/// The id of a stack whose frames were folded into `h` with
/// [`stack_hash_step`], `nr` of them: murmur3's finalizer, moved out of the
/// reason range.
#[inline(always)]
pub const fn stack_hash_finish(h: u64, nr: u64) -> StackId {
    let mut h = h ^ nr;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    if is_stack(h) { h } else { h & !(1 << 63) }
}

/// The id of the stack `ips` (innermost first).
pub fn stack_id_of(ips: &[u64]) -> StackId {
    let mut h = STACK_HASH_SEED;
    for ip in ips {
        h = stack_hash_step(h, *ip);
    }
    stack_hash_finish(h, ips.len() as u64)
}

/// Seed of a user stack's frame hash in process `tgid`: the same
/// addresses in two processes are two stacks (each is symbolized against its
/// own process's mappings).
#[inline(always)]
pub const fn user_stack_seed(tgid: u32) -> u64 {
    stack_hash_step(USER_STACK_SEED, tgid as u64)
}

/// Seed of the user frame hash, before the process is folded in.
pub const USER_STACK_SEED: u64 = 0x2545_f491_4f6c_dd1d;

/// The id of the user stack `ips` (innermost first) of process `tgid`.
pub fn user_stack_id_of(tgid: u32, ips: &[u64]) -> StackId {
    let mut h = user_stack_seed(tgid);
    for ip in ips {
        h = stack_hash_step(h, *ip);
    }
    stack_hash_finish(h, ips.len() as u64)
}

/// Value of the `USER_STACKS` map: a process's user stack, `nr`
/// instruction pointers, innermost first (entries past `nr` are garbage).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StoredUserStack {
    /// Frames in `ips`.
    pub nr: u32,
    /// The process whose address space the frames are in.
    pub tgid: u32,
    /// Instruction pointers.
    pub ips: [u64; MAX_STACK_DEPTH],
}

impl StoredUserStack {
    /// The frames.
    pub fn frames(&self) -> &[u64] {
        let n = if self.nr as usize > MAX_STACK_DEPTH { MAX_STACK_DEPTH } else { self.nr as usize };
        &self.ips[..n]
    }
}

/// Frames a wait's kernel stack is walked to when the `--stack-rate` budget
/// is spent and no reusable stack is known: enough to pass the tracing
/// frames (at most 6) and the lock's own functions (at most 4: slowpath,
/// its wrapper, the lock function and an inlined helper's frame) to the
/// caller. Such a stack is [`STACK_CUT`].
pub const CALLER_DEPTH: u32 = 12;

/// Bit of [`StoredStack::nr`]: the walk stopped at [`CALLER_DEPTH`] frames
/// on purpose (the budget was spent), so the stack's root is not the
/// thread's. Part of the hash, so a cut stack never shares an id with a
/// whole one.
pub const STACK_CUT: u64 = 1 << 32;

/// Value of the `STACKS` map: `nr` instruction pointers, innermost first
/// (entries past `nr` are garbage), and [`STACK_CUT`].
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StoredStack {
    /// Frames in `ips` (low 32 bits), and [`STACK_CUT`].
    pub nr: u64,
    /// Instruction pointers.
    pub ips: [u64; MAX_STACK_DEPTH],
}

impl StoredStack {
    /// The frames.
    pub fn frames(&self) -> &[u64] {
        let nr = self.nr & (STACK_CUT - 1);
        let n = if nr as usize > MAX_STACK_DEPTH { MAX_STACK_DEPTH } else { nr as usize };
        &self.ips[..n]
    }

    /// Whether the walk was cut at [`CALLER_DEPTH`] on purpose.
    pub fn is_cut(&self) -> bool {
        self.nr & STACK_CUT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_stacks_do_not_overlap() {
        assert!(!is_stack(STACK_SKIPPED) && !is_stack(STACK_OVERFLOW) && !is_stack(stack_error(14)));
        assert_eq!(stack_errno(stack_error(14)), Some(14));
        assert_eq!(stack_errno(STACK_SKIPPED), None);
        assert_eq!(stack_errno(STACK_OVERFLOW), None);
        assert_eq!(stack_errno(12345), None);
        // A hash in the reason range is moved out of it.
        assert!(is_stack(stack_hash_finish(0, 0)));
        for nr in 0..10_000u64 {
            assert!(is_stack(stack_hash_finish(nr.wrapping_mul(0x1234_5678_9abc_def1), nr)));
        }
    }

    #[test]
    fn ids_depend_on_every_frame_and_their_order() {
        let a = [0xffff_ffff_8110_0000u64, 0xffff_ffff_8120_0010, 0xffff_ffff_816e_4c50];
        let b = [a[0], a[2], a[1]];
        let c = [a[0], a[1]];
        assert_eq!(stack_id_of(&a), stack_id_of(&a));
        assert_ne!(stack_id_of(&a), stack_id_of(&b));
        assert_ne!(stack_id_of(&a), stack_id_of(&c));
        assert_ne!(stack_id_of(&[]), stack_id_of(&[0]));
    }

    #[test]
    fn user_stack_ids_depend_on_the_process() {
        let ips = [0x5555_5555_1139u64, 0x7f12_3456_7890];
        assert_ne!(user_stack_id_of(100, &ips), user_stack_id_of(101, &ips));
        assert_ne!(user_stack_id_of(100, &ips), stack_id_of(&ips));
        assert_ne!(user_stack_id_of(100, &ips), user_stack_id_of(100, &ips[..1]));
        assert!(is_stack(user_stack_id_of(100, &ips)));
        assert!(!is_stack(USER_STACK_OFF) && !is_stack(USER_STACK_NONE));
        assert_eq!(stack_errno(USER_STACK_OFF), None);
        assert_eq!(core::mem::size_of::<StoredUserStack>(), core::mem::size_of::<StoredStack>());
    }

    #[test]
    fn stored_stack_layout() {
        assert_eq!(core::mem::size_of::<StoredStack>(), 8 * (MAX_STACK_DEPTH + 1));
        let s = StoredStack { nr: 2, ips: [7; MAX_STACK_DEPTH] };
        assert_eq!(s.frames(), &[7, 7]);
        let bad = StoredStack { nr: 10_000, ips: [0; MAX_STACK_DEPTH] };
        assert_eq!(bad.frames().len(), MAX_STACK_DEPTH);
        assert!(!s.is_cut() && !bad.is_cut());
        let cut = StoredStack { nr: STACK_CUT | 3, ips: [7; MAX_STACK_DEPTH] };
        assert_eq!((cut.frames().len(), cut.is_cut()), (3, true));
    }
}
