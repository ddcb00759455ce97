//! A cgroup of the command's own (`--only-command`): made under the cgroup
//! v2 mount before the command starts, joined by it at its gate, so every
//! process it starts is in it too; the `--cgroup` filter then keeps exactly
//! the command's processes. Removed when dropped; processes that outlived
//! the command are moved back to lockprof's own cgroup first.

use std::path::{Path, PathBuf};

use super::LaunchError;
use crate::cgroups::CgroupFs;

/// The command's cgroup.
#[derive(Debug)]
pub struct CommandCgroup {
    dir: PathBuf,
    rel: String,
    /// lockprof's own cgroup's directory, where leftovers go.
    home: PathBuf,
}

/// lockprof's own cgroup v2 path (`0::/x/y` in /proc/self/cgroup).
fn own_path() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

impl CommandCgroup {
    /// Makes `name` at the top of `fs`'s hierarchy (the root cgroup has no
    /// processes-only-in-leaves constraint, and lockprof is root).
    pub fn create(fs: &CgroupFs, name: &str) -> Result<CommandCgroup, LaunchError> {
        let dir = fs.root().join(name);
        // A run killed before it could remove its cgroup leaves it behind,
        // and a later lockprof may get its pid: an empty leftover goes (a
        // cgroup with processes cannot be removed, and is not taken over).
        if dir.is_dir() {
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).map_err(|error| LaunchError::Cgroup { path: dir.clone(), error })?;
        let home = match own_path() {
            Some(p) if fs.whole() => fs.root().join(p.trim_start_matches('/')),
            _ => fs.root().to_path_buf(),
        };
        Ok(CommandCgroup { dir, rel: format!("/{name}"), home })
    }

    /// Its path relative to the mount (`/lockprof-command-42-1`), as `--cgroup` takes it.
    pub fn rel(&self) -> &str {
        &self.rel
    }

    /// The file a process writes `0` to, to join it.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves the processes still in it to lockprof's own cgroup; how many.
    fn evacuate(&self) -> usize {
        let Ok(pids) = std::fs::read_to_string(self.procs()) else { return 0 };
        let to = self.home.join("cgroup.procs");
        pids.lines().filter(|p| std::fs::write(&to, p.trim()).is_ok()).count()
    }
}

fn remove(dir: &Path) -> std::io::Result<()> {
    std::fs::remove_dir(dir)
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        if remove(&self.dir).is_ok() {
            return;
        }
        let moved = self.evacuate();
        if moved > 0 {
            log::warn!(
                "{moved} process(es) the command started outlived it; moved from {} back to lockprof's cgroup",
                self.rel
            );
        }
        if let Err(e) = remove(&self.dir) {
            log::warn!("cannot remove the command's cgroup {}: {e}", self.dir.display());
        }
    }
}
