//! BENCHMARKS.md: the rotation's tables (throughput and fidelity per tracer,
//! with spreads), the extras, and the design notes.

use std::{fmt::Write as _, process::Command};

use serde_json::Value;

use super::{
    Opts, Tracer, WorkloadRuns,
    extras::{Costs, FutexProgCost, ProgStat},
    futex_section,
    guest::GuestRuns,
    is_futex_workload,
    runs::perf_b,
    stats::stats,
};
use crate::util::{output, workspace_root};

/// Measurements beside the rotation.
pub struct Extras {
    /// Per-program costs on the pipe storm.
    pub costs: Costs,
    /// Decode + aggregate throughput.
    pub pipeline: Value,
    /// Memory at 10k distinct stacks.
    pub rss10k: Value,
    /// Memory at 100k distinct stacks.
    pub rss100k: Value,
    /// Load + attach time.
    pub attach: Value,
    /// The daemon's userspace path at 100k keys, default caps.
    pub serve100k: Value,
    /// The same with every key kept (--max-callers above 100k).
    pub serve100k_all: Value,
    /// The lockprof serve soak, when run.
    pub soak: Option<Value>,
}

/// One tracer's figures on one workload.
pub struct Row {
    /// Median ops/s.
    pub ops: f64,
    /// Throughput vs untraced (ratio of medians).
    pub throughput: f64,
    /// (max - min) / median of ops/s, percent.
    pub spread_pct: f64,
    /// Median contentions/s reported.
    pub rate: Option<f64>,
    /// Fidelity per round (rate / the floor's rate in that round): median, min, max.
    pub fidelity: Option<(f64, f64, f64)>,
    /// Median reported wait per workload operation, ns.
    pub wait_per_op: Option<f64>,
    /// Median share of owner-recording locks' wait charged to a known owner.
    pub blamed: Option<f64>,
    /// Median share of contentions without a kernel stack.
    pub unstacked: Option<f64>,
    /// Median share of contentions without a caller.
    pub uncalled: Option<f64>,
    /// Events lost over all rounds.
    pub lost: u64,
}

/// The figures of every tracer of a workload, in column order.
pub fn rows(w: &WorkloadRuns) -> Vec<Row> {
    let col = |t: &Tracer| w.tracers.iter().position(|x| x == t);
    let untraced = col(&Tracer::Untraced).and_then(|i| stats(w.samples[i].iter().map(|s| s.ops_per_s).collect()));
    let floor = col(&Tracer::Floor).map(|i| &w.samples[i]);
    w.samples
        .iter()
        .map(|ss| {
            let (ops, lo, hi) = stats(ss.iter().map(|s| s.ops_per_s).collect()).unwrap_or((0.0, 0.0, 0.0));
            let fidelity = floor.and_then(|fl| {
                stats(ss.iter().zip(fl).filter_map(|(s, f)| Some(s.rate()? / f.rate()?.max(1e-9))).collect())
            });
            Row {
                ops,
                throughput: untraced.map_or(0.0, |u| ops / u.0.max(1e-9)),
                spread_pct: if ops > 0.0 { (hi - lo) / ops * 100.0 } else { 0.0 },
                rate: stats(ss.iter().filter_map(|s| s.rate()).collect()).map(|x| x.0),
                fidelity,
                wait_per_op: stats(ss.iter().filter_map(|s| Some(s.wait_ns? / s.ops.max(1.0))).collect()).map(|x| x.0),
                blamed: stats(ss.iter().filter_map(|s| s.blamed).collect()).map(|x| x.0),
                unstacked: stats(ss.iter().filter_map(|s| s.unstacked).collect()).map(|x| x.0),
                uncalled: stats(ss.iter().filter_map(|s| s.uncalled).collect()).map(|x| x.0),
                lost: ss.iter().map(|s| s.lost).sum(),
            }
        })
        .collect()
}

/// How far a fidelity is from 1, the same in both directions (0.8 and 1.25
/// are both 25% off): more contention than the floor saw is a probe effect
/// as much as less.
pub fn fidelity_distance(f: f64) -> String {
    if f <= 0.0 {
        return "-".into();
    }
    let off = (f.max(1.0 / f) - 1.0) * 100.0;
    format!("{off:.0}% {}", if f >= 1.0 { "over" } else { "under" })
}

/// Kernel, CPUs, memory, commit.
pub fn machine_facts() -> String {
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
    format!("kernel {}, {cpus} CPUs ({cpu}), {mem} RAM, lockprof {}", kernel.trim(), commit())
}

/// The commit measured, saying so when the tree differs from it (other
/// than in BENCHMARKS.md, the output of a previous run).
fn commit() -> String {
    let git = |args: &[&str]| output(Command::new("git").current_dir(workspace_root()).args(args)).unwrap_or_default();
    let head = git(&["rev-parse", "--short", "HEAD"]);
    let dirty =
        !git(&["status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md"]).trim().is_empty();
    format!("{}{}", head.trim(), if dirty { " with uncommitted changes" } else { "" })
}

/// The heading of the program-cost section, which `cargo xtask bench
/// --costs-only` regenerates alone.
pub const COSTS_HEADING: &str = "## Program costs";

/// The program-cost section: each tracer's `contention_end` and
/// `contention_begin` programs, average run time from bpf_stats.
pub fn costs_section(facts: &str, c: &Costs) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "{COSTS_HEADING}\n\nAverage run time of each tracer's two tracepoint programs on the pipe storm ({} threads, \
{} s per tracer and round, {} rounds, the tracers rotating within each round; median and min-max of the rounds) with the \
kernel's bpf_stats on. The statistics add their own clock reads to every figure: the *floor* row, programs that only \
count, shows that fixed part. Measured on {facts}; `cargo xtask bench --costs-only` regenerates this section alone.\n",
        c.threads, c.secs, c.rounds
    );
    let _ = writeln!(md, "| tracer | contention_end avg | contention_begin avg | runs (end) |\n|---|---|---|---|");
    let cell =
        |p: Option<&ProgStat>| p.map_or("-".to_string(), |p| format!("{:.0} ns ({:.0}-{:.0})", p.median, p.min, p.max));
    for (name, progs) in &c.tracers {
        let runs = progs.first().map_or(0, |p| p.runs);
        let _ = writeln!(md, "| {name} | {} | {} | {runs} |", cell(progs.first()), cell(progs.get(1)));
    }
    md.push('\n');
    md
}

/// `doc` with the section under `heading` (up to the next `## ` heading)
/// replaced by `section`; `None` when `doc` has no such section.
pub fn replace_section(doc: &str, heading: &str, section: &str) -> Option<String> {
    let start = if doc.starts_with(&format!("{heading}\n")) { 0 } else { doc.find(&format!("\n{heading}\n"))? + 1 };
    let body = start + heading.len();
    let end = doc[body..].find("\n## ").map_or(doc.len(), |i| body + i + 1);
    Some(format!("{}{section}{}", &doc[..start], &doc[end..]))
}

/// `doc` with `section` in place of its `heading` section, or inserted
/// before the first of the `before` headings (at the end when there is none).
pub fn put_section(doc: &str, heading: &str, section: &str, before: &[&str]) -> String {
    if let Some(md) = replace_section(doc, heading, section) {
        return md;
    }
    let at = before.iter().find_map(|h| doc.find(&format!("\n{h}\n")).map(|i| i + 1));
    match at {
        Some(i) => format!("{}{section}{}", &doc[..i], &doc[i..]),
        None => format!("{}\n{section}", doc.trim_end_matches('\n').to_string() + "\n"),
    }
}

pub fn pct(x: f64) -> String {
    format!("{x:.3}x")
}

/// The whole document.
pub fn render(
    facts: &str,
    o: &Opts,
    results: &[WorkloadRuns],
    extras: Option<&Extras>,
    guest: Option<&GuestRuns>,
    futex_costs: Option<&[FutexProgCost]>,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(md, "Regenerated by `cargo xtask bench` (as root). Machine: {facts}.\n");
    let perf = match perf_b() {
        Some(p) => {
            let version =
                output(Command::new(p).arg("--version")).map_or("version unknown".into(), |v| v.trim().to_string());
            format!(
                "*perf -b* is `perf lock contention -ab` ({version}, built with its BPF skeletons, \
`../shared/tools/perfb/perf-b`), running the workload itself"
            )
        }
        None => {
            "*perf -b* is **not available** on this machine (no `../shared/tools/perfb/perf-b`): its column is absent, \
never estimated"
                .to_string()
        }
    };
    let _ = writeln!(
        md,
        "Each workload ran {} rounds of {} s with {} threads per tracer; tracers rotate within each round. *floor* is a pair \
of BPF programs on the same two tracepoints that only count (its count of contention ends is the reference rate); {perf}; \
*lockprof* is `lockprof record` with the options shown. **Throughput** is the median ops/s of `lockprof stress <workload>` \
against untraced; **fidelity** is, round by round, the contentions/s a tracer reports divided by the contentions/s the floor \
counted in its own run of that round (median, and min-max over rounds): how much of the untraced system's contention the \
profile describes; *off by* is its distance from 1 in either direction (0.80 and 1.25 are both 25% off: a tracer that makes \
contention is as wrong as one that hides it). *Known owner* is the share of the wait on mutexes and rwsems that lockprof \
charged to a known owner (median over rounds); *no stack* the share of its contentions recorded without a whole kernel \
stack (`stack_skipped` + `stacks_cut`: the budget spent, the stack walked only to its caller); *no caller* the share whose \
caller lockprof could not name (median over rounds). Spread is (max - min) / median of ops/s. Lost counts ring-buffer, map and userspace losses.\n",
        o.rounds, o.duration, o.threads
    );
    for w in results.iter().filter(|w| !is_futex_workload(&w.name)) {
        let rs = rows(w);
        let _ = writeln!(md, "## {}\n", w.name);
        let _ = writeln!(
            md,
            "| tracer | ops/s | throughput | spread | contentions/s seen | fidelity (min-max) | fidelity off by | wait per op | known owner | no stack | no caller | lost |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (t, r) in w.tracers.iter().zip(&rs) {
            let fid = r.fidelity.map_or("-".to_string(), |(m, lo, hi)| format!("{m:.2} ({lo:.2}-{hi:.2})"));
            let off = r.fidelity.map_or("-".to_string(), |(m, _, _)| fidelity_distance(m));
            let share = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0));
            let (blamed, unstacked, uncalled) = (share(r.blamed), share(r.unstacked), share(r.uncalled));
            let rate = r.rate.map_or("-".to_string(), |x| format!("{x:.0}"));
            let wpo = r.wait_per_op.map_or("-".to_string(), |x| format!("{x:.0} ns"));
            let lost = if matches!(t, Tracer::Lockprof { .. }) { r.lost.to_string() } else { "-".into() };
            let _ = writeln!(
                md,
                "| {} | {:.0} | {} | {:.0}% | {rate} | {fid} | {off} | {wpo} | {blamed} | {unstacked} | {uncalled} | {lost} |",
                t.label(),
                r.ops,
                pct(r.throughput),
                r.spread_pct
            );
        }
        md.push('\n');
        counter_lines(&mut md, w);
        md.push('\n');
    }
    if results.iter().any(|w| is_futex_workload(&w.name)) {
        md.push_str(&futex_section::render(facts, o, results, futex_costs));
    }
    if let Some(e) = extras {
        extras_tables(&mut md, e);
        md.push_str(&costs_section(facts, &e.costs));
    }
    if let Some(g) = guest {
        md.push_str(&super::guest::render(g));
    }
    md.push_str(NOTES);
    md
}

/// One line per lockprof tracer of `w`: its last run's nonzero counters.
pub fn counter_lines(md: &mut String, w: &WorkloadRuns) {
    for (t, ss) in w.tracers.iter().zip(&w.samples) {
        if let (Tracer::Lockprof { label, .. }, Some(last)) = (t, ss.last())
            && let Some(d) = last.drops.as_object()
        {
            let nonzero: Vec<String> =
                d.iter().filter(|(_, v)| v.as_u64().is_some_and(|n| n > 0)).map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(
                md,
                "- {label}, last run's counters: {}",
                if nonzero.is_empty() { "all zero".into() } else { nonzero.join(" ") }
            );
        }
    }
}

fn extras_tables(md: &mut String, e: &Extras) {
    let eps = e.pipeline["events_per_s"].as_f64().unwrap_or(0.0);
    let att = e.attach["load_attach_ms_median"].as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(md, "## Userspace and start-up\n\n| measure | value |\n|---|---|");
    let _ = writeln!(md, "| decode + aggregate, one core | {:.2} M records/s |", eps / 1e6);
    for (label, v) in [("10k", &e.rss10k), ("100k", &e.rss100k)] {
        let _ = writeln!(
            md,
            "| RSS growth at {label} distinct stacks | {:.1} MiB ({} callers) |",
            v["rss_growth_kib"].as_f64().unwrap_or(0.0) / 1024.0,
            v["distinct_callers"]
        );
    }
    let _ = writeln!(md, "| load + attach (median of 5) | {att:.1} ms |\n");
    serve_tables(md, e);
    match &e.soak {
        Some(s) => md.push_str(&soak_section(s)),
        None => {
            let _ = writeln!(md, "{SOAK_HEADING}\n\nThe serve soak was not run (`--soak-secs 0`).\n");
        }
    }
}

fn mib(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0) / 1024.0
}

/// `lockprof serve`: memory at 100k keys, the soak's RSS curve, scrape costs.
fn serve_tables(md: &mut String, e: &Extras) {
    let _ = writeln!(md, "## lockprof serve\n");
    let _ = writeln!(
        md,
        "Memory with 100k distinct (lock, stack) keys (1000 locks, 16384 stacks of 12 frames, every key growing in each \
of two profiles: the worst case, where copy-on-write keeps two generations of every row). *aggregator* is the \
decode + aggregate path alone; *serve path* adds symbolized profiles, the Prometheus exporter and the pprof window \
(`lockprof-bench serve-memory`). Target: RSS below 128 MiB with lockprof's default caps.\n"
    );
    let _ = writeln!(
        md,
        "| 100k keys | kept rows | RSS growth | RSS | /metrics encode | target | met |\n|---|---|---|---|---|---|---|"
    );
    let agg = &e.rss100k;
    let _ = writeln!(
        md,
        "| aggregator (pipeline bench) | {} | {:.1} MiB | - | - | - | - |",
        agg["distinct_callers"],
        mib(&agg["rss_growth_kib"])
    );
    for (label, v, target) in [
        ("serve path, default --max-callers", &e.serve100k, true),
        ("serve path, every key kept", &e.serve100k_all, false),
    ] {
        let rss = mib(&v["rss_kib"]);
        let _ = writeln!(
            md,
            "| {label} | {} | {:.1} MiB | {rss:.1} MiB | {:.1} ms ({} KiB) | {} | {} |",
            v["kept_callers"],
            mib(&v["rss_growth_kib"]),
            v["metrics_encode_ms"].as_f64().unwrap_or(0.0),
            v["metrics_bytes"].as_u64().unwrap_or(0) / 1024,
            if target { "< 128 MiB" } else { "measured" },
            if !target {
                "-"
            } else if rss < 128.0 {
                "yes"
            } else {
                "**no**"
            },
        );
    }
    md.push('\n');
}

/// Heading of the soak's section (`cargo xtask bench --soak` replaces it).
pub const SOAK_HEADING: &str = "## Soak: lockprof serve";

/// The soak's section, from `soak::serve_soak`'s result.
pub fn soak_section(s: &Value) -> String {
    let mut md = String::new();
    let samples: Vec<(u64, f64)> = s["rss_kib"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| Some((p[0].as_u64()?, mib(&p[1])))).collect())
        .unwrap_or_default();
    let secs = s["seconds"].as_u64().unwrap_or(0);
    let storms: Vec<String> = s["storms"]
        .as_array()
        .map(|a| a.iter().filter_map(|w| Some(format!("`lockprof stress {}`", w.as_str()?))).collect())
        .unwrap_or_default();
    let map = s["stack_map_size"].as_u64().unwrap_or(0);
    let _ = writeln!(
        md,
        "{SOAK_HEADING}\n\n`lockprof serve --stack-map-size {map}` for {secs} s ({:.0} min) under {} ({} threads each) \
at once, scraped every 10 s like Prometheus (/metrics) and Parca (/debug/pprof/mutex?seconds=10). The stack map is \
small on purpose: the storms' distinct stacks (interrupted contexts make new ones all the time) outnumber it several \
times over. Regenerate with `cargo xtask bench --soak` (as root). RSS every 5 minutes:\n",
        secs as f64 / 60.0,
        storms.join(", "),
        s["threads"]
    );
    let last = samples.last().map_or(0, |l| l.0);
    let marks: Vec<&(u64, f64)> = samples.iter().filter(|(t, _)| t % 300 == 0 || *t == last).collect();
    let _ = writeln!(md, "| {} |", marks.iter().map(|(t, _)| format!("{t} s")).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(marks.len()));
    let _ = writeln!(md, "| {} |\n", marks.iter().map(|(_, r)| format!("{r:.1} MiB")).collect::<Vec<_>>().join(" | "));
    let warm = samples.iter().find(|(t, _)| *t >= 120).map_or(0.0, |x| x.1);
    let peak_after = samples.iter().filter(|(t, _)| *t >= 120).map(|x| x.1).fold(0.0, f64::max);
    let end = samples.last().map_or(0.0, |x| x.1);
    let flat = peak_after - warm <= 8.0;
    let met = |ok: bool| if ok { "yes" } else { "**no**" };
    let count = |n: &str| s["stacks"][n].as_u64();
    let shown = |v: Option<u64>| v.map_or("not reported".to_string(), |v| v.to_string());
    let (stored, read) = (count("stacks_stored"), count("stacks_read"));
    let (failed, evicted) = (count("stack_failed"), count("stacks_evicted"));
    let _ = writeln!(
        md,
        "| soak | value | target | met |\n|---|---|---|---|\n\
| stacks stored in the map (`stacks_stored`: new, or back after it forgot them) | {} ({:.1}x the map's {map}) | several times the capacity (>= 3x) | {} |\n\
| stacks read and symbolized by the daemon (`stacks_read`) | {} | - | - |\n\
| `stack_failed` | {} | 0 | {} |\n\
| `stacks_evicted` (forgotten before they were read) | {} | - | - |\n\
| RSS after warm-up (2 min) | {warm:.1} MiB | - | - |\n\
| RSS growth from 2 min to the end (peak) | {:.1} MiB (end: {end:.1} MiB) | flat: at most 8 MiB | {} |\n\
| /metrics scrape, median / max | {:.1} / {:.1} ms, {} KiB | - | - |\n\
| /debug/pprof/mutex?seconds=10, median | {:.1} ms, {} KiB | - | - |\n\
| daemon CPU | {:.1}% of one CPU | - | - |\n",
        shown(stored),
        stored.unwrap_or(0) as f64 / map.max(1) as f64,
        met(stored.unwrap_or(0) >= 3 * map),
        shown(read),
        shown(failed),
        met(failed == Some(0)),
        shown(evicted),
        peak_after - warm,
        met(flat),
        s["metrics_ms_median"].as_f64().unwrap_or(0.0),
        s["metrics_ms_max"].as_f64().unwrap_or(0.0),
        s["metrics_bytes"].as_u64().unwrap_or(0) / 1024,
        s["pprof_ms_median"].as_f64().unwrap_or(0.0),
        s["pprof_bytes"].as_u64().unwrap_or(0) / 1024,
        s["cpu_percent"].as_f64().unwrap_or(0.0),
    );
    md
}

/// The design notes (kept by hand: what was tried and measured).
const NOTES: &str = include_str!("notes.md");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_section_is_replaced_alone() {
        let doc = "# B\n\n## Serve\n\nx\n\n## Program costs\n\nold\n\n## Guest\n\ng\n";
        let new = replace_section(doc, COSTS_HEADING, "## Program costs\n\nnew\n\n");
        assert_eq!(new.as_deref(), Some("# B\n\n## Serve\n\nx\n\n## Program costs\n\nnew\n\n## Guest\n\ng\n"));
        let last = replace_section("a\n## Program costs\nold\n", COSTS_HEADING, "## Program costs\nnew\n");
        assert_eq!(last.as_deref(), Some("a\n## Program costs\nnew\n"));
        assert_eq!(replace_section("# B\n## Program costs table\n", COSTS_HEADING, "x"), None);
    }

    #[test]
    fn fidelity_is_off_by_the_same_either_way() {
        assert_eq!(fidelity_distance(1.25), "25% over");
        assert_eq!(fidelity_distance(0.8), "25% under");
        assert_eq!(fidelity_distance(1.0), "0% over");
        assert_eq!(fidelity_distance(0.0), "-");
    }

    #[test]
    fn the_cost_section_reads_the_measured_programs() {
        let stat = |median, runs| ProgStat { median, min: median - 1.0, max: median + 2.0, runs };
        let c = Costs {
            threads: 4,
            secs: 2.0,
            rounds: 3,
            tracers: vec![("floor".into(), vec![stat(56.4, 10), stat(55.0, 10)]), ("lockprof".into(), vec![])],
        };
        let md = costs_section("kernel k, lockprof abc1234", &c);
        assert!(md.starts_with("## Program costs\n\n"), "{md}");
        assert!(
            md.contains("(4 threads, 2 s per tracer and round, 3 rounds")
                && md.contains("Measured on kernel k, lockprof abc1234")
        );
        assert!(md.contains("| floor | 56 ns (55-58) | 55 ns (54-57) | 10 |\n| lockprof | - | - | 0 |\n"), "{md}");
    }

    #[test]
    fn soak_section_judges_stacks_and_rss() {
        let rss: Vec<Value> = (0..=18).map(|i| serde_json::json!([i * 100, 60_000 + i * 100])).collect();
        let soak = |stored: u64, failed: u64| {
            serde_json::json!({
                "seconds": 1800, "threads": 2, "storms": ["pipe", "fork", "mmap"], "stack_map_size": 2048,
                "stacks": {"stacks_stored": stored, "stacks_read": 700, "stack_failed": failed, "stacks_evicted": 0},
                "rss_kib": rss.clone(), "metrics_ms_median": 2.0, "metrics_ms_max": 9.0, "metrics_bytes": 4096,
                "pprof_ms_median": 7.0, "pprof_bytes": 2048, "cpu_percent": 3.0,
            })
        };
        let md = soak_section(&soak(9000, 0));
        assert!(md.starts_with(SOAK_HEADING), "{md}");
        assert!(md.contains("`lockprof stress pipe`, `lockprof stress fork`, `lockprof stress mmap`"), "{md}");
        assert!(md.contains("| 9000 (4.4x the map's 2048) | several times the capacity (>= 3x) | yes |"), "{md}");
        assert!(md.contains("| `stack_failed` | 0 | 0 | yes |"), "{md}");
        // 1.6 MiB over the soak after warm-up: flat.
        assert!(md.contains("flat: at most 8 MiB | yes |"), "{md}");
        assert!(md.contains("| 0 s | 300 s | 600 s |"), "{md}");
        let bad = soak_section(&soak(4000, 3));
        assert!(bad.contains("(>= 3x) | **no** |") && bad.contains("| `stack_failed` | 3 | 0 | **no** |"), "{bad}");
    }
}
