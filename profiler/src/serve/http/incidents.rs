//! `/debug/lockprof/incidents`: the incidents the triggers wrote, listed
//! from the incident directory (this session's with their trigger and
//! reason), and each one as its recording or as pprof.

use axum::{
    extract::{Path, State as AxState},
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::json;

use super::{HttpError, bad, read};
use crate::{
    export::encode_pprof,
    incident::{IncidentLog, store},
    serve::Shared,
};

fn log_of(state: &Shared) -> Result<std::sync::Arc<IncidentLog>, HttpError> {
    read(state, |s| s.incidents.as_ref().map(|rx| rx.borrow().clone())).ok_or_else(|| {
        HttpError(StatusCode::NOT_FOUND, "no incident triggers: start lockprof serve with --trigger".into())
    })
}

/// The JSON list.
pub async fn list(AxState(state): AxState<Shared>) -> Result<Response, HttpError> {
    let log = log_of(&state)?;
    let incidents: Vec<serde_json::Value> = store::list(&log.dir)
        .into_iter()
        .rev()
        .map(|s| {
            let mine = log.written.iter().find(|w| w.id == s.id);
            json!({
                "id": s.id,
                "bytes": s.bytes,
                "url": format!("/debug/lockprof/incidents/{}", s.id),
                "trigger": mine.map(|w| w.trigger.clone()),
                "reason": mine.map(|w| w.reason.clone()),
                "fired_unix_ms": mine.map(|w| w.fired_unix_ms),
                "this_session": mine.is_some(),
            })
        })
        .collect();
    let body = json!({
        "dir": log.dir,
        "capturing": log.capturing,
        "incidents": incidents,
        "triggers": log.fired.iter().map(|(t, n)| json!({"trigger": t, "incidents": n})).collect::<Vec<_>>(),
        "rate_limited": log.rate_limited,
        "merged": log.merged,
        "deleted": log.deleted,
        "write_failed": log.failed,
        "long_waits_missed": log.missed_long_waits,
        "ring": {"slots": log.ring_slots, "bytes": log.ring_bytes, "dropped": log.ring_dropped},
    });
    let mut text = serde_json::to_string_pretty(&body).unwrap_or_default();
    text.push('\n');
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

/// One incident: `?format=pprof` for pprof, else the recording.
pub async fn one(AxState(state): AxState<Shared>, Path(id): Path<String>, uri: Uri) -> Result<Response, HttpError> {
    let pprof = match uri.query() {
        None | Some("") | Some("format=recording") => false,
        Some("format=pprof") => true,
        Some(q) => {
            return Err(bad(format!("unknown query {q:?}; this endpoint takes format=recording or format=pprof")));
        }
    };
    let log = log_of(&state)?;
    let path = store::path_of(&log.dir, &id).ok_or_else(|| {
        HttpError(StatusCode::NOT_FOUND, format!("no incident {id:?}; /debug/lockprof/incidents lists them"))
    })?;
    let internal = |e: String| HttpError(StatusCode::INTERNAL_SERVER_ERROR, e);
    if !pprof {
        let bytes = std::fs::read(&path).map_err(|e| internal(format!("reading {}: {e}", path.display())))?;
        return Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response());
    }
    let profile = crate::recording::load(&path).map_err(|e| internal(e.to_string()))?;
    let body = encode_pprof(&profile).map_err(|e| internal(format!("encoding the profile: {e}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::CONTENT_DISPOSITION, "attachment; filename=\"incident.pb.gz\""),
        ],
        body,
    )
        .into_response())
}
