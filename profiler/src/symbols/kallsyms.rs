//! `/proc/kallsyms` parsing and address lookup.

use std::{
    collections::{BTreeMap, HashMap},
    io::BufRead,
    ops::Range,
    path::Path,
};

/// Errors reading a kallsyms file.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// File that failed.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Every address is zero: `kptr_restrict` hides them from this user.
    #[error(
        "{path} shows only zero addresses (kernel.kptr_restrict hides them); run as root or set kernel.kptr_restrict=0"
    )]
    Restricted {
        /// File that was read.
        path: String,
    },
}

/// A text symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Function name.
    pub name: String,
    /// Module, for symbols not in vmlinux.
    pub module: Option<String>,
}

/// Kernel symbol table: text symbols for stacks, data symbols for lock names.
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    text: BTreeMap<u64, Symbol>,
    data: HashMap<u64, String>,
    lock_text: Option<Range<u64>>,
    sched_text: Option<Range<u64>>,
}

/// Largest offset into a function we accept before calling an address unknown.
const MAX_FUNC_OFFSET: u64 = 1 << 20;

impl Kallsyms {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<Kallsyms, KallsymsError> {
        Self::from_path(Path::new("/proc/kallsyms"))
    }

    /// Reads a kallsyms-format file.
    pub fn from_path(path: &Path) -> Result<Kallsyms, KallsymsError> {
        let io = |source| KallsymsError::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let ks = Self::parse(std::io::BufReader::new(file)).map_err(io)?;
        if ks.text.is_empty() {
            return Err(KallsymsError::Restricted { path: path.display().to_string() });
        }
        Ok(ks)
    }

    /// Parses kallsyms text (`addr type name [module]` lines). Zero addresses
    /// (hidden by kptr_restrict) and malformed lines are skipped.
    pub fn parse(reader: impl BufRead) -> std::io::Result<Kallsyms> {
        let mut ks = Kallsyms::default();
        let (mut lock_start, mut lock_end, mut sched_start, mut sched_end) = (None, None, None, None);
        for line in reader.lines() {
            let line = line?;
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
            if addr == 0 {
                continue;
            }
            let module = it.next().map(|m| m.trim_matches(|c| c == '[' || c == ']').to_string());
            match kind {
                "t" | "T" | "w" | "W" => {
                    match name {
                        "__lock_text_start" => lock_start = Some(addr),
                        "__lock_text_end" => lock_end = Some(addr),
                        "__sched_text_start" => sched_start = Some(addr),
                        "__sched_text_end" => sched_end = Some(addr),
                        _ => {}
                    }
                    // Keep the first name at an address (aliases follow it).
                    ks.text.entry(addr).or_insert(Symbol { name: name.to_string(), module });
                }
                "d" | "D" | "b" | "B" | "r" | "R" => {
                    ks.data.entry(addr).or_insert_with(|| name.to_string());
                }
                _ => {}
            }
        }
        ks.lock_text = lock_start.zip(lock_end).map(|(s, e)| s..e);
        ks.sched_text = sched_start.zip(sched_end).map(|(s, e)| s..e);
        Ok(ks)
    }

    /// The function containing `addr` and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let (start, sym) = self.text.range(..=addr).next_back()?;
        let off = addr - start;
        (off < MAX_FUNC_OFFSET).then_some((sym, off))
    }

    /// `function+0xoff` (with ` [module]`), or the raw address.
    pub fn format(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((sym, off)) => match &sym.module {
                Some(m) => format!("{}+{off:#x} [{m}]", sym.name),
                None => format!("{}+{off:#x}", sym.name),
            },
            None => format!("{addr:#x}"),
        }
    }

    /// A data symbol at exactly `addr`; else any symbol that starts exactly
    /// there (a lock is never code: some kernels list data in
    /// cacheline-aligned sections with a text type, e.g. `tasklist_lock` is
    /// `T` in Debian's 7.3).
    pub fn data_symbol(&self, addr: u64) -> Option<&str> {
        self.data.get(&addr).map(String::as_str).or_else(|| self.text.get(&addr).map(|s| s.name.as_str()))
    }

    /// Number of data symbols (a kernel without KALLSYMS_ALL has only a few dozen).
    pub fn data_symbol_count(&self) -> usize {
        self.data.len()
    }

    /// Number of text symbols.
    pub fn text_symbol_count(&self) -> usize {
        self.text.len()
    }

    /// Address of a symbol (text or data) by name; a linear scan, for rare use.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.text
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(a, _)| *a)
            .or_else(|| self.data.iter().find(|(_, n)| n.as_str() == name).map(|(a, _)| *a))
    }

    /// Whether some text symbol's name starts with `prefix` (a linear scan, for rare use).
    pub fn has_text_prefix(&self, prefix: &str) -> bool {
        self.text.values().any(|s| s.name.starts_with(prefix))
    }

    /// Whether `addr` lies in `__lock_text` or `__sched_text`.
    pub fn in_lock_or_sched_text(&self, addr: u64) -> bool {
        [&self.lock_text, &self.sched_text].into_iter().flatten().any(|r| r.contains(&addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const FIXTURE: &str = "\
ffffffff81000000 T _stext
ffffffff8135d6d0 T copy_process
ffffffff81365410 T release_task
ffffffff816e4c40 t anon_pipe_write
ffffffff816e5000 T vfs_write
ffffffff82265b40 T __sched_text_start
ffffffff82265b50 T schedule
ffffffff8226e862 T __sched_text_end
ffffffff8226e870 T __lock_text_start
ffffffff8226fb60 T queued_write_lock_slowpath
ffffffff822702f1 T __lock_text_end
ffffffff82a00000 D tasklist_lock
ffffffffc0001000 t kvm_vcpu_yield_to\t[kvm]
0000000000000000 T hidden_symbol
garbage line
";

    fn fixture() -> Kallsyms {
        Kallsyms::parse(FIXTURE.as_bytes()).expect("parse")
    }

    #[test]
    fn resolves_function_and_offset() {
        let ks = fixture();
        assert_eq!(ks.format(0xffffffff8135d6d0 + 0x1c4), "copy_process+0x1c4");
        assert_eq!(ks.format(0xffffffff816e4c40), "anon_pipe_write+0x0");
        assert_eq!(ks.format(0xffffffffc0001010), "kvm_vcpu_yield_to+0x10 [kvm]");
        assert_eq!(ks.format(0x1000), "0x1000");
        assert_eq!(ks.text_symbol_count(), 12);
    }

    #[test]
    fn data_symbols_name_exact_addresses_only() {
        let ks = fixture();
        assert_eq!(ks.data_symbol(0xffffffff82a00000), Some("tasklist_lock"));
        assert_eq!(ks.data_symbol(0xffffffff82a00008), None);
        assert_eq!(ks.address_of("tasklist_lock"), Some(0xffffffff82a00000));
        assert_eq!(ks.address_of("copy_process"), Some(0xffffffff8135d6d0));
        assert_eq!(ks.address_of("nope"), None);
    }

    #[test]
    fn data_listed_with_a_text_type_is_found_at_its_exact_address() {
        // Debian 7.3's kallsyms: `ffffffff9b606080 T tasklist_lock`.
        let ks = Kallsyms::parse("ffffffff9b600000 T some_function\nffffffff9b606080 T tasklist_lock\n".as_bytes())
            .expect("parse");
        assert_eq!(ks.data_symbol(0xffffffff9b606080), Some("tasklist_lock"));
        assert_eq!(ks.data_symbol(0xffffffff9b606088), None, "exact addresses only");
    }

    #[test]
    fn lock_and_sched_text_ranges() {
        let ks = fixture();
        assert!(ks.in_lock_or_sched_text(0xffffffff8226fb60 + 0x20));
        assert!(ks.in_lock_or_sched_text(0xffffffff82265b50));
        assert!(!ks.in_lock_or_sched_text(0xffffffff8135d6d0));
    }

    #[test]
    fn all_zero_addresses_are_reported_as_restricted() {
        let dir = std::env::temp_dir().join(format!("lockprof-ks-{}", std::process::id()));
        std::fs::write(&dir, "0000000000000000 T foo\n0000000000000000 D bar\n").expect("write");
        let err = Kallsyms::from_path(&dir).expect_err("restricted");
        let _ = std::fs::remove_file(&dir);
        assert!(matches!(err, KallsymsError::Restricted { .. }), "{err}");
    }
}
