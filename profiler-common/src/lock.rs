//! Lock types and modes, from the `LCB_F_*` flags of `lock:contention_begin`.

/// `LCB_F_*` flags of the `lock:contention_begin` tracepoint
/// (include/trace/events/lock.h).
pub mod lcb {
    /// Spinning wait (spinlock, rwlock, optimistic mutex spin).
    pub const SPIN: u32 = 1 << 0;
    /// Reader side of a reader/writer lock.
    pub const READ: u32 = 1 << 1;
    /// Writer side of a reader/writer lock.
    pub const WRITE: u32 = 1 << 2;
    /// rt_mutex based lock (PREEMPT_RT kernels, futex PI).
    pub const RT: u32 = 1 << 3;
    /// percpu_rw_semaphore.
    pub const PERCPU: u32 = 1 << 4;
    /// struct mutex.
    pub const MUTEX: u32 = 1 << 5;
    /// lockprof's own flag, beyond the kernel's: a user-space futex wait
    /// (with [`RT`]: a priority-inheritance futex, `FUTEX_LOCK_PI`).
    pub const FUTEX: u32 = 1 << 16;
}

/// `LCB_F_*`-style flags of the probed slowpaths, by function family.
pub mod probe_flags {
    use super::lcb;
    /// `__mutex_lock*_slowpath`.
    pub const MUTEX: u32 = lcb::MUTEX;
    /// `rwsem_down_read_slowpath`.
    pub const RWSEM_READ: u32 = lcb::READ;
    /// `rwsem_down_write_slowpath`.
    pub const RWSEM_WRITE: u32 = lcb::WRITE;
    /// `queued_read_lock_slowpath`.
    pub const RWLOCK_READ: u32 = lcb::SPIN | lcb::READ;
    /// `queued_write_lock_slowpath`.
    pub const RWLOCK_WRITE: u32 = lcb::SPIN | lcb::WRITE;
    /// PREEMPT_RT: `rt_mutex_slowlock` (mutexes and rt_mutexes).
    pub const RT_MUTEX: u32 = lcb::RT;
    /// PREEMPT_RT: `rtlock_slowlock_locked` (spinlock_t, which sleeps on RT).
    pub const RTLOCK: u32 = lcb::RT;
    /// PREEMPT_RT: `__rwbase_read_lock` (rw_semaphore readers).
    pub const RWBASE_READ: u32 = lcb::RT | lcb::READ;
}

/// Kind of lock, derived from the `LCB_F_*` flags of a contention.
///
/// The discriminants are stable: they are bit positions in `Config::type_mask`.
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockType {
    /// Flags the table below does not know.
    Unknown = 0,
    /// raw/arch spinlock (qspinlock).
    Spinlock = 1,
    /// rwlock_t (qrwlock), e.g. `tasklist_lock`.
    Rwlock = 2,
    /// struct rw_semaphore, e.g. `mmap_lock`, inode `i_rwsem`.
    Rwsem = 3,
    /// struct mutex.
    Mutex = 4,
    /// rt_mutex.
    RtMutex = 5,
    /// rwlock on PREEMPT_RT (rwbase_rt).
    RwlockRt = 6,
    /// percpu_rw_semaphore.
    PercpuRwsem = 7,
    /// A user-space futex wait (a `pthread_mutex_t`, a Rust `Mutex`, but also
    /// a condition variable or an idle thread pool: the kernel cannot tell).
    Futex = 8,
    /// A priority-inheritance futex (`FUTEX_LOCK_PI`): a lock by definition,
    /// and its word names the owner.
    FutexPi = 9,
}

/// Which side of the lock the waiter wanted.
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    /// Exclusive lock without reader/writer distinction.
    Exclusive = 0,
    /// Shared (reader) side.
    Read = 1,
    /// Exclusive (writer) side of a reader/writer lock.
    Write = 2,
}

impl LockType {
    /// Every type, in discriminant order.
    pub const ALL: [LockType; 10] = [
        LockType::Unknown,
        LockType::Spinlock,
        LockType::Rwlock,
        LockType::Rwsem,
        LockType::Mutex,
        LockType::RtMutex,
        LockType::RwlockRt,
        LockType::PercpuRwsem,
        LockType::Futex,
        LockType::FutexPi,
    ];

    /// Bit of this type in `Config::type_mask`.
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Classifies contention flags the way `perf lock contention` does.
    pub const fn from_flags(flags: u32) -> LockType {
        let rw = flags & (lcb::READ | lcb::WRITE) != 0;
        if flags & lcb::FUTEX != 0 {
            if flags & lcb::RT != 0 { LockType::FutexPi } else { LockType::Futex }
        } else if flags & lcb::MUTEX != 0 {
            LockType::Mutex
        } else if flags & lcb::RT != 0 {
            if rw { LockType::RwlockRt } else { LockType::RtMutex }
        } else if flags & lcb::PERCPU != 0 {
            LockType::PercpuRwsem
        } else if flags & lcb::SPIN != 0 {
            if rw { LockType::Rwlock } else { LockType::Spinlock }
        } else if rw {
            LockType::Rwsem
        } else {
            LockType::Unknown
        }
    }
}

impl LockType {
    /// Whether the lock records its owner task (mutexes, rwsems' writers,
    /// PREEMPT_RT's rt_mutex-based locks and the writers of its rwbase
    /// rwsems and rwlocks), so waits on it can be blamed.
    pub const fn records_owner(self) -> bool {
        matches!(self, LockType::Mutex | LockType::Rwsem | LockType::RtMutex | LockType::RwlockRt)
    }

    /// Whether the lock lives in a process's address space (a futex): its
    /// address means something only together with the process.
    pub const fn is_user(self) -> bool {
        matches!(self, LockType::Futex | LockType::FutexPi)
    }
}

impl LockMode {
    /// Reader/writer side from contention flags.
    pub const fn from_flags(flags: u32) -> LockMode {
        if flags & lcb::WRITE != 0 {
            LockMode::Write
        } else if flags & lcb::READ != 0 {
            LockMode::Read
        } else {
            LockMode::Exclusive
        }
    }
}

/// Pure spinning waits (spinlock, rwlock) cannot sleep or migrate while they
/// spin, so they are tracked per CPU; everything that may sleep (mutex,
/// including its optimistic spin, rwsem, rt) per task.
pub const fn is_spinning(flags: u32) -> bool {
    flags & lcb::SPIN != 0 && flags & lcb::MUTEX == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_classify_like_perf() {
        use lcb::*;
        let cases = [
            (SPIN, LockType::Spinlock, LockMode::Exclusive),
            (SPIN | READ, LockType::Rwlock, LockMode::Read),
            (SPIN | WRITE, LockType::Rwlock, LockMode::Write),
            (READ, LockType::Rwsem, LockMode::Read),
            (WRITE, LockType::Rwsem, LockMode::Write),
            (RT, LockType::RtMutex, LockMode::Exclusive),
            (RT | READ, LockType::RwlockRt, LockMode::Read),
            (PERCPU | WRITE, LockType::PercpuRwsem, LockMode::Write),
            (MUTEX, LockType::Mutex, LockMode::Exclusive),
            (MUTEX | SPIN, LockType::Mutex, LockMode::Exclusive),
            (0, LockType::Unknown, LockMode::Exclusive),
            (FUTEX, LockType::Futex, LockMode::Exclusive),
            (FUTEX | RT, LockType::FutexPi, LockMode::Exclusive),
        ];
        for (flags, ty, mode) in cases {
            assert_eq!(LockType::from_flags(flags), ty, "flags {flags:#x}");
            assert_eq!(LockMode::from_flags(flags), mode, "flags {flags:#x}");
        }
        assert!(is_spinning(SPIN | WRITE) && !is_spinning(SPIN | MUTEX) && !is_spinning(READ));
        assert!(!is_spinning(FUTEX) && LockType::FutexPi.is_user() && !LockType::Mutex.is_user());
        assert_eq!(LockType::ALL.iter().position(|t| *t == LockType::FutexPi), Some(LockType::FutexPi as usize));
    }
}
