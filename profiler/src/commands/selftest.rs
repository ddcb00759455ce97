//! `lockprof selftest` (hidden): end-to-end checks run inside the guest
//! kernels of `cargo xtask vm-test`, where kprobes and fentry work. Each check
//! generates real contention, records it through the whole stack and checks
//! what lockprof reports; one `selftest: PASS|FAIL <name>: <detail>` line each.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use profiler_common::{LockMode, LockType};

use crate::{
    cli::SelftestArgs,
    ebpf::BackendChoice,
    model::{LockProfile, NameSource, Profile},
    pipeline::{Session, SessionOptions},
    symbols::TASKLIST_CALLERS,
    workload::{self, Workload},
};

fn options(backend: BackendChoice) -> SessionOptions {
    let mut o = SessionOptions::recommended();
    o.load.backend = backend;
    o
}

async fn record(backend: BackendChoice, w: Workload, secs: f64) -> anyhow::Result<Profile> {
    let session = Session::start(options(backend))?;
    let run = tokio::task::spawn_blocking(move || {
        workload::run(w, 4, Duration::from_secs_f64(secs), Arc::new(AtomicBool::new(false)))
    });
    let outcome = run.await??;
    anyhow::ensure!(outcome.ops > 0, "the {w:?} workload made no progress");
    Ok(session.finish().await?)
}

fn callers(l: &LockProfile) -> Vec<String> {
    l.callers.iter().map(|c| c.caller.split('+').next().unwrap_or(&c.caller).to_string()).collect()
}

/// Hold checks: present and no longer than the run when holds were measured.
fn holds_ok(p: &Profile, l: &LockProfile, secs: f64) -> Result<String, String> {
    if p.meta.hold_backend.is_none() {
        return Ok(format!("no holds ({})", p.meta.hold_unavailable.clone().unwrap_or_default()));
    }
    let drops = |k: &str| p.meta.drops.get(k).copied().unwrap_or(0);
    let h = l.hold.as_ref().ok_or_else(|| {
        format!(
            "hold backend attached but no hold recorded on {} ({} waits; holds counted {} in all, hold_map_full {}, reentered {}, recursion_misses {}; locks with holds: {:?})",
            l.display_name(),
            l.wait.count(),
            drops("holds"),
            drops("hold_map_full"),
            drops("reentered"),
            drops("recursion_misses"),
            p.locks.iter().filter(|x| x.hold.is_some()).map(|x| (x.display_name().to_string(), crate::model::mode_name(x.mode))).collect::<Vec<_>>()
        )
    })?;
    if h.count() == 0 || h.total_ns() == 0 {
        return Err("hold count or total is zero".into());
    }
    // Every contended acquisition is released (only those still held at
    // stop are missing): holds must match waits closely.
    if h.count() * 10 < l.wait.count() * 9 {
        return Err(format!("only {} holds for {} contended acquisitions", h.count(), l.wait.count()));
    }
    if h.max_ns() as f64 > secs * 1e9 + 1e9 {
        return Err(format!("hold max {} ns longer than the run", h.max_ns()));
    }
    let per_caller = l.callers.iter().filter(|c| c.hold.is_some()).count();
    if per_caller == 0 {
        return Err("no caller has hold statistics".into());
    }
    Ok(format!(
        "holds {} total {} ns max {} ns via {}",
        h.count(),
        h.total_ns(),
        h.max_ns(),
        p.meta.hold_backend.as_deref().unwrap_or("?")
    ))
}

type Check = Result<String, String>;

fn check_pipe(p: &Profile, secs: f64) -> Check {
    let l = p
        .locks
        .iter()
        .filter(|l| l.lock_type == LockType::Mutex)
        .find(|l| callers(l).iter().any(|c| c.contains("pipe_write")))
        .ok_or_else(|| format!("no pipe mutex among {:?}", p.locks.iter().map(|l| &l.class).collect::<Vec<_>>()))?;
    if l.wait.count() == 0 || l.wait.total_ns() == 0 {
        return Err("pipe mutex without waits".into());
    }
    let holds = holds_ok(p, l, secs)?;
    Ok(format!("{} waits {} ns on {}; {holds}", l.wait.count(), l.wait.total_ns(), l.class))
}

/// `with_holds`: also check hold statistics (the fork storm makes too few
/// contended acquisitions under TCG for that to be meaningful; setpgid/kill
/// makes plenty).
fn check_tasklist(p: &Profile, secs: f64, want_kallsyms: bool, with_holds: bool) -> Check {
    let tl: Vec<&LockProfile> = p.locks.iter().filter(|l| l.name.as_deref() == Some("tasklist_lock")).collect();
    let w = tl.iter().find(|l| l.mode == LockMode::Write).ok_or_else(|| {
        format!(
            "tasklist_lock (write) not found; rwlocks: {:?}",
            p.locks.iter().filter(|l| l.lock_type == LockType::Rwlock).map(|l| (&l.class, &l.name)).collect::<Vec<_>>()
        )
    })?;
    if want_kallsyms && w.name_source != Some(NameSource::Kallsyms) {
        return Err(format!("named {:?}, not from kallsyms, although kallsyms has it", w.name_source));
    }
    let cs = callers(w);
    if !cs.iter().any(|c| TASKLIST_CALLERS.contains(&c.as_str())) {
        return Err(format!("unexpected callers {cs:?}"));
    }
    let holds = if with_holds { holds_ok(p, w, secs)? } else { "holds not checked".to_string() };
    Ok(format!("{} waits, callers {:?}, source {:?}; {holds}", w.wait.count(), &cs[..cs.len().min(3)], w.name_source))
}

fn check_mmap(p: &Profile, _secs: f64) -> Check {
    let l = p
        .locks
        .iter()
        .filter(|l| l.lock_type == LockType::Rwsem)
        .max_by_key(|l| l.wait.count())
        .ok_or_else(|| format!("no rwsem among {:?}", p.locks.iter().map(|l| &l.class).collect::<Vec<_>>()))?;
    if l.wait.total_ns() == 0 {
        return Err("rwsem without waits".into());
    }
    Ok(format!(
        "{} ({}) {} waits, callers {:?}",
        l.display_name(),
        crate::model::mode_name(l.mode),
        l.wait.count(),
        &callers(l)[..l.callers.len().min(3)]
    ))
}

fn lockprof_programs() -> Vec<String> {
    let ours = ["contention_", "kp_", "krp_", "fe_", "fx_", "fr_", "floor_"];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| ours.iter().any(|o| n.starts_with(o)))
        .collect()
}

fn report(name: &str, r: Check, failures: &mut usize) {
    match r {
        Ok(d) => println!("selftest: PASS {name}: {d}"),
        Err(e) => {
            *failures += 1;
            println!("selftest: FAIL {name}: {e}");
        }
    }
}

/// kprobe and fentry sessions side by side on one workload: their counts agree.
async fn agreement(secs: f64) -> Check {
    let kp = Session::start(options(BackendChoice::Kprobe)).map_err(|e| e.to_string())?;
    let fe = Session::start(options(BackendChoice::Fentry)).map_err(|e| e.to_string())?;
    let run = tokio::task::spawn_blocking(move || {
        workload::run(Workload::Pgrp, 4, Duration::from_secs_f64(secs), Arc::new(AtomicBool::new(false)))
    });
    run.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    let (a, b) = (kp.finish().await.map_err(|e| e.to_string())?, fe.finish().await.map_err(|e| e.to_string())?);
    let count = |p: &Profile| -> u64 {
        p.locks.iter().filter(|l| l.lock_type == LockType::Rwlock).map(|l| l.wait.count()).sum()
    };
    let (ca, cb) = (count(&a), count(&b));
    let diff = ca.abs_diff(cb) as f64;
    if ca == 0 || cb == 0 || diff > 20.0 + 0.1 * ca.max(cb) as f64 {
        return Err(format!("kprobe saw {ca} rwlock waits, fentry {cb}"));
    }
    Ok(format!("kprobe {ca} vs fentry {cb} rwlock waits"))
}

/// Runs the checks for one backend; errors when any fails.
pub async fn selftest(args: &SelftestArgs) -> anyhow::Result<()> {
    if let Some(vmm) = &args.yield_vmm {
        return super::yield_check::yield_selftest(args, vmm).await;
    }
    let backend = args.backend;
    let secs = args.duration;
    let ks = crate::symbols::Kallsyms::load().ok();
    let want_kallsyms = ks.as_ref().is_some_and(|k| k.address_of("tasklist_lock").is_some());
    let name = format!("{backend:?}").to_lowercase();
    let mut failures = 0;
    let before = lockprof_programs();

    let r = record(backend, Workload::Pipe, secs).await;
    let backend_seen = r.as_ref().map(|p| p.meta.backend.clone()).unwrap_or_default();
    report(
        &format!("{name}/pipe-mutex"),
        r.map_err(|e| format!("{e:#}")).and_then(|p| check_pipe(&p, secs)),
        &mut failures,
    );
    let r = record(backend, Workload::Fork, secs).await;
    report(
        &format!("{name}/tasklist_lock-fork"),
        r.map_err(|e| format!("{e:#}")).and_then(|p| check_tasklist(&p, secs, want_kallsyms, false)),
        &mut failures,
    );
    let r = record(backend, Workload::Pgrp, secs).await;
    report(
        &format!("{name}/tasklist_lock-setpgid-kill"),
        r.map_err(|e| format!("{e:#}")).and_then(|p| check_tasklist(&p, secs, want_kallsyms, true)),
        &mut failures,
    );
    let r = record(backend, Workload::Mmap, secs).await;
    report(
        &format!("{name}/mmap_lock"),
        r.map_err(|e| format!("{e:#}")).and_then(|p| check_mmap(&p, secs)),
        &mut failures,
    );
    if args.agree {
        report("kprobe-vs-fentry", agreement(secs).await, &mut failures);
    }
    let after = lockprof_programs();
    let leftover = if after.len() > before.len() {
        Err(format!("programs left loaded: {after:?}"))
    } else {
        Ok("none".to_string())
    };
    report(&format!("{name}/detached"), leftover, &mut failures);
    let kprobe_events = std::fs::read_to_string("/sys/kernel/tracing/kprobe_events").unwrap_or_default();
    report(
        &format!("{name}/no-kprobe-events-left"),
        if kprobe_events.trim().is_empty() { Ok("kprobe_events empty".into()) } else { Err(kprobe_events) },
        &mut failures,
    );
    println!("selftest: backend {name} attached as {backend_seen}; {failures} failed");
    anyhow::ensure!(failures == 0, "{failures} selftest check(s) failed");
    Ok(())
}
