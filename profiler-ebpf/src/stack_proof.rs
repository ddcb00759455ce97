//! Kernel stacks reused without a walk, proven by the kernel stack itself.
//!
//! A walk costs 1.5-2 us, and a storm's waits come through a few call paths:
//! a walked stack is kept in this CPU's stack cache with a proof, the places
//! above the program's context (which sits on the waiting thread's kernel
//! stack) where the walk's return addresses lay, one per frame from the first
//! above the context (past the tracing frames below it) to the proof frame,
//! and a hash of those words. A later wait on the same lock with the same
//! flags that finds the same words at the same places came through the same
//! frames up to the proof frame, whichever thread it is (a forked child's
//! first wait, too), and reuses the stack. Each frame is checked, not one:
//! with a single word, two paths that put one return address at one place
//! (the system call entry's, under `read` and `write` frames of equal total
//! size) passed for each other, and a wait was given the other path's
//! caller. Checked frame by frame, the first frame whose return address
//! differs fails the proof: a return address at its place says which
//! function ran there, and with it where that function's frame and the next
//! return address lie.
//!
//! The proof frame is the walk's frame [`PROOF_FRAME`] (past the tracing
//! frames, the lock's functions, the caller and a few of its callers), or the
//! deepest one below the frames whose place moves from one system call to
//! the next: kernels with `randomize_kstack_offset` put a random gap under
//! the system call entry's frames. Frames above the proof frame are taken as
//! they were walked.
//!
//! Only in the tp_btf wait programs' default build
//! ([`crate::stack::WalkContext::PROVEN_STACKS`]), where the programs can
//! read their stack (`Config::kfuncs` has [`STACK_WORDS`]: `bpf_rdonly_cast`,
//! 6.2+); elsewhere [`crate::stack`] reuses a thread's own last stack when
//! the budget is spent.

use profiler_common::{
    CachedStack, Config, KFUNC_RDONLY_CAST, PROOF_WORDS, STACK_CACHE_SLOTS, STACK_CACHE_WAYS, STACK_CUT, STACK_WORDS,
    StackBudget, StackId, StoredStack, USER_STACK_OFF, counter, is_stack, proof_hash_step, stack_cache_set,
};

use aya_ebpf::{cty::c_void, helpers::bpf_loop};

use crate::{
    context::{config, count},
    maps::{STACK_BUDGET, STACK_CACHE, STACK_SCRATCH},
    owners::{rdonly, rdonly_cast},
    stack::{WalkContext, budget_allows, capture, remember},
};

/// The walk's deepest frame a proof checks.
const PROOF_FRAME: u64 = PROOF_WORDS as u64 - 1;
/// A shallower proof frame proves too little (the tracing frames and the
/// slowpath, not the caller): the stack gets no proof.
const PROOF_MIN_FRAME: u64 = 4;
/// The first frame of a proof, the first whose return address lies above
/// the context, is at most this one (the tracing frames, at most 6, lie
/// below the context or in it): a proof that starts later would leave the
/// lock's functions or the caller unchecked, and gets none.
const PROOF_FIRST_MAX: u32 = 6;
/// Outermost frames whose place on the stack moves between system calls
/// (the random gap `randomize_kstack_offset` puts under them): the entry's
/// frame on x86_64; on arm64 the frames above `invoke_syscall`'s gap
/// (`el0_svc_common`, `do_el0_svc`, `el0_svc`, `el0t_64_sync_handler`,
/// `el0t_64_sync`).
#[cfg(not(bpf_target_arch = "aarch64"))]
const MOVING_TOP_FRAMES: u64 = 1;
#[cfg(bpf_target_arch = "aarch64")]
const MOVING_TOP_FRAMES: u64 = 5;
/// Stack words searched above the context for the proof's return
/// addresses, when a walk is stored (2040 bytes: the tracing frames, the
/// lock's functions and a dozen callers' frames; a place fits a byte).
const PROOF_SEARCH_WORDS: u32 = 255;
/// `StackBudget::proof_next` before the first frame is found.
const NOT_YET: u32 = u32::MAX;

/// The program's context address as a number, where it lies on the
/// waiting thread's kernel stack and the programs can read that stack; 0
/// otherwise.
#[inline(always)]
pub fn anchor<C: WalkContext>(ctx: &C, cfg: &Config) -> u64 {
    if !C::PROVEN_STACKS || cfg.kfuncs & STACK_WORDS == 0 {
        return 0;
    }
    let Some(b) = STACK_BUDGET.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime; programs on one CPU do not nest (the BUSY guard; see
    // `context` for fentry). The store and load are volatile so that the
    // value loaded back is a number to the verifier: a privileged program
    // may store a pointer in a map, not compute with its context.
    unsafe {
        let p = core::ptr::addr_of_mut!((*b).ctx_scratch);
        core::ptr::write_volatile(p, ctx.as_ptr() as u64);
        core::ptr::read_volatile(p)
    }
}

/// The 8-byte word of the kernel stack at `addr` (0 when unreadable).
#[inline(always)]
fn stack_word(cfg: &Config, addr: u64) -> u64 {
    let typed = rdonly(cfg, addr, cfg.layout.btf_task);
    if typed == 0 {
        return 0;
    }
    // SAFETY: a BTF-typed pointer from bpf_rdonly_cast: the verifier turns
    // the load into a fault-safe one. The first 8 bytes of a `task_struct`
    // are `thread_info.flags`, an integer (userspace sets STACK_WORDS only
    // when this kernel's BTF says so), so the load is typed as a number.
    unsafe { core::ptr::read_volatile(typed as *const u64) }
}

/// The word `place` words above the context at `here`, as a proof reads it
/// (0 when unreadable or without `bpf_rdonly_cast`).
#[inline(always)]
fn place_word(cfg: &Config, here: u64, place: u16) -> u64 {
    if cfg.kfuncs & KFUNC_RDONLY_CAST == 0 || cfg.layout.btf_task == 0 {
        return 0;
    }
    read_place(cfg, here, place)
}

/// [`place_word`] for a caller that has checked its conditions (once for
/// all the words of a hash, not once per word).
#[inline(always)]
fn read_place(cfg: &Config, here: u64, place: u16) -> u64 {
    // SAFETY: bpf_rdonly_cast takes any address and returns a pointer the
    // verifier marks untrusted (never null to it): the load below is turned
    // into a fault-safe one, 0 when unreadable. The first 8 bytes of a
    // `task_struct` are an integer (see `stack_word`). The caller checked
    // that the kfunc is bound and the type known.
    unsafe { core::ptr::read_volatile(rdonly_cast()(here + u64::from(place) * 8, cfg.layout.btf_task) as *const u64) }
}

/// The hash of the words at `places` above the context at `here`, from
/// `seed`: always [`PROOF_WORDS`] words, with no branch between them (the
/// begin program checks up to four entries, and a branch per word took it
/// past the verifier's million instructions). A place of 0 is the context's
/// first word, the lock's address, the same for every wait on the lock.
#[inline(always)]
fn words_hash(cfg: &Config, here: u64, seed: u64, places: &[u8; PROOF_WORDS]) -> u64 {
    if cfg.kfuncs & KFUNC_RDONLY_CAST == 0 || cfg.layout.btf_task == 0 {
        return 0;
    }
    let mut h = seed;
    for (i, &w) in places.iter().enumerate() {
        h = proof_hash_step(h, i, read_place(cfg, here, u16::from(w)));
    }
    h
}

/// Whether the words at `c`'s proof places above the context at `here` are
/// the ones its walk found there (false without a proof). One word first
/// (`proof_check`): most entries a wait looks at are its lock's other call
/// paths, and one read turns them away.
#[inline(always)]
fn proven(cfg: &Config, here: u64, c: &CachedStack) -> bool {
    c.proof_hash != 0
        && place_word(cfg, here, c.proof_check_place) as u32 == c.proof_check
        && words_hash(cfg, here, c.lock_addr, &c.proof_words) == c.proof_hash
}

/// The proof of the walk in this CPU's scratch slot, taken for a wait on
/// `lock` whose context lies at `here`: its hash, its check's place and
/// word (see [`CachedStack::proof_check`]), and the search's scratch,
/// which holds its places (see [`CachedStack`]); `None` when the walk is
/// too short or a frame's return address is not found in order.
#[inline(always)]
fn learn(here: u64, lock: u64) -> Option<(u64, (u16, u32), &'static StackBudget)> {
    let buf = STACK_SCRATCH.get_ptr(0)?;
    // SAFETY: this CPU's scratch slot from a successful lookup, valid for
    // the map's lifetime; it holds the walk just stored (programs on one CPU
    // do not nest); only read.
    let nr = unsafe { (*buf).nr };
    // A walk cut at the caller did not reach the system call's entry, so
    // none of its frames is above the random gap: its proof ends at its
    // last frame (the one that would otherwise go unproven in every reuse).
    let moving = if nr & STACK_CUT != 0 { 0 } else { MOVING_TOP_FRAMES };
    let last = u64::from(nr as u32).saturating_sub(1 + moving).min(PROOF_FRAME);
    if last < PROOF_MIN_FRAME {
        return None;
    }
    let scratch = STACK_BUDGET.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot from a successful lookup, valid for the map's
    // lifetime; programs on one CPU do not nest.
    let found = unsafe {
        (*scratch).proof_next = NOT_YET;
        (*scratch).proof_found = 0;
        (*scratch).proof_words = [0; PROOF_WORDS];
        let mut search = Search { here, walk: buf, scratch, last: last as u32, _pad: 0 };
        // SAFETY: `search_step` has the callback signature bpf_loop calls,
        // and `search` lives on this frame for the whole call.
        bpf_loop(
            PROOF_SEARCH_WORDS,
            search_step as *const () as *mut c_void,
            core::ptr::addr_of_mut!(search).cast(),
            0,
        );
        &*scratch
    };
    if found.proof_next != last as u32 + 1 {
        return None;
    }
    // The words just found, read the way a later wait's proof reads them.
    let cfg = config();
    let hash = words_hash(cfg, here, lock, &found.proof_words);
    let place = found.proof_words.get(found.proof_found as usize / 2).map_or(0, |&p| u16::from(p));
    let check = (place, place_word(cfg, here, place) as u32);
    (hash != 0).then_some((hash, check, found))
}

/// The proof search's input, handed to each of its steps by `bpf_loop`;
/// its progress is in this CPU's [`profiler_common::StackBudget`] (map
/// memory, which the verifier does not track: the steps converge).
#[repr(C)]
struct Search {
    /// The context's address.
    here: u64,
    /// The walk (this CPU's scratch slot).
    walk: *const StoredStack,
    /// Where the search keeps its progress.
    scratch: *mut StackBudget,
    /// The walk's last frame to find.
    last: u32,
    _pad: u32,
}

/// One step of the proof search (a `bpf_loop` callback, verified once
/// rather than once per step and per path into it): the stack word `index +
/// 1` words above the context. The first word that is one of the walk's
/// first return addresses starts the proof; from there each frame's return
/// address is searched above the one before. Returns 1 (stop) once the
/// last is found.
#[inline(never)]
unsafe extern "C" fn search_step(index: u64, state: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the `Search` of `learn`'s frame, alive
    // during the loop; its `walk` and `scratch` are this CPU's slots that
    // `learn` looked up.
    let (s, walk, p) = unsafe {
        let s = &*state.cast::<Search>();
        (s, &*s.walk, &mut *s.scratch)
    };
    let at = index as u32 + 1;
    let word = stack_word(config(), s.here + u64::from(at) * 8);
    if word == 0 {
        return 0;
    }
    let mut frame = p.proof_next;
    if frame == NOT_YET {
        let mut j = 0u32;
        while j <= PROOF_FIRST_MAX && j <= s.last {
            if walk.ips.get(j as usize) == Some(&word) {
                break;
            }
            j += 1;
        }
        if j > PROOF_FIRST_MAX || j > s.last {
            return 0;
        }
        frame = j;
    } else if walk.ips.get(frame as usize) != Some(&word) {
        return 0;
    }
    if let Some(w) = p.proof_words.get_mut(p.proof_found as usize) {
        *w = at as u8;
    }
    p.proof_found += 1;
    p.proof_next = frame + 1;
    let last = frame >= s.last;
    i64::from(last)
}

/// The kernel stack for a wait on `lock` with `flags` of thread `tid`
/// (`wait`), whose program's context lies at `here` on its stack, and
/// whether it is cut at the caller. A proven whole stack is reused without
/// a walk or budget (counted in `STACK_PROVEN`). Else: walked whole when
/// the budget allows; else a proven cut stack, or this thread's own stack
/// for the lock and flags, is reused (`STACK_REUSED`); else walked to the
/// caller (`STACKS_CUT`). A walk is stored with its proof in the set's entry
/// it replaces: the one reused, else an empty one, else one at random.
#[inline(always)]
pub fn proven_stack<C: WalkContext>(
    ctx: &C,
    cfg: &Config,
    now: u64,
    wait: (u64, u32, u32),
    here: u64,
) -> (StackId, bool) {
    let (lock, flags, tid) = wait;
    let set = stack_cache_set(lock, flags);
    let mut reuse: Option<(StackId, bool)> = None;
    let mut slot = STACK_CACHE_SLOTS;
    let mut way = 0;
    while way < STACK_CACHE_WAYS {
        if let Some(c) = STACK_CACHE.get_ptr(set + way) {
            // SAFETY: this CPU's cache entry from a successful lookup, valid
            // for the map's lifetime (see `context` for concurrent updates);
            // only read.
            let c = unsafe { &*c };
            if c.lock_addr == lock && c.flags == flags && is_stack(c.stack_id) {
                let proven = proven(cfg, here, c);
                if proven && c.cut == 0 {
                    count(counter::STACK_PROVEN);
                    return (c.stack_id, false);
                }
                // The thread's own entry only while it has no proof: one
                // whose proof just failed came another way, and a walk to the
                // caller names the right one.
                if proven || (reuse.is_none() && c.tid == tid && c.proof_hash == 0) {
                    reuse = Some((c.stack_id, c.cut != 0));
                    slot = set + way;
                }
            } else if slot == STACK_CACHE_SLOTS && c.lock_addr == 0 {
                slot = set + way;
            }
        }
        way += 1;
    }
    let whole = budget_allows(cfg.stacks_per_window, now);
    if !whole {
        if let Some(r) = reuse {
            count(counter::STACK_REUSED);
            return r;
        }
        count(counter::STACKS_CUT);
    }
    let id = capture(ctx, !whole, true);
    let proof = if is_stack(id) { learn(here, lock) } else { None };
    if slot == STACK_CACHE_SLOTS {
        slot = set + ((now >> 8) as u32 & (STACK_CACHE_WAYS - 1));
    }
    if let Some(c) = STACK_CACHE.get_ptr_mut(slot) {
        // SAFETY: as above.
        unsafe {
            remember(c, (lock, flags, tid), (id, USER_STACK_OFF), !whole, proof.map_or(0, |p| p.0));
            if let Some((_, check, p)) = proof {
                (*c).proof_words = p.proof_words;
                (*c).proof_check_place = check.0;
                (*c).proof_check = check.1;
            }
        }
    }
    (id, !whole)
}
