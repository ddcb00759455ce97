//! Checks that run inside guest kernels (`cargo xtask vm-test`), where
//! kprobes, fentry, release probes and KVM work. A test binary with its own
//! harness (libtest-mimic): each check is a trial, skipped ("ignored", with
//! the reason) only when the kernel itself lacks what it needs, and libtest's
//! own summary and exit status are the verdict `vm-test` reads.
//!
//! Usage inside the guest: `guest --test-threads 1` (the VMM of the yield_to
//! checks is `$LOCKPROF_YIELD_VMM`, default `/yield_vmm`; the C workload of
//! the cgroup, user-stack and futex checks `$LOCKPROF_TEST_PROGRAM`, default
//! `/lockprof_test`).

mod c_storm;
mod cgroups;
mod checks;
mod facts;
mod ftrace;
mod futex;
mod hold_backend;
mod owner_stacks;
mod phases;
mod until;
mod user_stacks;
mod yields;

use std::{
    collections::HashMap,
    process::Command,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use lockprof::{
    ebpf::{
        BackendChoice,
        probes::{ProbeKind, RELEASE_TARGETS, WAIT_TARGETS, YIELD_FUNC},
    },
    model::Profile,
    session::{Session, SessionOptions},
    workload::{self, Workload},
};
use profiler_common::LockType;

use self::{
    checks::Check,
    facts::{Facts, Family},
};

fn facts() -> &'static Facts {
    static FACTS: OnceLock<Facts> = OnceLock::new();
    FACTS.get_or_init(Facts::read)
}

/// When the binary began (the checks' shared budget runs from here).
fn began() -> Instant {
    static BEGAN: OnceLock<Instant> = OnceLock::new();
    *BEGAN.get_or_init(Instant::now)
}

/// The one runtime of the binary: the shared sessions of [`phases`] outlive
/// each `block_on`.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
    })
}

fn options(backend: BackendChoice) -> SessionOptions {
    let mut o = SessionOptions::recommended();
    o.load.backend = backend;
    o
}

/// How often a recording check looks at the live profiles.
const POLL: Duration = Duration::from_millis(200);

/// Records `w` with one session per backend of `backends` (waits only:
/// neither releases nor yield_to probed), driving the workload until `seen`
/// accepts their live profiles (one a second) or the check's time is up,
/// and returns the sessions' final profiles.
fn record_until(
    backends: &[BackendChoice],
    w: Workload,
    seen: &dyn Fn(&[&Profile]) -> bool,
) -> Result<Vec<Profile>, String> {
    runtime().block_on(async {
        let mut sessions = Vec::new();
        for b in backends {
            sessions.push(Session::start(c_storm::waits_only(*b)).map_err(|e| e.to_string())?);
        }
        let live: Vec<_> = sessions.iter_mut().map(|s| s.profiles()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let patience = until::patience(began().elapsed());
        let run = {
            let stop = stop.clone();
            tokio::task::spawn_blocking(move || workload::run(w, 4, patience, stop))
        };
        while !run.is_finished() {
            tokio::time::sleep(POLL).await;
            let now: Vec<Arc<Profile>> = live.iter().map(|rx| rx.borrow().clone()).collect();
            if seen(&now.iter().map(|p| &**p).collect::<Vec<_>>()) {
                stop.store(true, Ordering::Relaxed);
                break;
            }
        }
        let outcome = run.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        if outcome.ops == 0 {
            return Err(format!("the {w:?} workload made no progress"));
        }
        let mut out = Vec::new();
        for (s, b) in sessions.into_iter().zip(backends) {
            let p = s.finish().await.map_err(|e| e.to_string())?;
            if p.meta.backend != b.name() {
                return Err(format!("asked for the {} backend, got {}", b.name(), p.meta.backend));
            }
            out.push(p);
        }
        Ok(out)
    })
}

/// `check` of `w` recorded with `backend`: on the last recording of that
/// pair (trials on one workload share it) when it passes there, else on a
/// new phase of the backend's shared session ([`phases`]) that drives the
/// workload until `check` passes on its live profile (or the check's time
/// is up). Says how long that recording ran.
fn recorded(backend: BackendChoice, w: Workload, check: impl Fn(&Profile) -> Check) -> Check {
    type Cache = Mutex<HashMap<(&'static str, &'static str), Arc<Profile>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (backend.name(), w.name());
    let said = |p: &Profile, what: String| format!("{what} (in a {:.1} s recording)", p.meta.duration_s);
    let last = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
    if let Some(p) = last
        && let Ok(what) = check(&p)
    {
        return Ok(said(&p, what));
    }
    let p = phases::record(backend, w, &|p| check(p).is_ok())?;
    let r = check(&p).map(|what| said(&p, what)).map_err(|e| said(&p, e));
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, Arc::new(p));
    r
}

/// What each passing check saw, printed after libtest's summary (so that
/// its `test NAME ... ok` lines stay whole).
fn seen(name: &str, what: String) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut v = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if name.is_empty() {
        for line in v.drain(..) {
            println!("{line}");
        }
    } else {
        v.push(format!("seen {name}: {what}"));
    }
}

/// A trial: skipped with `missing` when the kernel lacks something, else
/// `check`, after the shared session of the workload checks is closed (the
/// check attaches its own, or counts what is left attached).
fn trial(name: String, missing: Option<String>, check: impl FnOnce() -> Check + Send + 'static) -> Trial {
    shared_trial(name, missing, move || {
        phases::close()?;
        check()
    })
}

/// A trial of [`recorded`] workload checks, which keep the backend's shared session open.
fn shared_trial(name: String, missing: Option<String>, check: impl FnOnce() -> Check + Send + 'static) -> Trial {
    let n = name.clone();
    Trial::ignorable_test(name, move || {
        if let Some(why) = missing {
            return Ok(Completion::ignored_with(why));
        }
        let started = Instant::now();
        let what = check().map_err(Failed::from)?;
        seen(&n, format!("({:.1} s) {what}", started.elapsed().as_secs_f64()));
        Ok(Completion::Completed)
    })
}

/// Why `backend` cannot run on this kernel, if so.
fn backend_missing(f: &Facts, backend: BackendChoice) -> Option<String> {
    match backend {
        BackendChoice::Kprobe => f.kprobe_missing().or_else(|| f.slowpaths_missing()),
        BackendChoice::Fentry => f.fentry_missing().or_else(|| f.slowpaths_missing()),
        BackendChoice::Tracepoint => f.tracepoints_missing(),
        BackendChoice::TpBtf => f.tracepoints_missing().or_else(|| (!f.btf).then(|| "the kernel has no BTF".into())),
        BackendChoice::Auto => None,
    }
}

/// Why releases through `release` cannot be timed here, if so.
fn holds_missing(f: &Facts, release: &str) -> Option<String> {
    if f.kprobe_missing().is_some() && f.fentry_missing().is_some() {
        return Some("neither kprobes nor fentry work on this kernel: no release can be probed".into());
    }
    f.release_missing(release)
}

/// Owners need the kernel's BTF (the owner fields' offsets).
fn btf_missing(f: &Facts) -> Option<String> {
    (!f.btf).then(|| "the kernel has no BTF: lock owner fields cannot be found".to_string())
}

fn backend_trials(f: &'static Facts, backend: BackendChoice) -> Vec<Trial> {
    let b = backend.name();
    let missing = backend_missing(f, backend);
    let slowpath = matches!(backend, BackendChoice::Kprobe | BackendChoice::Fentry);
    let family = |fam: Family| if slowpath { f.slowpath_missing(backend, fam) } else { None };
    let skip = |extra: Option<String>| missing.clone().or(extra);
    let tasklist_in_kallsyms = f.kallsyms.address_of("tasklist_lock").is_some();
    let mut trials = vec![
        shared_trial(format!("{b}::pipe_mutex"), skip(family(Family::Mutex)), move || {
            recorded(backend, Workload::Pipe, checks::pipe_waits)
        }),
        shared_trial(format!("{b}::lock_identity"), skip(family(Family::Mutex)), move || {
            // Only tracing programs (tp_btf, fentry) may call the slab kfunc.
            let kfunc = f.slab_kfunc && matches!(backend, BackendChoice::TpBtf | BackendChoice::Fentry);
            recorded(backend, Workload::Pipe, |p| checks::pipe_identity(p, kfunc))
        }),
        shared_trial(
            format!("{b}::pipe_mutex_holds"),
            skip(family(Family::Mutex).or(holds_missing(f, "mutex_unlock"))),
            move || recorded(backend, Workload::Pipe, |p| checks::holds(p, checks::pipe_mutex(p)?, p.meta.duration_s)),
        ),
        shared_trial(format!("{b}::tasklist_lock_fork"), skip(family(Family::Rwlock)), move || {
            recorded(backend, Workload::Fork, |p| checks::tasklist_fork_waits(p, tasklist_in_kallsyms))
        }),
        shared_trial(format!("{b}::tasklist_lock_setpgid"), skip(family(Family::Rwlock)), move || {
            recorded(backend, Workload::Pgrp, |p| checks::tasklist_waits(p, tasklist_in_kallsyms))
        }),
        shared_trial(
            format!("{b}::tasklist_lock_holds"),
            skip(family(Family::Rwlock).or(holds_missing(f, f.rwlock_write_release()))),
            move || {
                recorded(backend, Workload::Pgrp, |p| {
                    checks::holds(p, checks::tasklist_writer(p, tasklist_in_kallsyms)?, p.meta.duration_s)
                })
            },
        ),
        shared_trial(format!("{b}::mmap_lock"), skip(family(Family::Rwsem)), move || {
            recorded(backend, Workload::Mmap, checks::mmap_lock)
        }),
        shared_trial(format!("{b}::mmap_lock_blame"), skip(family(Family::Rwsem).or(btf_missing(f))), move || {
            recorded(backend, Workload::Mmap, checks::mmap_blame)
        }),
        shared_trial(
            format!("{b}::tasklist_lock_blame"),
            skip(family(Family::Rwlock).or(holds_missing(f, f.rwlock_write_release()))),
            move || recorded(backend, Workload::Pgrp, |p| checks::tasklist_blame(p, tasklist_in_kallsyms)),
        ),
        trial(format!("{b}::cgroup_filter"), skip(family(Family::Mutex).or_else(cgroups::missing)), move || {
            cgroups::filter(backend)
        }),
        trial(format!("{b}::user_stacks_name_the_writer"), skip(family(Family::Mutex)), move || {
            user_stacks::writer(backend)
        }),
    ];
    // The owner's stack while asleep: only programs that may call kfuncs.
    if matches!(backend, BackendChoice::TpBtf | BackendChoice::Fentry) {
        let kfuncs = (!f.task_kfuncs).then(|| "the kernel has no bpf_task_from_pid kfunc (6.2+)".to_string());
        trials.push(trial(format!("{b}::owner_asleep_stack"), skip(family(Family::Mutex).or(kfuncs)), move || {
            owner_stacks::asleep(backend)
        }));
    }
    trials
}

fn rwlock_waits(p: &Profile) -> u64 {
    p.locks.iter().filter(|l| l.lock_type == LockType::Rwlock).map(|l| l.wait.count()).sum()
}

/// kprobe and fentry sessions side by side on one workload, driven until
/// both saw rwlock waits: their counts agree.
fn agreement() -> Check {
    let both = record_until(&[BackendChoice::Kprobe, BackendChoice::Fentry], Workload::Pgrp, &|ps| {
        ps.iter().all(|p| rwlock_waits(p) > 0)
    })?;
    let (ca, cb) = (rwlock_waits(&both[0]), rwlock_waits(&both[1]));
    if ca == 0 || cb == 0 || ca.abs_diff(cb) as f64 > 20.0 + 0.1 * ca.max(cb) as f64 {
        return Err(format!("kprobe saw {ca} rwlock waits, fentry {cb} (in {:.1} s)", both[0].meta.duration_s));
    }
    Ok(format!("kprobe {ca} vs fentry {cb} rwlock waits (in {:.1} s)", both[0].meta.duration_s))
}

/// One yield_to check with `kind`: records while the VMM runs, with the
/// function tracer counting the kernel's own `yield_to` calls.
fn yield_run(kind: ProbeKind) -> Result<(Profile, yields::VmmReport, u64), String> {
    let vmm = std::env::var("LOCKPROF_YIELD_VMM").unwrap_or_else(|_| "/yield_vmm".into());
    runtime().block_on(async {
        let mut o = options(BackendChoice::Auto);
        o.load.yield_probe = Some(kind);
        let session = Session::start(o).map_err(|e| e.to_string())?;
        let tracer = ftrace::FunctionCalls::start(YIELD_FUNC)?;
        let path = vmm.clone();
        let out = tokio::task::spawn_blocking(move || Command::new(&path).args(["--hypercalls", "300"]).output())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("running {vmm}: {e}"))?;
        // No wait for the reader: finishing detaches first, then drains the ring.
        let profile = session.finish().await.map_err(|e| e.to_string())?;
        let per_thread = tracer.finish()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("the VMM failed ({}): {stdout}{}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
        let report = yields::parse_vmm(&stdout)?;
        let traced = [report.yielder_tid, report.target_tid].iter().filter_map(|t| per_thread.get(t)).sum();
        Ok((profile, report, traced))
    })
}

/// Why this architecture has no VMM to drive: the test VMM runs a real-mode
/// x86 guest that yields with x86's `KVM_HC_SCHED_YIELD` hypercall.
fn vmm_missing() -> Option<String> {
    (!cfg!(target_arch = "x86_64")).then(|| {
        format!(
            "the yield_to VMM drives x86 guests (real mode, KVM_HC_SCHED_YIELD): there is none for {}",
            std::env::consts::ARCH
        )
    })
}

fn yield_trials(f: &Facts) -> Vec<Trial> {
    let mut out = Vec::new();
    for kind in ProbeKind::ALL {
        let missing = match kind {
            ProbeKind::Kprobe => f.kprobe_missing(),
            ProbeKind::Fentry => f.fentry_missing(),
        }
        .or_else(|| f.release_missing(YIELD_FUNC))
        .or_else(|| f.kvm.clone().err())
        .or_else(vmm_missing);
        let k = kind.name();
        out.push(trial(format!("yield_to::{k}"), missing, move || {
            let (p, vmm, traced) = yield_run(kind)?;
            let calls = yields::compare_calls(&p, &vmm, traced, k)?;
            let split = yields::compare_outcomes(&p, &vmm, traced)?.unwrap_or_else(|| {
                "this kernel keeps no directed_yield_* statistics: the yielded/not split was not compared with KVM's".into()
            });
            Ok(format!("{calls}; {split}"))
        }));
    }
    out
}

/// Names of lockprof's programs still loaded.
fn lockprof_programs() -> Vec<String> {
    let ours = profiler_common::names::prog::ALL;
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| ours.iter().any(|o| o.starts_with(n.as_str()) || n.starts_with(o)))
        .collect()
}

/// Probed functions still in the kernel's list of active kprobes (debugfs):
/// every kprobe lockprof makes, whatever interface it used, is listed there.
fn lockprof_kprobes() -> Result<Vec<String>, String> {
    let list = std::fs::read_to_string("/sys/kernel/debug/kprobes/list")
        .map_err(|e| format!("/sys/kernel/debug/kprobes/list: {e}"))?;
    let funcs: Vec<&str> = WAIT_TARGETS
        .iter()
        .map(|t| t.func)
        .chain(RELEASE_TARGETS.iter().map(|(f, _)| *f))
        .chain([YIELD_FUNC])
        .collect();
    Ok(list
        .lines()
        .filter(|l| l.split_whitespace().nth(2).is_some_and(|s| funcs.contains(&s.split('+').next().unwrap_or(s))))
        .map(str::to_string)
        .collect())
}

/// Nothing lockprof attached is left once every session finished (the
/// kernel frees programs asynchronously, which under TCG on a busy host
/// may take seconds: wait up to 30 s for it).
fn detached(kprobes: bool) -> Check {
    let deadline = Instant::now() + until::PATIENCE;
    loop {
        let progs = lockprof_programs();
        let probes = if kprobes { lockprof_kprobes()? } else { Vec::new() };
        if progs.is_empty() && probes.is_empty() {
            return Ok(format!(
                "no lockprof program loaded{}",
                if kprobes { ", no kprobe left on a probed function" } else { "" }
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "left behind {} s after the last session: programs {progs:?}, kprobes {probes:?}",
                until::PATIENCE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    let mut args = Arguments::from_args();
    // Checks share the guest's CPUs and the kernel's probes: one at a time.
    args.test_threads = Some(1);
    began();
    let f = facts();
    println!(
        "guest kernel {}: btf {} kprobes {} trampolines {} lock tracepoints {} kvm {}",
        lockprof::ebpf::features::kernel_release(),
        f.btf,
        f.kprobes,
        f.direct_calls,
        f.lock_tracepoints,
        f.kvm.as_ref().map_or_else(|e| e.clone(), |()| "yes".into())
    );
    let mut trials = Vec::new();
    for backend in [BackendChoice::Kprobe, BackendChoice::Fentry, BackendChoice::Tracepoint, BackendChoice::TpBtf] {
        trials.extend(backend_trials(f, backend));
    }
    let both = f
        .kprobe_missing()
        .or_else(|| f.fentry_missing())
        .or_else(|| f.slowpath_missing(BackendChoice::Kprobe, Family::Rwlock))
        .or_else(|| f.slowpath_missing(BackendChoice::Fentry, Family::Rwlock));
    trials.push(trial("kprobe_vs_fentry".into(), both, agreement));
    trials.extend(yield_trials(f));
    trials.extend(hold_backend::trials(f));
    trials.push(trial("futex::glibc_mutex".into(), futex::missing(), futex::mutex_waits));
    let kprobes = f.kprobes;
    trials.push(trial("nothing_left_attached".into(), None, move || detached(kprobes)));
    let conclusion = libtest_mimic::run(&args, trials);
    seen("", String::new());
    conclusion.exit();
}
