//! Names for user-space locks (futex words), one per (process, address).
//!
//! A futex inside a data object of one of the process's ELF images (a C
//! `static pthread_mutex_t`, a Rust `static`) is named by that symbol,
//! demangled, plus `+0xoff` when not at its start. Anything else (heap,
//! stacks, anonymous or shared mappings) gets the class of the mapping it
//! lives in: `[heap]`, `[stack]`, `[anon]` or the file's basename.
//!
//! blazesym resolves data symbols (its ELF parser indexes `STT_OBJECT` as
//! well as `STT_FUNC`), but only from a virtual offset: its file-offset and
//! process paths translate through `p_filesz`, so a zero-initialized static
//! (`.bss`, where almost every lock lives) is never found that way. The
//! virtual offset is the address minus the image's load bias, taken from the
//! mapping of file offset 0 and the program headers read here. `.bss` past
//! the file's last page is an anonymous mapping right after the image's
//! (possibly merged into `[heap]`): it is looked up in the image before it,
//! and only a sized symbol covering the address counts.
//!
//! Processes exit: callers name an address when first seen, and the result
//! is cached, so the name stays the same after the process is gone. A
//! process already gone when first asked gives [`UserLockName::UNKNOWN`].

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use serde::Serialize;

/// Cached names (or symbol lookups) beyond which a cache starts afresh.
const MAX_CACHED: usize = 1 << 16;

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

/// (device, inode, virtual offset) -> (symbol, offset into it).
type SymbolCache = HashMap<(u64, u64, u64), Option<(String, u64)>>;

/// Names futex addresses and caches the names per (pid, address). `Send`:
/// blazesym's symbolizer (which is not) lives only for one lookup.
#[derive(Debug, Default)]
pub struct UserLockNamer {
    names: HashMap<(u32, u64), UserLockName>,
    /// Lookups in images, shared by the processes of one binary.
    symbols: SymbolCache,
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
            let name = lookup(&mut self.symbols, pid, addr);
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

    /// `[heap]`, `[stack]`, `[anon]`, another kernel name, or the basename.
    fn class(&self) -> String {
        if self.path.is_empty() {
            return "[anon]".to_string();
        }
        if !self.is_file() {
            return self.path.clone();
        }
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path).to_string()
    }
}

fn lookup(symbols: &mut SymbolCache, pid: u32, addr: u64) -> UserLockName {
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
        && let Some(virt) = virtual_offset(pid, &maps, image, addr)
    {
        if symbols.len() >= MAX_CACHED {
            symbols.clear();
        }
        let found = symbols
            .entry((image.dev, image.inode, virt.offset))
            .or_insert_with(|| data_symbol(&virt.path, virt.offset));
        if let Some((symbol, offset)) = found {
            return UserLockName { symbol: Some(symbol.clone()), offset: *offset, mapping: Some(image.class()) };
        }
    }
    UserLockName { symbol: None, offset: 0, mapping: Some(maps[at].class()) }
}

/// An address as an offset in an image's virtual address space, and a path
/// that reaches that very image.
struct VirtualOffset {
    path: String,
    offset: u64,
}

fn virtual_offset(pid: u32, maps: &[Mapping], image: &Mapping, addr: u64) -> Option<VirtualOffset> {
    // The mapping of the image's first page: its load bias.
    let base = maps.iter().find(|map| map.dev == image.dev && map.inode == image.inode && map.offset == 0)?;
    // The exact file mapped (even if deleted; needs CAP_SYS_ADMIN), else its
    // path in the process's root, if it is still the same file.
    let candidates =
        [format!("/proc/{pid}/map_files/{:x}-{:x}", base.start, base.end), format!("/proc/{pid}/root{}", base.path)];
    let path = candidates
        .into_iter()
        .find(|path| fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.ino() == image.inode))?;
    let first_vaddr = first_segment_vaddr(&File::open(&path).ok()?)?;
    let bias = base.start.checked_sub(first_vaddr & !0xfff)?;
    Some(VirtualOffset { path, offset: addr.checked_sub(bias)? })
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
    let entry_size = usize::from(u16_at(&header, 54)?);
    let count = usize::from(u16_at(&header, 56)?);
    if entry_size < 56 {
        return None;
    }
    let mut headers = vec![0u8; entry_size * count];
    file.read_exact_at(&mut headers, phoff).ok()?;
    headers.chunks_exact(entry_size).find_map(|phdr| {
        let is_load = phdr.get(..4)? == PT_LOAD.to_le_bytes();
        (is_load && u64_at(phdr, 8)? == 0).then(|| u64_at(phdr, 16)).flatten()
    })
}

/// The sized ELF symbol (`.symtab`, else `.dynsym`) covering `offset`, and
/// the offset into it. Sizeless symbols (`__bss_start`, `_end`) do not count:
/// they would name whatever follows them.
fn data_symbol(path: &str, offset: u64) -> Option<(String, u64)> {
    let symbolizer = Symbolizer::builder().enable_code_info(false).enable_demangling(true).build();
    let mut source = Elf::new(path);
    source.debug_syms = false;
    let found = symbolizer.symbolize_single(&Source::Elf(source), Input::VirtOffset(offset)).ok()?;
    let Symbolized::Sym(sym) = found else { return None };
    let size = sym.size?;
    (sym.offset < size).then(|| (sym.name.to_string(), sym.offset as u64))
}

// The pipeline keeps the namer in tokio tasks, which move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<UserLockNamer>();
};

#[cfg(test)]
#[path = "locks_tests.rs"]
mod tests;
