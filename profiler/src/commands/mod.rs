//! The subcommands, each a function from parsed arguments to an outcome.

mod bench;
mod doctor;
mod record;
mod report;
mod stress;

pub use bench::bench;
pub use doctor::doctor;
pub use record::record;
pub use report::report;
pub use stress::stress;

use std::io::Write;

use crate::{cli::ViewArgs, report::ReportOptions};

/// Bad input from the user: exit status 2, nothing attached.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub(crate) fn report_options(v: &ViewArgs) -> ReportOptions {
    ReportOptions {
        format: v.format,
        by: v.by,
        sort: v.sort,
        top: v.top,
        callers_per_lock: v.callers,
        separator: v.separator,
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_stdout(s: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Waits for `duration` (forever if `None`) or SIGINT/SIGTERM, whichever is first.
pub(crate) async fn shutdown_or_sleep(duration: Option<std::time::Duration>) -> std::io::Result<()> {
    let stop = crate::shutdown::on_signal()?;
    let sleep = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = sleep => {}
        _ = stop.cancelled() => {}
    }
    Ok(())
}
