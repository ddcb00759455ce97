//! A profiling session: load and attach, run the reader and aggregator
//! tasks, publish snapshots, and on finish detach, drain, and resolve.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use profiler_common::{ContentionEvent, EVENT_CONTENTION, MODE_AGGREGATE, counter};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

use super::{
    Aggregator, Limits, Snapshot,
    reader::{self, Msg, ReaderStats},
    to_profile,
};
use crate::{
    ebpf::{
        AggMaps, FLIP_GRACE, KernelCounters, KernelStacks, LoadError, LoadOptions, PendingMaps, Probes,
        features::kernel_release,
    },
    model::{Meta, Profile},
    symbols::{Kallsyms, Resolver},
};

/// Errors of a running session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Loading or attaching failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The ring buffer could not be registered with the async reactor.
    #[error("ring buffer reader: {0}")]
    Reader(#[from] std::io::Error),
    /// A pipeline task panicked or was cancelled.
    #[error("pipeline task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Commands to the aggregator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Forget all statistics (the TUI's `r`).
    Reset,
}

/// Session options.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// What to load and how.
    pub load: LoadOptions,
    /// Aggregator key caps.
    pub limits: Limits,
    /// Snapshot publish interval.
    pub publish_interval: Duration,
    /// Capacity of the reader -> aggregator channel, in batches.
    pub channel_batches: usize,
    /// How often the reader drains the ring buffer when the kernel has not
    /// forced a wakeup.
    pub poll_interval: Duration,
    /// Filters as typed by the user (recorded in the profile's meta).
    pub filters: Vec<String>,
    /// Forward the eBPF programs' own diagnostics (aya-log) to the log (`-v`).
    pub ebpf_logs: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            load: LoadOptions::default(),
            limits: Limits::default(),
            publish_interval: Duration::from_secs(1),
            channel_batches: 256,
            poll_interval: Duration::from_millis(50),
            filters: Vec::new(),
            ebpf_logs: false,
        }
    }
}

impl SessionOptions {
    /// What `lockprof record` uses by default: aggregate mode, 10k stack
    /// walks per second per CPU, waits of 1 ms or more listed individually.
    pub fn recommended() -> SessionOptions {
        let mut o = SessionOptions::default();
        o.load.config.mode = profiler_common::MODE_AGGREGATE;
        o.load.config.stacks_per_window = 1000;
        o.load.config.outlier_ns = 1_000_000;
        o
    }
}

/// A running session.
pub struct Session {
    probes: Probes,
    stacks: KernelStacks,
    kallsyms: Kallsyms,
    started: Instant,
    started_unix_s: u64,
    stop: CancellationToken,
    reader: JoinHandle<std::io::Result<aya::maps::RingBuf<aya::maps::MapData>>>,
    housekeeper: Option<JoinHandle<Housekeeping>>,
    aggregator: JoinHandle<Aggregator>,
    tx: Option<mpsc::Sender<Msg>>,
    logger: Option<JoinHandle<()>>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    control: mpsc::Sender<Control>,
    reader_stats: Arc<ReaderStats>,
    filters: Vec<String>,
    mode: &'static str,
}

/// CLOCK_MONOTONIC in ns (the clock of `bpf_ktime_get_ns`).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into a valid, owned timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

fn apply(agg: &mut Aggregator, msg: Msg) {
    match msg {
        Msg::Events(batch) => {
            for ev in &batch {
                agg.ingest(ev);
            }
        }
        Msg::Yields(yields) => {
            for y in &yields {
                agg.ingest_yield(y);
            }
        }
        Msg::Aggregates(recs) => {
            for (k, v) in &recs {
                agg.ingest_agg(k, v);
            }
        }
    }
}

/// Flips the aggregate maps and sends what the inactive one held.
async fn drain_aggregates(maps: &mut AggMaps, tx: &mpsc::Sender<Msg>) {
    let idx = match maps.flip() {
        Ok(i) => i,
        Err(e) => {
            log::warn!("{e}");
            return;
        }
    };
    tokio::time::sleep(FLIP_GRACE).await;
    let mut out = Vec::new();
    if let Err(e) = maps.drain(idx, &mut out) {
        log::warn!("draining aggregates: {e}");
    }
    if !out.is_empty() {
        let _ = tx.send(Msg::Aggregates(out)).await;
    }
}

/// Maps serviced every interval by the housekeeping task.
struct Housekeeping {
    aggs: Option<AggMaps>,
    pending: PendingMaps,
}

/// Every interval: drain the aggregate maps (aggregate mode) and reap the
/// pending-wait entries of exited threads.
async fn housekeeping(
    mut hk: Housekeeping,
    tx: mpsc::Sender<Msg>,
    stop: CancellationToken,
    interval: Duration,
) -> Housekeeping {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                if let Some(maps) = hk.aggs.as_mut() {
                    drain_aggregates(maps, &tx).await;
                }
                let reaped = hk.pending.reap_exited();
                if reaped > 0 {
                    log::debug!("reaped {reaped} pending-wait entries of exited threads");
                }
            }
        }
    }
    hk
}

async fn aggregate(
    mut rx: mpsc::Receiver<Msg>,
    mut ctrl: mpsc::Receiver<Control>,
    mut agg: Aggregator,
    publish: watch::Sender<Arc<Snapshot>>,
    interval: Duration,
) -> Aggregator {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => {
                    apply(&mut agg, msg);
                    // Drain whatever else is queued without waiting.
                    while let Ok(msg) = rx.try_recv() {
                        apply(&mut agg, msg);
                    }
                }
                None => break,
            },
            Some(c) = ctrl.recv() => match c {
                Control::Reset => agg.reset(),
            },
            _ = tick.tick() => {
                if publish.receiver_count() > 0 {
                    publish.send_replace(Arc::new(agg.snapshot()));
                }
            }
        }
    }
    agg
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

impl Session {
    /// Loads, attaches and starts the pipeline. Must run inside a tokio runtime.
    pub fn start(opts: SessionOptions) -> Result<Session, SessionError> {
        let mut probes = Probes::load(&opts.load)?;
        let aggregate_mode = opts.load.config.mode == MODE_AGGREGATE;
        let kallsyms = Kallsyms::load().unwrap_or_else(|e| {
            log::warn!("{e}; stacks will show raw addresses");
            Kallsyms::default()
        });
        let ring = probes.take_events()?;
        let stacks = probes.take_stacks()?;
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

        let (tx, rx) = mpsc::channel(opts.channel_batches.max(1));
        let (ctrl_tx, ctrl_rx) = mpsc::channel(16);
        let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
        let reader_stats = Arc::new(ReaderStats::default());
        let reader =
            tokio::spawn(reader::run(ring, tx.clone(), stop.clone(), reader_stats.clone(), opts.poll_interval));
        let hk = Housekeeping {
            aggs: if aggregate_mode { Some(probes.take_aggregates()?) } else { None },
            pending: probes.take_pending()?,
        };
        let housekeeper = tokio::spawn(housekeeping(hk, tx.clone(), stop.clone(), opts.publish_interval));
        let aggregator =
            tokio::spawn(aggregate(rx, ctrl_rx, Aggregator::new(opts.limits), snap_tx, opts.publish_interval));
        Ok(Session {
            probes,
            stacks,
            kallsyms,
            started: Instant::now(),
            started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            stop,
            reader,
            housekeeper: Some(housekeeper),
            aggregator,
            tx: Some(tx),
            logger,
            snapshots: snap_rx,
            control: ctrl_tx,
            reader_stats,
            filters: opts.filters,
            mode: if aggregate_mode { "aggregate" } else { "stream" },
        })
    }

    /// Name of the attached backend.
    pub fn backend(&self) -> &'static str {
        self.probes.backend().name()
    }

    /// Snapshots published every interval.
    pub fn snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.clone()
    }

    /// Control channel to the aggregator.
    pub fn control(&self) -> mpsc::Sender<Control> {
        self.control.clone()
    }

    /// Current kernel counters.
    pub fn counters(&self) -> KernelCounters {
        self.probes.counters().unwrap_or_default()
    }

    /// Seconds since start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Symbolizes a snapshot (for live views) with the session's stacks.
    pub fn resolve(&mut self, snap: &Snapshot) -> Profile {
        let meta = self.meta(&self.counters(), 0, 0);
        let ks = self.kallsyms.clone();
        let mut resolver = Resolver::new(ks, &mut self.stacks);
        to_profile(snap, &mut resolver, meta)
    }

    fn meta(&self, counters: &KernelCounters, open_at_stop: u64, userspace_lost: u64) -> Meta {
        let mut drops: std::collections::BTreeMap<String, u64> =
            counters.named().filter(|(n, _)| *n != "events").map(|(n, v)| (n.to_string(), v)).collect();
        drops.insert("open_at_stop".into(), open_at_stop);
        drops.insert("malformed_records".into(), self.reader_stats.malformed.load(Ordering::Relaxed));
        drops.insert("userspace_lost".into(), userspace_lost);
        let misses: u64 = self.probes.recursion_misses().values().sum();
        drops.insert("recursion_misses".into(), misses);
        Meta {
            backend: self.backend().to_string(),
            mode: self.mode.to_string(),
            kernel: kernel_release(),
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            duration_s: self.started.elapsed().as_secs_f64(),
            started_unix_s: self.started_unix_s,
            events: 0,
            drops,
            hold_unavailable: self.probes.hold_unavailable(),
            hold_backend: self.probes.hold().map(|k| k.name().to_string()),
            yield_backend: self.probes.yield_kind().map(|k| k.name().to_string()),
            yield_unavailable: self.probes.yield_unavailable(),
            notes: self.probes.notes().to_vec(),
            filters: self.filters.clone(),
        }
    }

    /// Stops: detaches the programs, drains the ring buffer, counts waits
    /// still open (measured up to now, like perf), and resolves the profile.
    pub async fn finish(mut self) -> Result<Profile, SessionError> {
        let duration_s = self.started.elapsed().as_secs_f64();
        self.probes.detach();
        self.stop.cancel();
        let _ring = (&mut self.reader).await??;
        let mut pending = None;
        if let Some(h) = self.housekeeper.take() {
            let mut hk = h.await?;
            if let (Some(maps), Some(tx)) = (hk.aggs.as_mut(), &self.tx) {
                // Programs are detached: both maps are final.
                for idx in 0..2 {
                    let mut out = Vec::new();
                    if let Err(e) = maps.drain(idx, &mut out) {
                        log::warn!("final drain of aggregates: {e}");
                    }
                    if !out.is_empty() {
                        let _ = tx.send(Msg::Aggregates(out)).await;
                    }
                }
            }
            pending = Some(hk.pending);
        }
        drop(self.tx.take());
        let mut agg = (&mut self.aggregator).await?;
        if let Some(l) = self.logger.take() {
            let _ = l.await;
        }

        let counters = self.probes.counters()?;
        let now = monotonic_ns();
        let pending = match pending.map(|p| p.open_waits()) {
            Some(Ok(open)) => open,
            Some(Err(e)) => {
                log::warn!("reading waits open at stop: {e}");
                Vec::new()
            }
            None => Vec::new(),
        };
        let open = pending.len() as u64;
        let submitted = counters.get(counter::EVENTS);
        let received = self.reader_stats.received.load(Ordering::Relaxed);
        let malformed = self.reader_stats.malformed.load(Ordering::Relaxed);
        let userspace_lost = submitted.saturating_sub(received + malformed);
        for p in pending {
            let tid = p.tid;
            let mut comm = [0u8; 16];
            let name = read_trimmed(&format!("/proc/{tid}/comm"));
            let n = name.len().min(15);
            comm[..n].copy_from_slice(&name.as_bytes()[..n]);
            agg.ingest(&ContentionEvent {
                lock_addr: p.lock_addr,
                wait_ns: now.saturating_sub(p.begin_ns),
                end_ns: now,
                tid,
                tgid: p.tgid,
                flags: p.flags,
                cpu: 0,
                stack_id: p.stack_id,
                kind: EVENT_CONTENTION,
                comm,
            });
        }
        let mut meta = self.meta(&counters, open, userspace_lost);
        meta.duration_s = duration_s;
        let ks = std::mem::take(&mut self.kallsyms);
        let mut resolver = Resolver::new(ks, &mut self.stacks);
        Ok(to_profile(agg.state(), &mut resolver, meta))
    }
}

impl crate::symbols::StackSource for &mut KernelStacks {
    fn frames(&mut self, id: u32) -> Option<Vec<u64>> {
        (**self).frames(id)
    }
}
