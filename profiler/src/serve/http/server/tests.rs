//! The limits on a real loopback socket, with blocking clients on the test
//! thread and the server on its own runtime. Every wait has a generous
//! deadline; none of the checks measures speed.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    sync::{Arc, Mutex, mpsc},
    thread,
    time::Instant,
};

use axum::routing::get;
use tokio::sync::Notify;

use super::*;

const PATIENCE: Duration = Duration::from_secs(20);

/// A server on 127.0.0.1 (bound before it returns: no readiness race).
struct Running {
    addr: SocketAddr,
    stop: CancellationToken,
    done: mpsc::Receiver<io::Result<()>>,
    _rt: tokio::runtime::Runtime,
}

fn start(limits: Limits, router: Router) -> Running {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let (tx, done) = mpsc::channel();
    let s = stop.clone();
    rt.spawn(async move {
        let _ = tx.send(serve(listener, router, limits, s).await);
    });
    Running { addr, stop, done, _rt: rt }
}

fn limits() -> Limits {
    Limits { header_timeout: Duration::from_secs(60), shutdown_grace: Duration::from_secs(60), ..Limits::SERVE }
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello\n" }))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    s
}

/// Everything the server sends until it closes (a reset after data counts as a close).
fn read_all(mut s: TcpStream) -> std::io::Result<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn get_root(addr: SocketAddr) -> String {
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    read_all(s).expect("read")
}

#[test]
fn a_connection_over_the_cap_gets_a_503_and_its_slot_comes_back() {
    let srv = start(Limits { max_connections: 2, ..limits() }, hello());
    // Accepted in order: the two idle ones take both slots.
    let first = connect(srv.addr);
    let _second = connect(srv.addr);
    let third = read_all(connect(srv.addr)).expect("read the refusal");
    assert!(third.starts_with("HTTP/1.1 503 "), "{third}");
    assert!(third.contains("2 connections open"), "{third}");

    drop(first);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = get_root(srv.addr);
        if r.starts_with("HTTP/1.1 200 ") {
            assert!(r.ends_with("hello\n"), "{r}");
            break;
        }
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(Instant::now() < deadline, "the closed connection's slot never came back");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_that_trickles_its_headers_is_dropped() {
    let srv = start(Limits { header_timeout: Duration::from_millis(300), ..limits() }, hello());
    let s = connect(srv.addr);
    let mut w = s.try_clone().expect("clone");
    let trickle = thread::spawn(move || {
        let _ = w.write_all(b"GET / HTTP/1.1\r\n");
        // A byte every 20 ms, for longer than the test's patience, unless dropped.
        for _ in 0..2_000 {
            if w.write_all(b"X").is_err() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let got = read_all(s).expect("the server closes the connection (no read timeout)");
    assert_eq!(got, "", "no response to a request that never finished");
    assert!(trickle.join().expect("trickler"), "writes kept succeeding after the close");
    // Others are still served.
    assert!(get_root(srv.addr).starts_with("HTTP/1.1 200 "));
}

#[test]
fn oversized_headers_get_a_431() {
    let srv = start(limits(), hello());
    let mut s = connect(srv.addr);
    let big = "a".repeat(Limits::SERVE.max_header_bytes);
    // The server may answer and close before reading it all.
    let _ = write!(s, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let got = read_all(s).expect("read");
    assert!(got.starts_with("HTTP/1.1 431 "), "{got}");
    assert!(get_root(srv.addr).starts_with("HTTP/1.1 200 "));
}

/// A router whose `/slow` reports when it starts and finishes when told.
fn slow(started: mpsc::Sender<()>, release: Arc<Notify>) -> Router {
    let started = Arc::new(Mutex::new(started));
    hello().route(
        "/slow",
        get(move || {
            let (started, release) = (started.clone(), release.clone());
            async move {
                let _ = started.lock().unwrap_or_else(|e| e.into_inner()).send(());
                release.notified().await;
                "finished\n"
            }
        }),
    )
}

fn request_slow(addr: SocketAddr) -> thread::JoinHandle<std::io::Result<String>> {
    let mut s = connect(addr);
    thread::spawn(move || {
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")?;
        read_all(s)
    })
}

#[test]
fn shutdown_lets_a_request_in_flight_finish_and_closes_idle_connections() {
    let (tx, started) = mpsc::channel();
    let release = Arc::new(Notify::new());
    let srv = start(limits(), slow(tx, release.clone()));
    let idle = connect(srv.addr);
    let client = request_slow(srv.addr);
    started.recv_timeout(PATIENCE).expect("the handler started");

    srv.stop.cancel();
    release.notify_one();
    // The client asked for keep-alive; read_all returning means the server
    // closed after the response.
    let got = client.join().expect("client").expect("response");
    assert!(got.starts_with("HTTP/1.1 200 ") && got.ends_with("finished\n"), "{got}");
    // The idle connection does not hold shutdown for the 60 s grace.
    let served = srv.done.recv_timeout(PATIENCE).expect("serve returned before the grace ran out");
    assert!(served.is_ok(), "{served:?}");
    assert_eq!(read_all(idle).expect("idle connection closed"), "");
}

#[test]
fn shutdown_closes_a_request_still_running_after_the_grace() {
    let (tx, started) = mpsc::channel();
    let never = Arc::new(Notify::new());
    let srv = start(Limits { shutdown_grace: Duration::from_millis(200), ..limits() }, slow(tx, never));
    let client = request_slow(srv.addr);
    started.recv_timeout(PATIENCE).expect("the handler started");

    srv.stop.cancel();
    let served = srv.done.recv_timeout(PATIENCE).expect("serve returned");
    assert!(served.is_ok(), "{served:?}");
    assert_eq!(client.join().expect("client").expect("closed"), "", "no response from an aborted handler");
}
