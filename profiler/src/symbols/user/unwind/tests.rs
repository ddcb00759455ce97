//! The unwinder on this very test process's own stack, unwound from its
//! `.eh_frame` (the root tests unwind programs built without frame
//! pointers: `tests/live_user_stacks.rs`).

use super::*;
use profiler_common::{PLAN_USES_FP, ROOT_LR, USER_STACK_COPY_WORDS, UserRegs};

/// The registers and top of the stack at the call site inside this function
/// (the ip is the instruction after the register reads).
#[inline(never)]
fn capture() -> (UserRegs, Vec<u64>) {
    let (ip, sp, fp, lr): (u64, u64, u64, u64);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads registers only.
    unsafe {
        std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {fp}, rbp", ip = out(reg) ip, sp = out(reg) sp, fp = out(reg) fp, options(nostack, nomem));
        lr = 0;
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads registers only.
    unsafe {
        std::arch::asm!("adr {ip}, .", "mov {sp}, sp", "mov {fp}, x29", "mov {lr}, x30", ip = out(reg) ip, sp = out(reg) sp, fp = out(reg) fp, lr = out(reg) lr, options(nostack, nomem));
    }
    // The stack from sp up to the end of its mapping, at most a copy's worth.
    let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
    let end = maps
        .lines()
        .filter_map(|l| {
            let (s, e) = l.split_whitespace().next()?.split_once('-')?;
            Some(u64::from_str_radix(s, 16).ok()?..u64::from_str_radix(e, 16).ok()?)
        })
        .find(|r| r.contains(&sp))
        .expect("sp is mapped")
        .end;
    let words = (((end - sp) / 8) as usize).min(USER_STACK_COPY_WORDS);
    // SAFETY: [sp, sp + 8 * words) lies inside this thread's mapped stack,
    // below its end; the frames read are those of callers still running.
    let stack = unsafe { std::slice::from_raw_parts(sp as *const u64, words) }.to_vec();
    (UserRegs { ip, sp, fp, lr }, stack)
}

#[inline(never)]
fn outer_caller() -> (UserRegs, Vec<u64>) {
    std::hint::black_box(capture())
}

fn own_process() -> Process {
    let mut binaries = Binaries::default();
    let modules = binaries.modules(std::process::id()).expect("own modules");
    process_of(&modules)
}

/// The function containing `addr` in this binary is `f`: its address
/// range is [f, next symbol) and callers' return addresses are inside it.
fn within(addr: u64, f: fn() -> (UserRegs, Vec<u64>)) -> bool {
    let start = f as usize as u64;
    addr > start && addr < start + 4096
}

#[test]
fn a_frameless_rust_stack_unwinds_through_its_callers() {
    let (regs, stack) = outer_caller();
    let p = own_process();
    let mut cache = NativeCache::new();
    let w = walk::walk(&p.unwinder, &mut cache, &Copy { regs, words: &stack });
    assert!(w.frames.len() >= 3, "{w:x?}");
    assert_eq!(w.frames[0], regs.ip);
    assert!(within(w.frames[1], outer_caller), "capture's caller: {:x?}", w.frames);
    assert!(w.frames.iter().all(|f| p.code.iter().any(|r| r.contains(f))), "every frame in mapped code");
    assert!(matches!(w.end, End::Complete | End::CopyShort | End::Deep), "{:?}", w.end);
    assert!(!w.ra_slots.is_empty(), "return addresses read from the copy");
}

#[test]
fn the_plan_names_the_words_that_decide_the_stack() {
    let (regs, stack) = outer_caller();
    let p = own_process();
    let mut cache = NativeCache::new();
    let c = Copy { regs, words: &stack };
    let w = walk::walk(&p.unwinder, &mut cache, &c);
    let (slots, flags) = walk::plan(&p.unwinder, &mut cache, &c, &w);
    assert!(!slots.is_empty());
    // Changing a planned word changes the stack; the others do not.
    let first = w.ra_slots[0] as usize;
    assert!(slots.contains(&w.ra_slots[0]));
    let mut changed = stack.clone();
    changed[first] = 0x10;
    let w2 = walk::walk(&p.unwinder, &mut cache, &Copy { regs, words: &changed });
    assert_ne!(w2.frames, w.frames, "slot {first} holds a return address");
    if flags & PLAN_USES_FP == 0 {
        let mut other = stack.clone();
        for (i, word) in other.iter_mut().enumerate() {
            if !slots.contains(&(i as u16)) {
                *word ^= 0x0101_0101;
            }
        }
        let w3 = walk::walk(&p.unwinder, &mut cache, &Copy { regs: UserRegs { fp: 1, ..regs }, words: &other });
        assert_eq!(w3.frames, w.frames, "only the planned words decide it");
    }
}

#[test]
fn plans_widen_until_they_are_full() {
    let a = union(&UnwindPlan::EMPTY, &[5, 1], 0).expect("fits");
    assert_eq!(a.slots(), &[1, 5]);
    let b = union(&a, &[3, 5], PLAN_USES_FP).expect("fits");
    assert_eq!((b.slots(), b.flags), (&[1, 3, 5][..], PLAN_USES_FP));
    let many: Vec<u16> = (0..UNWIND_PLAN_SLOTS as u16 + 1).collect();
    assert!(union(&UnwindPlan::EMPTY, &many, 0).is_none());
    assert!(union(&UnwindPlan::EMPTY, &[USER_STACK_COPY_WORDS as u16], 0).is_none());
}

#[derive(Default)]
struct Sink {
    roots: Vec<(UnwindPlanKey, u32)>,
    plans: Vec<(UnwindPlanKey, UnwindPlan)>,
    stacks: Vec<(StackId, StoredUserStack)>,
}

impl UnwindSink for Arc<Mutex<Sink>> {
    fn set_root(&mut self, key: UnwindPlanKey, root: u32) -> bool {
        self.lock().expect("lock").roots.push((key, root));
        true
    }
    fn set_plan(&mut self, key: UnwindPlanKey, plan: &UnwindPlan) -> bool {
        self.lock().expect("lock").plans.push((key, *plan));
        true
    }
    fn set_stack(&mut self, id: StackId, stack: &StoredUserStack) -> bool {
        self.lock().expect("lock").stacks.push((id, *stack));
        true
    }
}

fn copy_of(regs: UserRegs, stack: &[u64], plan: UnwindPlan, id: StackId) -> Box<UserStackCopy> {
    let mut c = Box::new(UserStackCopy {
        kind: profiler_common::EVENT_USER_STACK_COPY,
        tgid: std::process::id(),
        id,
        signature: 0,
        regs,
        len: (stack.len() * 8) as u32,
        _pad: 0,
        plan,
        words: [0; USER_STACK_COPY_WORDS],
    });
    c.words[..stack.len()].copy_from_slice(stack);
    c
}

#[test]
fn a_copy_is_kept_under_its_id_and_taught_by_its_signature() {
    let (regs, stack) = outer_caller();
    let sink = Arc::new(Mutex::new(Sink::default()));
    let unwound = Unwound::default();
    let stats = Arc::new(UnwindStats::default());
    let mut w = Worker::new(sink.clone(), unwound.clone(), stats.clone());
    let ids = w.unwind(&copy_of(regs, &stack, UnwindPlan::EMPTY, 77));
    assert_eq!(ids.len(), 2, "its own id and its signature");
    assert_eq!(ids[0], 77);
    let s = sink.lock().expect("lock");
    assert_eq!(s.plans.len(), 1, "a plan for the ip");
    let plan = s.plans[0].1;
    assert_eq!(s.roots.len(), 1, "a root for the ip");
    let (root_key, root) = s.roots[0];
    assert_eq!(root_key, UnwindPlanKey { tgid: std::process::id(), _pad: 0, ip: regs.ip, ra: 0 });
    let ra = match root {
        ROOT_LR => regs.lr,
        slot => stack[slot as usize],
    };
    assert_eq!(s.plans[0].0, UnwindPlanKey { ra, ..root_key }, "the plan is keyed by the first return address");
    let sig = signature(std::process::id(), &regs, &plan, |i| stack.get(i as usize).copied().unwrap_or(0));
    assert_eq!(ids[1], sig, "the programs compute the same signature");
    assert_eq!(s.stacks.len(), 1);
    let t = unwound.lock().expect("lock");
    assert_eq!(t[&77], t[&sig]);
    assert_eq!(s.stacks[0].1.frames(), &t[&77].1[..]);
    let c = stats.snapshot();
    assert_eq!((c.unwound, c.signatures), (1, 1));
    drop((s, t));
    // The same stack again (queued before the programs learned its
    // signature): known, kept under its own id, not unwound again.
    let again = w.unwind(&copy_of(regs, &stack, UnwindPlan::EMPTY, 78));
    assert_eq!(again, vec![78]);
    {
        let t = unwound.lock().expect("lock");
        assert_eq!(t[&78], t[&sig]);
    }
    assert_eq!(stats.known.load(Ordering::Relaxed), 1);
    assert_eq!(stats.snapshot().unwound, 1, "not unwound twice");
    assert_eq!(sink.lock().expect("lock").plans.len(), 1);
    assert_eq!(sink.lock().expect("lock").roots.len(), 1);
    // A process that is gone keeps its innermost frame.
    let mut gone = copy_of(regs, &stack, UnwindPlan::EMPTY, 79);
    gone.tgid = u32::MAX - 1;
    assert_eq!(w.unwind(&gone), vec![79]);
    assert_eq!(unwound.lock().expect("lock")[&79].1, vec![regs.ip]);
    assert_eq!(stats.snapshot().no_process, 1);
}

#[test]
fn unwound_stacks_come_before_the_kernel_map() {
    let unwound = Unwound::default();
    unwound.lock().expect("lock").insert(1, (10, vec![7]));
    let kernel: HashMap<StackId, (u32, Vec<u64>)> = [(1, (10, vec![8])), (2, (10, vec![9]))].into();
    let s = UnwoundOr { unwound, kernel, stats: Arc::default() };
    assert_eq!(s.get(1), Some((10, vec![7])));
    assert_eq!(s.get(2), Some((10, vec![9])));
    assert_eq!(s.get(3), None);
}
