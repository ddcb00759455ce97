//! Signals: SIGINT and SIGTERM cancel one token that every task watches;
//! SIGHUP stops a session run from a terminal (the terminal went away) and
//! is ignored by the daemon.
//!
//! The live commands call [`hold`] first thing, so a signal that arrives
//! while the programs load and attach waits until [`on_signal`] can handle
//! it: the session then stops cleanly, with its report, instead of dying
//! half attached (the kernel would detach, but the report would be lost).

use std::{
    io::Write as _,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// The signals [`hold`] defers and [`on_signal`] handles.
const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// What SIGHUP does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Hangup {
    /// Stop like SIGTERM (`record`, `top`, `flamegraph`: their terminal
    /// closed), unless SIGHUP was already ignored when lockprof started
    /// (`nohup`): then it stays ignored.
    Stop,
    /// Keep running, saying so once (`serve`: a daemon outlives the
    /// terminal that started it; it has no configuration to reload).
    Ignore,
}

/// SIGHUPs a daemon ignored, for its last line.
#[derive(Clone, Debug, Default)]
pub struct Hangups(Arc<AtomicU64>);

impl Hangups {
    /// How many SIGHUPs were ignored.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A line on stderr that never panics: after a hangup stderr may be a
/// terminal that is gone (`eprintln!` would panic on EIO).
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

fn set_mask(how: libc::c_int) {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, owned sigset_t; the signal numbers are valid;
    // pthread_sigmask only changes the calling thread's mask (old mask not wanted).
    unsafe {
        libc::sigemptyset(&mut set);
        for s in HANDLED {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Defers SIGINT, SIGTERM and SIGHUP in the calling thread (and threads it
/// starts) until [`on_signal`] handles them. Call it on the main thread
/// before anything is loaded, and only on paths that go on to call
/// [`on_signal`] (or exit).
pub fn hold() {
    set_mask(libc::SIG_BLOCK);
}

/// Whether SIGHUP was ignored when lockprof started (`nohup`).
fn hangup_ignored() -> bool {
    // SAFETY: sigaction with a null new action only reads the current
    // disposition into an owned, zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Returns a token cancelled on the first SIGINT or SIGTERM (and SIGHUP,
/// per `hup`), and the count of SIGHUPs ignored. Must be called inside a
/// tokio runtime; delivers what [`hold`] deferred.
pub fn on_signal(hup: Hangup) -> std::io::Result<(CancellationToken, Hangups)> {
    let token = CancellationToken::new();
    let hangups = Hangups::default();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let watch_hup = !(hup == Hangup::Stop && hangup_ignored());
    let mut hangup = if watch_hup { Some(signal(SignalKind::hangup())?) } else { None };
    let (t, ignored) = (token.clone(), hangups.clone());
    tokio::spawn(async move {
        loop {
            let hung_up = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = int.recv() => log::info!("SIGINT: stopping"),
                _ = term.recv() => log::info!("SIGTERM: stopping"),
                _ = hung_up => match hup {
                    Hangup::Stop => say("lockprof: SIGHUP (the terminal closed?): stopping"),
                    Hangup::Ignore => {
                        if ignored.0.fetch_add(1, Ordering::Relaxed) == 0 {
                            say("lockprof: SIGHUP ignored: the daemon keeps running (SIGINT or SIGTERM stops it)");
                        }
                        continue;
                    }
                },
            }
            break;
        }
        t.cancel();
    });
    set_mask(libc::SIG_UNBLOCK);
    Ok((token, hangups))
}
