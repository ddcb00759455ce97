//! Finding the program as a shell would, before anything is attached.

use std::{
    ffi::OsStr,
    io,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use super::{LaunchError, RunAs};

/// Whether `p` may be executed by `who` (None: root, which needs any one
/// execute bit), judged from its mode bits as exec(2) judges them.
fn executable(p: &Path, who: Option<&RunAs>) -> Result<bool, io::Error> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(p)?;
    if m.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    let mode = m.permissions().mode();
    let bit = match who {
        None => 0o111,
        Some(u) if u.uid == m.uid() => 0o100,
        Some(u) if u.gid == m.gid() || u.groups.contains(&m.gid()) => 0o010,
        Some(_) => 0o001,
    };
    Ok(mode & bit != 0)
}

/// The file `program` runs: itself when it holds a '/', else the first
/// executable file of that name in `path_var`'s directories (an empty entry
/// is the current directory), executable by `who` (the user it runs as;
/// None: root). Not found: 127; found but a directory or not executable: 126.
pub fn resolve(program: &OsStr, path_var: Option<&OsStr>, who: Option<&RunAs>) -> Result<PathBuf, LaunchError> {
    let name = program.to_string_lossy().into_owned();
    let cannot = |error| LaunchError::CannotRun { program: name.clone(), error };
    if name.is_empty() {
        return Err(LaunchError::NotFound { program: "''".into() });
    }
    if name.contains('/') {
        let p = PathBuf::from(program);
        return match executable(&p, who) {
            Ok(true) => Ok(p),
            Ok(false) => Err(cannot(io::Error::from_raw_os_error(libc::EACCES))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LaunchError::NotFound { program: name }),
            Err(e) => Err(cannot(e)),
        };
    }
    let mut denied = None;
    for dir in std::env::split_paths(path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"))) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let p = dir.join(program);
        match executable(&p, who) {
            Ok(true) => return Ok(p),
            Ok(false) => denied = denied.or(Some(io::Error::from_raw_os_error(libc::EACCES))),
            Err(_) => {}
        }
    }
    Err(denied.map_or(LaunchError::NotFound { program: name.clone() }, cannot))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn programs_are_found_as_a_shell_finds_them() {
        let dir = std::env::temp_dir().join(format!("lockprof-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).expect("tmpdir");
        let (exe, plain) = (dir.join("bin/tool"), dir.join("bin/data"));
        std::fs::write(&exe, "#!/bin/sh\n").expect("write");
        std::fs::write(&plain, "x").expect("write");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = std::env::join_paths([dir.join("nothing"), dir.join("bin")]).expect("PATH");
        assert_eq!(resolve(OsStr::new("tool"), Some(&path), None).expect("found"), exe);
        let e = resolve(OsStr::new("nope"), Some(&path), None).expect_err("missing");
        assert_eq!((e.exit_code(), e.to_string()), (127, "nope: command not found".to_string()));
        assert_eq!(resolve(OsStr::new("data"), Some(&path), None).expect_err("not executable").exit_code(), 126);
        assert_eq!(resolve(exe.as_os_str(), None, None).expect("a path"), exe);
        assert_eq!(resolve(dir.join("bin").as_os_str(), None, None).expect_err("a directory").exit_code(), 126);
        assert_eq!(resolve(dir.join("gone").as_os_str(), None, None).expect_err("no file").exit_code(), 127);
        assert_eq!(resolve(OsStr::new(""), None, None).expect_err("empty").exit_code(), 127);
        // The user the command runs as must be able to run it: owner bits
        // for its owner, group bits for its group, the others' bits else.
        let owner_only = dir.join("bin/owner-only");
        std::fs::write(&owner_only, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&owner_only, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let meta = std::fs::metadata(&owner_only).expect("stat");
        let user = |uid: u32, gid: u32| RunAs { uid, gid, groups: vec![gid], name: "u".into(), home: "/".into() };
        use std::os::unix::fs::MetadataExt as _;
        let (owner, group) = (meta.uid(), meta.gid());
        assert!(resolve(owner_only.as_os_str(), None, Some(&user(owner, group))).is_ok(), "its owner");
        let other = resolve(owner_only.as_os_str(), None, Some(&user(owner + 1, group + 1)));
        assert_eq!(other.expect_err("another user").exit_code(), 126);
        std::fs::set_permissions(&owner_only, std::fs::Permissions::from_mode(0o710)).expect("chmod");
        assert!(resolve(owner_only.as_os_str(), None, Some(&user(owner + 1, group))).is_ok(), "its group");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
