//! `lockprof record`: profile the live kernel.

use std::time::Duration;

use profiler_common::{Config, LockType, MODE_AGGREGATE, MODE_STREAM};

use super::{UsageError, report_options};
use crate::{
    cli::{Mode, RecordArgs},
    ebpf::LoadOptions,
    model::parse_type,
    pipeline::{Limits, Session, SessionOptions},
    recording::OutputFile,
    report::render,
};

/// Type mask from `--type` words.
pub(crate) fn type_mask(types: &[String]) -> Result<u32, UsageError> {
    if types.is_empty() {
        return Ok(u32::MAX);
    }
    let mut mask = 0;
    for t in types {
        let ty = parse_type(t).ok_or_else(|| {
            let known: Vec<&str> = LockType::ALL.iter().map(|t| crate::model::type_name(*t)).collect();
            UsageError(format!("unknown lock type {t:?}; known types: {}", known.join(", ")))
        })?;
        mask |= ty.bit();
    }
    Ok(mask)
}

/// Session options from the command line, validated.
pub(crate) fn session_options(args: &RecordArgs, verbose: u8) -> Result<SessionOptions, UsageError> {
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        return Err(UsageError(format!("--duration must be a positive number of seconds, not {d}")));
    }
    for pid in &args.filter.pid {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(UsageError(format!("--pid {pid}: no such process")));
        }
    }
    if !args.ringbuf_mb.is_power_of_two() || args.ringbuf_mb > 1024 {
        return Err(UsageError(format!("--ringbuf-mb must be a power of two up to 1024, not {}", args.ringbuf_mb)));
    }
    if args.stack_map_size == 0 || args.max_callers == 0 {
        return Err(UsageError("--stack-map-size and --max-callers must be positive".into()));
    }
    let mut filters = Vec::new();
    if !args.filter.pid.is_empty() {
        filters.push(format!("pid={}", args.filter.pid.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    if !args.filter.types.is_empty() {
        filters.push(format!("type={}", args.filter.types.join(",")));
    }
    Ok(SessionOptions {
        load: LoadOptions {
            backend: args.filter.backend,
            config: Config {
                type_mask: type_mask(&args.filter.types)?,
                filter_tgid: u32::from(!args.filter.pid.is_empty()),
                stacks_per_window: args.stack_rate.div_ceil(10),
                mode: match args.mode {
                    Mode::Aggregate => MODE_AGGREGATE,
                    Mode::Stream => MODE_STREAM,
                },
                outlier_ns: args.outlier_us.saturating_mul(1000),
            },
            tgids: args.filter.pid.clone(),
            ringbuf_bytes: args.ringbuf_mb << 20,
            stack_entries: args.stack_map_size,
            yield_to: !args.filter.no_yield_to,
            ..LoadOptions::default()
        },
        limits: Limits { max_callers: args.max_callers, ..Limits::default() },
        filters,
        ebpf_logs: verbose > 0,
        ..SessionOptions::default()
    })
}

/// Records until the duration ends or a signal arrives, then reports.
pub async fn record(args: &RecordArgs, verbose: u8) -> anyhow::Result<()> {
    super::check_binary_stdout(args.view.format, false)?;
    let profile = record_profile(args, verbose).await?;
    super::emit(&render(&profile, &report_options(&args.view))?, None)
}

/// Records until the duration ends or a signal arrives; saves `--output`.
pub(crate) async fn record_profile(args: &RecordArgs, verbose: u8) -> anyhow::Result<crate::model::Profile> {
    let opts = session_options(args, verbose)?;
    let output = match &args.output {
        Some(p) => Some(OutputFile::open(p).map_err(|e| UsageError(format!("cannot write the recording: {e}")))?),
        None => None,
    };
    let session = Session::start(opts)?;
    match args.duration {
        Some(d) => {
            eprintln!("lockprof: recording for {d} s with the {} backend (Ctrl-C stops early)", session.backend())
        }
        None => eprintln!("lockprof: recording with the {} backend; Ctrl-C to stop", session.backend()),
    }
    super::shutdown_or_sleep(args.duration.map(Duration::from_secs_f64)).await?;
    let profile = session.finish().await?;
    if let Some(out) = output {
        let path = out.save(&profile)?;
        eprintln!("lockprof: recording saved to {}", path.display());
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_words_become_a_mask() {
        assert_eq!(type_mask(&[]).expect("all"), u32::MAX);
        let m = type_mask(&["mutex".into(), "rwlock".into()]).expect("mask");
        assert_eq!(m, LockType::Mutex.bit() | LockType::Rwlock.bit());
        let err = type_mask(&["semaphore".into()]).expect_err("unknown");
        assert!(err.0.contains("known types: unknown, spinlock"), "{}", err.0);
    }
}
