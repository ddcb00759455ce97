//! Cgroup ids to names for the output side, rescanning the mount on a miss.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{CgroupFs, short_name};

/// What the output shows for one cgroup id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupInfo {
    /// The cgroup v2 id the kernel recorded.
    pub id: u64,
    /// Its path relative to the cgroup2 mount ("/" the root), `None` if unknown.
    pub path: Option<String>,
    /// Its short name for display ([`short_name`]).
    pub name: String,
}

/// How often a miss may rescan the mount at most (by default).
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// An id -> [`CgroupInfo`] cache over a cgroup2 mount.
///
/// An id not seen yet rescans the mount, at most once per rescan interval;
/// one still unknown after a rescan that began after it was first asked
/// about is named `[cgroup <id> (removed)]` from then on (the process
/// that waited has left a cgroup since deleted). Until such a rescan it is
/// named `[cgroup <id>]` and asked about again. Ids known once keep their
/// path after the cgroup is deleted: cgroup ids are not reused.
pub struct CgroupTree {
    fs: CgroupFs,
    known: HashMap<u64, CgroupInfo>,
    /// Unknown ids: how many rescans had been done when each was first asked about.
    pending: HashMap<u64, u64>,
    scans: u64,
    last_scan: Option<Instant>,
    rescan_interval: Duration,
    removed: u64,
}

impl CgroupTree {
    /// A cache over `fs`, empty until the first lookup.
    pub fn new(fs: CgroupFs) -> Self {
        CgroupTree {
            fs,
            known: HashMap::new(),
            pending: HashMap::new(),
            scans: 0,
            last_scan: None,
            rescan_interval: RESCAN_INTERVAL,
            removed: 0,
        }
    }

    /// The same cache with another minimum time between rescans
    /// (`Duration::ZERO`: every miss rescans).
    pub fn with_rescan_interval(mut self, interval: Duration) -> Self {
        self.rescan_interval = interval;
        self
    }

    /// The mount this cache reads.
    pub fn fs(&self) -> &CgroupFs {
        &self.fs
    }

    /// What to show for `id`: 0 is "[no cgroup]" (a wait recorded without one).
    pub fn info(&mut self, id: u64) -> CgroupInfo {
        if id == 0 {
            return CgroupInfo { id, path: None, name: "[no cgroup]".to_string() };
        }
        if let Some(info) = self.known.get(&id) {
            return info.clone();
        }
        let asked = *self.pending.entry(id).or_insert(self.scans);
        if self.last_scan.is_none_or(|t| t.elapsed() >= self.rescan_interval) {
            self.rescan();
            if let Some(info) = self.known.get(&id) {
                return info.clone();
            }
        }
        if self.scans > asked {
            self.pending.remove(&id);
            self.removed += 1;
            let what = if self.fs.whole() { "removed" } else { "removed, or outside the mount" };
            let info = CgroupInfo { id, path: None, name: format!("[cgroup {id} ({what})]") };
            self.known.insert(id, info.clone());
            return info;
        }
        CgroupInfo { id, path: None, name: format!("[cgroup {id}]") }
    }

    /// How many ids have been named removed.
    pub fn removed(&self) -> u64 {
        self.removed
    }

    /// Walks the mount and learns the ids not known yet.
    fn rescan(&mut self) {
        for (id, path) in self.fs.walk() {
            self.pending.remove(&id);
            self.known.entry(id).or_insert_with(|| CgroupInfo { id, name: short_name(&path), path: Some(path) });
        }
        self.scans += 1;
        self.last_scan = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::{super::test_tree::TempTree, *};

    #[test]
    fn a_new_directory_is_found_by_a_rescan_and_a_deleted_one_is_named_removed() {
        let t = TempTree::new("tree", &["system.slice/nginx.service"]);
        let mut tree = CgroupTree::new(t.fs.clone()).with_rescan_interval(Duration::ZERO);
        let nginx = t.ino("/system.slice/nginx.service");
        let info = tree.info(nginx);
        assert_eq!(info.path.as_deref(), Some("/system.slice/nginx.service"));
        assert_eq!(info.name, "nginx.service");
        assert_eq!(tree.info(t.ino("/")).name, "/");

        // Created after the first scan: found by the rescan the miss triggers.
        t.mkdir("system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef.scope");
        let docker =
            t.ino("/system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef.scope");
        assert_eq!(tree.info(docker).name, "docker:3f2a9c1b7d4e");

        // Created and deleted before anyone asked: unknown after a rescan.
        t.mkdir("system.slice/gone.service");
        let gone = t.ino("/system.slice/gone.service");
        std::fs::remove_dir(t.path("/system.slice/gone.service")).expect("rmdir");
        assert!(!tree.fs().walk().contains_key(&gone));
        let info = tree.info(gone);
        assert_eq!(info, CgroupInfo { id: gone, path: None, name: format!("[cgroup {gone} (removed)]") });
        assert_eq!(tree.removed(), 1);
        // Named once: asking again neither rescans into another name nor counts twice.
        assert_eq!(tree.info(gone).name, format!("[cgroup {gone} (removed)]"));
        assert_eq!(tree.removed(), 1);

        // Known, then deleted: keeps its path.
        std::fs::remove_dir(t.path("/system.slice/nginx.service")).expect("rmdir");
        assert_eq!(tree.info(nginx).name, "nginx.service");
        assert_eq!(tree.info(0), CgroupInfo { id: 0, path: None, name: "[no cgroup]".to_string() });
        assert_eq!(tree.removed(), 1);
    }

    #[test]
    fn misses_rescan_at_most_once_per_interval() {
        let t = TempTree::new("interval", &["a.service"]);
        let mut tree = CgroupTree::new(t.fs.clone()).with_rescan_interval(Duration::from_secs(3600));
        assert_eq!(tree.info(t.ino("/a.service")).name, "a.service");
        t.mkdir("b.service");
        let b = t.ino("/b.service");
        // The last scan is recent: no rescan, and not called removed either.
        assert_eq!(tree.info(b), CgroupInfo { id: b, path: None, name: format!("[cgroup {b}]") });
        assert_eq!(tree.removed(), 0);
        tree.rescan_interval = Duration::ZERO;
        assert_eq!(tree.info(b).name, "b.service");
        assert_eq!(tree.removed(), 0);
    }
}
