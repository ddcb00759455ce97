//! `lockprof record`: profile the live kernel, for a duration, until a
//! signal, or for a command's lifetime (`command`), once or in rounds
//! (`rounds`).

mod command;
mod rounds;

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::{UsageError, check_binary_stdout, emit};
use crate::{
    cli::RecordArgs,
    incident::IncidentOptions,
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
    /// The first incident a trigger wrote (with `--trigger`).
    pub incident: Option<Arc<Profile>>,
}

/// Records until the duration ends or a signal arrives, then reports, or
/// records rounds, or a command's lifetime; the exit status (a command's
/// own, else 0). When the recording cannot be saved (a full disk), the
/// report is still printed, then one line says why the file is missing
/// (exit status 1).
pub async fn record(args: &RecordArgs) -> anyhow::Result<u8> {
    check_binary_stdout(args.view.format, false)?;
    if !args.command.is_empty() || args.rounds > 1 {
        return rounds::record_rounds(args).await;
    }
    let opts = SessionOptions::try_from(&args.session)?.with_incidents(IncidentOptions::from(&args.incident));
    let rec = record_profile(opts, args.duration, args.output.as_deref()).await?;
    // With triggers, the report is the incident's (the first one).
    let shown = rec.incident.as_deref().unwrap_or(&rec.profile);
    emit(&render(shown, &ReportOptions::from(&args.view))?, None)?;
    rec.unsaved.map_or(Ok(0), |e| Err(e.into()))
}

/// Opens the recording's file before anything is attached (bad input: exit 2).
fn open_output(path: Option<&std::path::Path>) -> Result<Option<OutputFile>, UsageError> {
    path.map(|p| OutputFile::open(p).map_err(|e| UsageError(format!("cannot write the recording: {e}")))).transpose()
}

/// Saves `profile` to `out`, saying where; why not, when it cannot.
fn save(out: OutputFile, profile: &Profile) -> Option<Unsaved> {
    let path = out.path().to_path_buf();
    match recording::to_bytes(&path, profile).and_then(|b| Ok(out.write(&b)?)) {
        Ok(path) => {
            shutdown::say(&format!("lockprof: recording saved to {}", path.display()));
            None
        }
        Err(source) => Some(Unsaved { source }),
    }
}

/// Records with `opts` until `duration` ends or a signal arrives; saves `output`.
pub(crate) async fn record_profile(
    opts: SessionOptions,
    duration: Option<f64>,
    output: Option<&std::path::Path>,
) -> anyhow::Result<Recorded> {
    let output = open_output(output)?;
    // Signals are caught from before attaching (main holds them until
    // here): one that arrives while the programs attach, or right after the
    // message below, stops the recording cleanly instead of killing the
    // process without a report.
    let (stop, _) = shutdown::on_signal(Hangup::Stop).context("catching SIGINT, SIGTERM and SIGHUP")?;
    let (profile, incident) = record_until(opts, duration, &stop, "").await?;
    let unsaved = output.and_then(|out| save(out, &profile));
    Ok(Recorded { profile, unsaved, incident })
}

/// Records with `opts` until `duration` ends, `stop` is cancelled or a
/// trigger's incident is written; the profile, and the first incident.
/// `what` follows "recording" in the line said once attached.
async fn record_until(
    opts: SessionOptions,
    duration: Option<f64>,
    stop: &CancellationToken,
    what: &str,
) -> anyhow::Result<(Profile, Option<Arc<Profile>>)> {
    let session = Session::start(opts)?;
    let backend = session.backend();
    let incidents = session.incidents();
    match duration {
        Some(d) => shutdown::say(&format!(
            "lockprof: recording{what} for {d} s with the {backend} backend (Ctrl-C stops early)"
        )),
        None => shutdown::say(&format!("lockprof: recording{what} with the {backend} backend; Ctrl-C to stop")),
    }
    if let Some(log) = &incidents {
        shutdown::say(&format!(
            "lockprof: recording until a trigger fires ({}); incidents go to {}",
            log.borrow().fired.iter().map(|(t, _)| format!("`{t}`")).collect::<Vec<_>>().join(", "),
            log.borrow().dir.display()
        ));
    }
    tokio::select! {
        r = super::shutdown_or_sleep(stop, duration.map(Duration::from_secs_f64)) => r?,
        () = first_incident(incidents.clone()) => {}
    }
    let profile = session.finish().await.context("finishing the recording")?;
    // The session's end captures a window still open: read the log after it.
    let incident = incidents.as_ref().and_then(|rx| {
        let log = rx.borrow();
        match log.written.first() {
            Some(w) => shutdown::say(&format!(
                "lockprof: incident {} ({}) written to {}; its report follows",
                w.id,
                w.reason,
                w.path.display()
            )),
            None => shutdown::say("lockprof: no trigger fired; the report is of the whole recording"),
        }
        log.last.clone()
    });
    Ok((profile, incident))
}

/// Returns once a trigger's incident is written (never without triggers).
async fn first_incident(rx: Option<tokio::sync::watch::Receiver<Arc<crate::incident::IncidentLog>>>) {
    let Some(mut rx) = rx else { return std::future::pending().await };
    if rx.wait_for(|log| !log.written.is_empty()).await.is_err() {
        std::future::pending::<()>().await;
    }
}
