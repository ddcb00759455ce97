//! Noticing the command's end without reaping it: its pid stays its own
//! (a zombie) until lockprof reaps it, so a signal passed on meanwhile can
//! never reach another process that took the pid.

use tokio::sync::oneshot;

/// Resolves once process `pid` (lockprof's child) has exited, leaving it unreaped.
pub fn exited(pid: u32) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let spawned = std::thread::Builder::new().name("lockprof-wait".into()).spawn(move || {
        loop {
            // SAFETY: siginfo_t is plain data; waitid fills it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is owned and live; WNOWAIT leaves the child to be reaped by its owner.
            let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
            if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
        let _ = tx.send(());
    });
    if let Err(e) = spawned {
        log::warn!("cannot watch the command's end: {e}");
    }
    rx
}
