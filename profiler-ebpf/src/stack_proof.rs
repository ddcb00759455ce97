//! Kernel stacks reused without a walk, proven by the kernel stack itself.
//!
//! A walk costs 1.5-2 us, and a storm's waits come through a few call paths:
//! a walked stack is kept in this CPU's stack cache with a proof, one of its
//! return addresses and where that lay above the program's context (which
//! sits on the waiting thread's kernel stack). A later wait on the same lock
//! with the same flags that finds the same return address at the same place
//! came through the same frames up to that one, whichever thread it is (a
//! forked child's first wait, too), and reuses the stack. The proof frame is
//! the walk's frame [`PROOF_FRAME`] (past the tracing frames, the lock's
//! functions and the caller), or the deepest one below the frames whose
//! place moves from one system call to the next: kernels with
//! `randomize_kstack_offset` put a random gap under the system call entry's
//! frames. Frames above the proof frame are taken as they were walked.
//!
//! Only in the tp_btf wait programs' default build
//! ([`crate::stack::WalkContext::PROVEN_STACKS`]), where the programs can
//! read their stack (`Config::kfuncs` has [`STACK_WORDS`]: `bpf_rdonly_cast`,
//! 6.2+); elsewhere [`crate::stack`] reuses a thread's own last stack when
//! the budget is spent.

use profiler_common::{
    CALLER_DEPTH, CachedStack, Config, STACK_CACHE_SLOTS, STACK_CACHE_WAYS, STACK_CUT, STACK_WORDS, StackId,
    USER_STACK_OFF, counter, is_stack, stack_cache_set,
};

use aya_ebpf::{cty::c_void, helpers::bpf_loop};

use crate::{
    context::{config, count},
    maps::{STACK_BUDGET, STACK_CACHE, STACK_SCRATCH},
    owners::rdonly,
    stack::{WalkContext, budget_allows, capture},
};

/// The walk's frame whose return address proves a cached stack: the last
/// frame of a walk cut at the caller.
const PROOF_FRAME: u64 = CALLER_DEPTH as u64 - 1;
/// A shallower proof frame proves too little (the tracing frames and the
/// slowpath, not the caller): the stack gets no proof.
const PROOF_MIN_FRAME: u64 = 4;
/// Outermost frames whose place on the stack moves between system calls
/// (the random gap `randomize_kstack_offset` puts under them): the entry's
/// frame on x86_64; on arm64 the frames above `invoke_syscall`'s gap
/// (`el0_svc_common`, `do_el0_svc`, `el0_svc`, `el0t_64_sync_handler`,
/// `el0t_64_sync`).
#[cfg(not(bpf_target_arch = "aarch64"))]
const MOVING_TOP_FRAMES: u64 = 1;
#[cfg(bpf_target_arch = "aarch64")]
const MOVING_TOP_FRAMES: u64 = 5;
/// Stack words searched above the context for the proof frame's return
/// address, when a walk is stored (2 KiB: the tracing frames, the lock's
/// functions and a dozen callers' frames).
const PROOF_SEARCH_WORDS: u32 = 256;

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

/// The proof of the walk in this CPU's scratch slot, taken for a context at
/// `here` (the search reads the configuration itself: `bpf_loop` hands its
/// steps one pointer): where above `here` its proof frame's return address lies, and
/// that address; (0, 0) when the walk is too short or the address is not
/// found.
#[inline(always)]
fn learn(here: u64) -> (u32, u64) {
    let Some(buf) = STACK_SCRATCH.get_ptr(0) else {
        return (0, 0);
    };
    // SAFETY: this CPU's scratch slot from a successful lookup, valid for
    // the map's lifetime; it holds the walk just stored (programs on one CPU
    // do not nest); only read.
    let buf = unsafe { &*buf };
    let nr = u64::from(buf.nr as u32);
    // A walk cut at the caller did not reach the system call's entry, so
    // none of its frames is above the random gap: its proof is its last
    // frame (the one that would otherwise go unproven in every reuse).
    let moving = if buf.nr & STACK_CUT != 0 { 0 } else { MOVING_TOP_FRAMES };
    let frame = nr.saturating_sub(1 + moving).min(PROOF_FRAME);
    if frame < PROOF_MIN_FRAME {
        return (0, 0);
    }
    let Some(&ret) = buf.ips.get(frame as usize) else {
        return (0, 0);
    };
    if ret == 0 {
        return (0, 0);
    }
    let mut search = Search { here, ret, found: 0, _pad: 0 };
    // SAFETY: `search_step` has the callback signature bpf_loop calls, and
    // `search` lives on this frame for the whole call.
    unsafe {
        bpf_loop(PROOF_SEARCH_WORDS, search_step as *const () as *mut c_void, core::ptr::addr_of_mut!(search).cast(), 0)
    };
    if search.found == 0 { (0, 0) } else { (search.found, ret) }
}

/// The proof search's state, handed to each of its steps by `bpf_loop`.
#[repr(C)]
struct Search {
    /// The context's address.
    here: u64,
    /// The return address searched for.
    ret: u64,
    /// Where above `here` it was found (0: not yet).
    found: u32,
    _pad: u32,
}

/// One step of the proof search (a `bpf_loop` callback, verified once
/// rather than once per step and per path into it): the stack word `index +
/// 1` words above the context. Returns 1 (stop) once found.
#[inline(never)]
unsafe extern "C" fn search_step(index: u64, state: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the `Search` of `learn`'s frame, alive
    // during the loop.
    let s = unsafe { &mut *state.cast::<Search>() };
    let off = (index as u32 + 1) * 8;
    if stack_word(config(), s.here + u64::from(off)) == s.ret {
        s.found = off;
        return 1;
    }
    0
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
                let proven = c.proof_off != 0 && stack_word(cfg, here + u64::from(c.proof_off)) == c.proof_ret;
                if proven && c.cut == 0 {
                    count(counter::STACK_PROVEN);
                    return (c.stack_id, false);
                }
                // The thread's own entry only while it has no proof: one
                // whose proof just failed came another way, and a walk to the
                // caller names the right one.
                if proven || (reuse.is_none() && c.tid == tid && c.proof_off == 0) {
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
    let id = capture(ctx, !whole);
    let (proof_off, proof_ret) = if is_stack(id) { learn(here) } else { (0, 0) };
    if slot == STACK_CACHE_SLOTS {
        slot = set + ((now >> 8) as u32 & (STACK_CACHE_WAYS - 1));
    }
    if let Some(c) = STACK_CACHE.get_ptr_mut(slot) {
        // SAFETY: as above.
        unsafe {
            *c = CachedStack {
                lock_addr: lock,
                stack_id: id,
                user_stack_id: USER_STACK_OFF,
                proof_ret,
                tid,
                flags,
                cut: u32::from(!whole),
                proof_off,
            }
        };
    }
    (id, !whole)
}
