//! Signals: SIGINT and SIGTERM cancel one token that every task watches.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Returns a token cancelled on the first SIGINT or SIGTERM. Must be called
/// inside a tokio runtime.
pub fn on_signal() -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let t = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => log::info!("SIGINT: stopping"),
            _ = term.recv() => log::info!("SIGTERM: stopping"),
        }
        t.cancel();
    });
    Ok(token)
}
