//! Cgroup ids to paths, by walking the cgroup2 mount.
//!
//! On 64-bit kernels a cgroup's v2 id (`bpf_get_current_cgroup_id()`) is the
//! inode number of its directory in the cgroup2 filesystem, so a walk reading
//! `st_ino` of every directory maps the ids the kernel records to paths. It
//! needs no capabilities: cgroup directories are world-readable.

use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::PathBuf};

use super::CgroupFs;

impl CgroupFs {
    /// Every cgroup under the mount: id -> path relative to the mount ("/"
    /// for the mount point itself, "/a.slice/b.service" below it).
    /// Directories that cannot be read (or vanish during the walk) are
    /// skipped with what is below them; symbolic links are not followed.
    pub fn walk(&self) -> HashMap<u64, String> {
        let mut ids = HashMap::new();
        let Ok(meta) = std::fs::metadata(&self.root) else {
            return ids;
        };
        ids.insert(meta.ino(), "/".to_string());
        let mut todo: Vec<(PathBuf, String)> = vec![(self.root.clone(), String::new())];
        while let Some((dir, rel)) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                let path = format!("{rel}/{}", entry.file_name().to_string_lossy());
                ids.insert(meta.ino(), path.clone());
                todo.push((entry.path(), path));
            }
        }
        ids
    }

    /// Ids of the cgroup at `rel` (a path as [`CgroupFs::walk`] gives it) and
    /// of all its descendants, sorted; empty if there is no such cgroup.
    pub fn subtree_ids(&self, rel: &str) -> Vec<u64> {
        let mut ids: Vec<u64> = self.walk().into_iter().filter(|(_, p)| within(p, rel)).map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids
    }
}

/// `path` is `top` or below it (both relative to the mount, "/" the root).
pub(super) fn within(path: &str, top: &str) -> bool {
    top == "/" || path == top || path.strip_prefix(top).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::{
        super::{CgroupError, test_tree::TempTree},
        *,
    };

    #[test]
    fn walk_maps_every_directorys_inode_to_its_path() {
        let t = TempTree::new("walk", &["system.slice/nginx.service", "system.slice/cron.service", "user.slice"]);
        std::fs::write(t.path("system.slice/cgroup.procs"), "").expect("a file");
        std::os::unix::fs::symlink(t.path("user.slice"), t.path("system.slice/link")).expect("a symlink");
        let ids = t.fs.walk();
        let mut paths: Vec<&str> = ids.values().map(String::as_str).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            ["/", "/system.slice", "/system.slice/cron.service", "/system.slice/nginx.service", "/user.slice"]
        );
        for (id, rel) in &ids {
            assert_eq!(*id, t.ino(rel), "{rel}");
        }
    }

    /// Read-only on the live hierarchy: every id is its directory's inode,
    /// the root is "/", and this process's own cgroup is found.
    #[test]
    fn this_hosts_hierarchy_maps_ids_to_inodes() {
        let fs = match CgroupFs::discover() {
            Ok(fs) => fs,
            Err(CgroupError::NoV2Mount) => {
                eprintln!("skipped: this host mounts no cgroup v2 hierarchy");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let ids = fs.walk();
        let root = std::fs::metadata(fs.root()).expect("stat the mount").ino();
        assert_eq!(ids.get(&root).map(String::as_str), Some("/"));
        for (id, rel) in &ids {
            // A cgroup removed since the walk is no longer there to compare.
            match std::fs::metadata(fs.root().join(rel.trim_start_matches('/'))) {
                Ok(meta) => assert_eq!(*id, meta.ino(), "{rel}"),
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{rel}: {e}"),
            }
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("reading /proc/self/cgroup");
        let own = own.lines().find_map(|l| l.strip_prefix("0::")).expect("a cgroup v2 line in /proc/self/cgroup");
        if fs.whole() {
            assert!(ids.values().any(|p| p == own), "own cgroup {own} not walked");
            assert_eq!(fs.resolve(own).expect("resolving own cgroup"), own);
        }
    }

    #[test]
    fn a_missing_mount_walks_to_nothing() {
        let fs = CgroupFs::at("/nonexistent/lockprof-cgroup-root", false);
        assert!(fs.walk().is_empty());
        assert!(fs.subtree_ids("/").is_empty());
    }

    #[test]
    fn subtree_ids_hold_the_cgroup_and_its_descendants_only() {
        let t = TempTree::new("subtree", &["a/b/c", "a/bb", "ab"]);
        let mut want = vec![t.ino("/a"), t.ino("/a/b"), t.ino("/a/b/c"), t.ino("/a/bb")];
        want.sort_unstable();
        assert_eq!(t.fs.subtree_ids("/a"), want);
        let mut b = vec![t.ino("/a/b"), t.ino("/a/b/c")];
        b.sort_unstable();
        // "/a/bb" shares the prefix "/a/b" but is not below it.
        assert_eq!(t.fs.subtree_ids("/a/b"), b);
        assert_eq!(t.fs.subtree_ids("/").len(), 6);
        assert!(t.fs.subtree_ids("/nope").is_empty());
    }
}
