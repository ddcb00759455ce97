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

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use self::{
    metrics::Exporter,
    privileges::{Kept, PrivilegeError, drop_after_attach},
    window::Window,
};
use crate::{export::SampleTypes, model::Profile};

/// Defaults of the serve options (the CLI shows and uses these).
pub mod defaults {
    /// `--listen`.
    pub const LISTEN: &str = "127.0.0.1:9464";
    /// `--window`, seconds.
    pub const WINDOW_S: u64 = 60;
    /// `--max-series`.
    pub const MAX_SERIES: usize = 100;
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

/// Growth (or totals) of one (lock, stack): waits and holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values {
    /// Contentions.
    pub count: u64,
    /// Their wait, ns.
    pub wait_ns: u64,
    /// Holds seen.
    pub hold_count: u64,
    /// Their hold time, ns.
    pub hold_ns: u64,
    /// Waits this row's owner caused (owner rows only).
    pub blame_count: u64,
    /// Their wait, ns.
    pub blame_ns: u64,
}

impl Values {
    /// Growth from `last`; all of `self` when it shrank (a row created again).
    pub fn since(&self, last: &Values) -> Values {
        if self.count < last.count || self.hold_count < last.hold_count || self.blame_count < last.blame_count {
            return *self;
        }
        Values {
            count: self.count - last.count,
            wait_ns: self.wait_ns.saturating_sub(last.wait_ns),
            hold_count: self.hold_count - last.hold_count,
            hold_ns: self.hold_ns.saturating_sub(last.hold_ns),
            blame_count: self.blame_count - last.blame_count,
            blame_ns: self.blame_ns.saturating_sub(last.blame_ns),
        }
    }

    /// Adds `d`.
    pub fn add(&mut self, d: &Values) {
        self.count += d.count;
        self.wait_ns = self.wait_ns.saturating_add(d.wait_ns);
        self.hold_count += d.hold_count;
        self.hold_ns = self.hold_ns.saturating_add(d.hold_ns);
        self.blame_count += d.blame_count;
        self.blame_ns = self.blame_ns.saturating_add(d.blame_ns);
    }

    /// Nothing in it.
    pub fn is_zero(&self) -> bool {
        self.count == 0 && self.hold_count == 0 && self.blame_count == 0
    }
}

/// What a pprof profile's samples measure (`?metric=`). A new metric is one
/// variant here and one arm in each match below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileMetric {
    /// Contentions and wait time (Go's mutex profile).
    Wait,
    /// Holds of contended acquisitions and hold time.
    Hold,
    /// Contentions only.
    Count,
    /// The waits each owner caused, by the owner's acquire stack (rooted at
    /// `[held by <comm>]`; Go's mutex profile charges the unlocker likewise).
    Blame,
}

impl ProfileMetric {
    /// Parses `?metric=`; the error is one line for a 400.
    pub fn parse(s: &str) -> Result<ProfileMetric, String> {
        match s {
            "wait" => Ok(ProfileMetric::Wait),
            "hold" => Ok(ProfileMetric::Hold),
            "count" => Ok(ProfileMetric::Count),
            "blame" => Ok(ProfileMetric::Blame),
            other => Err(format!("metric must be wait, hold, count or blame, not {other:?}")),
        }
    }

    /// The sample types of its profiles.
    pub fn sample_types(self) -> SampleTypes {
        match self {
            ProfileMetric::Wait => SampleTypes::mutex(),
            ProfileMetric::Hold => {
                SampleTypes { types: vec![("holds", "count"), ("hold", "nanoseconds")], default: "hold" }
            }
            ProfileMetric::Count => SampleTypes { types: vec![("contentions", "count")], default: "contentions" },
            ProfileMetric::Blame => SampleTypes {
                types: vec![("waits_caused", "count"), ("wait_caused", "nanoseconds")],
                default: "wait_caused",
            },
        }
    }

    /// A sample's values.
    pub fn values(self, v: &Values) -> Vec<i64> {
        let i = |x: u64| x.min(i64::MAX as u64) as i64;
        match self {
            ProfileMetric::Wait => vec![i(v.count), i(v.wait_ns)],
            ProfileMetric::Hold => vec![i(v.hold_count), i(v.hold_ns)],
            ProfileMetric::Count => vec![i(v.count)],
            ProfileMetric::Blame => vec![i(v.blame_count), i(v.blame_ns)],
        }
    }

    /// Why this metric cannot be served for `p`, if it cannot.
    pub fn unavailable(self, p: &Profile) -> Option<String> {
        match self {
            ProfileMetric::Hold if p.meta.hold_backend.is_none() => Some(format!(
                "hold times are not measured here ({})",
                p.meta.hold_unavailable.as_deref().unwrap_or("no release probes")
            )),
            _ => None,
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
}

impl State {
    /// Empty state for `opts`.
    pub fn new(opts: &ServeOptions) -> State {
        State {
            exporter: Exporter::new(opts.max_series),
            window: Window::new(opts.window, opts.max_window_entries),
            latest: Arc::new(Profile::default()),
            updated: Instant::now(),
            started: Instant::now(),
        }
    }

    /// Folds in a new profile.
    pub fn update(&mut self, p: Arc<Profile>, now: Instant) {
        self.window.update(&p, now);
        self.exporter.update(&p);
        self.exporter.set_drop("window_rows_folded", self.window.folded());
        self.exporter.set_rows("window", self.window.entries());
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
    opts: &ServeOptions,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let state: Shared = Arc::new(Mutex::new(State::new(opts)));
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
