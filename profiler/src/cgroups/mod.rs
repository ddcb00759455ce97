//! Cgroup v2 attribution in userspace: finding the cgroup2 mount, mapping
//! the ids the kernel records (`bpf_get_current_cgroup_id()`, the inode
//! number of the cgroup's directory) to paths and short names, and turning a
//! user's `--cgroup` spec into the ids of a subtree.
//!
//! `mount` finds the hierarchy, `walk` maps ids to paths, `spec` resolves
//! `--cgroup`, `names` gives short names, `tree` caches names for output.

mod error;
mod mount;
mod names;
mod spec;
#[cfg(test)]
mod test_tree;
mod tree;
mod walk;

use std::path::PathBuf;

pub use error::CgroupError;
pub use names::short_name;
pub use tree::{CgroupInfo, CgroupTree};

/// A cgroup2 hierarchy mounted at `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupFs {
    /// The mount point.
    root: PathBuf,
    /// Cgroup v1 hierarchies are mounted too.
    hybrid: bool,
    /// The hierarchy's directory shown at the mount point ("/": all of it).
    mount_root: String,
}
