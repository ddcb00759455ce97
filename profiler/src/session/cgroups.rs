//! The session's cgroup services: names for the profile builder, and the
//! `--cgroup` filter kept up to date with cgroups created while recording.

use std::collections::HashSet;

use crate::{
    cgroups::{CgroupFs, CgroupTree},
    ebpf::CgroupFilter,
    pipeline::CgroupNames,
};

/// cgroup names from the cgroup2 mount (rescanned when an id is new).
pub struct TreeNames(pub CgroupTree);

impl CgroupNames for TreeNames {
    fn name(&mut self, id: u64) -> (String, Option<String>) {
        let info = self.0.info(id);
        (info.name, info.path)
    }
}

/// The `--cgroup` filter: its roots are re-expanded every interval, so a
/// container started under a filtered slice is recorded from then on.
pub struct FilterWatch {
    filter: CgroupFilter,
    fs: CgroupFs,
    roots: Vec<String>,
    known: HashSet<u64>,
    refused: bool,
}

impl FilterWatch {
    /// A watch over `filter`, which already holds `known`.
    pub fn new(filter: CgroupFilter, fs: CgroupFs, roots: Vec<String>, known: &[u64]) -> FilterWatch {
        FilterWatch { filter, fs, roots, known: known.iter().copied().collect(), refused: false }
    }

    /// Adds the cgroups created below the roots since the last call; the
    /// number added.
    pub fn refresh(&mut self) -> usize {
        let mut added = 0;
        for root in &self.roots {
            for id in self.fs.subtree_ids(root) {
                if self.known.contains(&id) {
                    continue;
                }
                if self.filter.allow(id) {
                    self.known.insert(id);
                    added += 1;
                } else if !self.refused {
                    self.refused = true;
                    log::warn!(
                        "the --cgroup filter map is full ({} cgroups): cgroups created below {root} from now on \
                         are not recorded",
                        self.known.len()
                    );
                }
            }
        }
        added
    }
}
