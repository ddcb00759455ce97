//! Values of the programs' state maps (waits in progress, holds, yield_to
//! calls in progress, the stack budget).

use crate::StackId;

/// Who held a lock when a wait on it began (`Owner::kind`).
pub mod owner {
    /// Not known: the lock type records no owner, the kernel's layout is
    /// unknown, or the lock was free again by the time it was read.
    pub const UNKNOWN: u32 = 0;
    /// A task (`Owner::tid` and friends).
    pub const TASK: u32 = 1;
    /// An rwsem held by readers (`Owner::tid` holds their count when the
    /// kernel exposes it, else 0).
    pub const READERS: u32 = 2;
    /// A reader/writer spinlock (a qrwlock, `tasklist_lock`) held by a
    /// writer: its lock word says so, but records no owner to name
    /// (`Owner::tid` 0).
    pub const WRITER: u32 = 3;
    /// The owner thread id of [`WRITER`]'s blame rows: no thread has it
    /// (pid_max is at most 2^22).
    pub const WRITER_TID: u32 = u32::MAX - 1;
}

/// The holder of a lock when a wait on it began. (Its `Default` stays
/// derived, all zeros: a hand-written one with `STACK_SKIPPED` in `stack_id`
/// changed the begin programs' code enough to put 6.1's verifier past its
/// 1M-instruction limit with `--cgroup`.)
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// [`owner`] kind.
    pub kind: u32,
    /// Owner thread id (readers: their count, if known).
    pub tid: u32,
    /// Owner process id.
    pub tgid: u32,
    /// Reserved, zero.
    pub _pad: u32,
    /// The stack the owner acquired the lock with, when it acquired it after
    /// a wait lockprof saw (else [`crate::STACK_SKIPPED`]).
    pub stack_id: StackId,
    /// The owner's `task_struct` (its `comm` is read when a record or a
    /// blame aggregate needs it).
    pub task: u64,
    /// Owner `comm` (filled in records and blame aggregates).
    pub comm: [u8; 16],
}

impl Owner {
    /// The owner thread id its blame aggregates are keyed by: the task's,
    /// [`owner::WRITER_TID`] for an rwlock's unnamed writer, 0 for readers.
    #[inline(always)]
    pub const fn blame_tid(&self) -> u32 {
        match self.kind {
            owner::TASK => self.tid,
            owner::WRITER => owner::WRITER_TID,
            _ => 0,
        }
    }
}

/// An entry of `OWNER_ASLEEP` (`--owner-stacks`): the stack a waiter's
/// owner slept in, holding the lock, when the wait began; kept beside the
/// wait (per waiting task) until it ends, and charged with its blame.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerAsleep {
    /// The lock waited for.
    pub lock_addr: u64,
    /// The wait's begin (`PendingWait::begin_ns`): the entry is that wait's.
    pub begin_ns: u64,
    /// The owner's stack.
    pub stack_id: StackId,
}

/// Slots of the `ACQUIRED` array, one per thread ([`acquired_index`]): the
/// locks each thread last waited on, and with which stacks. Thread ids
/// `ACQUIRED_SLOTS` apart share a slot (each then loses stacks).
pub const ACQUIRED_SLOTS: u32 = 4096;

/// An entry of `ACQUIRED`: a thread's last wait on a lock that records its
/// owner, and its wait on the lock before that one, written when the wait
/// began (once it has acquired the lock, the acquire stack later waiters
/// charge it with; the earlier one stays for a thread that waits on a
/// second lock while it holds the first). 64 bytes, so that the slots of
/// a storm's threads (consecutive ids) do not share the line their writes
/// pull away (the map is created mmapable, so its values start page-aligned
/// and each slot is one cache line).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Acquired {
    /// The lock.
    pub lock_addr: u64,
    /// Its stack at the wait.
    pub stack_id: StackId,
    /// The thread that waited.
    pub tid: u32,
    /// The wait's flags (`lcb`): which side of an rwsem it waited for.
    pub flags: u32,
    /// The lock of the thread's wait before, on another lock (0: none).
    pub prev_lock_addr: u64,
    /// That wait's stack.
    pub prev_stack_id: StackId,
    /// That wait's flags.
    pub prev_flags: u32,
    /// Unused.
    pub _pad: u32,
    /// The rest of the 64 bytes.
    pub _pad2: [u64; 2],
}

/// Value of `HOLDERS` (keyed by lock address): who holds a lock with no
/// owner field while its hold is timed.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    /// Holder thread.
    pub tid: u32,
    /// Holder process.
    pub tgid: u32,
    /// Its stack at the wait that ended in the acquisition.
    pub stack_id: StackId,
}

/// Slot of thread `tid` in `ACQUIRED`.
#[inline(always)]
pub const fn acquired_index(tid: u32) -> u32 {
    tid & (ACQUIRED_SLOTS - 1)
}

/// State between `contention_begin` and `contention_end`: the value of the
/// per-task `PENDING` map (keyed by [`task_key`]) and of the per-CPU
/// `SPIN_PENDING` slots. `lock_addr == 0` marks a free or idle slot.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingWait {
    /// `bpf_ktime_get_ns()` at the first begin.
    pub begin_ns: u64,
    /// Lock being waited for.
    pub lock_addr: u64,
    /// Kernel stack id captured at begin.
    pub stack_id: StackId,
    /// User stack id captured at begin.
    pub user_stack_id: StackId,
    /// The waiter's cgroup (v2 id; 0 when not recorded).
    pub cgroup_id: u64,
    /// `LCB_F_*` flags seen so far.
    pub flags: u32,
    /// Waiting process id.
    pub tgid: u32,
    /// Waiting thread id.
    pub tid: u32,
    /// 1 when `stack_id` is a walk cut at its caller ([`crate::STACK_CUT`]).
    pub stack_cut: u32,
    /// Who held the lock when the wait began.
    pub owner: Owner,
}

/// `SPIN_PENDING` slot of pure spinning waits (spinlocks, rwlocks).
pub const SPIN_SLOT: u32 = 0;
/// `SPIN_PENDING` slot of a mutex's first optimistic spin: the waiter runs
/// with preemption disabled until it acquires the lock or queues to sleep,
/// so the wait stays on this CPU and out of the per-task hash map unless it
/// sleeps.
pub const MUTEX_SPIN_SLOT: u32 = 1;
/// `SPIN_PENDING` slot of a pure spinning wait that began while another
/// was pending in [`SPIN_SLOT`] on this CPU: qrwlock's internal
/// `wait_lock`, contended inside an rwlock's wait, or a spinlock an
/// interrupt contends inside a spinning wait. Measured under its own lock
/// (`nested` counts them); a third level is skipped (`nested_skipped`).
pub const NESTED_SPIN_SLOT: u32 = 2;
/// Slots of `SPIN_PENDING`.
pub const SPIN_SLOTS: u32 = 3;

/// An entry of the per-CPU stack cache (`STACK_CACHE`): a kernel stack
/// walked for a wait, reused for a later wait on the same lock with the
/// same flags. Where the programs can read the kernel stack (6.2+, a
/// context on the stack), an entry carries a proof: the places above the
/// program's context where the walk found its return addresses, one per
/// frame from the first above the context up to the proof frame (past the
/// caller), and a hash of those words. A later wait that finds the same
/// words at the same places came through the same frames, whichever thread
/// it is, and reuses the stack without a walk. Otherwise (and when the
/// budget is spent) the same thread's last stack for that lock and flags is
/// reused.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedStack {
    /// Lock of the captured stack.
    pub lock_addr: u64,
    /// The stack id.
    pub stack_id: StackId,
    /// The user stack id captured with it.
    pub user_stack_id: StackId,
    /// The words at `proof_words`, folded with [`proof_hash_step`] from
    /// `lock_addr`; 0: no proof.
    pub proof_hash: u64,
    /// Thread it was captured for.
    pub tid: u32,
    /// Flags of that wait.
    pub flags: u32,
    /// 1 when `stack_id` is a walk cut at its caller ([`crate::STACK_CUT`]).
    pub cut: u16,
    /// The place of the proof's middle frame (one of `proof_words`), about
    /// the caller's return address, where the paths that share a lock part.
    pub proof_check_place: u16,
    /// The low 32 bits of the word at `proof_check_place` when the proof
    /// was taken: one read that turns away another path's entry before the
    /// hash reads all [`PROOF_WORDS`] (the hash covers this word too, so it
    /// never turns away a proven one).
    pub proof_check: u32,
    /// Where the proof's words lie above the program's context, in 8-byte
    /// words, innermost frame first; past the last frame 0, the context's
    /// own first word (the lock's address).
    pub proof_words: [u8; PROOF_WORDS],
}

/// Return addresses a proof of [`CachedStack`] checks at most: the walk's
/// frames up to its 16th (past the tracing frames, the lock's functions,
/// the caller and a few of its callers).
pub const PROOF_WORDS: usize = 16;

/// The multiplier of each proof place's word in a proof's hash (odd and
/// distinct: splitmix64 of the place). The hash is the seed plus each word
/// times its place's multiplier: the words' products are independent of
/// one another, where a chained hash waited on each step's multiply and
/// took a third of the begin program's time on the pipe storm.
pub const PROOF_KEYS: [u64; PROOF_WORDS] = {
    let mut k = [0u64; PROOF_WORDS];
    let mut i = 0;
    while i < PROOF_WORDS {
        let mut z = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        k[i] = (z ^ (z >> 31)) | 1;
        i += 1;
    }
    k
};

/// `h` with the word `w` of proof place `i` folded in (see [`PROOF_KEYS`]).
#[inline(always)]
pub const fn proof_hash_step(h: u64, i: usize, w: u64) -> u64 {
    h.wrapping_add(w.wrapping_mul(PROOF_KEYS[i % PROOF_WORDS]))
}

/// Entries of the per-CPU stack cache (a power of two).
pub const STACK_CACHE_SLOTS: u32 = 64;

/// Entries of a set of the stack cache, for the stacks proven by the kernel
/// stack (a power of two): the call sites of one lock with one set of flags
/// (a mutex's readers and writers; `tasklist_lock`'s writers in fork, exit
/// and wait) keep their own entries.
pub const STACK_CACHE_WAYS: u32 = 4;

/// The first slot of the set of the stack cache for proven stacks of
/// waits on `lock` with `flags`.
#[inline(always)]
pub const fn stack_cache_set(lock: u64, flags: u32) -> u32 {
    let h = ((lock >> 4) ^ (lock >> 20) ^ (flags as u64).rotate_left(40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 59) as u32 & (STACK_CACHE_SLOTS / STACK_CACHE_WAYS - 1)) * STACK_CACHE_WAYS
}

/// The stack cache slot of thread `tid`'s waits with `flags`: a thread's
/// first spins and its sleeping waits on one mutex (different flags, both
/// frequent under a storm) keep separate entries instead of evicting each
/// other.
#[inline(always)]
pub const fn stack_cache_index(tid: u32, flags: u32) -> u32 {
    (tid ^ flags.rotate_left(16)).wrapping_mul(0x9E37_79B1) >> (32 - STACK_CACHE_SLOTS.trailing_zeros())
}

/// Per-CPU stack budget state.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StackBudget {
    /// Start of the current window.
    pub window_ns: u64,
    /// Stacks captured in it.
    pub used: u64,
    /// The last sleeping owner whose stack was walked (`--owner-stacks`):
    /// its `task_struct`, its voluntary switch count then (the sleep), and
    /// the stack's id; the next waiter on the same sleep reuses it.
    pub asleep_task: u64,
    /// See `asleep_task`.
    pub asleep_switches: u64,
    /// See `asleep_task`.
    pub asleep_stack_id: StackId,
    /// Scratch: the running program's context address, stored and loaded
    /// back so that the verifier sees a number, not a pointer (privileged
    /// programs may store pointers in maps, not compute with their context).
    pub ctx_scratch: u64,
    /// Scratch of the search for a stack's proof (`stack_proof` in the eBPF
    /// crate), kept in map memory, which the verifier does not track, so
    /// that the search's `bpf_loop` steps converge: the next frame to find
    /// (`u32::MAX` before the first), frames found, and where each lay above
    /// the context, in words.
    pub proof_next: u32,
    /// See `proof_next`.
    pub proof_found: u32,
    /// See `proof_next`.
    pub proof_words: [u8; PROOF_WORDS],
}

/// Key of the per-task pending-wait map: the thread id, or for the idle
/// tasks (which all have tid 0) a per-CPU key with the top bit set.
pub const fn task_key(tid: u32, cpu: u32) -> u64 {
    if tid == 0 { (1u64 << 63) | cpu as u64 } else { tid as u64 }
}

/// Key of the hold-tracking map: a lock and the thread that acquired it after
/// waiting (readers hold concurrently, so the thread is part of the key).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldKey {
    /// Lock address.
    pub lock_addr: u64,
    /// Acquiring thread.
    pub tid: u32,
    /// Reserved, zero.
    pub _pad: u32,
}

/// Value of the hold-tracking map.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldStart {
    /// When the wait ended (the lock was acquired).
    pub start_ns: u64,
    /// Acquirer's stack id.
    pub stack_id: StackId,
    /// Acquirer's user stack id.
    pub user_stack_id: StackId,
    /// `LCB_F_*` flags of the wait.
    pub flags: u32,
    /// Reserved, zero.
    pub _pad: u32,
}

/// State between `yield_to` entry and return, per yielding thread.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct YieldStart {
    /// `bpf_ktime_get_ns()` at entry.
    pub start_ns: u64,
    /// Caller stack id.
    pub stack_id: StackId,
    /// Target pid.
    pub target_pid: u32,
    /// Target tgid.
    pub target_tgid: u32,
    /// `preempt` argument.
    pub preempt: u32,
    /// Reserved, zero.
    pub _pad: u32,
    /// Target comm.
    pub target_comm: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blame_is_keyed_by_the_task_an_unnamed_writer_or_readers() {
        let o = |kind| Owner { kind, tid: 4242, ..Owner::default() };
        assert_eq!(o(owner::TASK).blame_tid(), 4242);
        assert_eq!(o(owner::WRITER).blame_tid(), owner::WRITER_TID);
        assert_eq!(o(owner::READERS).blame_tid(), 0);
    }

    #[test]
    fn idle_tasks_are_keyed_per_cpu() {
        assert_eq!(task_key(42, 3), 42);
        assert_ne!(task_key(0, 0), task_key(0, 1));
        assert_ne!(task_key(0, 5), 5);
    }

    #[test]
    fn every_proof_word_counts_at_its_own_place() {
        for (i, k) in PROOF_KEYS.iter().enumerate() {
            assert_eq!(k & 1, 1, "multiplier {i} is odd, so no word's change is lost");
            assert!(PROOF_KEYS[..i].iter().all(|j| j != k), "multiplier {i} is distinct");
        }
        let hash = |w: &[u64; PROOF_WORDS]| w.iter().enumerate().fold(7, |h, (i, &x)| proof_hash_step(h, i, x));
        let ret = |i: u64| 0xffff_ffff_8100_0000 + i * 0x1234;
        let words: [u64; PROOF_WORDS] = core::array::from_fn(|i| ret(i as u64));
        let base = hash(&words);
        for i in 0..PROOF_WORDS {
            let mut w = words;
            w[i] ^= 1 << (i * 3);
            assert_ne!(hash(&w), base, "a changed word {i}");
            let mut s = words;
            s.swap(i, (i + 1) % PROOF_WORDS);
            assert_ne!(hash(&s), base, "words {i} and {} swapped", (i + 1) % PROOF_WORDS);
        }
    }

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<PendingWait>(), 104);
        assert_eq!(core::mem::size_of::<Owner>(), 48);
        assert_eq!(core::mem::size_of::<OwnerAsleep>(), 24);
        assert_eq!(core::mem::size_of::<Acquired>(), 64);
        assert_eq!(core::mem::size_of::<Holder>(), 16);
        assert!(ACQUIRED_SLOTS.is_power_of_two() && acquired_index(u32::MAX) < ACQUIRED_SLOTS);
        assert_eq!(core::mem::size_of::<CachedStack>(), 64);
        let mut used = [false; (STACK_CACHE_SLOTS / STACK_CACHE_WAYS) as usize];
        for i in 0..256u64 {
            let s = stack_cache_set(0xffff_8881_0000_0000 + i * 0x40, 0x21);
            assert!(s.is_multiple_of(STACK_CACHE_WAYS) && s + STACK_CACHE_WAYS <= STACK_CACHE_SLOTS);
            used[(s / STACK_CACHE_WAYS) as usize] = true;
        }
        assert!(used.iter().all(|&u| u), "locks spread over every set");
        assert!(STACK_CACHE_SLOTS.is_power_of_two());
        assert!((0..1000u32).all(|t| stack_cache_index(t, u32::MAX) < STACK_CACHE_SLOTS));
        assert_ne!(stack_cache_index(4242, 0x21), stack_cache_index(4242, 0x1), "a mutex's spin and sleep entries");
        assert_eq!(core::mem::size_of::<YieldStart>(), 48);
        assert_eq!(core::mem::size_of::<HoldKey>(), 16);
        assert_eq!(core::mem::size_of::<HoldStart>(), 32);
    }
}
