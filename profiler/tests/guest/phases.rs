//! One session per backend for its workload checks (pipe, fork/exit,
//! setpgid, mmap), each workload in a phase of its own. Under TCG most of a
//! check's time was the session's own set-up (loading, verifying and
//! attaching every program: 8-18 s a session on x86_64, more on arm64),
//! paid once per workload; now once per backend.
//!
//! A phase is judged on what it recorded alone, as a session of its own
//! would be: once the phase before it has stopped, the session publishes
//! twice (so the kernel's per-CPU aggregates and the ring buffer were
//! drained of it), the aggregator forgets everything (`Control::Reset`,
//! the TUI's `r`), and only once two more profiles were published after
//! that does the workload start. The phase's profile is the live one that
//! passed the check (or the last one, when the check's time ran out), its
//! duration the phase's own.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use lockprof::{
    ebpf::BackendChoice,
    model::Profile,
    pipeline::Control,
    session::Session,
    workload::{self, Workload},
};
use tokio::sync::watch;

use super::{POLL, began, options, runtime, until};

/// How often the shared session publishes (and drains the kernel's
/// aggregates): often, since every phase boundary waits for four.
const PUBLISH: Duration = Duration::from_millis(250);

/// The session the current backend's phases share.
struct Shared {
    backend: BackendChoice,
    session: Session,
    live: watch::Receiver<Arc<Profile>>,
}

fn slot() -> &'static Mutex<Option<Shared>> {
    static SLOT: Mutex<Option<Shared>> = Mutex::new(None);
    &SLOT
}

/// Waits for `n` more published profiles.
async fn published(live: &mut watch::Receiver<Arc<Profile>>, n: usize) -> Result<(), String> {
    for _ in 0..n {
        tokio::time::timeout(until::PATIENCE, live.changed())
            .await
            .map_err(|_| format!("the session published nothing for {} s", until::PATIENCE.as_secs()))?
            .map_err(|_| "the session's profiles ended".to_string())?;
    }
    Ok(())
}

/// Finishes the shared session, if one is open (before any check that
/// attaches sessions of its own, and before the check that nothing is left
/// attached).
pub fn close() -> Result<(), String> {
    let open = slot().lock().unwrap_or_else(|e| e.into_inner()).take();
    match open {
        Some(s) => runtime()
            .block_on(s.session.finish())
            .map(drop)
            .map_err(|e| format!("finishing the {} session the workload checks shared: {e}", s.backend.name())),
        None => Ok(()),
    }
}

/// `w` recorded in a phase of `backend`'s shared session, driven until
/// `seen` accepts the phase's live profile or the check's time is up.
pub fn record(backend: BackendChoice, w: Workload, seen: &dyn Fn(&Profile) -> bool) -> Result<Profile, String> {
    let open = slot().lock().unwrap_or_else(|e| e.into_inner()).take();
    let mut shared = match open {
        Some(s) if s.backend == backend => s,
        other => {
            if let Some(s) = other {
                slot().lock().unwrap_or_else(|e| e.into_inner()).replace(s);
                close()?;
            }
            let mut o = options(backend);
            o.publish_interval = PUBLISH;
            let _guard = runtime().enter();
            let mut session = Session::start(o).map_err(|e| e.to_string())?;
            let live = session.profiles();
            Shared { backend, session, live }
        }
    };
    let out = runtime().block_on(phase(&mut shared, w, seen));
    slot().lock().unwrap_or_else(|e| e.into_inner()).replace(shared);
    out
}

async fn phase(s: &mut Shared, w: Workload, seen: &dyn Fn(&Profile) -> bool) -> Result<Profile, String> {
    // The phase before (if any) drained, then forgotten.
    published(&mut s.live, 2).await?;
    s.session.control().send(Control::Reset).await.map_err(|_| "the aggregator has stopped".to_string())?;
    published(&mut s.live, 2).await?;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let patience = until::patience(began().elapsed());
    let run = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || workload::run(w, 4, patience, stop))
    };
    let mut passed = None;
    while !run.is_finished() {
        tokio::time::sleep(POLL).await;
        let now = s.live.borrow().clone();
        if seen(&now) {
            stop.store(true, Ordering::Relaxed);
            passed = Some((now, started.elapsed()));
            break;
        }
    }
    let outcome = run.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    if outcome.ops == 0 {
        return Err(format!("the {w:?} workload made no progress"));
    }
    let (profile, took) = match passed {
        Some(p) => p,
        None => {
            // Time is up: the last of the phase, once published.
            published(&mut s.live, 2).await?;
            (s.live.borrow().clone(), started.elapsed())
        }
    };
    let mut p = (*profile).clone();
    p.meta.duration_s = took.as_secs_f64();
    if p.meta.backend != s.backend.name() {
        return Err(format!("asked for the {} backend, got {}", s.backend.name(), p.meta.backend));
    }
    Ok(p)
}
