//! `--futex`: a glibc mutex contended by the C workload's threads
//! (`/lockprof_test futex`) is a `futex` lock of that process, seen no more
//! often than the workload itself counted contended acquisitions, with the
//! futex tracepoints this kernel has attached and the ones it lacks (5.10:
//! `sys_enter_futex_wait`, which came with 6.7) named in the notes.

use std::{
    io::{BufRead, BufReader, Lines, Write},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::Mutex,
};

use lockprof::{
    ebpf::{BackendChoice, LoadOptions, Probes, TraceFs},
    model::{LockProfile, Profile},
};
use profiler_common::{
    LockType,
    names::futex::{CATEGORY, REQUIRED, TRACEPOINTS},
};

use super::{
    c_storm::{program, record_while, waits_only},
    checks::Check,
};

/// Threads taking the mutex.
const THREADS: &str = "4";
/// Longer than any check drives it (the workload stops itself then).
const SECS: &str = "600";
/// The workload's frames above the futex wait, innermost first.
const TAKER: [&str; 3] = ["lockprof_test_futex_take", "lockprof_test_futex_loop", "lockprof_test_futex_thread"];
/// The first release with `futex_wait(2)` and `futex_wake(2)`.
const FUTEX2: (u32, u32) = (6, 7);

/// What the workload counted over its whole run.
#[derive(Clone, Copy, Debug)]
struct Counts {
    /// Acquisitions of the mutex.
    acquisitions: u64,
    /// Those whose `pthread_mutex_trylock` failed (then `pthread_mutex_lock`):
    /// each is at most one contention for lockprof, however often its lock
    /// loop waited and however the scheduler delayed it in between.
    contended: u64,
}

/// `/lockprof_test futex`: started, waiting for its "go".
struct FutexStorm {
    child: Child,
    pid: u32,
    /// The mutex's address in the workload.
    mutex: u64,
    io: Mutex<(Option<ChildStdin>, Lines<BufReader<ChildStdout>>)>,
    /// Its counts once it stopped.
    counts: Mutex<Option<Result<Counts, String>>>,
}

impl FutexStorm {
    fn start() -> Result<FutexStorm, String> {
        let program = program();
        let mut child = Command::new(&program)
            .args(["futex", SECS, THREADS])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let line = lines.next().transpose().map_err(|e| format!("reading {program}: {e}"))?.unwrap_or_default();
        let mutex = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["ready", p, "futex", addr] if p == pid.to_string() => {
                u64::from_str_radix(addr.trim_start_matches("0x"), 16).map_err(|e| format!("{line:?}: {e}"))?
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} said {line:?}, not that it was ready"));
            }
        };
        Ok(FutexStorm { child, pid, mutex, io: Mutex::new((stdin, lines)), counts: Mutex::new(None) })
    }

    fn say(&self, what: &str) -> Result<(), String> {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let stdin = io.0.as_mut().ok_or("the workload's input is closed")?;
        stdin.write_all(what.as_bytes()).and_then(|()| stdin.flush()).map_err(|e| format!("telling the workload: {e}"))
    }

    /// Starts the threads.
    fn go(self) -> Result<FutexStorm, String> {
        self.say("go\n")?;
        Ok(self)
    }

    /// Stops the threads and keeps the counts the workload printed once
    /// every thread ended (the process stays, its maps readable).
    fn stop(&self) {
        let counts = self.say("stop\n").and_then(|()| {
            let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
            let line = io.1.next().transpose().map_err(|e| format!("reading the workload: {e}"))?.unwrap_or_default();
            match line.split_whitespace().collect::<Vec<_>>()[..] {
                ["futex", "acquisitions", a, "contended", c] => {
                    let n = |v: &str| v.parse::<u64>().map_err(|e| format!("{line:?}: {e}"));
                    Ok(Counts { acquisitions: n(a)?, contended: n(c)? })
                }
                _ => Err(format!("the workload said {line:?}, not its counts")),
            }
        });
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = Some(counts);
    }

    fn counts(&self) -> Result<Counts, String> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| Err("never stopped".into()))
    }
}

impl Drop for FutexStorm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workload's mutex in `p`, with waits.
fn mutex<'a>(p: &'a Profile, w: &FutexStorm) -> Option<&'a LockProfile> {
    p.locks.iter().find(|l| l.addr == w.mutex && l.pid == Some(w.pid) && l.wait.count() > 0)
}

/// `(major, minor)` of the running kernel.
fn version() -> Option<(u32, u32)> {
    let r = lockprof::ebpf::features::kernel_release();
    let mut it = r.split(|c: char| !c.is_ascii_digit()).map(str::parse::<u32>);
    Some((it.next()?.ok()?, it.next()?.ok()?))
}

/// The notes about futex tracepoints agree with the kernel's tracefs:
/// each one it has attached, each one it lacks named, and `futex_wait`
/// present exactly from 6.7 on. Returns the attached ones.
fn tracepoints(tfs: &TraceFs, notes: &[String]) -> Result<Vec<&'static str>, String> {
    let futex_notes: Vec<&String> = notes.iter().filter(|n| n.starts_with("futex")).collect();
    if let Some(n) = futex_notes.iter().find(|n| n.contains("did not attach")) {
        return Err(format!("a futex tracepoint the kernel has did not attach: {n}"));
    }
    let mut attached = Vec::new();
    for tp in TRACEPOINTS.iter().map(|(tp, _)| *tp) {
        let said_missing = futex_notes.iter().any(|n| n.contains(&format!("has no {CATEGORY}:{tp} ")));
        match (tfs.has_event(CATEGORY, tp), said_missing) {
            (true, false) => attached.push(tp),
            (true, true) => return Err(format!("the notes say {tp} is missing, tracefs has it: {futex_notes:?}")),
            (false, false) => return Err(format!("tracefs lacks {tp}, the notes do not say so: {futex_notes:?}")),
            (false, true) => {}
        }
    }
    let v = version().ok_or("cannot read the kernel's version")?;
    let wait = "sys_enter_futex_wait";
    if (v >= FUTEX2) != attached.contains(&wait) {
        return Err(format!(
            "kernel {}.{}: {wait} {} (futex_wait(2) came with {}.{}); notes {futex_notes:?}",
            v.0,
            v.1,
            if attached.contains(&wait) { "attached" } else { "missing" },
            FUTEX2.0,
            FUTEX2.1
        ));
    }
    Ok(attached)
}

/// Why futex tracing did not attach, in the kernel's words (a load of its
/// own: the session's notes keep only the short reason).
fn unavailable(opts: &LoadOptions) -> String {
    match Probes::load(opts) {
        Ok(mut probes) => {
            let r = match probes.futex() {
                Ok(tps) => format!("; a fresh load attached {tps:?}"),
                Err(u) => format!("; futex: {} ({})", u.reason, u.detail),
            };
            probes.detach();
            r
        }
        Err(e) => format!("; a fresh load failed: {e}"),
    }
}

/// Why this kernel cannot trace futex waits, if so.
pub fn missing() -> Option<String> {
    let Ok(tfs) = TraceFs::find_or_mount() else {
        return Some("no tracefs: the futex system call tracepoints cannot be found".into());
    };
    REQUIRED
        .iter()
        .find(|tp| !tfs.has_event(CATEGORY, tp))
        .map(|tp| format!("the kernel has no {CATEGORY}:{tp} tracepoint (CONFIG_FTRACE_SYSCALLS is off)"))
}

/// The check: one session with `--futex` and `--pid` of the workload.
pub fn mutex_waits() -> Check {
    let tfs = TraceFs::find_or_mount().map_err(|e| format!("tracefs: {e}"))?;
    let storm = FutexStorm::start()?;
    let (pid, addr) = (storm.pid, storm.mutex);
    let mut o = waits_only(BackendChoice::Auto);
    o.load.futex = true;
    o.load.config.user_stacks = profiler_common::USER_STACKS_UNWIND;
    o.load.config.filter_tgid = 1;
    o.load.tgids = vec![pid];
    let seen = |ps: &[&Profile], w: &FutexStorm| mutex(ps[0], w).is_some();
    let load = o.load.clone();
    let (mut ps, storm) = record_while(vec![o], move || storm.go(), seen, FutexStorm::stop)?;
    let p = ps.remove(0);
    let Counts { acquisitions, contended } = storm.counts()?;
    drop(storm);
    let d = &p.meta.drops;
    let futex = |p: &Profile| {
        format!(
            "{contended} contended of {acquisitions} acquisitions; futex waits {}, rewaits {}, again {}, failed {}, \
             map full {}; locks {:?}; notes {:?}",
            d.bookkeeping.futex_waits,
            d.bookkeeping.futex_rewaits,
            d.bookkeeping.futex_again,
            d.bookkeeping.futex_failed,
            d.losses.futex_map_full,
            p.locks.iter().map(|l| (l.addr, l.lock_type, l.pid, l.wait.count())).collect::<Vec<_>>(),
            p.meta.notes
        )
    };
    let l = p.locks.iter().find(|l| l.addr == addr && l.pid == Some(pid)).ok_or_else(|| {
        format!(
            "no lock at the mutex's address {addr:#x} of process {pid} ({:.1} s; {}){}",
            p.meta.duration_s,
            futex(&p),
            unavailable(&load)
        )
    })?;
    if l.lock_type != LockType::Futex {
        return Err(format!("the glibc mutex is a {:?} lock, not a futex ({})", l.lock_type, futex(&p)));
    }
    let waits = l.wait.count();
    if waits == 0 || l.wait.total_ns() == 0 {
        return Err(format!("the mutex has no waits ({})", futex(&p)));
    }
    if waits > contended {
        return Err(format!(
            "{waits} contentions recorded, more than the {contended} contended acquisitions the workload counted ({})",
            futex(&p)
        ));
    }
    let syscalls = d.bookkeeping.futex_waits - d.bookkeeping.futex_rewaits.min(d.bookkeeping.futex_waits);
    if waits > syscalls {
        return Err(format!(
            "{waits} contentions recorded, more than the futex waits that did not continue one ({})",
            futex(&p)
        ));
    }
    if d.bookkeeping.futex_waits == 0 {
        return Err(format!("the futex_waits counter is zero ({})", futex(&p)));
    }
    if let Some(other) = p.locks.iter().find(|l| l.pid.is_some_and(|q| q != pid)) {
        return Err(format!("a lock of process {:?} passed the --pid {pid} filter: {}", other.pid, other.class));
    }
    let attached = tracepoints(&tfs, &p.meta.notes)?;
    // The user stack: glibc's lock functions keep no frame, so the walk
    // skips `lockprof_test_futex_lock` and shows the function that called it.
    let function = |f: &String| f.split(['+', ' ']).next().unwrap_or_default().to_string();
    let caller = l
        .callers
        .iter()
        .map(|c| c.stack.iter().map(function).collect::<Vec<_>>())
        .find(|names| names.windows(TAKER.len()).any(|w| w == TAKER))
        .ok_or_else(|| {
            format!(
                "no caller of the mutex has {TAKER:?} in a row; stacks {:?}",
                l.callers.iter().take(2).map(|c| &c.stack).collect::<Vec<_>>()
            )
        })?;
    Ok(format!(
        "{waits} contentions of the mutex (futex, pid {pid}, name {:?}) for {contended} contended of \
         {acquisitions} acquisitions; futex_waits {}, rewaits {}; attached {attached:?}; waits from {}",
        l.name,
        d.bookkeeping.futex_waits,
        d.bookkeeping.futex_rewaits,
        caller.join(" <- ")
    ))
}
