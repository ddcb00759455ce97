//! A profiling session, in phases like perf's `bpf_lock_contention.c`:
//! [`Session::start`] prepares (load, attach) and starts the pipeline tasks
//! (reader, housekeeping, aggregator); live views subscribe to
//! [`Session::profiles`]; [`Session::finish`] stops (detach), reads (drain
//! the ring buffer and maps, waits still open) and resolves the profile.

mod cgroups;
mod housekeeping;
mod options;
mod refusals;
mod user_locks;

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use profiler_common::{ContentionEvent, EVENT_CONTENTION, StackId, USER_STACKS_UNWIND, counter};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

pub use options::{CgroupOptions, Mode, SessionOptions, UserUnwind, defaults};

use self::housekeeping::Housekeeping;

use crate::{
    cgroups::{CgroupFs, CgroupTree},
    ebpf::{KernelStacks, LoadError, Probes, ProgramFd, RecursionMisses, features::kernel_release, recursion_misses},
    incident::{Engine, IncidentLog, Store, WindowBuilder},
    model::{Counters, Meta, Profile},
    pipeline::{
        Aggregator, Control, Msg, ProfileBuilder, Snapshot,
        aggregator::{self, KernelStatus},
        reader::{self, ReaderStats},
    },
    symbols::{
        Kallsyms, Resolver,
        user::{
            BlazeSymbolizer, UserResolver,
            unwind::{self, UnwindStats, Unwound, UnwoundOr},
        },
    },
};

/// The user-stack unwinder's parts, from prepare to start.
struct Unwinding {
    sink: crate::ebpf::KernelUnwindSink,
    unwound: Unwound,
    stats: Arc<UnwindStats>,
}

/// New user stacks announced but not yet pinned, at most (more wait for the
/// next snapshot, and may be read after their process exited).
const PIN_QUEUE: usize = 8192;

/// Errors of a running session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Loading or attaching failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The ring buffer could not be registered with the async reactor.
    #[error("ring buffer reader: {0}")]
    Reader(#[from] std::io::Error),
    /// The user-stack unwinder thread could not start (`--user-unwind copy`).
    #[error("cannot start the user-stack unwinder thread: {0}")]
    Unwinder(#[source] std::io::Error),
    /// The user-stack symbolizer could not start (`--user-stacks`).
    #[error(transparent)]
    UserSymbols(#[from] crate::symbols::user::UserSymbolsError),
    /// The incident directory cannot be used (`--incident-dir`).
    #[error(transparent)]
    Incidents(#[from] crate::incident::StoreError),
    /// A pipeline task panicked or was cancelled.
    #[error("pipeline task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

type Builder = ProfileBuilder<KernelStacks>;

/// What the profile's meta is made of, fixed at start and read live.
#[derive(Clone)]
struct MetaSource {
    base: Meta,
    started: Instant,
    reader: Arc<ReaderStats>,
}

impl MetaSource {
    fn meta(&self, k: &KernelStatus, open_at_stop: u64, userspace_lost: u64) -> Meta {
        let mut drops = Counters::default();
        for (name, n) in k.counters.named() {
            drops.set(name, n);
        }
        drops.bookkeeping.open_at_stop = open_at_stop;
        drops.losses.malformed_records = self.reader.malformed.load(Ordering::Relaxed);
        drops.losses.userspace_lost = userspace_lost;
        drops.losses.recursion_misses = k.recursion_misses.total;
        drops.losses.yield_skipped = k.recursion_misses.yield_to;
        drops.losses.map_ops_refused = k.map_ops_refused;
        Meta { duration_s: self.started.elapsed().as_secs_f64(), drops, ..self.base.clone() }
    }
}

/// What [`Session::detach`] read as the programs were detached.
#[derive(Clone, Copy)]
struct Detached {
    /// Seconds the session ran.
    duration_s: f64,
    /// The programs' recursion misses (their fdinfo, read just before).
    misses: RecursionMisses,
    /// `CLOCK_MONOTONIC` then: waits still open are measured up to it.
    at_ns: u64,
}

/// A running session.
pub struct Session {
    probes: Probes,
    meta: MetaSource,
    program_fds: Vec<ProgramFd>,
    stop: CancellationToken,
    reader: JoinHandle<std::io::Result<aya::maps::RingBuf<aya::maps::MapData>>>,
    housekeeper: JoinHandle<Housekeeping>,
    aggregator: aggregator::Handle,
    builder: JoinHandle<Builder>,
    profiles: watch::Sender<Arc<Profile>>,
    logger: Option<JoinHandle<()>>,
    incidents: Option<watch::Receiver<Arc<IncidentLog>>>,
    /// Set by [`Session::detach`].
    detached: Option<Detached>,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A live thread's name, from `/proc/<tid>/comm` (None once it exited).
pub(super) fn task_comm(tid: u32) -> Option<String> {
    Some(read_trimmed(&format!("/proc/{tid}/comm"))).filter(|c| !c.is_empty())
}

/// [`task_comm`] as the kernel records it (NUL-padded, at most 15 bytes).
fn comm_bytes(tid: u32) -> [u8; 16] {
    let mut comm = [0u8; 16];
    let name = task_comm(tid).unwrap_or_default();
    let n = name.len().min(15);
    comm[..n].copy_from_slice(&name.as_bytes()[..n]);
    comm
}

async fn flush_logs(logger: aya_log::EbpfLogger<&'static dyn log::Log>, stop: CancellationToken) {
    // SAFETY: the logger owns its ring buffer fd for its whole lifetime.
    let Ok(mut afd) =
        (unsafe { tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE) })
    else {
        return;
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            guard = afd.readable_mut() => match guard {
                Ok(mut g) => {
                    g.get_inner_mut().flush();
                    g.clear_ready();
                }
                Err(_) => break,
            },
        }
    }
    afd.get_mut().flush();
}

/// Owns the profile builder while the session runs. Every snapshot: with
/// live views subscribed, one profile, built off their draw path; without,
/// the new stacks are read and symbolized, so that the kernel's stack map
/// may forget them (it is an LRU map: a stack read late may be gone).
/// The session's builder, building incident windows with the session's meta.
struct Windows<'a> {
    builder: &'a mut Builder,
    meta: Meta,
}

impl WindowBuilder for Windows<'_> {
    fn window(&mut self, snap: &Snapshot) -> Profile {
        self.builder.build_window(snap, self.meta.clone())
    }
}

async fn feed_builder(
    mut builder: Builder,
    mut snaps: watch::Receiver<Arc<Snapshot>>,
    publish: watch::Sender<Arc<Profile>>,
    meta: MetaSource,
    stop: CancellationToken,
    mut pins: Option<mpsc::Receiver<StackId>>,
    mut incidents: Option<Engine>,
) -> Builder {
    /// The next announced user stack (never, without user stacks).
    async fn next_pin(pins: &mut Option<mpsc::Receiver<StackId>>) -> Option<StackId> {
        match pins {
            Some(p) => p.recv().await,
            None => std::future::pending().await,
        }
    }
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            // A snapshot before the next announced user stack: pinning
            // each wait's user stack can keep the queue full for seconds
            // (a busy futex workload, every wait a new stack copy), and a
            // snapshot is where user-space locks and their processes are
            // named while they live. Snapshots come once per interval.
            changed = snaps.changed() => {
                if changed.is_err() {
                    break;
                }
                let snap = snaps.borrow_and_update().clone();
                if publish.receiver_count() == 0 {
                    builder.prefetch(&snap);
                } else {
                    let p = builder.build(&snap, meta.meta(&snap.kernel, 0, 0));
                    publish.send_replace(Arc::new(p));
                }
                if let Some(engine) = incidents.as_mut() {
                    let meta = meta.meta(&snap.kernel, 0, 0);
                    engine.observe(snap, &mut Windows { builder: &mut builder, meta });
                }
            }
            Some(id) = next_pin(&mut pins) => builder.pin_user_stack(id),
        }
    }
    if let Some(engine) = incidents.as_mut() {
        let snap = snaps.borrow().clone();
        engine.finish(&mut Windows { builder: &mut builder, meta: meta.meta(&snap.kernel, 0, 0) });
    }
    builder
}

impl Session {
    /// Loads, attaches and starts the pipeline. Must run inside a tokio runtime.
    pub fn start(opts: SessionOptions) -> Result<Session, SessionError> {
        Session::prepare(opts)?.start()
    }

    /// Loads and attaches, reads kallsyms and opens the maps, without
    /// starting anything (no runtime needed).
    pub fn prepare(opts: SessionOptions) -> Result<Prepared, SessionError> {
        // The incident directory first: a bad one is said before anything attaches.
        let store = match &opts.incidents {
            Some(i) => Some(Store::open(&i.dir, i.max_per_hour, i.max_dir_bytes)?),
            None => None,
        };
        let mut probes = Probes::load(&opts.load)?;
        let kallsyms = Kallsyms::load().unwrap_or_else(|e| {
            log::warn!("{e}; stacks will show raw addresses");
            Kallsyms::default()
        });
        let ring = probes.take_events()?;
        let mut builder = ProfileBuilder::new(Resolver::new(Arc::new(kallsyms), probes.take_stacks()?))
            .with_identities(Box::new(probes.take_identities()?))
            .with_task_names(task_comm);
        let mut unwind = None;
        if opts.load.config.user_stacks == USER_STACKS_UNWIND {
            let sink = probes.take_unwind_sink()?;
            let (unwound, stats) = (Unwound::default(), Arc::new(UnwindStats::default()));
            let source =
                UnwoundOr { unwound: unwound.clone(), kernel: probes.take_user_stacks()?, stats: stats.clone() };
            builder =
                builder.with_user_stacks(Box::new(UserResolver::new(source, BlazeSymbolizer::new(&opts.debug_files)?)));
            unwind = Some(Unwinding { sink, unwound, stats });
        } else if opts.load.config.user_stacks != 0 {
            let resolver = UserResolver::new(probes.take_user_stacks()?, BlazeSymbolizer::new(&opts.debug_files)?);
            builder = builder.with_user_stacks(Box::new(resolver));
        }
        if opts.load.futex {
            builder = builder.with_user_lock_names(Box::<user_locks::ProcNames>::default());
        }
        let fs = opts.cgroups.as_ref().map(|c| c.fs.clone());
        let fs = if opts.load.config.cgroups != 0 { fs.or_else(|| CgroupFs::discover().ok()) } else { None };
        if let Some(fs) = fs {
            builder = builder.with_cgroup_names(Box::new(cgroups::TreeNames(CgroupTree::new(fs))));
        }
        let cgroup_filter = match &opts.cgroups {
            Some(c) if opts.load.config.filter_cgroup != 0 => Some(cgroups::FilterWatch::new(
                probes.take_cgroup_filter()?,
                c.fs.clone(),
                c.roots.clone(),
                &opts.load.cgroup_ids,
            )),
            _ => None,
        };
        let hk = Housekeeping {
            cgroup_filter,
            aggs: if opts.mode() == Mode::Aggregate { Some(probes.take_aggregates()?) } else { None },
            pending: probes.take_pending()?,
            futex: if opts.load.futex && probes.futex().is_ok() { Some(probes.take_futex()?) } else { None },
            programs_counters: probes.take_counters()?,
            program_fds: probes.program_fds(),
            refused: Default::default(),
        };
        Ok(Prepared { opts, probes, ring, builder, hk, store, unwind })
    }
}

/// A session loaded and attached, its maps opened and kallsyms read, whose
/// pipeline has not started: everything that needs privileges is done, no
/// task or thread exists yet (`lockprof serve` drops its capabilities here).
pub struct Prepared {
    opts: SessionOptions,
    probes: Probes,
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    builder: Builder,
    hk: Housekeeping,
    /// The incident directory, opened (with triggers).
    store: Option<Store>,
    /// `--user-unwind copy`: the unwinder's maps and tables.
    unwind: Option<Unwinding>,
}

impl Prepared {
    /// Reads one map through the bpf(2) syscall, as the pipeline will every
    /// interval: whether map access still works with the current privileges.
    pub fn probe_map_access(&self) -> std::io::Result<()> {
        self.hk.programs_counters.probe()
    }

    /// Starts the pipeline tasks. Must run inside a tokio runtime.
    pub fn start(self) -> Result<Session, SessionError> {
        let Prepared { opts, mut probes, ring, builder, hk, store, unwind } = self;
        let mode = opts.mode();
        let stop = CancellationToken::new();
        let logger = if opts.ebpf_logs {
            match aya_log::EbpfLogger::init(probes.ebpf_mut()) {
                Ok(l) => Some(tokio::spawn(flush_logs(l, stop.clone()))),
                Err(e) => {
                    log::debug!("eBPF logger unavailable: {e}");
                    None
                }
            }
        } else {
            None
        };
        let program_fds = hk.program_fds.clone();
        let (engine, incidents) = match (&opts.incidents, store) {
            (Some(i), Some(store)) => {
                let (e, rx) = Engine::new(i, store);
                (Some(e), Some(rx))
            }
            _ => (None, None),
        };
        // With triggers, the latest long waits are kept: the ones that may
        // fire a `wait>=` trigger, and a window's slowest waits. The outlier
        // threshold is already at most the smallest `wait>=` (with_incidents).
        let recent_min_ns = match opts.load.config.outlier_ns {
            o if o != 0 && opts.incidents.is_some() => o,
            _ => u64::MAX,
        };
        let aggregator = aggregator::spawn(
            Aggregator::new(opts.limits).with_recent(recent_min_ns),
            opts.channel_batches,
            opts.publish_interval,
        );
        let tx = aggregator.sender().ok_or_else(|| std::io::Error::other("aggregator closed"))?;
        let reader_stats = Arc::new(ReaderStats::default());
        let (pins, pinned) = if opts.load.config.user_stacks != 0 {
            let (tx, rx) = mpsc::channel(PIN_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let copies = match (unwind, &pins) {
            (Some(u), Some(p)) => {
                let p = p.clone();
                let announce = move |id| {
                    let _ = p.try_send(id);
                };
                Some(unwind::spawn(u.sink, u.unwound, u.stats, announce).map_err(SessionError::Unwinder)?)
            }
            _ => None,
        };
        let user = reader::UserStackSinks { pins, copies };
        let reader =
            tokio::spawn(reader::run(ring, tx.clone(), stop.clone(), reader_stats.clone(), opts.poll_interval, user));
        let housekeeper = tokio::spawn(hk.run(tx, stop.clone(), opts.publish_interval));
        let base = Meta {
            backend: probes.backend().name().to_string(),
            mode: mode.name().to_string(),
            kernel: kernel_release(),
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            hold_unavailable: probes.hold().err().map(|u| u.reason.clone()),
            hold_backend: probes.hold().ok().map(|k| k.name().to_string()),
            yield_backend: probes.yield_kind().ok().map(|k| k.name().to_string()),
            yield_unavailable: probes.yield_kind().err().map(|u| u.reason.clone()),
            notes: probes.notes().iter().chain(&opts.notes).cloned().collect(),
            filters: opts.filters,
            ..Meta::default()
        };
        let meta = MetaSource { base, started: Instant::now(), reader: reader_stats };
        let (profiles, _) = watch::channel(Arc::new(Profile::default()));
        let builder = tokio::spawn(feed_builder(
            builder,
            aggregator.snapshots.clone(),
            profiles.clone(),
            meta.clone(),
            stop.clone(),
            pinned,
            engine,
        ));
        Ok(Session {
            probes,
            meta,
            program_fds,
            stop,
            reader,
            housekeeper,
            aggregator,
            builder,
            profiles,
            logger,
            incidents,
            detached: None,
        })
    }
}

impl Session {
    /// Name of the attached backend.
    pub fn backend(&self) -> &'static str {
        self.probes.backend().name()
    }

    /// Raw snapshots, one per interval.
    pub fn snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.aggregator.snapshots.clone()
    }

    /// Resolved profiles, one per interval from now on, built in a task of
    /// their own while anyone subscribes (stacks are symbolized once per
    /// session).
    pub fn profiles(&mut self) -> watch::Receiver<Arc<Profile>> {
        self.profiles.subscribe()
    }

    /// The incidents this session's triggers wrote, updated as they are
    /// (None: no triggers).
    pub fn incidents(&self) -> Option<watch::Receiver<Arc<IncidentLog>>> {
        self.incidents.clone()
    }

    /// Control channel to the aggregator.
    pub fn control(&self) -> tokio::sync::mpsc::Sender<Control> {
        self.aggregator.control.clone()
    }

    /// Time since start.
    pub fn elapsed(&self) -> Duration {
        self.meta.started.elapsed()
    }

    /// Detaches the programs: contentions from now on are not seen. What
    /// they measured stays in the maps until [`Session::finish`], which
    /// detaches first when this was not called. A caller comparing the
    /// session with another count of the kernel's contentions reads that
    /// count here: `finish` then frees the maps, and the kernel's freeing of
    /// their per-CPU memory contends on its own spinlock (thousands of waits
    /// on a busy machine) while no program of the session is attached.
    pub fn detach(&mut self) {
        self.detach_once();
    }

    /// [`Session::detach`], and what it read (at its first call).
    fn detach_once(&mut self) -> Detached {
        if let Some(d) = self.detached {
            return d;
        }
        let duration_s = self.elapsed().as_secs_f64();
        // Program statistics live in the programs' fdinfo: read before detaching.
        let misses = recursion_misses(&self.program_fds);
        self.probes.detach();
        let d = Detached { duration_s, misses, at_ns: crate::clock::monotonic_ns() };
        self.detached = Some(d);
        d
    }

    /// Stops: detaches the programs (unless [`Session::detach`] did), drains
    /// the ring buffer and the maps, counts waits still open (measured up to
    /// the detach, like perf), and resolves the profile.
    pub async fn finish(mut self) -> Result<Profile, SessionError> {
        let Detached { duration_s, misses, at_ns } = self.detach_once();
        self.stop.cancel();
        let _ring = (&mut self.reader).await??;
        let mut hk = (&mut self.housekeeper).await?;
        // Programs are detached: the counters and both aggregate maps are
        // final. Drained first: the drain adds the last generation's cache
        // misses to the counters.
        let tx = self.aggregator.sender();
        if let Some(tx) = &tx {
            hk.final_drain(tx).await;
        }
        let counters = hk.counters();
        if let Some(tx) = tx {
            let status = KernelStatus { counters, recursion_misses: misses, map_ops_refused: hk.refused.count() };
            let _ = tx.send(Msg::Kernel(Box::new(status))).await;
        }
        let mut profile = self.resolve_final(hk, counters.get(counter::EVENTS), at_ns).await?;
        profile.meta.duration_s = duration_s;
        Ok(profile)
    }

    /// Folds what is left into the aggregator and resolves the final
    /// profile; waits still open are measured up to `now` (the detach).
    async fn resolve_final(self, hk: Housekeeping, submitted: u64, now: u64) -> Result<Profile, SessionError> {
        let Session { meta, aggregator, builder, logger, .. } = self;
        let mut agg = aggregator.finish().await?;
        if let Some(l) = logger {
            let _ = l.await;
        }
        let open = hk.pending.open_waits().unwrap_or_else(|e| {
            log::warn!("reading waits open at stop: {e}");
            Vec::new()
        });
        // Futex contentions whose waits were over and whose release had not
        // come yet: measured (their waits are complete), not open.
        for mut ev in hk.futex.as_ref().map(|f| f.finished_at_stop()).unwrap_or_default() {
            ev.comm = comm_bytes(ev.tid);
            agg.ingest(&ev);
        }
        for p in &open {
            let comm = comm_bytes(p.tid);
            agg.ingest(&ContentionEvent {
                owner: p.owner,
                kind: EVENT_CONTENTION,
                cpu: 0,
                lock_addr: p.lock_addr,
                wait_ns: now.saturating_sub(p.begin_ns),
                end_ns: now,
                tid: p.tid,
                tgid: p.tgid,
                flags: p.flags,
                _pad: 0,
                stack_id: p.stack_id,
                user_stack_id: p.user_stack_id,
                cgroup_id: p.cgroup_id,
                comm,
            });
        }
        let received = meta.reader.received.load(Ordering::Relaxed);
        let malformed = meta.reader.malformed.load(Ordering::Relaxed);
        let userspace_lost = submitted.saturating_sub(received + malformed);
        let mut builder = builder.await?;
        let snap = agg.state();
        Ok(builder.build(snap, meta.meta(&snap.kernel, open.len() as u64, userspace_lost)))
    }
}
