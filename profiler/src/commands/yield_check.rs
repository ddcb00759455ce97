//! `lockprof selftest --yield-vmm PATH`: the KVM directed-yield check run in
//! the guest of `cargo xtask vm-test`. A tiny VMM (the `yield_vmm` example)
//! issues `KVM_HC_SCHED_YIELD` hypercalls from one vCPU to another while a
//! session records; lockprof's yield_to counts must equal the hypercalls
//! issued, its yielded/failed split must equal KVM's own statistics, and the
//! callers must resolve to the KVM functions.

use std::{path::Path, process::Command};

use serde::Deserialize;

use crate::{
    cli::{SelftestArgs, YieldProbe},
    ebpf::probes::ProbeKind,
    model::Profile,
    pipeline::{Session, SessionOptions},
};

/// What the VMM prints on its `YIELD-VMM` line.
#[derive(Debug, Deserialize)]
pub struct VmmReport {
    /// Hypercalls completed (counted by the guest code).
    pub hypercalls: u64,
    /// KVM's `directed_yield_attempted` for the VM.
    pub attempted: u64,
    /// KVM's `directed_yield_successful` for the VM.
    pub successful: u64,
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

/// Compares what lockprof recorded with what the VMM and KVM counted.
pub fn compare(p: &Profile, vmm: &VmmReport, want_backend: Option<&str>) -> Result<String, String> {
    let backend = p.meta.yield_backend.as_deref().ok_or_else(|| {
        format!("yield_to was not probed: {}", p.meta.yield_unavailable.as_deref().unwrap_or("no reason given"))
    })?;
    if let Some(want) = want_backend
        && backend != want
    {
        return Err(format!("yield_to probed with {backend}, wanted {want}"));
    }
    let y = p.yield_to.as_ref().ok_or("no yield_to section in the profile")?;
    if vmm.hypercalls == 0 || vmm.attempted != vmm.hypercalls {
        return Err(format!(
            "harness: KVM counted {} directed-yield attempts for {} hypercalls",
            vmm.attempted, vmm.hypercalls
        ));
    }
    let ours: Vec<_> = y.pairs.iter().filter(|pr| pr.pid == vmm.pid).collect();
    let calls: u64 = ours.iter().map(|pr| pr.stats.calls()).sum();
    let yielded: u64 = ours.iter().map(|pr| pr.stats.yielded).sum();
    let (failed, errors): (u64, u64) =
        ours.iter().fold((0, 0), |(f, e), pr| (f + pr.stats.failed, e + pr.stats.errors));
    let not_yielded: u64 = ours.iter().map(|pr| pr.stats.failed + pr.stats.errors).sum();
    if calls != vmm.hypercalls {
        return Err(format!(
            "lockprof saw {calls} yield_to calls from the VMM (total {}), the VMM made {} hypercalls; drops {:?}",
            y.total.calls(),
            vmm.hypercalls,
            p.meta.drops
        ));
    }
    if yielded != vmm.successful || not_yielded != vmm.attempted - vmm.successful {
        return Err(format!(
            "lockprof: {yielded} yielded / {not_yielded} not; KVM: {} successful / {} not",
            vmm.successful,
            vmm.attempted - vmm.successful
        ));
    }
    if vmm.rt_phase > 0 && (yielded == 0 || not_yielded < vmm.rt_phase) {
        return Err(format!(
            "expected {} non-yields from the real-time phase and some yields: {yielded} yielded / {not_yielded} not",
            vmm.rt_phase
        ));
    }
    let pair = ours
        .iter()
        .find(|pr| pr.tid == vmm.yielder_tid)
        .ok_or_else(|| format!("no pair from the yielding vCPU thread {} in {ours:?}", vmm.yielder_tid))?;
    if pair.target_tid != vmm.target_tid || pair.target_pid != vmm.pid || pair.target_comm.is_empty() {
        return Err(format!(
            "target {}/{} {:?}, wanted the other vCPU thread {}/{}",
            pair.target_tid, pair.target_pid, pair.target_comm, vmm.target_tid, vmm.pid
        ));
    }
    let top = y.callers.first().ok_or("no yield_to callers")?;
    if !top.path.starts_with("kvm_vcpu_yield_to <- kvm_sched_yield") {
        return Err(format!(
            "callers not resolved to KVM: {:?}",
            y.callers.iter().map(|c| &c.path).collect::<Vec<_>>()
        ));
    }
    let lat = &y.total.latency;
    if lat.total_ns() == 0 || lat.max_ns() == 0 {
        return Err("yield_to latency is zero".into());
    }
    let drops = |k: &str| p.meta.drops.get(k).copied().unwrap_or(0);
    if drops("yield_map_full") + drops("yield_unmatched") + drops("ringbuf_full") > 0 {
        return Err(format!("losses: {:?}", p.meta.drops));
    }
    Ok(format!(
        "{calls} calls == {} hypercalls; yielded {yielded} == KVM successful {}; not yielded {not_yielded} (failed {failed}, errors {errors}) == KVM {}; \
         caller {} ({}); pair {}/{} -> {}/{} {}; latency avg {} ns max {} ns; rq-lock waits inside yield_to {}; via {backend}",
        vmm.hypercalls,
        vmm.successful,
        vmm.attempted - vmm.successful,
        top.caller,
        top.path,
        pair.tid,
        pair.pid,
        pair.target_tid,
        pair.target_pid,
        pair.target_comm,
        lat.avg_ns(),
        lat.max_ns(),
        y.rq_contention.waits,
    ))
}

async fn run(args: &SelftestArgs, vmm: &Path) -> Result<String, String> {
    let probe = match args.yield_probe {
        YieldProbe::Auto => None,
        YieldProbe::Fentry => Some(ProbeKind::Fentry),
        YieldProbe::Kprobe => Some(ProbeKind::Kprobe),
    };
    let mut o = SessionOptions::recommended();
    o.load.backend = args.backend;
    o.load.yield_probe = probe;
    let session = Session::start(o).map_err(|e| e.to_string())?;
    let (path, n) = (vmm.to_path_buf(), args.hypercalls);
    let out = tokio::task::spawn_blocking(move || Command::new(&path).args(["--hypercalls", &n.to_string()]).output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("running {}: {e}", vmm.display()))?;
    // Let the reader pick up the last records before stopping.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let profile = session.finish().await.map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("the VMM failed ({}): {}{}", out.status, stdout, String::from_utf8_lossy(&out.stderr)));
    }
    let report = parse_vmm(&stdout)?;
    compare(&profile, &report, probe.map(ProbeKind::name))
}

/// Runs the check and prints one `selftest: PASS|FAIL` line.
pub async fn yield_selftest(args: &SelftestArgs, vmm: &Path) -> anyhow::Result<()> {
    let name = format!("yield_to-{:?}", args.yield_probe).to_lowercase();
    match run(args, vmm).await {
        Ok(d) => {
            println!("selftest: PASS {name}: {d}");
            Ok(())
        }
        Err(e) => {
            println!("selftest: FAIL {name}: {e}");
            anyhow::bail!("the yield_to check failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{Meta, YieldCaller, YieldPair, YieldProfile, YieldStats},
        report::fixture,
    };

    fn vmm() -> VmmReport {
        parse_vmm("noise\nYIELD-VMM {\"hypercalls\":4,\"attempted\":4,\"successful\":3,\"pid\":300,\"yielder_tid\":301,\"target_tid\":302,\"elapsed_ms\":5}\n")
            .expect("parse")
    }

    fn profile(outcomes: &[i32]) -> Profile {
        let mut s = YieldStats::default();
        for r in outcomes {
            s.record(*r, 1_000);
        }
        let mut p = fixture::profile();
        p.meta = Meta { yield_backend: Some("fentry".into()), ..Meta::default() };
        p.yield_to = Some(YieldProfile {
            total: s.clone(),
            callers: vec![YieldCaller {
                caller: "kvm_vcpu_yield_to+0x5f [kvm]".into(),
                path: "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall".into(),
                stack: vec![],
                stats: s.clone(),
            }],
            pairs: vec![YieldPair {
                tid: 301,
                pid: 300,
                comm: "yield_vmm".into(),
                target_tid: 302,
                target_pid: 300,
                target_comm: "yield_vmm".into(),
                stats: s,
            }],
            rq_contention: Default::default(),
        });
        p
    }

    #[test]
    fn matching_counts_pass() {
        let r = compare(&profile(&[1, 1, 1, 0]), &vmm(), Some("fentry"));
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn mismatches_fail_with_the_numbers() {
        let e = compare(&profile(&[1, 1, 1]), &vmm(), None).expect_err("a lost call");
        assert!(e.contains("saw 3 yield_to calls") && e.contains("4 hypercalls"), "{e}");
        let e = compare(&profile(&[1, 1, 1, 1]), &vmm(), None).expect_err("wrong split");
        assert!(e.contains("4 yielded / 0 not; KVM: 3 successful / 1 not"), "{e}");
        let e = compare(&profile(&[1, 1, 1, 0]), &vmm(), Some("kprobe")).expect_err("wrong backend");
        assert!(e.contains("wanted kprobe"), "{e}");
        let mut p = profile(&[1, 1, 1, 0]);
        if let Some(y) = p.yield_to.as_mut() {
            y.callers[0].path = "kvm_vcpu_yield_to <- kvm_vcpu_on_spin".into();
        }
        assert!(compare(&p, &vmm(), None).expect_err("wrong path").contains("not resolved to KVM"));
        let mut p = profile(&[1, 1, 1, 0]);
        p.meta.yield_backend = None;
        p.meta.yield_unavailable = Some("no kprobe PMU".into());
        assert!(compare(&p, &vmm(), None).expect_err("not probed").contains("no kprobe PMU"));
        assert!(parse_vmm("nothing").is_err());
        // The real-time phase must show up as non-yields.
        let mut rt = vmm();
        rt.rt_phase = 1;
        assert!(compare(&profile(&[1, 1, 1, 0]), &rt, None).is_ok());
        rt.rt_phase = 2;
        let e = compare(&profile(&[1, 1, 1, 0]), &rt, None).expect_err("too few non-yields");
        assert!(e.contains("expected 2 non-yields"), "{e}");
    }
}
