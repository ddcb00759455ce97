//! Measurements beside the workload rotation: per-program costs from the
//! kernel's BPF statistics, userspace throughput and memory, attach time.

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{
    bpftrace,
    runs::{lockprof, lockprof_bench, start_tracer, stop_tracer, stress},
};
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

/// The `contention_end` and `contention_begin` programs (lockprof's or the
/// floor's, by name) among `costs`, in that order: the tracer also loads
/// other programs (identity iterator, holds, yield_to) that must not be
/// taken for them.
fn end_then_begin(costs: Vec<ProgCost>, names: &Value) -> Vec<ProgCost> {
    let named = |id: u64| names.get(id.to_string()).and_then(Value::as_str).unwrap_or_default().to_string();
    let pick = |side: &str| costs.iter().filter(|c| named(c.0).contains(side)).max_by_key(|c| c.2).copied();
    // The kernel keeps 15 characters of a name: `contention_begi`.
    pick("_end").into_iter().chain(pick("_beg")).collect()
}

/// Per tracer, its `contention_end` and `contention_begin` programs' costs.
pub struct Costs {
    /// Workload threads.
    pub threads: usize,
    /// Seconds of pipe storm per tracer.
    pub secs: f64,
    /// Tracer label and its programs, end first.
    pub tracers: Vec<(String, Vec<ProgCost>)>,
}

/// `f` with the kernel's BPF run-time statistics on (restored after).
fn with_bpf_stats<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let old = std::fs::read_to_string(KNOB).unwrap_or_else(|_| "0".into());
    std::fs::write(KNOB, "1").context("enabling bpf_stats")?;
    let res = f();
    let _ = std::fs::write(KNOB, old.trim());
    res
}

/// One pipe-storm run per tracer with the kernel's BPF run-time statistics on.
pub fn program_cost_table(threads: usize, secs: f64) -> Result<Costs> {
    let tracers = with_bpf_stats(|| tracer_costs(threads, secs))?;
    Ok(Costs { threads, secs, tracers })
}

/// One program's cost on the futex storm.
#[derive(Clone, Debug, PartialEq)]
pub struct FutexProgCost {
    /// Who loaded it: `lockprof --futex` or the bpftrace floor.
    pub tracer: &'static str,
    /// Its name as the kernel keeps it (15 characters).
    pub name: String,
    /// Average run time, ns.
    pub avg_ns: f64,
    /// Runs.
    pub runs: u64,
}

/// The programs of `costs` whose names `keep` accepts, named.
fn named_costs(
    tracer: &'static str,
    costs: Vec<ProgCost>,
    names: &Value,
    keep: impl Fn(&str) -> bool,
) -> Vec<FutexProgCost> {
    costs
        .into_iter()
        .filter_map(|(id, avg_ns, runs)| {
            let name = names.get(id.to_string()).and_then(Value::as_str).unwrap_or_default();
            keep(name).then(|| FutexProgCost { tracer, name: name.to_string(), avg_ns, runs })
        })
        .collect()
}

/// The futex programs' costs on a futex storm (`secs` seconds, bpf_stats
/// on): `lockprof --futex`'s programs on the futex syscalls, and the
/// bpftrace floor's two counters.
pub fn futex_program_costs(threads: usize, secs: f64) -> Result<Vec<FutexProgCost>> {
    with_bpf_stats(|| {
        let mut c = lockprof();
        c.args(["record", "--format", "json", "--top", "1", "--futex"]);
        let t = start_tracer(c, "lockprof: recording")?;
        let storm = stress("futex", threads, secs);
        let names = bench_json(&["prog-names"]);
        let costs = program_costs(t.id());
        stop_tracer(t)?;
        storm.context("futex storm")?;
        let mut out = named_costs("lockprof --futex", costs, &names?, |n| n.starts_with("futex"));
        if bpftrace::available() {
            let b = bpftrace::start()?;
            let storm = stress("futex", threads, secs);
            let names = bench_json(&["prog-names"]);
            let costs = program_costs(b.pid());
            bpftrace::stop(b)?;
            storm.context("futex storm")?;
            // bpftrace names its programs after the probe (`sys_enter_futex`,
            // or a prefix of `tracepoint:...`): every one it loaded counts.
            out.extend(named_costs("bpftrace futex count", costs, &names?, |_| true));
        }
        Ok(out)
    })
}

/// Each tracer's programs' costs after `secs` of pipe storm (bpf_stats on).
fn tracer_costs(threads: usize, secs: f64) -> Result<Vec<(String, Vec<ProgCost>)>> {
    let mut res = Vec::new();
    let runs: [(&str, &[&str]); 8] = [
        ("floor", &["floor"]),
        ("lockprof (default)", &["record", "--format", "json", "--top", "1"]),
        ("lockprof --no-owners", &["record", "--format", "json", "--top", "1", "--no-owners"]),
        ("lockprof --mode stream", &["record", "--format", "json", "--top", "1", "--mode", "stream"]),
        ("lockprof --no-cgroups", &["record", "--format", "json", "--top", "1", "--no-cgroups"]),
        ("lockprof --user-stacks", &["record", "--format", "json", "--top", "1", "--user-stacks"]),
        ("lockprof --futex", &["record", "--format", "json", "--top", "1", "--futex"]),
        (
            "lockprof --user-stacks --stack-rate 0",
            &["record", "--format", "json", "--top", "1", "--user-stacks", "--stack-rate", "0"],
        ),
    ];
    for (name, args) in runs {
        let floor = name == "floor";
        let mut c = if floor { lockprof_bench() } else { lockprof() };
        c.args(args);
        let t = start_tracer(c, if floor { "floor attached" } else { "lockprof: recording" })?;
        // Read everything before stopping the tracer, stop it whatever failed.
        let storm = stress("pipe", threads, secs);
        let names = bench_json(&["prog-names"]);
        let costs = program_costs(t.id());
        stop_tracer(t)?;
        storm.context("pipe storm")?;
        res.push((name.to_string(), end_then_begin(costs, &names?)));
    }
    Ok(res)
}

/// `lockprof-bench ARGS` as JSON.
pub fn bench_json(args: &[&str]) -> Result<Value> {
    let out = output(lockprof_bench().args(args)).with_context(|| format!("lockprof-bench {args:?}"))?;
    serde_json::from_str(out.trim()).context("lockprof-bench output is not JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futex_costs_keep_the_named_programs() {
        let names =
            serde_json::json!({"3": "futex_enter", "4": "contention_begi", "5": "futex_exit", "6": "futex_wait_ente"});
        let costs = vec![(3, 80.0, 1000), (4, 200.0, 50), (5, 120.0, 990), (6, 60.0, 0)];
        let got = named_costs("lockprof --futex", costs, &names, |n| n.starts_with("futex"));
        let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["futex_enter", "futex_exit", "futex_wait_ente"]);
        assert_eq!(
            got[1],
            FutexProgCost { tracer: "lockprof --futex", name: "futex_exit".into(), avg_ns: 120.0, runs: 990 }
        );
    }

    #[test]
    fn costs_are_picked_by_program_name_not_by_id() {
        let names =
            serde_json::json!({"7": "slab_caches", "8": "contention_begi", "9": "contention_end_", "10": "kp_mutex"});
        let costs = vec![(7, 392.0, 236), (8, 200.0, 5_000_000), (9, 130.0, 5_000_000), (10, 900.0, 3)];
        assert_eq!(end_then_begin(costs, &names), vec![(9, 130.0, 5_000_000), (8, 200.0, 5_000_000)]);
        let floor = serde_json::json!({"3": "floor_begin_btf", "4": "floor_end_btf"});
        assert_eq!(end_then_begin(vec![(3, 55.0, 10), (4, 56.0, 10)], &floor), vec![(4, 56.0, 10), (3, 55.0, 10)]);
    }
}
