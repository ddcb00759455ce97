//! Names for user-space locks (futex words), one per (process, address).
//!
//! A futex inside a data object of one of the process's ELF images (a C
//! `static pthread_mutex_t`, a Rust `static`) is named by that symbol,
//! demangled, plus `+0xoff` when not at its start. Anything else (heap,
//! stacks, anonymous or shared mappings) gets the class of the mapping it
//! lives in: `[heap]`, `[stack]`, `[anon]`, shared memory as the kernel
//! names it (`[shm: /dev/zero (deleted)]` for a shared anonymous mapping,
//! as PostgreSQL's buffers and LWLocks are; `[shm: /SYSV0052e2c1
//! (deleted)]`, `[shm: /memfd:name (deleted)]`, `[shm: /dev/shm/name]`) or
//! the file's basename.
//!
//! blazesym's symbolizer resolves data symbols (its ELF parser indexes
//! `STT_OBJECT` as well as `STT_FUNC`), but only from a virtual offset: its
//! file-offset and process inputs translate through `p_filesz`, so a
//! zero-initialized static (`.bss`, where almost every lock lives) is never
//! found that way; and it is not `Send`, so a namer could not keep it and
//! would reparse an image's whole symbol table per lookup. So each image's
//! sized data symbols are listed once with blazesym's inspector (a few
//! hundred even in large binaries) and kept by device and inode; names are
//! demangled on a hit. The virtual offset is the address minus the image's
//! load bias, from the mapping of file offset 0 and the program headers read
//! here. `.bss` past the file's last page is an anonymous mapping right
//! after the image (possibly merged into `[heap]`): it is looked up in the
//! image before it, and only a sized symbol covering the address counts.
//!
//! Processes exit: callers name an address when first seen, and the result
//! is cached, so the name stays the same after the process is gone. A
//! process already gone when first asked gives [`UserLockName::UNKNOWN`].

use std::collections::HashMap;
use std::fs::{self, File};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt};

use blazesym::SymType;
use blazesym::inspect::Inspector;
use blazesym::inspect::source::{Elf, Source};
use serde::Serialize;

/// Cached names beyond which the cache starts afresh.
const MAX_CACHED: usize = 1 << 16;
/// Images whose data symbols are kept (most hold a few hundred).
const MAX_CACHED_IMAGES: usize = 256;

/// What a futex address is called: its data symbol, else its mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserLockName {
    /// The demangled data symbol holding the address.
    pub symbol: Option<String>,
    /// Offset of the address from the symbol's start (0 without a symbol).
    pub offset: u64,
    /// The image holding the symbol, else the mapping class: `[heap]`,
    /// `[stack]`, `[anon]`, a file's basename. `None`: the process was gone
    /// (or the address not mapped) when first asked.
    pub mapping: Option<String>,
}

impl UserLockName {
    /// The label of an address that could not be named.
    pub const UNKNOWN: &'static str = "[unknown]";

    /// `sym`, `sym+0x8`, `[heap]`, `libfoo.so`, or [`Self::UNKNOWN`].
    pub fn label(&self) -> String {
        match (&self.symbol, &self.mapping) {
            (Some(symbol), _) if self.offset == 0 => symbol.clone(),
            (Some(symbol), _) => format!("{symbol}+{:#x}", self.offset),
            (None, Some(mapping)) => mapping.clone(),
            (None, None) => Self::UNKNOWN.to_string(),
        }
    }

    /// Whether nothing is known about the address.
    pub fn is_unknown(&self) -> bool {
        self.symbol.is_none() && self.mapping.is_none()
    }
}

/// What the namer did, for the counters lockprof shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserLockNamerCounters {
    /// First lookups of a (pid, address), each reading the process's maps.
    pub named: u64,
    /// Of those, the ones that found nothing (process gone, address unmapped).
    pub unknown: u64,
    /// Lookups answered from the cache.
    pub cached: u64,
}

/// (device, inode) -> the image's data symbols, `None` when not readable.
type ImageCache = HashMap<(u64, u64), Option<DataSymbols>>;

/// Names futex addresses and caches the names per (pid, address). `Send`:
/// blazesym's inspector (which is not) lives only while an image is read.
#[derive(Debug, Default)]
pub struct UserLockNamer {
    names: HashMap<(u32, u64), UserLockName>,
    /// Images read so far, shared by the processes of one binary.
    images: ImageCache,
    counters: UserLockNamerCounters,
}

impl UserLockNamer {
    pub fn new() -> Self {
        Self::default()
    }

    /// The name of `addr` in process `pid`: looked up the first time (call
    /// it while the process is alive), cached after.
    pub fn name(&mut self, pid: u32, addr: u64) -> &UserLockName {
        if self.names.contains_key(&(pid, addr)) {
            self.counters.cached += 1;
        } else {
            if self.names.len() >= MAX_CACHED {
                self.names.clear();
            }
            let name = lookup(&mut self.images, pid, addr);
            self.counters.named += 1;
            self.counters.unknown += u64::from(name.is_unknown());
            self.names.insert((pid, addr), name);
        }
        self.names.entry((pid, addr)).or_default()
    }

    pub fn counters(&self) -> UserLockNamerCounters {
        self.counters
    }
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    dev: u64,
    inode: u64,
    path: String,
}

impl Mapping {
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let _perms = fields.next()?;
        let offset = fields.next()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        let inode = fields.next()?;
        let hex = |text: &str| u64::from_str_radix(text, 16).ok();
        Some(Self {
            start: hex(start)?,
            end: hex(end)?,
            offset: hex(offset)?,
            dev: hex(major)? << 32 | hex(minor)?,
            inode: inode.parse().ok()?,
            path: fields.next().unwrap_or("").trim_start().to_string(),
        })
    }

    fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// `[heap]`, `[stack]`, `[anon]`, another kernel name, shared memory
    /// (`[shm: <path as the kernel says it>]`), or the basename.
    fn class(&self) -> String {
        if self.path.is_empty() {
            return "[anon]".to_string();
        }
        if !self.is_file() {
            return self.path.clone();
        }
        if is_shared_memory(&self.path) {
            return format!("[shm: {}]", self.path);
        }
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path).to_string()
    }
}

/// Paths the kernel gives shared memory: a shared anonymous mapping
/// (`/dev/zero (deleted)`), System V segments (`/SYSV<key> (deleted)`),
/// memfds (`/memfd:<name> (deleted)`) and POSIX shared memory (`/dev/shm/`).
fn is_shared_memory(path: &str) -> bool {
    path.starts_with("/dev/zero")
        || path.starts_with("/SYSV")
        || path.starts_with("/memfd:")
        || path.starts_with("/dev/shm/")
}

fn lookup(images: &mut ImageCache, pid: u32, addr: u64) -> UserLockName {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return UserLockName::default();
    };
    let maps: Vec<Mapping> = maps.lines().filter_map(Mapping::parse).collect();
    let Some(at) = maps.iter().position(|map| map.start <= addr && addr < map.end) else {
        return UserLockName::default();
    };
    // The image whose data the address may be: its own file, or for `.bss`
    // past the file's last page, the file mapped right before.
    let image = if maps[at].is_file() {
        Some(&maps[at])
    } else if matches!(maps[at].path.as_str(), "" | "[heap]") && at > 0 {
        Some(&maps[at - 1]).filter(|before| before.is_file() && before.end == maps[at].start)
    } else {
        None
    };
    if let Some(image) = image
        && let Some((path, offset)) = virtual_offset(pid, &maps, image, addr)
    {
        if images.len() >= MAX_CACHED_IMAGES && !images.contains_key(&(image.dev, image.inode)) {
            images.clear();
        }
        let symbols = images.entry((image.dev, image.inode)).or_insert_with(|| DataSymbols::read(&path));
        if let Some((symbol, offset)) = symbols.as_ref().and_then(|symbols| symbols.find(offset)) {
            return UserLockName { symbol: Some(symbol), offset, mapping: Some(image.class()) };
        }
    }
    UserLockName { symbol: None, offset: 0, mapping: Some(maps[at].class()) }
}

/// A path that reaches the very image mapped, and the address as an offset
/// in the image's virtual address space.
fn virtual_offset(pid: u32, maps: &[Mapping], image: &Mapping, addr: u64) -> Option<(String, u64)> {
    // The mapping of the image's first page: its load bias.
    let base = maps.iter().find(|map| map.dev == image.dev && map.inode == image.inode && map.offset == 0)?;
    // The exact file mapped (even if deleted; needs CAP_SYS_ADMIN), else its
    // path in the process's root, if it is still the same file.
    let candidates =
        [format!("/proc/{pid}/map_files/{:x}-{:x}", base.start, base.end), format!("/proc/{pid}/root{}", base.path)];
    let path = candidates
        .into_iter()
        .find(|path| fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.ino() == image.inode))?;
    let bias = base.start.checked_sub(first_segment_vaddr(&File::open(&path).ok()?)?)?;
    Some((path, addr.checked_sub(bias)?))
}

/// The virtual address of the loadable segment at file offset 0 of a 64-bit
/// little-endian ELF file (x86_64, aarch64); `None` for anything else.
fn first_segment_vaddr(file: &File) -> Option<u64> {
    const PT_LOAD: u32 = 1;
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if header[..6] != *b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |bytes: &[u8], at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u64_at = |bytes: &[u8], at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let phoff = u64_at(&header, 32)?;
    // Elf64_Phdr entries, at most 65535 of them.
    if u16_at(&header, 54)? != 56 {
        return None;
    }
    let mut headers = vec![0u8; 56 * usize::from(u16_at(&header, 56)?)];
    file.read_exact_at(&mut headers, phoff).ok()?;
    headers.chunks_exact(56).find_map(|phdr| {
        let is_load = phdr.get(..4)? == PT_LOAD.to_le_bytes();
        (is_load && u64_at(phdr, 8)? == 0).then(|| u64_at(phdr, 16)).flatten()
    })
}

/// An image's sized data symbols (`STT_OBJECT` in `.symtab` and `.dynsym`),
/// by virtual address, names as in the file. Sizeless symbols (`__bss_start`,
/// `_end`) are left out: they would name whatever follows them.
#[derive(Debug)]
struct DataSymbols(Vec<(u64, u64, Box<str>)>);

impl DataSymbols {
    /// `None` when the file is not an ELF file blazesym can read.
    fn read(path: &str) -> Option<Self> {
        let mut source = Elf::new(path);
        source.debug_syms = false;
        let mut symbols = Vec::new();
        Inspector::new()
            .for_each(&Source::Elf(source), |sym| {
                let size = sym.size.unwrap_or(0) as u64;
                if sym.sym_type == SymType::Variable && size > 0 {
                    symbols.push((sym.addr, size, Box::from(sym.name.as_ref())));
                }
                ControlFlow::Continue(())
            })
            .ok()?;
        // By address, the largest first among equals; one per address.
        symbols.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|symbol| symbol.0);
        Some(Self(symbols))
    }

    /// The demangled symbol covering `addr` and the offset into it.
    fn find(&self, addr: u64) -> Option<(String, u64)> {
        let after = self.0.partition_point(|symbol| symbol.0 <= addr);
        let (start, size, name) = self.0.get(after.checked_sub(1)?)?;
        (addr - start < *size).then(|| (demangle(name), addr - start))
    }
}

/// A Rust (legacy or v0) or C++ symbol demangled, Rust without its hash;
/// other names as they are.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    cpp_demangle::Symbol::new(name).ok().and_then(|symbol| symbol.demangle().ok()).unwrap_or_else(|| name.to_string())
}

// The pipeline keeps the namer in tokio tasks, which move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<UserLockNamer>();
};

#[cfg(test)]
#[path = "locks_tests.rs"]
mod tests;
