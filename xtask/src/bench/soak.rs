//! The `lockprof serve` soak: the daemon under a pipe storm, a fork/exit
//! storm and an mmap storm at once, scraped like Prometheus (/metrics) and
//! Parca (/debug/pprof/mutex?seconds=10) every 10 s, its RSS sampled as it
//! goes; at the end, its stack counters: with a small stack map, the storms
//! create several times its capacity in distinct stacks, and none may fail.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use super::runs::{lockprof, start_tracer};

/// Seconds between samples (and scrapes).
const EVERY: u64 = 10;

/// The storms, run at once.
const STORMS: [&str; 3] = ["pipe", "fork", "mmap"];

/// Stack map capacity of the soak's daemon: small, so that the storms'
/// distinct stacks outnumber it several times over in the soak's time.
pub const SOAK_STACK_MAP: u32 = 1024;

/// The counters the soak reports, by name, from a /metrics body.
fn counters(metrics: &str, names: &[&str]) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for line in metrics.lines().filter(|l| l.starts_with("lockprof_dropped_events_total{")) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        for n in names {
            if labels.contains(&format!("reason=\"{n}\"")) {
                out.insert(n.to_string(), json!(value.parse::<f64>().unwrap_or(f64::NAN) as u64));
            }
        }
    }
    out
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// GET `path` on loopback: (status, body, milliseconds).
fn get(port: u16, path: &str) -> Result<(u16, Vec<u8>, f64)> {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no header end")?;
    let status = String::from_utf8_lossy(&raw[..head_end]).split_whitespace().nth(1).and_then(|c| c.parse().ok());
    Ok((status.unwrap_or(0), raw.split_off(head_end + 4), ms))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the soak for `secs` seconds.
pub fn serve_soak(secs: u64, threads: usize) -> Result<Value> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut c = lockprof();
    c.args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--stack-map-size", &SOAK_STACK_MAP.to_string()]);
    let daemon = Killed(start_tracer(c, "lockprof: serving")?);
    let pid = daemon.0.id();
    let storm = |w: &str| -> Result<Killed> {
        let child = lockprof()
            .args(["stress", w, "--threads", &threads.to_string(), "--duration", &(secs + 5).to_string()])
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the {w} storm"))?;
        Ok(Killed(child))
    };
    let _storms = STORMS.iter().map(|w| storm(w)).collect::<Result<Vec<_>>>()?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let (mut metrics_ms, mut pprof_ms, mut metrics_bytes, mut pprof_bytes) = (Vec::new(), Vec::new(), 0, 0);
    let mut next = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(next).saturating_sub(start.elapsed()));
        next += EVERY;
        let (status, bytes, ms) = get(port, "/metrics")?;
        if status != 200 {
            bail!("/metrics answered {status} at {} s", start.elapsed().as_secs());
        }
        metrics_ms.push(ms);
        metrics_bytes = bytes.len();
        let (status, bytes, ms) = get(port, "/debug/pprof/mutex?seconds=10")?;
        if status != 200 {
            bail!("/debug/pprof/mutex answered {status} at {} s", start.elapsed().as_secs());
        }
        pprof_ms.push(ms);
        pprof_bytes = bytes.len();
        let rss = rss_kib(pid);
        eprintln!("bench: serve soak {:>4} s: RSS {:.1} MiB", start.elapsed().as_secs(), rss as f64 / 1024.0);
        samples.push(json!([start.elapsed().as_secs(), rss]));
    }
    let (status, last, _) = get(port, "/metrics")?;
    if status != 200 {
        bail!("the last /metrics answered {status}");
    }
    let stacks =
        counters(&String::from_utf8_lossy(&last), &["stack_failed", "stacks_evicted", "stacks_read", "stacks_stored"]);
    let cpu_ticks: u64 = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // SAFETY: kill(2) on our own child, not yet reaped.
    if unsafe { libc::kill(pid as i32, libc::SIGTERM) } != 0 {
        bail!("SIGTERM to lockprof serve failed");
    }
    let mut daemon = daemon;
    let status = daemon.0.wait()?;
    if !status.success() {
        bail!("lockprof serve exited with {status}");
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(json!({
        "seconds": secs,
        "threads": threads,
        "storms": STORMS,
        "stack_map_size": SOAK_STACK_MAP,
        "stacks": stacks,
        "rss_kib": samples,
        "metrics_ms_median": median(metrics_ms.clone()),
        "metrics_ms_max": metrics_ms.iter().copied().fold(0.0, f64::max),
        "metrics_bytes": metrics_bytes,
        "pprof_ms_median": median(pprof_ms.clone()),
        "pprof_bytes": pprof_bytes,
        "cpu_percent": cpu_ticks as f64 / hz / secs.max(1) as f64 * 100.0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_reason() {
        let body = "# HELP lockprof_dropped_events_total x\n\
lockprof_dropped_events_total{reason=\"stack_failed\",kind=\"loss\"} 0\n\
lockprof_dropped_events_total{reason=\"stacks_read\",kind=\"bookkeeping\"} 7041\n\
lockprof_dropped_events_total{reason=\"stack_reused\",kind=\"bookkeeping\"} 99\n\
lockprof_waits_total{reason=\"stacks_evicted\"} 5\n";
        let got = counters(body, &["stack_failed", "stacks_evicted", "stacks_read", "stacks_stored"]);
        assert_eq!(got.get("stack_failed"), Some(&json!(0)));
        assert_eq!(got.get("stacks_read"), Some(&json!(7041)));
        assert_eq!(got.get("stacks_evicted"), None, "only lockprof_dropped_events_total counts");
        assert_eq!(got.len(), 2);
    }
}
