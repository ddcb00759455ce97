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
/// line each (`contended lockprof_stress_mutex 1234`).
pub fn stress(args: &StressArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (w, threads, duration) = (args.workload, args.threads, Duration::from_secs_f64(args.duration));
    let rt = super::runtime().context("starting the async runtime")?;
    let out = rt.block_on(async {
        let (token, _) = on_signal(Hangup::Stop).context("handling signals")?;
        let s = stop.clone();
        let mut run = tokio::task::spawn_blocking(move || workload::run(w, threads, duration, s));
        let out = tokio::select! {
            out = &mut run => out,
            () = token.cancelled() => {
                // The workload's threads see the flag within a step.
                stop.store(true, Ordering::Relaxed);
                run.await
            }
        };
        anyhow::Ok(out.context("the workload panicked")??)
    })?;
    let mut text = format!(
        "{:?}: {} ops in {:.2} s ({:.0} ops/s, {} threads)\n",
        args.workload,
        out.ops,
        out.elapsed.as_secs_f64(),
        out.rate(),
        args.threads
    );
    for c in &out.counts {
        text.push_str(&format!("{c}\n"));
    }
    // A closed pipe (`| head`) is not an error.
    super::print_stdout(&text).context("writing the result")?;
    Ok(())
}
