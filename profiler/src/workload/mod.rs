//! Built-in contention generators, reproducing the project's seed scenarios.
//! Used by `lockprof stress`, the root integration tests and `cargo xtask bench`.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

mod crew;
mod futex;
mod scenarios;
mod stall;
mod syscalls;

use crew::Crew;
pub use stall::{Stall, StallOptions};

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
    /// Threads taking a glibc `pthread_mutex_t` and a Rust `std::sync::Mutex`
    /// at random (user-space futex locks, the `futex` type).
    Futex,
    /// Threads taking one glibc priority-inheritance mutex (`FUTEX_LOCK_PI`,
    /// the `futex-pi` type).
    FutexPi,
    /// A producer and consumers idle on a glibc condition variable: futex
    /// waits that are not lock contention.
    Condvar,
    /// One long wait on a pipe's mutex at a known moment (`--stall-at`),
    /// by a known waiter on a known holder, whose acquire stack passes
    /// through splice (see `stall.rs`).
    Stall,
}

impl Workload {
    /// Every scenario.
    pub const ALL: [Workload; 10] = [
        Workload::Pipe,
        Workload::Fork,
        Workload::Unlink,
        Workload::Prio,
        Workload::Mmap,
        Workload::Pgrp,
        Workload::Futex,
        Workload::FutexPi,
        Workload::Condvar,
        Workload::Stall,
    ];

    /// Stable name, as typed after `lockprof stress`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Pipe => "pipe",
            Workload::Fork => "fork",
            Workload::Unlink => "unlink",
            Workload::Prio => "prio",
            Workload::Mmap => "mmap",
            Workload::Pgrp => "pgrp",
            Workload::Futex => "futex",
            Workload::FutexPi => "futex-pi",
            Workload::Condvar => "condvar",
            Workload::Stall => "stall",
        }
    }
}

/// What a workload counted of itself.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CountKind {
    /// Acquisitions of a lock.
    Acquired,
    /// Acquisitions whose try failed, so the thread blocked on the lock.
    Contended,
    /// Returns from a condition-variable wait.
    CondvarWaits,
}

impl CountKind {
    /// Stable name, the first word of a count's line.
    pub fn name(self) -> &'static str {
        match self {
            CountKind::Acquired => "acquired",
            CountKind::Contended => "contended",
            CountKind::CondvarWaits => "condvar-waits",
        }
    }
}

/// One count a workload kept of a lock (or condition variable), named by
/// its ELF symbol. Printed as `<kind> <symbol> <n>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Count {
    /// What was counted.
    pub kind: CountKind,
    /// The symbol of the lock it is about.
    pub symbol: &'static str,
    /// How many.
    pub n: u64,
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.kind.name(), self.symbol, self.n)
    }
}

/// Result of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Operations completed (writes, forks, create+unlink pairs, syscalls,
    /// lock acquisitions, items consumed).
    pub ops: u64,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// The workload's own counts (the user-space lock workloads'), in a
    /// stable order.
    pub counts: Vec<Count>,
}

impl Outcome {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `w` with `threads` threads for `duration`, or until `stop` is set
/// (`stall` with its default options, reporting nothing).
pub fn run(w: Workload, threads: usize, duration: Duration, stop: Arc<AtomicBool>) -> std::io::Result<Outcome> {
    run_with(w, threads, duration, StallOptions::default(), &mut |_| {}, stop)
}

/// [`run`], with the options only `stall` reads and what to do with its
/// stall once it is over (called while its threads are alive; the run
/// then idles until `duration` ends: a stall later than that ends it).
pub fn run_with(
    w: Workload,
    threads: usize,
    duration: Duration,
    stall: StallOptions,
    report: &mut dyn FnMut(&Stall),
    stop: Arc<AtomicBool>,
) -> std::io::Result<Outcome> {
    let start = Instant::now();
    if w == Workload::Stall {
        let ops = stall::run(stall, start, start + duration, &stop, report)?;
        return Ok(Outcome { ops, elapsed: start.elapsed(), counts: Vec::new() });
    }
    let mut crew = Crew::new(start + duration, stop);
    let started = scenarios::start(w, threads.max(1), &mut crew)?;
    let ops = crew.join();
    if let Some(dir) = started.scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(Outcome { ops, elapsed: start.elapsed(), counts: started.tallies.counts() })
}
