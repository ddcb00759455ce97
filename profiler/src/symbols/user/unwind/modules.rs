//! A process's code for the unwinder: each executable file mapping with its
//! unwind sections (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) and the
//! bias between its addresses in the file and in the process.
//!
//! Each binary is read once (keyed by device and inode) and shared by
//! every process that maps it; a process's list is read from
//! `/proc/<pid>/maps` when it is first unwound, and again when a stack
//! starts in code the list does not cover (a library loaded since).

use std::{
    collections::HashMap,
    fs,
    ops::Range,
    path::{Path, PathBuf},
    sync::Arc,
};

use framehop::ExplicitModuleSectionInfo;
use object::{Object, ObjectSection, ObjectSegment};

/// Section data shared by the modules that map one binary.
pub type Data = Arc<[u8]>;

/// What one binary gives the unwinder.
#[derive(Debug)]
pub struct Binary {
    /// Its sections, with addresses as stated in the file.
    pub sections: ExplicitModuleSectionInfo<Data>,
    /// Executable loadable segments: (file offset range, stated address).
    segments: Vec<(Range<u64>, u64)>,
}

impl Binary {
    /// Parses an ELF file's unwind sections and segments.
    pub fn parse(bytes: &[u8]) -> Option<Binary> {
        let file = object::File::parse(bytes).ok()?;
        let section = |name: &str| file.section_by_name(name);
        let data = |name: &str| -> Option<Data> { section(name)?.uncompressed_data().ok().map(|d| Arc::from(&*d)) };
        let range = |name: &str| section(name).map(|s| s.address()..s.address() + s.size());
        let sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: range(".text"),
            text: data(".text"),
            got_svma: range(".got"),
            eh_frame_svma: range(".eh_frame"),
            eh_frame: data(".eh_frame"),
            eh_frame_hdr_svma: range(".eh_frame_hdr"),
            eh_frame_hdr: data(".eh_frame_hdr"),
            debug_frame: data(".debug_frame"),
            ..Default::default()
        };
        let segments = file
            .segments()
            .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .map(|s| {
                let (off, size) = s.file_range();
                (off..off + size, s.address())
            })
            .collect();
        Some(Binary { sections, segments })
    }

    /// The process address of the file's address 0, for an executable
    /// mapping of file offset `offset` at process address `start`. The
    /// mapping starts at the page holding its segment's first byte, which
    /// linkers need not put on a page boundary (lld does not).
    pub fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let (range, vaddr) =
            self.segments.iter().find(|(r, _)| r.start & !(MAX_PAGE - 1) <= offset && offset < r.end)?;
        // The segment's first byte is at start + (range.start - offset).
        start.checked_add(range.start)?.checked_sub(offset)?.checked_sub(*vaddr)
    }
}

/// The largest page size (arm64's 64 KiB): a mapping starts at most this
/// far below its segment.
const MAX_PAGE: u64 = 64 << 10;

/// An executable file mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub range: Range<u64>,
    pub offset: u64,
    /// `major:minor` of the device, and the inode: the binary's identity.
    pub dev: String,
    pub inode: u64,
    pub path: String,
}

/// The executable file mappings in a `/proc/<pid>/maps` text.
pub fn executable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset, dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let path = f.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !path.starts_with('/') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                range: u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                dev: dev.to_string(),
                inode: inode.parse().ok()?,
                path,
            })
        })
        .collect()
}

/// A module of a process: a mapping and its binary.
#[derive(Clone, Debug)]
pub struct ProcessModule {
    pub mapping: Mapping,
    pub base: u64,
    pub binary: Arc<Binary>,
}

/// Binaries read so far, by (device, inode).
#[derive(Default)]
pub struct Binaries {
    by_file: HashMap<(String, u64), Option<Arc<Binary>>>,
    /// Binaries that could not be read or parsed.
    pub unreadable: u64,
}

/// Binaries kept before the cache starts afresh.
const MAX_BINARIES: usize = 1024;

impl Binaries {
    /// The executable modules of process `pid`, each with its binary.
    pub fn modules(&mut self, pid: u32) -> Option<Vec<ProcessModule>> {
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let mut out = Vec::new();
        for m in executable_mappings(&maps) {
            let Some(binary) = self.binary(pid, &m) else { continue };
            let Some(base) = binary.bias(m.range.start, m.offset) else { continue };
            out.push(ProcessModule { mapping: m, base, binary });
        }
        Some(out)
    }

    fn binary(&mut self, pid: u32, m: &Mapping) -> Option<Arc<Binary>> {
        if self.by_file.len() >= MAX_BINARIES {
            self.by_file.clear();
        }
        let key = (m.dev.clone(), m.inode);
        if let Some(b) = self.by_file.get(&key) {
            return b.clone();
        }
        let parsed = read_binary(pid, m).and_then(|bytes| Binary::parse(&bytes)).map(Arc::new);
        if parsed.is_none() {
            self.unreadable += 1;
        }
        self.by_file.insert(key, parsed.clone());
        parsed
    }
}

/// The mapped file's bytes, from the first of [`binary_paths`] that reads.
fn read_binary(pid: u32, m: &Mapping) -> Option<Vec<u8>> {
    binary_paths(pid, m).iter().find_map(|p| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut open_regular(p).ok()?, &mut bytes).ok()?;
        Some(bytes)
    })
}

/// `path` opened for reading if it is a regular file: never blocking on a
/// FIFO or a device a traced process put where its binary was.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    if file.metadata()?.file_type().is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"))
    }
}

/// Where process `pid`'s mapped file can be opened, best first: through
/// `/proc/<pid>/map_files` (the very file, even deleted or in another mount
/// namespace), else under the process's root.
pub(crate) fn binary_paths(pid: u32, m: &Mapping) -> [PathBuf; 2] {
    let by_range = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.range.start, m.range.end));
    let rooted = Path::new(&format!("/proc/{pid}/root")).join(m.path.trim_start_matches('/'));
    [by_range, rooted]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_file_mappings_are_modules() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 1234 /usr/bin/prog
55d0c0001000-55d0c0005000 r-xp 00001000 fe:01 1234 /usr/bin/prog
7f0000000000-7f0000100000 r-xp 00028000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 r-xp 00000000 00:00 0 [vdso]
7f0000300000-7f0000301000 rw-s 00000000 00:01 7 /dev/zero (deleted)
7f0000400000-7f0000401000 r-xp 00000000 00:01 8 /memfd:jit (deleted)
";
        let m = executable_mappings(maps);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].range, 0x55d0_c000_1000..0x55d0_c000_5000);
        assert_eq!((m[0].offset, m[0].inode, m[0].dev.as_str()), (0x1000, 1234, "fe:01"));
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "/memfd:jit (deleted)");
    }

    #[test]
    fn a_segment_that_starts_mid_page_is_mapped_from_its_page() {
        // lld: .text's segment at file offset 0x158a0, stated at 0x168a0,
        // mapped from file offset 0x15000 at 0x55d0c0015000.
        let b = Binary { sections: ExplicitModuleSectionInfo::default(), segments: vec![(0x158a0..0x5a000, 0x168a0)] };
        let base = b.bias(0x55d0_c001_5000, 0x15000).expect("bias");
        assert_eq!(base + 0x168a0, 0x55d0_c001_58a0, "the segment's first byte where the mapping puts it");
        assert_eq!(b.bias(0x55d0_c001_5000, 0x5a000), None, "past the segment");
    }

    #[test]
    fn this_test_binary_has_unwind_sections_and_a_bias_for_its_code() {
        let exe = std::fs::read("/proc/self/exe").expect("own executable");
        let b = Binary::parse(&exe).expect("parses as ELF");
        assert!(b.sections.eh_frame.as_ref().is_some_and(|d| !d.is_empty()), "Rust binaries carry .eh_frame");
        assert!(b.sections.eh_frame_hdr.is_some());
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let me = std::fs::read_link("/proc/self/exe").expect("exe link");
        let text = executable_mappings(&maps)
            .into_iter()
            .find(|m| Path::new(&m.path) == me)
            .expect("the executable's code is mapped");
        let base = b.bias(text.range.start, text.offset).expect("a segment holds the code");
        // This very function is inside the module, at its stated address plus the bias.
        let here = this_test_binary_has_unwind_sections_and_a_bias_for_its_code as fn() as usize as u64;
        assert!(text.range.contains(&here));
        let svma = here - base;
        let text_svma = b.sections.text_svma.clone().expect(".text");
        assert!(text_svma.contains(&svma), "{svma:#x} in {text_svma:x?}");
    }
}
