//! Signals while a command runs: SIGINT, SIGTERM and SIGHUP, held since
//! lockprof started (`shutdown::hold`, in every thread), are taken here by
//! one thread with `sigtimedwait`, which also says who sent each: the
//! terminal (a Ctrl-C already reached the command, in the same foreground
//! process group) or a process (`kill`), whose signal is passed on.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use tokio::sync::mpsc;

/// A signal lockprof received.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Caught {
    /// The signal.
    pub signo: i32,
    /// Sent by the kernel for the terminal (Ctrl-C, a hangup): the
    /// foreground process group, the command with it, got it too.
    pub from_terminal: bool,
    /// The sending process (0 when the kernel sent it).
    pub sender: i32,
}

/// The signals taken while lockprof runs commands; dropping it stops the
/// thread (within its poll interval).
pub struct Signals {
    rx: mpsc::UnboundedReceiver<Caught>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Whether SIGHUP was ignored when lockprof started (`nohup`): it then
/// stays ignored, for lockprof and the command.
fn hangup_ignored() -> bool {
    // SAFETY: sigaction with a null new action only reads the current
    // disposition into an owned, zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

impl Signals {
    /// Starts taking SIGINT, SIGTERM and SIGHUP (unless ignored at start).
    /// They must be blocked in every thread already (`shutdown::hold` in
    /// main, before any thread started), or one would kill the process.
    pub fn catch() -> std::io::Result<Signals> {
        let mut wanted = vec![libc::SIGINT, libc::SIGTERM];
        if !hangup_ignored() {
            wanted.push(libc::SIGHUP);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::Builder::new().name("lockprof-signals".into()).spawn(move || {
            // SAFETY: sigset_t is plain data; sigemptyset initialises it.
            let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is owned; the signal numbers are valid.
            unsafe {
                libc::sigemptyset(&mut set);
                for s in &wanted {
                    libc::sigaddset(&mut set, *s);
                }
            }
            // How long between looks at the stop flag.
            let poll = libc::timespec { tv_sec: 0, tv_nsec: 100_000_000 };
            while !done.load(Ordering::Relaxed) {
                // SAFETY: siginfo_t is plain data; sigtimedwait fills it.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: every pointer is to owned, live memory.
                let signo = unsafe { libc::sigtimedwait(&set, &mut info, &poll) };
                if signo <= 0 {
                    continue;
                }
                // SAFETY: si_pid is valid to read for signals sent by kill(2)
                // and by the kernel (then 0), which are all this set gets.
                let sender = unsafe { info.si_pid() };
                let caught = Caught { signo, from_terminal: info.si_code == libc::SI_KERNEL, sender };
                if tx.send(caught).is_err() {
                    break;
                }
            }
        })?;
        Ok(Signals { rx, stop, thread: Some(thread) })
    }

    /// The next signal (never returns None while `self` lives).
    pub async fn recv(&mut self) -> Option<Caught> {
        self.rx.recv().await
    }

    /// A signal already taken, if any (without waiting).
    pub fn pending(&mut self) -> Option<Caught> {
        self.rx.try_recv().ok()
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
