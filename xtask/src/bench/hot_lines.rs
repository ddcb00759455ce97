//! `cargo xtask bench --hot-lines`: where lockprof's two tracepoint
//! programs spend their time, source line by source line. perf (perf-b's
//! build) samples every CPU during a pipe storm under `lockprof record`;
//! the samples inside each program are mapped through its jited line info
//! (`lockprof-bench prog-lines`). Printed, not written to BENCHMARKS.md: the
//! frontier notes quote it (xtask/src/bench/notes.md).

use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::{
    extras::bench_json,
    runs::{lockprof, perf_b, start_tracer, stop_tracer},
};
use crate::util::workspace_root;

/// Seconds of sampling inside the storm, and the sampling rate.
const SAMPLE_SECS: u32 = 3;
const SAMPLE_HZ: u32 = 15_000;
/// Lines shown per program.
const TOP_LINES: usize = 25;

/// Samples lockprof (with `args`) under a pipe storm of `threads` and prints
/// each wait program's hottest source lines.
pub fn hot_lines(threads: usize, args: &[String]) -> Result<()> {
    let perf =
        perf_b().context("--hot-lines samples with perf-b (../shared/tools/perfb/perf-b): not on this machine")?;
    let dir = workspace_root().join("target/hot-lines");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let data = dir.join("perf.data");
    let mut rec = lockprof();
    rec.args(["record", "--format", "json", "--top", "1"]).args(args);
    let tracer = start_tracer(rec, "lockprof: recording")?;
    let sampled = sample(&perf, &data, threads);
    let names = bench_json(&["prog-names"]);
    let report = sampled.and(names).and_then(|names| report(&perf, &data, &dir, &names));
    stop_tracer(tracer)?;
    report
}

/// A storm of `SAMPLE_SECS` + 2 s, sampled for `SAMPLE_SECS` in its middle.
fn sample(perf: &std::path::Path, data: &std::path::Path, threads: usize) -> Result<()> {
    let storm = (SAMPLE_SECS + 2).to_string();
    let mut storm = lockprof()
        .args(["stress", "pipe", "--threads", &threads.to_string(), "--duration", &storm])
        .stdout(Stdio::null())
        .spawn()
        .context("starting the pipe storm")?;
    std::thread::sleep(std::time::Duration::from_secs(1));
    let out = Command::new(perf)
        .args(["record", "-a", "-F", &SAMPLE_HZ.to_string(), "-o"])
        .arg(data)
        .args(["--", "sleep", &SAMPLE_SECS.to_string()])
        .output()
        .context("running perf-b record");
    let waited = storm.wait().context("waiting for the pipe storm");
    let out = out?;
    if !out.status.success() {
        bail!("perf-b record failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    waited?;
    Ok(())
}

/// The hottest lines of the begin and end programs among the samples.
fn report(perf: &std::path::Path, data: &std::path::Path, dir: &std::path::Path, names: &Value) -> Result<()> {
    let out = Command::new(perf).args(["script", "-F", "ip,sym", "-i"]).arg(data).output().context("perf-b script")?;
    if !out.status.success() {
        bail!("perf-b script failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let script = String::from_utf8_lossy(&out.stdout);
    let total = script.lines().count();
    println!("{total} samples on all CPUs in {SAMPLE_SECS} s of pipe storm");
    for side in ["contention_end", "contention_begin"] {
        // The kernel keeps 15 characters of a program's name (`contention_begi`);
        // perf's symbol carries the whole one (`bpf_prog_<tag>_contention_begin_btf`).
        let ids: Vec<&str> = names
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, n)| n.as_str().is_some_and(|n| side.starts_with(n) || n.starts_with(side)))
            .map(|(id, _)| id.as_str())
            .collect();
        let ips: String = script
            .lines()
            .filter(|l| l.split_whitespace().nth(1).is_some_and(|s| s.starts_with("bpf_prog_") && s.contains(side)))
            .map(|l| format!("{}\n", l.split_whitespace().next().unwrap_or_default()))
            .collect();
        let file = dir.join(format!("{side}.ips"));
        std::fs::write(&file, &ips).with_context(|| format!("writing {}", file.display()))?;
        // The program the samples fell in is the one with the most of them.
        let best = ids
            .iter()
            .filter_map(|id| bench_json(&["prog-lines", "--prog", id, "--ips", &file.to_string_lossy()]).ok())
            .max_by_key(|v| v["samples"].as_u64().unwrap_or(0))
            .with_context(|| format!("no {side} program of lockprof's found"))?;
        let n = best["samples"].as_u64().unwrap_or(0);
        println!("\n{side}: {n} samples ({:.1}% of all)\n", 100.0 * n as f64 / total.max(1) as f64);
        println!("| samples | share | line |\n|---|---|---|");
        for l in best["lines"].as_array().into_iter().flatten().take(TOP_LINES) {
            let k = l["samples"].as_u64().unwrap_or(0);
            let line = l["line"].as_str().unwrap_or_default().replace('|', "\\|");
            println!("| {k} | {:.1}% | `{line}` |", 100.0 * k as f64 / n.max(1) as f64);
        }
    }
    Ok(())
}
