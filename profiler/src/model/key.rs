//! Row identities, defined once for every face: the aggregator's tables,
//! the profile, the TUI and `lockprof serve` key their rows with these, so a
//! new dimension (cgroup, process, user stack) is added here and nowhere else.

use profiler_common::{ContentionEvent, LockMode, LockType};

use super::LockProfile;

/// Identity of a lock row: one lock instance on one side (a rwlock's read
/// and write rows are two rows of one address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Kernel address (0 for the overflow row).
    pub addr: u64,
    /// Type from the contention flags.
    pub lock_type: LockType,
    /// Reader/writer side.
    pub mode: LockMode,
}

impl LockKey {
    /// The key of the row that absorbs locks beyond the key limit.
    pub const OVERFLOW: LockKey = LockKey { addr: 0, lock_type: LockType::Unknown, mode: LockMode::Exclusive };

    /// Key of a lock address with contention flags.
    pub fn new(addr: u64, flags: u32) -> LockKey {
        LockKey { addr, lock_type: LockType::from_flags(flags), mode: LockMode::from_flags(flags) }
    }

    /// Key of an event's lock.
    pub fn of(ev: &ContentionEvent) -> LockKey {
        LockKey::new(ev.lock_addr, ev.flags)
    }
}

impl LockProfile {
    /// The row's identity.
    pub fn key(&self) -> LockKey {
        LockKey { addr: self.addr, lock_type: self.lock_type, mode: self.mode }
    }
}
