//! `lockprof record`: profile the live kernel.

use std::time::Duration;

use anyhow::Context as _;

use super::{UsageError, check_binary_stdout, emit};
use crate::{
    cli::RecordArgs,
    model::Profile,
    recording::OutputFile,
    report::{ReportOptions, render},
    session::{Session, SessionOptions},
};

/// Records until the duration ends or a signal arrives, then reports.
pub async fn record(args: &RecordArgs) -> anyhow::Result<()> {
    check_binary_stdout(args.view.format, false)?;
    let opts = SessionOptions::try_from(&args.session)?;
    let profile = record_profile(opts, args.duration, args.output.as_deref()).await?;
    emit(&render(&profile, &ReportOptions::from(&args.view))?, None)
}

/// Records with `opts` until `duration` ends or a signal arrives; saves `output`.
pub(crate) async fn record_profile(
    opts: SessionOptions,
    duration: Option<f64>,
    output: Option<&std::path::Path>,
) -> anyhow::Result<Profile> {
    let output = match output {
        Some(p) => Some(OutputFile::open(p).map_err(|e| UsageError(format!("cannot write the recording: {e}")))?),
        None => None,
    };
    // Signals are caught from before attaching: one that arrives while the
    // programs attach, or right after the message below, stops the
    // recording cleanly instead of killing the process without a report.
    let stop = crate::shutdown::on_signal().context("catching SIGINT and SIGTERM")?;
    let session = Session::start(opts)?;
    match duration {
        Some(d) => {
            eprintln!("lockprof: recording for {d} s with the {} backend (Ctrl-C stops early)", session.backend())
        }
        None => eprintln!("lockprof: recording with the {} backend; Ctrl-C to stop", session.backend()),
    }
    super::shutdown_or_sleep(&stop, duration.map(Duration::from_secs_f64)).await?;
    let profile = session.finish().await.context("finishing the recording")?;
    if let Some(out) = output {
        let path = out.save(&profile).context("saving the recording")?;
        eprintln!("lockprof: recording saved to {}", path.display());
    }
    Ok(profile)
}
