//! KVM directed yield (`yield_to`): outcome counts and latency, per caller
//! stack and per (yielding vCPU thread, target task) pair.

use serde::{Deserialize, Serialize};

use super::{LOCK_SIGFIG, Stats};

/// Outcomes and latency of a set of `yield_to` calls.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct YieldStats {
    /// Calls that yielded (return > 0): the target was boosted and the
    /// yielder scheduled out.
    pub yielded: u64,
    /// Calls that did not yield (return 0): the target could not be boosted.
    pub failed: u64,
    /// Calls that returned an error (< 0, -ESRCH: the target was running or
    /// not runnable when checked).
    pub errors: u64,
    /// Entry-to-return latency of every call.
    pub latency: Stats,
}

impl Default for YieldStats {
    fn default() -> Self {
        YieldStats { yielded: 0, failed: 0, errors: 0, latency: Stats::new(LOCK_SIGFIG) }
    }
}

impl YieldStats {
    /// Adds one call with its return value and latency.
    pub fn record(&mut self, ret: i32, latency_ns: u64) {
        match ret {
            r if r > 0 => self.yielded += 1,
            0 => self.failed += 1,
            _ => self.errors += 1,
        }
        self.latency.record(latency_ns);
    }

    /// Calls seen.
    pub fn calls(&self) -> u64 {
        self.yielded + self.failed + self.errors
    }

    /// Adds another set.
    pub fn merge(&mut self, o: &YieldStats) {
        self.yielded += o.yielded;
        self.failed += o.failed;
        self.errors += o.errors;
        self.latency.merge(&o.latency);
    }
}

/// `yield_to` calls from one call path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct YieldCaller {
    /// The frame that called `yield_to` (`kvm_vcpu_yield_to+0x..`).
    pub caller: String,
    /// Function names from the caller outwards, `a <- b <- c`
    /// (e.g. `kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall`).
    pub path: String,
    /// Symbolized frames, innermost first.
    pub stack: Vec<String>,
    /// Outcomes and latency.
    pub stats: YieldStats,
}

/// `yield_to` calls from one thread to one target task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct YieldPair {
    /// Yielding thread (a vCPU thread).
    pub tid: u32,
    /// Its process (the VMM).
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Target task id (the vCPU thread yielded to); 0 when unknown.
    pub target_tid: u32,
    /// Target process.
    pub target_pid: u32,
    /// Target name.
    pub target_comm: String,
    /// Outcomes and latency.
    pub stats: YieldStats,
}

/// Run-queue lock waits inside `yield_to` (`double_rq_lock`), from the wait
/// backend's stacks that pass through `yield_to`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RqContention {
    /// Waits.
    pub waits: u64,
    /// Their total, ns.
    pub wait_total_ns: u64,
    /// The longest, ns.
    pub wait_max_ns: u64,
    /// Locks involved (names or classes).
    pub locks: Vec<String>,
}

/// Everything lockprof saw of KVM directed yield.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct YieldProfile {
    /// All calls.
    pub total: YieldStats,
    /// By caller stack, most calls first.
    pub callers: Vec<YieldCaller>,
    /// By (yielder, target), most calls first.
    pub pairs: Vec<YieldPair>,
    /// Run-queue lock contention inside `yield_to`.
    pub rq_contention: RqContention,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_split_by_return_value() {
        let mut s = YieldStats::default();
        s.record(1, 100);
        s.record(1, 300);
        s.record(0, 50);
        s.record(-3, 10);
        assert_eq!((s.calls(), s.yielded, s.failed, s.errors), (4, 2, 1, 1));
        assert_eq!((s.latency.count(), s.latency.total_ns(), s.latency.max_ns()), (4, 460, 300));
        let mut t = YieldStats::default();
        t.record(0, 5);
        t.merge(&s);
        assert_eq!((t.calls(), t.failed), (5, 2));
    }
}
