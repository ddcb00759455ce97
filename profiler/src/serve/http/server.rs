//! The accept loop, hardened for a daemon reachable from a node's network:
//! a cap on open connections (the one over it gets a 503 and is closed),
//! a deadline for each request's headers (a client that trickles bytes, or
//! idles between requests, is dropped), a header size limit (431), and a
//! shutdown that lets in-flight requests finish, up to a bound.

use std::{io, sync::Arc, time::Duration};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::sync::CancellationToken;

/// What one client may take of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; the next one gets a 503 and is closed.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, counted from when
    /// the connection opens or its previous response was sent.
    pub header_timeout: Duration,
    /// Bytes of request line and headers; more gets a 431.
    pub max_header_bytes: usize,
    /// How long shutdown waits for requests in flight before closing them.
    pub shutdown_grace: Duration,
}

impl Limits {
    /// `lockprof serve`'s limits: room for many scrapers, little for a
    /// slow or hostile client.
    pub const SERVE: Limits = Limits {
        max_connections: 512,
        header_timeout: Duration::from_secs(10),
        max_header_bytes: 8 * 1024,
        shutdown_grace: Duration::from_secs(5),
    };
}

/// Accept errors that concern one connection, not the listener.
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

/// Accept errors that pass once resources free up (out of descriptors or memory).
fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// Serves `router` on `listener` within `limits` until `stop`, then waits
/// for open connections (at most `limits.shutdown_grace`) and returns. Errs
/// only if the listening socket itself fails.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, stop: CancellationToken) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let abort = CancellationToken::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_header_size(limits.max_header_bytes);
    let mut full = false;
    let result = loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => break Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if per_connection(&e) => continue,
                Err(e) if transient(&e) => {
                    log::warn!("HTTP: accepting a connection: {e}; retrying in 100 ms");
                    tokio::select! {
                        _ = stop.cancelled() => break Ok(()),
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    }
                }
                Err(e) => break Err(e),
            },
        };
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                full = false;
                tokio::spawn(connection(stream, http.clone(), router.clone(), permit, stop.clone(), abort.clone()));
            }
            Err(_) => {
                if !full {
                    log::warn!("HTTP: {} connections open, refusing more until some close", limits.max_connections);
                    full = true;
                }
                refuse(stream, limits.max_connections);
            }
        }
    };
    drop(listener);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await.is_err() {
        let open = limits.max_connections.saturating_sub(slots.available_permits());
        log::warn!(
            "HTTP: {open} connection(s) still open {:?} after shutdown began; closing them",
            limits.shutdown_grace
        );
        abort.cancel();
        let _ = slots.acquire_many(all).await;
    }
    result
}

/// One connection, holding its slot: served until it ends; on `stop`, its
/// request in flight finishes (keep-alive off) unless `abort` comes first.
async fn connection(
    stream: TcpStream,
    http: http1::Builder,
    router: Router,
    _slot: OwnedSemaphorePermit,
    stop: CancellationToken,
    abort: CancellationToken,
) {
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                _ = abort.cancelled() => Ok(()),
            }
        }
    };
    if let Err(e) = ended {
        // Timeouts, oversized headers and garbage land here: the client's doing.
        log::debug!("HTTP connection: {e}");
    }
}

/// A 503 to a connection over the cap, then close: written only as far as
/// the socket takes it at once, so the accept loop never waits on a client.
fn refuse(stream: TcpStream, max: usize) {
    let body = format!("lockprof serve has {max} connections open, the most it takes; try again later\n");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

#[cfg(test)]
mod tests;
