//! Least privilege once attached: `lockprof serve` needs CAP_BPF and
//! CAP_PERFMON (or CAP_SYS_ADMIN) to load and attach its programs and
//! CAP_SYSLOG to read kernel addresses from kallsyms; once that is done it
//! only reads and updates its own maps through file descriptors it already
//! holds. So, while the process still has a single thread (capabilities are
//! per thread; threads created later inherit the caller's), it:
//!
//! - empties the bounding set (when it has CAP_SETPCAP) and the ambient and
//!   inheritable sets, and sets `no_new_privs`, so nothing it executes can
//!   regain a capability;
//! - empties the effective and permitted sets, keeping only what map access
//!   still needs: nothing on kernels that check privileges when maps are
//!   created (6.5 and later), CAP_BPF (or CAP_SYS_ADMIN before 5.8) where
//!   `kernel.unprivileged_bpf_disabled` guards every bpf(2) command. That is
//!   found out by trying: a map read with the capability lowered.

use caps::{CapSet, Capability, CapsHashSet};

/// Why privileges could not be dropped.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// Other threads exist: dropping capabilities in one would leave theirs.
    #[error("cannot drop capabilities: {0} threads run already (capabilities are per thread)")]
    Threads(usize),
    /// A capability call failed.
    #[error("dropping capabilities: {0}")]
    Caps(String),
    /// Map access fails even with every capability it could keep.
    #[error("reading lockprof's maps fails with every capability set tried after attaching: {0}")]
    Maps(std::io::Error),
}

/// What the process kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Capabilities left in the permitted and effective sets.
    pub capabilities: Vec<String>,
    /// Whether the bounding set was emptied (needs CAP_SETPCAP).
    pub bounding_cleared: bool,
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.capabilities.as_slice() {
            [] => write!(f, "no capabilities kept")?,
            c => write!(f, "kept {} (map access needs it on this kernel)", c.join(", "))?,
        }
        if self.bounding_cleared {
            write!(f, "; bounding set emptied, no_new_privs set")
        } else {
            write!(f, "; no_new_privs set (bounding set left as is: no CAP_SETPCAP)")
        }
    }
}

fn caps_err(e: caps::errors::CapsError) -> PrivilegeError {
    PrivilegeError::Caps(e.to_string())
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(1)
}

/// The capabilities to try keeping for map access, in order: none first.
pub fn candidates(permitted: &CapsHashSet) -> Vec<Option<Capability>> {
    let mut out = vec![None];
    out.extend(
        [Capability::CAP_BPF, Capability::CAP_SYS_ADMIN].into_iter().filter(|c| permitted.contains(c)).map(Some),
    );
    out
}

/// The first candidate with which `probe` succeeds.
pub fn first_working<E>(
    candidates: &[Option<Capability>],
    mut probe: impl FnMut(Option<Capability>) -> Result<(), E>,
) -> Result<Option<Capability>, E> {
    let mut last = None;
    for c in candidates {
        match probe(*c) {
            Ok(()) => return Ok(*c),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("candidates always holds `None`"))
}

fn set_no_new_privs() -> Result<(), PrivilegeError> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) only sets a flag of this process.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(PrivilegeError::Caps(format!("no_new_privs: {}", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// Drops every capability map access does not need (see the module
/// documentation); `map_access` reads a map as the pipeline will.
pub fn drop_after_attach(map_access: impl Fn() -> std::io::Result<()>) -> Result<Kept, PrivilegeError> {
    let n = threads();
    if n > 1 {
        return Err(PrivilegeError::Threads(n));
    }
    let permitted = caps::read(None, CapSet::Permitted).map_err(caps_err)?;
    let effective = caps::read(None, CapSet::Effective).map_err(caps_err)?;
    let bounding_cleared = effective.contains(&Capability::CAP_SETPCAP);
    if bounding_cleared {
        caps::clear(None, CapSet::Bounding).map_err(caps_err)?;
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_err)?;
    caps::clear(None, CapSet::Inheritable).map_err(caps_err)?;
    let keep = first_working(&candidates(&permitted), |c| {
        let set: CapsHashSet = c.into_iter().collect();
        caps::set(None, CapSet::Effective, &set).map_err(|e| std::io::Error::other(e.to_string()))?;
        map_access()
    })
    .map_err(PrivilegeError::Maps)?;
    let set: CapsHashSet = keep.into_iter().collect();
    caps::set(None, CapSet::Effective, &set).map_err(caps_err)?;
    caps::set(None, CapSet::Permitted, &set).map_err(caps_err)?;
    set_no_new_privs()?;
    Ok(Kept { capabilities: keep.iter().map(|c| c.to_string()).collect(), bounding_cleared })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_when_maps_work_without_capabilities() {
        let permitted: CapsHashSet = [Capability::CAP_BPF, Capability::CAP_PERFMON].into_iter().collect();
        let c = candidates(&permitted);
        assert_eq!(c, [None, Some(Capability::CAP_BPF)], "CAP_PERFMON is never needed after attach");
        assert_eq!(first_working(&c, |_| Ok::<(), ()>(())), Ok(None));
    }

    #[test]
    fn cap_bpf_is_kept_where_the_kernel_asks_for_it() {
        let permitted: CapsHashSet = caps::all();
        let c = candidates(&permitted);
        let got = first_working(&c, |cap| if cap.is_some() { Ok(()) } else { Err("EPERM") });
        assert_eq!(got, Ok(Some(Capability::CAP_BPF)));
        let none = first_working(&c, |_| Err::<(), _>("EPERM"));
        assert_eq!(none, Err("EPERM"));
    }

    #[test]
    fn kept_reads_as_one_line() {
        let k = Kept { capabilities: vec!["CAP_BPF".into()], bounding_cleared: true };
        assert_eq!(
            k.to_string(),
            "kept CAP_BPF (map access needs it on this kernel); bounding set emptied, no_new_privs set"
        );
        let none = Kept { capabilities: vec![], bounding_cleared: false };
        assert!(none.to_string().starts_with("no capabilities kept; no_new_privs set"));
    }
}
