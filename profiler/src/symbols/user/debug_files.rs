//! Separate debug files for stripped binaries: what distributions ship as
//! `-dbgsym` / `-debuginfo` packages, found the way gdb and perf find them.
//!
//! A stripped binary keeps `.dynsym` (exported functions, read always) and
//! a `.gnu_debuglink` naming its debug file; blazesym follows that link
//! through `<dir>/.build-id/xx/rest.debug` and then `<dir>/<name>` for each
//! debug directory given here: `--debug-dir` first, then `/usr/lib/debug`
//! and `/lib/debug` (where Debian's `-dbgsym` packages install). A debug
//! file's CRC must match the link, so a stale one is never used.
//!
//! Where `DEBUGINFOD_URLS` is set (and only there), a binary whose debug
//! file is not installed is fetched once by build id with elfutils'
//! `debuginfod-find`, which keeps its own cache and honours the usual
//! `DEBUGINFOD_*` variables; lockprof links the file into a private
//! `.build-id` directory (created new, mode 0700, under an unpredictable
//! name) it puts first in the search. Only a binary that can use one is
//! fetched for: it has a `.gnu_debuglink` (the only way blazesym reaches a
//! debug file) and no DWARF of its own. The fetch runs on the symbolizer's
//! thread, once per build id, before the binary's first lookup, at most
//! [`MAX_FETCHES`] a session (`DEBUGINFOD_TIMEOUT` defaults to 10 s here,
//! `DEBUGINFOD_MAXTIME`, the whole download, to 30 s).

use std::collections::HashSet;
use std::env;
use std::ffi::OsStr;
use std::fs::{self, DirBuilder, File};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use object::{Object as _, ReadCache};

/// Where distributions install debug files.
pub const DEFAULT_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];
/// The environment variable that turns debuginfod on.
pub const DEBUGINFOD_URLS: &str = "DEBUGINFOD_URLS";
/// elfutils' client.
const DEBUGINFOD_CLIENT: &str = "debuginfod-find";
/// Seconds `debuginfod-find` waits for a server unless told otherwise.
const DEFAULT_TIMEOUT_S: &str = "10";
/// Seconds a whole download may take unless told otherwise.
const DEFAULT_MAXTIME_S: &str = "30";
/// Debug files asked of debuginfod in one session at most.
pub const MAX_FETCHES: usize = 64;

/// What the user asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebugFileOptions {
    /// `--debug-dir`, searched before the defaults (in order).
    pub dirs: Vec<PathBuf>,
}

/// What a binary's first lookup found about its debug file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DebugFile {
    /// Installed in a debug directory (or nothing to look for).
    Local,
    /// Not installed, and debuginfod is not in use.
    Absent,
    /// Fetched from debuginfod now.
    Fetched,
    /// Not installed, and debuginfod did not have it (or failed).
    NotFetched,
}

/// The debug directories, and the debuginfod client when it is in use.
#[derive(Debug)]
pub(super) struct DebugFiles {
    dirs: Vec<PathBuf>,
    debuginfod: Option<Debuginfod>,
}

impl DebugFiles {
    pub(super) fn new(opts: &DebugFileOptions) -> Self {
        let urls = env::var_os(DEBUGINFOD_URLS).filter(|u| !u.is_empty());
        let debuginfod = urls.and_then(|_| match find_in_path(DEBUGINFOD_CLIENT) {
            Some(client) => Debuginfod::new(client)
                .map_err(|e| log::warn!("{DEBUGINFOD_URLS} is set but no directory for its links: {e}"))
                .ok(),
            None => {
                log::warn!(
                    "{DEBUGINFOD_URLS} is set but {DEBUGINFOD_CLIENT} is not installed (apt install debuginfod): \
                     debug files are not fetched"
                );
                None
            }
        });
        let defaults = DEFAULT_DEBUG_DIRS.iter().map(PathBuf::from);
        Self { dirs: opts.dirs.iter().cloned().chain(defaults).collect(), debuginfod }
    }

    /// The directories blazesym searches, in order: fetched files first.
    pub(super) fn search_dirs(&self) -> Vec<PathBuf> {
        self.debuginfod.iter().map(|d| d.links.clone()).chain(self.dirs.iter().cloned()).collect()
    }

    /// Makes the debug file of `binary` (its build id in lower-case hex)
    /// findable if it can be: call before the binary's first lookup.
    pub(super) fn prepare(&mut self, build_id: Option<&str>, binary: &File) -> DebugFile {
        let Some(id) = build_id.filter(|id| id.len() >= 4) else {
            return DebugFile::Local;
        };
        if self.search_dirs().iter().any(|dir| build_id_path(dir, id).exists()) {
            return DebugFile::Local;
        }
        let Some(d) = self.debuginfod.as_mut() else {
            return DebugFile::Absent;
        };
        if !wants_debug_file(binary) {
            return DebugFile::Absent;
        }
        match d.fetch(id) {
            Fetch::Fetched => DebugFile::Fetched,
            Fetch::Failed => DebugFile::NotFetched,
            Fetch::AskedBefore | Fetch::OverBudget => DebugFile::Absent,
        }
    }
}

/// `<dir>/.build-id/xx/rest.debug`, gdb's and blazesym's layout.
pub(super) fn build_id_path(dir: &Path, build_id: &str) -> PathBuf {
    let (head, rest) = build_id.split_at(2);
    dir.join(".build-id").join(head).join(format!("{rest}.debug"))
}

/// Whether a separate debug file would serve `binary`: it links to one
/// (`.gnu_debuglink`) and has no DWARF of its own.
fn wants_debug_file(binary: &File) -> bool {
    let cache = ReadCache::new(binary);
    let Ok(elf) = object::File::parse(&cache) else {
        return false;
    };
    elf.section_by_name(".gnu_debuglink").is_some() && elf.section_by_name(".debug_info").is_none()
}

/// `name` in `$PATH`, as `record -- COMMAND` finds programs, if there.
fn find_in_path(name: &str) -> Option<PathBuf> {
    crate::launch::resolve(OsStr::new(name), env::var_os("PATH").as_deref(), None).ok()
}

/// elfutils' client and the private directory of links to what it fetched.
#[derive(Debug)]
struct Debuginfod {
    client: PathBuf,
    /// Removed with this value.
    links: PathBuf,
    /// Build ids asked for already (fetched or not): each is asked once.
    asked: HashSet<String>,
}

/// What one ask of debuginfod came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fetch {
    Fetched,
    Failed,
    /// Asked already this session (fetched or not): not asked again.
    AskedBefore,
    /// [`MAX_FETCHES`] reached.
    OverBudget,
}

impl Debuginfod {
    fn new(client: PathBuf) -> std::io::Result<Self> {
        // A new directory, never one that exists (someone else's in /tmp).
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let links = env::temp_dir().join(format!("lockprof-debuginfod-{}-{nanos:09}", std::process::id()));
        DirBuilder::new().mode(0o700).create(&links)?;
        DirBuilder::new().mode(0o700).create(links.join(".build-id"))?;
        Ok(Self { client, links, asked: HashSet::new() })
    }

    /// Fetches `build_id`'s debug file and links it.
    fn fetch(&mut self, build_id: &str) -> Fetch {
        if self.asked.contains(build_id) {
            return Fetch::AskedBefore;
        }
        if self.asked.len() >= MAX_FETCHES {
            return Fetch::OverBudget;
        }
        self.asked.insert(build_id.to_string());
        let mut cmd = Command::new(&self.client);
        cmd.args(["debuginfo", build_id]).stdin(Stdio::null()).stderr(Stdio::null());
        for (var, default) in [("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT_S), ("DEBUGINFOD_MAXTIME", DEFAULT_MAXTIME_S)] {
            if env::var_os(var).is_none() {
                cmd.env(var, default);
            }
        }
        let fetched = match cmd.output() {
            Ok(out) if out.status.success() => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
            Ok(_) => return Fetch::Failed,
            Err(e) => {
                log::warn!("cannot run {}: {e}", self.client.display());
                return Fetch::Failed;
            }
        };
        let link = build_id_path(&self.links, build_id);
        let linked = link.parent().is_some_and(|dir| DirBuilder::new().mode(0o700).create(dir).is_ok() || dir.is_dir())
            && std::os::unix::fs::symlink(&fetched, &link).is_ok();
        if linked && fetched.is_file() { Fetch::Fetched } else { Fetch::Failed }
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        // Best effort: the links only point into debuginfod's own cache.
        let _ = fs::remove_dir_all(&self.links);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths_follow_gdbs_layout() {
        let p = build_id_path(Path::new("/usr/lib/debug"), "44c007cfee140e4c");
        assert_eq!(p, Path::new("/usr/lib/debug/.build-id/44/c007cfee140e4c.debug"));
    }

    #[test]
    fn user_dirs_come_before_the_distributions_and_a_local_file_needs_no_fetch() {
        let dir = env::temp_dir().join(format!("lockprof-debugdir-test-{}", std::process::id()));
        let file = build_id_path(&dir, "0123456789abcdef");
        fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        fs::write(&file, b"debug").expect("write");
        // `new` without its debuginfod part, whatever this environment says.
        let mut files =
            DebugFiles { debuginfod: None, ..DebugFiles::new(&DebugFileOptions { dirs: vec![dir.clone()] }) };
        assert_eq!(files.search_dirs()[..2], [dir.clone(), PathBuf::from(DEFAULT_DEBUG_DIRS[0])]);
        let any = File::open("/proc/self/exe").expect("a binary");
        assert_eq!(files.prepare(Some("0123456789abcdef"), &any), DebugFile::Local);
        assert_eq!(files.prepare(Some("fedcba9876543210"), &any), DebugFile::Absent);
        assert_eq!(files.prepare(None, &any), DebugFile::Local, "nothing to look for");
        fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn the_links_directory_is_new_and_private() {
        let d = Debuginfod::new(PathBuf::from("/bin/false")).expect("a new directory");
        let mode = std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&d.links).expect("stat").permissions());
        assert_eq!(mode & 0o777, 0o700);
        // A second one (same pid) never reuses it.
        let e = Debuginfod::new(PathBuf::from("/bin/false")).expect("another");
        assert_ne!(d.links, e.links);
    }

    #[test]
    fn each_build_id_is_asked_once_and_failures_are_not_asked_again() {
        let mut d = Debuginfod::new(PathBuf::from("/bin/false")).expect("dir");
        assert_eq!(d.fetch("0123456789abcdef"), Fetch::Failed, "/bin/false fails");
        assert_eq!(d.fetch("0123456789abcdef"), Fetch::AskedBefore);
        for i in 1..MAX_FETCHES {
            let _ = d.fetch(&format!("{i:016x}"));
        }
        assert_eq!(d.fetch("ffffffffffffffff"), Fetch::OverBudget);
    }

    #[test]
    fn only_a_binary_that_links_to_a_debug_file_and_lacks_dwarf_wants_one() {
        // This test binary has DWARF (a debug build) and no debug link.
        let own = File::open("/proc/self/exe").expect("own binary");
        assert!(!wants_debug_file(&own));
        // Debian's binaries are stripped with a link (when there is one here).
        if let Ok(ls) = File::open("/usr/bin/ls") {
            let cache = ReadCache::new(&ls);
            let linked = object::File::parse(&cache).is_ok_and(|e| e.section_by_name(".gnu_debuglink").is_some());
            assert_eq!(wants_debug_file(&ls), linked);
        }
    }
}
