//! `lockprof report`: render a saved recording.

use crate::{cli::ReportArgs, recording, report::render};

use super::{UsageError, print_stdout, report_options};

/// Loads `--input` and prints it in the chosen view.
pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let profile = recording::load(&args.input).map_err(|e| UsageError(e.to_string()))?;
    print_stdout(&render(&profile, &report_options(&args.view)))?;
    Ok(())
}
