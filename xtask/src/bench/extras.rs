//! Measurements beside the workload rotation: per-program costs from the
//! kernel's BPF statistics, userspace throughput and memory, attach time.

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::runs::{lockprof, lockprof_bench, start_tracer, stop_tracer, stress};
use crate::util::output;

/// (program id, average ns per run, runs).
pub type ProgCost = (u64, f64, u64);

/// Per-program average run time (ns) of a tracer's programs, from fdinfo,
/// ordered by program id (the end program is loaded first).
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
pub fn program_cost_table(threads: usize, secs: f64) -> Result<Vec<(String, Vec<ProgCost>)>> {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let old = std::fs::read_to_string(KNOB).unwrap_or_else(|_| "0".into());
    std::fs::write(KNOB, "1").context("enabling bpf_stats")?;
    let mut res = Vec::new();
    let runs: [(&str, &[&str]); 3] = [
        ("floor", &["floor"]),
        ("lockprof (default)", &["record", "--format", "json", "--top", "1"]),
        ("lockprof --mode stream", &["record", "--format", "json", "--top", "1", "--mode", "stream"]),
    ];
    for (name, args) in runs {
        let floor = name == "floor";
        let mut c = if floor { lockprof_bench() } else { lockprof() };
        c.args(args);
        let t = start_tracer(c, if floor { "floor attached" } else { "lockprof: recording" })?;
        let _ = stress("pipe", threads, secs);
        res.push((name.to_string(), program_costs(t.id())));
        stop_tracer(t)?;
    }
    let _ = std::fs::write(KNOB, old.trim());
    Ok(res)
}

/// `lockprof-bench ARGS` as JSON.
pub fn bench_json(args: &[&str]) -> Result<Value> {
    let out = output(lockprof_bench().args(args)).with_context(|| format!("lockprof-bench {args:?}"))?;
    serde_json::from_str(out.trim()).context("lockprof-bench output is not JSON")
}
