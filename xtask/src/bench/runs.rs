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

use super::{bpftrace, futex_rows};
use crate::util::workspace_root;

/// The bpftrace futex counter's label.
pub const BPFTRACE_FUTEX: &str = "bpftrace futex count";

/// Who watches the workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tracer {
    /// Nobody.
    Untraced,
    /// Counting-only programs on the same tracepoints (`lockprof-bench floor`).
    Floor,
    /// `perf lock contention -ab` (perf built with its BPF skeletons).
    PerfB,
    /// A bpftrace script counting futex system calls: the futex floor.
    BpftraceFutex,
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
            Tracer::BpftraceFutex => BPFTRACE_FUTEX,
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
    /// Kernel-lock contentions the tracer reported (floor: contention ends
    /// counted; lockprof: its events less its futex rows).
    pub contentions: Option<f64>,
    /// Futex system calls the bpftrace floor counted (entries, all processes).
    pub futex_calls: Option<f64>,
    /// Futex contentions lockprof reported on the workload's own locks
    /// (its futex rows at their addresses, see `futex_rows`).
    pub futex_seen: Option<f64>,
    /// Per lock the workload counted: (symbol, its contended count,
    /// lockprof's futex contentions on it).
    pub per_lock: Vec<(String, f64, f64)>,
    /// Contended acquisitions the workload counted itself (user-space lock
    /// workloads), summed over its locks.
    pub own_contended: Option<f64>,
    /// Total wait the tracer reported, ns.
    pub wait_ns: Option<f64>,
    /// lockprof: the share of the wait on locks that record owners (mutexes,
    /// rwsems) charged to a known owner.
    pub blamed: Option<f64>,
    /// lockprof: the share of contentions recorded without a whole kernel
    /// stack (its `stack_skipped` and `stacks_cut` counters over its
    /// kernel-lock contentions).
    pub unstacked: Option<f64>,
    /// lockprof: the share of its kernel-lock contentions without a caller.
    pub uncalled: Option<f64>,
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

    /// Per second of workload.
    pub fn per_s(&self, n: Option<f64>) -> Option<f64> {
        n.map(|c| c / self.secs.max(1e-9))
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

/// What `lockprof stress` printed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stress {
    /// Operations.
    pub ops: f64,
    /// Seconds.
    pub secs: f64,
    /// The workload's `contended <symbol> <n>` counts (user-space lock
    /// workloads; empty for the others).
    pub contended: Vec<(String, u64)>,
}

impl Stress {
    /// Contended acquisitions over all the workload's locks, if it counts them.
    pub fn contended_total(&self) -> Option<f64> {
        (!self.contended.is_empty()).then(|| self.contended.iter().map(|c| c.1 as f64).sum())
    }
}

/// `Pipe: N ops in S s (R ops/s, T threads)`, then the user-space lock
/// workloads' `<kind> <symbol> <n>` lines, of which `contended` ones are kept.
fn parse_stress(out: &str) -> Result<Stress> {
    let line = out.lines().find(|l| l.contains(" ops in ")).with_context(|| format!("no stress line in {out:?}"))?;
    let mut w = line.split_whitespace();
    let ops = w.nth(1).and_then(|v| v.parse().ok());
    let secs = w.nth(2).and_then(|v| v.parse().ok());
    let (ops, secs) = ops.zip(secs).with_context(|| format!("cannot parse stress output {line:?}"))?;
    let mut contended = Vec::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["contended", symbol, n] = w[..] {
            let n = n.parse().with_context(|| format!("cannot parse stress count {l:?}"))?;
            contended.push((symbol.to_string(), n));
        }
    }
    Ok(Stress { ops, secs, contended })
}

pub fn stress(workload: &str, threads: usize, duration: f64) -> Result<Stress> {
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

/// The user-space lock types of lockprof's JSON (`--futex`).
fn is_futex_type(t: &Value) -> bool {
    matches!(t.as_str(), Some("futex" | "futex-pi"))
}

/// From lockprof's JSON report: (kernel-lock contentions: its events less
/// its futex rows; total wait of its kernel-lock rows, ns).
fn lockprof_counts(v: &Value) -> (Option<f64>, f64) {
    let rows = v["locks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let futex: f64 =
        rows.iter().filter(|l| is_futex_type(&l["type"])).map(|l| l["contended"].as_f64().unwrap_or(0.0)).sum();
    let wait = rows.iter().filter(|l| !is_futex_type(&l["type"])).filter_map(|l| l["wait_total_ns"].as_f64()).sum();
    (v["events"].as_f64().map(|e| e - futex), wait)
}

/// From lockprof's JSON report: the share of the wait on locks with owner
/// rows (the types that record owners) charged to a known owner; `None`
/// when no lock has owner rows (`--no-owners`, or no such lock contended).
fn blamed_share(v: &Value) -> Option<f64> {
    let owners = v["locks"].as_array()?.iter().filter_map(|l| l["owners"].as_array()).flatten();
    let (known, total) = owners.fold((0.0, 0.0), |(k, t), o| {
        let ns = o["wait_caused_ns"].as_f64().unwrap_or(0.0);
        (if o["owner_kind"].as_str() == Some("unknown") { k } else { k + ns }, t + ns)
    });
    (total > 0.0).then(|| known / total)
}

/// From lockprof's JSON report: the share of its kernel-lock contentions
/// in caller rows it marks `caller_known: false` (a bracketed reason: no
/// stack, no frame outside the lock functions; the caller cap's overflow
/// row is known, its waits had callers).
fn uncalled_share(v: &Value) -> Option<f64> {
    let callers = v["locks"].as_array()?.iter().filter(|l| !is_futex_type(&l["type"]));
    let (none, total) = callers.filter_map(|l| l["callers"].as_array()).flatten().fold((0.0, 0.0), |(n, t), c| {
        let k = c["contended"].as_f64().unwrap_or(0.0);
        // A report without the flag cannot say: its waits count as uncalled.
        let unknown = c["caller_known"].as_bool() != Some(true);
        (if unknown { n + k } else { n }, t + k)
    });
    (total > 0.0).then(|| none / total)
}

/// Runs `workload` once under `tracer`.
pub fn run(tracer: &Tracer, workload: &str, threads: usize, duration: f64) -> Result<Sample> {
    let mut sample = Sample::default();
    let st = match tracer {
        Tracer::Untraced => stress(workload, threads, duration)?,
        Tracer::Floor => {
            let mut c = lockprof_bench();
            c.arg("floor");
            let t = start_tracer(c, "floor attached")?;
            let r = stress(workload, threads, duration);
            let v = stop_tracer(t)?;
            sample.contentions = v["ends"].as_f64();
            r?
        }
        Tracer::BpftraceFutex => {
            let t = bpftrace::start()?;
            let r = stress(workload, threads, duration);
            sample.futex_calls = Some(bpftrace::stop(t)?.enters);
            r?
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
            let (c, w) = parse_perf(&String::from_utf8_lossy(&out.stderr));
            (sample.contentions, sample.wait_ns) = (Some(c), Some(w));
            parse_stress(&String::from_utf8_lossy(&out.stdout))?
        }
        Tracer::Lockprof { args, .. } => {
            let mut c = lockprof();
            c.args(["record", "--format", "json"]).args(args);
            let t = start_tracer(c, "lockprof: recording")?;
            let r = stress(workload, threads, duration);
            let v = stop_tracer(t)?;
            let st = r?;
            let (kernel, wait) = lockprof_counts(&v);
            (sample.contentions, sample.wait_ns) = (kernel, Some(wait));
            sample.blamed = blamed_share(&v);
            let drops = |name: &str| v["drops"][name].as_f64().unwrap_or(0.0);
            sample.unstacked = kernel.filter(|k| *k > 0.0).map(|k| (drops("stack_skipped") + drops("stacks_cut")) / k);
            sample.uncalled = uncalled_share(&v);
            if !st.contended.is_empty() {
                let syms = futex_rows::stress_symbols(&release_bin("lockprof"))?;
                let locks: Vec<String> = st.contended.iter().map(|c| c.0.clone()).collect();
                let seen = futex_rows::seen_per_lock(&v, &syms, &locks);
                sample.per_lock =
                    st.contended.iter().zip(seen).map(|((l, own), (_, n))| (l.clone(), *own as f64, n)).collect();
                sample.futex_seen = Some(sample.per_lock.iter().map(|p| p.2).sum());
            }
            sample.lost = lost_of(&v["drops"]);
            sample.drops = v["drops"].clone();
            st
        }
    };
    sample.own_contended = st.contended_total();
    sample.ops_per_s = st.ops / st.secs.max(1e-9);
    (sample.ops, sample.secs) = (st.ops, st.secs);
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_and_perf_outputs_parse() {
        assert_eq!(
            parse_stress("Pipe: 1310614 ops in 2.00 s (654250 ops/s, 4 threads)\n").ok(),
            Some(Stress { ops: 1310614.0, secs: 2.0, contended: vec![] })
        );
        assert!(parse_stress("garbage").is_err());
        let perf = " contended   total wait     max wait     avg wait         type   caller\n\n     74800    185.91 ms      6.62 ms      2.48 us        mutex   vfs_write+0x398\n      3484     35.71 us    276.45 us     10.25 us     spinlock   exit_to_user_mode_loop+0x51\n";
        let (c, w) = parse_perf(perf);
        assert_eq!(c, 78284.0);
        assert!((w - (185.91e6 + 35.71e3)).abs() < 1.0, "{w}");
    }

    #[test]
    fn stress_futex_output_parses_with_its_counts() {
        let out = "Futex: 81234 ops in 3.00 s (27078 ops/s, 4 threads)\n\
acquired lockprof_stress_mutex 40617\ncontended lockprof_stress_mutex 21000\n\
acquired lockprof_stress_std_mutex 40617\ncontended lockprof_stress_std_mutex 9000\n";
        let st = parse_stress(out).expect("parses");
        assert_eq!((st.ops, st.secs), (81234.0, 3.0));
        assert_eq!(
            st.contended,
            vec![("lockprof_stress_mutex".to_string(), 21000), ("lockprof_stress_std_mutex".to_string(), 9000)]
        );
        assert_eq!(st.contended_total(), Some(30000.0));
        assert!(parse_stress("Futex: 1 ops in 1.00 s (1 ops/s, 1 threads)\ncontended x many\n").is_err());
        assert_eq!(
            parse_stress("Pipe: 1 ops in 1.00 s (1 ops/s, 1 threads)\n").ok().and_then(|s| s.contended_total()),
            None
        );
    }

    #[test]
    fn lockprof_futex_rows_are_counted_apart_from_kernel_locks() {
        let v = serde_json::json!({
            "events": 1000,
            "locks": [
                {"type": "mutex", "contended": 600, "wait_total_ns": 6000},
                {"type": "futex", "contended": 250, "wait_total_ns": 90000},
                {"type": "futex-pi", "contended": 100, "wait_total_ns": 1},
                {"type": "spinlock", "contended": 50, "wait_total_ns": 4},
            ]
        });
        assert_eq!(lockprof_counts(&v), (Some(650.0), 6004.0), "events less every futex row; kernel-lock wait only");
    }

    #[test]
    fn blame_share_is_known_owner_wait_over_owner_rows() {
        let v = serde_json::json!({"locks": [
            {"type": "mutex", "owners": [
                {"owner_kind": "task", "wait_caused_ns": 300},
                {"owner_kind": "unknown", "wait_caused_ns": 100},
                {"owner_kind": "readers", "wait_caused_ns": 100},
            ]},
            {"type": "spinlock", "owners": []},
        ]});
        assert_eq!(blamed_share(&v), Some(0.8));
        assert_eq!(blamed_share(&serde_json::json!({"locks": [{"owners": []}]})), None, "no owner rows: not measured");
    }
}
