//! JIT code named from perf maps: `/tmp/perf-<pid>.map`, the text file in
//! which JIT compilers list the code they generate, one `START SIZE name`
//! line (hex, no `0x`) per function, as perf's JIT interface defines it
//! (`tools/perf/Documentation/jit-interface.txt`). Node writes one with
//! `--perf-basic-prof` (`--interpreted-frames-native-stack` names
//! interpreted functions too), the JVM with `-XX:+DumpPerfMapAtExit` or
//! perf-map-agent, Python 3.12 with `-X perf`.
//!
//! The file lives in `/tmp` as the process sees it, named by the pid it has
//! in its own namespace: it is read through `/proc/<pid>/root/` with the last
//! pid of `NSpid`. It only grows while the process runs, so each process's
//! map is read once and then only its new lines; a later line for an
//! address wins (code moved or compiled again). blazesym reads perf maps
//! only through its live-process source, which must see the process alive
//! at symbolization time; here the names are taken at pinning time, with
//! the stack, as the rest of its frames are pinned.
//!
//! The file belongs to the traced process, which may be anybody's: it is
//! opened without following symlinks out of the process's root
//! (`openat2(RESOLVE_IN_ROOT)`; where the kernel has no `openat2`, no
//! symlink at all), without blocking (a FIFO), and used only when it is a
//! regular file owned by the process's user or by root, as perf requires.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::sync::Arc;

/// Processes whose maps are kept beyond which the cache starts afresh.
const MAX_CACHED_PROCESSES: usize = 256;
/// Bytes of a map read at most (a runaway file is named up to there).
const MAX_MAP_BYTES: u64 = 256 << 20;

/// One JIT function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct JitSymbol {
    pub(super) start: u64,
    pub(super) size: u64,
    pub(super) name: Arc<str>,
}

/// What one process's map says, read up to `read` bytes.
#[derive(Debug, Default)]
struct ProcessMap {
    /// (device, inode) of the file: a new process (pid reused) has a new one.
    file: (u64, u64),
    /// Where it was read, as frames name it.
    path: Arc<str>,
    read: u64,
    /// Sorted by start; of equal starts, the last written.
    symbols: Vec<JitSymbol>,
    /// A partial last line, completed by the next read.
    tail: String,
}

/// Every process's perf map read so far.
#[derive(Debug, Default)]
pub(super) struct PerfMaps {
    maps: HashMap<u32, ProcessMap>,
}

impl PerfMaps {
    /// Brings process `pid`'s map up to date (read now, while the process is
    /// alive: its new lines, or all of it when it is new or was rewritten
    /// shorter); whether it has one to look in. Once per stack, not per frame.
    pub(super) fn refresh(&mut self, pid: u32) -> bool {
        let fresh = self.read(pid);
        if fresh.is_none() {
            self.maps.remove(&pid);
        }
        fresh.is_some()
    }

    fn read(&mut self, pid: u32) -> Option<()> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let (ns_pid, uid) = ids_of(&status, pid);
        let mut file = open_in_root(pid, ns_pid)?;
        let meta = file.metadata().ok()?;
        if !meta.file_type().is_file() || (meta.uid() != uid && meta.uid() != 0) {
            return None;
        }
        let id = (meta.dev(), meta.ino());
        if self.maps.len() >= MAX_CACHED_PROCESSES && !self.maps.contains_key(&pid) {
            self.maps.clear();
        }
        let map = self.maps.entry(pid).or_default();
        let len = meta.len().min(MAX_MAP_BYTES);
        // Another file (a pid reused), or this one rewritten in place
        // (`jcmd PID Compiler.perfmap` truncates it): read from the start.
        if map.file != id || len < map.read {
            let path = Arc::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map").as_str());
            *map = ProcessMap { file: id, path, ..ProcessMap::default() };
        }
        if len > map.read {
            let mut bytes = Vec::new();
            file.seek(SeekFrom::Start(map.read)).ok()?;
            (&mut file).take(len - map.read).read_to_end(&mut bytes).ok()?;
            map.read += bytes.len() as u64;
            // Names in another encoding (a Latin-1 path) are kept, lossily.
            map.add(&String::from_utf8_lossy(&bytes));
        }
        Some(())
    }

    /// The JIT function holding `addr` in process `pid` as its map stood at
    /// the last [`refresh`](Self::refresh), with the map's path.
    pub(super) fn find(&self, pid: u32, addr: u64) -> Option<(JitSymbol, Arc<str>)> {
        let map = self.maps.get(&pid)?;
        Some((find(&map.symbols, addr)?.clone(), Arc::clone(&map.path)))
    }
}

impl ProcessMap {
    /// Adds the lines of `text` (after any partial line kept from before).
    fn add(&mut self, text: &str) {
        let mut all = std::mem::take(&mut self.tail);
        all.push_str(text);
        let complete = match all.rfind('\n') {
            Some(end) => {
                self.tail = all[end + 1..].to_string();
                &all[..end]
            }
            None => {
                self.tail = all;
                return;
            }
        };
        self.symbols.extend(complete.lines().filter_map(parse_line));
        // Stable: of equal starts the later line stays after the earlier one.
        self.symbols.sort_by_key(|s| s.start);
        let mut deduped: Vec<JitSymbol> = Vec::with_capacity(self.symbols.len());
        for s in self.symbols.drain(..) {
            match deduped.last_mut() {
                Some(last) if last.start == s.start => *last = s,
                _ => deduped.push(s),
            }
        }
        self.symbols = deduped;
    }
}

/// `START SIZE name`: hex start and size without `0x`, the rest the name.
fn parse_line(line: &str) -> Option<JitSymbol> {
    let mut parts = line.trim_end().splitn(3, ' ');
    let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let name = parts.next().map(str::trim).filter(|n| !n.is_empty())?;
    Some(JitSymbol { start, size, name: Arc::from(name) })
}

/// The function covering `addr`: the nearest start at or below it whose
/// range holds it.
fn find(symbols: &[JitSymbol], addr: u64) -> Option<&JitSymbol> {
    let at = symbols.partition_point(|s| s.start <= addr);
    symbols[..at].iter().rev().take(8).find(|s| addr < s.start.saturating_add(s.size.max(1)))
}

/// From a `/proc/<pid>/status` text: the pid the process has in its own
/// namespace (the last of `NSpid`), and its effective uid.
fn ids_of(status: &str, pid: u32) -> (u32, u32) {
    let field = |name: &str, nth_last: bool| {
        let values = status.lines().find_map(|l| l.strip_prefix(name))?;
        let mut it = values.split_whitespace();
        let v = if nth_last { it.next_back() } else { it.nth(1) };
        v.and_then(|p| p.parse::<u32>().ok())
    };
    (field("NSpid:", true).unwrap_or(pid), field("Uid:", false).unwrap_or(0))
}

/// `tmp/perf-<ns_pid>.map` under process `pid`'s root, opened read-only and
/// non-blocking, its symlinks resolved inside that root (no magic links);
/// without `openat2` (before 5.6), with no symlink at its last component.
fn open_in_root(pid: u32, ns_pid: u32) -> Option<File> {
    let root = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/root"))
        .ok()?;
    let rel = CString::new(format!("tmp/perf-{ns_pid}.map")).ok()?;
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `open_how` is plain integers; all-zero is its empty value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a directory descriptor we own, a NUL-terminated path and an
    // `open_how` of the size passed; the result is a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            rel.as_ptr(),
            &raw const how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just gave us, owned from here.
        return Some(unsafe { File::from_raw_fd(fd as i32) });
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
        return None;
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    /// The tests that write this process's own perf map, one at a time.
    static OWN_MAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

    impl PerfMaps {
        /// What a pin does for one frame: refresh, then find.
        fn lookup(&mut self, pid: u32, addr: u64) -> Option<(JitSymbol, Arc<str>)> {
            self.refresh(pid).then(|| self.find(pid, addr)).flatten()
        }
    }

    fn sym(start: u64, size: u64, name: &str) -> JitSymbol {
        JitSymbol { start, size, name: Arc::from(name) }
    }

    #[test]
    fn lines_parse_as_perf_writes_them_and_names_keep_their_spaces() {
        assert_eq!(
            parse_line("7f544c085980 378 JS:~lockprofJsWait /tmp/jit/jit.js:8:24"),
            Some(sym(0x7f54_4c08_5980, 0x378, "JS:~lockprofJsWait /tmp/jit/jit.js:8:24"))
        );
        assert_eq!(parse_line("not a line"), None);
        assert_eq!(parse_line("1000 10"), None, "no name");
    }

    #[test]
    fn a_later_line_for_an_address_wins_and_lookups_stay_inside_ranges() {
        let mut m = ProcessMap::default();
        m.add("1000 100 first\n2000 10 b\n");
        m.add("1000 80 again\n30");
        m.add("00 10 c\n");
        assert_eq!(m.symbols, vec![sym(0x1000, 0x80, "again"), sym(0x2000, 0x10, "b"), sym(0x3000, 0x10, "c")]);
        assert_eq!(find(&m.symbols, 0x1010).map(|s| &*s.name), Some("again"));
        assert_eq!(find(&m.symbols, 0x10a0), None, "past the function's end");
        assert_eq!(find(&m.symbols, 0x300f).map(|s| &*s.name), Some("c"), "a line split across reads");
        assert_eq!(find(&m.symbols, 0x0fff), None);
    }

    #[test]
    fn the_namespace_pid_and_effective_uid_come_from_the_status() {
        let status = "Name:\tnode\nUid:\t1000\t1001\t1001\t1001\nNSpid:\t4242\t7\n";
        assert_eq!(ids_of(status, 4242), (7, 1001));
        assert_eq!(ids_of("Name:\tx\n", 9), (9, 0));
    }

    #[test]
    fn a_fifo_or_a_symlink_in_place_of_the_map_is_not_read() {
        let _one = OWN_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let _ = std::fs::remove_file(&path);
        let c = CString::new(path.to_string_lossy().as_bytes()).expect("path");
        // SAFETY: a NUL-terminated path; creates a FIFO or fails.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let mut maps = PerfMaps::default();
        assert!(maps.lookup(pid, 0x1000).is_none(), "a FIFO: no hang, no names");
        std::fs::remove_file(&path).expect("clean up");
        let target = std::env::temp_dir().join(format!("lockprof-perfmap-target-{pid}"));
        std::fs::write(&target, "1000 100 not_mine\n").expect("target");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        assert!(maps.lookup(pid, 0x1010).is_none(), "a symlink is not followed");
        std::fs::remove_file(&path).expect("clean up");
        std::fs::remove_file(&target).expect("clean up");
    }

    #[test]
    fn a_process_map_is_found_by_its_namespace_pid_and_read_as_it_grows() {
        let _one = OWN_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&path, "1000 100 jitted_a\n").expect("write the map");
        let mut maps = PerfMaps::default();
        let found = maps.lookup(pid, 0x1010).map(|(s, at)| (s.name.to_string(), at.to_string()));
        assert_eq!(found, Some(("jitted_a".into(), format!("/proc/{pid}/root/tmp/perf-{pid}.map"))));
        assert!(maps.lookup(pid, 0x2000).is_none());
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).expect("reopen");
        std::io::Write::write_all(&mut f, b"2000 10 jitted_b\n").expect("append");
        assert_eq!(maps.lookup(pid, 0x2000).map(|(s, _)| s.name.to_string()), Some("jitted_b".into()));
        // Rewritten in place, shorter (as jcmd's Compiler.perfmap does): read afresh.
        std::fs::write(&path, "3000 10 jitted_c\n").expect("rewrite");
        assert_eq!(maps.lookup(pid, 0x3000).map(|(s, _)| s.name.to_string()), Some("jitted_c".into()));
        assert!(maps.lookup(pid, 0x1010).is_none(), "the old names are gone with the old text");
        std::fs::remove_file(&path).expect("clean up");
        assert!(maps.lookup(pid, 0x1010).is_none(), "gone with its file");
    }
}
