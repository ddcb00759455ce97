//! The counters every recording carries, typed: [`Losses`] (something
//! lockprof meant to measure was lost: a map or buffer ran out, or the kernel
//! skipped a program) and [`Bookkeeping`] (how events were handled by design:
//! merged, reused, skipped like perf, folded with exact totals, streamed,
//! counted).
//!
//! Each group lists its counters once ([`Losses::LIST`],
//! [`Bookkeeping::LIST`]); the text report, the JSON `drops` object, the
//! recording and `/metrics` all iterate those lists, so a new counter is one
//! field and one list entry. Names come from `profiler_common::counter`.
//! On disk the counters stay a name -> count map: unknown names (from other
//! versions) are ignored, missing ones are 0.

use std::collections::BTreeMap;

use profiler_common::counter::{self, NAMES, user};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Whether a counter reports lost data or bookkeeping.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Data lockprof meant to measure was lost.
    Loss,
    /// How events were handled; nothing was lost.
    Bookkeeping,
}

impl CounterKind {
    /// `loss` or `bookkeeping` (the Prometheus `kind` label).
    pub fn label(self) -> &'static str {
        match self {
            CounterKind::Loss => "loss",
            CounterKind::Bookkeeping => "bookkeeping",
        }
    }
}

/// One counter's value, with its stable name and kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// Stable name: JSON key, text report, Prometheus `reason`.
    pub name: &'static str,
    /// Loss or bookkeeping.
    pub kind: CounterKind,
    /// Count.
    pub value: u64,
}

/// A list entry: a counter's name and its field in group `G`.
pub struct Field<G> {
    /// Stable name.
    pub name: &'static str,
    get: fn(&G) -> u64,
    slot: fn(&mut G) -> &mut u64,
}

/// A list entry for field `$f` named `$name`.
macro_rules! field {
    ($name:expr, $f:ident) => {
        Field { name: $name, get: |g| g.$f, slot: |g| &mut g.$f }
    };
}

/// The name of kernel counter `idx`.
const fn kernel(idx: u32) -> &'static str {
    NAMES[idx as usize]
}

/// Counters of data lost.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// The ring buffer had no room: events lost (raise `--ringbuf-mb`).
    pub ringbuf_full: u64,
    /// A stack could not be walked or stored: event kept, stack unavailable.
    pub stack_failed: u64,
    /// Distinct stacks the kernel's (LRU) stack map forgot before userspace
    /// read them: their waits show a placeholder (raise `--stack-map-size`).
    pub stacks_evicted: u64,
    /// Too many tasks waiting at once: those waits not measured.
    pub pending_map_full: u64,
    /// A lock program fired while another lockprof program ran on that CPU: that wait not measured.
    pub reentered: u64,
    /// Too many holds timed at once: that hold not measured.
    pub hold_map_full: u64,
    /// `yield_to` calls in progress exceeded the entry map: those calls not measured.
    pub yield_map_full: u64,
    /// A mutex spin's end was never seen (the kernel skipped our program): the
    /// next wait on that CPU found it in its slot and discarded it, unmeasured.
    pub stale_spin_discarded: u64,
    /// The lock identity map was full: that lock is named from userspace only.
    pub ident_map_full: u64,
    /// The holder map was full: later waiters on that lock get no owner.
    pub holder_map_full: u64,
    /// Program runs the kernel skipped to avoid recursion (from `/proc/self/fdinfo`).
    pub recursion_misses: u64,
    /// Of those, runs of the `yield_to` probes: those calls not measured. A
    /// kprobe is skipped whenever another BPF program, or a BPF map syscall
    /// preempted mid-operation, holds its CPU; the fentry backend avoids that.
    pub yield_skipped: u64,
    /// Events the kernel submitted that never reached the aggregator.
    pub userspace_lost: u64,
    /// Ring buffer records of the wrong size.
    pub malformed_records: u64,
    /// Map operations the kernel refused mid-session (the aggregate flip or
    /// drain): those waits reach the report late (at the next drain, or at
    /// stop), or, when a drain failed midway, not at all.
    pub map_ops_refused: u64,
    /// A user stack could not be walked or stored (`--user-stacks`): those
    /// waits keep their kernel stack only.
    pub user_stack_failed: u64,
    /// User stacks whose process was gone before its mappings were read:
    /// their frames stay raw addresses.
    pub user_stacks_unpinned: u64,
    /// User stacks the kernel's map forgot before they were read (raise
    /// `--stack-map-size`).
    pub user_stacks_evicted: u64,
    /// Too many threads in futex waits at once (`--futex`): that wait not measured.
    pub futex_map_full: u64,
    /// `--user-unwind copy`: stack copies dropped because the unwinder was
    /// behind: those waits show no user stack.
    pub unwind_dropped: u64,
    /// Stack copies whose process was gone before its binaries were read:
    /// only the innermost frame is kept.
    pub unwind_process_gone: u64,
}

impl Losses {
    /// Every loss counter, in display order.
    pub const LIST: [Field<Losses>; 21] = [
        field!(kernel(counter::RINGBUF_FULL), ringbuf_full),
        field!(kernel(counter::STACK_FAILED), stack_failed),
        field!(user::STACKS_EVICTED, stacks_evicted),
        field!(kernel(counter::PENDING_FULL), pending_map_full),
        field!(kernel(counter::REENTERED), reentered),
        field!(kernel(counter::HOLD_MAP_FULL), hold_map_full),
        field!(kernel(counter::YIELD_MAP_FULL), yield_map_full),
        field!(kernel(counter::STALE_SPIN), stale_spin_discarded),
        field!(kernel(counter::IDENT_MAP_FULL), ident_map_full),
        field!(kernel(counter::HOLDER_MAP_FULL), holder_map_full),
        field!(user::RECURSION_MISSES, recursion_misses),
        field!(user::YIELD_SKIPPED, yield_skipped),
        field!(user::USERSPACE_LOST, userspace_lost),
        field!(user::MALFORMED_RECORDS, malformed_records),
        field!(user::MAP_OPS_REFUSED, map_ops_refused),
        field!(kernel(counter::USER_STACK_FAILED), user_stack_failed),
        field!(user::USER_STACKS_UNPINNED, user_stacks_unpinned),
        field!(user::USER_STACKS_EVICTED, user_stacks_evicted),
        field!(kernel(counter::FUTEX_MAP_FULL), futex_map_full),
        field!(user::UNWIND_DROPPED, unwind_dropped),
        field!(user::UNWIND_PROCESS_GONE, unwind_process_gone),
    ];
}

/// Counters of how events were handled.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Bookkeeping {
    /// An end whose begin was not seen (attached mid-wait; a begin the kernel
    /// skipped is also in `recursion_misses`).
    pub end_without_begin: u64,
    /// A begin on another lock inside a pending wait that could not be
    /// measured (a third spinning level; a sleeping wait inside the task's
    /// pending one): skipped.
    pub nested_skipped: u64,
    /// Spinning waits that began inside another spinning wait on the CPU,
    /// measured under their own lock.
    pub nested: u64,
    /// A second begin on the same lock (mutex spin, then sleep): merged.
    pub repeated_begin: u64,
    /// A whole stack walked before for that lock and flags, proven by the
    /// waiter's own kernel stack, reused without a walk or budget.
    pub stack_proven: u64,
    /// Stack budget spent: the thread's last stack for that lock and flags
    /// (or a cut stack proven by the waiter's kernel stack) was used.
    pub stack_reused: u64,
    /// Stack budget spent and nothing to reuse: the wait has no stack (a
    /// futex wait's user stack; a kernel stack is then cut, not skipped).
    pub stack_skipped: u64,
    /// Stack budget spent and nothing to reuse: the kernel stack walked only
    /// to the wait's caller (a few frames), so every wait has its caller.
    pub stacks_cut: u64,
    /// Of those, long waits (at least `--outlier-us`) whose kernel stack was
    /// taken at their end instead.
    pub stacks_late: u64,
    /// `--owner-stacks`: a sleeping owner's stack not walked (budget spent).
    pub owner_stack_skipped: u64,
    /// Aggregate mode: a key did not fit in the aggregate map; the wait was streamed instead.
    pub agg_map_full: u64,
    /// Aggregate mode: waits (kernel and futex) whose per-CPU aggregate
    /// cache slot another key held, folded into the aggregate hash map
    /// instead (slower, not lost); counted in the slots, summed at each drain.
    pub agg_cache_missed: u64,
    /// Aggregate mode: long waits also streamed for the slowest-waits list.
    pub outliers: u64,
    /// Holds measured.
    pub holds: u64,
    /// `yield_to` calls recorded.
    pub yield_calls: u64,
    /// A `yield_to` return whose entry was not seen (attached mid-call).
    pub yield_unmatched: u64,
    /// Waits still open at stop, included up to the stop time.
    pub open_at_stop: u64,
    /// Waits folded into the `[other]` lock row at the lock cap (totals stay exact).
    pub lock_keys_overflow: u64,
    /// Waits folded into a lock's `[other]` caller row at the caller cap.
    pub caller_keys_overflow: u64,
    /// Waits folded into the `[other]` thread row at the thread cap.
    pub task_keys_overflow: u64,
    /// `lockprof serve`: lock rows dropped after `--window` without a wait.
    pub lock_rows_aged: u64,
    /// `lockprof serve`: (lock, stack) rows dropped after `--window` without a wait.
    pub caller_rows_aged: u64,
    /// `lockprof serve`: thread rows dropped after `--window` without a wait.
    pub task_rows_aged: u64,
    /// `yield_to` calls folded into `[other]` caller or pair rows (totals stay exact).
    pub yield_keys_overflow: u64,
    /// Distinct stacks read from the kernel's stack map and symbolized (one
    /// read again after its rows aged out counts again).
    pub stacks_read: u64,
    /// Stacks stored in the kernel's stack map: first seen, or seen again
    /// after the map forgot them.
    pub stacks_stored: u64,
    /// User stacks stored in the kernel's user stack map (`--user-stacks`).
    pub user_stacks_stored: u64,
    /// Distinct user stacks that end early: one frame, or an outermost
    /// frame outside any mapping (code built without frame pointers).
    pub user_stack_truncated: u64,
    /// Of those, stacks cut where the frame-pointer walk left mapped code
    /// (the next "frame" lay outside every mapping: a guess, not shown).
    pub user_stack_left_code: u64,
    /// Waits folded into the `[other cgroups]` row at the cgroup cap
    /// (totals stay exact).
    pub cgroup_keys_overflow: u64,
    /// Futex waits (system calls that may sleep) seen (`--futex`).
    pub futex_waits: u64,
    /// Futex waits that continued their thread's contention on the same word
    /// (a lock loop's retry): one contention, its time added.
    pub futex_rewaits: u64,
    /// Futex waits that returned at once because the word had changed (EAGAIN).
    pub futex_again: u64,
    /// Futex waits that timed out.
    pub futex_timed_out: u64,
    /// Futex waits interrupted by a signal.
    pub futex_interrupted: u64,
    /// Futex waits that failed otherwise (bad address, PI deadlock): not measured.
    pub futex_failed: u64,
    /// `--user-unwind copy`: user stacks copied at a wait and sent to be
    /// unwound (a call path not yet known by its signature).
    pub user_stack_copies: u64,
    /// Waits whose user stack was known by its signature: no copy.
    pub user_stack_signed: u64,
    /// Copies unwound.
    pub unwind_stacks: u64,
    /// Of those, stacks cut because they needed stack beyond the copy.
    pub unwind_copy_short: u64,
    /// Stacks cut where no unwind rule applied (no `.eh_frame` for the code,
    /// and no frame pointer to follow).
    pub unwind_no_rule: u64,
    /// Stacks cut at the depth limit.
    pub unwind_deep: u64,
    /// Call paths that could not be given a signature (their ip's plan is
    /// full): each of their waits is copied.
    pub unwind_plan_full: u64,
    /// Binaries the unwinder could not read or parse.
    pub unwind_binaries_unreadable: u64,
    /// Plan or signed-stack writes the kernel refused: those call paths
    /// are copied again.
    pub unwind_map_refused: u64,
    /// Separate debug files fetched from debuginfod (`DEBUGINFOD_URLS`).
    pub debuginfod_fetched: u64,
    /// Binaries whose debug file was neither installed nor given by debuginfod.
    pub debuginfod_missed: u64,
}

impl Bookkeeping {
    /// Every bookkeeping counter, in display order.
    pub const LIST: [Field<Bookkeeping>; 47] = [
        field!(kernel(counter::END_WITHOUT_BEGIN), end_without_begin),
        field!(kernel(counter::NESTED), nested_skipped),
        field!(kernel(counter::NESTED_WAITS), nested),
        field!(kernel(counter::REPEATED_BEGIN), repeated_begin),
        field!(kernel(counter::STACK_PROVEN), stack_proven),
        field!(kernel(counter::STACK_REUSED), stack_reused),
        field!(kernel(counter::STACK_SKIPPED), stack_skipped),
        field!(kernel(counter::STACKS_LATE), stacks_late),
        field!(kernel(counter::STACKS_CUT), stacks_cut),
        field!(kernel(counter::OWNER_STACK_SKIPPED), owner_stack_skipped),
        field!(kernel(counter::AGG_FULL), agg_map_full),
        field!(kernel(counter::AGG_CACHE_MISSED), agg_cache_missed),
        field!(kernel(counter::OUTLIERS), outliers),
        field!(kernel(counter::HOLDS), holds),
        field!(kernel(counter::YIELDS), yield_calls),
        field!(kernel(counter::YIELD_UNMATCHED), yield_unmatched),
        field!(user::OPEN_AT_STOP, open_at_stop),
        field!(user::LOCK_KEYS_OVERFLOW, lock_keys_overflow),
        field!(user::CALLER_KEYS_OVERFLOW, caller_keys_overflow),
        field!(user::TASK_KEYS_OVERFLOW, task_keys_overflow),
        field!(user::LOCK_ROWS_AGED, lock_rows_aged),
        field!(user::CALLER_ROWS_AGED, caller_rows_aged),
        field!(user::TASK_ROWS_AGED, task_rows_aged),
        field!(user::YIELD_KEYS_OVERFLOW, yield_keys_overflow),
        field!(user::STACKS_READ, stacks_read),
        field!(kernel(counter::STACKS_STORED), stacks_stored),
        field!(kernel(counter::USER_STACKS_STORED), user_stacks_stored),
        field!(user::USER_STACK_TRUNCATED, user_stack_truncated),
        field!(user::USER_STACK_LEFT_CODE, user_stack_left_code),
        field!(user::CGROUP_KEYS_OVERFLOW, cgroup_keys_overflow),
        field!(kernel(counter::FUTEX_WAITS), futex_waits),
        field!(kernel(counter::FUTEX_REWAITS), futex_rewaits),
        field!(kernel(counter::FUTEX_AGAIN), futex_again),
        field!(kernel(counter::FUTEX_TIMED_OUT), futex_timed_out),
        field!(kernel(counter::FUTEX_INTERRUPTED), futex_interrupted),
        field!(kernel(counter::FUTEX_FAILED), futex_failed),
        field!(kernel(counter::USER_STACK_COPIES), user_stack_copies),
        field!(kernel(counter::USER_STACK_SIGNED), user_stack_signed),
        field!(user::UNWIND_STACKS, unwind_stacks),
        field!(user::UNWIND_COPY_SHORT, unwind_copy_short),
        field!(user::UNWIND_NO_RULE, unwind_no_rule),
        field!(user::UNWIND_DEEP, unwind_deep),
        field!(user::UNWIND_PLAN_FULL, unwind_plan_full),
        field!(user::UNWIND_BINARIES_UNREADABLE, unwind_binaries_unreadable),
        field!(user::UNWIND_MAP_REFUSED, unwind_map_refused),
        field!(user::DEBUGINFOD_FETCHED, debuginfod_fetched),
        field!(user::DEBUGINFOD_MISSED, debuginfod_missed),
    ];
}

/// Every counter a recording carries.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Data lost.
    pub losses: Losses,
    /// How events were handled.
    pub bookkeeping: Bookkeeping,
}

impl Counters {
    /// Every counter: the losses, then the bookkeeping, in list order.
    pub fn iter(&self) -> impl Iterator<Item = Counter> + '_ {
        let losses = Losses::LIST.iter().map(|f| Counter {
            name: f.name,
            kind: CounterKind::Loss,
            value: (f.get)(&self.losses),
        });
        let kept = Bookkeeping::LIST.iter().map(|f| Counter {
            name: f.name,
            kind: CounterKind::Bookkeeping,
            value: (f.get)(&self.bookkeeping),
        });
        losses.chain(kept)
    }

    /// The losses that are not zero.
    pub fn lost(&self) -> impl Iterator<Item = Counter> + '_ {
        self.iter().filter(|c| c.kind == CounterKind::Loss && c.value > 0)
    }

    /// Sets the counter called `name`; false when no counter has that name
    /// (e.g. the kernel's `events`, which is not a counter of these).
    pub fn set(&mut self, name: &str, value: u64) -> bool {
        if let Some(f) = Losses::LIST.iter().find(|f| f.name == name) {
            *(f.slot)(&mut self.losses) = value;
        } else if let Some(f) = Bookkeeping::LIST.iter().find(|f| f.name == name) {
            *(f.slot)(&mut self.bookkeeping) = value;
        } else {
            return false;
        }
        true
    }
}

/// Written as a name -> count map sorted by name, as before the counters were typed.
impl Serialize for Counters {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&str, u64> = self.iter().map(|c| (c.name, c.value)).collect();
        map.serialize(s)
    }
}

/// Read from a name -> count map: unknown names are ignored, missing ones are 0.
impl<'de> Deserialize<'de> for Counters {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, u64>::deserialize(d)?;
        let mut c = Counters::default();
        for (name, value) in map {
            c.set(&name, value);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_counter_has_one_name_and_one_field() {
        let names: Vec<&str> = Counters::default().iter().map(|c| c.name).collect();
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a name is listed twice: {names:?}");
        // Each entry writes its own field: setting one counter by name shows
        // only that counter.
        for (i, name) in names.iter().enumerate() {
            let mut c = Counters::default();
            assert!(c.set(name, i as u64 + 1));
            let nonzero: Vec<Counter> = c.iter().filter(|c| c.value > 0).collect();
            assert_eq!(nonzero.len(), 1, "{name}");
            assert_eq!((nonzero[0].name, nonzero[0].value), (*name, i as u64 + 1));
        }
        // Every kernel counter but the event total has a field.
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(Counters::default().set(name, 1), i as u32 != counter::EVENTS, "{name}");
        }
    }

    #[test]
    fn losses_are_told_apart() {
        let mut c = Counters::default();
        c.losses.ringbuf_full = 3;
        c.bookkeeping.stack_reused = 5;
        let lost: Vec<(&str, u64)> = c.lost().map(|c| (c.name, c.value)).collect();
        assert_eq!(lost, [("ringbuf_full", 3)]);
        let kinds: Vec<CounterKind> = c.iter().filter(|c| c.value > 0).map(|c| c.kind).collect();
        assert_eq!(kinds, [CounterKind::Loss, CounterKind::Bookkeeping]);
    }

    #[test]
    fn json_is_a_name_map_and_old_maps_load() {
        let mut c = Counters::default();
        c.losses.stack_failed = 2;
        c.bookkeeping.holds = 7;
        let v = serde_json::to_value(c).expect("serialize");
        let obj = v.as_object().expect("an object");
        assert_eq!(obj.len(), Losses::LIST.len() + Bookkeeping::LIST.len());
        assert_eq!(
            (v["stack_failed"].as_u64(), v["holds"].as_u64(), v["ringbuf_full"].as_u64()),
            (Some(2), Some(7), Some(0))
        );
        let keys: Vec<&String> = obj.keys().collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted by name: {keys:?}");
        assert_eq!(serde_json::from_value::<Counters>(v).expect("back"), c);

        // An older file: some counters missing, one this version does not know.
        let old = r#"{"ringbuf_full": 4, "holds": 1, "retired_counter": 9}"#;
        let back: Counters = serde_json::from_str(old).expect("old map");
        assert_eq!((back.losses.ringbuf_full, back.bookkeeping.holds), (4, 1));
        assert_eq!(back.iter().map(|c| c.value).sum::<u64>(), 5);
        assert!(serde_json::from_str::<Counters>(r#"{"holds": "x"}"#).is_err());
    }
}
