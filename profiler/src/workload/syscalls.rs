//! The few raw system calls the workloads need.

use std::{
    fs::File,
    io::{Read, Write},
    os::fd::{FromRawFd, OwnedFd},
};

/// A pipe as (read end, write end).
pub(super) fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into a valid 2-element array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created by pipe2 and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(r), File::from(w)))
}

pub(super) fn read(f: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut f = f;
    f.read(buf)
}

pub(super) fn write(f: &File, buf: &[u8]) -> std::io::Result<usize> {
    let mut f = f;
    f.write(buf)
}

/// fork(); the child exits at once; the parent reaps it.
pub(super) fn fork_exit_wait() -> std::io::Result<()> {
    // SAFETY: the child calls only _exit, which is async-signal-safe, so
    // forking a multi-threaded process is sound here.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // SAFETY: terminating the forked child without running any Rust code.
            unsafe { libc::_exit(0) }
        }
        child => {
            let mut status = 0;
            // SAFETY: waits for our own child; status points to a valid int.
            let rc = unsafe { libc::waitpid(child, &mut status, 0) };
            if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        }
    }
}

/// getpriority(PRIO_PGRP, 0): walks the process group under read_lock(&tasklist_lock).
pub(super) fn getpriority_pgrp() {
    // SAFETY: getpriority only reads kernel state; errors are returned in errno.
    unsafe {
        libc::getpriority(libc::PRIO_PGRP, 0);
    }
}

/// setpgid(0, 0): become the leader of a new process group.
pub(super) fn own_process_group() -> std::io::Result<()> {
    // SAFETY: setpgid on ourselves has no memory-safety preconditions.
    let rc = unsafe { libc::setpgid(0, 0) };
    if rc != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}
