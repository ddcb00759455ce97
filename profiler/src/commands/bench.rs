//! `lockprof bench ...` (hidden): measurement helpers driven by `cargo xtask bench`.
//! Each prints one JSON object on stdout.

use std::time::{Duration, Instant};

use profiler_common::{ContentionEvent, EVENT_CONTENTION, lcb};
use serde_json::json;

use super::{print_stdout, shutdown_or_sleep};
use crate::{
    cli::{BenchArgs, BenchCmd},
    ebpf::{FloorProbes, LoadOptions, Probes},
    pipeline::{Aggregator, Limits, reader::decode},
};

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

fn synthetic(events: usize, stacks: usize, locks: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(events * std::mem::size_of::<ContentionEvent>());
    for i in 0..events {
        let ev = ContentionEvent {
            lock_addr: 0xffff_8880_0000_0000 + ((i % locks.max(1)) as u64) * 64,
            wait_ns: 200 + (i as u64 * 7_919) % 2_000_000,
            end_ns: i as u64,
            tid: 1000 + (i % 256) as u32,
            tgid: 1000,
            flags: lcb::MUTEX,
            cpu: (i % 2) as u32,
            stack_id: (i % stacks.max(1)) as i32,
            kind: EVENT_CONTENTION,
            comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
        };
        // SAFETY: viewing a repr(C) POD value we own as its bytes.
        let raw = unsafe {
            std::slice::from_raw_parts(
                (&ev as *const ContentionEvent).cast::<u8>(),
                std::mem::size_of::<ContentionEvent>(),
            )
        };
        bytes.extend_from_slice(raw);
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
        if let Some(ev) = decode(rec) {
            agg.ingest(&ev);
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

async fn attach(rounds: usize) -> anyhow::Result<serde_json::Value> {
    let mut times = Vec::new();
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        let mut p = Probes::load(&LoadOptions::default())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        p.detach();
        drop(p);
    }
    times.sort_by(f64::total_cmp);
    Ok(json!({ "rounds": times.len(), "load_attach_ms_median": times[times.len() / 2], "load_attach_ms": times }))
}

/// Runs a bench helper.
pub async fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    let out = match &args.cmd {
        BenchCmd::Pipeline { events, stacks, locks } => pipeline(*events, *stacks, *locks),
        BenchCmd::Attach { rounds } => attach(*rounds).await?,
        BenchCmd::Floor { duration } => {
            let floor = FloorProbes::attach()?;
            eprintln!("lockprof: floor attached");
            shutdown_or_sleep(duration.map(Duration::from_secs_f64)).await?;
            json!({ "tracepoint_hits": floor.count() })
        }
    };
    print_stdout(&(serde_json::to_string(&out)? + "\n"))?;
    Ok(())
}
