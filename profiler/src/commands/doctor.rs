//! `lockprof doctor`: what this kernel supports, and which running
//! binaries user stacks cannot be unwound through.

mod unwinding;

use std::fmt::Write as _;

use anyhow::Context as _;
use serde::Serialize;

use super::print_stdout;
use crate::{
    cgroups::{CgroupError, CgroupFs},
    cli::DoctorArgs,
    ebpf::features,
    symbols::user::unwind::{self, AuditError, UnwindAudit},
};

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// One line per check; with `verbose`, the verifier's logs indented under it.
fn check_lines(s: &mut String, checks: &[features::BackendCheck], verbose: bool) {
    for b in checks {
        let _ = writeln!(s, "  {:<11} {:<4} {}", b.name, yes(b.available), b.detail);
        if verbose {
            for line in b.verifier_log.lines() {
                let _ = writeln!(s, "      | {line}");
            }
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (whether v1 is mounted too), or
/// why cgroup attribution is unavailable and how to get it.
fn cgroup_text(found: &Result<CgroupFs, CgroupError>) -> String {
    match found {
        Ok(fs) => format!(
            "{} ({}{})",
            fs.root().display(),
            if fs.hybrid() { "hybrid: cgroup v1 hierarchies are mounted too; waits are attributed to v2 cgroups" } else { "unified" },
            if fs.whole() {
                String::new()
            } else {
                format!("; it shows only {} of the hierarchy, cgroups outside it are not named", fs.mount_root())
            }
        ),
        Err(CgroupError::NoV2Mount) => "not mounted: cgroup attribution (--cgroup, --by cgroup) is unavailable; mount it \
                                        (mount -t cgroup2 none /sys/fs/cgroup) or boot with systemd.unified_cgroup_hierarchy=1"
            .to_string(),
        Err(e) => format!("unknown ({e}): cgroup attribution (--cgroup, --by cgroup) is unavailable"),
    }
}

/// Which futex tracepoints `--futex` can use, or why user-space locks
/// cannot be traced.
fn futex_text(have: &[String]) -> String {
    let required = profiler_common::names::futex::REQUIRED;
    if required.iter().all(|r| have.iter().any(|h| h == r)) {
        format!("{} (user-space locks with --futex)", have.join(", "))
    } else {
        "missing syscalls:sys_enter_futex/sys_exit_futex (CONFIG_FTRACE_SYSCALLS is off, or tracefs is not mounted): \
         --futex cannot trace user-space locks"
            .into()
    }
}

/// `doctor --json`: the kernel's facts, the cgroup v2 mount, and the
/// running binaries without unwind information.
#[derive(Serialize)]
struct DoctorJson<'a> {
    #[serde(flatten)]
    doctor: &'a features::Doctor,
    /// The cgroup2 mount point, if any.
    cgroup_v2: Option<String>,
    /// Cgroup v1 hierarchies are mounted too.
    cgroup_hybrid: bool,
    /// The doctor's text line on cgroups.
    cgroup_detail: String,
    /// The survey of the running binaries for `--user-stacks` (none if
    /// /proc could not be listed).
    user_unwinding: Option<&'a UnwindAudit>,
    /// The doctor's summary line on it, or why there is none.
    user_unwinding_detail: String,
}

/// Renders the doctor's findings as text (`verbose`: with the verifier's
/// logs); `cgroups` is what [`CgroupFs::discover`] found, `binaries` what
/// [`unwind::audit`] found.
pub fn render_doctor(
    d: &features::Doctor,
    cgroups: &Result<CgroupFs, CgroupError>,
    binaries: &Result<UnwindAudit, AuditError>,
    verbose: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "kernel:            {}", d.kernel);
    let _ = writeln!(
        s,
        "BTF:               {}",
        if d.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no (tp_btf and fentry need it)" }
    );
    let _ = writeln!(
        s,
        "tracefs:           {}",
        d.tracefs.as_deref().unwrap_or("not mounted (classic tracepoints need it)")
    );
    let _ = writeln!(s, "lock tracepoints:  {}", yes(d.lock_tracepoints));
    let _ = writeln!(s, "futex tracepoints: {}", futex_text(&d.futex_tracepoints));
    let _ = writeln!(s, "cgroup v2:         {}", cgroup_text(cgroups));
    let p = &d.privileges;
    let _ = writeln!(
        s,
        "privileges:        root={} CAP_BPF={} CAP_PERFMON={} CAP_SYS_ADMIN={} CAP_SYS_RESOURCE={}{}",
        yes(p.root),
        yes(p.cap_bpf),
        yes(p.cap_perfmon),
        yes(p.cap_sys_admin),
        yes(p.cap_sys_resource),
        if p.cap_sys_resource {
            ""
        } else {
            " (no RLIMIT_MEMLOCK raise; fine on kernels with memcg BPF accounting, >= 5.11)"
        }
    );
    let k = &d.kallsyms;
    if k.readable {
        let _ = writeln!(
            s,
            "kallsyms:          readable, {} text symbols, {} data symbols{}",
            k.text_symbols,
            k.data_symbols,
            match &k.tasklist_lock {
                Some(a) => format!("; tasklist_lock at {a} (locks are named from kallsyms)"),
                None => "; no tasklist_lock (no CONFIG_KALLSYMS_ALL: lock names are inferred from callers)".to_string(),
            }
        );
    } else {
        let _ = writeln!(s, "kallsyms:          unreadable: {}", k.error.as_deref().unwrap_or("?"));
    }
    let _ = writeln!(s, "wait backends:");
    check_lines(&mut s, &d.backends, verbose);
    let _ = writeln!(s, "hold backends (release functions):");
    check_lines(&mut s, &d.holds, verbose);
    match d.auto_pick {
        Some(b) => {
            let _ = writeln!(s, "auto picks:        {b} ({})", d.auto_reason);
        }
        None => {
            let _ = writeln!(s, "auto picks:        nothing: {}", d.auto_reason);
        }
    }
    let _ = writeln!(
        s,
        "holds:             {}",
        match d.hold_pick {
            Some(h) => format!("measured with {h}"),
            None => "not available: no release function can be probed (waits only)".to_string(),
        }
    );
    let _ = writeln!(s, "yield_to probes (KVM directed yield):");
    check_lines(&mut s, &d.yield_to, verbose);
    let _ = writeln!(
        s,
        "yield_to:          {}; kvm module {}; task_struct offsets: {}",
        match d.yield_pick {
            Some(k) => format!("profiled with {k}"),
            None => "not available: yield_to cannot be probed here (needs fentry or kprobes)".to_string(),
        },
        if d.kvm_loaded { "loaded" } else { "not loaded (nothing calls yield_to until KVM runs vCPUs)" },
        match &d.task_offsets {
            Ok(o) => o.clone(),
            Err(e) => format!("unknown ({e}): yield targets are not named"),
        }
    );
    let m = &d.naming.methods;
    let _ = writeln!(s, "lock naming:");
    let methods = [
        (
            "kernel structures",
            m.kernel_structures,
            "mmap_lock, siglock, pi_lock, rq_lock, zone_lock... compared at contention time (BTF offsets)".to_string(),
        ),
        ("slab cache (kfunc)", m.slab_kfunc, "bpf_get_kmem_cache: &kmalloc-cg-192, &task_struct".to_string()),
        (
            "slab cache names",
            m.slab_iterator,
            format!("kmem_cache iterator names the caches ({} listed)", d.naming.slab_caches),
        ),
        ("struct members", m.struct_fields, "task_struct.pi_lock from BTF".to_string()),
    ];
    for (name, ok, what) in methods {
        let _ = writeln!(s, "  {name:<22} {:<4} {what}", yes(ok));
    }
    let _ = writeln!(s, "lock owners (blame):");
    for o in &d.owners {
        let _ = writeln!(s, "  {:<22} {:<4} {}", o.lock_type, yes(o.owners), o.detail);
    }
    for why in &m.missing {
        let _ = writeln!(s, "  - {why}");
    }
    s.push_str(&unwinding::unwinding_text(binaries));
    s
}

/// Runs the checks and prints them.
pub fn doctor(args: &DoctorArgs) -> anyhow::Result<()> {
    let d = features::run();
    let cgroups = CgroupFs::discover();
    let binaries = unwind::audit();
    if args.json {
        let out = DoctorJson {
            doctor: &d,
            cgroup_v2: cgroups.as_ref().ok().map(|fs| fs.root().display().to_string()),
            cgroup_hybrid: cgroups.as_ref().is_ok_and(CgroupFs::hybrid),
            cgroup_detail: cgroup_text(&cgroups),
            user_unwinding: binaries.as_ref().ok(),
            user_unwinding_detail: unwinding::unwinding_summary(&binaries),
        };
        let json = serde_json::to_string_pretty(&out).context("serializing the findings as JSON")?;
        print_stdout(&(json + "\n")).context("writing the findings")?;
    } else {
        print_stdout(&render_doctor(&d, &cgroups, &binaries, args.verbose > 0)).context("writing the findings")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_check_and_the_verifier_log_only_with_verbose() {
        let checks = [
            features::BackendCheck {
                name: "fentry",
                available: false,
                detail: "not probed: mutex_unlock (rejected by the verifier)".into(),
                verifier_log: "mutex_unlock:\n0: (79) r1 = *(u64 *)(r1 +0)\nR1 pointer arithmetic prohibited\n".into(),
            },
            features::BackendCheck {
                name: "kprobe",
                available: true,
                detail: "releases seen through mutex_unlock".into(),
                verifier_log: String::new(),
            },
        ];
        let mut quiet = String::new();
        check_lines(&mut quiet, &checks, false);
        assert_eq!(quiet.lines().count(), 2, "{quiet}");
        assert!(!quiet.contains("pointer arithmetic"), "{quiet}");
        let mut verbose = String::new();
        check_lines(&mut verbose, &checks, true);
        assert_eq!(verbose.lines().count(), 5, "{verbose}");
        assert!(verbose.contains("      | R1 pointer arithmetic prohibited\n"), "{verbose}");
    }

    #[test]
    fn the_cgroup_line_says_where_v2_is_or_how_to_get_it() {
        let v2 = "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let hybrid = format!(
            "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n{}",
            v2.replace("/sys/fs/cgroup ", "/sys/fs/cgroup/unified ")
        );
        let sub = "50 40 0:30 /../.. /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup_text(&CgroupFs::from_mountinfo(v2)), "/sys/fs/cgroup (unified)");
        let text = cgroup_text(&CgroupFs::from_mountinfo(&hybrid));
        assert!(text.starts_with("/sys/fs/cgroup/unified (hybrid: "), "{text}");
        let text = cgroup_text(&CgroupFs::from_mountinfo(sub));
        assert!(text.contains("shows only /../.. of the hierarchy"), "{text}");
        let text =
            cgroup_text(&CgroupFs::from_mountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"));
        assert!(
            text.starts_with("not mounted: cgroup attribution (--cgroup, --by cgroup) is unavailable; mount it"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn the_futex_line_lists_the_tracepoints_or_says_why_there_are_none() {
        let have = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let text = futex_text(&have(&["sys_exit_futex", "sys_enter_futex"]));
        assert_eq!(text, "sys_exit_futex, sys_enter_futex (user-space locks with --futex)");
        let text = futex_text(&have(&["sys_enter_futex"]));
        assert!(text.starts_with("missing syscalls:sys_enter_futex/sys_exit_futex (CONFIG_FTRACE_SYSCALLS"), "{text}");
        assert!(futex_text(&[]).ends_with("--futex cannot trace user-space locks"));
    }
}
