//! Measurements beside the workload rotation: per-program costs from the
//! kernel's BPF statistics, userspace throughput and memory, attach time.

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::stats::stats;
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

/// One program's average run time over the rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgStat {
    /// Median of the rounds' averages, ns.
    pub median: f64,
    /// Lowest round's average, ns.
    pub min: f64,
    /// Highest round's average, ns.
    pub max: f64,
    /// Runs over all rounds.
    pub runs: u64,
}

/// Per program position (end, begin), the rounds' figures summarised.
fn summarise(rounds: &[Vec<ProgCost>]) -> Vec<ProgStat> {
    (0..2)
        .map_while(|i| {
            let avgs: Vec<f64> = rounds.iter().filter_map(|r| r.get(i).map(|p| p.1)).collect();
            let (median, min, max) = stats(avgs)?;
            let runs = rounds.iter().filter_map(|r| r.get(i).map(|p| p.2)).sum();
            Some(ProgStat { median, min, max, runs })
        })
        .collect()
}

/// Per tracer, its `contention_end` and `contention_begin` programs' costs.
pub struct Costs {
    /// Workload threads.
    pub threads: usize,
    /// Seconds of pipe storm per tracer and round.
    pub secs: f64,
    /// Rounds (tracers rotate within each).
    pub rounds: usize,
    /// Tracer label and its programs, end first.
    pub tracers: Vec<(String, Vec<ProgStat>)>,
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

/// `rounds` pipe-storm runs per tracer, rotating, with the kernel's BPF
/// run-time statistics on: one run's figure moves by 10-30 ns with what else
/// the machine does, more than most design steps.
pub fn program_cost_table(threads: usize, secs: f64, rounds: usize) -> Result<Costs> {
    let tracers = with_bpf_stats(|| tracer_costs(threads, secs, rounds))?;
    Ok(Costs { threads, secs, rounds, tracers })
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

/// The tracers of the cost table: label and arguments.
const COST_TRACERS: [(&str, &[&str]); 12] = [
    ("floor", &["floor"]),
    ("lockprof (default)", &["record", "--format", "json", "--top", "1"]),
    ("lockprof --no-owners", &["record", "--format", "json", "--top", "1", "--no-owners"]),
    ("lockprof --no-cgroups", &["record", "--format", "json", "--top", "1", "--no-cgroups"]),
    ("lockprof --no-owners --no-cgroups", &["record", "--format", "json", "--top", "1", "--no-owners", "--no-cgroups"]),
    ("lockprof --mode stream", &["record", "--format", "json", "--top", "1", "--mode", "stream"]),
    ("lockprof --owner-stacks", &["record", "--format", "json", "--top", "1", "--owner-stacks"]),
    ("lockprof --user-stacks", &["record", "--format", "json", "--top", "1", "--user-stacks"]),
    (
        "lockprof --user-stacks --user-unwind fp",
        &["record", "--format", "json", "--top", "1", "--user-stacks", "--user-unwind", "fp"],
    ),
    ("lockprof --futex", &["record", "--format", "json", "--top", "1", "--futex"]),
    (
        "lockprof --user-stacks --stack-rate 0",
        &["record", "--format", "json", "--top", "1", "--user-stacks", "--stack-rate", "0"],
    ),
    (
        "lockprof --user-stacks --user-unwind fp --stack-rate 0",
        &["record", "--format", "json", "--top", "1", "--user-stacks", "--user-unwind", "fp", "--stack-rate", "0"],
    ),
];

/// Each tracer's programs' costs after `secs` of pipe storm (bpf_stats on),
/// `rounds` times, the tracers rotating within each round.
fn tracer_costs(threads: usize, secs: f64, rounds: usize) -> Result<Vec<(String, Vec<ProgStat>)>> {
    let n = COST_TRACERS.len();
    let mut raw: Vec<Vec<Vec<ProgCost>>> = vec![Vec::new(); n];
    for round in 0..rounds.max(1) {
        for k in 0..n {
            let i = (round + k) % n;
            let (name, args) = COST_TRACERS[i];
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
            let progs = end_then_begin(costs, &names?);
            eprintln!(
                "bench: costs round {round} {name:<40} {}",
                progs.iter().map(|p| format!("{:.0} ns", p.1)).collect::<Vec<_>>().join(" / ")
            );
            raw[i].push(progs);
        }
    }
    Ok(COST_TRACERS.iter().zip(raw).map(|((name, _), r)| (name.to_string(), summarise(&r))).collect())
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
    fn rounds_are_summarised_per_program() {
        let rounds =
            vec![vec![(9, 130.0, 10), (8, 200.0, 10)], vec![(19, 150.0, 20), (18, 180.0, 20)], vec![(29, 140.0, 5)]];
        let s = summarise(&rounds);
        assert_eq!(s[0], ProgStat { median: 140.0, min: 130.0, max: 150.0, runs: 35 });
        assert_eq!(s[1], ProgStat { median: 190.0, min: 180.0, max: 200.0, runs: 30 });
        assert!(summarise(&[vec![]]).is_empty());
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
