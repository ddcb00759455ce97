//! The user the command runs as: under sudo, the user who ran it (SUDO_UID,
//! SUDO_GID), with that user's groups and home, as they would have it
//! outside sudo; otherwise lockprof's own.

use std::{
    ffi::{CStr, CString},
    path::PathBuf,
};

use super::LaunchError;

/// A user to switch to before the command runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (the primary one included).
    pub groups: Vec<libc::gid_t>,
    /// Login name (USER, LOGNAME).
    pub name: String,
    /// Home directory (HOME).
    pub home: PathBuf,
}

/// The (uid, gid) sudo says it was run by, when lockprof is root and was
/// run with sudo by another user; None to keep lockprof's own user.
pub fn sudo_ids(euid: u32, var: impl Fn(&str) -> Option<String>) -> Result<Option<(u32, Option<u32>)>, LaunchError> {
    if euid != 0 {
        return Ok(None);
    }
    let Some(uid) = var("SUDO_UID") else { return Ok(None) };
    let uid: u32 = uid.trim().parse().map_err(|_| LaunchError::User(format!("SUDO_UID={uid:?} is not a user id")))?;
    let gid = match var("SUDO_GID") {
        Some(g) => Some(g.trim().parse().map_err(|_| LaunchError::User(format!("SUDO_GID={g:?} is not a group id")))?),
        None => None,
    };
    Ok((uid != 0).then_some((uid, gid)))
}

/// The passwd entry of `uid`: (name, primary gid, home).
fn passwd(uid: u32) -> Option<(String, u32, PathBuf)> {
    // SAFETY: passwd is plain data, filled by getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to owned, live memory of the sizes given;
    // getpwuid_r writes only within them.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings in `buf`, alive here.
    let (name, dir) = unsafe { (CStr::from_ptr(pw.pw_name), CStr::from_ptr(pw.pw_dir)) };
    Some((name.to_string_lossy().into_owned(), pw.pw_gid, PathBuf::from(dir.to_string_lossy().into_owned())))
}

/// The groups `name` belongs to, `gid` first.
fn groups(name: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(cname) = CString::new(name) else { return vec![gid] };
    let mut n: libc::c_int = 64;
    loop {
        let mut list = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(64)];
        let mut got = n;
        // SAFETY: `list` holds `got` entries; getgrouplist writes at most that
        // many and sets `got` to the number needed.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, list.as_mut_ptr(), &mut got) };
        if rc >= 0 {
            list.truncate(usize::try_from(got).unwrap_or(0));
            return list;
        }
        if got <= n || n > 65_536 {
            return vec![gid];
        }
        n = got;
    }
}

impl RunAs {
    /// The user who ran sudo, unless lockprof is not root, was not run by
    /// sudo, or `keep_root`.
    pub fn from_sudo(keep_root: bool) -> Result<Option<RunAs>, LaunchError> {
        if keep_root {
            return Ok(None);
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let Some((uid, gid)) = sudo_ids(euid, |k| std::env::var(k).ok())? else { return Ok(None) };
        let (name, primary, home) = passwd(uid).ok_or_else(|| {
            LaunchError::User(format!("SUDO_UID={uid} names no user in the passwd database (--keep-root runs as root)"))
        })?;
        let gid = gid.unwrap_or(primary);
        Ok(Some(RunAs { uid, gid, groups: groups(&name, gid), name, home }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_ids_only_under_sudo_as_root() {
        let env = |uid: Option<&'static str>, gid: Option<&'static str>| {
            move |k: &str| match k {
                "SUDO_UID" => uid.map(str::to_string),
                "SUDO_GID" => gid.map(str::to_string),
                _ => None,
            }
        };
        assert_eq!(sudo_ids(0, env(Some("1000"), Some("1001"))).expect("ids"), Some((1000, Some(1001))));
        assert_eq!(sudo_ids(0, env(Some("1000"), None)).expect("ids"), Some((1000, None)));
        assert_eq!(sudo_ids(1000, env(Some("1000"), None)).expect("not root"), None);
        assert_eq!(sudo_ids(0, env(None, None)).expect("not sudo"), None);
        assert_eq!(sudo_ids(0, env(Some("0"), Some("0"))).expect("root ran sudo"), None);
        assert!(sudo_ids(0, env(Some("bob"), None)).is_err_and(|e| e.to_string().contains("SUDO_UID")));
    }

    #[test]
    fn root_is_in_the_passwd_database() {
        let (name, gid, home) = passwd(0).expect("root");
        assert_eq!((name.as_str(), gid), ("root", 0));
        assert!(home.is_absolute());
        assert!(groups("root", 0).contains(&0));
    }
}
