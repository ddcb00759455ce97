//! Finding the program as a shell would, before anything is attached.

use std::{
    ffi::OsStr,
    io,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use super::LaunchError;

fn executable(p: &Path) -> Result<bool, io::Error> {
    let m = std::fs::metadata(p)?;
    if m.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(m.permissions().mode() & 0o111 != 0)
}

/// The file `program` runs: itself when it holds a '/', else the first
/// executable file of that name in `path_var`'s directories (an empty entry
/// is the current directory). Not found: 127; found but a directory or not
/// executable: 126.
pub fn resolve(program: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    let name = program.to_string_lossy().into_owned();
    let cannot = |error| LaunchError::CannotRun { program: name.clone(), error };
    if name.is_empty() {
        return Err(LaunchError::NotFound { program: "''".into() });
    }
    if name.contains('/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
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
        match executable(&p) {
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
        assert_eq!(resolve(OsStr::new("tool"), Some(&path)).expect("found"), exe);
        let e = resolve(OsStr::new("nope"), Some(&path)).expect_err("missing");
        assert_eq!((e.exit_code(), e.to_string()), (127, "nope: command not found".to_string()));
        assert_eq!(resolve(OsStr::new("data"), Some(&path)).expect_err("not executable").exit_code(), 126);
        assert_eq!(resolve(exe.as_os_str(), None).expect("a path"), exe);
        assert_eq!(resolve(dir.join("bin").as_os_str(), None).expect_err("a directory").exit_code(), 126);
        assert_eq!(resolve(dir.join("gone").as_os_str(), None).expect_err("no file").exit_code(), 127);
        assert_eq!(resolve(OsStr::new(""), None).expect_err("empty").exit_code(), 127);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
