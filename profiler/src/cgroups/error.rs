//! What can go wrong finding the cgroup v2 hierarchy or a cgroup in it.

use std::path::PathBuf;

/// A cgroup lookup that failed: one line, naming what to do.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 entry in /proc/self/mountinfo (a v1-only or no hierarchy).
    #[error(
        "no cgroup v2 hierarchy is mounted (no cgroup2 entry in /proc/self/mountinfo): mount one \
         (mount -t cgroup2 none /sys/fs/cgroup) or run without --cgroup/--by cgroup"
    )]
    NoV2Mount,
    /// Nothing under the mount matches a `--cgroup` spec.
    #[error(
        "no cgroup matches '{spec}' under {} (give a path relative to it, a unit name such as nginx.service, \
         or a short name such as docker:3f2a9c1b7d4e)",
        root.display()
    )]
    NotFound {
        /// What the user gave.
        spec: String,
        /// The cgroup2 mount point searched.
        root: PathBuf,
    },
    /// A name matches several cgroups that are not one subtree.
    #[error(
        "'{spec}' matches {total} cgroups under {}: {}{}; give the path of the one you mean",
        root.display(),
        matches.join(", "),
        if *total > matches.len() { ", ..." } else { "" }
    )]
    Ambiguous {
        /// What the user gave.
        spec: String,
        /// The cgroup2 mount point searched.
        root: PathBuf,
        /// Up to five of the matching paths (relative to the mount), sorted.
        matches: Vec<String>,
        /// How many cgroups match in all.
        total: usize,
    },
    /// A spec that cannot name a cgroup (empty, or climbing out with `..`).
    #[error("bad cgroup '{spec}': {why}")]
    BadSpec {
        /// What the user gave.
        spec: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// Reading a file failed (/proc/self/mountinfo).
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the kernel answered.
        source: std::io::Error,
    },
}
