//! The resolved profile: what a recording holds and every report renders.

use std::collections::BTreeMap;

use profiler_common::{LockMode, LockType};
use serde::{Deserialize, Serialize};

use super::{
    Counters, Stats, YieldProfile,
    kind::{serde_mode, serde_type},
};

/// Where a lock's name came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameSource {
    /// A kallsyms data symbol at exactly the lock's address.
    Kallsyms,
    /// Confirmed by the kernel while the lock was contended: the address is
    /// a member of the current task's structures, of a run queue or a zone
    /// (offsets from BTF), or lies in an object of a known slab cache.
    Btf,
    /// Inferred from who contends on it (e.g. `tasklist_lock` from fork/exit callers).
    Inferred,
    /// A user-space lock: a data symbol of its process's binaries.
    Symbol,
}

/// Facts about the recording as a whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Backend that measured the waits (`tp_btf`, `tracepoint`, ...).
    pub backend: String,
    /// `aggregate` (in-kernel per-CPU maps) or `stream` (every wait through the ring buffer).
    #[serde(default)]
    pub mode: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Host name of the profiled machine.
    pub hostname: String,
    /// Wall-clock seconds recorded.
    pub duration_s: f64,
    /// Unix time the recording started.
    pub started_unix_s: u64,
    /// Contention events aggregated.
    pub events: u64,
    /// Loss and bookkeeping counters (ring buffer, stacks, maps, keys); a
    /// name -> count map in JSON.
    #[serde(default)]
    pub drops: Counters,
    /// Why hold times are absent, when they are.
    pub hold_unavailable: Option<String>,
    /// How hold times were measured (`fentry`, `kprobe`), when they were.
    #[serde(default)]
    pub hold_backend: Option<String>,
    /// How `yield_to` was probed (`fentry`, `kprobe`), when it was.
    #[serde(default)]
    pub yield_backend: Option<String>,
    /// Why `yield_to` was not profiled, when it was not.
    #[serde(default)]
    pub yield_unavailable: Option<String>,
    /// Degradations: functions that could not be probed on this kernel.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Filters in force while recording, as given on the command line.
    pub filters: Vec<String>,
    /// The command the recording lasted for (`record -- COMMAND`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<super::CommandRun>,
    /// Which round of `record --rounds N` this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<super::Round>,
}

/// One lock instance (address, type, mode) and who waited for it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockProfile {
    /// Kernel address of the lock (0 for the overflow row).
    pub addr: u64,
    /// Lock type.
    #[serde(rename = "type", with = "serde_type")]
    pub lock_type: LockType,
    /// Reader/writer side.
    #[serde(with = "serde_mode")]
    pub mode: LockMode,
    /// The process a user-space lock (a futex) lives in; absent for kernel locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// That process's name (`comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Symbolic name, when known.
    pub name: Option<String>,
    /// How `name` was found.
    pub name_source: Option<NameSource>,
    /// Caller-derived class, e.g. `mutex @ anon_pipe_write` (with the slab
    /// cache when that is all that is known: `... in &kmalloc-cg-192`).
    pub class: String,
    /// Slab cache of the object holding the lock, when the kernel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slab: Option<String>,
    /// The lock's member path in its object's struct (`task_struct.pi_lock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// A row summing locks (`--group-by name`, `--group-by site`): how many
    /// addresses it sums (`addr` is then the busiest one's; a user-space
    /// lock is an address in one process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<u32>,
    /// A row summing user-space locks: in how many processes (`pid` is then
    /// set only when that is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// On PREEMPT_RT, what an `rt-mutex` or `rwlock-rt` is underneath
    /// (`mutex`, `rt_mutex`, `spinlock`, `rwsem`, `rwlock`), from the lock
    /// functions on its waiters' stacks; None elsewhere or when no stack says.
    #[serde(default)]
    pub rt_base: Option<String>,
    /// Wait times.
    pub wait: Stats,
    /// Hold times of contended acquisitions, when the backend sees releases.
    pub hold: Option<Stats>,
    /// Waiters grouped by kernel stack, largest total wait first.
    pub callers: Callers,
    /// Blame: the waits each owner caused, largest first; the `unknown` row
    /// holds the rest, so the rows sum to the lock's waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<OwnerProfile>,
}

/// Who held a lock while others waited, and how much waiting that caused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerProfile {
    /// What the owner was.
    pub kind: OwnerKind,
    /// Owner thread id (0 unless a task).
    pub tid: u32,
    /// Owner process id.
    pub pid: u32,
    /// Owner thread name.
    pub comm: String,
    /// Innermost frame of the owner's acquire stack outside lock internals.
    pub caller: String,
    /// The stack the owner acquired the lock with (empty when it acquired
    /// it without a wait lockprof saw).
    pub stack: Vec<String>,
    /// The stack the owner was asleep in, holding the lock, when the waits
    /// began (`--owner-stacks`; empty when it was running or not walked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asleep_stack: Vec<String>,
    /// Waits it caused.
    pub waits: u64,
    /// Their total, ns.
    pub wait_caused_ns: u64,
    /// The longest, ns.
    pub wait_caused_max_ns: u64,
}

impl OwnerProfile {
    /// The row of waits whose owner is not known.
    pub fn unknown(waits: u64, wait_caused_ns: u64) -> OwnerProfile {
        OwnerProfile {
            kind: OwnerKind::Unknown,
            tid: 0,
            pid: 0,
            comm: String::new(),
            caller: super::placeholders::OWNER_UNKNOWN.into(),
            stack: Vec::new(),
            asleep_stack: Vec::new(),
            waits,
            wait_caused_ns,
            wait_caused_max_ns: 0,
        }
    }
}

/// What held a lock.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerKind {
    /// A task.
    Task,
    /// An rwsem held by readers.
    Readers,
    /// A reader/writer spinlock held by a writer: its lock word says so,
    /// but names no owner (qrwlock).
    Writer,
    /// Not known: the lock records no owner (spinlocks, rwlocks), or it was
    /// released before the waiter looked.
    Unknown,
}

impl LockProfile {
    /// Name if known, else the caller-derived class (also when only the
    /// generic slab cache is known: the class then ends `in &kmalloc-192`).
    pub fn display_name(&self) -> &str {
        match (&self.name, self.name_source) {
            (Some(n), Some(NameSource::Btf)) if n.starts_with('&') => &self.class,
            (Some(n), _) => n,
            (None, _) => &self.class,
        }
    }

    /// [`display_name`](Self::display_name), with a user-space lock's
    /// process (`big_lock in myapp[4242]`): a label unique per lock where
    /// two processes' locks share a name (serve's series, cgroup rows).
    pub fn process_name(&self) -> String {
        self.in_process(self.display_name())
    }

    /// `title`, with a user-space lock's process appended (` in myapp[4242]`;
    /// ` in myapp` for a row summing several processes of one name).
    pub fn in_process(&self, title: &str) -> String {
        match (self.pid, &self.process) {
            (Some(pid), process) => format!("{title} in {}[{pid}]", process.as_deref().unwrap_or("?")),
            (None, Some(process)) => format!("{title} in {process}"),
            (None, None) => title.to_string(),
        }
    }

    /// Short type label like perf's (`rwlock:W`), with what a PREEMPT_RT
    /// lock is underneath (`rwlock-rt:W(rwlock)`).
    pub fn type_label(&self) -> String {
        let t = super::type_label(self.lock_type, self.mode);
        match &self.rt_base {
            Some(b) => format!("{t}({b})"),
            None => t,
        }
    }
}

/// Waiters of one lock that share a kernel stack.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallerProfile {
    /// First frame outside the locking internals, `function+0xoff`.
    pub caller: String,
    /// Symbolized frames, innermost first (shared with the symbol cache:
    /// a daemon holds many profiles' worth of callers).
    pub stack: Frames,
    /// Wait times.
    pub wait: Stats,
    /// Hold times, when the backend sees releases.
    pub hold: Option<Stats>,
    /// The application's frame nearest the kernel (`--user-stacks`): the
    /// innermost user frame outside the C library and the loader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_caller: Option<String>,
    /// The waits per cgroup of the waiting tasks (when cgroups are
    /// recorded), most wait first; names are in [`Profile::cgroups`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<CgroupShare>,
    /// The user part of `stack` (after its `[kernel]` frame), with the
    /// binaries and build ids behind each frame (`--user-stacks`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "user_stack")]
    pub user: Option<std::sync::Arc<crate::symbols::user::UserStack>>,
}

/// One cgroup's part of a caller's (or a lock's) waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupShare {
    /// cgroup v2 id (see [`CgroupProfile::id`]).
    pub id: u64,
    /// Waits.
    pub count: u64,
    /// Their total, ns.
    pub wait_ns: u64,
    /// The longest, ns.
    pub max_ns: u64,
}

impl CgroupShare {
    /// Adds `o`'s waits (same cgroup).
    pub fn merge(&mut self, o: &CgroupShare) {
        self.count += o.count;
        self.wait_ns = self.wait_ns.saturating_add(o.wait_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
    }
}

/// Adds `add` to the shares in `into`, kept sorted by wait (most first).
pub fn merge_shares(into: &mut Vec<CgroupShare>, add: &[CgroupShare]) {
    for a in add {
        match into.iter_mut().find(|s| s.id == a.id) {
            Some(s) => s.merge(a),
            None => into.push(*a),
        }
    }
    into.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.id.cmp(&b.id)));
}

/// The waits of one cgroup's tasks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CgroupProfile {
    /// cgroup v2 id (the inode number of its directory in the cgroup2
    /// mount); `u64::MAX` for the row of cgroups past the key limit.
    pub id: u64,
    /// Short name: a systemd unit, a container (`docker:3f2a9c1b7d4e`), a
    /// pod, or the path.
    pub name: String,
    /// Path relative to the cgroup2 mount (`None`: the cgroup was removed
    /// before it could be looked up).
    pub path: Option<String>,
    /// Waits over all locks.
    pub wait: Stats,
    /// Its waits per lock, most wait first.
    pub locks: Vec<CgroupLock>,
}

/// One lock's waits in a cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLock {
    /// The lock's display name.
    pub lock: String,
    /// Its address.
    pub addr: u64,
    /// Lock type.
    #[serde(rename = "type", with = "serde_type")]
    pub lock_type: LockType,
    /// Acquisition mode.
    #[serde(with = "serde_mode")]
    pub mode: LockMode,
    /// The process of a user-space lock (absent for kernel locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Waits.
    pub count: u64,
    /// Their total, ns.
    pub wait_ns: u64,
    /// The longest, ns.
    pub max_ns: u64,
    /// The caller with most of this cgroup's wait on the lock.
    pub caller: String,
    /// Its application frame (`--user-stacks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_caller: Option<String>,
}

/// A lock's callers, shared by the profiles that did not change them.
pub type Callers = std::sync::Arc<[CallerProfile]>;

/// Symbolized frames, innermost first, shared rather than copied.
pub type Frames = std::sync::Arc<[String]>;

/// Waits of one thread.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskProfile {
    /// Thread id (`u32::MAX` for the overflow row).
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// Thread name.
    pub comm: String,
    /// Wait times over all locks.
    pub wait: Stats,
}

/// One long individual wait.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlowWait {
    /// How long.
    pub wait_ns: u64,
    /// CLOCK_MONOTONIC when it ended (to correlate with other traces).
    pub end_monotonic_ns: u64,
    /// Lock address.
    pub addr: u64,
    /// Lock type.
    #[serde(rename = "type", with = "serde_type")]
    pub lock_type: LockType,
    /// Reader/writer side.
    #[serde(with = "serde_mode")]
    pub mode: LockMode,
    /// Lock name or class.
    pub lock: String,
    /// Waiting thread.
    pub tid: u32,
    /// Waiting process.
    pub tgid: u32,
    /// Thread name.
    pub comm: String,
    /// Caller frame.
    pub caller: String,
    /// Symbolized stack, innermost first.
    pub stack: Vec<String>,
}

/// A complete, symbolized lock-contention profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Profile {
    /// Facts about the recording.
    pub meta: Meta,
    /// Contended locks.
    pub locks: Vec<LockProfile>,
    /// Waiting threads.
    pub tasks: Vec<TaskProfile>,
    /// The longest individual waits, longest first.
    #[serde(default)]
    pub slowest: Vec<SlowWait>,
    /// KVM directed yield, when `yield_to` was probed.
    #[serde(default)]
    pub yield_to: Option<YieldProfile>,
    /// Waits per cgroup of the waiting tasks (when cgroups are recorded),
    /// most wait first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<CgroupProfile>,
    /// When an incident trigger wrote this recording: which, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incident: Option<super::IncidentInfo>,
}

impl Profile {
    /// Total contentions over all locks.
    pub fn contended(&self) -> u64 {
        self.locks.iter().map(|l| l.wait.count()).sum()
    }

    /// A label per lock address that tells distinct locks apart: the display
    /// name, with `#<hex>` (the shortest distinct tail of the address, at
    /// least 6 digits) appended where locks at different addresses share a
    /// display name (three pipes' mutexes, say). The read and write rows of
    /// one lock share its label.
    pub fn labels(&self) -> BTreeMap<u64, String> {
        let mut addrs_of: BTreeMap<&str, std::collections::BTreeSet<u64>> = BTreeMap::new();
        for l in self.locks.iter().filter(|l| l.addr != 0) {
            addrs_of.entry(l.display_name()).or_default().insert(l.addr);
        }
        let mut out = BTreeMap::new();
        for (name, addrs) in addrs_of {
            if addrs.len() == 1 {
                out.extend(addrs.into_iter().map(|a| (a, name.to_string())));
                continue;
            }
            let hex: Vec<String> = addrs.iter().map(|a| format!("{a:x}")).collect();
            let distinct = |n: usize| {
                let tails: std::collections::BTreeSet<&str> =
                    hex.iter().map(|h| &h[h.len().saturating_sub(n)..]).collect();
                tails.len() == hex.len()
            };
            let n = (6..=16).find(|&n| distinct(n)).unwrap_or(16);
            for (a, h) in addrs.iter().zip(&hex) {
                out.insert(*a, format!("{name} #{}", &h[h.len().saturating_sub(n)..]));
            }
        }
        for l in self.locks.iter().filter(|l| l.addr == 0) {
            out.insert(0, l.display_name().to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixture;

    #[test]
    fn labels_tell_same_named_locks_apart() {
        let mut p = fixture::profile();
        let labels = p.labels();
        assert_eq!(labels[&0xffffffff82a00000], "tasklist_lock", "a unique name stays as it is");
        for tail in [0x1000u64, 0x1_0000_0000] {
            let mut twin = p.locks[1].clone();
            twin.addr += tail;
            p.locks.push(twin);
        }
        let labels = p.labels();
        let pipes: Vec<&String> = labels.values().filter(|l| l.starts_with("mutex @ anon_pipe_write #")).collect();
        assert_eq!(pipes.len(), 3, "{labels:?}");
        let set: std::collections::BTreeSet<&&String> = pipes.iter().collect();
        assert_eq!(set.len(), 3, "three distinct labels: {labels:?}");
        assert!(labels.values().any(|l| l.ends_with("#104a1b2c0")), "tails grow until distinct: {labels:?}");
    }
}
