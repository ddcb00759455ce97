//! KVM directed yield, checked against a real VMM: the `yield_vmm` example
//! issues `KVM_HC_SCHED_YIELD` hypercalls from one vCPU to another while a
//! session records. lockprof's `yield_to` calls must equal the hypercalls,
//! its yielded/not-yielded split must equal KVM's own statistics (where the
//! kernel keeps them), and the callers must resolve to the KVM functions.

use lockprof::model::{Profile, YieldProfile};
use serde::Deserialize;

/// What the VMM prints on its `YIELD-VMM` line.
#[derive(Debug, Deserialize)]
pub struct VmmReport {
    /// Hypercalls completed (counted by the guest code).
    pub hypercalls: u64,
    /// KVM's `directed_yield_attempted` for the VM (None: this kernel keeps no such statistic).
    pub attempted: Option<u64>,
    /// KVM's `directed_yield_successful` for the VM.
    pub successful: Option<u64>,
    /// Hypercalls made from SCHED_FIFO (cannot yield to a fair-class target).
    #[serde(default)]
    pub rt_phase: u64,
    /// The VMM's pid.
    pub pid: u32,
    /// Thread running the yielding vCPU.
    pub yielder_tid: u32,
    /// Thread running the target vCPU.
    pub target_tid: u32,
}

/// Parses the VMM's stdout.
pub fn parse_vmm(stdout: &str) -> Result<VmmReport, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("YIELD-VMM "))
        .ok_or_else(|| format!("no YIELD-VMM line in the VMM's output: {stdout:?}"))?;
    serde_json::from_str(line).map_err(|e| format!("bad YIELD-VMM line {line:?}: {e}"))
}

/// The VMM's calls as lockprof saw them: (calls, yielded, not yielded).
fn seen(y: &YieldProfile, vmm: &VmmReport) -> (u64, u64, u64) {
    let ours = y.pairs.iter().filter(|pr| pr.pid == vmm.pid);
    ours.fold((0, 0, 0), |(c, yl, n), pr| {
        (c + pr.stats.calls(), yl + pr.stats.yielded, n + pr.stats.failed + pr.stats.errors)
    })
}

/// The caller paths of a hypercall's `yield_to`: through `kvm_sched_yield`,
/// or straight from `kvm_emulate_hypercall` where the kernel inlines or
/// tail-calls it (5.10). Both are the hypercall path, not the pause-loop one.
pub const HYPERCALL_PATHS: [&str; 2] =
    ["kvm_vcpu_yield_to <- kvm_sched_yield", "kvm_vcpu_yield_to <- kvm_emulate_hypercall"];

/// Every `yield_to` call the kernel made for the VMM (`traced`: counted by
/// ftrace's function tracer, independent of BPF) is one lockprof saw, or one
/// whose probe run the kernel skipped and lockprof counted (`yield_skipped`);
/// on a hypercall path, both threads named, non-zero latency, nothing lost.
/// `traced` may be below the hypercalls: KVM calls `yield_to` only when the
/// target vCPU was preempted and the CPU has other tasks, which is up to the
/// scheduler.
pub fn compare_calls(p: &Profile, vmm: &VmmReport, traced: u64, want_backend: &str) -> Result<String, String> {
    let backend = p.meta.yield_backend.as_deref().ok_or_else(|| {
        format!("yield_to was not probed: {}", p.meta.yield_unavailable.as_deref().unwrap_or("no reason given"))
    })?;
    if backend != want_backend {
        return Err(format!("yield_to probed with {backend}, wanted {want_backend}"));
    }
    let y = p.yield_to.as_ref().ok_or("no yield_to section in the profile")?;
    if vmm.hypercalls == 0 || traced == 0 || traced > vmm.hypercalls {
        return Err(format!(
            "harness: the VMM made {} hypercalls and the function tracer counted {traced} yield_to calls",
            vmm.hypercalls
        ));
    }
    let (calls, yielded, not_yielded) = seen(y, vmm);
    let skipped = p.meta.drops.losses.yield_skipped;
    if calls > traced || calls + skipped < traced {
        return Err(format!(
            "lockprof saw {calls} yield_to calls from the VMM (total {}) and counted {skipped} probe runs the kernel skipped; \
             the kernel made {traced} (function tracer; {} hypercalls); drops {:?}",
            y.total.calls(),
            vmm.hypercalls,
            p.meta.drops
        ));
    }
    let pair = y
        .pairs
        .iter()
        .filter(|pr| pr.pid == vmm.pid)
        .find(|pr| pr.tid == vmm.yielder_tid)
        .ok_or_else(|| format!("no pair from the yielding vCPU thread {} in {:?}", vmm.yielder_tid, y.pairs))?;
    if pair.target_tid != vmm.target_tid || pair.target_pid != vmm.pid || pair.target_comm.is_empty() {
        return Err(format!(
            "target {}/{} {:?}, wanted the other vCPU thread {}/{}",
            pair.target_tid, pair.target_pid, pair.target_comm, vmm.target_tid, vmm.pid
        ));
    }
    let top = y.callers.first().ok_or("no yield_to callers")?;
    if !HYPERCALL_PATHS.iter().any(|want| top.path.starts_with(want)) {
        return Err(format!(
            "callers not resolved to KVM's hypercall path ({}): {:?}",
            HYPERCALL_PATHS.join(" or "),
            y.callers.iter().map(|c| &c.path).collect::<Vec<_>>()
        ));
    }
    let lat = &y.total.latency;
    if lat.total_ns() == 0 || lat.max_ns() == 0 {
        return Err("yield_to latency is zero".into());
    }
    let d = &p.meta.drops;
    if d.losses.yield_map_full + d.bookkeeping.yield_unmatched + d.losses.ringbuf_full > 0 {
        return Err(format!("losses: {:?}", p.meta.drops));
    }
    // SCHED_FIFO cannot yield to a fair-class task: the real-time phase's calls fail.
    if vmm.rt_phase > 0 && (yielded == 0 || not_yielded == 0) {
        return Err(format!(
            "expected yields from the fair phase and non-yields from the real-time one: {yielded} yielded / {not_yielded} not"
        ));
    }
    Ok(format!(
        "{calls} calls + {skipped} skipped by the kernel == {traced} traced ({} hypercalls; {yielded} yielded, {not_yielded} not); \
         caller {} ({}); pair {}/{} -> {}/{} {}; latency avg {} ns max {} ns; via {backend}",
        vmm.hypercalls,
        top.caller,
        top.path,
        pair.tid,
        pair.pid,
        pair.target_tid,
        pair.target_pid,
        pair.target_comm,
        lat.avg_ns(),
        lat.max_ns(),
    ))
}

/// lockprof's yielded / not-yielded split equals KVM's own statistics: its
/// successful yields, and the traced calls that were not (each side within
/// the probe runs the kernel skipped, exact when none were).
/// `Ok(None)`: this kernel keeps no directed-yield statistics to compare with.
pub fn compare_outcomes(p: &Profile, vmm: &VmmReport, traced: u64) -> Result<Option<String>, String> {
    let (Some(attempted), Some(successful)) = (vmm.attempted, vmm.successful) else {
        return Ok(None);
    };
    let y = p.yield_to.as_ref().ok_or("no yield_to section in the profile")?;
    // KVM counts every hypercall as an attempt, whether or not it calls yield_to.
    if attempted != vmm.hypercalls || successful > traced {
        return Err(format!(
            "harness: KVM counted {attempted} directed-yield attempts ({successful} successful) for {} hypercalls, \
             {traced} yield_to calls traced",
            vmm.hypercalls
        ));
    }
    let (_, yielded, not_yielded) = seen(y, vmm);
    let skipped = p.meta.drops.losses.yield_skipped;
    let failed = traced - successful;
    let within = |ours: u64, kernel: u64| ours <= kernel && kernel <= ours + skipped;
    if !within(yielded, successful) || !within(not_yielded, failed) {
        return Err(format!(
            "lockprof: {yielded} yielded / {not_yielded} not ({skipped} skipped by the kernel); \
             KVM: {successful} successful / {failed} not of {traced} traced calls"
        ));
    }
    Ok(Some(format!(
        "yielded {yielded} vs KVM successful {successful}; not yielded {not_yielded} vs {failed} ({traced} traced - successful)"
    )))
}
