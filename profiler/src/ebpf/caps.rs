//! Privilege checks, from the effective capability set of this process.

/// CAP_SYS_ADMIN.
const CAP_SYS_ADMIN: u32 = 21;
/// CAP_PERFMON.
const CAP_PERFMON: u32 = 38;
/// CAP_BPF.
const CAP_BPF: u32 = 39;
/// CAP_SYS_RESOURCE.
const CAP_SYS_RESOURCE: u32 = 24;

/// What this process may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Privileges {
    /// Effective uid is 0.
    pub root: bool,
    /// CAP_BPF.
    pub cap_bpf: bool,
    /// CAP_PERFMON.
    pub cap_perfmon: bool,
    /// CAP_SYS_ADMIN.
    pub cap_sys_admin: bool,
    /// CAP_SYS_RESOURCE (raising RLIMIT_MEMLOCK; not needed with memcg accounting).
    pub cap_sys_resource: bool,
}

impl Privileges {
    /// Parses the `CapEff:` line of /proc/self/status.
    pub fn from_status(status: &str, euid: u32) -> Privileges {
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        let has = |bit: u32| eff & (1u64 << bit) != 0;
        Privileges {
            root: euid == 0,
            cap_bpf: has(CAP_BPF),
            cap_perfmon: has(CAP_PERFMON),
            cap_sys_admin: has(CAP_SYS_ADMIN),
            cap_sys_resource: has(CAP_SYS_RESOURCE),
        }
    }

    /// Enough to load tracing programs: CAP_BPF+CAP_PERFMON, or CAP_SYS_ADMIN.
    pub fn can_trace(&self) -> bool {
        (self.cap_bpf && self.cap_perfmon) || self.cap_sys_admin
    }

    /// One line naming what is missing, for the error message.
    pub fn missing(&self) -> Option<String> {
        if self.can_trace() {
            return None;
        }
        let mut miss = Vec::new();
        if !self.cap_bpf {
            miss.push("CAP_BPF");
        }
        if !self.cap_perfmon {
            miss.push("CAP_PERFMON");
        }
        Some(format!(
            "needs root, or CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); this process lacks {}: run it with sudo",
            miss.join(" and ")
        ))
    }
}

/// Privileges of the current process.
pub fn check_privileges() -> Privileges {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    Privileges::from_status(&status, euid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_with_full_caps() {
        let p = Privileges::from_status("Name:\tx\nCapEff:\t000001ffffffffff\n", 0);
        assert!(p.root && p.can_trace() && p.cap_sys_resource);
        assert_eq!(p.missing(), None);
    }

    #[test]
    fn this_machine_lacks_sys_resource_but_can_trace() {
        // CAP_BPF|CAP_PERFMON|CAP_SYS_ADMIN without CAP_SYS_RESOURCE.
        let eff = (1u64 << 39) | (1 << 38) | (1 << 21);
        let p = Privileges::from_status(&format!("CapEff:\t{eff:016x}\n"), 0);
        assert!(p.can_trace());
        assert!(!p.cap_sys_resource);
    }

    #[test]
    fn unprivileged_user_is_told_what_is_missing() {
        let p = Privileges::from_status("CapEff:\t0000000000000000\n", 1000);
        assert!(!p.can_trace());
        let msg = p.missing().expect("missing");
        assert!(msg.contains("CAP_BPF and CAP_PERFMON") && msg.contains("sudo"), "{msg}");
        let perfmon_only = Privileges::from_status(&format!("CapEff:\t{:016x}\n", 1u64 << 38), 1000);
        assert!(perfmon_only.missing().expect("missing").contains("lacks CAP_BPF:"));
    }
}
