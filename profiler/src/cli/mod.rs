//! The command line: clap at the edge ([`args`]), and the conversions from
//! parsed arguments into the library's options, done once here.

mod args;
pub mod docs;
pub mod values;

pub use args::{
    Cli, Command, DiffArgs, DoctorArgs, FlamegraphArgs, IncidentArgs, RecordArgs, ReportArgs, ServeArgs, SessionArgs,
    StressArgs, TopArgs, VERSION, ViewArgs,
};

use profiler_common::{OWNER_STACKS, OWNERS_ON, USER_STACKS_OFF};

use crate::{
    cgroups::CgroupFs,
    ebpf::{BackendChoice, LoadOptions},
    incident::options::IncidentOptions,
    model::type_name,
    pipeline::Limits,
    query::Query,
    report::ReportOptions,
    serve::{ServeOptions, defaults as serve_defaults},
    session::{CgroupOptions, Mode, SessionOptions, UserUnwind, defaults},
};

/// Bad input from the user: exit status 2, nothing attached.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl SessionArgs {
    /// Options that only mean something when recording live, given with
    /// values other than their defaults.
    pub fn live_only_changes(&self) -> Vec<&'static str> {
        [
            ("--pid", !self.pid.is_empty()),
            ("--cgroup", !self.cgroup.is_empty()),
            ("--no-cgroups", self.no_cgroups),
            ("--user-stacks", self.user_stacks),
            ("--user-unwind", self.user_unwind != UserUnwind::Copy),
            ("--debug-dir", !self.debug_dir.is_empty()),
            ("--futex", self.futex),
            ("--backend", self.backend != BackendChoice::Auto),
            ("--no-yield-to", self.no_yield_to),
            ("--no-holds", self.no_holds),
            ("--no-owners", self.no_owners),
            ("--owner-stacks", self.owner_stacks),
            ("--mode", self.mode != Mode::Aggregate),
            ("--outlier-us", self.outlier_us != defaults::OUTLIER_US),
            ("--stack-rate", self.stack_rate != defaults::STACK_RATE),
            ("--ringbuf-mb", self.ringbuf_mb != defaults::RINGBUF_MB),
            ("--stack-map-size", self.stack_map_size != defaults::STACK_MAP_SIZE),
            ("--max-callers", self.max_callers != defaults::MAX_CALLERS),
        ]
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
    }
}

impl TryFrom<&SessionArgs> for SessionOptions {
    type Error = UsageError;

    /// Validates the arguments (bad ones fail before anything is attached).
    fn try_from(a: &SessionArgs) -> Result<SessionOptions, UsageError> {
        for pid in &a.pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(UsageError(format!("--pid {pid}: no such process")));
            }
        }
        if let Some(dir) = a.debug_dir.iter().find(|d| !d.is_dir()) {
            return Err(UsageError(format!("--debug-dir {}: no such directory", dir.display())));
        }
        if !a.ringbuf_mb.is_power_of_two() || a.ringbuf_mb > 1024 {
            return Err(UsageError(format!("--ringbuf-mb must be a power of two up to 1024, not {}", a.ringbuf_mb)));
        }
        if a.stack_map_size == 0 || a.max_callers == 0 {
            return Err(UsageError("--stack-map-size and --max-callers must be positive".into()));
        }
        let cgroups = cgroup_options(a)?;
        let mut filters = Vec::new();
        if let Some(c) = cgroups.as_ref().filter(|c| !c.roots.is_empty()) {
            filters.push(format!("cgroup={}", c.roots.join(",")));
        }
        if !a.pid.is_empty() {
            filters.push(format!("pid={}", a.pid.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
        }
        if !a.types.is_empty() {
            filters.push(format!("type={}", a.types.iter().map(|t| type_name(*t)).collect::<Vec<_>>().join(",")));
        }
        let mut o = SessionOptions {
            load: LoadOptions {
                backend: a.backend,
                tgids: a.pid.clone(),
                ringbuf_bytes: a.ringbuf_mb << 20,
                stack_entries: a.stack_map_size,
                yield_to: !a.no_yield_to,
                holds: !a.no_holds,
                ..LoadOptions::default()
            },
            limits: Limits { max_callers: a.max_callers, ..Limits::default() },
            filters,
            ebpf_logs: a.verbose > 0,
            ..SessionOptions::default()
        };
        if let Some(c) = &cgroups {
            o.load.cgroup_ids = c.roots.iter().flat_map(|r| c.fs.subtree_ids(r)).collect();
        } else if !a.no_cgroups {
            o.notes.push(NO_CGROUP2.into());
        }
        o.load.config.cgroups = u32::from(cgroups.is_some() && !a.no_cgroups);
        o.load.config.filter_cgroup = u32::from(!a.cgroup.is_empty());
        // User-space locks: asked for, or selected by type. Their stack is a
        // user stack (a futex wait's kernel stack is the syscall entry).
        o.load.futex = a.futex || a.types.iter().any(|t| t.is_user());
        o.load.config.user_stacks =
            if a.user_stacks || o.load.futex { a.user_unwind.config_value() } else { USER_STACKS_OFF };
        o.debug_files.dirs.clone_from(&a.debug_dir);
        o.cgroups = cgroups;
        let c = &mut o.load.config;
        c.type_mask = if a.types.is_empty() { u32::MAX } else { a.types.iter().fold(0, |m, t| m | t.bit()) };
        c.filter_tgid = u32::from(!a.pid.is_empty());
        c.outlier_ns = a.outlier_us.saturating_mul(1000);
        c.owners = if a.no_owners {
            0
        } else if a.owner_stacks {
            OWNERS_ON | OWNER_STACKS
        } else {
            OWNERS_ON
        };
        o.set_mode(a.mode);
        o.set_stack_rate(a.stack_rate);
        Ok(o)
    }
}

/// The note of a session on a host without a cgroup v2 hierarchy.
const NO_CGROUP2: &str = "no cgroup v2 hierarchy is mounted: waits are not attributed to cgroups";

/// The cgroup2 mount and the `--cgroup` roots, resolved; None when no
/// cgroup v2 hierarchy is mounted and nothing asks for one.
fn cgroup_options(a: &SessionArgs) -> Result<Option<CgroupOptions>, UsageError> {
    if a.no_cgroups && a.cgroup.is_empty() {
        return Ok(None);
    }
    let fs = match CgroupFs::discover() {
        Ok(fs) => fs,
        Err(e) if a.cgroup.is_empty() => {
            log::debug!("{e}");
            return Ok(None);
        }
        Err(e) => return Err(UsageError(format!("--cgroup: {e}"))),
    };
    let roots = a
        .cgroup
        .iter()
        .map(|spec| fs.resolve(spec).map_err(|e| UsageError(format!("--cgroup {spec}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(CgroupOptions { fs, roots }))
}

impl From<&ServeArgs> for ServeOptions {
    fn from(a: &ServeArgs) -> ServeOptions {
        ServeOptions {
            listen: a.listen,
            window: std::time::Duration::from_secs(a.window),
            max_series: a.max_series,
            max_cgroups: a.max_cgroups,
            max_window_entries: serve_defaults::MAX_WINDOW_ENTRIES,
        }
    }
}

impl ServeArgs {
    /// The session options of `record`, plus ageing: a daemon drops lock,
    /// (lock, stack) and task rows idle for the window (at least a minute),
    /// so its tables follow the live locks, stacks and threads for weeks.
    /// It exports nothing per thread, so it keeps fewer thread rows.
    pub fn session_options(&self) -> Result<SessionOptions, UsageError> {
        let mut o = SessionOptions::try_from(&self.session)?;
        o.limits.max_tasks = serve_defaults::MAX_TASKS;
        let idle = std::time::Duration::from_secs(self.window.max(60));
        o.limits.max_idle = Some((idle.as_secs_f64() / o.publish_interval.as_secs_f64()).ceil() as u64);
        Ok(o.with_incidents(IncidentOptions::from(&self.incident)))
    }
}

impl From<&IncidentArgs> for IncidentOptions {
    fn from(a: &IncidentArgs) -> IncidentOptions {
        IncidentOptions {
            triggers: a.trigger.clone(),
            before: a.before,
            after: a.after,
            dir: a.incident_dir.clone(),
            max_per_hour: a.max_incidents_per_hour,
            max_dir_bytes: a.incident_dir_max_mb.saturating_mul(1 << 20),
        }
    }
}

impl From<&ViewArgs> for ReportOptions {
    fn from(v: &ViewArgs) -> ReportOptions {
        ReportOptions {
            group_by: v.group_by,
            format: v.format,
            by: v.by,
            query: Query { sort: v.sort, top: v.top, lock: v.lock.clone(), ..Query::default() },
            callers_per_lock: v.callers,
            separator: v.separator,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use profiler_common::LockType;

    use super::*;

    fn session(args: &[&str]) -> Result<SessionOptions, UsageError> {
        let cli = Cli::try_parse_from(["lockprof", "record"].iter().chain(args)).expect("parse");
        let Command::Record(r) = cli.command else { panic!("not record") };
        SessionOptions::try_from(&r.session)
    }

    #[test]
    fn defaults_are_the_recommended_options() {
        let o = session(&[]).expect("defaults");
        let r = SessionOptions::recommended();
        assert_eq!(o.load.config, r.load.config);
        assert_eq!(o.limits, r.limits);
        assert_eq!(o.mode(), Mode::Aggregate);
        assert!(o.load.yield_to && o.filters.is_empty());
        assert!(!o.ebpf_logs, "the programs' messages are logged only with -v");
    }

    #[test]
    fn verbose_turns_on_the_programs_messages_for_every_recording_command() {
        for args in [["record", "-v"], ["-v", "top"], ["flamegraph", "-v"], ["serve", "-v"]] {
            let cli = Cli::try_parse_from(["lockprof"].iter().chain(&args)).expect("parse");
            let session = match &cli.command {
                Command::Record(a) => &a.session,
                Command::Top(a) => &a.session,
                Command::Flamegraph(a) => &a.session,
                Command::Serve(a) => &a.session,
                _ => panic!("not a recording command"),
            };
            assert!(SessionOptions::try_from(session).expect("options").ebpf_logs, "{args:?}");
        }
    }

    #[test]
    fn arguments_reach_the_options() {
        let o = session(&[
            "--type",
            "mutex,rwlock",
            "--mode",
            "stream",
            "--stack-rate",
            "25",
            "--no-yield-to",
            "--no-holds",
        ])
        .expect("options");
        assert_eq!(o.load.config.type_mask, LockType::Mutex.bit() | LockType::Rwlock.bit());
        assert_eq!(o.mode(), Mode::Stream);
        assert_eq!(o.load.config.stacks_per_window, 3, "25/s is 3 per 100 ms window, rounded up");
        assert!(!o.load.yield_to, "--no-yield-to turns yield_to off");
        assert!(!o.load.holds, "--no-holds turns hold timing off");
        assert_eq!(o.filters, ["type=mutex,rwlock"]);
        assert!(session(&["--ringbuf-mb", "3"]).is_err());
        assert!(session(&["--pid", "999999999"]).is_err_and(|e| e.0.contains("no such process")));
    }

    #[test]
    fn top_and_flamegraph_build_the_same_options_as_record() {
        let args = ["--mode", "stream", "--no-yield-to", "--stack-rate", "0"];
        let rec = session(&args).expect("record");
        let cli = Cli::try_parse_from(["lockprof", "top"].iter().chain(&args)).expect("top");
        let Command::Top(t) = cli.command else { panic!("not top") };
        let top = SessionOptions::try_from(&t.session).expect("top options");
        assert_eq!(top.load.config, rec.load.config);
        assert_eq!(top.load.yield_to, rec.load.yield_to);
        let cli = Cli::try_parse_from(["lockprof", "flamegraph", "--duration", "1"].iter().chain(&args)).expect("fg");
        let Command::Flamegraph(f) = cli.command else { panic!("not flamegraph") };
        assert_eq!(SessionOptions::try_from(&f.session).expect("fg options").load.config, rec.load.config);
        assert_eq!(f.session.live_only_changes(), ["--no-yield-to", "--mode", "--stack-rate"]);
        let cli = Cli::try_parse_from(["lockprof", "serve"].iter().chain(&args)).expect("serve");
        let Command::Serve(s) = cli.command else { panic!("not serve") };
        let so = s.session_options().expect("serve options");
        assert_eq!(so.load.config, rec.load.config);
        assert_eq!(so.limits.max_idle, Some(60), "a daemon ages idle rows");
        assert_eq!(so.limits.max_tasks, 1_000);
        assert_eq!(rec.limits.max_idle, None, "record keeps every row");
    }

    #[test]
    fn incident_arguments_reach_the_options_and_default_to_theirs() {
        let cli = Cli::try_parse_from(["lockprof", "record"]).expect("record");
        let Command::Record(r) = cli.command else { panic!("not record") };
        let (o, d) = (IncidentOptions::from(&r.incident), IncidentOptions::default());
        assert!(!o.enabled());
        assert_eq!((o.before, o.after, &o.dir), (d.before, d.after, &d.dir));
        assert_eq!((o.max_per_hour, o.max_dir_bytes), (d.max_per_hour, d.max_dir_bytes));
        let cli = Cli::try_parse_from([
            "lockprof",
            "serve",
            "--trigger",
            "contentions(rq_lock)>=100k/s",
            "--before",
            "500ms",
            "--incident-dir",
            "/tmp/incidents",
            "--max-incidents-per-hour",
            "2",
            "--incident-dir-max-mb",
            "3",
        ])
        .expect("serve");
        let Command::Serve(s) = cli.command else { panic!("not serve") };
        let o = IncidentOptions::from(&s.incident);
        assert!(o.enabled());
        assert_eq!(o.triggers[0].slug(), "contentions-rq_lock-ge-100k-per-s");
        assert_eq!(o.before, std::time::Duration::from_millis(500));
        assert_eq!(o.after, d.after);
        assert_eq!(o.dir, std::path::Path::new("/tmp/incidents"));
        assert_eq!((o.max_per_hour, o.max_dir_bytes), (2, 3 << 20));
    }

    #[test]
    fn serve_defaults_to_loopback_and_takes_its_limits() {
        let cli = Cli::try_parse_from(["lockprof", "serve"]).expect("serve");
        let Command::Serve(s) = cli.command else { panic!("not serve") };
        let o = ServeOptions::from(&s);
        assert_eq!(o.listen.to_string(), "127.0.0.1:9464");
        assert!(o.listen.ip().is_loopback());
        assert_eq!((o.window.as_secs(), o.max_series), (60, 100));
        let cli = Cli::try_parse_from([
            "lockprof",
            "serve",
            "--listen",
            "0.0.0.0:9000",
            "--window",
            "120",
            "--max-series",
            "5",
        ])
        .expect("serve");
        let Command::Serve(s) = cli.command else { panic!("not serve") };
        assert_eq!(s.session_options().expect("opts").limits.max_idle, Some(120));
        assert_eq!(ServeOptions::from(&s).max_series, 5);
        for bad in [&["--window", "0"][..], &["--max-series", "0"], &["--listen", "9464"]] {
            assert!(Cli::try_parse_from(["lockprof", "serve"].iter().chain(bad)).is_err(), "{bad:?}");
        }
    }
}
