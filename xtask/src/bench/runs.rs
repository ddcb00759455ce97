//! One run of one workload under one tracer: the workload's throughput, and
//! what the tracer says it saw.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use profiler_common::counter::{self, user};
use serde_json::Value;

use crate::util::workspace_root;

/// Who watches the workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tracer {
    /// Nobody.
    Untraced,
    /// Counting-only programs on the same tracepoints (`lockprof-bench floor`).
    Floor,
    /// `perf lock contention -ab` (perf built with its BPF skeletons).
    PerfB,
    /// `lockprof record` with these extra arguments.
    Lockprof {
        /// Column label.
        label: String,
        /// Arguments after `record --format json`.
        args: Vec<String>,
    },
}

impl Tracer {
    /// Column label.
    pub fn label(&self) -> &str {
        match self {
            Tracer::Untraced => "untraced",
            Tracer::Floor => "floor",
            Tracer::PerfB => "perf -b",
            Tracer::Lockprof { label, .. } => label,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Workload operations per second.
    pub ops_per_s: f64,
    /// Workload operations.
    pub ops: f64,
    /// Seconds the workload ran.
    pub secs: f64,
    /// Contentions the tracer reported (floor: contention ends counted).
    pub contentions: Option<f64>,
    /// Total wait the tracer reported, ns.
    pub wait_ns: Option<f64>,
    /// Events the tracer lost (lockprof: ring buffer, maps, userspace).
    pub lost: u64,
    /// lockprof's counters.
    pub drops: Value,
}

impl Sample {
    /// Contentions per second of workload.
    pub fn rate(&self) -> Option<f64> {
        self.contentions.map(|c| c / self.secs.max(1e-9))
    }
}

/// A release binary of the workspace, where cargo built it (`CARGO_TARGET_DIR`
/// when set, as cargo reads it: relative to the workspace root).
fn release_bin(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    workspace_root().join(target).join("release").join(name)
}

pub fn lockprof() -> Command {
    Command::new(release_bin("lockprof"))
}

pub fn lockprof_bench() -> Command {
    Command::new(release_bin("lockprof-bench"))
}

/// `../shared/tools/perfb/perf-b`, when this machine has it.
pub fn perf_b() -> Option<PathBuf> {
    let p = workspace_root().join("../shared/tools/perfb/perf-b");
    p.exists().then_some(p)
}

/// Starts a tracer and waits until it says it is attached.
pub fn start_tracer(mut cmd: Command, ready: &str) -> Result<Child> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting tracer")?;
    let stderr = child.stderr.take().context("tracer stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(ready) => break,
            Some(Ok(_)) => {}
            _ => {
                let _ = child.kill();
                bail!("tracer exited before attaching");
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("tracer did not attach in 30 s");
        }
    }
    // Keep draining stderr so the tracer never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(child)
}

pub fn stop_tracer(child: Child) -> Result<Value> {
    // SAFETY: kill(2) on our own child process, not yet reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if rc != 0 {
        bail!("SIGTERM to tracer failed");
    }
    let out = child.wait_with_output().context("waiting for tracer")?;
    if !out.status.success() {
        bail!("tracer failed: {}", out.status);
    }
    serde_json::from_slice(&out.stdout).context("tracer output is not JSON")
}

fn stress_args(workload: &str, threads: usize, duration: f64) -> Vec<String> {
    vec![
        "stress".into(),
        workload.into(),
        "--threads".into(),
        threads.to_string(),
        "--duration".into(),
        duration.to_string(),
    ]
}

/// `Pipe: N ops in S s (R ops/s, T threads)` -> (ops, seconds).
fn parse_stress(out: &str) -> Result<(f64, f64)> {
    let line = out.lines().find(|l| l.contains(" ops in ")).with_context(|| format!("no stress line in {out:?}"))?;
    let mut w = line.split_whitespace();
    let ops = w.nth(1).and_then(|v| v.parse().ok());
    let secs = w.nth(2).and_then(|v| v.parse().ok());
    ops.zip(secs).with_context(|| format!("cannot parse stress output {line:?}"))
}

pub fn stress(workload: &str, threads: usize, duration: f64) -> Result<(f64, f64)> {
    let out = lockprof().args(stress_args(workload, threads, duration)).output().context("running stress")?;
    if !out.status.success() {
        bail!("stress failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    parse_stress(&String::from_utf8_lossy(&out.stdout))
}

/// A perf duration such as `185.91 ms` in ns.
fn perf_ns(v: &str, unit: &str) -> Option<f64> {
    let v: f64 = v.parse().ok()?;
    let mul = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    Some(v * mul)
}

/// Sums perf lock contention's table: (contentions, total wait ns).
fn parse_perf(report: &str) -> (f64, f64) {
    let mut contended = 0.0;
    let mut wait = 0.0;
    for l in report.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 3
            && let (Ok(c), Some(t)) = (w[0].parse::<f64>(), perf_ns(w[1], w[2]))
        {
            contended += c;
            wait += t;
        }
    }
    (contended, wait)
}

/// Waits and holds lost outright (not those kept without a stack or owner).
fn lost_of(drops: &Value) -> u64 {
    let kernel = |i: u32| counter::NAMES[i as usize];
    [
        kernel(counter::RINGBUF_FULL),
        user::USERSPACE_LOST,
        kernel(counter::PENDING_FULL),
        user::MALFORMED_RECORDS,
        kernel(counter::HOLD_MAP_FULL),
    ]
    .iter()
    .map(|k| drops[*k].as_u64().unwrap_or(0))
    .sum()
}

/// Runs `workload` once under `tracer`.
pub fn run(tracer: &Tracer, workload: &str, threads: usize, duration: f64) -> Result<Sample> {
    let (ops, secs, contentions, wait_ns, drops) = match tracer {
        Tracer::Untraced => {
            let (ops, secs) = stress(workload, threads, duration)?;
            (ops, secs, None, None, Value::Null)
        }
        Tracer::Floor => {
            let mut c = lockprof_bench();
            c.arg("floor");
            let t = start_tracer(c, "floor attached")?;
            let r = stress(workload, threads, duration);
            let v = stop_tracer(t)?;
            let (ops, secs) = r?;
            (ops, secs, v["ends"].as_f64(), None, Value::Null)
        }
        Tracer::PerfB => {
            let perf = perf_b().context("perf-b is not on this machine")?;
            let out = Command::new(perf)
                .args(["lock", "contention", "-ab", "--"])
                .arg(release_bin("lockprof"))
                .args(stress_args(workload, threads, duration))
                .output()
                .context("running perf-b")?;
            if !out.status.success() {
                bail!("perf-b failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            let (ops, secs) = parse_stress(&String::from_utf8_lossy(&out.stdout))?;
            let (c, w) = parse_perf(&String::from_utf8_lossy(&out.stderr));
            (ops, secs, Some(c), Some(w), Value::Null)
        }
        Tracer::Lockprof { args, .. } => {
            let mut c = lockprof();
            c.args(["record", "--format", "json"]).args(args);
            let t = start_tracer(c, "lockprof: recording")?;
            let r = stress(workload, threads, duration);
            let v = stop_tracer(t)?;
            let (ops, secs) = r?;
            let wait: f64 = v["locks"]
                .as_array()
                .map(|ls| ls.iter().filter_map(|l| l["wait_total_ns"].as_f64()).sum())
                .unwrap_or(0.0);
            (ops, secs, v["events"].as_f64(), Some(wait), v["drops"].clone())
        }
    };
    Ok(Sample { ops_per_s: ops / secs.max(1e-9), ops, secs, contentions, wait_ns, lost: lost_of(&drops), drops })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_and_perf_outputs_parse() {
        assert_eq!(
            parse_stress("Pipe: 1310614 ops in 2.00 s (654250 ops/s, 4 threads)\n").ok(),
            Some((1310614.0, 2.0))
        );
        assert!(parse_stress("garbage").is_err());
        let perf = " contended   total wait     max wait     avg wait         type   caller\n\n     74800    185.91 ms      6.62 ms      2.48 us        mutex   vfs_write+0x398\n      3484     35.71 us    276.45 us     10.25 us     spinlock   exit_to_user_mode_loop+0x51\n";
        let (c, w) = parse_perf(perf);
        assert_eq!(c, 78284.0);
        assert!((w - (185.91e6 + 35.71e3)).abs() < 1.0, "{w}");
    }
}
