//! `lockprof report`: render a saved recording.

use crate::{cli::ReportArgs, recording, report::render};

use super::{UsageError, check_binary_stdout, emit, report_options};

/// Loads `--input` and prints it (or writes `--output`) in the chosen view.
pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    check_binary_stdout(args.view.format, args.output.is_some())?;
    let profile = recording::load(&args.input).map_err(|e| UsageError(e.to_string()))?;
    emit(&render(&profile, &report_options(&args.view))?, args.output.as_deref())
}
