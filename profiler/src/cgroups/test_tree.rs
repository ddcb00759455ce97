//! A cgroup-like directory tree in a temporary directory, for unit tests.

use std::{os::unix::fs::MetadataExt as _, path::PathBuf};

use super::CgroupFs;

/// Directories under a fresh temporary root, removed on drop.
pub struct TempTree {
    /// The tree, as a whole-hierarchy mount.
    pub fs: CgroupFs,
}

impl TempTree {
    /// A tree holding `dirs` (paths relative to the root, parents created).
    pub fn new(name: &str, dirs: &[&str]) -> TempTree {
        let root = std::env::temp_dir().join(format!("lockprof-cg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("creating the temporary root");
        let t = TempTree { fs: CgroupFs::at(root, false) };
        for d in dirs {
            t.mkdir(d);
        }
        t
    }

    /// The directory at `rel` ("/a/b" or "a/b").
    pub fn path(&self, rel: &str) -> PathBuf {
        self.fs.root().join(rel.trim_start_matches('/'))
    }

    /// Creates the directory at `rel` and its parents.
    pub fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.path(rel)).expect("creating a directory");
    }

    /// The inode number of the directory at `rel`, as `stat` gives it.
    pub fn ino(&self, rel: &str) -> u64 {
        std::fs::metadata(self.path(rel)).expect("stat").ino()
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.fs.root());
    }
}
