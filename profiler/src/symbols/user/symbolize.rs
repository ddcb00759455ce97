//! Symbolization of pinned stacks with blazesym: ELF symbols, DWARF file:line
//! when present, demangled names, each (binary, file offset) looked up once.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use blazesym::symbolize::evict::{self, Evict};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use super::Counters;
use super::debug_files::{DebugFile, DebugFileOptions, DebugFiles};
use super::frame::{UserFrame, UserStack};
use super::pin::{Binary, PinnedFrame, PinnedStack};

/// Cached frame lookups beyond which the cache starts afresh.
const MAX_CACHED_FRAMES: usize = 1 << 16;

/// What one lookup found.
#[derive(Clone, Debug)]
struct Symbol {
    function: String,
    /// Offset of the looked-up file offset from the function's start.
    offset: u64,
    file: Option<String>,
    line: Option<u32>,
}

pub(super) struct FrameSymbolizer {
    symbolizer: Symbolizer,
    /// (binary id, looked-up file offset) -> symbol, `None` when not found.
    frames: HashMap<(u64, u64), Option<Symbol>>,
    /// Binaries blazesym has opened (by their `/proc/self/fd` path), so its
    /// cached copy is released once the file is closed.
    sources: HashMap<u64, (Weak<File>, PathBuf)>,
    /// Separate debug files: where to look, and debuginfod.
    debug: DebugFiles,
}

impl FrameSymbolizer {
    pub(super) fn new(debug: &DebugFileOptions) -> Self {
        let debug = DebugFiles::new(debug);
        Self {
            symbolizer: Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .set_debug_dirs(Some(debug.search_dirs()))
                .build(),
            frames: HashMap::new(),
            sources: HashMap::new(),
            debug,
        }
    }

    pub(super) fn symbolize(&mut self, pinned: &PinnedStack, counters: &mut Counters) -> UserStack {
        let frames = pinned
            .frames()
            .iter()
            .enumerate()
            .map(|(depth, pinned_frame)| {
                let mut frame = unsymbolized(pinned_frame);
                if let PinnedFrame::Binary { file_offset, binary, .. } = pinned_frame {
                    // Outer frames hold return addresses: look up the call
                    // instruction (ip - 1) so a call ending a function or a
                    // line is attributed to it; the offset shown stays the
                    // ip's.
                    let lookup = if depth > 0 { file_offset.saturating_sub(1) } else { *file_offset };
                    if let Some(symbol) = self.lookup(binary, lookup, counters) {
                        frame.function = Some(symbol.function);
                        frame.offset = symbol.offset + (file_offset - lookup);
                        frame.file = symbol.file;
                        frame.line = symbol.line;
                    }
                }
                frame
            })
            .collect();
        UserStack { frames, truncated: pinned.truncated() }
    }

    fn lookup(&mut self, binary: &Binary, file_offset: u64, counters: &mut Counters) -> Option<Symbol> {
        if let Some(symbol) = self.frames.get(&(binary.id, file_offset)) {
            return symbol.clone();
        }
        // A binary that could not be opened has no symbols to find: its
        // frames keep module+offset, counted as binaries_unavailable.
        let file = binary.file.as_ref()?;
        let path = binary.fd_path()?;
        if self.frames.len() >= MAX_CACHED_FRAMES {
            self.frames.clear();
        }
        if !self.sources.contains_key(&binary.id) {
            // A new binary is rare next to lookups: a good time to let go of
            // the ones dropped since.
            self.release_dropped_binaries();
            self.sources.insert(binary.id, (Arc::downgrade(file), path.clone()));
            // Before blazesym first opens it: it looks for the debug file then.
            match self.debug.prepare(binary.build_id.as_deref(), file) {
                DebugFile::Fetched => counters.debuginfod_fetched += 1,
                DebugFile::NotFetched => counters.debuginfod_missed += 1,
                DebugFile::Local | DebugFile::Absent => {}
            }
        }
        let source = Source::Elf(Elf::new(path));
        let symbol = match self.symbolizer.symbolize_single(&source, Input::FileOffset(file_offset)) {
            Ok(Symbolized::Sym(sym)) => Some(Symbol {
                function: sym.name.into_owned(),
                offset: sym.offset as u64,
                file: sym.code_info.as_ref().map(|info| info.to_path().to_string_lossy().into_owned()),
                line: sym.code_info.as_ref().and_then(|info| info.line),
            }),
            Ok(Symbolized::Unknown(_)) | Err(_) => None,
        };
        counters.symbolize_failures += u64::from(symbol.is_none());
        self.frames.insert((binary.id, file_offset), symbol.clone());
        symbol
    }

    /// Evicts blazesym's cached copy of every binary whose file is closed
    /// (its descriptor number may be reused).
    fn release_dropped_binaries(&mut self) {
        let symbolizer = &mut self.symbolizer;
        self.sources.retain(|_, (file, path)| {
            let alive = file.strong_count() > 0;
            if !alive {
                let evict = Evict::Elf(evict::Elf::new(path.clone()));
                // Best effort: a failed eviction only keeps memory longer.
                let _ = symbolizer.evict(&evict);
            }
            alive
        });
    }
}

/// A pinned frame as a frame, before (or without) symbolization.
pub(super) fn unsymbolized(frame: &PinnedFrame) -> UserFrame {
    match frame {
        PinnedFrame::Unpinned(addr) => UserFrame::unpinned(*addr),
        PinnedFrame::Unmapped(addr) => UserFrame::unmapped(*addr),
        PinnedFrame::Resolved(frame) => (**frame).clone(),
        PinnedFrame::Binary { addr, file_offset, binary } => binary.frame(*addr, *file_offset),
    }
}
