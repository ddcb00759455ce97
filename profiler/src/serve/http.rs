//! The HTTP face: routes, query parsing, one-line errors. Handlers only
//! read the shared state. [`server`] accepts the connections, within
//! [`Limits`].

mod incidents;
mod server;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{Query, State as AxState},
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::get,
};

pub use self::server::{Limits, serve};
use super::{
    ProfileMetric, Shared, State, Values,
    window::{caller_frames, caller_values, owner_frames, owner_values},
};
use crate::{
    export::{PprofHeader, PprofSample, build_pprof, cgroup_parts, gzip_pprof},
    model::LockProfile,
};

/// The endpoints, for `/` and for 404s.
const INDEX: &str = "\
lockprof serve: live lock-contention metrics and profiles

/metrics                                   Prometheus text format: per-lock contentions, wait and hold
                                           counters and histograms, yield_to, dropped events, build info
/debug/pprof/mutex?seconds=N               pprof (Go's mutex profile: contentions/count, delay/nanoseconds)
                                           of the last N seconds; without seconds: since start
/debug/pprof/lockprof?seconds=N&metric=M   pprof of the last N seconds by metric: wait, hold, count, blame
                                           (blame: the waits each owner caused, by its acquire stack)
/debug/lockprof/incidents                  incidents the --trigger options wrote (JSON list)
/debug/lockprof/incidents/ID               one incident: the recording (JSON, `lockprof report --input` reads
                                           it), or ?format=pprof
/healthz                                   liveness: 200 while profiles keep coming
";

/// An error response: a status and one line.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpError(pub StatusCode, pub String);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.0, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{}\n", self.1)).into_response()
    }
}

fn bad(msg: impl Into<String>) -> HttpError {
    HttpError(StatusCode::BAD_REQUEST, msg.into())
}

/// The routes.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/debug/pprof/mutex", get(mutex))
        .route("/debug/pprof/lockprof", get(lockprof))
        .route("/debug/lockprof/incidents", get(incidents::list))
        .route("/debug/lockprof/incidents/{id}", get(incidents::one))
        .fallback(|uri: axum::http::Uri| async move {
            HttpError(StatusCode::NOT_FOUND, format!("no such endpoint {}; see / for the list", uri.path()))
        })
        .method_not_allowed_fallback(|m: axum::http::Method| async move {
            HttpError(StatusCode::METHOD_NOT_ALLOWED, format!("method {m} not allowed: every endpoint is GET"))
        })
        .with_state(state)
}

fn read<T>(state: &Shared, f: impl FnOnce(&State) -> T) -> T {
    f(&state.lock().unwrap_or_else(|e| e.into_inner()))
}

async fn index() -> &'static str {
    INDEX
}

async fn healthz(AxState(state): AxState<Shared>) -> Result<&'static str, HttpError> {
    // Profiles come every second; three missed ones mean the pipeline is stuck.
    let (age, started) = read(&state, |s| (s.updated.elapsed(), s.started.elapsed()));
    if age > Duration::from_secs(5) && started > Duration::from_secs(5) {
        return Err(HttpError(StatusCode::SERVICE_UNAVAILABLE, format!("no profile for {:.0} s", age.as_secs_f64())));
    }
    Ok("ok\n")
}

async fn metrics(AxState(state): AxState<Shared>) -> Result<Response, HttpError> {
    let body = read(&state, |s| s.exporter.encode())
        .map_err(|e| HttpError(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], body).into_response())
}

/// The parameters of a profile request.
#[derive(Debug, PartialEq, Eq)]
pub struct ProfileQuery {
    /// `seconds=N`, or None for everything since start.
    pub seconds: Option<u64>,
    /// `metric=`.
    pub metric: ProfileMetric,
}

/// Decodes and checks the query string of a profile request's `uri`.
pub fn query_of(uri: &Uri, allowed: &[&str], window: Duration) -> Result<ProfileQuery, HttpError> {
    let Query(params) = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|e| bad(format!("bad query string: {}", e.body_text())))?;
    parse_query(&params, allowed, window)
}

/// Checks the query of a profile endpoint: known names, once each, valid values.
pub fn parse_query(params: &[(String, String)], allowed: &[&str], window: Duration) -> Result<ProfileQuery, HttpError> {
    let mut q = ProfileQuery { seconds: None, metric: ProfileMetric::Wait };
    let mut seen = Vec::new();
    for (k, v) in params {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(format!("unknown parameter {k:?}; this endpoint takes {}", allowed.join(", "))));
        }
        if seen.contains(&k) {
            return Err(bad(format!("parameter {k:?} given twice")));
        }
        seen.push(k);
        match k.as_str() {
            "seconds" => {
                let max = window.as_secs();
                q.seconds = Some(v.trim().parse::<u64>().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                    bad(format!("seconds must be a whole number from 1 to {max} (the --window), not {v:?}"))
                })?);
            }
            "metric" => q.metric = ProfileMetric::parse(v).map_err(bad)?,
            _ => {}
        }
    }
    Ok(q)
}

async fn mutex(AxState(state): AxState<Shared>, uri: Uri) -> Result<Response, HttpError> {
    profile(state, &uri, &["seconds"]).await
}

async fn lockprof(AxState(state): AxState<Shared>, uri: Uri) -> Result<Response, HttpError> {
    profile(state, &uri, &["seconds", "metric"]).await
}

async fn profile(state: Shared, uri: &Uri, allowed: &[&str]) -> Result<Response, HttpError> {
    let window = read(&state, |s| s.window.length());
    let q = query_of(uri, allowed, window)?;
    let body = read(&state, |s| render(s, &q))?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::CONTENT_DISPOSITION, "attachment; filename=\"profile.pb.gz\""),
        ],
        body,
    )
        .into_response())
}

/// The gzipped pprof profile a query asks for.
pub fn render(s: &State, q: &ProfileQuery) -> Result<Vec<u8>, HttpError> {
    let p = &s.latest;
    if let Some(why) = q.metric.unavailable(p) {
        return Err(bad(why));
    }
    let mut header = PprofHeader::of(p, q.metric.sample_types());
    let proto = match q.seconds {
        Some(n) => {
            let span = Duration::from_secs(n);
            let now = Instant::now();
            let rows = s.window.last(span, now);
            header.duration_nanos = span.as_nanos() as i64;
            header.time_nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.saturating_sub(span).as_nanos() as i64);
            build_pprof(
                &header,
                rows.iter().map(|e| PprofSample {
                    lock: &e.lock.name,
                    lock_type: &e.lock.type_label,
                    addr: e.lock.addr,
                    frames: &e.stack,
                    user: None,
                    cgroup: None,
                    values: q.metric.values(&e.values),
                }),
            )
        }
        None if q.metric == ProfileMetric::Blame => {
            let rows: Vec<(&LockProfile, String, Arc<[String]>, Values)> = p
                .locks
                .iter()
                .flat_map(|l| l.owners.iter().map(move |o| (l, l.type_label(), owner_frames(o), owner_values(o))))
                .collect();
            build_pprof(
                &header,
                rows.iter().map(|(l, ty, frames, v)| PprofSample {
                    lock: l.display_name(),
                    lock_type: ty,
                    addr: l.addr,
                    frames,
                    user: None,
                    cgroup: None,
                    values: q.metric.values(v),
                }),
            )
        }
        None => {
            let types: Vec<String> = p.locks.iter().map(|l| l.type_label()).collect();
            // Waits are split by the waiters' cgroup (a `cgroup` label); holds are not.
            let by_cgroup = matches!(q.metric, ProfileMetric::Wait | ProfileMetric::Count);
            build_pprof(
                &header,
                p.locks.iter().zip(&types).flat_map(|(l, ty)| {
                    l.callers.iter().flat_map(move |c| {
                        let parts: Vec<(Option<&str>, Values)> = if by_cgroup {
                            cgroup_parts(p, c)
                                .into_iter()
                                .map(|(cg, count, wait_ns)| (cg, Values { count, wait_ns, ..Values::default() }))
                                .collect()
                        } else {
                            vec![(None, caller_values(c))]
                        };
                        parts.into_iter().map(move |(cgroup, v)| PprofSample {
                            lock: l.display_name(),
                            lock_type: ty,
                            addr: l.addr,
                            frames: caller_frames(c),
                            user: c.user.as_deref(),
                            cgroup,
                            values: q.metric.values(&v),
                        })
                    })
                }),
            )
        }
    };
    gzip_pprof(&proto).map_err(|e| HttpError(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the profile: {e}")))
}

#[cfg(test)]
mod tests;
