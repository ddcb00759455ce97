//! Checks of one recorded profile: each returns what it saw, or why it failed.

use lockprof::{
    model::{LockProfile, NameSource, OwnerKind, OwnerProfile, Profile, mode_name},
    symbols::TASKLIST_CALLERS,
};
use profiler_common::{LockMode, LockType};

/// A check's outcome: a one-line account of what was seen, or the failure.
pub type Check = Result<String, String>;

fn callers(l: &LockProfile) -> Vec<String> {
    l.callers.iter().map(|c| c.caller.split('+').next().unwrap_or(&c.caller).to_string()).collect()
}

fn classes(p: &Profile) -> Vec<(String, &'static str, u64)> {
    p.locks.iter().map(|l| (l.display_name().to_string(), mode_name(l.mode), l.wait.count())).collect()
}

/// The pipe mutex: a mutex (an rt-mutex that is a mutex on PREEMPT_RT)
/// contended from the pipe write path.
pub fn pipe_mutex(p: &Profile) -> Result<&LockProfile, String> {
    p.locks
        .iter()
        .filter(|l| {
            l.lock_type == LockType::Mutex
                || (l.lock_type == LockType::RtMutex && l.rt_base.as_deref() == Some("mutex"))
        })
        .find(|l| callers(l).iter().any(|c| c.contains("pipe_write")))
        .ok_or_else(|| {
            format!(
                "no pipe mutex among {:?} ({} waits; map operations refused: {})",
                classes(p),
                p.meta.events,
                p.meta.drops.losses.map_ops_refused
            )
        })
}

/// Waits on the pipe mutex, from the writers.
pub fn pipe_waits(p: &Profile) -> Check {
    let l = pipe_mutex(p)?;
    if l.wait.count() == 0 || l.wait.total_ns() == 0 {
        return Err("pipe mutex without waits".into());
    }
    let writer = l.callers.iter().find(|c| c.caller.contains("pipe_write")).ok_or("no writer caller")?;
    if writer.stack.iter().any(|f| f.starts_with("kretprobe_trampoline") || f.starts_with("__kretprobe_trampoline")) {
        return Err(format!("the writer's stack runs through the kretprobe trampoline: {:?}", writer.stack));
    }
    Ok(format!(
        "{} waits {} ns on {}, callers {:?}",
        l.wait.count(),
        l.wait.total_ns(),
        l.class,
        &callers(l)[..callers(l).len().min(3)]
    ))
}

/// Holds of `l`: present, as many as its contended acquisitions (only those
/// still held at stop may be missing), and no longer than the run.
pub fn holds(p: &Profile, l: &LockProfile, secs: f64) -> Check {
    let backend = p.meta.hold_backend.as_deref().ok_or_else(|| {
        format!("no hold backend attached: {}", p.meta.hold_unavailable.as_deref().unwrap_or("no reason given"))
    })?;
    let d = &p.meta.drops;
    let h = l.hold.as_ref().ok_or_else(|| {
        format!(
            "no hold recorded on {} ({} waits; holds counted {}, hold_map_full {}, reentered {})",
            l.display_name(),
            l.wait.count(),
            d.bookkeeping.holds,
            d.losses.hold_map_full,
            d.losses.reentered
        )
    })?;
    if h.count() == 0 || h.total_ns() == 0 {
        return Err("hold count or total is zero".into());
    }
    if h.count() * 10 < l.wait.count() * 9 {
        return Err(format!("only {} holds for {} contended acquisitions", h.count(), l.wait.count()));
    }
    if h.max_ns() as f64 > secs * 1e9 + 1e9 {
        return Err(format!("hold max {} ns longer than the run", h.max_ns()));
    }
    if !l.callers.iter().any(|c| c.hold.is_some()) {
        return Err("no caller has hold statistics".into());
    }
    Ok(format!("{} holds, total {} ns, max {} ns, via {backend}", h.count(), h.total_ns(), h.max_ns()))
}

/// `tasklist_lock`'s write side, named (from kallsyms when it lists it),
/// contended from the fork/exit/setpgid paths.
pub fn tasklist_writer(p: &Profile, kallsyms_has_it: bool) -> Result<&LockProfile, String> {
    let w = p
        .locks
        .iter()
        .filter(|l| l.name.as_deref() == Some("tasklist_lock"))
        .find(|l| l.mode == LockMode::Write)
        .ok_or_else(|| format!("tasklist_lock (write) not found among {:?}", classes(p)))?;
    if kallsyms_has_it && w.name_source != Some(NameSource::Kallsyms) {
        return Err(format!(
            "named {:?}, not from kallsyms, although kallsyms has it at another address than {:#x}",
            w.name_source, w.addr
        ));
    }
    let cs = callers(w);
    if !cs.iter().any(|c| TASKLIST_CALLERS.contains(&c.as_str())) {
        return Err(format!("unexpected callers {cs:?}"));
    }
    Ok(w)
}

/// `tasklist_lock` write waits (setpgid/kill).
pub fn tasklist_waits(p: &Profile, kallsyms_has_it: bool) -> Check {
    let w = tasklist_writer(p, kallsyms_has_it)?;
    let cs = callers(w);
    Ok(format!("{} write waits, callers {:?}, name from {:?}", w.wait.count(), &cs[..cs.len().min(3)], w.name_source))
}

/// `tasklist_lock` waits on either side from fork/exit/wait paths, named
/// (newer kernels hold it for write so briefly in fork and exit that, in a
/// few seconds, the read side in `wait` may be all that contends).
pub fn tasklist_fork_waits(p: &Profile, kallsyms_has_it: bool) -> Check {
    let tl: Vec<&LockProfile> = p.locks.iter().filter(|l| l.name.as_deref() == Some("tasklist_lock")).collect();
    if tl.is_empty() {
        return Err(format!("tasklist_lock not found among {:?}", classes(p)));
    }
    let mut seen = Vec::new();
    for l in &tl {
        if kallsyms_has_it && l.name_source != Some(NameSource::Kallsyms) {
            return Err(format!(
                "named {:?}, not from kallsyms, although kallsyms has it at another address than {:#x}",
                l.name_source, l.addr
            ));
        }
        let cs = callers(l);
        if !cs.iter().any(|c| TASKLIST_CALLERS.contains(&c.as_str())) {
            return Err(format!("unexpected callers of tasklist_lock ({}): {cs:?}", mode_name(l.mode)));
        }
        seen.push(format!("{} {} waits from {:?}", l.wait.count(), mode_name(l.mode), &cs[..cs.len().min(3)]));
    }
    Ok(format!("{}; name from {:?}", seen.join("; "), tl[0].name_source))
}

/// The process's `mmap_lock`, named, with waits.
pub fn mmap_lock(p: &Profile) -> Check {
    let l = p
        .locks
        .iter()
        .filter(|l| l.name.as_deref() == Some("mmap_lock"))
        .max_by_key(|l| l.wait.count())
        .ok_or_else(|| format!("no lock named mmap_lock among {:?}", classes(p)))?;
    if l.wait.total_ns() == 0 {
        return Err("mmap_lock without waits".into());
    }
    Ok(format!(
        "mmap_lock ({}, {:?}) {} waits, callers {:?}",
        mode_name(l.mode),
        l.name_source,
        l.wait.count(),
        &callers(l)[..l.callers.len().min(3)]
    ))
}

/// One name per lock address, and the pipe mutex named by its slab cache
/// when the kernel can say (`bpf_get_kmem_cache` and a backend that may call
/// it), else by its caller class with the reason among the notes.
pub fn pipe_identity(p: &Profile, slab_kfunc: bool) -> Check {
    let mut names: std::collections::BTreeMap<u64, &Option<String>> = std::collections::BTreeMap::new();
    for l in p.locks.iter().filter(|l| l.addr != 0) {
        if let Some(other) = names.insert(l.addr, &l.name)
            && other != &l.name
        {
            return Err(format!("{:#x} carries two names: {other:?} and {:?}", l.addr, l.name));
        }
    }
    let l = pipe_mutex(p)?;
    if slab_kfunc {
        let slab = l.slab.as_deref().ok_or_else(|| format!("the pipe mutex has no slab cache ({})", l.class))?;
        if !slab.starts_with("kmalloc") || l.name_source != Some(NameSource::Btf) || !l.class.contains(" in &") {
            return Err(format!("pipe mutex named {:?} ({:?}), class {}", l.name, l.name_source, l.class));
        }
        return Ok(format!("pipe mutex in &{slab}: {}", l.class));
    }
    if l.slab.is_some() {
        return Err(format!("a slab cache {:?} although the kernel cannot say", l.slab));
    }
    let why = p
        .meta
        .notes
        .iter()
        .find(|n| n.starts_with("lock naming: slab caches"))
        .ok_or_else(|| format!("no note says why slab caches are not named: {:?}", p.meta.notes))?;
    Ok(format!("pipe mutex by caller class ({}); {why}", l.class))
}

/// Blame sums: the unknown row is the lock's waits minus the known owners'
/// by construction, so what can be wrong is the known part: the waits
/// charged to known owners (tasks, readers) are some of the lock's waits,
/// never more, and none of them outlasted the lock's longest wait.
fn blame_sums(l: &LockProfile) -> Result<(), String> {
    let known = || l.owners.iter().filter(|o| o.kind != OwnerKind::Unknown);
    let waits: u64 = known().map(|o| o.waits).sum();
    let ns: u64 = known().map(|o| o.wait_caused_ns).sum();
    if waits > l.wait.count() || ns > l.wait.total_ns() {
        return Err(format!(
            "known owners of {} are charged {waits} waits / {ns} ns, more than the lock has: {} / {}",
            l.display_name(),
            l.wait.count(),
            l.wait.total_ns()
        ));
    }
    if let Some(o) = known().find(|o| o.wait_caused_max_ns > l.wait.max_ns()) {
        return Err(format!(
            "owner {} {} of {} caused a {} ns wait, longer than the lock's longest ({} ns)",
            o.comm,
            o.caller,
            l.display_name(),
            o.wait_caused_max_ns,
            l.wait.max_ns()
        ));
    }
    Ok(())
}

fn owner_frames(o: &OwnerProfile) -> Vec<String> {
    std::iter::once(&o.caller).chain(&o.stack).map(|f| f.split('+').next().unwrap_or(f).to_string()).collect()
}

/// The blame of `locks` is sound: each lock's owners sum to its waits,
/// some waits are charged to a known owner (a writer task, or the readers
/// holding it), and every writer whose acquire stack lockprof saw took the
/// lock on one of `writer_paths`. Which owner a wait meets is timing: under
/// single-threaded TCG a waiter rarely begins inside a short hold of a
/// holder that itself waited, so a writer with a stack is not required.
fn blame_of(what: &str, locks: &[&LockProfile], writer_paths: &[&str]) -> Check {
    for l in locks {
        blame_sums(l)?;
    }
    let owners = || locks.iter().flat_map(|l| l.owners.iter());
    let seen = || owners().map(|o| format!("{:?} {} {}", o.kind, o.comm, o.caller)).collect::<Vec<_>>();
    for o in owners().filter(|o| o.kind == OwnerKind::Task && !o.stack.is_empty()) {
        if !owner_frames(o).iter().any(|f| writer_paths.contains(&f.as_str())) {
            return Err(format!("{what} waits blamed on a writer that took it elsewhere: {}", o.stack.join(" <- ")));
        }
    }
    let known: Vec<&OwnerProfile> = owners().filter(|o| o.kind != OwnerKind::Unknown).collect();
    if known.is_empty() {
        return Err(format!("no {what} wait blamed on a known owner: owners {:?}", seen()));
    }
    let writers = known.iter().filter(|o| o.kind == OwnerKind::Task && !o.stack.is_empty()).count();
    let (waits, ns) = known.iter().fold((0, 0), |(w, n), o| (w + o.waits, n + o.wait_caused_ns));
    Ok(format!(
        "{waits} waits ({ns} ns) on {what} blamed on known owners ({writers} writers at their acquire site): {:?}",
        seen()
    ))
}

/// `mmap_lock` waits blamed on their owners: the mmap/munmap writers (with
/// a writer path in their acquire stack) or the page-faulting readers. The
/// recording process's own allocator writes too (musl's realloc moves large
/// blocks with mremap, and malloc may grow the heap with brk), and so does the
/// kernel's khugepaged when it collapses the process's pages into a huge page
/// (seen on 6.1: `collapse_huge_page <- hpage_collapse_scan_pmd <- khugepaged`).
pub fn mmap_blame(p: &Profile) -> Check {
    const WRITERS: &[&str] = &[
        "vm_mmap_pgoff",
        "__vm_munmap",
        "vm_munmap",
        "do_mprotect_pkey",
        "do_vmi_munmap",
        "do_mremap",
        "__do_sys_mremap",
        "__do_sys_brk",
        "collapse_huge_page",
    ];
    let locks: Vec<&LockProfile> = p.locks.iter().filter(|l| l.name.as_deref() == Some("mmap_lock")).collect();
    if locks.is_empty() {
        return Err(format!("no lock named mmap_lock among {:?}", classes(p)));
    }
    blame_of("mmap_lock", &locks, WRITERS)
}

/// `tasklist_lock` waits blamed on their owners: an rwlock has no owner
/// field, so the readers holding it are read from the lock word, and a
/// writer is known while release probes time its hold (its acquire stack
/// through the fork/exit/setpgid paths).
pub fn tasklist_blame(p: &Profile, kallsyms_has_it: bool) -> Check {
    let w = tasklist_writer(p, kallsyms_has_it)?;
    let tl: Vec<&LockProfile> = p.locks.iter().filter(|l| l.addr == w.addr).collect();
    blame_of("tasklist_lock", &tl, TASKLIST_CALLERS)
}

/// Waits a storm's share must reach before its attribution is judged.
pub const MIN_STORM_WAITS: u64 = 20;

/// The pipe mutexes: mutexes contended from the pipe write path.
fn pipe_mutexes(p: &Profile) -> impl Iterator<Item = &LockProfile> {
    p.locks.iter().filter(|l| {
        (l.lock_type == LockType::Mutex || (l.lock_type == LockType::RtMutex && l.rt_base.as_deref() == Some("mutex")))
            && callers(l).iter().any(|c| c.contains("pipe_write"))
    })
}

/// A profile filtered to the cgroup `inside`: every wait is of that cgroup
/// (its rows and every caller's shares), the storm inside it (`inside_pid`)
/// was seen on a pipe mutex and the storm outside it (`outside_pid`) not at all.
pub fn cgroup_filtered(p: &Profile, inside: u64, inside_pid: u32, outside_pid: u32) -> Check {
    if p.cgroups.is_empty() {
        return Err("the filtered profile has no cgroup rows".into());
    }
    let strays: Vec<(u64, &str, u64)> =
        p.cgroups.iter().filter(|c| c.id != inside).map(|c| (c.id, c.name.as_str(), c.wait.count())).collect();
    if !strays.is_empty() {
        return Err(format!("waits of other cgroups than {inside} in the filtered profile: {strays:?}"));
    }
    let shares = p.locks.iter().flat_map(|l| l.callers.iter()).flat_map(|c| c.cgroups.iter());
    if let Some(s) = shares.clone().find(|s| s.id != inside) {
        return Err(format!("a caller's waits are attributed to cgroup {} ({} waits), not {inside}", s.id, s.count));
    }
    if let Some(t) = p.tasks.iter().find(|t| t.tgid == outside_pid) {
        return Err(format!("the storm outside the cgroup was recorded: thread {} ({})", t.tid, t.comm));
    }
    if !p.tasks.iter().any(|t| t.tgid == inside_pid) {
        return Err(format!("no thread of the storm inside the cgroup ({inside_pid}) among {} tasks", p.tasks.len()));
    }
    let waits: u64 = pipe_mutexes(p).map(|l| l.wait.count()).sum();
    if waits < MIN_STORM_WAITS {
        return Err(format!("{waits} pipe mutex waits (want {MIN_STORM_WAITS}) among {:?}", classes(p)));
    }
    Ok(format!("{waits} pipe mutex waits, all of cgroup {inside}, none of process {outside_pid}"))
}

/// An unfiltered profile of two storms, one in cgroup `a`, one in `b`
/// (`(id, path)` each): each cgroup's most-waited mutex is a pipe mutex
/// (a different one for each), whose waits are at least 90% that
/// cgroup's; each cgroup's row names its path.
pub fn cgroup_attributed(p: &Profile, a: (u64, &str), b: (u64, &str)) -> Check {
    let mut seen = Vec::new();
    for (id, path) in [a, b] {
        let row = p.cgroups.iter().find(|c| c.id == id).ok_or_else(|| {
            format!(
                "no row for cgroup {id} ({path}) among {:?}",
                p.cgroups.iter().map(|c| (c.id, c.path.as_deref(), c.wait.count())).collect::<Vec<_>>()
            )
        })?;
        if row.path.as_deref() != Some(path) {
            return Err(format!("cgroup {id} is named {:?} with path {:?}, not {path}", row.name, row.path));
        }
        let top = row
            .locks
            .iter()
            .filter(|r| r.lock_type == LockType::Mutex || r.lock_type == LockType::RtMutex)
            .max_by_key(|r| r.count)
            .ok_or_else(|| format!("cgroup {path} waited on no mutex: {:?}", row.locks))?;
        let lock = pipe_mutexes(p).find(|l| l.addr == top.addr && l.mode == top.mode).ok_or_else(|| {
            format!("cgroup {path}'s most-waited mutex {} ({:#x}) is not a pipe mutex", top.lock, top.addr)
        })?;
        let all = lock.wait.count();
        if top.count < MIN_STORM_WAITS || top.count * 10 < all * 9 {
            return Err(format!(
                "cgroup {path} has {} of the {all} waits of its pipe mutex {:#x}",
                top.count, top.addr
            ));
        }
        seen.push((path, top.addr, top.count, all));
    }
    if seen[0].1 == seen[1].1 {
        return Err(format!("both cgroups' pipe mutex is {:#x}: the storms share no pipe", seen[0].1));
    }
    Ok(seen
        .iter()
        .map(|(p, a, n, all)| format!("{p}: {n} of {all} waits on pipe mutex {a:#x}"))
        .collect::<Vec<_>>()
        .join("; "))
}

/// The user frames `/lockprof_test raw` writes from, innermost first, after
/// the kernel frames and their marker.
pub const WRITER_CHAIN: [&str; 4] = ["[kernel]", "lockprof_test_writer", "lockprof_test_loop", "lockprof_test_thread"];

/// A frame's function: `lockprof_test_writer+0x22 (lockprof_test.c:42)`
/// gives `lockprof_test_writer`.
fn function(frame: &str) -> &str {
    let f = frame.split(" (").next().unwrap_or(frame);
    f.split("+0x").next().unwrap_or(f)
}

/// A pipe mutex writer's stack joins the writer's user frames to the
/// kernel's: `[kernel]`, then `lockprof_test_writer`, `lockprof_test_loop`,
/// `lockprof_test_thread`, in a row.
pub fn user_writer_stack(p: &Profile) -> Check {
    let mut writers = Vec::new();
    for l in pipe_mutexes(p) {
        for c in l.callers.iter().filter(|c| c.caller.contains("pipe_write")) {
            let names: Vec<&str> = c.stack.iter().map(|f| function(f)).collect();
            if names.windows(WRITER_CHAIN.len()).any(|w| w == WRITER_CHAIN) {
                let at = names.iter().position(|n| *n == WRITER_CHAIN[0]).unwrap_or(0);
                return Ok(format!(
                    "{} waits from {} -> {}",
                    c.wait.count(),
                    c.caller,
                    c.stack[at + 1..(at + WRITER_CHAIN.len()).min(c.stack.len())].join(" <- ")
                ));
            }
            writers.push(c.stack.to_vec());
        }
    }
    if writers.is_empty() {
        return Err(format!("no pipe mutex writer among {:?}", classes(p)));
    }
    writers.truncate(2);
    Err(format!("no writer stack has {WRITER_CHAIN:?} in a row; writer stacks: {writers:?}"))
}
