//! Built-in contention generators, reproducing the project's seed scenarios.
//! Used by `lockprof stress`, the root integration tests and `cargo xtask bench`.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

mod syscalls;

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
    let threads = threads.max(1);
    let ops = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let done = {
        let stop = stop.clone();
        move || stop.load(Ordering::Relaxed) || Instant::now() >= deadline
    };
    let mut handles = Vec::new();
    let mut cleanup: Option<PathBuf> = None;
    match w {
        Workload::Pipe => {
            let (rd, wr) = syscalls::pipe()?;
            let rd = Arc::new(rd);
            let wr = Arc::new(wr);
            {
                let rd = rd.clone();
                let done = done.clone();
                handles.push(thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while !done() {
                        if syscalls::read(&rd, &mut buf).is_err() {
                            break;
                        }
                    }
                }));
            }
            for _ in 0..threads {
                let (wr, ops, done) = (wr.clone(), ops.clone(), done.clone());
                handles.push(thread::spawn(move || {
                    let buf = [7u8; 512];
                    while !done() {
                        if syscalls::write(&wr, &buf).is_err() {
                            break;
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            // Writers may block on a full pipe after the reader stops: close the
            // read side once time is up so they see EPIPE and leave.
            let joiner = {
                let done = done.clone();
                thread::spawn(move || {
                    while !done() {
                        thread::sleep(Duration::from_millis(10));
                    }
                    drop(rd);
                })
            };
            handles.push(joiner);
        }
        Workload::Fork | Workload::Prio => {
            if w == Workload::Prio {
                // getpriority(PRIO_PGRP) walks every thread of the process
                // group: make that group ours alone, or the threads of
                // whatever started us (a tracer, say) are walked too.
                syscalls::own_process_group()?;
            }
            let forkers = if w == Workload::Fork { threads } else { 1 };
            for _ in 0..forkers {
                let (ops, done) = (ops.clone(), done.clone());
                let count = w == Workload::Fork;
                handles.push(thread::spawn(move || {
                    while !done() {
                        if syscalls::spawn_exit_wait().is_err() {
                            break;
                        }
                        if count {
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            if w == Workload::Prio {
                for _ in 0..threads {
                    let (ops, done) = (ops.clone(), done.clone());
                    handles.push(thread::spawn(move || {
                        while !done() {
                            syscalls::getpriority_pgrp();
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                }
            }
        }
        Workload::Mmap => {
            let half = threads.div_ceil(2);
            for t in 0..threads {
                let (ops, done) = (ops.clone(), done.clone());
                let mapper = t < half;
                handles.push(thread::spawn(move || {
                    while !done() {
                        let ok = if mapper { syscalls::map_touch_unmap(16) } else { syscalls::fault_pages(64) };
                        if !ok {
                            break;
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        Workload::Pgrp => {
            syscalls::own_process_group()?;
            for t in 0..threads.max(2) {
                let (ops, done) = (ops.clone(), done.clone());
                handles.push(thread::spawn(move || {
                    while !done() {
                        if t % 2 == 0 {
                            syscalls::setpgid_self();
                        } else {
                            syscalls::kill_group_probe();
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        Workload::Unlink => {
            let dir = std::env::temp_dir().join(format!("lockprof-unlink-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            cleanup = Some(dir.clone());
            for t in 0..threads {
                let (ops, done, dir) = (ops.clone(), done.clone(), dir.clone());
                handles.push(thread::spawn(move || {
                    let mut i = 0u64;
                    while !done() {
                        let path = dir.join(format!("f{t}-{}", i % 64));
                        i += 1;
                        if std::fs::File::create(&path).is_ok() && std::fs::remove_file(&path).is_ok() {
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(dir) = cleanup {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(Outcome { ops: ops.load(Ordering::Relaxed), elapsed: start.elapsed() })
}
