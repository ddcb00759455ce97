//! `lockprof record`: profile the live kernel.

use std::time::Duration;

use anyhow::Context as _;

use super::{UsageError, check_binary_stdout, emit};
use crate::{
    cli::RecordArgs,
    model::Profile,
    output_file::OutputFile,
    recording::{self, RecordingError},
    report::{ReportOptions, render},
    session::{Session, SessionOptions},
    shutdown::{self, Hangup},
};

/// The recording could not be saved; the report still went to stdout.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot save the recording: {source}; nothing partial was left there (an earlier file is kept), and the report went to stdout"
)]
pub struct Unsaved {
    /// Why (the file and what the kernel answered, e.g. ENOSPC).
    #[source]
    pub source: RecordingError,
}

/// A finished recording, and whether saving it failed.
pub(crate) struct Recorded {
    pub profile: Profile,
    pub unsaved: Option<Unsaved>,
}

/// Records until the duration ends or a signal arrives, then reports. When
/// the recording cannot be saved (a full disk), the report is still
/// printed, then one line says why the file is missing (exit status 1).
pub async fn record(args: &RecordArgs) -> anyhow::Result<()> {
    check_binary_stdout(args.view.format, false)?;
    let opts = SessionOptions::try_from(&args.session)?;
    let rec = record_profile(opts, args.duration, args.output.as_deref()).await?;
    emit(&render(&rec.profile, &ReportOptions::from(&args.view))?, None)?;
    rec.unsaved.map_or(Ok(()), |e| Err(e.into()))
}

/// Records with `opts` until `duration` ends or a signal arrives; saves `output`.
pub(crate) async fn record_profile(
    opts: SessionOptions,
    duration: Option<f64>,
    output: Option<&std::path::Path>,
) -> anyhow::Result<Recorded> {
    let output = match output {
        Some(p) => Some(OutputFile::open(p).map_err(|e| UsageError(format!("cannot write the recording: {e}")))?),
        None => None,
    };
    // Signals are caught from before attaching (main holds them until
    // here): one that arrives while the programs attach, or right after the
    // message below, stops the recording cleanly instead of killing the
    // process without a report.
    let (stop, _) = shutdown::on_signal(Hangup::Stop).context("catching SIGINT, SIGTERM and SIGHUP")?;
    let session = Session::start(opts)?;
    let backend = session.backend();
    match duration {
        Some(d) => {
            shutdown::say(&format!("lockprof: recording for {d} s with the {backend} backend (Ctrl-C stops early)"))
        }
        None => shutdown::say(&format!("lockprof: recording with the {backend} backend; Ctrl-C to stop")),
    }
    super::shutdown_or_sleep(&stop, duration.map(Duration::from_secs_f64)).await?;
    let profile = session.finish().await.context("finishing the recording")?;
    let mut unsaved = None;
    if let Some(out) = output {
        let path = out.path().to_path_buf();
        match recording::to_bytes(&path, &profile).and_then(|b| Ok(out.write(&b)?)) {
            Ok(path) => shutdown::say(&format!("lockprof: recording saved to {}", path.display())),
            Err(source) => unsaved = Some(Unsaved { source }),
        }
    }
    Ok(Recorded { profile, unsaved })
}
