//! User-space locks: futex waits seen at the futex system calls, their
//! per-thread state, and the constants of the futex ABI they decode.
//!
//! One contention, not one system call: a lock loop (glibc's
//! `__lll_lock_wait`, Rust's `futex_mutex::lock_contended`, Go's runtime
//! lock) waits again when a woken waiter loses the race for the word. These
//! three-state locks wait with the value "locked, with waiters"
//! ([`LLL_LOCK_CONTENDED`]), and a thread that acquires after such a wait
//! always wakes the word when it releases (the word still says "waiters").
//! So a thread's waits on one word with that value, up to its own wake of
//! the word, are one contention, whatever the scheduler did in between; a
//! PI lock's (`FUTEX_LOCK_PI`) waits up to the one that returns with the
//! lock are one. Every other futex wait (a condition variable, a barrier)
//! is a wait of its own. A contention's wait is the sum of its waits. It is
//! accounted when it is over: at the thread's own wake of the word after
//! its last wait (`FUTEX_WAKE`, `FUTEX_UNLOCK_PI`: its release, and the
//! time from that wait's return is the hold), or at its next wait that
//! does not continue it. Userspace flushes the ones still open at stop.

use crate::{Owner, StackId};

/// `FUTEX_WAIT`.
pub const FUTEX_WAIT: u32 = 0;
/// `FUTEX_WAKE`.
pub const FUTEX_WAKE: u32 = 1;
/// `FUTEX_WAKE_OP` (wakes on its first word, too).
pub const FUTEX_WAKE_OP: u32 = 5;
/// `FUTEX_LOCK_PI`.
pub const FUTEX_LOCK_PI: u32 = 6;
/// `FUTEX_UNLOCK_PI`.
pub const FUTEX_UNLOCK_PI: u32 = 7;
/// `FUTEX_WAIT_BITSET`.
pub const FUTEX_WAIT_BITSET: u32 = 9;
/// `FUTEX_WAKE_BITSET`.
pub const FUTEX_WAKE_BITSET: u32 = 10;
/// `FUTEX_WAIT_REQUEUE_PI` (a condition wait that ends owning a PI mutex).
pub const FUTEX_WAIT_REQUEUE_PI: u32 = 11;
/// `FUTEX_LOCK_PI2`.
pub const FUTEX_LOCK_PI2: u32 = 13;
/// The command bits of the `op` argument (`FUTEX_CMD_MASK`: without
/// `FUTEX_PRIVATE_FLAG` and `FUTEX_CLOCK_REALTIME`).
pub const FUTEX_CMD_MASK: u32 = !(128 | 256);
/// The owner bits of a PI futex word.
pub const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Largest thread id the kernel hands out (`PID_MAX_LIMIT` on 64-bit).
pub const PID_MAX_LIMIT: u32 = 4 << 20;

/// glibc's `pthread_mutex_t`: the futex word is `__lock` at offset 0, and
/// `__owner` (the holder's thread id) at this offset, the same on x86_64
/// and aarch64 (`struct __pthread_mutex_s`: `int __lock; unsigned int
/// __count; int __owner;`), glibc's ABI since NPTL. Read only for waits
/// with the low-level lock's "locked, with waiters" value
/// ([`LLL_LOCK_CONTENDED`]); other protocols that wait with that value
/// (Rust's `std::sync::Mutex`) keep their data there, which userspace
/// rejects unless it is a live thread of the waiting process.
pub const GLIBC_MUTEX_OWNER_OFFSET: u64 = 8;
/// The value a three-state futex lock (glibc's low-level lock, Rust's and
/// Go's futex mutexes) waits on: locked, with waiters.
pub const LLL_LOCK_CONTENDED: u32 = 2;

/// [`FutexWait::protocol`]: a three-state lock's wait (value
/// [`LLL_LOCK_CONTENDED`]): waits again on the word continue it until the
/// thread's release.
pub const PROTO_LLL: u32 = 1;
/// [`FutexWait::protocol`]: a PI lock's wait: waits again continue it
/// until one returns with the lock.
pub const PROTO_PI: u32 = 2;
/// [`FutexWait::protocol`] bit: the contention's last wait ended it (a PI
/// wait returned with the lock, a wait timed out): the next wait starts a
/// new one.
pub const PROTO_ENDED: u32 = 4;

/// Whether a thread's contention with `protocol` on `word` (its waits
/// over, not released) continues with a new wait on `uaddr` with `flags`.
pub const fn continues(protocol: u32, word: u64, flags_then: u32, uaddr: u64, flags: u32) -> bool {
    word == uaddr && flags_then == flags && protocol & (PROTO_LLL | PROTO_PI) != 0 && protocol & PROTO_ENDED == 0
}

/// Entries of `FUTEX_WAITS` (a hash map keyed by thread id): one per thread
/// that waited on a futex; userspace reaps the entries of exited threads.
pub const FUTEX_WAIT_ENTRIES: u32 = 32768;

/// Offsets (bytes) of a syscall tracepoint's arguments: after the common
/// header (8) and `int __syscall_nr` (8, padded), each argument is 8 bytes.
pub const SYSCALL_ARG0: usize = 16;
/// Offset of `long ret` in a `sys_exit_*` tracepoint.
pub const SYSCALL_RET: usize = 16;

/// A thread's futex contention: open from its first wait until a wait that
/// does not continue it.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FutexWait {
    /// The futex word (0: none).
    pub uaddr: u64,
    /// Entry of the wait in progress (0: not inside a wait).
    pub enter_ns: u64,
    /// Return of the contention's last wait (0: inside its first wait).
    pub exit_ns: u64,
    /// The contention's wait so far (the sum of its waits).
    pub total_ns: u64,
    /// Kernel stack id (a reason: a futex wait has no kernel stack worth
    /// a walk).
    pub stack_id: StackId,
    /// User stack at the first wait.
    pub user_stack_id: StackId,
    /// The waiter's cgroup (v2 id; 0 when not recorded).
    pub cgroup_id: u64,
    /// `lcb::FUTEX` (and `lcb::RT` for PI).
    pub flags: u32,
    /// Waiting process.
    pub tgid: u32,
    /// Waits (system calls) in this contention so far.
    pub waits: u32,
    /// How later waits relate to it ([`PROTO_LLL`], [`PROTO_PI`],
    /// [`PROTO_ENDED`]; 0: a wait of its own).
    pub protocol: u32,
    /// The holder when the contention began, where the word or glibc's
    /// mutex says; its `stack_id` is the owner's *user* stack where it took
    /// the lock after a contention lockprof saw (else `STACK_SKIPPED`).
    pub owner: Owner,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_hidden_padding() {
        assert_eq!(core::mem::size_of::<FutexWait>(), 120);
        assert_eq!(129 & FUTEX_CMD_MASK, FUTEX_WAKE);
        assert_eq!((9 | 128 | 256) & FUTEX_CMD_MASK, FUTEX_WAIT_BITSET);
    }

    #[test]
    fn lock_loops_continue_until_release_other_waits_stand_alone() {
        let f = crate::lcb::FUTEX;
        assert!(continues(PROTO_LLL, 0x10, f, 0x10, f), "a lock loop's retry, however late");
        assert!(!continues(PROTO_LLL, 0x10, f, 0x20, f), "another word");
        assert!(!continues(PROTO_LLL | PROTO_ENDED, 0x10, f, 0x10, f), "it timed out: a new attempt");
        assert!(!continues(0, 0x10, f, 0x10, f), "a condition variable's next wait is a wait of its own");
        let pi = f | crate::lcb::RT;
        assert!(continues(PROTO_PI, 0x10, pi, 0x10, pi), "interrupted, retried");
        assert!(!continues(PROTO_PI | PROTO_ENDED, 0x10, pi, 0x10, pi), "acquired: the next lock is new");
        assert!(!continues(PROTO_LLL, 0x10, f, 0x10, pi));
    }
}
