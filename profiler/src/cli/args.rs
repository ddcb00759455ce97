//! clap definitions. Subcommand and option names are stable.

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand};
use profiler_common::LockType;

use super::values;
use crate::{
    diff::{DiffBy, DiffFormat, TestMetric, defaults as diff_defaults},
    ebpf::BackendChoice,
    export::Metric,
    incident::{options::defaults as incident_defaults, trigger::Trigger},
    query::SortKey,
    report::{By, Format, GroupBy},
    serve::defaults as serve_defaults,
    session::{Mode, UserUnwind, defaults},
    workload::Workload,
};

/// `lockprof --version`: the version, the commit and the target it was built for.
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("LOCKPROF_COMMIT"), ", ", env!("LOCKPROF_TARGET"), ")");

/// lockprof: a live lock-contention profiler for Linux (eBPF).
#[derive(Debug, Parser)]
#[command(name = "lockprof", version = VERSION, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// More diagnostics on stderr (-v: info, including eBPF-side messages; -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile the live kernel and print a report when done (needs root).
    Record(RecordArgs),
    /// Render a saved recording.
    Report(ReportArgs),
    /// Live dashboard (ratatui): locks, callers, tasks; sort, filter, expand (needs root).
    Top(TopArgs),
    /// Flamegraph (SVG via inferno) and folded stacks of a recording, a live run, or a before/after pair.
    Flamegraph(FlamegraphArgs),
    /// Compare recordings before and after a change, lock by lock: the changes, and with rounds a p-value and a
    /// verdict.
    Diff(DiffArgs),
    /// Show what this kernel supports, trying each backend for real.
    Doctor(DoctorArgs),
    /// Generate lock contention (pipe, fork, unlink, prio, mmap, pgrp, futex, futex-pi, condvar) for demos, tests
    /// and benchmarks.
    Stress(StressArgs),
    /// Daemon: serve Prometheus metrics and pprof profiles over HTTP until SIGINT/SIGTERM (needs root to start).
    Serve(ServeArgs),
}

/// What to trace and how: shared by every command that records (one
/// definition, turned into `SessionOptions` once).
#[derive(Debug, Args, Clone)]
pub struct SessionArgs {
    /// The global `-v` count, read here: `-v` also logs the programs'
    /// own messages (aya-log).
    #[arg(from_global)]
    pub verbose: u8,
    /// Only these processes (repeatable).
    #[arg(long, short, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Only tasks in this cgroup or below it (repeatable; applied in the
    /// kernel): a path under the cgroup2 mount or relative to it
    /// (system.slice/nginx.service), a unit name (nginx.service), or a short
    /// name as lockprof shows it (docker:3f2a9c1b7d4e).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// Do not record the waiting task's cgroup (one helper call per wait).
    #[arg(long)]
    pub no_cgroups: bool,
    /// Also record each waiter's user-space stack (under the same --stack-rate
    /// budget as kernel stacks), joined above its kernel stack and symbolized
    /// with blazesym. See --user-unwind for how it is taken.
    #[arg(long)]
    pub user_stacks: bool,
    /// How user stacks are taken: copy unwinds a copy of the stack from each
    /// binary's .eh_frame, so code built without frame pointers (distribution
    /// packages) shows its callers; fp walks frame pointers in the kernel.
    #[arg(long, value_name = "METHOD", default_value = "copy")]
    pub user_unwind: UserUnwind,
    /// Also look for stripped binaries' separate debug files here
    /// (repeatable), before /usr/lib/debug and /lib/debug: as
    /// `.build-id/xx/rest.debug` or under the name in `.gnu_debuglink`. With
    /// DEBUGINFOD_URLS set, missing ones are fetched with debuginfod-find.
    #[arg(long, value_name = "DIR")]
    pub debug_dir: Vec<std::path::PathBuf>,
    /// Also trace user-space locks: futex waits (pthread mutexes, Rust and C++
    /// mutexes, runtime locks; also condition variables and idle thread pools,
    /// which the kernel cannot tell apart: those show as type futex), keyed by
    /// process and futex address, with their user stacks (implies
    /// --user-stacks). PI futexes show as futex-pi with exact owners.
    #[arg(long)]
    pub futex: bool,
    /// Only these lock types, comma separated: mutex, rwsem, rwlock, spinlock, rt-mutex, rwlock-rt, percpu-rwsem,
    /// futex, futex-pi (these two imply --futex).
    #[arg(long = "type", short = 't', value_name = "TYPES", value_delimiter = ',', value_parser = values::lock_type)]
    pub types: Vec<LockType>,
    /// Wait backend.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Do not profile KVM directed yield (`yield_to`; probed with fentry or
    /// kprobe when the kernel allows, at no cost while no vCPU yields).
    #[arg(long)]
    pub no_yield_to: bool,
    /// Do not time holds (release probes on every unlock of the probed lock
    /// types; they need kprobes or fentry, and cost a probe per release).
    #[arg(long)]
    pub no_holds: bool,
    /// Do not read lock owners (blame: who held the lock while others
    /// waited: a mutex's or rwsem's owner field, an rwlock's readers from
    /// its lock word, a writer or spinlock holder while holds are timed;
    /// one or two reads per wait).
    #[arg(long)]
    pub no_owners: bool,
    /// When a waiter finds a mutex's or rwsem's owner asleep, also walk the
    /// owner's current kernel stack: what it is doing while it holds the
    /// lock (perf lock contention's -ov), shown beside its acquire stack in
    /// `--by owner` and the blame profile. Once per sleep, under
    /// --stack-rate. Needs the tp_btf or fentry backend on Linux 6.2+
    /// (bpf_task_from_pid).
    #[arg(long, conflicts_with = "no_owners")]
    pub owner_stacks: bool,
    /// How waits reach userspace.
    #[arg(long, value_enum, default_value_t = Mode::Aggregate)]
    pub mode: Mode,
    /// Aggregate mode: also stream waits at least this long (microseconds), for
    /// the slowest-waits list (0: none).
    #[arg(long, value_name = "US", default_value_t = defaults::OUTLIER_US)]
    pub outlier_us: u64,
    /// Kernel stack walks allowed per second per CPU (0: every contention).
    /// A walk costs ~1.5-2 us; beyond the budget a thread's previous stack for
    /// the same lock and flags is reused (counted as stack_reused), else the
    /// stack is walked to the caller (stacks_cut).
    #[arg(long, value_name = "N", default_value_t = defaults::STACK_RATE)]
    pub stack_rate: u32,
    /// Ring buffer size in MiB (power of two).
    #[arg(long, value_name = "MIB", default_value_t = defaults::RINGBUF_MB)]
    pub ringbuf_mb: u32,
    /// Capacity of the kernel stack map (distinct stacks not yet read by lockprof; LRU, so it never fills up).
    #[arg(long, value_name = "N", default_value_t = defaults::STACK_MAP_SIZE)]
    pub stack_map_size: u32,
    /// Cap on distinct (lock, stack) pairs kept in memory; more are folded into an overflow row.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CALLERS)]
    pub max_callers: usize,
}

/// Which rows and in which order (shared by record and report).
#[derive(Debug, Args, Clone)]
pub struct ViewArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Rows: one per lock (callers nested), per caller stack, per owner (blame: who held the lock, the waits it
    /// caused), per thread, or per yield_to path or pair.
    #[arg(long, value_enum, default_value_t = By::Lock)]
    pub by: By,
    /// Sort key (descending).
    #[arg(long, value_enum, default_value_t = SortKey::WaitTotal)]
    pub sort: SortKey,
    /// Show only the top N rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Callers listed under each lock in the text report.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub callers: usize,
    /// CSV field separator.
    #[arg(long, value_name = "C", default_value_t = ',')]
    pub separator: char,
    /// Only this lock: name (tasklist_lock, mmap_lock, rq_lock), slab cache
    /// (&task_struct), member (task_struct.pi_lock), class, or hex address
    /// (like perf's -L).
    #[arg(long = "lock", short = 'L', value_name = "NAME|ADDR")]
    pub lock: Option<String>,
    /// One row per lock address (default); per lock name: every
    /// `mmap_lock` summed into one row, like lock_stat's classes; or per call
    /// site: one row per class (`futex @ PGSemaphoreLock in [shm: ...]`,
    /// `rwsem @ vm_mmap_pgoff`) and, for user-space locks, process name, so
    /// one code path in many processes is one row.
    #[arg(long, value_enum, default_value_t = GroupBy::Address)]
    pub group_by: GroupBy,
}

/// Triggered incident capture: shared by record, top and serve.
#[derive(Debug, Args, Clone)]
pub struct IncidentArgs {
    /// Capture an incident when this fires: the profile of --before seconds before it and --after seconds after is
    /// written as a recording into --incident-dir (repeatable: any trigger fires).
    ///
    /// A trigger is comma-separated terms: one condition and optional filters. Conditions: `wait>=DUR` (one wait
    /// at least that long); `pNN(LOCK)>=DUR/WINDOW` (the NN-th percentile of a lock's waits over the last WINDOW,
    /// e.g. p50, p99, p99.9; `pNN>=` for any lock); `contentions(LOCK)>=COUNT/s` or `COUNT/WINDOW` (contentions of
    /// a lock per second, or per WINDOW: 500/5s is 100 per second averaged over 5 s). DUR is a number and a unit:
    /// ns, us, ms or s. WINDOW is whole seconds, 1s to 3600s. COUNT takes k, M or G (100k).
    ///
    /// Filters: `lock=NAME` (what --lock takes; the same as the LOCK in parentheses), `type=TYPE` (what --type
    /// takes), `cgroup=PATH` (the waiting task's cgroup: with wait>= and contentions only, percentiles are per
    /// lock), `process=COMM|PID` (the waiting task's process for wait>=, a user-space lock's process otherwise).
    ///
    /// Examples: `wait>=10ms`, `p99(tasklist_lock)>=1ms/5s`, `contentions(rq_lock)>=100k/s`,
    /// `lock=mmap_lock,wait>=5ms`, `type=futex,process=myapp,p99.9>=20ms/10s`.
    #[arg(long, value_name = "TEXT", value_parser = clap::value_parser!(Trigger))]
    pub trigger: Vec<Trigger>,
    /// Profile kept before a trigger fires: 30s, 500ms, 2m or bare seconds, up to 3600 s.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = values::before, requires = "trigger")]
    pub before: std::time::Duration,
    /// Profile recorded after a trigger fires, up to 600 s; the incident is written then.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = values::after, requires = "trigger")]
    pub after: std::time::Duration,
    /// Where incidents are written, one recording each.
    #[arg(long, value_name = "DIR", default_value = incident_defaults::DIR, requires = "trigger")]
    pub incident_dir: PathBuf,
    /// Incidents written per hour at most: a trigger firing beyond it writes nothing.
    #[arg(long, value_name = "N", default_value_t = incident_defaults::MAX_PER_HOUR,
          value_parser = clap::value_parser!(u32).range(1..), requires = "trigger")]
    pub max_incidents_per_hour: u32,
    /// MiB the incident directory may hold: beyond it, the oldest incidents are deleted.
    #[arg(long, value_name = "MIB", default_value_t = incident_defaults::MAX_DIR_MB,
          value_parser = clap::value_parser!(u64).range(1..), requires = "trigger")]
    pub incident_dir_max_mb: u64,
}

/// `lockprof record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Stop after this many seconds (default: run until Ctrl-C or SIGTERM).
    #[arg(long, short, value_name = "SECS", value_parser = values::seconds, conflicts_with = "command")]
    pub duration: Option<f64>,
    /// Save the recording here (read it back with `lockprof report --input`). With --rounds, round K goes to
    /// this name with .rK before its extension (before.lockprof: before.r1.lockprof, before.r2.lockprof, ...).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Record this many rounds, one recording each: the command run N times, or --duration N times, one after
    /// the other. The report is then the rounds' spread per lock; `lockprof diff` compares two sets of rounds.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// With a command: record only its processes and the ones they start (a cgroup made for it under the cgroup
    /// v2 mount; where none can be made, only the command's own process, which is said).
    #[arg(long, requires = "command", conflicts_with_all = ["pid", "cgroup"])]
    pub only_command: bool,
    /// With a command, under sudo: run it as root (by default it runs as the user who ran sudo, from SUDO_UID
    /// and SUDO_GID, with that user's groups, HOME, USER and LOGNAME).
    #[arg(long, requires = "command")]
    pub keep_root: bool,
    /// Profile for this command's lifetime (after `--`): attached before it starts, stopped when it exits;
    /// lockprof exits with its status (128 + N when signal N killed it; 127 when it cannot be found, 126 when it
    /// cannot be run). SIGINT, SIGTERM and SIGHUP are passed on to it (Ctrl-C on a terminal reaches it already).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    /// What to trace and how.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Report options.
    #[command(flatten)]
    pub view: ViewArgs,
    /// Triggered incident capture.
    #[command(flatten)]
    pub incident: IncidentArgs,
}

/// `lockprof report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Recording written by `lockprof record --output`.
    #[arg(long, short, value_name = "FILE")]
    pub input: PathBuf,
    /// Write the report here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Report options.
    #[command(flatten)]
    pub view: ViewArgs,
}

/// `lockprof top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Refresh interval, seconds.
    #[arg(long, short, value_name = "SECS", default_value_t = 1.0, value_parser = values::interval)]
    pub interval: f64,
    /// What to trace and how.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Write logs here (the screen belongs to the dashboard; without this, logs are discarded).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Triggered incident capture.
    #[command(flatten)]
    pub incident: IncidentArgs,
}

/// `lockprof flamegraph`.
#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Recording to draw (default: record the live kernel for --duration).
    #[arg(long, short, value_name = "FILE", conflicts_with_all = ["duration", "diff"])]
    pub input: Option<PathBuf>,
    /// Record the live kernel for this many seconds (needs root).
    #[arg(long, short, value_name = "SECS", conflicts_with = "diff", value_parser = values::seconds)]
    pub duration: Option<f64>,
    /// Differential flamegraph of two recordings (widths from AFTER; red grew, blue shrank). A name that is no
    /// file but the base of a set of rounds (record --rounds N --output NAME) takes all its rounds.
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"])]
    pub diff: Option<Vec<PathBuf>>,
    /// Differential flamegraph: the recordings before the change (rounds, merged: widths are the mean per round).
    #[arg(long, num_args = 1.., value_name = "REC", conflicts_with_all = ["input", "duration", "diff"],
          requires = "after")]
    pub before: Vec<PathBuf>,
    /// Differential flamegraph: the recordings after the change (rounds, merged: widths are the mean per round).
    #[arg(long, num_args = 1.., value_name = "REC", requires = "before")]
    pub after: Vec<PathBuf>,
    /// Frame width: wait time, hold time, contention count, wait caused by each owner (blame: the owner's
    /// acquire stack), or yield_to latency (KVM directed yield by caller).
    #[arg(long, value_enum, default_value_t = Metric::Wait)]
    pub metric: Metric,
    /// SVG output (default: lockprof.svg when --folded is not given either).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Folded-stack output (FlameGraph format).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Only this lock: name (tasklist_lock), class, or hex address.
    #[arg(long = "lock", short = 'L', value_name = "NAME|ADDR")]
    pub lock: Option<String>,
    /// Put the lock at the root instead of the leaf.
    #[arg(long)]
    pub lock_root: bool,
    /// Put the waiting task's cgroup (service, container) at the root (wait and count metrics).
    #[arg(long)]
    pub cgroup_root: bool,
    /// Keep +0xoff on frames (default: merge call sites by function).
    #[arg(long)]
    pub offsets: bool,
    /// What to trace and how with --duration (--type also selects the locks drawn from a recording).
    #[command(flatten)]
    pub session: SessionArgs,
}

/// `lockprof diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The short form of --before OLD --after NEW.
    #[arg(value_names = ["OLD", "NEW"], num_args = 0..=2, conflicts_with_all = ["before", "after"])]
    pub pair: Vec<PathBuf>,
    /// Recordings before the change, one per round. A name that is no file but the base of a set of rounds
    /// (record --rounds N --output NAME) takes all its rounds.
    #[arg(long, num_args = 1.., value_name = "REC", requires = "after")]
    pub before: Vec<PathBuf>,
    /// Recordings after the change, one per round (as --before).
    #[arg(long, num_args = 1.., value_name = "REC", requires = "before")]
    pub after: Vec<PathBuf>,
    /// Rows: one per lock (name, type, mode), or per (lock, calling function).
    #[arg(long, value_enum, default_value_t = DiffBy::Lock)]
    pub by: DiffBy,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// What the p-value and the verdict judge, per round: contentions per second, wait time per second, or the
    /// mean wait.
    #[arg(long, value_enum, default_value_t = TestMetric::Contended)]
    pub metric: TestMetric,
    /// Significance threshold, on Holm-corrected p-values.
    #[arg(long, value_name = "P", default_value_t = diff_defaults::ALPHA, value_parser = values::alpha)]
    pub alpha: f64,
    /// Rows are tested only with at least this many contentions per round, on average, on one side (fewer
    /// say "too few"): rare locks add tests, and so chances of a false verdict, without the data to judge.
    #[arg(long, value_name = "N", default_value_t = diff_defaults::MIN_PER_ROUND, value_parser = values::count)]
    pub min_per_round: f64,
    /// Show only the first N rows (significant ones first, then the largest changes).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Only this lock: name (tasklist_lock, mmap_lock), class, member (task_struct.pi_lock), or slab cache.
    #[arg(long = "lock", short = 'L', value_name = "NAME")]
    pub lock: Option<String>,
    /// CSV field separator.
    #[arg(long, value_name = "C", default_value_t = ',')]
    pub separator: char,
    /// Write the comparison here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `lockprof serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to serve HTTP. Only loopback by default: any other address lets
    /// whoever reaches it read lock names and kernel stacks (logged at start).
    #[arg(long, value_name = "ADDR:PORT", default_value = serve_defaults::LISTEN, value_parser = values::listen)]
    pub listen: std::net::SocketAddr,
    /// Seconds of history kept for `/debug/pprof/...?seconds=N` (N up to this).
    #[arg(long, value_name = "SECS", default_value_t = serve_defaults::WINDOW_S,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub window: u64,
    /// Locks with Prometheus series of their own (the most wait recently); the others are summed as lock="[other]".
    #[arg(long, value_name = "N", default_value_t = serve_defaults::MAX_SERIES, value_parser = values::max_series)]
    pub max_series: usize,
    /// cgroups with series of their own in lockprof_cgroup_lock_* (the most wait recently); the others are summed as
    /// cgroup="[other]".
    #[arg(long, value_name = "N", default_value_t = serve_defaults::MAX_CGROUPS, value_parser = values::max_series)]
    pub max_cgroups: usize,
    /// What to trace and how.
    #[command(flatten)]
    pub session: SessionArgs,
    /// Triggered incident capture.
    #[command(flatten)]
    pub incident: IncidentArgs,
}

/// `lockprof doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// The global `-v` count, read here: `-v` prints the verifier's logs.
    #[arg(from_global)]
    pub verbose: u8,
}

/// `lockprof stress`.
#[derive(Debug, Args)]
pub struct StressArgs {
    /// Scenario.
    #[arg(value_enum)]
    pub workload: Workload,
    /// Worker threads.
    #[arg(long, default_value_t = 4, value_parser = values::threads)]
    pub threads: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0, value_parser = values::seconds)]
    pub duration: f64,
    /// Only `stall` reads it: milliseconds the holder keeps the pipe mutex once the waiter sleeps on it.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub stall_ms: u64,
    /// Only `stall` reads it: seconds after the start when the stall begins (the run idles before and
    /// after it, until --duration ends).
    #[arg(long, default_value_t = 3.0, value_parser = values::seconds)]
    pub stall_at: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lockprof").chain(args.iter().copied()))
    }

    #[test]
    fn record_options() {
        let cli = parse(&[
            "record",
            "--duration",
            "5",
            "--output",
            "x.lockprof",
            "--format",
            "json",
            "--pid",
            "1",
            "--pid",
            "2",
            "--type",
            "mutex,rwlock",
            "--backend",
            "tp_btf",
            "--top",
            "3",
        ])
        .expect("parse");
        let Command::Record(r) = cli.command else { panic!("not record") };
        assert_eq!(r.duration, Some(5.0));
        assert_eq!(r.output.as_deref(), Some(std::path::Path::new("x.lockprof")));
        assert_eq!(r.view.format, Format::Json);
        assert_eq!(r.session.pid, [1, 2]);
        assert_eq!(r.session.types, [LockType::Mutex, LockType::Rwlock]);
        assert_eq!(r.session.backend, BackendChoice::TpBtf);
        assert_eq!(r.view.top, Some(3));
    }

    #[test]
    fn report_options() {
        let cli = parse(&["report", "--input", "a", "--by", "caller", "--sort", "wait_p99", "--format", "csv"])
            .expect("parse");
        let Command::Report(r) = cli.command else { panic!("not report") };
        assert_eq!(r.view.by, By::Caller);
        assert_eq!(r.view.sort, SortKey::WaitP99);
        assert_eq!(r.view.format, Format::Csv);
        for s in ["contended", "wait_total", "wait_max", "wait_avg", "wait_p99"] {
            parse(&["report", "--input", "a", "--sort", s]).expect(s);
        }
        for b in ["auto", "tp_btf", "tracepoint", "fentry", "kprobe"] {
            parse(&["record", "--backend", b]).expect(b);
        }
    }

    #[test]
    fn top_takes_the_session_options_of_record() {
        let cli = parse(&["top", "--no-yield-to", "--mode", "stream", "--stack-rate", "0", "--type", "mutex"])
            .expect("parse");
        let Command::Top(t) = cli.command else { panic!("not top") };
        assert!(t.session.no_yield_to);
        assert_eq!(t.session.mode, Mode::Stream);
        assert_eq!(t.session.stack_rate, 0);
        assert_eq!(t.interval, 1.0);
    }

    #[test]
    fn flamegraph_options() {
        let cli = parse(&[
            "flamegraph",
            "--input",
            "r",
            "--metric",
            "count",
            "--folded",
            "f",
            "-L",
            "tasklist_lock",
            "--lock-root",
        ])
        .expect("parse");
        let Command::Flamegraph(f) = cli.command else { panic!("not flamegraph") };
        assert_eq!(f.metric, Metric::Count);
        assert_eq!(f.lock.as_deref(), Some("tasklist_lock"));
        assert!(f.lock_root);
        let cli = parse(&["flamegraph", "--diff", "a", "b", "-o", "d.svg"]).expect("parse diff");
        let Command::Flamegraph(f) = cli.command else { panic!("not flamegraph") };
        assert_eq!(f.diff.map(|d| d.len()), Some(2));
        assert!(parse(&["flamegraph", "--diff", "a"]).is_err(), "--diff needs two files");
        assert!(parse(&["flamegraph", "--input", "a", "--diff", "a", "b"]).is_err(), "input and diff conflict");
        let cli = parse(&["report", "--input", "a", "--format", "pprof", "--output", "p.pb.gz"]).expect("pprof");
        let Command::Report(r) = cli.command else { panic!("not report") };
        assert_eq!(r.view.format, Format::Pprof);
    }

    #[test]
    fn stress_user_space_lock_workloads() {
        for (name, w) in [("futex", Workload::Futex), ("futex-pi", Workload::FutexPi), ("condvar", Workload::Condvar)] {
            let cli = parse(&["stress", name, "--threads", "2", "--duration", "0.2"]).expect("parse");
            let Command::Stress(s) = cli.command else { panic!("not stress") };
            assert_eq!((s.workload, s.threads, s.duration), (w, 2, 0.2), "{name}");
        }
        assert!(parse(&["stress", "futex_pi"]).is_err(), "the name is futex-pi");
    }

    #[test]
    fn record_top_and_serve_take_triggers() {
        for cmd in ["record", "top", "serve"] {
            let cli =
                parse(&[cmd, "--trigger", "p99(tasklist_lock)>=1ms/5s", "--trigger", "wait>=10ms", "--after", "2m"])
                    .expect(cmd);
            let incident = match cli.command {
                Command::Record(a) => a.incident,
                Command::Top(a) => a.incident,
                Command::Serve(a) => a.incident,
                _ => panic!("{cmd}: not a recording command"),
            };
            let texts: Vec<_> = incident.trigger.iter().map(|t| t.to_string()).collect();
            assert_eq!(texts, ["p99(tasklist_lock)>=1ms/5s", "wait>=10ms"], "{cmd}");
            assert_eq!(incident.after, std::time::Duration::from_secs(120), "{cmd}");
            assert_eq!(incident.before, std::time::Duration::from_secs(incident_defaults::BEFORE_S), "{cmd}");
        }
        let cli = parse(&["record"]).expect("no trigger");
        let Command::Record(r) = cli.command else { panic!("not record") };
        assert!(r.incident.trigger.is_empty());
    }

    #[test]
    fn bad_triggers_and_orphan_incident_options_are_rejected() {
        let e = parse(&["record", "--trigger", "wait>=10"]).expect_err("no unit");
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(e.to_string().contains("needs a unit: ns, us, ms or s"), "{e}");
        let e = parse(&["serve", "--trigger", "wait>10ms"]).expect_err("operator");
        assert!(e.to_string().contains("expected >="), "{e}");
        for (flag, value) in [
            ("--before", "10s"),
            ("--after", "1s"),
            ("--incident-dir", "/tmp/x"),
            ("--max-incidents-per-hour", "2"),
            ("--incident-dir-max-mb", "10"),
        ] {
            let e = parse(&["top", flag, value]).expect_err(flag);
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{flag}");
            assert!(e.to_string().contains("--trigger"), "{flag}: {e}");
            parse(&["top", "--trigger", "wait>=1ms", flag, value]).expect(flag);
        }
        for bad in [
            &["--before", "2h"][..],
            &["--after", "601"],
            &["--max-incidents-per-hour", "0"],
            &["--incident-dir-max-mb", "0"],
        ] {
            assert!(
                parse(&["record", "--trigger", "wait>=1ms"].iter().chain(bad).copied().collect::<Vec<_>>()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn stress_stall_options() {
        let cli = parse(&["stress", "stall", "--stall-ms", "150", "--stall-at", "0.2"]).expect("parse");
        let Command::Stress(s) = cli.command else { panic!("not stress") };
        assert_eq!((s.workload, s.stall_ms, s.stall_at), (Workload::Stall, 150, 0.2));
        let cli = parse(&["stress", "stall"]).expect("parse defaults");
        let Command::Stress(s) = cli.command else { panic!("not stress") };
        assert_eq!((s.stall_ms, s.stall_at), (200, 3.0));
        assert!(parse(&["stress", "stall", "--stall-ms", "0"]).is_err(), "a stall takes time");
        assert!(parse(&["stress", "stall", "--stall-at", "-1"]).is_err());
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(parse(&["report"]).is_err(), "--input is required");
        assert!(parse(&["record", "--backend", "magic"]).is_err());
        assert!(parse(&["record", "--pid", "abc"]).is_err());
        assert!(parse(&["record", "--type", "semaphore"]).is_err());
        assert!(parse(&["record", "--duration", "-1"]).is_err());
        assert!(parse(&["report", "--input", "a", "--sort", "fastest"]).is_err());
        assert!(parse(&["stress", "pipe", "--threads", "0"]).is_err(), "zero threads make no contention");
        assert!(parse(&["stress", "pipe", "--duration", "0"]).is_err());
        assert!(parse(&["top", "--interval", "0.01"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&["selftest"]).is_err(), "no test subcommand ships in the product");
        assert!(parse(&["bench"]).is_err(), "no benchmark subcommand ships in the product");
    }
}
