//! `lockprof-bench`: measurement helpers driven by `cargo xtask bench`
//! (feature `bench`; never in the product binary). Each prints one JSON
//! object on stdout.

mod prog_lines;

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use lockprof::{
    ebpf::{FloorProbes, LoadOptions, Probes},
    pipeline::{Aggregator, Limits, record::decode},
};
use profiler_common::{ContentionEvent, EVENT_CONTENTION, Owner, lcb};
use serde_json::json;

/// Benchmark helpers.
#[derive(Parser)]
#[command(name = "lockprof-bench")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Decode + aggregate synthetic records in userspace (no root): records/s and RSS.
    Pipeline {
        /// Records to push through.
        #[arg(long, default_value_t = 5_000_000)]
        events: usize,
        /// Distinct stacks among them.
        #[arg(long, default_value_t = 1000)]
        stacks: usize,
        /// Distinct locks among them.
        #[arg(long, default_value_t = 1)]
        locks: usize,
    },
    /// The daemon's userspace path at N distinct (lock, stack) keys (no root):
    /// aggregator, symbolized profiles, Prometheus exporter and window.
    ServeMemory {
        /// Distinct (lock, stack) keys.
        #[arg(long, default_value_t = 100_000)]
        keys: usize,
        /// Distinct stacks among them (default: the default stack map's capacity).
        #[arg(long, default_value_t = profiler_common::DEFAULT_STACK_ENTRIES as usize)]
        stacks: usize,
        /// Records per key.
        #[arg(long, default_value_t = 20)]
        per_key: usize,
        /// The aggregator's cap on (lock, stack) rows (lockprof's default: --max-callers).
        #[arg(long, default_value_t = lockprof::session::defaults::MAX_CALLERS)]
        max_callers: usize,
    },
    /// The incident ring at N distinct (lock, stack) keys (no root): its
    /// memory with `churn` percent of the keys growing each second, at the
    /// default --before and ring budget.
    IncidentRing {
        /// Distinct (lock, stack) keys.
        #[arg(long, default_value_t = 100_000)]
        keys: usize,
        /// Percent of the keys that grow each second.
        #[arg(long, default_value_t = 10.0)]
        churn: f64,
        /// Seconds (snapshots) fed.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Time load + attach of the default wait backend.
    Attach {
        /// Repetitions.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// The names of the loaded BPF programs by id, as JSON (root): bpf_stats
    /// in /proc/PID/fdinfo carries ids, not names.
    ProgNames,
    /// Samples (hex instruction addresses in file `ips`, one per line, as
    /// `perf script -F ip` prints them) per source line of loaded program
    /// `prog`, from its jited line info, as JSON (root).
    ProgLines {
        /// Program id.
        #[arg(long)]
        prog: u32,
        /// File of sampled addresses.
        #[arg(long)]
        ips: std::path::PathBuf,
    },
    /// Attach counting-only programs on the lock tracepoints (the overhead floor).
    Floor {
        /// Seconds (default: until SIGINT/SIGTERM).
        #[arg(long)]
        duration: Option<f64>,
    },
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Ring-buffer bytes of `events` wait records over `stacks` stacks and `locks` locks.
fn synthetic(events: usize, stacks: usize, locks: usize) -> Vec<u8> {
    let size = std::mem::size_of::<ContentionEvent>();
    let mut bytes = Vec::with_capacity(events * size);
    for i in 0..events {
        let ev = ContentionEvent {
            kind: EVENT_CONTENTION,
            cpu: (i % 2) as u32,
            lock_addr: 0xffff_8880_0000_0000 + ((i % locks.max(1)) as u64) * 64,
            wait_ns: 200 + (i as u64 * 7_919) % 2_000_000,
            end_ns: i as u64,
            tid: 1000 + (i % 256) as u32,
            tgid: 1000,
            flags: lcb::MUTEX,
            _pad: 0,
            stack_id: (i % stacks.max(1)) as u64,
            user_stack_id: profiler_common::USER_STACK_OFF,
            cgroup_id: 0,
            comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
            owner: Owner::default(),
        };
        // SAFETY: viewing a repr(C) POD value we own as its bytes, for its size.
        bytes.extend_from_slice(unsafe {
            std::slice::from_raw_parts((&ev as *const ContentionEvent).cast::<u8>(), size)
        });
    }
    bytes
}

fn pipeline(events: usize, stacks: usize, locks: usize) -> serde_json::Value {
    let bytes = synthetic(events, stacks, locks);
    let limits = Limits { max_callers: stacks.max(1) * 2, ..Limits::default() };
    let rss_before = rss_kib();
    let mut agg = Aggregator::new(limits);
    let start = Instant::now();
    for rec in bytes.chunks_exact(std::mem::size_of::<ContentionEvent>()) {
        if let Ok(r) = decode(rec) {
            agg.apply(&r);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let rss_after = rss_kib();
    let callers: usize = agg.state().locks.values().map(|l| l.callers.len()).sum();
    json!({
        "events": events,
        "distinct_stacks": stacks,
        "distinct_callers": callers,
        "seconds": secs,
        "events_per_s": events as f64 / secs.max(1e-9),
        "rss_kib": rss_after,
        "rss_growth_kib": rss_after.saturating_sub(rss_before),
    })
}

/// RSS of the whole serve path with `keys` distinct (lock, stack) keys
/// over 1000 locks and `stacks` stacks of 12 frames (key k: lock k % 1000,
/// stack k % stacks), two profiles folded into the exporter and the window
/// (the second after every key grew again).
fn serve_memory(keys: usize, stacks: usize, per_key: usize, max_callers: usize) -> serde_json::Value {
    use std::{collections::HashMap, sync::Arc};

    use lockprof::{
        model::Meta,
        pipeline::ProfileBuilder,
        serve::{ServeOptions, State},
        symbols::{Kallsyms, Resolver},
    };
    let rss_start = rss_kib();
    let n_stacks = stacks.clamp(1, keys.max(1));
    let stacks: HashMap<profiler_common::StackId, Vec<u64>> = (0..n_stacks as u64)
        .map(|i| (i, (0..12u64).map(|f| 0xffff_ffff_8100_0000 + f * 0x1_0000 + i * 16).collect()))
        .collect();
    let limits = Limits { max_callers, max_idle: Some(60), ..Limits::default() };
    let mut agg = Aggregator::new(limits);
    let mut builder = ProfileBuilder::new(Resolver::new(Arc::new(Kallsyms::default()), stacks));
    let opts = ServeOptions {
        listen: ([127, 0, 0, 1], 0).into(),
        window: Duration::from_secs(60),
        max_series: 100,
        max_cgroups: 10,
        max_window_entries: 200_000,
    };
    let mut state = State::new(&opts);
    let feed = |agg: &mut Aggregator, round: usize| {
        for r in 0..per_key {
            for k in 0..keys {
                let ev = ContentionEvent {
                    kind: EVENT_CONTENTION,
                    cpu: 0,
                    lock_addr: 0xffff_8880_0000_0000 + ((k % 1000) as u64) * 64,
                    wait_ns: 200 + ((k * 31 + r * 7 + round) as u64 * 7_919) % 2_000_000,
                    end_ns: 0,
                    tid: 1000 + (k % 256) as u32,
                    tgid: 1000,
                    flags: lcb::MUTEX,
                    _pad: 0,
                    stack_id: (k % n_stacks) as u64,
                    user_stack_id: profiler_common::USER_STACK_OFF,
                    cgroup_id: 0,
                    comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
                    owner: Owner::default(),
                };
                agg.ingest(&ev);
            }
        }
    };
    let start = Instant::now();
    feed(&mut agg, 0);
    agg.age();
    let p = Arc::new(builder.build(&agg.snapshot(), Meta::default()));
    state.update(p, Instant::now());
    feed(&mut agg, 1);
    agg.age();
    let p = Arc::new(builder.build(&agg.snapshot(), Meta::default()));
    state.update(p.clone(), Instant::now());
    let build_s = start.elapsed().as_secs_f64();
    let t = Instant::now();
    let text = state.exporter.encode().map(|b| b.len()).unwrap_or(0);
    let encode_ms = t.elapsed().as_secs_f64() * 1e3;
    let callers: usize = p.locks.iter().map(|l| l.callers.len()).sum();
    drop(p);
    let rss = rss_kib();
    json!({
        "keys": keys,
        "distinct_stacks": n_stacks,
        "distinct_callers": callers,
        "max_callers": max_callers,
        "kept_callers": agg.callers(),
        "window_rows": state.window.entries(),
        "rss_kib": rss,
        "rss_growth_kib": rss.saturating_sub(rss_start),
        "build_seconds": build_s,
        "metrics_bytes": text,
        "metrics_encode_ms": encode_ms,
    })
}

fn incident_ring(keys: usize, churn: f64, seconds: u64) -> serde_json::Value {
    use std::sync::Arc;

    use lockprof::incident::{
        IncidentOptions,
        engine::ring_shape,
        ring::{BUDGET_BYTES, Ring, Slot},
    };
    let limits = Limits { max_callers: keys + 10, max_locks: 10_000, ..Limits::default() };
    let mut agg = Aggregator::new(limits);
    let ev = |k: usize, round: u64| ContentionEvent {
        kind: EVENT_CONTENTION,
        lock_addr: 0xffff_8880_0000_0000 + ((k % 1000) as u64) * 64,
        wait_ns: 200 + ((k as u64 * 31 + round * 7) * 7_919) % 2_000_000,
        tid: 1000 + (k % 256) as u32,
        tgid: 1000,
        flags: lcb::MUTEX,
        stack_id: k as u64,
        user_stack_id: profiler_common::USER_STACK_OFF,
        comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
        owner: Owner::default(),
        ..ContentionEvent::default()
    };
    for k in 0..keys {
        agg.ingest(&ev(k, 0));
    }
    let opts =
        IncidentOptions { triggers: vec!["wait>=10s".parse().expect("a trigger")], ..IncidentOptions::default() };
    let (keep, dense, step) = ring_shape(&opts);
    let mut ring = Ring::new(BUDGET_BYTES);
    let rss_start = rss_kib();
    let t0 = Instant::now();
    let per_s = ((keys as f64 * churn / 100.0) as usize).min(keys);
    let mut push_max = Duration::ZERO;
    for s in 0..seconds {
        for i in 0..per_s {
            agg.ingest(&ev((s as usize * per_s + i) % keys, s + 1));
        }
        agg.age();
        let slot = Slot { at: t0 + Duration::from_secs(s), mono_ns: s, unix_ms: s, snap: Arc::new(agg.snapshot()) };
        let t = Instant::now();
        ring.push(slot, keep, dense, step);
        push_max = push_max.max(t.elapsed());
    }
    let rss = rss_kib();
    json!({
        "keys": keys,
        "churn_pct": churn,
        "seconds": seconds,
        "slots": ring.len(),
        "ring_bytes_estimated": ring.bytes(),
        "budget_bytes": BUDGET_BYTES,
        "slots_dropped": ring.dropped,
        "rss_growth_kib": rss.saturating_sub(rss_start),
        "push_ms_max": push_max.as_secs_f64() * 1e3,
    })
}

fn attach(rounds: usize) -> anyhow::Result<serde_json::Value> {
    let mut times = Vec::new();
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        let mut p = Probes::load(&LoadOptions::default())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        p.detach();
    }
    times.sort_by(f64::total_cmp);
    Ok(json!({ "rounds": times.len(), "load_attach_ms_median": times[times.len() / 2], "load_attach_ms": times }))
}

async fn floor(duration: Option<f64>) -> anyhow::Result<serde_json::Value> {
    let floor = FloorProbes::attach()?;
    eprintln!("lockprof-bench: floor attached");
    let (stop, _) = lockprof::shutdown::on_signal(lockprof::shutdown::Hangup::Stop)?;
    match duration {
        Some(d) => tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(d)) => {}
            _ = stop.cancelled() => {}
        },
        None => stop.cancelled().await,
    }
    let (begins, ends) = floor.counts();
    Ok(json!({ "begins": begins, "ends": ends }))
}

fn main() -> anyhow::Result<()> {
    let out = match Cli::parse().cmd {
        Cmd::Pipeline { events, stacks, locks } => pipeline(events, stacks, locks),
        Cmd::ServeMemory { keys, stacks, per_key, max_callers } => serve_memory(keys, stacks, per_key, max_callers),
        Cmd::IncidentRing { keys, churn, seconds } => incident_ring(keys, churn, seconds),
        Cmd::Attach { rounds } => attach(rounds)?,
        Cmd::ProgNames => {
            let names: serde_json::Map<String, serde_json::Value> = aya::programs::loaded_programs()
                .filter_map(Result::ok)
                .map(|p| (p.id().to_string(), json!(p.name_as_str().unwrap_or_default())))
                .collect();
            serde_json::Value::Object(names)
        }
        Cmd::ProgLines { prog, ips } => prog_lines::prog_lines(prog, &std::fs::read_to_string(ips)?)?,
        Cmd::Floor { duration } => {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(floor(duration))?
        }
    };
    println!("{out}");
    Ok(())
}
