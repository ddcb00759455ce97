//! Pinning: a captured user stack normalized to (binary, file offset) while its
//! process is alive, each binary held open so it can be symbolized after the
//! process exits.
//!
//! Normalization is blazesym's [`Normalizer`] over `/proc/<pid>/maps`. Each
//! binary is opened once through `/proc/<pid>/map_files/<range>` (the very
//! file mapped, even if deleted or in another mount namespace; needs
//! `CAP_SYS_ADMIN` or `CAP_CHECKPOINT_RESTORE`), else through
//! `/proc/<pid>/root/<path>`, and cached by device + inode (a `stat`, no
//! open, on a hit) and by build id, so a fork storm of one binary opens it
//! once and processes of one binary share one descriptor.
//!
//! Mappings are looked up on every pin, never cached: a pid can be reused and
//! a live process can map new code (dlopen), so a cache could attribute an
//! ip to the wrong mapping. Where the kernel has the `PROCMAP_QUERY` ioctl
//! (6.11+) blazesym asks it for just the mappings the ips fall in, so a pin
//! costs a few ioctls whatever the size of the process's map; elsewhere it
//! parses `/proc/<pid>/maps`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::normalize::{NormalizeOpts, Normalizer, Reason, UserMeta};
use blazesym::symbolize::Sym;

use super::Counters;
use super::frame::{JIT_MODULE, UserFrame, VDSO_MODULE, is_truncated};
use super::perf_map::PerfMaps;

/// Cached binaries beyond which the cache starts afresh (stacks that still
/// hold a binary keep it open; new pins reopen). Keeps descriptors bounded
/// when a long run sees many short-lived binaries.
const MAX_CACHED_BINARIES: usize = 512;

/// A binary an ip was found in, held open (when it could be opened) for
/// symbolization after its process is gone.
#[derive(Debug)]
pub(super) struct Binary {
    /// Names the contents, never reused: keys the frame cache. Copies of
    /// one binary (same build id) under other paths share it, and the file.
    pub(super) id: u64,
    pub(super) path: Arc<str>,
    pub(super) module: Arc<str>,
    pub(super) build_id: Option<Arc<str>>,
    pub(super) file: Option<Arc<File>>,
}

impl Binary {
    /// A path that reaches the open file from this process, deleted or not.
    pub(super) fn fd_path(&self) -> Option<PathBuf> {
        self.file.as_ref().map(|file| PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
    }

    /// This binary as mapped at `path` (the same one if it is its path).
    fn at(self: &Arc<Self>, path: &str) -> Arc<Self> {
        if &*self.path == path {
            return Arc::clone(self);
        }
        Arc::new(Self {
            id: self.id,
            path: Arc::from(path),
            module: basename(path),
            build_id: self.build_id.clone(),
            file: self.file.clone(),
        })
    }

    /// The frame for an ip in this binary, before symbolization.
    pub(super) fn frame(&self, addr: u64, file_offset: u64) -> UserFrame {
        UserFrame {
            function: None,
            offset: 0,
            file: None,
            line: None,
            module: Arc::clone(&self.module),
            path: Arc::clone(&self.path),
            build_id: self.build_id.clone(),
            file_offset,
            addr,
        }
    }
}

/// One ip of a pinned stack.
#[derive(Clone, Debug)]
pub(super) enum PinnedFrame {
    /// The process was gone: only the ip.
    Unpinned(u64),
    /// Not in a file-backed mapping.
    Unmapped(u64),
    /// In a binary, at a file offset.
    Binary { addr: u64, file_offset: u64, binary: Arc<Binary> },
    /// Already symbolized during normalization (the vDSO, which blazesym
    /// resolves from the live process's memory).
    Resolved(Box<UserFrame>),
}

#[derive(Debug)]
struct Pinned {
    pid: u32,
    pinned: bool,
    truncated: bool,
    frames: Vec<PinnedFrame>,
}

/// A user stack normalized while its process was alive: cheap to clone and
/// store (one `Arc`), symbolizable later.
#[derive(Clone, Debug)]
pub struct PinnedStack(Arc<Pinned>);

impl PinnedStack {
    /// A stack that could not be pinned (its process was gone): it keeps the
    /// raw ips. Also the constructor for tests of code that stores stacks.
    pub fn unpinned(pid: u32, ips: &[u64]) -> Self {
        let frames: Vec<PinnedFrame> = ips.iter().map(|&ip| PinnedFrame::Unpinned(ip)).collect();
        Self::new(pid, false, is_truncated(frames.len(), None), frames)
    }

    pub(super) fn new(pid: u32, pinned: bool, truncated: bool, frames: Vec<PinnedFrame>) -> Self {
        Self(Arc::new(Pinned { pid, pinned, truncated, frames }))
    }

    /// The process the stack was captured in.
    pub fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Whether the process's mappings were read (false: raw ips only).
    pub fn is_pinned(&self) -> bool {
        self.0.pinned
    }

    /// See [`super::UserStack::truncated`].
    pub fn truncated(&self) -> bool {
        self.0.truncated
    }

    /// The captured ips, innermost first.
    pub fn ips(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.frames.iter().map(|frame| match frame {
            PinnedFrame::Unpinned(addr) | PinnedFrame::Unmapped(addr) => *addr,
            PinnedFrame::Binary { addr, .. } => *addr,
            PinnedFrame::Resolved(frame) => frame.addr,
        })
    }

    pub(super) fn frames(&self) -> &[PinnedFrame] {
        &self.0.frames
    }
}

/// What identifies an open file without opening it again.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl From<&fs::Metadata> for FileKey {
    fn from(meta: &fs::Metadata) -> Self {
        Self { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime: meta.mtime(), mtime_nsec: meta.mtime_nsec() }
    }
}

/// Normalizes stacks and keeps their binaries open.
pub(super) struct Pinner {
    normalizer: Normalizer,
    binaries: Binaries,
    /// JIT code's names, from the processes' perf maps.
    perf_maps: PerfMaps,
}

/// The open binaries, by device + inode and by build id.
#[derive(Default)]
struct Binaries {
    by_file: HashMap<FileKey, Arc<Binary>>,
    by_build_id: HashMap<Arc<str>, Arc<Binary>>,
    next_id: u64,
}

impl Pinner {
    pub(super) fn new() -> Self {
        let procmap_query = blazesym::helper::is_procmap_query_supported().unwrap_or(false);
        Self::with_procmap_query(procmap_query)
    }

    /// `procmap_query`: look mappings up with the `PROCMAP_QUERY` ioctl
    /// rather than by parsing `/proc/<pid>/maps`.
    pub(super) fn with_procmap_query(procmap_query: bool) -> Self {
        Self {
            // Build ids are read here from the descriptor kept open, once per
            // binary, not by the normalizer on every stack.
            normalizer: Normalizer::builder().enable_procmap_query(procmap_query).enable_build_ids(false).build(),
            binaries: Binaries::default(),
            perf_maps: PerfMaps::default(),
        }
    }

    pub(super) fn pin(&mut self, pid: u32, ips: &[u64], counters: &mut Counters) -> PinnedStack {
        // blazesym reads pid 0 as "this process": never a waiter's stack.
        if pid == 0 {
            return unpinned(pid, ips, counters);
        }
        let opts = NormalizeOpts { map_files: true, ..NormalizeOpts::default() };
        let normalized = match self.normalizer.normalize_user_addrs_opts(pid.into(), ips, &opts) {
            Ok(n) => n,
            Err(e) => {
                log::debug!("user stack of process {pid} not pinned: {e}");
                return unpinned(pid, ips, counters);
            }
        };
        let metas: Vec<Meta> = normalized
            .meta
            .iter()
            .map(|meta| match meta {
                UserMeta::Elf(elf) => Meta::Binary(self.binaries.get(pid, &elf.path, counters)),
                UserMeta::Sym(sym) => Meta::Vdso(vdso_frame(sym)),
                UserMeta::Unknown(u) if u.reason == Reason::Unmapped => Meta::Nowhere,
                _ => Meta::Unmapped,
            })
            .collect();
        let mut frames: Vec<PinnedFrame> = Vec::with_capacity(ips.len());
        let mut left_code = false;
        let mut jit_map: Option<bool> = None;
        for (&(file_offset, meta), &addr) in normalized.outputs.iter().zip(ips) {
            frames.push(match metas.get(meta) {
                Some(Meta::Binary(binary)) => PinnedFrame::Binary { addr, file_offset, binary: Arc::clone(binary) },
                Some(Meta::Vdso(frame)) => {
                    PinnedFrame::Resolved(Box::new(UserFrame { addr, file_offset, ..frame.clone() }))
                }
                // A return address outside every mapping: the frame-pointer
                // walk went through code without frame pointers and read a
                // value that is no address. It and what follows are guesses.
                Some(Meta::Nowhere) if !frames.is_empty() => {
                    left_code = true;
                    break;
                }
                // Anonymous memory: JIT code if the process's perf map names
                // it (the map brought up to date once per stack).
                Some(Meta::Unmapped) => {
                    let has_map = *jit_map.get_or_insert_with(|| self.perf_maps.refresh(pid));
                    match has_map.then(|| self.jit_frame(pid, addr, !frames.is_empty())).flatten() {
                        Some(frame) => PinnedFrame::Resolved(Box::new(frame)),
                        None => PinnedFrame::Unmapped(addr),
                    }
                }
                Some(Meta::Nowhere) | None => PinnedFrame::Unmapped(addr),
            });
        }
        let outermost_mapped = frames.last().map(|frame| !matches!(frame, PinnedFrame::Unmapped(_)));
        let truncated = left_code || is_truncated(frames.len(), outermost_mapped);
        counters.pinned += 1;
        counters.truncated += u64::from(truncated);
        counters.left_code += u64::from(left_code);
        PinnedStack::new(pid, true, truncated, frames)
    }
}

impl Pinner {
    /// The frame of `addr` in JIT code, named by process `pid`'s perf map
    /// (as of its last refresh);
    /// a return address (`returned`) is looked up at its call instruction.
    fn jit_frame(&self, pid: u32, addr: u64, returned: bool) -> Option<UserFrame> {
        let at = if returned { addr.saturating_sub(1) } else { addr };
        let (symbol, path) = self.perf_maps.find(pid, at)?;
        Some(UserFrame {
            function: Some(symbol.name.to_string()),
            offset: addr - symbol.start,
            file: None,
            line: None,
            module: Arc::from(JIT_MODULE),
            path,
            build_id: None,
            file_offset: 0,
            addr,
        })
    }
}

impl Binaries {
    /// The binary mapped at `map_file` (`/proc/<pid>/map_files/<range>`):
    /// from the cache when its device + inode (or build id) is known, else
    /// opened once and cached.
    fn get(&mut self, pid: u32, map_file: &Path, counters: &mut Counters) -> Arc<Binary> {
        let target = fs::read_link(map_file)
            .map(|target| target.to_string_lossy().into_owned())
            .unwrap_or_else(|_| map_file.to_string_lossy().into_owned());
        let path = target.strip_suffix(" (deleted)").unwrap_or(&target);
        let mut candidates = vec![map_file.to_path_buf()];
        if path.starts_with('/') {
            candidates.push(PathBuf::from(format!("/proc/{pid}/root{path}")));
        }

        let cached = candidates
            .iter()
            .find_map(|candidate| fs::metadata(candidate).ok())
            .and_then(|meta| self.by_file.get(&FileKey::from(&meta)));
        if let Some(binary) = cached {
            return binary.at(path);
        }

        let module = basename(path);
        let Some(file) = candidates.iter().find_map(|candidate| File::open(candidate).ok()) else {
            counters.binaries_unavailable += 1;
            return Arc::new(Binary { id: self.next_id(), path: Arc::from(path), module, build_id: None, file: None });
        };
        let key = file.metadata().ok().map(|meta| FileKey::from(&meta));
        let build_id = read_build_id(&file);
        if let Some(binary) = build_id.as_ref().and_then(|id| self.by_build_id.get(id)) {
            // A copy of a binary already held: its descriptor serves, the
            // path stays this process's.
            let binary = binary.at(path);
            if let Some(key) = key {
                self.by_file.insert(key, Arc::clone(&binary));
            }
            return binary;
        }

        if self.by_file.len() >= MAX_CACHED_BINARIES {
            self.by_file.clear();
            self.by_build_id.clear();
        }
        counters.binaries_opened += 1;
        let binary = Arc::new(Binary {
            id: self.next_id(),
            path: Arc::from(path),
            module,
            build_id: build_id.clone(),
            file: Some(Arc::new(file)),
        });
        if let Some(key) = key {
            self.by_file.insert(key, Arc::clone(&binary));
        }
        if let Some(build_id) = build_id {
            self.by_build_id.insert(build_id, Arc::clone(&binary));
        }
        binary
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

enum Meta {
    Binary(Arc<Binary>),
    Vdso(UserFrame),
    /// In a mapping that is not a file (anonymous, JIT code, the stack).
    Unmapped,
    /// In no mapping at all.
    Nowhere,
}

fn unpinned(pid: u32, ips: &[u64], counters: &mut Counters) -> PinnedStack {
    let stack = PinnedStack::unpinned(pid, ips);
    counters.unpinned += 1;
    counters.truncated += u64::from(stack.truncated());
    stack
}

fn basename(path: &str) -> Arc<str> {
    Arc::from(path.rsplit('/').next().unwrap_or(path))
}

/// The GNU build id note of an open ELF file, in hex.
fn read_build_id(file: &File) -> Option<Arc<str>> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let id = blazesym::helper::read_elf_build_id(&path).ok()??;
    Some(Arc::from(hex(&id)))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A vDSO frame, symbolized by the normalizer (address fields filled in by
/// the caller).
fn vdso_frame(sym: &Sym<'_>) -> UserFrame {
    UserFrame {
        function: Some(sym.name.to_string()),
        offset: sym.offset as u64,
        file: None,
        line: None,
        module: Arc::from(VDSO_MODULE),
        path: Arc::from(VDSO_MODULE),
        build_id: None,
        file_offset: 0,
        addr: 0,
    }
}
