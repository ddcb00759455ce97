//! Renderers: pure functions from a [`Profile`] to text, JSON or CSV. Which
//! rows and in which order comes from [`crate::query`].

mod csv;
mod json;
mod text;
mod units;

pub(crate) use csv::field as csv_field;
pub use csv::render_csv;
pub use json::{render_json, to_json};
pub use text::render_text;
pub use units::{fmt_count, fmt_ns};

use crate::{model::Profile, query::Query};

/// Output format of a report.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Human-readable table, like `perf lock contention`.
    #[default]
    Text,
    /// The stable JSON schema documented in the README.
    Json,
    /// Comma-separated values with a header row.
    Csv,
    /// Gzipped pprof profile.proto (binary): `go tool pprof`, Pyroscope, Parca.
    Pprof,
}

impl Format {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Pprof => "pprof",
        }
    }
}

/// Rows of a report.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum By {
    /// One row per lock, top callers nested under it.
    #[default]
    Lock,
    /// One row per (lock, caller stack).
    Caller,
    /// Blame: one row per (lock, owner): the waits each holder caused.
    Owner,
    /// One row per waiting thread.
    Task,
    /// One row per cgroup of the waiting tasks (service, container), its
    /// locks nested.
    Cgroup,
    /// KVM directed yield: one row per `yield_to` caller stack.
    YieldCaller,
    /// KVM directed yield: one row per (yielding thread, target task).
    YieldPair,
}

impl By {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            By::Lock => "lock",
            By::Caller => "caller",
            By::Owner => "owner",
            By::Task => "task",
            By::Cgroup => "cgroup",
            By::YieldCaller => "yield_caller",
            By::YieldPair => "yield_pair",
        }
    }
}

/// Lock rows per address, or summed per name or per call site.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// One row per lock address (and type and mode).
    #[default]
    Address,
    /// One row per lock name (and type and mode), like lock_stat's classes.
    Name,
    /// One row per call-site class (and type and mode), and a user-space
    /// lock's process name: one code path in many processes is one row.
    Site,
}

impl GroupBy {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Address => "address",
            GroupBy::Name => "name",
            GroupBy::Site => "site",
        }
    }
}

/// How to render a profile.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Lock rows per address, per name or per call site.
    pub group_by: GroupBy,
    /// Output format.
    pub format: Format,
    /// Row grouping.
    pub by: By,
    /// Filters, sort key and top-N.
    pub query: Query,
    /// Callers shown under each lock in the text report.
    pub callers_per_lock: usize,
    /// CSV field separator.
    pub separator: char,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            group_by: GroupBy::Address,
            format: Format::Text,
            by: By::Lock,
            query: Query::default(),
            callers_per_lock: 5,
            separator: ',',
        }
    }
}

/// Renders a profile in the chosen format.
pub fn render(p: &Profile, opts: &ReportOptions) -> std::io::Result<Vec<u8>> {
    let grouped;
    let p = match opts.group_by {
        GroupBy::Address => p,
        GroupBy::Name => {
            grouped = crate::model::grouped_by_name(p);
            &grouped
        }
        GroupBy::Site => {
            grouped = crate::model::grouped_by_site(p);
            &grouped
        }
    };
    Ok(match opts.format {
        Format::Text => render_text(p, opts).into_bytes(),
        Format::Json => render_json(p, opts).into_bytes(),
        Format::Csv => render_csv(p, opts).into_bytes(),
        Format::Pprof => crate::export::encode_pprof(p)?,
    })
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A small deterministic profile for golden tests of every renderer.
    use profiler_common::{LockMode, LockType};

    use crate::model::{
        CallerProfile, Counters, DETAIL_SIGFIG, LOCK_SIGFIG, LockProfile, Meta, NameSource, Profile, SlowWait, Stats,
        TaskProfile,
    };

    fn stats(sigfig: u8, values: &[u64]) -> Stats {
        let mut s = Stats::new(sigfig);
        for v in values {
            s.record(*v);
        }
        s
    }

    pub(crate) fn profile() -> Profile {
        let tl_a = [2_000u64, 4_000, 90_000];
        let tl_b = [1_000u64, 3_000];
        let pipe = [500u64, 700, 900, 1_100];
        let mut all_tl: Vec<u64> = tl_a.to_vec();
        all_tl.extend(tl_b);
        let mut drops = Counters::default();
        drops.losses.stack_failed = 2;
        Profile {
            meta: Meta {
                backend: "tp_btf".into(),
                kernel: "6.18.0-test".into(),
                hostname: "testhost".into(),
                duration_s: 5.0,
                started_unix_s: 1_700_000_000,
                events: 9,
                drops,
                hold_unavailable: Some("tracepoints see waits only".into()),
                mode: "aggregate".into(),
                hold_backend: None,
                yield_backend: None,
                yield_unavailable: Some("yield_to cannot be probed on this kernel".into()),
                notes: vec![],
                filters: vec![],
                command: None,
                round: None,
            },
            locks: vec![
                LockProfile {
                    addr: 0xffffffff82a00000,
                    lock_type: LockType::Rwlock,
                    mode: LockMode::Write,
                    pid: None,
                    process: None,
                    name: Some("tasklist_lock".into()),
                    name_source: Some(NameSource::Inferred),
                    class: "rwlock @ copy_process".into(),
                    rt_base: None,
                    slab: None,
                    field: None,
                    addresses: None,
                    processes: None,
                    owners: Vec::new(),
                    wait: stats(2, &all_tl),
                    hold: None,
                    callers: vec![
                        CallerProfile {
                            caller: "copy_process+0x6f1".into(),
                            stack: vec![
                                "queued_write_lock_slowpath+0x70".into(),
                                "copy_process+0x6f1".into(),
                                "kernel_clone+0x9d".into(),
                            ]
                            .into(),
                            wait: stats(DETAIL_SIGFIG, &tl_a),
                            hold: None,
                            cgroups: Vec::new(),
                            user_caller: None,
                            user: None,
                        },
                        CallerProfile {
                            caller: "release_task+0x5a".into(),
                            stack: vec!["queued_write_lock_slowpath+0x70".into(), "release_task+0x5a".into()].into(),
                            wait: stats(DETAIL_SIGFIG, &tl_b),
                            hold: None,
                            cgroups: Vec::new(),
                            user_caller: None,
                            user: None,
                        },
                    ]
                    .into(),
                },
                LockProfile {
                    addr: 0xffff888004a1b2c0,
                    lock_type: LockType::Mutex,
                    mode: LockMode::Exclusive,
                    pid: None,
                    process: None,
                    name: None,
                    name_source: None,
                    class: "mutex @ anon_pipe_write".into(),
                    rt_base: None,
                    slab: None,
                    field: None,
                    addresses: None,
                    processes: None,
                    owners: Vec::new(),
                    wait: stats(LOCK_SIGFIG, &pipe),
                    hold: None,
                    callers: vec![CallerProfile {
                        caller: "anon_pipe_write+0x1c4".into(),
                        stack: vec![
                            "__mutex_lock.constprop.0+0x15a".into(),
                            "anon_pipe_write+0x1c4".into(),
                            "vfs_write+0x2a1".into(),
                        ]
                        .into(),
                        wait: stats(DETAIL_SIGFIG, &pipe),
                        hold: None,
                        cgroups: Vec::new(),
                        user_caller: None,
                        user: None,
                    }]
                    .into(),
                },
            ],
            tasks: vec![
                TaskProfile { tid: 4242, tgid: 4240, comm: "forker".into(), wait: stats(DETAIL_SIGFIG, &all_tl) },
                TaskProfile {
                    tid: 5151,
                    tgid: 5150,
                    comm: "writer, \"quoted\"".into(),
                    wait: stats(DETAIL_SIGFIG, &pipe),
                },
            ],
            slowest: vec![SlowWait {
                wait_ns: 90_000,
                end_monotonic_ns: 123_456_789,
                addr: 0xffffffff82a00000,
                lock_type: LockType::Rwlock,
                mode: LockMode::Write,
                lock: "tasklist_lock".into(),
                tid: 4242,
                tgid: 4240,
                comm: "forker".into(),
                caller: "copy_process+0x6f1".into(),
                stack: vec!["queued_write_lock_slowpath+0x70".into(), "copy_process+0x6f1".into()],
            }],
            yield_to: None,
            cgroups: Vec::new(),
            incident: None,
        }
    }

    /// The same profile with KVM directed yield seen through fentry.
    pub(crate) fn profile_with_yields() -> Profile {
        use crate::model::{RqContention, YieldCaller, YieldPair, YieldProfile, YieldStats};
        let yields = |outcomes: &[(i32, u64)]| {
            let mut s = YieldStats::default();
            for (ret, ns) in outcomes {
                s.record(*ret, *ns);
            }
            s
        };
        let hc = yields(&[(1, 40_000), (1, 60_000), (1, 50_000), (0, 2_000)]);
        let ple = yields(&[(-3, 1_000)]);
        let mut total = hc.clone();
        total.merge(&ple);
        let mut p = profile();
        p.meta.yield_backend = Some("fentry".into());
        p.meta.yield_unavailable = None;
        p.yield_to = Some(YieldProfile {
            total,
            callers: vec![
                YieldCaller {
                    caller: "kvm_vcpu_yield_to+0x5f [kvm]".into(),
                    path: "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall".into(),
                    stack: vec![
                        "yield_to+0x5".into(),
                        "kvm_vcpu_yield_to+0x5f [kvm]".into(),
                        "kvm_sched_yield+0x8a [kvm]".into(),
                        "kvm_emulate_hypercall+0x3c1 [kvm]".into(),
                    ],
                    stats: hc.clone(),
                },
                YieldCaller {
                    caller: "kvm_vcpu_yield_to+0x5f [kvm]".into(),
                    path: "kvm_vcpu_yield_to <- kvm_vcpu_on_spin".into(),
                    stack: vec![
                        "yield_to+0x5".into(),
                        "kvm_vcpu_yield_to+0x5f [kvm]".into(),
                        "kvm_vcpu_on_spin+0x1a0 [kvm]".into(),
                    ],
                    stats: ple.clone(),
                },
            ],
            pairs: vec![
                YieldPair {
                    tid: 301,
                    pid: 300,
                    comm: "vcpu0".into(),
                    target_tid: 302,
                    target_pid: 300,
                    target_comm: "vcpu1".into(),
                    stats: hc,
                },
                YieldPair {
                    tid: 302,
                    pid: 300,
                    comm: "vcpu1".into(),
                    target_tid: 301,
                    target_pid: 300,
                    target_comm: "vcpu0".into(),
                    stats: ple,
                },
            ],
            rq_contention: RqContention {
                waits: 2,
                wait_total_ns: 3_000,
                wait_max_ns: 2_000,
                locks: vec!["spinlock @ double_rq_lock".into()],
            },
        });
        p
    }

    /// The same profile with the pipe writers' user stacks joined above
    /// their kernel stack: one frame symbolized, one only by build id.
    pub(crate) fn profile_with_user_stacks() -> Profile {
        use std::sync::Arc;

        use crate::symbols::user::{UserFrame, UserStack};
        let writer = UserFrame {
            function: Some("lockprof_test_writer".into()),
            offset: 0x22,
            file: Some("lockprof_test.c".into()),
            line: Some(42),
            module: Arc::from("lockprof_test"),
            path: Arc::from("/tmp/lockprof_test"),
            build_id: Some(Arc::from("5a1f3c9e0b1d2e3f40516273849a0b1c2d3e4f50")),
            file_offset: 0x1452,
            addr: 0x5555_5555_5452,
        };
        let libc = UserFrame {
            function: None,
            offset: 0,
            file: None,
            line: None,
            module: Arc::from("libc.so.6"),
            path: Arc::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            build_id: Some(Arc::from("0011223344556677")),
            file_offset: 0x89305,
            addr: 0x7f00_0008_9305,
        };
        let user = UserStack { frames: vec![writer, libc], truncated: false };
        let mut p = profile();
        let mut c = p.locks[1].callers[0].clone();
        let mut stack = c.stack.to_vec();
        stack.push("[kernel]".into());
        stack.extend(user.frames.iter().map(|f| f.text()));
        c.stack = stack.into();
        c.user = Some(Arc::new(user));
        p.locks[1].callers = vec![c].into();
        p
    }

    /// The same profile with three PostgreSQL backends each sleeping on its
    /// own semaphore (one futex class, three processes, three addresses)
    /// besides the kernel locks.
    pub(crate) fn profile_with_backends() -> Profile {
        let mut p = profile();
        let backend = |i: u32| {
            let mut l = p.locks[1].clone();
            l.lock_type = LockType::Futex;
            l.addr = 0x7ffa_0000_1000 + u64::from(i) * 0x40;
            l.pid = Some(8510 + i);
            l.process = Some("postgres".into());
            l.class = "futex @ PGSemaphoreLock in [shm: /dev/zero (deleted)]".into();
            l
        };
        let backends: Vec<LockProfile> = (0..3).map(backend).collect();
        p.locks.extend(backends);
        p
    }

    /// The same profile with the waiting tasks' cgroups: the pipe writers in
    /// a Docker container and nginx, the forker in a systemd service.
    pub(crate) fn profile_with_cgroups() -> Profile {
        use crate::model::{CgroupLock, CgroupProfile, CgroupShare};
        const DOCKER: u64 = 4242;
        const NGINX: u64 = 77;
        const CRON: u64 = 12;
        let mut p = profile();
        let share = |id, count, wait_ns, max_ns| CgroupShare { id, count, wait_ns, max_ns };
        let locks = &mut p.locks;
        // tasklist_lock: both callers from cron.service.
        let tl: Vec<CallerProfile> = locks[0]
            .callers
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.cgroups = vec![share(CRON, c.wait.count(), c.wait.total_ns(), c.wait.max_ns())];
                c
            })
            .collect();
        locks[0].callers = tl.into();
        // The pipe mutex: 3 waits from the container, 1 from nginx.
        let mut pipe = locks[1].callers[0].clone();
        pipe.cgroups = vec![share(DOCKER, 3, 2_700, 1_100), share(NGINX, 1, 500, 500)];
        locks[1].callers = vec![pipe].into();
        let lock = |l: &LockProfile, count, wait_ns, max_ns| CgroupLock {
            lock: l.display_name().to_string(),
            addr: l.addr,
            lock_type: l.lock_type,
            mode: l.mode,
            pid: l.pid,
            count,
            wait_ns,
            max_ns,
            caller: l.callers[0].caller.clone(),
            user_caller: l.callers[0].user_caller.clone(),
        };
        let (tl, pipe) = (&p.locks[0], &p.locks[1]);
        p.cgroups = vec![
            CgroupProfile {
                id: CRON,
                name: "cron.service".into(),
                path: Some("/system.slice/cron.service".into()),
                wait: stats(DETAIL_SIGFIG, &[2_000, 4_000, 90_000, 1_000, 3_000]),
                locks: vec![lock(tl, 5, 100_000, 90_000)],
            },
            CgroupProfile {
                id: DOCKER,
                name: "docker:3f2a9c1b7d4e".into(),
                path: Some(
                    "/system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f.scope"
                        .into(),
                ),
                wait: stats(DETAIL_SIGFIG, &[700, 900, 1_100]),
                locks: vec![lock(pipe, 3, 2_700, 1_100)],
            },
            CgroupProfile {
                id: NGINX,
                name: "nginx.service".into(),
                path: Some("/system.slice/nginx.service".into()),
                wait: stats(DETAIL_SIGFIG, &[500]),
                locks: vec![lock(pipe, 1, 500, 500)],
            },
        ];
        p
    }
}
