//! Row identities, defined once for every face: the aggregator's tables,
//! the profile, the TUI and `lockprof serve` key their rows with these, so a
//! new dimension (cgroup, process, user stack) is added here and nowhere else.

use profiler_common::{ContentionEvent, LockMode, LockType};

use super::LockProfile;

/// Identity of a lock row: one lock instance on one side (a rwlock's read
/// and write rows are two rows of one address). A user-space lock (a futex)
/// is an address in one process: the process is part of its identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Kernel address, or the futex's address in `pid` (0 for the overflow row).
    pub addr: u64,
    /// Type from the contention flags.
    pub lock_type: LockType,
    /// Reader/writer side.
    pub mode: LockMode,
    /// The process of a user-space lock (0 for kernel locks).
    pub pid: u32,
}

impl LockKey {
    /// The key of the row that absorbs locks beyond the key limit.
    pub const OVERFLOW: LockKey = LockKey { addr: 0, lock_type: LockType::Unknown, mode: LockMode::Exclusive, pid: 0 };

    /// Key of a kernel lock address with contention flags.
    pub fn kernel(addr: u64, flags: u32) -> LockKey {
        LockKey::new(addr, flags, 0)
    }

    /// Key of a lock address with contention flags, waited for by process
    /// `tgid` (which is the lock's process when the lock is a futex).
    pub fn new(addr: u64, flags: u32, tgid: u32) -> LockKey {
        let lock_type = LockType::from_flags(flags);
        let pid = if lock_type.is_user() { tgid } else { 0 };
        LockKey { addr, lock_type, mode: LockMode::from_flags(flags), pid }
    }

    /// Key of an event's lock.
    pub fn of(ev: &ContentionEvent) -> LockKey {
        LockKey::new(ev.lock_addr, ev.flags, ev.tgid)
    }
}

impl LockProfile {
    /// The row's identity.
    pub fn key(&self) -> LockKey {
        LockKey { addr: self.addr, lock_type: self.lock_type, mode: self.mode, pid: self.pid.unwrap_or(0) }
    }
}
