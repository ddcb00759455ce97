//! Every text that stands in for a frame, a caller or a name lockprof could
//! not know, in one place. Each is in brackets, so it can never be mistaken
//! for a kernel function (and naming skips it as a call site).

/// Locks past the lock key limit (the overflow lock row's class).
pub const OTHER_LOCKS: &str = "[other locks: key limit reached]";
/// Threads past the task key limit (the overflow task row's comm).
pub const OTHER_TASKS: &str = "[other tasks]";
/// yield_to (yielder, target) pairs past the task key limit.
pub const OTHER_PAIRS: &str = "[other pairs]";
/// Owners past the per-lock owner cap.
pub const OTHER_OWNERS: &str = "[other owners: key limit reached]";
/// Stacks past the caller key limit.
pub const OTHER_STACKS: &str = "[other stacks: key limit reached]";
/// A stack skipped under `--stack-rate`.
pub const STACK_SKIPPED: &str = "[stack not captured: --stack-rate budget spent]";
/// The root of a kernel stack walked only to its caller under `--stack-rate`
/// (the frames above it are the wait's own, the rest was not walked).
pub const STACK_CUT: &str = "[stack cut above the caller: --stack-rate budget spent]";
/// The kernel stack of a user-space lock's wait or owner: not walked (the
/// wait's stack is its user stack).
pub const USER_LOCK: &str = "[user-space lock: no kernel stack]";
/// A stack id the stack map no longer holds.
pub const STACK_EVICTED: &str = "[stack evicted from the stack map before it was read (raise --stack-map-size)]";
/// A stack with no frame outside the locking internals.
pub const UNKNOWN_CALLER: &str = "[unknown caller]";
/// The function of [`UNKNOWN_CALLER`].
pub const UNKNOWN_FN: &str = "[unknown]";
/// The owner was the rwsem's readers.
pub const HELD_BY_READERS: &str = "[held by readers]";
/// A reader/writer spinlock held by a writer it does not name.
pub const HELD_BY_WRITER: &str = "[held by a writer: a qrwlock records no owner]";
/// The owner took the lock without a wait lockprof saw (no acquire stack).
pub const ACQUIRED_UNSEEN: &str = "[acquired without a wait lockprof saw]";
/// Between an owner's acquire stack and the stack it sleeps in while
/// holding the lock (`--owner-stacks`), root-first.
pub const OWNER_ASLEEP: &str = "[owner asleep, holding it, in]";
/// Waits no owner was seen for.
pub const OWNER_UNKNOWN: &str = "[owner unknown]";
/// A yield_to target the kernel did not name.
pub const UNKNOWN_TARGET: &str = "[unknown target]";
/// Where a joined stack passes from the application's frames to the
/// kernel's (root-first: user frames, this, kernel frames).
pub const KERNEL_MARKER: &str = "[kernel]";
/// Waits no cgroup was recorded for (the cgroup-rooted flamegraph's root).
pub const NO_CGROUP: &str = "[no cgroup]";
/// cgroups past the cgroup key limit.
pub const OTHER_CGROUPS: &str = "[other cgroups: key limit reached]";
/// Rows `lockprof serve`'s window folded because it was full.
pub const WINDOW_FULL: &str = "[window full: rows folded]";

/// Whether `frame` is one of these stand-ins rather than a real frame or caller.
pub fn is_placeholder(frame: &str) -> bool {
    frame.starts_with('[')
}

/// The root frame of a task owner's blame rows.
pub fn held_by(comm: &str) -> String {
    format!("[held by {}]", if comm.is_empty() { "?" } else { comm })
}

/// What a failed stack capture means, from the errno of `bpf_get_stack` or
/// of storing the stack.
pub fn stack_not_recorded(errno: u32) -> String {
    match errno as i32 {
        libc::ENOMEM | libc::E2BIG => "[stack not recorded: the kernel had no memory to store it]".into(),
        libc::EFAULT => "[stack not recorded: the kernel could not walk it]".into(),
        // --user-unwind copy (see profiler-ebpf's unwind.rs).
        libc::EBUSY => "[user stack not copied: the ring buffer was half full (user_stack_failed)]".into(),
        libc::ENODATA => "[user stack not copied: no user registers found (user_stack_failed)]".into(),
        e => format!("[stack not recorded: errno {e}]"),
    }
}
