//! `cargo xtask bench`: overhead of lockprof on the seed workloads, measured
//! side by side in one run (untraced / counting-only floor / lockprof, in
//! rotating order, several rounds), plus userspace throughput, memory and
//! attach time. Prints a table and rewrites BENCHMARKS.md.

use std::{
    fmt::Write as _,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::util::{output, workspace_root};

/// Options of a bench run.
pub struct Opts {
    pub rounds: usize,
    pub duration: f64,
    pub threads: usize,
    pub workloads: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Untraced,
    Floor,
    /// `lockprof record` with defaults (aggregate mode).
    Lockprof,
    /// `lockprof record --mode stream`.
    Stream,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Floor => "floor",
            Mode::Lockprof => "lockprof",
            Mode::Stream => "stream",
        }
    }
}

const MODES: [Mode; 4] = [Mode::Untraced, Mode::Floor, Mode::Lockprof, Mode::Stream];
const N: usize = MODES.len();

struct Sample {
    ops_per_s: f64,
    /// lockprof runs: (events recorded, seconds recorded, drops object).
    recording: Option<(u64, f64, Value)>,
}

fn lockprof() -> Command {
    Command::new(workspace_root().join("target/release/lockprof"))
}

/// The measurement helpers (feature `bench`), built beside the product binary.
fn lockprof_bench() -> Command {
    Command::new(workspace_root().join("target/release/lockprof-bench"))
}

/// Starts a tracer and waits until it says it is attached.
fn start_tracer(mut cmd: Command, ready: &str) -> Result<Child> {
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

fn stop_tracer(child: Child) -> Result<Value> {
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

fn stress(workload: &str, threads: usize, duration: f64) -> Result<f64> {
    let out = output(lockprof().args([
        "stress",
        workload,
        "--threads",
        &threads.to_string(),
        "--duration",
        &duration.to_string(),
    ]))
    .context("stress failed")?;
    // "Pipe: N ops in S s (R ops/s, T threads)"
    let rate = out.split('(').nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse::<f64>().ok());
    rate.with_context(|| format!("cannot parse stress output {out:?}"))
}

fn run_one(mode: Mode, workload: &str, o: &Opts) -> Result<Sample> {
    match mode {
        Mode::Untraced => Ok(Sample { ops_per_s: stress(workload, o.threads, o.duration)?, recording: None }),
        Mode::Floor => {
            let mut c = lockprof_bench();
            c.arg("floor");
            let t = start_tracer(c, "floor attached")?;
            let r = stress(workload, o.threads, o.duration);
            stop_tracer(t)?;
            Ok(Sample { ops_per_s: r?, recording: None })
        }
        Mode::Lockprof | Mode::Stream => {
            let mut c = lockprof();
            c.args(["record", "--format", "json", "--top", "1"]);
            if mode == Mode::Stream {
                c.args(["--mode", "stream"]);
            }
            let t = start_tracer(c, "lockprof: recording")?;
            let r = stress(workload, o.threads, o.duration);
            let v = stop_tracer(t)?;
            let events = v["events"].as_u64().unwrap_or(0);
            let secs = v["duration_s"].as_f64().unwrap_or(0.0);
            Ok(Sample { ops_per_s: r?, recording: Some((events, secs, v["drops"].clone())) })
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

struct WorkloadResult {
    name: String,
    median: [f64; N],
    spread_pct: [f64; N],
    /// (aggregate, stream): highest contention rate recorded, events lost, last counters.
    max_event_rate: [f64; 2],
    lost: [u64; 2],
    drops: [Value; 2],
}

fn lost_of(drops: &Value) -> u64 {
    ["ringbuf_full", "userspace_lost", "pending_map_full", "malformed_records"]
        .iter()
        .map(|k| drops[*k].as_u64().unwrap_or(0))
        .sum()
}

fn bench_workload(name: &str, o: &Opts) -> Result<WorkloadResult> {
    let mut samples: Vec<Vec<Sample>> = (0..N).map(|_| Vec::new()).collect();
    for round in 0..o.rounds {
        for k in 0..N {
            let mode = MODES[(round + k) % N];
            let s = run_one(mode, name, o).with_context(|| format!("{name}/{}", mode.name()))?;
            eprintln!("bench: {name:<7} round {round} {:<9} {:>12.0} ops/s", mode.name(), s.ops_per_s);
            samples[MODES.iter().position(|m| *m == mode).unwrap_or(0)].push(s);
        }
    }
    let mut median_v = [0.0; N];
    let mut spread = [0.0; N];
    for i in 0..N {
        let mut v: Vec<f64> = samples[i].iter().map(|s| s.ops_per_s).collect();
        let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        median_v[i] = median(&mut v);
        spread[i] = if median_v[i] > 0.0 { (hi - lo) / median_v[i] * 100.0 } else { 0.0 };
    }
    let mut max_event_rate = [0.0; 2];
    let mut lost = [0; 2];
    let mut drops = [Value::Null, Value::Null];
    for (j, idx) in [2usize, 3].into_iter().enumerate() {
        let recs: Vec<&(u64, f64, Value)> = samples[idx].iter().filter_map(|s| s.recording.as_ref()).collect();
        max_event_rate[j] = recs.iter().map(|(e, s, _)| *e as f64 / s.max(1e-9)).fold(0.0, f64::max);
        lost[j] = recs.iter().map(|(_, _, d)| lost_of(d)).sum();
        drops[j] = recs.last().map(|(_, _, d)| d.clone()).unwrap_or(Value::Null);
    }
    Ok(WorkloadResult { name: name.to_string(), median: median_v, spread_pct: spread, max_event_rate, lost, drops })
}

/// (program id, average ns per run, runs).
type ProgCost = (u64, f64, u64);

/// Per-program average run time (ns) of a tracer's programs, from fdinfo,
/// ordered by program id (lockprof attaches contention_end first).
fn program_costs(pid: u32) -> Vec<ProgCost> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return out };
    for e in dir.filter_map(|e| e.ok()) {
        let Ok(info) = std::fs::read_to_string(e.path()) else { continue };
        let field = |k: &str| info.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        if let (Some(_), Some(id), Some(t), Some(c)) =
            (field("prog_type:"), field("prog_id:"), field("run_time_ns:"), field("run_cnt:"))
            && c > 0
        {
            out.push((id, t as f64 / c as f64, c));
        }
    }
    out.sort_by_key(|x| x.0);
    out
}

/// One pipe-storm run per tracer with the kernel's BPF run-time statistics on.
fn measure_costs(o: &Opts) -> Result<Vec<(&'static str, Vec<ProgCost>)>> {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let old = std::fs::read_to_string(KNOB).unwrap_or_else(|_| "0".into());
    std::fs::write(KNOB, "1").context("enabling bpf_stats")?;
    let mut res = Vec::new();
    for (name, args) in [
        ("floor", vec!["floor"]),
        ("aggregate", vec!["record", "--format", "json", "--top", "1"]),
        ("stream", vec!["record", "--format", "json", "--top", "1", "--mode", "stream"]),
    ] {
        let mut c = if name == "floor" { lockprof_bench() } else { lockprof() };
        c.args(&args);
        let ready = if name == "floor" { "floor attached" } else { "lockprof: recording" };
        let t = start_tracer(c, ready)?;
        let _ = stress("pipe", o.threads, o.duration.min(2.0));
        res.push((name, program_costs(t.id())));
        stop_tracer(t)?;
    }
    let _ = std::fs::write(KNOB, old.trim());
    Ok(res)
}

fn bench_json(args: &[&str]) -> Result<Value> {
    let out = output(lockprof_bench().args(args)).with_context(|| format!("lockprof-bench {args:?}"))?;
    serde_json::from_str(out.trim()).context("bench output is not JSON")
}

fn machine_facts() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1048576.0))
        .unwrap_or_else(|| "?".into());
    let commit = output(Command::new("git").current_dir(workspace_root()).args(["rev-parse", "--short", "HEAD"]))
        .unwrap_or_default();
    format!("kernel {}, {cpus} CPUs ({cpu}), {mem} RAM, lockprof {}", kernel.trim(), commit.trim())
}

/// Runs everything and writes BENCHMARKS.md.
pub fn run(o: &Opts) -> Result<()> {
    let facts = machine_facts();
    eprintln!("bench: {facts}");
    let mut results = Vec::new();
    for w in &o.workloads {
        results.push(bench_workload(w, o)?);
    }
    let pipe_small = bench_json(&["pipeline", "--events", "5000000", "--stacks", "1000"])?;
    let rss10k = bench_json(&["pipeline", "--events", "1000000", "--stacks", "10000"])?;
    let rss100k = bench_json(&["pipeline", "--events", "2000000", "--stacks", "100000"])?;
    let attach = bench_json(&["attach", "--rounds", "5"])?;
    let costs = measure_costs(o)?;

    let targets = |name: &str| match name {
        "pipe" => (0.90, true),
        "fork" | "unlink" => (0.95, false),
        _ => (0.0, false),
    };
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(md, "Regenerated by `cargo xtask bench` (as root). Machine: {facts}.\n");
    let _ = writeln!(
        md,
        "Each workload ran {} rounds of {} s with {} threads per mode; modes alternate in rotating order within each round. \
Throughput is operations/s of `lockprof stress <workload>` (pipe: 512-byte writes; fork: fork+exit+wait; unlink: create+unlink; \
prio: getpriority calls). *floor* is a BPF program on the same two tracepoints that only counts; *lockprof* is `lockprof record` \
(tp_btf, default options: aggregate mode, 10k stack walks/s/CPU); *stream* is `lockprof record --mode stream`. Ratios are of medians; spread is (max - min) / median.\n",
        o.rounds, o.duration, o.threads
    );
    let _ = writeln!(
        md,
        "| workload | untraced ops/s | floor | lockprof (aggregate) | lockprof / floor | stream | spread u/f/a/s | contentions/s seen (a / s) | lost (a / s) | target | met |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut all_met = true;
    for r in &results {
        let [u, f, l, st] = r.median;
        let (target, vs_floor) = targets(&r.name);
        let met = l / u >= target && (!vs_floor || l / f >= 0.90) && r.lost[0] == 0;
        all_met &= met;
        let tgt = match (target > 0.0, vs_floor) {
            (false, _) => "zero loss".to_string(),
            (true, true) => format!(">= {target:.2}x, within 10% of floor, zero loss"),
            (true, false) => format!(">= {target:.2}x, zero loss"),
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.3}x | {:.3}x | {:.3} | {:.3}x | {:.0}% / {:.0}% / {:.0}% / {:.0}% | {:.0} / {:.0} | {} / {} | {} | {} |",
            r.name,
            u,
            f / u,
            l / u,
            l / f,
            st / u,
            r.spread_pct[0],
            r.spread_pct[1],
            r.spread_pct[2],
            r.spread_pct[3],
            r.max_event_rate[0],
            r.max_event_rate[1],
            r.lost[0],
            r.lost[1],
            tgt,
            if met { "yes" } else { "**no**" }
        );
    }
    let eps = pipe_small["events_per_s"].as_f64().unwrap_or(0.0);
    let att = attach["load_attach_ms_median"].as_f64().unwrap_or(f64::MAX);
    all_met &= eps >= 5e6 && att <= 300.0;
    let _ = writeln!(md, "\n| userspace and startup | value | target | met |\n|---|---|---|---|");
    let _ = writeln!(
        md,
        "| decode + aggregate, one core | {:.2} M events/s | >= 5 M/s | {} |",
        eps / 1e6,
        if eps >= 5e6 { "yes" } else { "**no**" }
    );
    for (label, v) in [("10k", &rss10k), ("100k", &rss100k)] {
        let _ = writeln!(
            md,
            "| RSS growth at {label} distinct stacks | {:.1} MiB ({} callers) | measured | - |",
            v["rss_growth_kib"].as_f64().unwrap_or(0.0) / 1024.0,
            v["distinct_callers"]
        );
    }
    let _ = writeln!(
        md,
        "| load + attach (median of 5) | {att:.1} ms | <= 300 ms | {} |",
        if att <= 300.0 { "yes" } else { "**no**" }
    );
    let _ = writeln!(md, "\nLast run's counters per workload (aggregate, then stream mode):\n");
    for r in &results {
        let _ = writeln!(md, "- {} aggregate: `{}`", r.name, r.drops[0]);
        let _ = writeln!(md, "- {} stream: `{}`", r.name, r.drops[1]);
    }
    let _ = writeln!(
        md,
        "\nCost per program run on the pipe storm (kernel bpf_stats, one extra run each; the stats add two clock reads, \
about 2 x 40 ns here, to every figure):\n"
    );
    let _ = writeln!(md, "| tracer | contention_end avg | contention_begin avg | runs (end) |\n|---|---|---|---|");
    for (name, progs) in &costs {
        let end = progs.first().map(|p| format!("{:.0} ns", p.1)).unwrap_or_else(|| "-".into());
        let begin = progs.get(1).map(|p| format!("{:.0} ns", p.1)).unwrap_or_else(|| "-".into());
        let runs = progs.first().map(|p| p.2).unwrap_or(0);
        let _ = writeln!(md, "| {name} | {end} | {begin} | {runs} |");
    }
    md.push_str(NOTES);
    let _ = writeln!(md, "\nAll targets met: {}.", if all_met { "yes" } else { "no (see rows marked **no**)" });
    print!("{md}");
    std::fs::write(workspace_root().join("BENCHMARKS.md"), &md).context("writing BENCHMARKS.md")?;
    eprintln!("bench: wrote BENCHMARKS.md");
    Ok(())
}

/// What was tried, and why the pipe storm misses its target (measured while
/// designing; the table above re-measures the current design every run).
const NOTES: &str = "
## Design history and the pipe-storm target

The pipe storm is a mutex ping-pong: untraced it makes about 1M contentions/s on 2 CPUs (the floor's tracepoint hit
count), so every nanosecond per contention costs about 0.1% of the machine, and anything done after the lock is
acquired lengthens the critical section and breeds more contention (the traced runs see 1.4-1.7M contentions/s).
Measured steps, pipe storm, lockprof / untraced:

1. Streaming every wait, per-event ring-buffer wakeups: 0.43x. Submitting with BPF_RB_NO_WAKEUP and polling every
   50 ms (forced wakeup only when a quarter of the ring is full): ~0.8x.
2. Per-contention hash insert at begin and delete at end (bucket locks and free lists shared by both CPUs):
   removing them alone took a stack-less, ring-less variant from 0.64x to ~1.0x. Now spinning waits use a per-CPU
   slot (they cannot sleep or migrate) and sleeping waits a resident per-task entry, reused.
3. Kernel stack walk at begin: ~2.2 us per walk here (bpf_get_stack of only 2 frames still costs ~1.5 us: the
   unwinder's fixed cost dominates). Walking less often is not enough by itself: a cheaper begin raises the
   contention rate. Now at most --stack-rate walks per second per CPU (default 10k); beyond that the thread's
   previous stack for the same lock and flags is reused (`stack_reused`) or the wait is kept without a stack
   (`stack_skipped`).
4. In-kernel aggregation (default `--mode aggregate`): at contention_end only CPU-local work (a per-CPU hash
   lookup and in-place update); userspace flips between two maps each second and drains the idle one, so no wait
   is lost between read and delete. Streaming stays available as `--mode stream`.
5. Tried and dropped: task-local storage for per-task state (no gain over the resident hash entry, and it would
   tie the classic-tracepoint fallback to BTF); an LRU map for per-task state (evicted entries of tasks sleeping in
   a wait under fork churn).

What remains is close to the minimum for a profiler that times waits: two clock reads per contention
(bpf_ktime_get_ns costs ~40 ns in this VM, measured with a floor variant that only reads the clock twice:
48 ns -> 113-140 ns per run) plus one map lookup and update on each side. At ~1.5M contentions/s that is about a
fifth of this 2-CPU machine, hence the miss on this synthetic storm; the fork/exit, unlink and getpriority
workloads, at realistic rates, are within noise of untraced.
";
