//! `cargo xtask bench`: lockprof beside `perf lock contention -ab` on the
//! seed workloads, in one rotation: untraced, the counting-only floor,
//! perf -b (through ../shared/tools/perfb/perf-b when it is there) and
//! lockprof's modes, several rounds, tracers in rotating order. For every
//! tracer: throughput against untraced, and fidelity, the contentions/s it
//! reports against the floor's own count in the same round. Plus per-program
//! costs, userspace throughput, memory and attach time, and hold timing in
//! a guest kernel. Rewrites BENCHMARKS.md.

mod bpftrace;
mod extras;
mod futex_rows;
mod futex_section;
mod guest;
mod hot_lines;
mod incident_section;
mod markdown;
mod runs;
mod soak;
mod stats;

use anyhow::{Context as _, Result};

pub use runs::Tracer;
use runs::{Sample, perf_b};

use crate::util::workspace_root;

/// Options of a bench run.
pub struct Opts {
    /// Rounds per workload (each runs every tracer once).
    pub rounds: usize,
    /// Seconds per run.
    pub duration: f64,
    /// Workload threads.
    pub threads: usize,
    /// Workloads.
    pub workloads: Vec<String>,
    /// Extra lockprof designs, `label=arg arg ...`.
    pub variants: Vec<String>,
    /// Skip the per-program costs, userspace and attach measurements.
    pub rotation_only: bool,
    /// Seconds of the `lockprof serve` soak (0: none).
    pub soak_secs: u64,
    /// Measure hold timing in the default guest kernel too.
    pub guest: bool,
    /// Only the program costs, replacing their section of BENCHMARKS.md.
    pub costs_only: bool,
    /// Only the serve soak, replacing its section of BENCHMARKS.md.
    pub soak_only: bool,
    /// Only the user-space lock cost: the futex workloads against the
    /// bpftrace floor, the other workloads with and without `--futex`, and
    /// the futex programs' costs, replacing their section of BENCHMARKS.md.
    pub futex_only: bool,
    /// Only the incident triggers' cost: the pipe storm with triggers armed
    /// that do not fire, and the incident ring's memory; replaces (or adds)
    /// its section of BENCHMARKS.md.
    pub incidents_only: bool,
    /// Only the programs' hottest source lines, under `lockprof record`
    /// with these arguments (printed).
    pub hot_lines: Option<Vec<String>>,
}

/// The user-space lock workloads: rotated against the bpftrace futex
/// floor and reported in the futex section, not in a table of their own.
const FUTEX_WORKLOADS: [&str; 3] = ["futex", "futex-pi", "condvar"];

fn is_futex_workload(w: &str) -> bool {
    FUTEX_WORKLOADS.contains(&w)
}

/// Seconds of futex storm per tracer for the futex programs' costs (at most).
const FUTEX_COST_SECS: f64 = 2.0;

/// Rounds and seconds per run of the guest benchmark.
const GUEST_ROUNDS: usize = 3;
const GUEST_SECS: f64 = 3.0;

/// Seconds of pipe storm per tracer for the program costs (at most).
const COST_SECS: f64 = 2.0;

fn lp(label: &str, args: &[&str]) -> Tracer {
    Tracer::Lockprof { label: label.to_string(), args: args.iter().map(|a| a.to_string()).collect() }
}

/// `lockprof --futex`, in every rotation: on a kernel-lock workload it
/// shows what tracing futexes costs when no futex is contended.
pub const LOCKPROF_FUTEX: &str = "lockprof --futex";

/// `lockprof --user-stacks`: what `--futex` implies, so its peer on the
/// kernel-lock workloads.
pub const USER_STACKS: &str = "lockprof --user-stacks";

/// User stacks by the kernel's frame-pointer walk, the cheaper peer of the
/// default copy (which unwinds code without frame pointers).
pub const USER_STACKS_FP: &str = "lockprof --user-stacks --user-unwind fp";

/// `--futex` with its user stacks by frame pointers.
pub const LOCKPROF_FUTEX_FP: &str = "lockprof --futex --user-unwind fp";

/// The tracers of the rotation of `workload`: a user-space lock workload
/// runs untraced, under the bpftrace futex floor, and under lockprof
/// without and with `--futex`; the others under every kernel-lock tracer.
/// With `futex_only`, the others run just untraced, the floor, the bpftrace
/// futex counter, lockprof, lockprof --user-stacks (which `--futex`
/// implies; by copy and by frame pointers) and lockprof --futex.
fn tracers(o: &Opts, workload: &str) -> Vec<Tracer> {
    if is_futex_workload(workload) {
        let mut t = vec![Tracer::Untraced];
        if bpftrace::available() {
            t.push(Tracer::BpftraceFutex);
        }
        t.extend([
            lp("lockprof", &[]),
            lp(LOCKPROF_FUTEX, &["--futex"]),
            lp(LOCKPROF_FUTEX_FP, &["--futex", "--user-unwind", "fp"]),
        ]);
        return t;
    }
    if o.futex_only {
        // The bpftrace futex counter too: what being on the futex syscall
        // tracepoints costs a workload that makes no futex calls.
        let mut t = vec![Tracer::Untraced, Tracer::Floor];
        if bpftrace::available() {
            t.push(Tracer::BpftraceFutex);
        }
        t.extend([
            lp("lockprof", &[]),
            lp(USER_STACKS, &["--user-stacks"]),
            lp(USER_STACKS_FP, &["--user-stacks", "--user-unwind", "fp"]),
            lp(LOCKPROF_FUTEX, &["--futex"]),
        ]);
        return t;
    }
    let mut t = vec![Tracer::Untraced, Tracer::Floor];
    if perf_b().is_some() {
        t.push(Tracer::PerfB);
    }
    t.push(lp("lockprof", &[]));
    t.push(lp(LOCKPROF_FUTEX, &["--futex"]));
    t.push(lp("lockprof --mode stream", &["--mode", "stream"]));
    t.push(lp("lockprof --stack-rate 0", &["--stack-rate", "0"]));
    // The application's view: user stacks walked with the kernel stacks, and
    // the price of the cgroup id every wait records by default.
    t.push(lp(USER_STACKS, &["--user-stacks"]));
    t.push(lp(USER_STACKS_FP, &["--user-stacks", "--user-unwind", "fp"]));
    t.push(lp("lockprof --no-cgroups", &["--no-cgroups"]));
    for v in &o.variants {
        let (label, args) = v.split_once('=').unwrap_or((v.as_str(), ""));
        t.push(Tracer::Lockprof {
            label: format!("lockprof {label}"),
            args: args.split_whitespace().map(str::to_string).collect(),
        });
    }
    t
}

/// Every run of one workload: `samples[tracer][round]`.
pub struct WorkloadRuns {
    /// Workload name.
    pub name: String,
    /// Tracers, in column order.
    pub tracers: Vec<Tracer>,
    /// Samples per tracer and round.
    pub samples: Vec<Vec<Sample>>,
}

fn bench_workload(name: &str, tracers: &[Tracer], o: &Opts) -> Result<WorkloadRuns> {
    let n = tracers.len();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
    for round in 0..o.rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let s = runs::run(&tracers[i], name, o.threads, o.duration)
                .with_context(|| format!("{name} / {}", tracers[i].label()))?;
            eprintln!(
                "bench: {name:<7} round {round} {:<28} {:>12.0} ops/s {}{}",
                tracers[i].label(),
                s.ops_per_s,
                s.rate().map(|r| format!("{r:>10.0} contentions/s")).unwrap_or_default(),
                s.per_s(s.futex_seen)
                    .zip(s.per_s(s.own_contended))
                    .map(|(f, w)| format!(" futex {f:.0}/s of the workload's {w:.0}/s"))
                    .unwrap_or_default()
            );
            samples[i].push(s);
        }
    }
    Ok(WorkloadRuns { name: name.to_string(), tracers: tracers.to_vec(), samples })
}

/// Runs everything and writes BENCHMARKS.md (with `costs_only`: the
/// program costs, replacing their section alone).
pub fn run(o: &Opts) -> Result<()> {
    if o.costs_only {
        return costs_only(o);
    }
    if o.soak_only {
        return soak_only(o);
    }
    if o.futex_only {
        return futex_only(o);
    }
    if o.incidents_only {
        return incidents_only(o);
    }
    if let Some(args) = &o.hot_lines {
        return hot_lines::hot_lines(o.threads, args);
    }
    let facts = markdown::machine_facts();
    eprintln!("bench: {facts}");
    let mut results = Vec::new();
    for w in &o.workloads {
        results.push(bench_workload(w, &tracers(o, w), o)?);
    }
    let futex_costs = if o.rotation_only || !o.workloads.iter().any(|w| is_futex_workload(w)) {
        None
    } else {
        Some(extras::futex_program_costs(o.threads, o.duration.min(FUTEX_COST_SECS))?)
    };
    let extras = if o.rotation_only {
        None
    } else {
        Some(markdown::Extras {
            costs: extras::program_cost_table(o.threads, o.duration.min(COST_SECS), o.rounds)?,
            pipeline: extras::bench_json(&["pipeline", "--events", "5000000", "--stacks", "1000"])?,
            rss10k: extras::bench_json(&["pipeline", "--events", "1000000", "--stacks", "10000"])?,
            rss100k: extras::bench_json(&["pipeline", "--events", "2000000", "--stacks", "100000"])?,
            attach: extras::bench_json(&["attach", "--rounds", "5"])?,
            serve100k: extras::bench_json(&["serve-memory", "--keys", "100000"])?,
            serve100k_all: extras::bench_json(&["serve-memory", "--keys", "100000", "--max-callers", "100010"])?,
            soak: if o.soak_secs > 0 { Some(soak::serve_soak(o.soak_secs, 2)?) } else { None },
        })
    };
    // The guest part failing (QEMU, the image) costs its section, not the run.
    let (guest, guest_failed) = match o.guest.then(|| guest::run(GUEST_ROUNDS, GUEST_SECS)) {
        Some(Ok(g)) => (Some(g), None),
        Some(Err(e)) => {
            eprintln!("bench: guest measurement failed: {e:#}");
            (None, Some(format!("{e:#}")))
        }
        None => (None, None),
    };
    let mut md = markdown::render(&facts, o, &results, extras.as_ref(), guest.as_ref(), futex_costs.as_deref());
    if let Some(why) = guest_failed {
        md.push_str(&format!("\n## Guest kernel\n\nThe guest measurement failed in this run: {why}\n"));
    }
    print!("{md}");
    let path =
        if o.rotation_only { workspace_root().join("target/bench.md") } else { workspace_root().join("BENCHMARKS.md") };
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

/// Runs the serve soak and replaces its section of BENCHMARKS.md.
fn soak_only(o: &Opts) -> Result<()> {
    let path = workspace_root().join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    eprintln!("bench: serve soak for {} s", o.soak_secs);
    let section = markdown::soak_section(&soak::serve_soak(o.soak_secs, 2)?);
    rewrite_section(&path, &doc, markdown::SOAK_HEADING, &section, "the soak")
}

/// The user-space lock cost alone: the futex workloads (`futex` when none
/// is given) and the other workloads given, in short rotations, and the
/// futex programs' costs; replaces (or adds) their section of BENCHMARKS.md.
fn futex_only(o: &Opts) -> Result<()> {
    let path = workspace_root().join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let facts = markdown::machine_facts();
    eprintln!("bench: {facts}");
    let mut workloads = o.workloads.clone();
    if !workloads.iter().any(|w| is_futex_workload(w)) {
        workloads.insert(0, "futex".to_string());
    }
    let mut results = Vec::new();
    for w in &workloads {
        results.push(bench_workload(w, &tracers(o, w), o)?);
    }
    let costs = extras::futex_program_costs(o.threads, o.duration.min(FUTEX_COST_SECS))?;
    let section = futex_section::render(&facts, o, &results, Some(&costs));
    print!("{section}");
    let md = futex_section::put(&doc, &section);
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: rewrote the futex section in {}", path.display());
    Ok(())
}

/// Armed triggers on the pipe storm (lockprof with and without them,
/// untraced) and the incident ring's memory at 100k keys; replaces (or
/// adds) their section of BENCHMARKS.md.
fn incidents_only(o: &Opts) -> Result<()> {
    let path = workspace_root().join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let facts = markdown::machine_facts();
    eprintln!("bench: {facts}");
    let dir = std::env::temp_dir().join("lockprof-bench-incidents");
    let mut args: Vec<String> = Vec::new();
    for t in incident_section::TRIGGERS {
        args.extend(["--trigger".to_string(), t.to_string()]);
    }
    args.extend(["--incident-dir".to_string(), dir.display().to_string()]);
    let armed = Tracer::Lockprof { label: "lockprof, triggers armed".into(), args };
    let tracers = [Tracer::Untraced, lp("lockprof", &[]), armed];
    let w = bench_workload("pipe", &tracers, o)?;
    let mut rings = Vec::new();
    for churn in ["1", "10", "100"] {
        rings.push(extras::bench_json(&["incident-ring", "--keys", "100000", "--churn", churn])?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let section = incident_section::render(&facts, &w, &rings);
    print!("{section}");
    std::fs::write(&path, incident_section::put(&doc, &section))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: rewrote the incident section in {}", path.display());
    Ok(())
}

/// Prints `section` and puts it in place of `heading`'s section of `doc`,
/// written back to `path` (the rest of the file untouched).
fn rewrite_section(path: &std::path::Path, doc: &str, heading: &str, section: &str, what: &str) -> Result<()> {
    print!("{section}");
    let md = markdown::replace_section(doc, heading, section)
        .with_context(|| format!("{} has no '{heading}' section: run the whole `cargo xtask bench`", path.display()))?;
    std::fs::write(path, md).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: rewrote {what} in {}", path.display());
    Ok(())
}

/// Measures the program costs (a pipe storm per tracer, seconds in all) and
/// replaces their section of BENCHMARKS.md; the rest of the file is untouched.
fn costs_only(o: &Opts) -> Result<()> {
    let path = workspace_root().join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let facts = markdown::machine_facts();
    eprintln!("bench: {facts}");
    let costs = extras::program_cost_table(o.threads, o.duration.min(COST_SECS), o.rounds)?;
    let section = markdown::costs_section(&facts, &costs);
    rewrite_section(&path, &doc, markdown::COSTS_HEADING, &section, "the program costs")
}
