//! blazesym's symbolizer on a thread of its own: it keeps `Rc` caches (it is
//! not `Send`), while the pipeline runs on tokio tasks that move between
//! threads. [`super::BlazeSymbolizer`] stays `Send` by talking to it over
//! channels, one stack per round trip.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;

use super::Counters;
use super::debug_files::DebugFileOptions;
use super::frame::UserStack;
use super::pin::PinnedStack;
use super::symbolize::FrameSymbolizer;

/// A symbolized stack, and what making it counted (failed lookups, debug
/// files fetched).
pub(super) struct Reply {
    pub(super) stack: UserStack,
    pub(super) counters: Counters,
}

pub(super) struct Worker {
    /// `None` once dropping: the thread then ends its loop.
    requests: Option<Sender<PinnedStack>>,
    replies: Receiver<Reply>,
    /// Joined on drop, so the symbolizer's own clean-up (debuginfod's links
    /// directory) runs before the process exits.
    thread: Option<thread::JoinHandle<()>>,
}

impl Worker {
    pub(super) fn spawn(debug: DebugFileOptions) -> io::Result<Self> {
        let (requests, inbox) = mpsc::channel::<PinnedStack>();
        let (outbox, replies) = mpsc::channel();
        let thread = thread::Builder::new().name("lockprof-usym".into()).spawn(move || {
            let mut symbolizer = FrameSymbolizer::new(&debug);
            // Ends when the owner drops its sender or its receiver.
            for pinned in inbox {
                let mut counters = Counters::default();
                let stack = symbolizer.symbolize(&pinned, &mut counters);
                let reply = Reply { stack, counters };
                if outbox.send(reply).is_err() {
                    break;
                }
            }
        })?;
        Ok(Self { requests: Some(requests), replies, thread: Some(thread) })
    }

    /// `None` when the thread is gone (a panic in blazesym).
    pub(super) fn symbolize(&self, pinned: &PinnedStack) -> Option<Reply> {
        self.requests.as_ref()?.send(pinned.clone()).ok()?;
        self.replies.recv().ok()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop (after at most the
        // stack it is symbolizing).
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
