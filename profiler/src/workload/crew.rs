//! The threads of one workload run: the end condition they share, the
//! operation counter they add to, and the handles that are joined at the end.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
    time::Instant,
};

/// When a run ends: `stop` set, or the deadline passed.
#[derive(Clone)]
pub(super) struct End {
    stop: Arc<AtomicBool>,
    deadline: Instant,
}

impl End {
    /// Whether the run is over.
    pub(super) fn reached(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

/// What one step of a worker's loop did.
pub(super) enum Step {
    /// Completed one operation: counted.
    Counted,
    /// Went on without completing a counted operation.
    Uncounted,
    /// Failed for good: the worker leaves.
    Stop,
}

/// The worker threads of a run.
pub(super) struct Crew {
    end: End,
    ops: Arc<AtomicU64>,
    handles: Vec<JoinHandle<()>>,
}

impl Crew {
    /// A crew whose run ends at `deadline` or when `stop` is set.
    pub(super) fn new(deadline: Instant, stop: Arc<AtomicBool>) -> Crew {
        Crew { end: End { stop, deadline }, ops: Arc::new(AtomicU64::new(0)), handles: Vec::new() }
    }

    /// Starts a thread running `body` with the run's end condition.
    pub(super) fn spawn(&mut self, body: impl FnOnce(End) + Send + 'static) {
        let end = self.end.clone();
        self.handles.push(thread::spawn(move || body(end)));
    }

    /// Starts a thread repeating `step` until the run ends or a step says
    /// [`Step::Stop`], counting the [`Step::Counted`] ones.
    pub(super) fn repeat(&mut self, mut step: impl FnMut() -> Step + Send + 'static) {
        let ops = self.ops.clone();
        self.spawn(move |end| {
            while !end.reached() {
                match step() {
                    Step::Counted => {
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Step::Uncounted => {}
                    Step::Stop => break,
                }
            }
        });
    }

    /// Waits for every thread; returns the operations counted.
    pub(super) fn join(self) -> u64 {
        for h in self.handles {
            let _ = h.join();
        }
        self.ops.load(Ordering::Relaxed)
    }
}
