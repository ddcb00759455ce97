//! Built-in contention generators, reproducing the project's seed scenarios.
//! Used by `lockprof stress`, the root integration tests and `cargo xtask bench`.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

mod crew;
mod scenarios;
mod syscalls;

use crew::Crew;

/// A contention scenario.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Writers on one pipe (pipe->mutex), one reader draining it.
    Pipe,
    /// Threads creating and reaping tasks that exit at once (clone with
    /// CLONE_VM|CLONE_VFORK, _exit, waitpid): tasklist_lock's write side in
    /// copy_process/exit_notify/release_task against its read side in wait.
    Fork,
    /// Threads creating and unlinking files in one directory (the directory's i_rwsem).
    Unlink,
    /// getpriority(PRIO_PGRP) readers against a task-creating thread (tasklist_lock read side);
    /// the process moves into a process group of its own.
    Prio,
    /// mmap/munmap loops against page-faulting threads (the process's mmap_lock rwsem).
    Mmap,
    /// setpgid(0, 0) loops against kill(0, 0) loops (tasklist_lock write and read sides).
    Pgrp,
}

impl Workload {
    /// Every scenario.
    pub const ALL: [Workload; 6] =
        [Workload::Pipe, Workload::Fork, Workload::Unlink, Workload::Prio, Workload::Mmap, Workload::Pgrp];

    /// Stable name, as typed after `lockprof stress`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Pipe => "pipe",
            Workload::Fork => "fork",
            Workload::Unlink => "unlink",
            Workload::Prio => "prio",
            Workload::Mmap => "mmap",
            Workload::Pgrp => "pgrp",
        }
    }
}

/// Result of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// Operations completed (writes, forks, create+unlink pairs, syscalls).
    pub ops: u64,
    /// Wall-clock time.
    pub elapsed: Duration,
}

impl Outcome {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `w` with `threads` threads for `duration`, or until `stop` is set.
pub fn run(w: Workload, threads: usize, duration: Duration, stop: Arc<AtomicBool>) -> std::io::Result<Outcome> {
    let start = Instant::now();
    let mut crew = Crew::new(start + duration, stop);
    let scratch = scenarios::start(w, threads.max(1), &mut crew)?;
    let ops = crew.join();
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(Outcome { ops, elapsed: start.elapsed() })
}
