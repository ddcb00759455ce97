//! BENCHMARKS.md's user-space lock section: the futex storm untraced,
//! under the bpftrace futex floor and under lockprof without and with
//! `--futex` (throughput, and what `--futex` saw of the workload's own
//! contended count), the kernel-lock workloads with and without `--futex`,
//! and the futex programs' costs.

use std::fmt::Write as _;

use super::{
    LOCKPROF_FUTEX, LOCKPROF_FUTEX_FP, Opts, Tracer, USER_STACKS, USER_STACKS_FP, WorkloadRuns,
    extras::FutexProgCost,
    is_futex_workload,
    markdown::{self, counter_lines, pct, rows},
    runs::{BPFTRACE_FUTEX, Sample},
    stats::stats,
};

/// The section's heading (`cargo xtask bench --futex-only` replaces it).
pub const FUTEX_HEADING: &str = "## User-space locks (futex): what it costs";

/// Where the section goes in a document that has none yet: before the first
/// of these headings, else at the end.
const BEFORE: [&str; 2] = ["## Userspace and start-up", "## Design notes"];

/// Median of `f` over a tracer's runs, per second of workload.
fn median_rate(ss: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    stats(ss.iter().filter_map(|s| s.per_s(f(s))).collect()).map(|x| x.0)
}

fn or_dash(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.0}"))
}

fn range(v: Option<(f64, f64, f64)>) -> String {
    v.map_or("-".into(), |(m, lo, hi)| format!("{m:.2} ({lo:.2}-{hi:.2})"))
}

/// A futex workload's table: per tracer, throughput against untraced, the
/// floor's futex calls, and lockprof's futex contentions on the workload's
/// locks against the workload's own contended count, run by run.
fn futex_table(md: &mut String, w: &WorkloadRuns) {
    let _ = writeln!(
        md,
        "### {}\n\n| tracer | ops/s | throughput | spread | futex calls/s counted | contended/s (workload's count) | futex \
contentions/s reported | fidelity (min-max) | lost |\n|---|---|---|---|---|---|---|---|---|",
        w.name
    );
    for ((t, r), ss) in w.tracers.iter().zip(rows(w)).zip(&w.samples) {
        let lockprof = matches!(t, Tracer::Lockprof { .. });
        let fidelity = stats(ss.iter().filter_map(|s| Some(s.futex_seen? / s.own_contended?.max(1.0))).collect());
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {:.0}% | {} | {} | {} | {} | {} |",
            t.label(),
            r.ops,
            pct(r.throughput),
            r.spread_pct,
            or_dash(median_rate(ss, |s| s.futex_calls)),
            or_dash(median_rate(ss, |s| s.own_contended)),
            or_dash(median_rate(ss, |s| s.futex_seen)),
            range(fidelity),
            if lockprof { r.lost.to_string() } else { "-".into() },
        );
    }
    md.push('\n');
    let paired = paired_lines(w, &[(LOCKPROF_FUTEX, LOCKPROF_FUTEX_FP)]);
    if !paired.is_empty() {
        md.push_str(&paired);
        md.push('\n');
    }
    per_lock_table(md, w);
    counter_lines(md, w);
    md.push('\n');
}

/// For each (who, peer) of `pairs` that ran on `w`: a line with `who`'s
/// ops/s over `peer`'s in the same round, median (min-max).
fn paired_lines(w: &WorkloadRuns, pairs: &[(&str, &str)]) -> String {
    let col = |label: &str| w.tracers.iter().position(|t| t.label() == label);
    let mut out = String::new();
    for (who, peer) in pairs {
        if let (Some(a), Some(b)) = (col(peer), col(who)) {
            let ratios = w.samples[b].iter().zip(&w.samples[a]).map(|(f, p)| f.ops_per_s / p.ops_per_s.max(1e-9));
            let r = range(stats(ratios.collect()));
            let _ = writeln!(
                out,
                "- {}: `{who}` ops/s over `{peer}` ops/s of the same round, median (min-max): {r}",
                w.name
            );
        }
    }
    out
}

/// Per lock of the workload, for each lockprof tracer that saw any futex
/// contention: the workload's count against lockprof's, run by run.
fn per_lock_table(md: &mut String, w: &WorkloadRuns) {
    let mut header = false;
    for (t, ss) in w.tracers.iter().zip(&w.samples) {
        if !ss.iter().any(|s| s.per_lock.iter().any(|p| p.2 > 0.0)) {
            continue;
        }
        if !header {
            let _ = writeln!(
                md,
                "| tracer | lock | contended/s (workload's count) | futex contentions/s reported | fidelity (min-max) |\n\
|---|---|---|---|---|"
            );
            header = true;
        }
        let locks: Vec<&String> = ss.iter().flat_map(|s| s.per_lock.iter().map(|p| &p.0)).collect();
        let mut seen_names: Vec<&String> = Vec::new();
        for l in locks {
            if seen_names.contains(&l) {
                continue;
            }
            seen_names.push(l);
            let of = |s: &Sample| s.per_lock.iter().find(|p| &p.0 == l).map(|p| (p.1, p.2));
            let own = stats(ss.iter().filter_map(|s| Some(of(s)?.0 / s.secs.max(1e-9))).collect()).map(|x| x.0);
            let seen = stats(ss.iter().filter_map(|s| Some(of(s)?.1 / s.secs.max(1e-9))).collect()).map(|x| x.0);
            let fid = stats(ss.iter().filter_map(|s| of(s).map(|(o, n)| n / o.max(1.0))).collect());
            let _ = writeln!(md, "| {} | `{l}` | {} | {} | {} |", t.label(), or_dash(own), or_dash(seen), range(fid));
        }
    }
    if header {
        md.push('\n');
    }
}

/// The kernel-lock workloads' untraced, floor, lockprof, lockprof
/// --user-stacks (which --futex implies) and lockprof --futex rows, from
/// their rotation, and --futex against its two peers round by round.
fn kernel_table(md: &mut String, results: &[&WorkloadRuns]) {
    let _ = writeln!(
        md,
        "### Kernel locks with --futex on\n\n| workload | tracer | ops/s | throughput | spread | contentions/s seen | \
fidelity (min-max) | lost |\n|---|---|---|---|---|---|---|---|"
    );
    let mut paired = String::new();
    for w in results {
        let rs = rows(w);
        let col = |label: &str| w.tracers.iter().position(|t| t.label() == label);
        for (i, t) in w.tracers.iter().enumerate() {
            let shown = matches!(t, Tracer::Untraced | Tracer::Floor | Tracer::BpftraceFutex)
                || ["lockprof", USER_STACKS, USER_STACKS_FP, LOCKPROF_FUTEX].iter().any(|l| col(l) == Some(i));
            if !shown {
                continue;
            }
            let r = &rs[i];
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {} | {:.0}% | {} | {} | {} |",
                w.name,
                t.label(),
                r.ops,
                pct(r.throughput),
                r.spread_pct,
                or_dash(r.rate),
                range(r.fidelity),
                if matches!(t, Tracer::Lockprof { .. }) { r.lost.to_string() } else { "-".into() },
            );
        }
        let pairs = [
            (LOCKPROF_FUTEX, "lockprof"),
            (LOCKPROF_FUTEX, USER_STACKS),
            (USER_STACKS, USER_STACKS_FP),
            (BPFTRACE_FUTEX, "untraced"),
        ];
        paired.push_str(&paired_lines(w, &pairs));
    }
    md.push('\n');
    md.push_str(&paired);
    md.push('\n');
}

/// The futex programs' average run time on the futex storm.
fn costs_table(md: &mut String, o: &Opts, secs: f64, costs: &[FutexProgCost]) {
    let _ = writeln!(
        md,
        "### Futex programs\n\nAverage run time of each program on the futex system calls during a futex storm ({} \
threads, {secs} s per tracer, one run each) with the kernel's bpf_stats on (which add their own clock reads: the \
bpftrace counters show that fixed part).\n\n| tracer | program | avg | runs |\n|---|---|---|---|",
        o.threads
    );
    for c in costs {
        let _ = writeln!(md, "| {} | {} | {:.0} ns | {} |", c.tracer, c.name, c.avg_ns, c.runs);
    }
    md.push('\n');
}

/// The whole section, from the rotations of `results` (the futex workloads,
/// and the others that ran `lockprof --futex`) and the programs' costs.
pub fn render(facts: &str, o: &Opts, results: &[WorkloadRuns], costs: Option<&[FutexProgCost]>) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "{FUTEX_HEADING}\n\nMeasured on {facts}: {} rounds of {} s with {} threads per tracer, tracers rotating within each \
round. `lockprof stress futex` contends its threads on a glibc `pthread_mutex_t` and a Rust `std::sync::Mutex` and counts, \
per lock, the acquisitions whose try failed (*contended*). *bpftrace futex count* is the futex floor: a bpftrace script \
counting `sys_enter_futex` and `sys_exit_futex`, the cheapest thing that sees every futex wait (its count is of every \
futex call of every process, wakes included). **Throughput** is the median ops/s against untraced; **fidelity** is, run \
by run, the futex contentions lockprof reports on the workload's two locks over the workload's own contended count in \
that run (the locks' rows are found by address, the statics' symbol values plus the workload's load base: lockprof names \
a user-space lock only while its process lives, and the workload has exited when the profile is written). A failed try that finds the lock free again before the futex wait \
(or, for Rust's mutex, after its spinning) never reaches the kernel: fidelity below 1 is expected, above 1 is not. \
`cargo xtask bench --futex-only --workloads futex,pipe` regenerates this section alone.\n",
        o.rounds, o.duration, o.threads
    );
    for w in results.iter().filter(|w| is_futex_workload(&w.name)) {
        futex_table(&mut md, w);
    }
    let kernel: Vec<&WorkloadRuns> = results
        .iter()
        .filter(|w| !is_futex_workload(&w.name) && w.tracers.iter().any(|t| t.label() == LOCKPROF_FUTEX))
        .collect();
    if !kernel.is_empty() {
        kernel_table(&mut md, &kernel);
    }
    if let Some(c) = costs {
        costs_table(&mut md, o, o.duration.min(super::FUTEX_COST_SECS), c);
    }
    md
}

/// `doc` with `section` in place of its futex section, or inserted before
/// the first of [`BEFORE`] (at the end when there is none).
pub fn put(doc: &str, section: &str) -> String {
    markdown::put_section(doc, FUTEX_HEADING, section, &BEFORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ops: f64, seen: Option<f64>, own: Option<f64>) -> Sample {
        Sample { ops_per_s: ops, ops, secs: 1.0, futex_seen: seen, own_contended: own, ..Sample::default() }
    }

    fn opts() -> Opts {
        Opts {
            rounds: 2,
            duration: 3.0,
            threads: 4,
            workloads: vec![],
            variants: vec![],
            rotation_only: false,
            soak_secs: 0,
            guest: false,
            costs_only: false,
            soak_only: false,
            futex_only: true,
            incidents_only: false,
            hot_lines: None,
        }
    }

    #[test]
    fn the_futex_table_compares_lockprof_with_the_workloads_own_count() {
        let lp = |label: &str| Tracer::Lockprof { label: label.into(), args: vec![] };
        let w = WorkloadRuns {
            name: "futex".into(),
            tracers: vec![
                Tracer::Untraced,
                Tracer::BpftraceFutex,
                lp("lockprof"),
                lp(LOCKPROF_FUTEX),
                lp(LOCKPROF_FUTEX_FP),
            ],
            samples: vec![
                vec![sample(1000.0, None, Some(500.0)), sample(1000.0, None, Some(500.0))],
                vec![
                    Sample { futex_calls: Some(9000.0), ..sample(900.0, None, Some(400.0)) },
                    Sample { futex_calls: Some(9000.0), ..sample(900.0, None, Some(400.0)) },
                ],
                vec![sample(990.0, Some(0.0), Some(500.0)), sample(990.0, Some(0.0), Some(500.0))],
                vec![sample(800.0, Some(300.0), Some(400.0)), sample(800.0, Some(360.0), Some(400.0))],
                vec![sample(1000.0, Some(300.0), Some(400.0)), sample(900.0, Some(360.0), Some(400.0))],
            ],
        };
        let md = render("kernel k", &opts(), &[w], None);
        let copy_over_fp = "- futex: `lockprof --futex` ops/s over `lockprof --futex --user-unwind fp` ops/s of the same \
round, median (min-max): 0.84 (0.80-0.89)";
        assert!(md.contains(copy_over_fp), "{md}");
        assert!(md.starts_with(FUTEX_HEADING), "{md}");
        assert!(md.contains("| untraced | 1000 | 1.000x | 0% | - | 500 | - | - | - |"), "{md}");
        assert!(md.contains("| bpftrace futex count | 900 | 0.900x | 0% | 9000 | 400 | - | - | - |"), "{md}");
        assert!(md.contains("| lockprof | 990 | 0.990x | 0% | - | 500 | 0 | 0.00 (0.00-0.00) | 0 |"), "{md}");
        assert!(md.contains("| lockprof --futex | 800 | 0.800x | 0% | - | 400 | 330 | 0.82 (0.75-0.90) | 0 |"), "{md}");
        assert!(!md.contains("### Kernel locks"), "no kernel workload ran: {md}");
    }

    #[test]
    fn kernel_workloads_show_lockprof_with_and_without_futex() {
        let lp = |label: &str| Tracer::Lockprof { label: label.into(), args: vec![] };
        let s = |ops: f64| sample(ops, None, None);
        let w = WorkloadRuns {
            name: "pipe".into(),
            tracers: vec![
                Tracer::Untraced,
                Tracer::Floor,
                Tracer::BpftraceFutex,
                lp("lockprof --mode stream"),
                lp("lockprof"),
                lp(LOCKPROF_FUTEX),
            ],
            samples: vec![vec![s(100.0)], vec![s(100.0)], vec![s(90.0)], vec![s(50.0)], vec![s(98.0)], vec![s(49.0)]],
        };
        let md = render("kernel k", &opts(), &[w], None);
        assert!(md.contains("| pipe | lockprof | 98 | 0.980x |"), "{md}");
        assert!(md.contains("| pipe | lockprof --futex | 49 | 0.490x |"), "{md}");
        assert!(!md.contains("--mode stream"), "only the futex-relevant tracers compared: {md}");
        assert!(md.contains("| pipe | bpftrace futex count | 90 | 0.900x |"), "{md}");
        assert!(
            md.contains("`bpftrace futex count` ops/s over `untraced` ops/s of the same round, median (min-max): 0.90")
        );
        assert!(md.contains("- pipe: `lockprof --futex` ops/s over `lockprof` ops/s of the same round, median (min-max): 0.50 (0.50-0.50)"), "{md}");
    }

    #[test]
    fn the_section_is_replaced_or_added_before_the_extras() {
        let section = format!("{FUTEX_HEADING}\n\nnew\n\n");
        let doc = "# B\n\n## pipe\n\nx\n\n## Userspace and start-up\n\ny\n";
        let added = put(doc, &section);
        assert_eq!(added, format!("# B\n\n## pipe\n\nx\n\n{section}## Userspace and start-up\n\ny\n"));
        let again = put(&added, &format!("{FUTEX_HEADING}\n\nnewer\n\n"));
        assert!(again.contains("newer") && !again.contains("\nnew\n"), "{again}");
        assert_eq!(put("# B\n", &section), format!("# B\n\n{section}"));
    }
}
