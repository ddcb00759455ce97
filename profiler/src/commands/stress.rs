//! `lockprof stress`: run a built-in contention scenario.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;

use crate::{
    cli::StressArgs,
    shutdown::{Hangup, on_signal},
    workload,
};

/// Runs the scenario until `--duration` ends or SIGINT/SIGTERM/SIGHUP, and
/// prints its throughput, then its own counts, one `<kind> <symbol> <n>`
/// line each (`contended lockprof_stress_mutex 1234`). `stall` prints its
/// stall's line (`stall waiter <tid> ...`, see `workload::Stall`) as soon
/// as the stall is over, while the run goes on.
pub fn stress(args: &StressArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (w, threads, duration) = (args.workload, args.threads, Duration::from_secs_f64(args.duration));
    let rt = super::runtime().context("starting the async runtime")?;
    let (token, _) = rt.block_on(async { on_signal(Hangup::Stop) }).context("handling signals")?;
    let s = stop.clone();
    rt.spawn(async move {
        token.cancelled().await;
        // The workload's threads see the flag within a step.
        s.store(true, Ordering::Relaxed);
    });
    // On the main thread: the workload's threads are started from it and
    // carry its name (`lockprof`), not the runtime's.
    let opts = workload::StallOptions {
        stall: Duration::from_millis(args.stall_ms),
        at: Duration::from_secs_f64(args.stall_at),
    };
    let mut printed = Ok(());
    let mut report = |s: &workload::Stall| printed = super::print_stdout(&format!("{s}\n"));
    let out = workload::run_with(w, threads, duration, opts, &mut report, stop)?;
    printed.context("writing the stall")?;
    // `stall` runs its own three threads, whatever --threads says.
    let shown = if w == workload::Workload::Stall { 3 } else { threads };
    let mut text = format!(
        "{:?}: {} ops in {:.2} s ({:.0} ops/s, {} threads)\n",
        args.workload,
        out.ops,
        out.elapsed.as_secs_f64(),
        out.rate(),
        shown
    );
    for c in &out.counts {
        text.push_str(&format!("{c}\n"));
    }
    // A closed pipe (`| head`) is not an error.
    super::print_stdout(&text).context("writing the result")?;
    Ok(())
}
