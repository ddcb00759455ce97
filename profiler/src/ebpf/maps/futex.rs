//! The futex wait map (`--futex`): entries of exited threads reaped, and
//! the contentions whose waits are over but whose end (the thread's
//! release or next wait) was not seen yet read at stop or when their
//! thread is gone.

use aya::maps::{HashMap, MapData};
use profiler_common::{ContentionEvent, EVENT_CONTENTION, futex::FutexWait};

/// Per-thread futex contentions in progress.
pub struct FutexMaps {
    waits: HashMap<MapData, u32, FutexWait>,
}

/// A contention whose waits are over, as the record the kernel would have
/// sent (`tid` its thread).
pub fn finished(tid: u32, w: &FutexWait) -> Option<ContentionEvent> {
    (w.uaddr != 0 && w.enter_ns == 0 && w.exit_ns != 0).then(|| ContentionEvent {
        kind: EVENT_CONTENTION,
        lock_addr: w.uaddr,
        wait_ns: w.total_ns,
        end_ns: w.exit_ns,
        tid,
        tgid: w.tgid,
        flags: w.flags,
        stack_id: w.stack_id,
        user_stack_id: w.user_stack_id,
        cgroup_id: w.cgroup_id,
        owner: w.owner,
        ..ContentionEvent::default()
    })
}

impl FutexMaps {
    pub(crate) fn new(waits: HashMap<MapData, u32, FutexWait>) -> Self {
        FutexMaps { waits }
    }

    /// Deletes the entries of threads that no longer exist; returns the
    /// contentions they still held (their waits were over: the thread
    /// exited before releasing or waiting again).
    pub fn reap_exited(&mut self) -> Vec<ContentionEvent> {
        let entries: Vec<(u32, FutexWait)> = self.waits.iter().filter_map(Result::ok).collect();
        let mut out = Vec::new();
        for (tid, w) in entries {
            if std::path::Path::new(&format!("/proc/{}/task/{tid}", w.tgid)).exists() {
                continue;
            }
            if self.waits.remove(&tid).is_ok() {
                out.extend(finished(tid, &w));
            }
        }
        out
    }

    /// The contentions whose waits are over and whose end was not seen yet
    /// (at stop); waits still in progress are not measured.
    pub fn finished_at_stop(&self) -> Vec<ContentionEvent> {
        self.waits.iter().filter_map(Result::ok).filter_map(|(tid, w)| finished(tid, &w)).collect()
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::lcb;

    use super::*;

    #[test]
    fn only_contentions_between_waits_are_finished() {
        let w = FutexWait {
            uaddr: 0x1000,
            exit_ns: 50,
            total_ns: 40,
            flags: lcb::FUTEX,
            tgid: 9,
            waits: 2,
            ..FutexWait::default()
        };
        let ev = finished(10, &w).expect("waits over");
        assert_eq!((ev.lock_addr, ev.wait_ns, ev.tid, ev.tgid, ev.end_ns), (0x1000, 40, 10, 9, 50));
        assert!(finished(10, &FutexWait { enter_ns: 60, ..w }).is_none(), "a wait in progress is not measured");
        assert!(finished(10, &FutexWait { uaddr: 0, ..w }).is_none(), "released: already accounted");
        assert!(finished(10, &FutexWait { exit_ns: 0, ..w }).is_none(), "inside its first wait");
    }
}
