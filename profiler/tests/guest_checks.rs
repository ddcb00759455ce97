//! Unit tests (no root, no guest) of the checks the guest test binary runs:
//! each must be able to fail for the reason it names.

#[path = "guest/checks.rs"]
mod checks;
#[path = "guest/ftrace.rs"]
#[expect(dead_code, reason = "the tracer runs in the guest only; its output's parser is tested here")]
mod ftrace;
#[path = "guest/until.rs"]
mod until;
#[path = "guest/yields.rs"]
mod yields;

use lockprof::model::{
    CallerProfile, CgroupLock, CgroupProfile, CgroupShare, DETAIL_SIGFIG, LOCK_SIGFIG, LockProfile, Meta, NameSource,
    Profile, Stats, YieldCaller, YieldPair, YieldProfile, YieldStats,
};
use profiler_common::{LockMode, LockType};

fn stats(sigfig: u8, values: &[u64]) -> Stats {
    let mut s = Stats::new(sigfig);
    values.iter().for_each(|v| s.record(*v));
    s
}

fn lock(name: Option<&str>, ty: LockType, mode: LockMode, caller: &str) -> LockProfile {
    LockProfile {
        addr: 0xffff_8880_0000_1000,
        lock_type: ty,
        mode,
        pid: None,
        process: None,
        name: name.map(str::to_string),
        name_source: name.map(|_| NameSource::Inferred),
        class: format!("{} @ {caller}", lockprof::model::type_name(ty)),
        rt_base: None,
        slab: None,
        field: None,
        addresses: None,
        processes: None,
        owners: Vec::new(),
        wait: stats(LOCK_SIGFIG, &[1_000, 2_000]),
        hold: None,
        callers: vec![CallerProfile {
            caller: format!("{caller}+0x10"),
            stack: vec!["__mutex_lock+0x5".into(), format!("{caller}+0x10"), "vfs_write+0x20".into()].into(),
            wait: stats(DETAIL_SIGFIG, &[1_000, 2_000]),
            hold: None,
            cgroups: Vec::new(),
            user_caller: None,
            user: None,
        }]
        .into(),
    }
}

fn profile(locks: Vec<LockProfile>) -> Profile {
    Profile { locks, ..Profile::default() }
}

#[test]
fn mmap_lock_check_wants_the_name_not_any_rwsem() {
    let p = profile(vec![lock(None, LockType::Rwsem, LockMode::Read, "do_exit")]);
    let e = checks::mmap_lock(&p).expect_err("an unnamed rwsem is not mmap_lock");
    assert!(e.contains("no lock named mmap_lock"), "{e}");
    let p = profile(vec![lock(Some("mmap_lock"), LockType::Rwsem, LockMode::Read, "lock_mm_and_find_vma")]);
    assert!(checks::mmap_lock(&p).is_ok());
}

#[test]
fn hold_check_fails_when_holds_did_not_attach() {
    let mut p = profile(vec![lock(None, LockType::Mutex, LockMode::Exclusive, "anon_pipe_write")]);
    p.meta = Meta { hold_unavailable: Some("release functions cannot be probed".into()), ..Meta::default() };
    let l = checks::pipe_mutex(&p).expect("pipe mutex");
    let e = checks::holds(&p, l, 2.0).expect_err("no hold backend is a failure, not a pass");
    assert!(e.contains("no hold backend attached: release functions cannot be probed"), "{e}");
    p.meta.hold_backend = Some("fentry".into());
    let l = checks::pipe_mutex(&p).expect("pipe mutex");
    assert!(checks::holds(&p, l, 2.0).expect_err("no holds recorded").contains("no hold recorded"));
    let mut p2 = p.clone();
    p2.locks[0].hold = Some(stats(LOCK_SIGFIG, &[500]));
    std::sync::Arc::make_mut(&mut p2.locks[0].callers)[0].hold = Some(stats(DETAIL_SIGFIG, &[500]));
    let l = checks::pipe_mutex(&p2).expect("pipe mutex");
    assert!(checks::holds(&p2, l, 2.0).expect_err("1 hold for 2 waits").contains("only 1 holds for 2"));
    p2.locks[0].hold = Some(stats(LOCK_SIGFIG, &[500, 700]));
    let l = checks::pipe_mutex(&p2).expect("pipe mutex");
    assert!(checks::holds(&p2, l, 2.0).is_ok());
}

#[test]
fn pipe_check_refuses_stacks_through_the_kretprobe_trampoline() {
    let mut p = profile(vec![lock(None, LockType::Mutex, LockMode::Exclusive, "anon_pipe_write")]);
    assert!(checks::pipe_waits(&p).is_ok());
    let mut stack = p.locks[0].callers[0].stack.to_vec();
    stack.insert(1, "kretprobe_trampoline+0x0".into());
    std::sync::Arc::make_mut(&mut p.locks[0].callers)[0].stack = stack.into();
    assert!(checks::pipe_waits(&p).expect_err("trampoline").contains("kretprobe trampoline"));
    let p = profile(vec![lock(None, LockType::Mutex, LockMode::Exclusive, "kretprobe_trampoline")]);
    assert!(checks::pipe_waits(&p).expect_err("no pipe caller").contains("no pipe mutex"));
}

#[test]
fn tasklist_check_wants_kallsyms_naming_when_kallsyms_has_it() {
    let p = profile(vec![lock(Some("tasklist_lock"), LockType::Rwlock, LockMode::Write, "copy_process")]);
    assert!(checks::tasklist_waits(&p, false).is_ok());
    let e = checks::tasklist_waits(&p, true).expect_err("inferred although kallsyms has it");
    assert!(e.contains("not from kallsyms"), "{e}");
    let p = profile(vec![lock(Some("tasklist_lock"), LockType::Rwlock, LockMode::Write, "some_driver")]);
    assert!(checks::tasklist_waits(&p, false).expect_err("callers").contains("unexpected callers"));
}

fn vmm(attempted: Option<u64>) -> yields::VmmReport {
    let line = format!(
        "noise\nYIELD-VMM {{\"hypercalls\":4,\"attempted\":{},\"successful\":{},\"rt_phase\":1,\"pid\":300,\"yielder_tid\":301,\"target_tid\":302,\"elapsed_ms\":5}}\n",
        attempted.map_or("null".into(), |a| a.to_string()),
        attempted.map_or("null".into(), |_| "3".to_string()),
    );
    yields::parse_vmm(&line).expect("parse")
}

fn yield_profile(outcomes: &[i32], path: &str) -> Profile {
    let mut s = YieldStats::default();
    outcomes.iter().for_each(|r| s.record(*r, 1_000));
    let mut p = Profile::default();
    p.meta.yield_backend = Some("fentry".into());
    p.yield_to = Some(YieldProfile {
        total: s.clone(),
        callers: vec![YieldCaller {
            caller: "kvm_vcpu_yield_to+0x5f [kvm]".into(),
            path: path.into(),
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

const KVM_PATH: &str = "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall";

#[test]
fn yield_checks_fail_with_the_numbers() {
    let ok = yield_profile(&[1, 1, 1, 0], KVM_PATH);
    assert!(yields::compare_calls(&ok, &vmm(Some(4)), 4, "fentry").is_ok());
    assert!(yields::compare_outcomes(&ok, &vmm(Some(4)), 4).expect("compare").is_some());
    let e = yields::compare_calls(&yield_profile(&[1, 1, 1], KVM_PATH), &vmm(Some(4)), 4, "fentry").expect_err("lost");
    assert!(e.contains("saw 3 yield_to calls") && e.contains("the kernel made 4"), "{e}");
    let e = yields::compare_calls(&ok, &vmm(Some(4)), 3, "fentry").expect_err("more than traced");
    assert!(e.contains("saw 4 yield_to calls") && e.contains("the kernel made 3"), "{e}");
    let e = yields::compare_outcomes(&yield_profile(&[1, 1, 1, 1], KVM_PATH), &vmm(Some(4)), 4).expect_err("split");
    assert!(e.contains("4 yielded / 0 not (0 skipped by the kernel); KVM: 3 successful / 1 not"), "{e}");
    assert!(yields::compare_calls(&ok, &vmm(Some(4)), 4, "kprobe").expect_err("backend").contains("wanted kprobe"));
    let spin = yield_profile(&[1, 1, 1, 0], "kvm_vcpu_yield_to <- kvm_vcpu_on_spin");
    let e = yields::compare_calls(&spin, &vmm(Some(4)), 4, "fentry");
    assert!(e.expect_err("path").contains("not resolved to KVM"));
    // 5.10 leaves no kvm_sched_yield frame: the path goes straight to kvm_emulate_hypercall there.
    let inlined = yield_profile(&[1, 1, 1, 0], "kvm_vcpu_yield_to <- kvm_emulate_hypercall <- kvm_arch_vcpu_ioctl_run");
    assert!(yields::compare_calls(&inlined, &vmm(Some(4)), 4, "fentry").is_ok());
    let mut off = ok.clone();
    off.meta.yield_backend = None;
    off.meta.yield_unavailable = Some("no kprobe PMU".into());
    assert!(yields::compare_calls(&off, &vmm(Some(4)), 4, "fentry").expect_err("not probed").contains("no kprobe PMU"));
    assert!(yields::parse_vmm("nothing").is_err());
    for traced in [0, 5] {
        let e = yields::compare_calls(&ok, &vmm(Some(4)), traced, "fentry").expect_err("harness");
        assert!(e.starts_with("harness:"), "{e}");
    }
}

#[test]
fn yield_calls_the_kernel_skipped_are_accounted_not_excused() {
    // KVM made yield_to calls for 3 of the 4 hypercalls (the target was not
    // preempted for one): lockprof must match the 3, not the 4.
    let three = yield_profile(&[1, 1, 0], KVM_PATH);
    assert!(yields::compare_calls(&three, &vmm(Some(4)), 3, "fentry").is_ok());
    let split = yields::compare_outcomes(&three, &vmm(Some(4)), 3);
    assert!(split.expect_err("KVM: 3 successful").contains("2 yielded / 1 not"), "exact without skips");
    let exact = yield_profile(&[1, 1, 1], KVM_PATH);
    assert!(yields::compare_outcomes(&exact, &vmm(Some(4)), 3).expect("split").is_some());
    // One kprobe run skipped by the kernel and counted: 3 seen of 4 traced is whole.
    let mut skipped = yield_profile(&[1, 1, 0], KVM_PATH);
    skipped.meta.drops.losses.yield_skipped = 1;
    assert!(yields::compare_calls(&skipped, &vmm(Some(4)), 4, "fentry").is_ok());
    assert!(yields::compare_outcomes(&skipped, &vmm(Some(4)), 4).expect("within the skipped run").is_some());
    // Two missing but only one counted: a loss lockprof did not account for.
    let e = yields::compare_calls(&yield_profile(&[1, 1], KVM_PATH), &vmm(Some(4)), 4, "fentry");
    assert!(e.expect_err("unaccounted").contains("counted 0 probe runs the kernel skipped"));
}

#[test]
fn function_tracer_calls_are_counted_per_thread() {
    let text = "# tracer: function\n#\n# entries-in-buffer/entries-written: 3/3   #P:4\n#\n\
        #           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
        yield_vmm-152     [000] d..2.   123.456789: yield_to <-kvm_vcpu_yield_to\n\
        yield_vmm-152     [000] d..2.   123.456800: yield_to <-kvm_vcpu_yield_to\n\
        my-vmm thread-9     [001] d..2.   123.456900: yield_to <-kvm_vcpu_yield_to\n\
        other-7     [001] d..2.   123.457000: kvm_vcpu_yield_to <-kvm_sched_yield\n";
    let c = ftrace::count_calls(text, "yield_to").expect("counts");
    assert_eq!((c[&152], c[&9], c.len()), (2, 1, 2));
    let short = text.replace("3/3", "2/3");
    assert!(ftrace::count_calls(&short, "yield_to").expect_err("overrun").contains("kept 2 of 3"));
}

#[test]
fn kernels_without_kvm_statistics_compare_calls_only() {
    let ok = yield_profile(&[1, 1, 1, 0], KVM_PATH);
    assert!(yields::compare_calls(&ok, &vmm(None), 4, "fentry").is_ok());
    assert_eq!(yields::compare_outcomes(&ok, &vmm(None), 4), Ok(None), "nothing to compare with");
}

#[test]
fn fork_check_takes_either_side_of_tasklist_lock_but_wants_the_name() {
    let p = profile(vec![lock(Some("tasklist_lock"), LockType::Rwlock, LockMode::Read, "__do_wait")]);
    assert!(checks::tasklist_fork_waits(&p, false).is_ok(), "readers in wait contend on newer kernels");
    assert!(checks::tasklist_waits(&p, false).is_err(), "setpgid's check wants the write side");
    let p = profile(vec![lock(None, LockType::Rwlock, LockMode::Write, "copy_process")]);
    assert!(checks::tasklist_fork_waits(&p, false).expect_err("unnamed").contains("tasklist_lock not found"));
}

#[test]
fn pipe_check_takes_an_rt_mutex_that_is_a_mutex() {
    let mut l = lock(None, LockType::RtMutex, LockMode::Exclusive, "anon_pipe_write");
    assert!(
        checks::pipe_mutex(&profile(vec![l.clone()])).is_err(),
        "an rt-mutex of unknown kind is not the pipe mutex"
    );
    l.rt_base = Some("mutex".into());
    assert!(checks::pipe_mutex(&profile(vec![l])).is_ok());
}

#[test]
fn identity_check_wants_the_slab_when_the_kernel_can_say_and_the_reason_when_not() {
    let mut pipe = lock(None, LockType::Mutex, LockMode::Exclusive, "anon_pipe_write");
    let kernel_has_kfunc = true;
    assert!(
        checks::pipe_identity(&profile(vec![pipe.clone()]), kernel_has_kfunc).expect_err("no slab").contains("no slab")
    );
    let no_note = checks::pipe_identity(&profile(vec![pipe.clone()]), false).expect_err("no reason given");
    assert!(no_note.contains("no note"), "{no_note}");
    let mut p = profile(vec![pipe.clone()]);
    p.meta.notes.push("lock naming: slab caches: the kernel has no bpf_get_kmem_cache kfunc (6.13+)".into());
    assert!(checks::pipe_identity(&p, false).is_ok());
    pipe.slab = Some("kmalloc-cg-192".into());
    pipe.name = Some("&kmalloc-cg-192".into());
    pipe.name_source = Some(NameSource::Btf);
    pipe.class = "mutex @ anon_pipe_write in &kmalloc-cg-192".into();
    assert!(checks::pipe_identity(&profile(vec![pipe.clone()]), kernel_has_kfunc).is_ok());
    let mut other_row = pipe.clone();
    other_row.mode = LockMode::Read;
    other_row.name = Some("mmap_lock".into());
    let two = checks::pipe_identity(&profile(vec![pipe, other_row]), kernel_has_kfunc).expect_err("two names");
    assert!(two.contains("two names"), "{two}");
}

#[test]
fn blame_checks_want_sums_that_add_up_and_a_writer_path() {
    use lockprof::model::{OwnerKind, OwnerProfile};
    let owner = |kind, caller: &str, waits, ns| OwnerProfile {
        kind,
        tid: 9,
        pid: 9,
        comm: "w".into(),
        caller: caller.into(),
        stack: vec![format!("{caller}+0x10")],
        asleep_stack: Vec::new(),
        waits,
        wait_caused_ns: ns,
        wait_caused_max_ns: ns / waits, // within the lock's longest wait (2 us)
    };
    let mut mm = lock(Some("mmap_lock"), LockType::Rwsem, LockMode::Read, "lock_mm_and_find_vma");
    mm.owners = vec![
        owner(OwnerKind::Task, "vm_mmap_pgoff+0x5", 1, 1_000),
        owner(OwnerKind::Unknown, "[owner unknown]", 1, 2_000),
    ];
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).is_ok());
    mm.owners[0].waits = 3;
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).expect_err("sums").contains("more than the lock has"));
    mm.owners[0].waits = 1;
    mm.owners[0].wait_caused_max_ns = 2_001;
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).expect_err("max").contains("longer than the lock's"));
    mm.owners = vec![owner(OwnerKind::Unknown, "[owner unknown]", 2, 3_000)];
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).expect_err("unknown").contains("no mmap_lock wait blamed"));
    mm.owners = vec![owner(OwnerKind::Readers, "[acquired without a wait lockprof saw]", 2, 3_000)];
    mm.owners[0].stack.clear();
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).is_ok(), "readers are a known owner");
    mm.owners = vec![owner(OwnerKind::Task, "do_mremap+0x15c", 2, 3_000)];
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).is_ok(), "mremap (musl's realloc) writes mmap_lock");
    mm.owners = vec![owner(OwnerKind::Task, "collapse_huge_page+0x34b", 2, 3_000)];
    assert!(checks::mmap_blame(&profile(vec![mm.clone()])).is_ok(), "khugepaged writes mmap_lock");
    mm.owners = vec![owner(OwnerKind::Task, "pipe_write+0x5", 2, 3_000)];
    let elsewhere = checks::mmap_blame(&profile(vec![mm])).expect_err("not a writer path");
    assert!(elsewhere.contains("took it elsewhere"), "{elsewhere}");
    let mut tl = lock(Some("tasklist_lock"), LockType::Rwlock, LockMode::Write, "copy_process");
    tl.owners = vec![owner(OwnerKind::Task, "__do_sys_setpgid+0x40", 2, 3_000)];
    assert!(checks::tasklist_blame(&profile(vec![tl]), false).is_ok());
}

#[test]
fn checks_drive_their_workload_until_the_budget_is_spent_then_get_the_floor() {
    use std::time::Duration;
    assert_eq!(until::patience(Duration::ZERO), until::PATIENCE);
    assert_eq!(until::patience(until::BUDGET - Duration::from_secs(10)), Duration::from_secs(10));
    assert_eq!(until::patience(until::BUDGET - Duration::from_secs(1)), until::FLOOR);
    assert_eq!(until::patience(until::BUDGET * 2), until::FLOOR);
}

/// A pipe mutex at `addr` with `waits` waits, all from a writer in cgroup `cg`.
fn pipe_lock(addr: u64, waits: u64, cg: u64) -> LockProfile {
    let mut l = lock(None, LockType::Mutex, LockMode::Exclusive, "anon_pipe_write");
    l.addr = addr;
    l.wait = stats(LOCK_SIGFIG, &vec![1_000; waits as usize]);
    let c = &mut std::sync::Arc::make_mut(&mut l.callers)[0];
    c.wait = stats(DETAIL_SIGFIG, &vec![1_000; waits as usize]);
    c.cgroups = vec![CgroupShare { id: cg, count: waits, wait_ns: waits * 1_000, max_ns: 1_000 }];
    l
}

/// A cgroup row with `count` waits on the mutex at `addr`.
fn cgroup_row(id: u64, path: &str, addr: u64, count: u64) -> CgroupProfile {
    CgroupProfile {
        id,
        name: path.into(),
        path: Some(path.into()),
        wait: stats(LOCK_SIGFIG, &vec![1_000; count as usize]),
        locks: vec![CgroupLock {
            lock: "pipe".into(),
            addr,
            lock_type: LockType::Mutex,
            mode: LockMode::Exclusive,
            pid: None,
            count,
            wait_ns: count * 1_000,
            max_ns: 1_000,
            caller: "anon_pipe_write+0x43".into(),
            user_caller: None,
        }],
    }
}

fn task(tid: u32, tgid: u32) -> lockprof::model::TaskProfile {
    lockprof::model::TaskProfile { tid, tgid, comm: "lockprof_test".into(), wait: stats(LOCK_SIGFIG, &[1_000]) }
}

#[test]
fn cgroup_filter_check_refuses_other_cgroups_and_the_outside_storm() {
    let mut p = profile(vec![pipe_lock(0x10, 50, 7)]);
    p.cgroups = vec![cgroup_row(7, "/in", 0x10, 50)];
    p.tasks = vec![task(101, 100)];
    assert!(checks::cgroup_filtered(&p, 7, 100, 200).is_ok());
    assert!(checks::cgroup_filtered(&p, 7, 100, 101).is_ok(), "the outside pid is a tgid, not a tid");
    let mut outside = p.clone();
    outside.tasks.push(task(201, 200));
    assert!(checks::cgroup_filtered(&outside, 7, 100, 200).expect_err("outside").contains("outside the cgroup"));
    let mut stray = p.clone();
    stray.cgroups.push(cgroup_row(8, "/out", 0x20, 3));
    assert!(checks::cgroup_filtered(&stray, 7, 100, 200).expect_err("stray").contains("other cgroups"));
    let mut share = p.clone();
    std::sync::Arc::make_mut(&mut share.locks[0].callers)[0].cgroups[0].id = 8;
    assert!(checks::cgroup_filtered(&share, 7, 100, 200).expect_err("share").contains("attributed to cgroup 8"));
    let few = Profile { locks: vec![pipe_lock(0x10, 3, 7)], ..p.clone() };
    assert!(checks::cgroup_filtered(&few, 7, 100, 200).expect_err("few").contains("3 pipe mutex waits"));
    let none = Profile { cgroups: Vec::new(), ..p };
    assert!(checks::cgroup_filtered(&none, 7, 100, 200).expect_err("no rows").contains("no cgroup rows"));
}

#[test]
fn cgroup_attribution_check_wants_each_storms_pipe_in_its_own_cgroup() {
    let mut p = profile(vec![pipe_lock(0x10, 50, 7), pipe_lock(0x20, 40, 8)]);
    p.cgroups = vec![cgroup_row(7, "/in", 0x10, 50), cgroup_row(8, "/out", 0x20, 40)];
    assert!(checks::cgroup_attributed(&p, (7, "/in"), (8, "/out")).is_ok());
    let mut half = p.clone();
    half.cgroups[0].locks[0].count = 30;
    let e = checks::cgroup_attributed(&half, (7, "/in"), (8, "/out")).expect_err("30 of 50");
    assert!(e.contains("has 30 of the 50 waits"), "{e}");
    let mut shared = p.clone();
    shared.cgroups[1].locks[0].addr = 0x10;
    shared.cgroups[1].locks[0].count = 50;
    let e = checks::cgroup_attributed(&shared, (7, "/in"), (8, "/out")).expect_err("one pipe");
    assert!(e.contains("share no pipe"), "{e}");
    let e = checks::cgroup_attributed(&p, (7, "/in"), (9, "/other")).expect_err("no row");
    assert!(e.contains("no row for cgroup 9"), "{e}");
    let e = checks::cgroup_attributed(&p, (7, "/elsewhere"), (8, "/out")).expect_err("path");
    assert!(e.contains("not /elsewhere"), "{e}");
    let mut not_pipe = p;
    not_pipe.locks[0] = lock(None, LockType::Mutex, LockMode::Exclusive, "do_exit");
    let e = checks::cgroup_attributed(&not_pipe, (7, "/in"), (8, "/out")).expect_err("not a pipe");
    assert!(e.contains("not a pipe mutex"), "{e}");
}

#[test]
fn user_stack_check_wants_the_writer_chain_right_after_the_kernel_marker() {
    let with = |user: &[&str]| {
        let mut p = profile(vec![pipe_lock(0x10, 50, 7)]);
        let c = &mut std::sync::Arc::make_mut(&mut p.locks[0].callers)[0];
        let mut stack = c.stack.to_vec();
        stack.extend(user.iter().map(|f| f.to_string()));
        c.stack = stack.into();
        p
    };
    let good = with(&[
        "[kernel]",
        "lockprof_test_writer+0x22 (lockprof_test.c:42)",
        "lockprof_test_loop+0x15 (lockprof_test.c:53)",
        "lockprof_test_thread+0x9",
        "start_thread+0x305",
    ]);
    let seen = checks::user_writer_stack(&good).expect("the chain");
    assert!(seen.contains("lockprof_test_writer+0x22 (lockprof_test.c:42) <- lockprof_test_loop"), "{seen}");
    let skipped = with(&["[kernel]", "lockprof_test_loop+0x15", "lockprof_test_thread+0x9"]);
    assert!(checks::user_writer_stack(&skipped).expect_err("writer skipped").contains("in a row"));
    let no_marker = with(&["lockprof_test_writer+0x22", "lockprof_test_loop+0x15", "lockprof_test_thread+0x9"]);
    assert!(checks::user_writer_stack(&no_marker).is_err());
    let no_pipe = profile(vec![lock(None, LockType::Mutex, LockMode::Exclusive, "do_exit")]);
    assert!(checks::user_writer_stack(&no_pipe).expect_err("no writer").contains("no pipe mutex writer"));
}
