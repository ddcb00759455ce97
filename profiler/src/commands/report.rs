//! `lockprof report`: render a saved recording.

use super::{UsageError, check_binary_stdout, emit};
use crate::{
    cli::ReportArgs,
    recording,
    report::{ReportOptions, render},
};

/// Loads `--input` and prints it (or writes `--output`) in the chosen view.
pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    check_binary_stdout(args.view.format, args.output.is_some())?;
    let profile = recording::load(&args.input).map_err(|e| UsageError(e.to_string()))?;
    emit(&render(&profile, &ReportOptions::from(&args.view))?, args.output.as_deref())
}
