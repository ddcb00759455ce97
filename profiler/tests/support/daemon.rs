//! `lockprof serve` on a loopback port for a root test: up once `/healthz`
//! answers, stopped with SIGTERM, killed when dropped; and one-shot HTTP
//! requests. Included by the test files that use it with
//! `#[path = "support/daemon.rs"] mod daemon;`.

// Each file that includes this uses part of it.
#![allow(dead_code)]

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

pub fn lockprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockprof"))
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A child killed (and reaped) when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A response: status and body.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.0 request on loopback.
pub fn request(port: u16, method: &str, path: &str) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok(Response { status, body: raw[split + 4..].to_vec() })
}

pub fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// `lockprof serve` on a loopback port, stopped with SIGTERM when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub port: u16,
}

impl Daemon {
    pub fn start(extra: &[&str]) -> Daemon {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = lockprof()
            .args(["serve", "--listen", &listen])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockprof serve");
        let mut d = Daemon { child: Some(child), port };
        let start = Instant::now();
        while !request(port, "GET", "/healthz").is_ok_and(|r| r.status == 200) {
            if let Some(c) = d.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                let mut err = String::new();
                let _ = c.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("lockprof serve exited ({status}): {err}");
            }
            assert!(start.elapsed() < Duration::from_secs(20), "lockprof serve did not come up on {listen}");
            thread::sleep(Duration::from_millis(100));
        }
        d
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// SIGTERM; the exit status and stderr.
    pub fn stop(&mut self) -> (std::process::ExitStatus, String) {
        let child = self.child.take().expect("running");
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let out = child.wait_with_output().expect("wait");
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
