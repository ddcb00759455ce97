//! `lockprof serve`: the session's live profiles behind HTTP, for
//! Prometheus (`/metrics`, [`metrics`]) and continuous profilers such as
//! Parca and Pyroscope (`/debug/pprof/*`, from the rolling [`window`]).
//! [`http`] only reads: nothing a request says reaches the session, so the
//! HTTP side cannot change what is traced. [`privileges`] drops what the
//! daemon no longer needs once attached.

mod http;
pub mod metrics;
pub mod privileges;
pub mod window;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use profiler_common::counter;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use self::{
    metrics::Exporter,
    privileges::{Kept, PrivilegeError, drop_after_attach},
    window::Window,
};
use crate::{
    incident::IncidentLog,
    model::{Counter, CounterKind, Profile},
};

/// Defaults of the serve options (the CLI shows and uses these).
pub mod defaults {
    /// `--listen`.
    pub const LISTEN: &str = "127.0.0.1:9464";
    /// `--window`, seconds.
    pub const WINDOW_S: u64 = 60;
    /// `--max-series`.
    pub const MAX_SERIES: usize = 100;
    /// `--max-cgroups`.
    pub const MAX_CGROUPS: usize = 10;
    /// Rows the window may hold in all.
    pub const MAX_WINDOW_ENTRIES: usize = 200_000;
    /// Thread rows the session keeps (nothing is exported per thread; the
    /// rest fold into the overflow row, counted).
    pub const MAX_TASKS: usize = 1_000;
}

/// What `lockprof serve` serves and how much it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// How far back `?seconds=N` can reach.
    pub window: Duration,
    /// Locks with Prometheus series of their own.
    pub max_series: usize,
    /// cgroups with Prometheus series of their own.
    pub max_cgroups: usize,
    /// Rows the window may hold in all.
    pub max_window_entries: usize,
}

/// Errors of the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening socket failed.
    #[error("HTTP server on {0}: {1}")]
    Io(SocketAddr, std::io::Error),
}

/// Growth (or totals) of one (lock, stack) row, from the pipeline's deltas.
pub use crate::pipeline::delta::Values;

/// What a pprof profile's samples measure (`?metric=`): the export metric.
pub use crate::export::Metric as ProfileMetric;

impl ProfileMetric {
    /// A sample's values, one per sample type.
    pub fn values(self, v: &Values) -> Vec<i64> {
        let i = |x: u64| x.min(i64::MAX as u64) as i64;
        match self {
            ProfileMetric::Wait => vec![i(v.count), i(v.wait_ns)],
            ProfileMetric::Hold => vec![i(v.hold_count), i(v.hold_ns)],
            ProfileMetric::Count => vec![i(v.count)],
            ProfileMetric::Blame => vec![i(v.blame_count), i(v.blame_ns)],
            // Never served (`unavailable`): the window keeps no yield_to rows.
            ProfileMetric::Yield => vec![0, 0],
        }
    }
}

/// Everything the handlers read, updated once per profile.
pub struct State {
    /// Prometheus counters.
    pub exporter: Exporter,
    /// Recent growth per (lock, stack).
    pub window: Window,
    /// The latest profile (cumulative since start).
    pub latest: Arc<Profile>,
    /// When the latest profile arrived.
    pub updated: Instant,
    /// When serving started.
    pub started: Instant,
    /// The incidents the session's triggers wrote (None: no triggers).
    pub incidents: Option<watch::Receiver<Arc<IncidentLog>>>,
}

impl State {
    /// Empty state for `opts`.
    pub fn new(opts: &ServeOptions) -> State {
        State {
            exporter: Exporter::new(opts.max_series, opts.max_cgroups),
            window: Window::new(opts.window, opts.max_window_entries),
            latest: Arc::new(Profile::default()),
            updated: Instant::now(),
            started: Instant::now(),
            incidents: None,
        }
    }

    /// Folds in a new profile.
    pub fn update(&mut self, p: Arc<Profile>, now: Instant) {
        self.window.update(&p, now);
        self.exporter.update(&p);
        self.exporter.set_drop(Counter {
            name: counter::user::WINDOW_ROWS_FOLDED,
            kind: CounterKind::Bookkeeping,
            value: self.window.folded(),
        });
        self.exporter.set_rows("window", self.window.entries());
        if let Some(log) = &self.incidents {
            self.exporter.set_incidents(log.borrow().clone());
        }
        self.latest = p;
        self.updated = now;
    }
}

/// Shared state.
pub type Shared = Arc<Mutex<State>>;

/// Serves `listener` until `stop`, folding each new profile into the state.
pub async fn run(
    listener: tokio::net::TcpListener,
    mut profiles: watch::Receiver<Arc<Profile>>,
    incidents: Option<watch::Receiver<Arc<IncidentLog>>>,
    opts: &ServeOptions,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let state: Shared = Arc::new(Mutex::new(State { incidents, ..State::new(opts) }));
    let updater = {
        let (state, stop) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    changed = profiles.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let p = profiles.borrow_and_update().clone();
                        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                        s.update(p, Instant::now());
                    }
                }
            }
        })
    };
    let addr = opts.listen;
    let served = http::serve(listener, http::router(state), http::Limits::SERVE, stop.clone())
        .await
        .map_err(|e| ServeError::Io(addr, e));
    stop.cancel();
    let _ = updater.await;
    served
}

#[cfg(test)]
mod tests;
