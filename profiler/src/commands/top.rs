//! `lockprof top`: the live dashboard.

use std::time::Duration;

use crate::{cli::TopArgs, incident::IncidentOptions, session::SessionOptions};

/// Runs the dashboard on the session options every recording command shares.
pub async fn top(args: &TopArgs) -> anyhow::Result<()> {
    let mut opts = SessionOptions::try_from(&args.session)?.with_incidents(IncidentOptions::from(&args.incident));
    opts.publish_interval = Duration::from_secs_f64(args.interval);
    crate::tui::run(opts).await
}
