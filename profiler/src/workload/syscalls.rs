//! The few raw system calls the workloads need.

use std::{
    fs::File,
    io::{Read, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
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

/// The child of [`spawn_exit_wait`]: leaves at once, running no Rust code.
extern "C" fn exit_at_once(_: *mut libc::c_void) -> libc::c_int {
    // SAFETY: _exit ends the child without touching the parent's (shared) memory.
    unsafe { libc::_exit(0) }
}

/// A task created and reaped without copying memory: clone(CLONE_VM |
/// CLONE_VFORK) of a child that exits at once, then waitpid. Task creation,
/// exit and reaping are what is left, so the task-list work dominates
/// (`tasklist_lock` for write in copy_process, exit_notify and
/// release_task; for read in wait).
pub(super) fn spawn_exit_wait() -> std::io::Result<()> {
    const STACK: usize = 64 * 1024;
    let mut stack = vec![0u8; STACK];
    // SAFETY: the child runs on `stack` (its top, 16-byte aligned, inside the
    // allocation) and only calls _exit; CLONE_VFORK suspends this thread until
    // the child has exited, so the stack outlives the child's use of it.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(STACK - 16) as usize & !15;
        libc::clone(
            exit_at_once,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::null_mut(),
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut status = 0;
    // SAFETY: waits for our own child; status points to a valid int.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    drop(stack);
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
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

/// A fresh anonymous private read/write mapping of `len` bytes.
fn map_anon(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: a new anonymous mapping placed by the kernel; checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p)
}

/// mmap `pages` anonymous pages, touch each, munmap (mmap_lock write side).
pub(super) fn map_touch_unmap(pages: usize) -> bool {
    let len = pages * 4096;
    let Some(p) = map_anon(len) else {
        return false;
    };
    for i in 0..pages {
        // SAFETY: within the mapping just created, writable.
        unsafe { p.cast::<u8>().add(i * 4096).write_volatile(1) };
    }
    // SAFETY: unmapping exactly what we mapped.
    unsafe { libc::munmap(p, len) == 0 }
}

/// Fault in `pages` fresh pages of a private mapping, then drop them again
/// (page faults take the mmap_lock read side).
pub(super) fn fault_pages(pages: usize) -> bool {
    thread_local! {
        static MAP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    let len = pages * 4096;
    let base = MAP.with(|m| {
        // Kept for the thread's lifetime.
        if m.get() == 0
            && let Some(p) = map_anon(len)
        {
            m.set(p as usize);
        }
        m.get()
    });
    if base == 0 {
        return false;
    }
    for i in 0..pages {
        // SAFETY: within the thread's mapping, writable.
        unsafe { (base as *mut u8).add(i * 4096).write_volatile(1) };
    }
    // SAFETY: madvise on our own mapping; the next touch faults again.
    unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 }
}

/// setpgid(0, 0) again (tasklist_lock write side); errors are irrelevant here.
pub(super) fn setpgid_self() {
    // SAFETY: no memory is involved.
    unsafe {
        libc::setpgid(0, 0);
    }
}

/// kill(0, 0): checks permission to signal our group (tasklist_lock read side).
pub(super) fn kill_group_probe() {
    // SAFETY: signal 0 only checks; no signal is sent.
    unsafe {
        libc::kill(0, 0);
    }
}

/// The calling thread's id (what /proc/<pid>/task lists).
pub(super) fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// splice(2) of at most `len` bytes from the pipe `from` to `to`, blocking
/// (no SPLICE_F_NONBLOCK); the bytes moved.
pub(super) fn splice(from: &File, to: &impl AsRawFd, len: usize) -> std::io::Result<usize> {
    // SAFETY: both fds are open for the call's duration (borrowed); null
    // offsets: a pipe and a socket have no file position to pass.
    let n =
        unsafe { libc::splice(from.as_raw_fd(), std::ptr::null_mut(), to.as_raw_fd(), std::ptr::null_mut(), len, 0) };
    if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
}
