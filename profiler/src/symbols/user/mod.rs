//! User-space stacks: captured ips turned into frames with blazesym.
//!
//! Two phases, because processes exit (a fork storm's children live
//! milliseconds): [`UserSymbolizer::pin`] runs as soon as a stack is known and
//! its process is (likely) alive, normalizing each ip to (binary, file offset,
//! build id) and holding each binary open; [`UserSymbolizer::symbolize`] runs
//! lazily, possibly after the process is gone. Nothing is dropped: a frame
//! that cannot be symbolized reads `module+0xoff [build-id ..]`, one outside
//! any mapping `[unknown] 0x..`, and a stack whose process was gone before
//! pinning keeps its raw ips.

mod debug_files;
mod frame;
mod locks;
mod perf_map;
mod pin;
mod resolver;
mod symbolize;
#[cfg(test)]
mod tests;
pub mod unwind;
mod worker;

use std::sync::Arc;

use serde::Serialize;

pub use debug_files::{DEBUGINFOD_URLS, DEFAULT_DEBUG_DIRS, DebugFileOptions};
pub use frame::{
    JIT_MODULE, UNMAPPED_MODULE, UNPINNED_MODULE, UserFrame, UserStack, VDSO_MODULE, short_function, short_jit_function,
};
pub use locks::{UserLockName, UserLockNamer, UserLockNamerCounters};
pub use pin::PinnedStack;
pub use resolver::{USER_STACK_EVICTED, UserResolver, UserStackSource};

/// What the user-stack symbolizer saw, for the counters lockprof shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserStackCounters {
    /// Stacks normalized against their live process.
    pub pinned: u64,
    /// Stacks whose process was gone (or unreadable) before pinning: raw ips.
    pub unpinned: u64,
    /// Stacks that are truncated (one frame, or the outermost frame outside
    /// any mapped binary), pinned or not.
    pub truncated: u64,
    /// Of those, stacks cut where the frame-pointer walk left mapped code:
    /// a frame outside every mapping is a guess, never shown.
    pub left_code: u64,
    /// Binaries opened and held (each once, however many processes map it).
    pub binaries_opened: u64,
    /// Binaries that could not be opened: their frames stay `module+offset`.
    pub binaries_unavailable: u64,
    /// Distinct (binary, offset) lookups that found no symbol.
    pub symbolize_failures: u64,
    /// Debug files fetched from debuginfod (`DEBUGINFOD_URLS`), one per
    /// binary whose debug file was not installed.
    pub debuginfod_fetched: u64,
    /// Binaries whose debug file debuginfod did not give.
    pub debuginfod_missed: u64,
}

/// Counters are kept by the implementation and handed out by value.
pub(crate) type Counters = UserStackCounters;

/// The seam between the pipeline and symbolization, so the pipeline can be
/// tested without blazesym or live processes.
pub trait UserSymbolizer {
    /// Normalizes `ips` (innermost first) of process `pid` while it is alive.
    fn pin(&mut self, pid: u32, ips: &[u64]) -> PinnedStack;
    /// Turns a pinned stack into frames; works after the process exited.
    fn symbolize(&mut self, pinned: &PinnedStack) -> Arc<UserStack>;
    /// What was seen so far.
    fn counters(&self) -> UserStackCounters;
}

/// Why the symbolizer could not start.
#[derive(Debug, thiserror::Error)]
pub enum UserSymbolsError {
    #[error("cannot start the user-stack symbolizer thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The blazesym implementation: pins on the caller's thread, symbolizes on
/// a thread of its own (see `worker`), so it is `Send`.
pub struct BlazeSymbolizer {
    pinner: pin::Pinner,
    worker: worker::Worker,
    counters: Counters,
}

impl BlazeSymbolizer {
    pub fn new(debug: &DebugFileOptions) -> Result<Self, UserSymbolsError> {
        Ok(Self {
            pinner: pin::Pinner::new(),
            worker: worker::Worker::spawn(debug.clone()).map_err(UserSymbolsError::Thread)?,
            counters: Counters::default(),
        })
    }
}

impl UserSymbolizer for BlazeSymbolizer {
    fn pin(&mut self, pid: u32, ips: &[u64]) -> PinnedStack {
        self.pinner.pin(pid, ips, &mut self.counters)
    }

    fn symbolize(&mut self, pinned: &PinnedStack) -> Arc<UserStack> {
        if let Some(reply) = self.worker.symbolize(pinned) {
            let c = &mut self.counters;
            c.symbolize_failures += reply.counters.symbolize_failures;
            c.debuginfod_fetched += reply.counters.debuginfod_fetched;
            c.debuginfod_missed += reply.counters.debuginfod_missed;
            return Arc::new(reply.stack);
        }
        // The symbolizer thread is gone: keep every frame as pinned.
        let frames: Vec<UserFrame> = pinned.frames().iter().map(symbolize::unsymbolized).collect();
        self.counters.symbolize_failures += frames.iter().filter(|frame| frame.function.is_none()).count() as u64;
        Arc::new(UserStack { frames, truncated: pinned.truncated() })
    }

    fn counters(&self) -> UserStackCounters {
        self.counters
    }
}

// The pipeline keeps these in tokio tasks, which move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<BlazeSymbolizer>();
    send::<PinnedStack>();
    send::<UserStack>();
};
