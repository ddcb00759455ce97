//! Which running binaries `--user-stacks` cannot unwind through: those
//! with neither unwind tables (`.eh_frame`, `.debug_frame`: the copy
//! unwinder's input) nor, as far as their functions' prologues tell, frame
//! pointers (the frame-pointer walk's). `lockprof doctor` lists them.
//!
//! Every process's executable file mappings are read from
//! `/proc/<pid>/maps`; each distinct binary (by device and inode) is opened
//! once, and only its headers, symbol table and the first bytes of a
//! sample of its functions are read.

use std::{collections::HashMap, fmt, fs, io, path::Path};

use object::{Object, ObjectSection, ObjectSymbol, ReadCache, ReadRef, SectionIndex, SymbolKind};
use serde::Serialize;

use super::{
    modules::{Mapping, binary_paths, executable_mappings, open_regular},
    prologue::{self, Isa, PROLOGUE_BYTES},
};

/// Functions whose prologue is read, at most, spread over the binary.
const SAMPLE: usize = 200;
/// Functions shorter than this are not sampled: too short to tell (a
/// leaf of a few instructions needs no frame either way).
const MIN_FUNCTION: u64 = 8;
/// Fewer functions sampled than this tell nothing (a stripped executable's
/// `.dynsym` defines a few callbacks at most).
const MIN_SAMPLE: usize = 5;

/// Why the running binaries could not be surveyed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// `/proc` could not be listed.
    #[error("listing /proc: {source}")]
    Proc {
        /// The failure.
        source: io::Error,
    },
}

/// Why one binary could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No path to it opened.
    #[error("opening the binary: {source}")]
    Open {
        /// The last failure.
        source: io::Error,
    },
    /// It is not an ELF file object can read.
    #[error("parsing the binary: {source}")]
    Parse {
        /// The failure.
        source: object::Error,
    },
}

/// What the frame-pointer walk can expect of a binary, read from its
/// functions' prologues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// At least half the sampled functions set up a frame (or it is Go's).
    Yes,
    /// Fewer than half do.
    No,
    /// Too few functions could be sampled, or the architecture is not read.
    Unknown,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Yes => "yes",
            Verdict::No => "no",
            Verdict::Unknown => "unknown",
        })
    }
}

/// Whether a binary appears to be built with frame pointers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FramePointers {
    /// The conclusion.
    pub verdict: Verdict,
    /// Sampled functions whose prologue sets up a frame pointer.
    pub with_frame: usize,
    /// Functions sampled.
    pub sampled: usize,
    /// What decided the verdict when the sample did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

impl FramePointers {
    /// The verdict on `with_frame` of `sampled` functions setting up a
    /// frame: unknown below [`MIN_SAMPLE`].
    pub fn of_sample(with_frame: usize, sampled: usize) -> FramePointers {
        let (verdict, reason) = match sampled {
            0 => (Verdict::Unknown, Some("no function symbols to sample")),
            n if n < MIN_SAMPLE => (Verdict::Unknown, Some("too few to tell")),
            n if with_frame * 2 >= n => (Verdict::Yes, None),
            _ => (Verdict::No, None),
        };
        FramePointers { verdict, with_frame, sampled, reason }
    }

    /// A verdict not read from the prologues.
    fn decided(verdict: Verdict, reason: &'static str) -> FramePointers {
        FramePointers { verdict, with_frame: 0, sampled: 0, reason: Some(reason) }
    }
}

impl fmt::Display for FramePointers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.verdict)?;
        if self.sampled > 0 {
            write!(f, "{} of {} functions set up a frame", self.with_frame, self.sampled)?;
            if let Some(r) = self.reason {
                write!(f, ": {r}")?;
            }
        } else {
            f.write_str(self.reason.unwrap_or("not sampled"))?;
        }
        f.write_str(")")
    }
}

/// What a binary gives the two ways of unwinding a user stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnwindInfo {
    /// A non-empty `.eh_frame` with contents in the file.
    pub eh_frame: bool,
    /// An `.eh_frame_hdr` (its binary search table).
    pub eh_frame_hdr: bool,
    /// A `.debug_frame` (or `.zdebug_frame`) with contents in the file.
    pub debug_frame: bool,
    /// What its prologues say about frame pointers.
    pub frame_pointers: FramePointers,
}

impl UnwindInfo {
    /// Reads the binary at `path`.
    pub fn of_file(path: &Path) -> Result<UnwindInfo, ReadError> {
        fs::File::open(path).map_err(|source| ReadError::Open { source }).and_then(UnwindInfo::of_open)
    }

    /// Reads the binary process `pid` maps at `m`, by the first of its
    /// paths that opens.
    fn of_mapping(pid: u32, m: &Mapping) -> Result<UnwindInfo, ReadError> {
        let mut last = io::Error::from(io::ErrorKind::NotFound);
        for path in binary_paths(pid, m) {
            match open_regular(&path) {
                Ok(file) => return UnwindInfo::of_open(file),
                Err(e) => last = e,
            }
        }
        Err(ReadError::Open { source: last })
    }

    /// Reads an open binary: only the ranges parsing and sampling need.
    fn of_open(file: fs::File) -> Result<UnwindInfo, ReadError> {
        let cache = ReadCache::new(file);
        let elf = object::File::parse(&cache).map_err(|source| ReadError::Parse { source })?;
        Ok(UnwindInfo::of_object(&elf, &cache))
    }

    fn of_object<'data, R: ReadRef<'data>>(elf: &object::File<'data, R>, data: R) -> UnwindInfo {
        let present =
            |name: &str| elf.section_by_name(name).and_then(|s| s.file_range()).is_some_and(|(_, size)| size > 0);
        UnwindInfo {
            eh_frame: present(".eh_frame"),
            eh_frame_hdr: present(".eh_frame_hdr"),
            debug_frame: present(".debug_frame"),
            frame_pointers: frame_pointers(elf, data),
        }
    }

    /// It has unwind tables for the copy unwinder.
    pub fn has_tables(&self) -> bool {
        self.eh_frame || self.debug_frame
    }

    /// Neither unwind tables nor frame pointers: no unwinding passes
    /// through its functions (their callers cannot be shown).
    pub fn cannot_unwind(&self) -> bool {
        !self.has_tables() && self.frame_pointers.verdict == Verdict::No
    }
}

/// A function symbol.
struct Function {
    address: u64,
    size: u64,
    section: SectionIndex,
}

/// The defined functions of `symbols` of [`MIN_FUNCTION`] bytes or more,
/// by address, one per address (aliases dropped).
fn functions<'data, S: ObjectSymbol<'data>>(symbols: impl Iterator<Item = S>) -> Vec<Function> {
    let mut all: Vec<Function> = symbols
        .filter(|s| s.kind() == SymbolKind::Text && s.size() >= MIN_FUNCTION && s.is_definition())
        .filter_map(|s| Some(Function { address: s.address(), size: s.size(), section: s.section_index()? }))
        .collect();
    all.sort_unstable_by_key(|f| f.address);
    all.dedup_by_key(|f| f.address);
    all
}

/// Up to `n` of `all`, evenly spread.
fn spread<T>(all: &[T], n: usize) -> impl Iterator<Item = &T> {
    let take = all.len().min(n);
    (0..take).filter_map(move |i| all.get(i * all.len() / take))
}

/// The frame-pointer verdict from a sample of the functions of `.symtab`,
/// else of `.dynsym` (Go binaries: yes).
fn frame_pointers<'data, R: ReadRef<'data>>(elf: &object::File<'data, R>, data: R) -> FramePointers {
    let Some(isa) = Isa::of(elf.architecture()) else {
        return FramePointers::decided(Verdict::Unknown, "prologues are read on x86_64 and arm64 only");
    };
    // Go's compiler keeps frame pointers on both (since Go 1.7 and 1.12),
    // and Go binaries are often stripped of their symbol table.
    if elf.section_by_name(".go.buildinfo").is_some() || elf.section_by_name(".gopclntab").is_some() {
        return FramePointers::decided(Verdict::Yes, "Go code keeps frame pointers");
    }
    let mut all = functions(elf.symbols());
    if all.is_empty() {
        all = functions(elf.dynamic_symbols());
    }
    let (mut with_frame, mut sampled) = (0, 0);
    for f in spread(&all, SAMPLE) {
        let Some(code) = prologue_bytes(elf, data, f) else { continue };
        sampled += 1;
        if prologue::sets_up_frame(isa, code) {
            with_frame += 1;
        }
    }
    FramePointers::of_sample(with_frame, sampled)
}

/// The first bytes of function `f`, read from the file.
fn prologue_bytes<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    data: R,
    f: &Function,
) -> Option<&'data [u8]> {
    let section = elf.section_by_index(f.section).ok()?;
    let (offset, size) = section.file_range()?;
    let at = f.address.checked_sub(section.address())?;
    let len = f.size.min(PROLOGUE_BYTES as u64).min(size.checked_sub(at)?);
    data.read_bytes_at(offset.checked_add(at)?, len).ok()
}

/// A binary some processes map, and what it gives the unwinders.
#[derive(Clone, Debug, Serialize)]
pub struct MappedBinary {
    /// Its path, as the first process seen mapping it names it.
    pub path: String,
    /// Processes mapping it.
    pub processes: usize,
    /// One of them.
    pub example_pid: u32,
    /// That process's name (`comm`).
    pub example_comm: String,
    /// Its unwind tables and frame pointers.
    pub unwind: UnwindInfo,
    /// [`UnwindInfo::cannot_unwind`].
    pub cannot_unwind: bool,
}

/// The survey of the running binaries for `lockprof doctor`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnwindAudit {
    /// Processes with executable file mappings (kernel threads have none).
    pub processes: usize,
    /// Processes whose mappings could not be read (permission).
    pub unreadable_processes: usize,
    /// Distinct binaries those processes map.
    pub binaries: usize,
    /// Of those, binaries that could not be opened or parsed.
    pub unreadable_binaries: usize,
    /// Binaries with no unwind tables and no frame pointers found (none,
    /// or unknown): those that cannot be unwound first, then the most
    /// mapped.
    pub without_unwind_info: Vec<MappedBinary>,
}

impl UnwindAudit {
    /// The binaries no unwinding passes through.
    pub fn cannot_unwind(&self) -> usize {
        self.without_unwind_info.iter().filter(|b| b.cannot_unwind).count()
    }
}

/// Surveys every process's binaries.
pub fn audit() -> Result<UnwindAudit, AuditError> {
    let dir = fs::read_dir("/proc").map_err(|source| AuditError::Proc { source })?;
    let pids = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    Ok(Survey::of(pids).audit())
}

/// A binary as the survey found it.
struct Seen {
    path: String,
    processes: usize,
    example_pid: u32,
    example_comm: String,
    /// None until read; a binary no path opened is tried again from the
    /// next process mapping it.
    unwind: Option<Result<UnwindInfo, ReadError>>,
}

/// The binaries of some processes, each read once.
#[derive(Default)]
struct Survey {
    binaries: Vec<Seen>,
    by_file: HashMap<(String, u64), usize>,
    processes: usize,
    unreadable_processes: usize,
}

impl Survey {
    /// Surveys processes `pids`.
    fn of(pids: impl IntoIterator<Item = u32>) -> Survey {
        let mut s = Survey::default();
        for pid in pids {
            s.process(pid);
        }
        s
    }

    fn process(&mut self, pid: u32) {
        let maps = match fs::read_to_string(format!("/proc/{pid}/maps")) {
            Ok(maps) => maps,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                self.unreadable_processes += 1;
                return;
            }
            // Gone meanwhile.
            Err(_) => return,
        };
        let mappings = executable_mappings(&maps);
        if mappings.is_empty() {
            return;
        }
        self.processes += 1;
        let comm =
            fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end().to_string()).unwrap_or_default();
        let mut counted = Vec::new();
        for m in mappings {
            let key = (m.dev.clone(), m.inode);
            let at = *self.by_file.entry(key).or_insert_with(|| {
                self.binaries.push(Seen {
                    path: m.path.clone(),
                    processes: 0,
                    example_pid: pid,
                    example_comm: comm.clone(),
                    unwind: None,
                });
                self.binaries.len() - 1
            });
            let Some(seen) = self.binaries.get_mut(at) else { continue };
            // A binary's several mappings (or a reused inode) count once.
            if !counted.contains(&at) {
                counted.push(at);
                seen.processes += 1;
            }
            if matches!(seen.unwind, None | Some(Err(ReadError::Open { .. }))) {
                seen.unwind = Some(UnwindInfo::of_mapping(pid, &m));
            }
        }
    }

    /// The binaries that were read.
    fn read(&self) -> impl Iterator<Item = MappedBinary> + '_ {
        self.binaries.iter().filter_map(|s| match &s.unwind {
            Some(Ok(u)) => Some(MappedBinary {
                path: s.path.clone(),
                processes: s.processes,
                example_pid: s.example_pid,
                example_comm: s.example_comm.clone(),
                unwind: u.clone(),
                cannot_unwind: u.cannot_unwind(),
            }),
            _ => None,
        })
    }

    fn audit(&self) -> UnwindAudit {
        let mut without: Vec<MappedBinary> =
            self.read().filter(|b| !b.unwind.has_tables() && b.unwind.frame_pointers.verdict != Verdict::Yes).collect();
        without.sort_by(|a, b| {
            b.cannot_unwind.cmp(&a.cannot_unwind).then(b.processes.cmp(&a.processes)).then(a.path.cmp(&b.path))
        });
        UnwindAudit {
            processes: self.processes,
            unreadable_processes: self.unreadable_processes,
            binaries: self.binaries.len(),
            unreadable_binaries: self.binaries.iter().filter(|s| !matches!(s.unwind, Some(Ok(_)))).count(),
            without_unwind_info: without,
        }
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
