//! `lockprof stress`: run a built-in contention scenario.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use crate::{cli::StressArgs, workload};

/// Runs the scenario and prints its throughput, then its own counts, one
/// `<kind> <symbol> <n>` line each (`contended lockprof_stress_mutex 1234`).
pub fn stress(args: &StressArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let out = workload::run(args.workload, args.threads, Duration::from_secs_f64(args.duration), stop)?;
    println!(
        "{:?}: {} ops in {:.2} s ({:.0} ops/s, {} threads)",
        args.workload,
        out.ops,
        out.elapsed.as_secs_f64(),
        out.rate(),
        args.threads
    );
    for c in &out.counts {
        println!("{c}");
    }
    Ok(())
}
