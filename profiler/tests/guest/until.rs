//! How long a check may drive its workload. A check records until it has
//! seen what it checks (its own verdict on the live profile), so a slow or
//! busy guest only makes it run longer; the deadline, well inside the time
//! `vm-test` gives a guest (720 s on x86_64, 1080 s on arm64, booting
//! included: `xtask/src/vm/guest.rs`), only bounds a check that cannot pass,
//! which then fails with what it saw.

use std::time::Duration;

/// Longest one check drives its workload (a check that passes stops as
/// soon as its event is in the live profile, usually within seconds).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Time since the binary began past which checks get only [`FLOOR`]: a
/// kernel on which many checks fail still reports every one before
/// `vm-test` kills the guest.
// The newest kernel's checks take 340-450 s on this 2-CPU host under TCG
// when all pass (cgroup, user-stack and futex checks included; 338 s and
// 448 s in two clean-clone runs of one tree), ~580 s on arm64 (each session
// sets up more slowly there): the budget is as much as the time a guest
// gets allows (the assertion below).
pub const BUDGET: Duration = Duration::from_secs(GUEST_SECS - 210);

/// What `vm-test` gives a guest of this architecture, booting included.
const GUEST_SECS: u64 = if cfg!(target_arch = "aarch64") { 1080 } else { 720 };

/// The least a check gets, even past the budget.
pub const FLOOR: Duration = Duration::from_secs(3);

/// How long a check starting `elapsed` after the binary began may drive its workload.
pub fn patience(elapsed: Duration) -> Duration {
    PATIENCE.min(BUDGET.saturating_sub(elapsed)).max(FLOOR)
}

// The budget and one last full check fit in the time `vm-test` gives a
// guest, with room left for booting and the checks past the budget.
const _: () = assert!(BUDGET.as_secs() + PATIENCE.as_secs() + 180 <= GUEST_SECS);
