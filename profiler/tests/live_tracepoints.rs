//! Root-only tests against the live kernel's lock tracepoints.
//!
//! Each test generates real contention, records it through the whole stack
//! (eBPF -> ring buffer -> aggregator -> symbols) and checks what lockprof
//! reports. They skip, saying why, when not root or when the kernel lacks the
//! lock tracepoints (or, for the slab naming half of one test, slab naming);
//! with `CI=true` a missing feature is a failure instead.

use std::{
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

#[path = "support/programs.rs"]
mod programs;
#[path = "support/recorder.rs"]
mod recorder;
mod support;

use programs::{lockprof_programs, programs_when};
use recorder::Recorder;

use lockprof::{
    ebpf::{BackendChoice, LoadOptions},
    model::{LockProfile, NameSource, Profile, placeholders},
    session::{Session, SessionOptions},
    workload::{self, Workload},
};
use profiler_common::{Config, LockMode, LockType};

/// Tests share the machine's two CPUs; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// `true` if the test can run; prints why not otherwise (fails in CI).
fn kernel_ready(test: &str) -> bool {
    support::ready_unless(test, support::tracepoints_missing())
}

/// Session options as the CLI defaults them: aggregate mode, stack budget.
fn cli_defaults() -> SessionOptions {
    SessionOptions::recommended()
}

/// The longest a test drives its workload, round after round, waiting to see
/// what it checks. A busy or slow machine makes each round less contended; it
/// must make the test slower, never flaky.
const DEADLINE: Duration = Duration::from_secs(90);

/// Records rounds of `ws` (`secs` seconds each, `threads` threads) until
/// `seen` finds in one round's profile what the test looks for, and returns
/// that profile with what `seen` found (e.g. a lock's index). `seen` asserts what must hold in every round and answers
/// `Err(what is missing)` only for what a short, unlucky round can miss; after
/// [`DEADLINE`] the test fails with the last round's answer.
fn record_until<T>(
    opts: &SessionOptions,
    ws: &[Workload],
    threads: usize,
    secs: f64,
    mut seen: impl FnMut(&Profile) -> Result<T, String>,
) -> (Profile, T) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let start = std::time::Instant::now();
    let mut round = 0;
    loop {
        round += 1;
        let p = rt.block_on(record_workloads_async(opts.clone(), ws, threads, secs));
        match seen(&p) {
            Ok(found) => return (p, found),
            Err(missing) if start.elapsed() < DEADLINE => eprintln!("round {round}: not seen yet: {missing}"),
            Err(missing) => panic!("not seen in {round} rounds ({:.0?}): {missing}", start.elapsed()),
        }
    }
}

/// Records while `ws` run one after the other, `secs` seconds each.
async fn record_workloads_async(opts: SessionOptions, ws: &[Workload], threads: usize, secs: f64) -> Profile {
    let session = Session::start(opts).expect("load and attach");
    for &w in ws {
        let stop = Arc::new(AtomicBool::new(false));
        let worker = thread::spawn(move || workload::run(w, threads, Duration::from_secs_f64(secs), stop));
        while !worker.is_finished() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let outcome = worker.join().expect("workload thread").expect("workload");
        assert!(outcome.ops > 0, "the {w:?} workload made no progress");
    }
    session.finish().await.expect("finish")
}

fn fn_of(frame: &str) -> &str {
    frame.split('+').next().unwrap_or(frame)
}

fn callers_of(l: &LockProfile) -> Vec<&str> {
    l.callers.iter().map(|c| fn_of(&c.caller)).collect()
}

/// The index of the first lock row that `pick` picks.
fn lock_where(p: &Profile, pick: impl Fn(&LockProfile) -> bool) -> Option<usize> {
    p.locks.iter().position(pick)
}

fn classes(p: &Profile) -> Vec<&str> {
    p.locks.iter().map(|l| l.class.as_str()).collect()
}

fn assert_counters_sane(p: &Profile) {
    let l = &p.meta.drops.losses;
    let lost = [l.ringbuf_full, l.pending_map_full, l.userspace_lost, l.malformed_records];
    assert_eq!(lost, [0; 4], "ringbuf_full, pending_map_full, userspace_lost, malformed_records: {:?}", p.meta.drops);
    assert!(p.meta.events > 0);
    // Every event lands in exactly one lock row (waits still open at stop included).
    assert_eq!(p.meta.events, p.locks.iter().map(|l| l.wait.count()).sum::<u64>());
    assert!(p.meta.drops.bookkeeping.open_at_stop <= p.meta.events);
}

#[test]
fn pipe_writers_show_the_pipe_mutex_and_its_writers() {
    if !kernel_ready("pipe_writers_show_the_pipe_mutex_and_its_writers") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, i) = record_until(&cli_defaults(), &[Workload::Pipe], 4, 3.0, |p| {
        assert!(!p.meta.backend.is_empty());
        assert_eq!(p.meta.mode, "aggregate");
        assert_counters_sane(p);
        let i = lock_where(p, |l| {
            l.lock_type == LockType::Mutex
                && callers_of(l).iter().any(|c| *c == "anon_pipe_write" || *c == "pipe_write")
        })
        .ok_or_else(|| format!("no pipe mutex among {:?}", classes(p)))?;
        match p.locks[i].wait.count() {
            n if n > 10 => Ok(i),
            n => Err(format!("only {n} contentions on the pipe mutex")),
        }
    });
    let pipe = &p.locks[i];
    assert_eq!(pipe.mode, LockMode::Exclusive);
    assert!(pipe.class.starts_with("mutex @ "), "{}", pipe.class);
    assert!(pipe.wait.total_ns() > 0 && pipe.wait.max_ns() >= pipe.wait.min_ns());
    assert!(pipe.wait.max_ns() < 3_000_000_000, "a wait longer than the run: {}", pipe.wait.max_ns());
    let writer = pipe.callers.iter().find(|c| fn_of(&c.caller).contains("pipe_write")).expect("writer caller");
    assert!(writer.stack.iter().any(|f| f.starts_with("vfs_write") || f.contains("sys_write")), "{:?}", writer.stack);
    assert!(!writer.stack.iter().any(|f| f.starts_with("bpf_")), "trampolines must be stripped: {:?}", writer.stack);
    let caller_total: u64 = pipe.callers.iter().map(|c| c.wait.total_ns()).sum();
    assert_eq!(caller_total, pipe.wait.total_ns());
}

/// Whether `release` (`uname -r`) is at least `major.minor`.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Reused stacks must stay on their own path: the pipe's readers and
/// writers wait on one mutex with the same flags, through frames that can
/// put the same return addresses at the same places (a proof of one word,
/// the system call entry's, gave readers the writers' stack on a Debian 7.3
/// kernel). Every caller's stack must be its own syscall's; on tp_btf, 6.2+,
/// most waits must have been proven rather than walked.
#[test]
fn proven_stacks_keep_the_pipe_readers_and_writers_apart() {
    if !kernel_ready("proven_stacks_keep_the_pipe_readers_and_writers_apart") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, i) = record_until(&cli_defaults(), &[Workload::Pipe], 4, 3.0, |p| {
        assert_counters_sane(p);
        let i =
            lock_where(p, |l| l.lock_type == LockType::Mutex && callers_of(l).iter().any(|c| c.contains("pipe_write")))
                .ok_or_else(|| format!("no pipe mutex among {:?}", classes(p)))?;
        let callers = callers_of(&p.locks[i]);
        if callers.iter().any(|c| c.contains("pipe_read")) && p.locks[i].wait.count() > 1000 {
            Ok(i)
        } else {
            Err(format!("{} waits, callers {callers:?}", p.locks[i].wait.count()))
        }
    });
    for c in p.locks[i].callers.iter() {
        let (own, other) = match fn_of(&c.caller) {
            f if f.contains("pipe_write") => ("write", "read"),
            f if f.contains("pipe_read") => ("read", "write"),
            _ => continue,
        };
        let syscall = |rw: &str| {
            c.stack.iter().any(|f| {
                let f = fn_of(f);
                f == format!("vfs_{rw}") || f == format!("ksys_{rw}") || f.ends_with(&format!("sys_{rw}"))
            })
        };
        assert!(
            syscall(own) && !syscall(other),
            "{} ({} waits) has another path's stack: {:?}",
            c.caller,
            c.wait.count(),
            c.stack
        );
    }
    let b = &p.meta.drops.bookkeeping;
    if p.meta.backend == "tp_btf" && release_at_least(&p.meta.kernel, 6, 2) {
        assert!(
            b.stack_proven * 2 > p.meta.events,
            "tp_btf on {}: {} of {} waits proven ({b:?})",
            p.meta.kernel,
            b.stack_proven,
            p.meta.events
        );
    } else {
        eprintln!(
            "proven stacks not checked: backend {} on {} (tp_btf on 6.2+ proves them)",
            p.meta.backend, p.meta.kernel
        );
    }
}

#[test]
fn fork_exit_storm_shows_tasklist_lock_by_name() {
    if !kernel_ready("fork_exit_storm_shows_tasklist_lock_by_name") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let is_tasklist = |l: &LockProfile| l.name.as_deref() == Some("tasklist_lock");
    let (p, _) = record_until(&cli_defaults(), &[Workload::Fork], 4, 4.0, |p| {
        assert_counters_sane(p);
        // Named, and its write side contended, in one round.
        lock_where(p, |l| is_tasklist(l) && l.mode == LockMode::Write).ok_or_else(|| {
            format!(
                "tasklist_lock (write) not named; rwlocks: {:?}",
                p.locks
                    .iter()
                    .filter(|l| l.lock_type == LockType::Rwlock)
                    .map(|l| (&l.class, l.mode, l.wait.count()))
                    .collect::<Vec<_>>()
            )
        })
    });
    let tl: Vec<&LockProfile> = p.locks.iter().filter(|l| is_tasklist(l)).collect();
    for l in &tl {
        assert_eq!(l.lock_type, LockType::Rwlock);
        assert!(matches!(l.name_source, Some(NameSource::Kallsyms | NameSource::Inferred)));
        assert!(l.wait.total_ns() > 0);
    }
    let writer = tl.iter().find(|l| l.mode == LockMode::Write).expect("write side of tasklist_lock contended");
    let known = ["copy_process", "do_exit", "exit_notify", "release_task", "__do_wait", "do_wait"];
    let callers = callers_of(writer);
    assert!(callers.iter().any(|c| known.contains(c)), "tasklist_lock callers {callers:?}");
    let addrs: std::collections::BTreeSet<u64> = tl.iter().map(|l| l.addr).collect();
    assert_eq!(addrs.len(), 1, "one tasklist_lock, read and write rows: {addrs:x?}");
}

/// Why the kernel cannot name a lock's slab object, if it cannot: that needs
/// the `bpf_get_kmem_cache` kfunc and the `kmem_cache` iterator (both 6.13+).
fn slab_naming_missing() -> Option<String> {
    let blob = std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF");
    let types = lockprof::ebpf::btf::Types::parse(&blob).expect("parse BTF");
    if !types.has_func("bpf_get_kmem_cache") {
        Some("the kernel has no bpf_get_kmem_cache kfunc (6.13+)".into())
    } else if types.struct_size("bpf_iter__kmem_cache").is_err() {
        Some("the kernel has no kmem_cache BPF iterator (6.13+)".into())
    } else {
        None
    }
}

#[test]
fn kernel_names_the_pipe_mutex_mmap_rq_and_sig_locks_exactly() {
    const TEST: &str = "kernel_names_the_pipe_mutex_mmap_rq_and_sig_locks_exactly";
    if !kernel_ready(TEST) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rows = |l: &LockProfile| format!("{} {:?} {:?} ({})", l.display_name(), l.name_source, l.field, l.class);
    let storms = [Workload::Pipe, Workload::Fork, Workload::Mmap];
    let slab_missing = slab_naming_missing();
    let is_pipe = |l: &LockProfile| {
        l.lock_type == LockType::Mutex
            && callers_of(l).iter().any(|c| c.contains("pipe_write") || c.contains("pipe_read"))
    };
    let (p, _) = record_until(&cli_defaults(), &storms, 4, 2.0, |p| {
        assert_counters_sane(p);
        // One identity per address.
        let mut names: std::collections::BTreeMap<u64, &Option<String>> = std::collections::BTreeMap::new();
        for l in p.locks.iter().filter(|l| l.addr != 0) {
            if let Some(prev) = names.insert(l.addr, &l.name) {
                assert_eq!(prev, &l.name, "{:#x} carries two names", l.addr);
            }
        }
        for name in ["mmap_lock", "rq_lock", "siglock"] {
            lock_where(p, |l| l.name.as_deref() == Some(name) && l.name_source == Some(NameSource::Btf)).ok_or_else(
                || {
                    format!(
                        "no {name} confirmed by the kernel among {:#?}",
                        p.locks.iter().map(rows).collect::<Vec<_>>()
                    )
                },
            )?;
        }
        // What the slab half checks must have been contended in the same round.
        if slab_missing.is_none() {
            lock_where(p, is_pipe).ok_or_else(|| "no pipe mutex".to_string())?;
            lock_where(p, |l| l.field.is_some() && l.slab.is_some())
                .ok_or_else(|| "no lock in a slab object with a field".to_string())?;
        }
        Ok(())
    });
    let all: Vec<String> = p.locks.iter().map(rows).collect();
    // The slab half: skipped, saying why, only on a kernel without slab
    // naming; with CI=true that is a failure like any missing feature.
    if !support::ready_unless(&format!("{TEST} (slab naming half)"), slab_missing) {
        return;
    }
    let pipe = p.locks.iter().find(|l| is_pipe(l)).unwrap_or_else(|| panic!("no pipe mutex among {all:#?}"));
    assert_eq!(pipe.name_source, Some(NameSource::Btf), "{}", rows(pipe));
    assert!(pipe.slab.as_deref().is_some_and(|s| s.starts_with("kmalloc")), "{}", rows(pipe));
    assert!(pipe.class.contains(" in &kmalloc"), "{}", rows(pipe));
    let field = p
        .locks
        .iter()
        .find(|l| l.field.is_some() && l.slab.is_some())
        .unwrap_or_else(|| panic!("no lock named down to its struct member among {all:#?}"));
    let f = field.field.as_deref().unwrap_or_default();
    assert!(f.contains('.') && f.split('.').all(|part| !part.is_empty()), "{}", rows(field));
}

#[test]
fn pipe_mutex_waits_are_blamed_on_the_pipe_threads() {
    const TEST: &str = "pipe_mutex_waits_are_blamed_on_the_pipe_threads";
    if !kernel_ready(TEST) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    let is_task = |o: &&lockprof::model::OwnerProfile| o.kind == lockprof::model::OwnerKind::Task;
    let through_pipe = |o: &&lockprof::model::OwnerProfile| {
        o.stack.iter().any(|f| fn_of(f).contains("pipe_write") || fn_of(f).contains("pipe_read"))
    };
    let (p, (i, j)) = record_until(&cli_defaults(), &[Workload::Pipe], 4, 2.0, |p| {
        let i =
            lock_where(p, |l| l.lock_type == LockType::Mutex && callers_of(l).iter().any(|c| c.contains("pipe_write")))
                .ok_or_else(|| "no pipe mutex".to_string())?;
        let pipe = &p.locks[i];
        // Known owners can only account for part of the lock's waits; they
        // are not the remainder of anything.
        let known: Vec<_> = pipe.owners.iter().filter(is_task).collect();
        let (waits, ns) = known.iter().fold((0, 0), |(w, n), o| (w + o.waits, n + o.wait_caused_ns));
        assert!(waits <= pipe.wait.count() && ns <= pipe.wait.total_ns(), "known owners exceed the waits: {known:?}");
        // The pipe's users are this process's writer and reader threads.
        for o in &known {
            assert_eq!(o.pid, me, "owner {} {} is not one of the storm's threads", o.comm, o.tid);
        }
        let j = pipe.owners.iter().position(|o| is_task(&o) && o.wait_caused_ns > 0 && through_pipe(&o)).ok_or_else(
            || format!("no owner blamed that acquired through pipe_write or pipe_read: {:?}", pipe.owners),
        )?;
        Ok((i, j))
    });
    let with_stack = &p.locks[i].owners[j];
    assert!(with_stack.caller.contains("pipe_"), "{with_stack:?}");
}

#[test]
fn tasklist_writers_are_blamed_on_the_readers_holding_it() {
    const TEST: &str = "tasklist_writers_are_blamed_on_the_readers_holding_it";
    if !kernel_ready(TEST) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // setpgid(0, 0) writers against kill(0, 0) readers, who hold the lock
    // while they walk the process group.
    let (p, (i, j)) = record_until(&cli_defaults(), &[Workload::Pgrp], 4, 2.0, |p| {
        let i = lock_where(p, |l| {
            l.lock_type == LockType::Rwlock
                && l.mode == LockMode::Write
                && callers_of(l).iter().any(|c| c.contains("setpgid"))
        })
        .ok_or_else(|| format!("no rwlock written from setpgid: {:?}", classes(p)))?;
        let writers = &p.locks[i];
        let known = writers.owners.iter().filter(|o| o.kind != lockprof::model::OwnerKind::Unknown);
        let (waits, ns) = known.fold((0, 0), |(w, n), o| (w + o.waits, n + o.wait_caused_ns));
        assert!(waits <= writers.wait.count() && ns <= writers.wait.total_ns(), "known owners exceed the waits");
        let j = writers
            .owners
            .iter()
            .position(|o| o.kind == lockprof::model::OwnerKind::Readers && o.waits > 0 && o.wait_caused_ns > 0)
            .ok_or_else(|| format!("no writer wait blamed on readers: {:?}", writers.owners))?;
        Ok((i, j))
    });
    let readers = &p.locks[i].owners[j];
    assert_eq!(readers.caller, "[held by readers]");
}

#[test]
fn a_tiny_stack_map_forgets_stacks_but_never_mixes_them_up() {
    if !kernel_ready("a_tiny_stack_map_forgets_stacks_but_never_mixes_them_up") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 64 stacks, every contention walked: the fork storm's stacks push the
    // others out of the map faster than they are read.
    let mut opts = cli_defaults();
    opts.load.stack_entries = 64;
    opts.set_stack_rate(0);
    let (p, ()) = record_until(&opts, &[Workload::Pipe, Workload::Fork], 4, 2.0, |p| {
        let drops = &p.meta.drops;
        assert_eq!(drops.losses.stack_failed, 0, "a full stack map must not fail captures: {drops:?}");
        // Every symbolized stack still contains the caller it was grouped
        // by, and the pipe mutex holds pipe stacks only: no id came to name
        // another stack, however often stacks were forgotten and walked again.
        for l in &p.locks {
            let pipe = l.lock_type == LockType::Mutex
                && l.callers.iter().any(|c| c.stack.iter().any(|f| fn_of(f).contains("pipe_write")));
            for c in l.callers.iter().filter(|c| !c.stack.is_empty()) {
                assert!(c.stack.contains(&c.caller), "{}: caller {} not in its stack {:?}", l.class, c.caller, c.stack);
                assert!(!pipe || c.stack.iter().any(|f| fn_of(f).contains("pipe_")), "{:?}", c.stack);
            }
        }
        match (drops.bookkeeping.stacks_read, drops.losses.stacks_evicted) {
            (0, _) => Err("no stack read".into()),
            (read, 0) => Err(format!("no stack forgotten before it was read ({read} read)")),
            _ => Ok(()),
        }
    });
    // What was forgotten is said where it was used.
    let shown = p.locks.iter().flat_map(|l| l.callers.iter()).any(|c| c.caller == placeholders::STACK_EVICTED)
        || p.slowest.iter().any(|w| w.caller == placeholders::STACK_EVICTED)
        || p.locks.iter().flat_map(|l| l.owners.iter()).any(|o| o.caller == placeholders::STACK_EVICTED);
    assert!(shown, "{} stacks evicted, none shown as such", p.meta.drops.losses.stacks_evicted);
}

#[test]
fn stream_mode_sees_the_same_pipe_mutex() {
    if !kernel_ready("stream_mode_sees_the_same_pipe_mutex") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _) = record_until(&SessionOptions::default(), &[Workload::Pipe], 4, 2.0, |p| {
        assert_eq!(p.meta.mode, "stream");
        assert_counters_sane(p);
        let i =
            lock_where(p, |l| l.lock_type == LockType::Mutex && callers_of(l).iter().any(|c| c.contains("pipe_write")))
                .ok_or_else(|| "stream mode: no pipe mutex".to_string())?;
        match p.locks[i].wait.count() {
            n if n > 10 => Ok(()),
            n => Err(format!("only {n} contentions on the pipe mutex")),
        }
    });
    // Stream mode sees every wait individually: the slowest list is filled from them.
    assert!(!p.slowest.is_empty());
    assert!(p.slowest.windows(2).all(|w| w[0].wait_ns >= w[1].wait_ns));
    assert!(p.slowest[0].wait_ns <= p.locks.iter().map(|l| l.wait.max_ns()).max().unwrap_or(0));
}

#[test]
fn unlink_storm_shows_the_directory_rwsem() {
    if !kernel_ready("unlink_storm_shows_the_directory_rwsem") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, i) = record_until(&SessionOptions::default(), &[Workload::Unlink], 4, 3.0, |p| {
        assert_counters_sane(p);
        let i = lock_where(p, |l| {
            l.lock_type == LockType::Rwsem
                && l.mode == LockMode::Write
                // Inferred (`i_rwsem`), or confirmed by the kernel down to the
                // member (`shmem_inode_info.vfs_inode.i_rwsem`).
                && l.name.as_deref().is_some_and(|n| n == "i_rwsem" || n.ends_with(".i_rwsem"))
        })
        .ok_or_else(|| {
            format!(
                "no i_rwsem among {:?}",
                p.locks.iter().map(|l| (&l.name, &l.class, l.lock_type, l.mode)).collect::<Vec<_>>()
            )
        })?;
        match p.locks[i].wait.count() {
            n if n > 5 => Ok(i),
            n => Err(format!("only {n} contentions on i_rwsem")),
        }
    });
    let callers = callers_of(&p.locks[i]);
    assert!(
        callers.iter().any(|c| ["do_unlinkat", "open_last_lookups", "filename_create", "path_openat"].contains(c)),
        "{callers:?}"
    );
}

#[test]
fn classic_tracepoint_backend_records_too() {
    if !kernel_ready("classic_tracepoint_backend_records_too") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let opts = SessionOptions {
        load: LoadOptions { backend: BackendChoice::Tracepoint, ..Default::default() },
        ..Default::default()
    };
    let (p, _) = record_until(&opts, &[Workload::Pipe], 4, 2.0, |p| {
        assert_eq!(p.meta.backend, "tracepoint");
        assert_counters_sane(p);
        lock_where(p, |l| l.lock_type == LockType::Mutex && callers_of(l).iter().any(|c| c.contains("pipe_write")))
            .ok_or_else(|| "classic tracepoints: no pipe mutex".to_string())
    });
    // Classic tracepoint stacks start at the slowpath: no trampoline frames to strip.
    assert!(
        p.locks
            .iter()
            .flat_map(|l| l.callers.iter())
            .all(|c| c.stack.first().is_none_or(|f| !f.starts_with("bpf_prog_")))
    );
}

#[test]
fn type_filter_keeps_only_that_type() {
    if !kernel_ready("type_filter_keeps_only_that_type") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let opts = SessionOptions {
        load: LoadOptions {
            config: Config { type_mask: LockType::Mutex.bit(), ..Config::default() },
            ..Default::default()
        },
        ..Default::default()
    };
    record_until(&opts, &[Workload::Pipe], 4, 2.0, |p| {
        assert!(
            p.locks.iter().all(|l| l.lock_type == LockType::Mutex),
            "{:?}",
            p.locks.iter().map(|l| l.lock_type).collect::<Vec<_>>()
        );
        if p.locks.is_empty() { Err("no mutex contended".into()) } else { Ok(()) }
    });
}

#[test]
fn pid_filter_keeps_only_that_process() {
    if !kernel_ready("pid_filter_keeps_only_that_process") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let storm = Storm::start("pipe", 3);
    let pid = storm.pid();
    let opts = SessionOptions {
        load: LoadOptions {
            config: Config { filter_tgid: 1, ..Config::default() },
            tgids: vec![pid],
            ..Default::default()
        },
        ..Default::default()
    };
    // Our own process contends too, and must not show up.
    record_until(&opts, &[Workload::Pipe], 2, 2.0, |p| {
        assert!(
            p.tasks.iter().all(|t| t.tgid == pid),
            "tasks outside pid {pid}: {:?}",
            p.tasks.iter().map(|t| (t.tgid, &t.comm)).collect::<Vec<_>>()
        );
        if p.tasks.is_empty() { Err("the filtered process contended but nothing was recorded".into()) } else { Ok(()) }
    });
    drop(storm);
}

fn lockprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockprof"))
}

/// A `lockprof stress` process that outlives everything the test records
/// while it runs: it is started long and killed when the guard drops, so a
/// busy machine that delays a recording cannot make it miss the workload.
struct Storm(std::process::Child);

impl Storm {
    fn start(workload: &str, threads: usize) -> Storm {
        let child = lockprof()
            .args(["stress", workload, "--threads", &threads.to_string(), "--duration", "600"])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn stress");
        // Let its threads start contending before anyone records.
        thread::sleep(Duration::from_millis(300));
        Storm(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn binary_records_json_and_reports_the_recording() {
    if !kernel_ready("binary_records_json_and_reports_the_recording") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("lockprof-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmpdir");
    let rec = dir.join("pipe.lockprof");
    let storm = Storm::start("pipe", 4);
    let out = lockprof()
        .args(["record", "--duration", "2", "--format", "json", "--output"])
        .arg(&rec)
        .output()
        .expect("run record");
    drop(storm);
    assert!(out.status.success(), "record failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    for k in ["backend", "kernel", "duration_s", "drops", "locks"] {
        assert!(v.get(k).is_some(), "missing top-level {k}");
    }
    let locks = v["locks"].as_array().expect("locks array");
    assert!(!locks.is_empty());
    for l in locks {
        for k in [
            "name",
            "name_source",
            "addr",
            "type",
            "mode",
            "contended",
            "wait_total_ns",
            "wait_min_ns",
            "wait_max_ns",
            "wait_avg_ns",
            "wait_p50_ns",
            "wait_p99_ns",
            "hold_total_ns",
            "hold_max_ns",
            "hold_avg_ns",
            "callers",
        ] {
            assert!(l.get(k).is_some(), "lock missing {k}: {l}");
        }
        assert!(l["addr"].as_str().is_some_and(|a| a.starts_with("0x")));
        assert!(l["hold_total_ns"].is_null(), "tracepoints cannot see holds");
        for c in l["callers"].as_array().expect("callers") {
            for k in ["caller", "stack", "contended", "wait_total_ns", "wait_max_ns"] {
                assert!(c.get(k).is_some(), "caller missing {k}");
            }
        }
    }
    assert!(locks.iter().any(|l| {
        l["type"] == "mutex"
            && l["callers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["caller"].as_str().is_some_and(|s| s.contains("pipe_write"))))
    }));

    let csv =
        lockprof().args(["report", "--format", "csv", "--by", "caller", "--input"]).arg(&rec).output().expect("report");
    assert!(csv.status.success(), "{}", String::from_utf8_lossy(&csv.stderr));
    let text = String::from_utf8_lossy(&csv.stdout);
    assert!(text.starts_with("lock,addr,type,mode,caller,stack,contended"), "{text}");
    assert!(text.lines().count() > 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_prints_the_report_and_detaches() {
    if !kernel_ready("sigterm_prints_the_report_and_detaches") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Programs of earlier tests' processes may still be on their way out.
    let before = programs_when(|v| v.is_empty());
    // Attached once it says so (a fresh machine's first recording can take
    // seconds to load and attach: no fixed delay stands in for that).
    let rec = Recorder::start(&["--format", "json"]);
    let during = lockprof_programs();
    assert!(during.len() >= before.len() + 2, "record should have attached two programs: {during:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let _ = workload::run(Workload::Pipe, 2, Duration::from_millis(2500), stop.clone());
    // SIGTERM; it must exit cleanly with its report on stdout.
    let out = rec.stop();
    let v: serde_json::Value = serde_json::from_slice(&out).expect("report printed on SIGTERM");
    assert!(v["locks"].as_array().is_some_and(|l| !l.is_empty()));
    stop.store(true, Ordering::Relaxed);
    let after = programs_when(|v| v.len() <= before.len());
    assert_eq!(after.len(), before.len(), "programs left attached after exit: {after:?}");
}

#[test]
fn unprivileged_user_gets_one_clear_line_and_exit_2() {
    if !kernel_ready("unprivileged_user_gets_one_clear_line_and_exit_2") {
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let out = lockprof().args(["record", "--duration", "1"]).uid(65534).gid(65534).output().expect("run as nobody");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_fails_before_attaching() {
    let dir = std::env::temp_dir().join(format!("lockprof-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmpdir");
    let foreign = dir.join("foreign.json");
    std::fs::write(&foreign, r#"{"traceEvents": []}"#).expect("write");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["record".into(), "--output".into(), "/nonexistent-dir/x".into(), "--duration".into(), "1".into()],
            "cannot write the recording",
        ),
        (vec!["record".into(), "--type".into(), "semaphore".into()], "unknown lock type"),
        (vec!["record".into(), "--pid".into(), "999999999".into()], "no such process"),
        (vec!["record".into(), "--duration=-1".into()], "positive"),
        (vec!["report".into(), "--input".into(), foreign.display().to_string()], "not a lockprof recording"),
        (vec!["report".into(), "--input".into(), dir.join("missing").display().to_string()], "No such file"),
    ];
    for (args, want) in cases {
        let out = lockprof().args(&args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flamegraph_folded_pprof_and_diff_of_a_pipe_storm() {
    use std::io::Read as _;

    use prost::Message as _;
    if !kernel_ready("flamegraph_folded_pprof_and_diff_of_a_pipe_storm") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("lockprof-fg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmpdir");
    let storm = Storm::start("pipe", 4);
    for (name, mode) in [("a", "aggregate"), ("b", "stream")] {
        let out = lockprof()
            .args(["record", "--duration", "1.5", "--mode", mode, "--output"])
            .arg(dir.join(format!("{name}.lockprof")))
            .output()
            .expect("record");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    drop(storm);
    let rec = dir.join("a.lockprof");

    let out = lockprof()
        .arg("flamegraph")
        .arg("--input")
        .arg(&rec)
        .arg("--folded")
        .arg(dir.join("a.folded"))
        .arg("--output")
        .arg(dir.join("a.svg"))
        .output()
        .expect("flamegraph");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let folded = std::fs::read_to_string(dir.join("a.folded")).expect("folded");
    let folded_sum: u64 =
        folded.lines().map(|l| l.rsplit(' ').next().and_then(|w| w.parse::<u64>().ok()).expect("weight")).sum();
    assert!(
        folded.lines().any(|l| l.contains("pipe_write") && l.ends_with(char::is_numeric)),
        "pipe write path: {folded}"
    );
    let json = lockprof().args(["report", "--format", "json", "--input"]).arg(&rec).output().expect("report");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let total: u64 =
        v["locks"].as_array().expect("locks").iter().map(|l| l["wait_total_ns"].as_u64().unwrap_or(0)).sum();
    assert_eq!(folded_sum, total, "folded weights sum to the report's wait_total_ns");
    let svg = std::fs::read_to_string(dir.join("a.svg")).expect("svg");
    assert!(svg.starts_with("<?xml") && svg.contains("pipe_write") && svg.contains("Lock wait time (ns)"));

    let pb = dir.join("a.pb.gz");
    let out = lockprof()
        .args(["report", "--format", "pprof", "--input"])
        .arg(&rec)
        .arg("--output")
        .arg(&pb)
        .output()
        .expect("pprof");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&pb).expect("open")).read_to_end(&mut raw).expect("gunzip");
    let prof = lockprof::export::proto::Profile::decode(raw.as_slice()).expect("decode");
    let delay: i64 = prof.sample.iter().map(|s| s.value[1]).sum();
    let count: i64 = prof.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(delay as u64, total);
    assert_eq!(
        count as u64,
        v["locks"].as_array().expect("locks").iter().map(|l| l["contended"].as_u64().unwrap_or(0)).sum::<u64>()
    );

    let out = lockprof()
        .arg("flamegraph")
        .arg("--diff")
        .arg(&rec)
        .arg(dir.join("b.lockprof"))
        .arg("--output")
        .arg(dir.join("d.svg"))
        .output()
        .expect("diff");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = std::fs::read_to_string(dir.join("d.svg")).expect("diff svg");
    assert!(d.contains("differential") && d.contains("pipe_write"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn yield_to_is_profiled_or_explained() {
    if !kernel_ready("yield_to_is_profiled_or_explained") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let record = |extra: &[&str]| -> serde_json::Value {
        let out = lockprof()
            .args(["record", "--duration", "1", "--format", "json"])
            .args(extra)
            .output()
            .expect("run record");
        assert!(out.status.success(), "record failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("stdout is JSON")
    };
    let v = record(&[]);
    let y = &v["yield_to"];
    for k in
        ["available", "calls", "yielded", "failed", "errors", "latency_total_ns", "latency_max_ns", "callers", "pairs"]
    {
        assert!(y.get(k).is_some(), "yield_to missing {k}: {y}");
    }
    if y["available"] == true {
        // A kernel that takes fentry or kprobes (e.g. the guest of `cargo xtask vm-test`).
        assert!(matches!(y["backend"].as_str(), Some("fentry" | "kprobe")), "{y}");
    } else {
        // This host: no kprobe PMU and trampolines refused. The reason must
        // name both attempts and what the kernel said.
        let why = y["unavailable_reason"].as_str().expect("a reason when unavailable");
        assert!(why.contains("fentry") && why.contains("kprobe"), "{why}");
        assert_eq!(y["calls"], 0);
        eprintln!("yield_to unavailable here, as doctor says: {why}");
    }
    let v = record(&["--no-yield-to"]);
    assert_eq!(v["yield_to"]["available"], false);
    assert!(
        v["yield_to"]["unavailable_reason"].as_str().is_some_and(|r| r.contains("--no-yield-to")),
        "{}",
        v["yield_to"]
    );
}
