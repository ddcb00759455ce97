//! `lockprof serve`: attach, drop privileges, then serve HTTP until
//! SIGINT/SIGTERM, and detach.

use anyhow::Context as _;

use super::UsageError;
use crate::{
    cli::ServeArgs,
    serve::{self, ServeOptions},
    session::Session,
    shutdown::{self, Hangup},
};

/// Runs the daemon. Attaching and dropping capabilities happen on this
/// (only) thread; the runtime's threads start afterwards and inherit the
/// reduced set.
pub fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let opts = args.session_options()?;
    let sopts = ServeOptions::from(args);
    // Bound before attaching: a taken port or a bad address fails at once.
    let listener = std::net::TcpListener::bind(sopts.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| UsageError(format!("cannot listen on {}: {e}", sopts.listen)))?;
    let addr = listener.local_addr().unwrap_or(sopts.listen);
    if !addr.ip().is_loopback() {
        log::warn!(
            "listening on {addr}, not a loopback address: whoever can reach it can read lock names, kernel stacks and process names"
        );
    }
    let prepared = Session::prepare(opts)?;
    let kept = serve::drop_after_attach(|| prepared.probe_map_access())?;
    log::info!("privileges after attaching: {kept}");
    super::runtime().context("starting the async runtime")?.block_on(async move {
        // A daemon outlives the terminal that started it: SIGHUP is ignored.
        let (stop, hangups) = shutdown::on_signal(Hangup::Ignore).context("catching SIGINT, SIGTERM and SIGHUP")?;
        let mut session = prepared.start()?;
        shutdown::say(&format!(
            "lockprof: serving http://{addr}/metrics and /debug/pprof/mutex with the {} backend ({kept}); Ctrl-C or SIGTERM stops",
            session.backend()
        ));
        let listener = tokio::net::TcpListener::from_std(listener).context("registering the listening socket")?;
        let incidents = session.incidents();
        let served = serve::run(listener, session.profiles(), incidents, &sopts, stop).await;
        let finished = session.finish().await;
        served?;
        finished.context("finishing the session")?;
        match hangups.count() {
            0 => shutdown::say("lockprof: stopped; programs detached"),
            n => shutdown::say(&format!("lockprof: stopped; programs detached ({n} SIGHUP ignored)")),
        }
        Ok(())
    })
}
