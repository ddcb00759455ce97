//! The threads of each scenario, started in a [`Crew`].

use std::{path::PathBuf, sync::Arc, thread, time::Duration};

use super::{
    Workload,
    crew::{Crew, Step},
    futex::{self, Tallies},
    syscalls,
};

/// Whether a step that either succeeds (one operation) or fails for good did the former.
fn counted_unless_failed(ok: bool) -> Step {
    if ok { Step::Counted } else { Step::Stop }
}

/// What a started scenario leaves for after its threads are joined.
#[derive(Default)]
pub(super) struct Started {
    /// A scratch directory to remove.
    pub(super) scratch: Option<PathBuf>,
    /// The scenario's own counts.
    pub(super) tallies: Tallies,
}

/// Starts `w`'s threads (`threads` workers) in `crew`.
pub(super) fn start(w: Workload, threads: usize, crew: &mut Crew) -> std::io::Result<Started> {
    match w {
        Workload::Pipe => pipe(crew, threads)?,
        Workload::Fork => fork(crew, threads),
        Workload::Prio => prio(crew, threads)?,
        Workload::Mmap => mmap(crew, threads),
        Workload::Pgrp => pgrp(crew, threads)?,
        Workload::Unlink => return Ok(Started { scratch: Some(unlink(crew, threads)?), ..Started::default() }),
        Workload::Futex => return Ok(Started { tallies: futex::futex(crew, threads), ..Started::default() }),
        Workload::FutexPi => return Ok(Started { tallies: futex::futex_pi(crew, threads)?, ..Started::default() }),
        Workload::Condvar => return Ok(Started { tallies: futex::condvar(crew, threads), ..Started::default() }),
        // Run by `run_with` itself, without a crew.
        Workload::Stall => {}
    }
    Ok(Started::default())
}

/// One reader draining a pipe, `threads` writers counting their writes.
fn pipe(crew: &mut Crew, threads: usize) -> std::io::Result<()> {
    let (rd, wr) = syscalls::pipe()?;
    let rd = Arc::new(rd);
    let wr = Arc::new(wr);
    {
        let rd = rd.clone();
        let mut buf = vec![0u8; 1 << 16];
        crew.repeat(move || match syscalls::read(&rd, &mut buf) {
            Ok(_) => Step::Uncounted,
            Err(_) => Step::Stop,
        });
    }
    for _ in 0..threads {
        let wr = wr.clone();
        let buf = [7u8; 512];
        crew.repeat(move || counted_unless_failed(syscalls::write(&wr, &buf).is_ok()));
    }
    // Writers may block on a full pipe after the reader stops: close the
    // read side once time is up so they see EPIPE and leave.
    crew.spawn(move |end| {
        while !end.reached() {
            thread::sleep(Duration::from_millis(10));
        }
        drop(rd);
    });
    Ok(())
}

/// `count` (counted or not) threads creating and reaping tasks that exit at once.
fn task_creators(crew: &mut Crew, count: usize, counted: bool) {
    for _ in 0..count {
        crew.repeat(move || match syscalls::spawn_exit_wait() {
            Ok(()) if counted => Step::Counted,
            Ok(()) => Step::Uncounted,
            Err(_) => Step::Stop,
        });
    }
}

/// `threads` task creators, counted.
fn fork(crew: &mut Crew, threads: usize) {
    task_creators(crew, threads, true);
}

/// One task creator against `threads` getpriority(PRIO_PGRP) readers, counted.
fn prio(crew: &mut Crew, threads: usize) -> std::io::Result<()> {
    // getpriority(PRIO_PGRP) walks every thread of the process group: make
    // that group ours alone, or the threads of whatever started us (a
    // tracer, say) are walked too.
    syscalls::own_process_group()?;
    task_creators(crew, 1, false);
    for _ in 0..threads {
        crew.repeat(|| {
            syscalls::getpriority_pgrp();
            Step::Counted
        });
    }
    Ok(())
}

/// Half the threads (rounded up) map, touch and unmap; the others fault pages in.
fn mmap(crew: &mut Crew, threads: usize) {
    let half = threads.div_ceil(2);
    for t in 0..threads {
        let mapper = t < half;
        crew.repeat(move || {
            counted_unless_failed(if mapper { syscalls::map_touch_unmap(16) } else { syscalls::fault_pages(64) })
        });
    }
}

/// setpgid(0, 0) loops against kill(0, 0) loops, at least one of each.
fn pgrp(crew: &mut Crew, threads: usize) -> std::io::Result<()> {
    syscalls::own_process_group()?;
    for t in 0..threads.max(2) {
        crew.repeat(move || {
            if t % 2 == 0 {
                syscalls::setpgid_self();
            } else {
                syscalls::kill_group_probe();
            }
            Step::Counted
        });
    }
    Ok(())
}

/// `threads` threads creating and unlinking files in one fresh directory,
/// which is returned.
fn unlink(crew: &mut Crew, threads: usize) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lockprof-unlink-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for t in 0..threads {
        let dir = dir.clone();
        let mut i = 0u64;
        crew.repeat(move || {
            let path = dir.join(format!("f{t}-{}", i % 64));
            i += 1;
            if std::fs::File::create(&path).is_ok() && std::fs::remove_file(&path).is_ok() {
                Step::Counted
            } else {
                Step::Uncounted
            }
        });
    }
    Ok(dir)
}
