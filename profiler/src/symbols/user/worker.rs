//! blazesym's symbolizer on a thread of its own: it keeps `Rc` caches (it is
//! not `Send`), while the pipeline runs on tokio tasks that move between
//! threads. [`super::BlazeSymbolizer`] stays `Send` by talking to it over
//! channels, one stack per round trip.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;

use super::Counters;
use super::frame::UserStack;
use super::pin::PinnedStack;
use super::symbolize::FrameSymbolizer;

/// A symbolized stack and the lookups that failed making it.
pub(super) struct Reply {
    pub(super) stack: UserStack,
    pub(super) failures: u64,
}

pub(super) struct Worker {
    requests: Sender<PinnedStack>,
    replies: Receiver<Reply>,
}

impl Worker {
    pub(super) fn spawn() -> io::Result<Self> {
        let (requests, inbox) = mpsc::channel::<PinnedStack>();
        let (outbox, replies) = mpsc::channel();
        thread::Builder::new().name("lockprof-usym".into()).spawn(move || {
            let mut symbolizer = FrameSymbolizer::new();
            // Ends when the owner drops its sender or its receiver.
            for pinned in inbox {
                let mut counters = Counters::default();
                let stack = symbolizer.symbolize(&pinned, &mut counters);
                let reply = Reply { stack, failures: counters.symbolize_failures };
                if outbox.send(reply).is_err() {
                    break;
                }
            }
        })?;
        Ok(Self { requests, replies })
    }

    /// `None` when the thread is gone (a panic in blazesym).
    pub(super) fn symbolize(&self, pinned: &PinnedStack) -> Option<Reply> {
        self.requests.send(pinned.clone()).ok()?;
        self.replies.recv().ok()
    }
}
