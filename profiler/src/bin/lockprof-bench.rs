//! `lockprof-bench`: measurement helpers driven by `cargo xtask bench`
//! (feature `bench`; never in the product binary). Each prints one JSON
//! object on stdout.

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
    /// Time load + attach of the default wait backend.
    Attach {
        /// Repetitions.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
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
            stack_id: (i % stacks.max(1)) as i32,
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
    let stop = lockprof::shutdown::on_signal()?;
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
        Cmd::Attach { rounds } => attach(rounds)?,
        Cmd::Floor { duration } => {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(floor(duration))?
        }
    };
    println!("{out}");
    Ok(())
}
