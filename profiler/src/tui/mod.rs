//! `lockprof top`: a live dashboard on the same session and snapshots as
//! `record`. Thin runner: events in, actions on the [`App`], effects (reset,
//! export) performed here, rendering as a pure widget.

mod app;
mod keys;
mod ui;
mod view;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

pub use app::{App, Effect, View};
pub use keys::{Action, BINDINGS, action_for};
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEvent, KeyEventKind};
use tokio::sync::mpsc;

use crate::{
    pipeline::Control,
    recording,
    session::{Session, SessionOptions},
};

/// Everything the loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// A key press.
    Key(KeyEvent),
    /// The terminal was resized (redraw).
    Resize,
}

/// Reads terminal events on a thread of its own (crossterm's read blocks).
fn spawn_input(tx: mpsc::Sender<Event>, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(200)) {
                Ok(true) => {
                    let ev = match event::read() {
                        Ok(TermEvent::Key(k)) if k.kind == KeyEventKind::Press => Event::Key(k),
                        Ok(TermEvent::Resize(..)) => Event::Resize,
                        Ok(_) => continue,
                        Err(_) => break,
                    };
                    if tx.blocking_send(ev).is_err() {
                        break;
                    }
                }
                Ok(false) => {}
                Err(_) => break,
            }
        }
    });
}

/// The next change of the incident log (never, without triggers or once
/// the session is gone).
async fn next_incidents(
    rx: &mut Option<tokio::sync::watch::Receiver<Arc<crate::incident::IncidentLog>>>,
) -> Option<Arc<crate::incident::IncidentLog>> {
    if let Some(r) = rx
        && r.changed().await.is_ok()
    {
        return Some(r.borrow_and_update().clone());
    }
    std::future::pending().await
}

/// Runs the dashboard until quit, SIGINT, SIGTERM or SIGHUP (its terminal
/// closed); then restores the terminal (if still there) and detaches.
pub async fn run(opts: SessionOptions) -> anyhow::Result<()> {
    let (stop_signal, _) = crate::shutdown::on_signal(crate::shutdown::Hangup::Stop)?;
    // Attach before taking over the terminal, so errors print normally.
    let mut session = Session::start(opts)?;
    let mut profiles = session.profiles();
    let mut incidents = session.incidents();
    let control = session.control();
    let mut terminal = ratatui::init();
    let (tx, mut rx) = mpsc::channel(64);
    let input_stop = Arc::new(AtomicBool::new(false));
    spawn_input(tx, input_stop.clone());

    let mut app = App::new();
    if let Some(rx) = &incidents {
        app.on_incidents(rx.borrow().clone());
    }
    let result: anyhow::Result<()> = async {
        loop {
            terminal.draw(|f| f.render_widget(&app, f.area()))?;
            let effect = tokio::select! {
                ev = rx.recv() => match ev {
                    Some(Event::Key(k)) => app.on_key(k),
                    Some(Event::Resize) => Effect::None,
                    None => Effect::Quit,
                },
                changed = profiles.changed() => {
                    if changed.is_err() {
                        Effect::Quit
                    } else {
                        // Built (and symbolized) by the session's profile task, not here.
                        let profile = profiles.borrow_and_update().clone();
                        app.on_profile(profile, session.elapsed().as_secs_f64());
                        Effect::None
                    }
                }
                Some(log) = next_incidents(&mut incidents) => {
                    app.on_incidents(log);
                    Effect::None
                }
                _ = stop_signal.cancelled() => Effect::Quit,
            };
            match effect {
                Effect::None => {}
                Effect::Quit => break,
                Effect::Reset => {
                    let _ = control.send(Control::Reset).await;
                }
                Effect::Export => {
                    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
                    let path = std::path::PathBuf::from(format!("lockprof-top-{secs}.lockprof"));
                    let saved = recording::save(&path, &app.profile);
                    app.on_export(saved);
                }
            }
        }
        Ok(())
    }
    .await;
    input_stop.store(true, Ordering::Relaxed);
    // After a hangup the terminal is gone: restoring it fails, quietly
    // (ratatui::restore would print, and printing to a closed terminal panics).
    let _ = ratatui::try_restore();
    session.finish().await?;
    result
}
