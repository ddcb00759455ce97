//! `lockprof doctor`: what this kernel supports.

use std::fmt::Write as _;

use super::print_stdout;
use crate::{cli::DoctorArgs, ebpf::features};

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Renders the doctor's findings as text.
pub fn render_doctor(d: &features::Doctor) -> String {
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
    for b in &d.backends {
        let _ = writeln!(s, "  {:<11} {:<4} {}", b.name, yes(b.available), b.detail);
    }
    let _ = writeln!(s, "hold backends (release functions):");
    for b in &d.holds {
        let _ = writeln!(s, "  {:<11} {:<4} {}", b.name, yes(b.available), b.detail);
    }
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
    for b in &d.yield_to {
        let _ = writeln!(s, "  {:<11} {:<4} {}", b.name, yes(b.available), b.detail);
    }
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
    for why in &m.missing {
        let _ = writeln!(s, "  - {why}");
    }
    s
}

/// Runs the checks and prints them.
pub fn doctor(args: &DoctorArgs) -> anyhow::Result<()> {
    let d = features::run();
    if args.json {
        print_stdout(&(serde_json::to_string_pretty(&d)? + "\n"))?;
    } else {
        print_stdout(&render_doctor(&d))?;
    }
    Ok(())
}
