//! Finding the cgroup v2 hierarchy in /proc/self/mountinfo.

use std::{
    ffi::OsString,
    os::unix::ffi::OsStringExt as _,
    path::{Path, PathBuf},
};

use super::{CgroupError, CgroupFs};

/// Where the mount table is read from.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The fields of one mountinfo line that say where a cgroup hierarchy is.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The directory of the filesystem mounted there (field 4): "/" unless a
    /// subtree is mounted (a bind mount, or another cgroup namespace's view).
    root: String,
    /// The mount point (field 5).
    point: PathBuf,
    /// The filesystem type (the first field after " - ").
    fstype: String,
}

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012`
/// newline, `\134` backslash); anything else is kept as it is.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// Parses one line: `id parent major:minor root point options [optional...] - fstype source superoptions`.
fn parse_line(line: &str) -> Option<Mount> {
    let mut fields = line.split(' ');
    let root = fields.nth(3)?;
    let point = fields.next()?;
    let fstype = fields.skip_while(|f| *f != "-").nth(1)?;
    Some(Mount {
        root: String::from_utf8_lossy(&unescape(root)).into_owned(),
        point: PathBuf::from(OsString::from_vec(unescape(point))),
        fstype: fstype.to_string(),
    })
}

impl CgroupFs {
    /// Reads /proc/self/mountinfo and picks the cgroup2 mount (see
    /// [`CgroupFs::from_mountinfo`]).
    pub fn discover() -> Result<CgroupFs, CgroupError> {
        let text = std::fs::read_to_string(MOUNTINFO)
            .map_err(|source| CgroupError::Io { path: PathBuf::from(MOUNTINFO), source })?;
        CgroupFs::from_mountinfo(&text)
    }

    /// Picks the cgroup2 mount from a mountinfo text: the first whose mount
    /// root is "/" (the whole hierarchy as this cgroup namespace sees it);
    /// failing that, the first cgroup2 mount at all. Such a mount shows only
    /// a subtree (a bind mount, or a mount made in another cgroup namespace):
    /// it is used as it is, paths are relative to its mount point, the root it
    /// shows is kept in [`CgroupFs::mount_root`], and ids of cgroups outside it
    /// stay unknown. `hybrid` is set when cgroup v1 hierarchies are mounted too.
    pub fn from_mountinfo(text: &str) -> Result<CgroupFs, CgroupError> {
        let mounts: Vec<Mount> = text.lines().filter_map(parse_line).collect();
        let hybrid = mounts.iter().any(|m| m.fstype == "cgroup");
        let v2 = || mounts.iter().filter(|m| m.fstype == "cgroup2");
        let pick = v2().find(|m| m.root == "/").or_else(|| v2().next()).ok_or(CgroupError::NoV2Mount)?;
        Ok(CgroupFs { root: pick.point.clone(), hybrid, mount_root: pick.root.clone() })
    }

    /// A cgroup2 tree at `root` showing the whole hierarchy (tests build one
    /// in a temporary directory).
    pub fn at(root: impl Into<PathBuf>, hybrid: bool) -> CgroupFs {
        CgroupFs { root: root.into(), hybrid, mount_root: "/".to_string() }
    }

    /// The cgroup2 mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Cgroup v1 hierarchies are mounted too (the "hybrid" layout).
    pub fn hybrid(&self) -> bool {
        self.hybrid
    }

    /// The hierarchy's directory shown at the mount point: "/" for the whole
    /// hierarchy, another path when only a subtree is visible.
    pub fn mount_root(&self) -> &str {
        &self.mount_root
    }

    /// The whole hierarchy is visible: an unknown id is a removed cgroup, not
    /// one outside the mount.
    pub fn whole(&self) -> bool {
        self.mount_root == "/"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's layout: v1 controllers under /sys/fs/cgroup, v2 at unified.
    const HYBRID: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
";

    #[test]
    fn v2_only_is_not_hybrid() {
        let text = "\
25 1 0:23 / / rw,relatime - ext4 /dev/vda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
        let fs = CgroupFs::from_mountinfo(text).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/sys/fs/cgroup"));
        assert!(!fs.hybrid());
        assert!(fs.whole());
    }

    #[test]
    fn hybrid_finds_the_unified_mount_among_v1_controllers() {
        let fs = CgroupFs::from_mountinfo(HYBRID).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/sys/fs/cgroup/unified"));
        assert!(fs.hybrid());
        assert_eq!(fs.mount_root(), "/");
    }

    #[test]
    fn v1_only_has_no_v2_mount() {
        let v1: String = HYBRID.lines().filter(|l| !l.contains("cgroup2")).map(|l| format!("{l}\n")).collect();
        let err = CgroupFs::from_mountinfo(&v1).expect_err("no cgroup2 line");
        assert!(matches!(err, CgroupError::NoV2Mount), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("mount -t cgroup2") && !text.contains('\n'), "{text}");
        assert!(matches!(CgroupFs::from_mountinfo(""), Err(CgroupError::NoV2Mount)));
    }

    #[test]
    fn a_subtree_mount_is_used_when_nothing_shows_the_whole_hierarchy() {
        // A container's view: the host's mount of its own cgroup namespace.
        let sub = "50 40 0:30 /../../kubepods.slice /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
        let fs = CgroupFs::from_mountinfo(sub).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/sys/fs/cgroup"));
        assert_eq!(fs.mount_root(), "/../../kubepods.slice");
        assert!(!fs.whole());
        // With a whole-hierarchy mount listed after it, that one wins.
        let both = format!("{sub}51 40 0:30 / /mnt/cg rw - cgroup2 cgroup2 rw\n");
        let fs = CgroupFs::from_mountinfo(&both).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/mnt/cg"));
        assert!(fs.whole());
    }

    #[test]
    fn escaped_spaces_and_backslashes_in_the_mount_point() {
        let text = "60 1 0:40 / /mnt/my\\040cgroups\\134v2 rw shared:1 master:2 - cgroup2 none rw\n";
        let fs = CgroupFs::from_mountinfo(text).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/mnt/my cgroups\\v2"));
        assert_eq!(unescape("a\\011b\\012"), b"a\tb\n");
        // A backslash not followed by three octal digits is kept.
        assert_eq!(unescape("x\\09y\\"), b"x\\09y\\");
    }

    #[test]
    fn lines_that_do_not_parse_are_skipped() {
        let text = format!("garbage\n1 2 3\n{HYBRID}");
        let fs = CgroupFs::from_mountinfo(&text).expect("a cgroup2 mount");
        assert_eq!(fs.root(), Path::new("/sys/fs/cgroup/unified"));
    }
}
