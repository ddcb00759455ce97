//! `lockprof top`: the live dashboard.

use std::time::Duration;

use clap::Parser as _;

use super::UsageError;
use crate::{
    cli::{Cli, Command, Mode, TopArgs},
    ebpf::BackendChoice,
};

fn backend_word(b: BackendChoice) -> &'static str {
    match b {
        BackendChoice::Auto => "auto",
        BackendChoice::TpBtf => "tp_btf",
        BackendChoice::Tracepoint => "tracepoint",
        BackendChoice::Fentry => "fentry",
        BackendChoice::Kprobe => "kprobe",
    }
}

/// Runs the dashboard with `record`'s session options and the given filters.
pub async fn top(args: &TopArgs, verbose: u8) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        return Err(UsageError(format!("--interval must be at least 0.1 seconds, not {}", args.interval)).into());
    }
    let mut argv =
        vec!["lockprof".to_string(), "record".into(), format!("--backend={}", backend_word(args.filter.backend))];
    argv.push(format!("--mode={}", if args.mode == Mode::Stream { "stream" } else { "aggregate" }));
    for p in &args.filter.pid {
        argv.push(format!("--pid={p}"));
    }
    if !args.filter.types.is_empty() {
        argv.push(format!("--type={}", args.filter.types.join(",")));
    }
    let cli = Cli::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?;
    let Command::Record(rec) = cli.command else {
        return Err(UsageError("internal: not a record command".into()).into());
    };
    let mut opts = super::record::session_options(&rec, verbose)?;
    opts.publish_interval = Duration::from_secs_f64(args.interval);
    crate::tui::run(opts).await
}
