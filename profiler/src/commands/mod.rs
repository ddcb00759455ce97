//! The subcommands, each a function from parsed arguments to an outcome.

mod diff;
mod doctor;
mod flamegraph;
mod record;
mod report;
mod serve;
mod stress;
mod top;

pub use diff::diff;
pub use doctor::{doctor, render_doctor};
pub use flamegraph::flamegraph;
pub use record::record;
pub use report::report;
pub use serve::serve;
pub use stress::stress;
pub use top::top;

use std::io::Write;

pub use crate::cli::UsageError;

/// The runtime every live command runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_stdout(s: &str) -> std::io::Result<()> {
    write_stdout(s.as_bytes())
}

/// Writes bytes to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn write_stdout(b: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(b).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Binary output must not go to a terminal: checked before any work is done.
pub(crate) fn check_binary_stdout(format: crate::report::Format, to_file: bool) -> Result<(), UsageError> {
    use std::io::IsTerminal as _;
    if format == crate::report::Format::Pprof && !to_file && std::io::stdout().is_terminal() {
        return Err(UsageError(
            "pprof output is binary: redirect stdout to a file, or use `lockprof report --input REC --format pprof --output FILE`"
                .into(),
        ));
    }
    Ok(())
}

/// Writes a rendered report to `path`, or stdout.
pub(crate) fn emit(bytes: &[u8], path: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context as _;
    match path {
        Some(p) => {
            write_file(p, bytes)?;
        }
        None => write_stdout(bytes).context("writing the report to stdout")?,
    }
    Ok(())
}

/// Writes a whole file: a path that cannot be opened is bad input (exit
/// status 2); a write that fails (a full disk) is not (1), and leaves no
/// partial file.
pub(crate) fn write_file(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<std::path::PathBuf> {
    let out = crate::output_file::OutputFile::open(path).map_err(|e| UsageError(format!("cannot write {e}")))?;
    out.write(bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {e}; nothing partial was left there (an earlier file is kept)"))
}

/// Waits for `duration` (forever if `None`) or SIGINT/SIGTERM, whichever is first.
pub(crate) async fn shutdown_or_sleep(
    stop: &tokio_util::sync::CancellationToken,
    duration: Option<std::time::Duration>,
) -> std::io::Result<()> {
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
