//! `--user-stacks` through code without frame pointers: the user registers
//! and the top of the user stack copied at a wait and sent to userspace,
//! which unwinds them (see `profiler_common::UnwindPlan`). A wait whose
//! planned words match a stack userspace already unwound takes that
//! stack's id, its signature, without a copy.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP},
    helpers::{
        bpf_get_current_task, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_buf, bpf_probe_read_user_buf,
    },
};
use profiler_common::{
    Config, EVENT_USER_STACK_COPY, ROOT_LR, ROOT_NONE, StackId, UNWIND_PLAN_SLOTS, USER_STACK_COPY_BYTES,
    USER_STACK_COPY_TAIL, USER_STACK_COPY_WORDS, USER_STACK_NONE, UnwindPlanKey, UserRegs, UserStackCopy, counter,
    known, signature_start, signature_step, stack_error, stack_hash_finish, stack_hash_step, user_stack_seed,
};

use crate::{
    context::{config, count},
    maps::{CopyScratch, EVENTS, UNWIND_PLANS, UNWIND_ROOTS, USER_REGS_LAYOUT, USER_STACK_COPY_SCRATCH, USER_STACKS},
};

/// Offsets in the kernel's `struct pt_regs` (the user registers saved at
/// kernel entry; a stable layout: `user_pt_regs` on arm64).
#[cfg(not(bpf_target_arch = "aarch64"))]
mod regs {
    pub const IP: u64 = 16 * 8;
    pub const SP: u64 = 19 * 8;
    pub const FP: u64 = 4 * 8;
    /// `cs`: a 64-bit user code segment (`__USER_CS`) tells the real
    /// `pt_regs` from a wrong guess of the padding above it.
    pub const CS: u64 = 17 * 8;
    pub const USER_CS: u64 = 0x33;
    /// `TOP_OF_KERNEL_STACK_PADDING` with FRED (6.9+): tried when the
    /// unpadded guess is not user state.
    pub const PADDINGS: [u64; 2] = [0, 16];
}

#[cfg(bpf_target_arch = "aarch64")]
mod regs {
    pub const FP: u64 = 29 * 8;
    pub const LR: u64 = 30 * 8;
    pub const SP: u64 = 31 * 8;
    pub const IP: u64 = 32 * 8;
    /// `pstate`: mode bits 0 (EL0t) for user state.
    pub const PSTATE: u64 = 33 * 8;
    pub const PADDINGS: [u64; 1] = [0];
}

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
}

/// Why a task has no user registers to copy.
enum NoRegs {
    /// A kernel thread: no user state.
    KernelThread,
    /// Not found where the layout says (unknown layout, unreadable, or a
    /// kernel stack of another size): counted as a failure.
    NotFound,
}

/// The current task's user registers, from the `pt_regs` at the top of
/// its kernel stack, into `out`.
#[inline(always)]
fn user_regs(cfg: &Config, out: &mut UserRegs) -> Result<(), NoRegs> {
    let at = USER_REGS_LAYOUT.load();
    if !known(at.task_stack) || !known(at.stack_user_regs) {
        return Err(NoRegs::NotFound);
    }
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let mm = cfg.layout.task_mm;
    if known(mm) && read_u64(task + u64::from(mm)).unwrap_or(0) == 0 {
        return Err(NoRegs::KernelThread);
    }
    let stack = read_u64(task + u64::from(at.task_stack)).ok_or(NoRegs::NotFound)?;
    let top = stack + u64::from(at.stack_user_regs);
    for pad in regs::PADDINGS {
        let r = top - pad;
        // The mode word, read into `out.ip` (map memory: no stack slot).
        #[cfg(not(bpf_target_arch = "aarch64"))]
        let user = read_into(r + regs::CS, &mut out.ip) && out.ip == regs::USER_CS;
        #[cfg(bpf_target_arch = "aarch64")]
        let user = read_into(r + regs::PSTATE, &mut out.ip) && out.ip & 0xf == 0;
        if !user {
            continue;
        }
        #[cfg(not(bpf_target_arch = "aarch64"))]
        let lr = {
            out.lr = 0;
            true
        };
        #[cfg(bpf_target_arch = "aarch64")]
        let lr = read_into(r + regs::LR, &mut out.lr);
        let ok = read_into(r + regs::IP, &mut out.ip)
            & read_into(r + regs::SP, &mut out.sp)
            & read_into(r + regs::FP, &mut out.fp)
            & lr;
        return if ok { Ok(()) } else { Err(NoRegs::NotFound) };
    }
    Err(NoRegs::NotFound)
}

/// Reads the kernel word at `addr` into `dst` (map memory); false if
/// unreadable.
#[inline(always)]
fn read_into(addr: u64, dst: &mut u64) -> bool {
    // SAFETY: `dst` is 8 writable bytes; the helper checks the kernel
    // address and fails cleanly.
    let dst = unsafe { core::slice::from_raw_parts_mut((dst as *mut u64).cast::<u8>(), 8) };
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel_buf(addr as *const u8, dst) }.is_ok()
}

/// Reads `size` bytes of user stack at `sp + off` into the copy at `off`;
/// `off` is a multiple of `SIZE` below the copy's end, which the mask
/// shows the verifier.
#[inline(always)]
fn read_at<const SIZE: usize>(buf: &mut UserStackCopy, off: usize) -> bool {
    let off = off & (USER_STACK_COPY_BYTES - SIZE);
    // SAFETY: [off, off + SIZE) lies inside `buf.words` (the mask above);
    // the helper checks the user address and fails cleanly.
    let dst = unsafe { core::slice::from_raw_parts_mut(buf.words.as_mut_ptr().cast::<u8>().add(off), SIZE) };
    let src = (buf.regs.sp + off as u64) as *const u8;
    // SAFETY: as above.
    unsafe { bpf_probe_read_user_buf(src, dst) }.is_ok()
}

/// One step of [`copy_prefix`]: `SIZE` more bytes if they are readable.
#[inline(always)]
fn grow<const SIZE: usize>(buf: &mut UserStackCopy, off: usize) -> usize {
    if read_at::<SIZE>(buf, off) { off + SIZE } else { off }
}

/// Copies as much of the user stack from the stack pointer up as is
/// mapped, to [`USER_STACK_COPY_BYTES`], to a multiple of
/// [`USER_STACK_COPY_TAIL`] bytes; the bytes copied. One read when the
/// stack reaches that far, else a read per halving (straight-line code).
#[inline(always)]
fn copy_prefix(buf: &mut UserStackCopy) -> usize {
    if read_at::<USER_STACK_COPY_BYTES>(buf, 0) {
        return USER_STACK_COPY_BYTES;
    }
    let mut off = grow::<4096>(buf, 0);
    off = grow::<2048>(buf, off);
    off = grow::<1024>(buf, off);
    off = grow::<512>(buf, off);
    off = grow::<256>(buf, off);
    off = grow::<128>(buf, off);
    grow::<USER_STACK_COPY_TAIL>(buf, off)
}

/// Copies the first `reach` bytes of the user stack (a plan's); false when
/// they are not all mapped.
#[inline(always)]
fn copy_reach(buf: &mut UserStackCopy, reach: usize) -> bool {
    let size = reach.min(USER_STACK_COPY_BYTES);
    if size == 0 {
        return true;
    }
    // SAFETY: `size` bytes from the start of `buf.words`, at most its length.
    let dst = unsafe { core::slice::from_raw_parts_mut(buf.words.as_mut_ptr().cast::<u8>(), size) };
    // SAFETY: the helper checks the user address and fails cleanly.
    unsafe { bpf_probe_read_user_buf(buf.regs.sp as *const u8, dst) }.is_ok()
}

/// The signature of the copy in `buf` under its plan.
#[inline(always)]
fn signature(buf: &UserStackCopy, len: usize) -> StackId {
    let plan = &buf.plan;
    let mut h = signature_start(buf.tgid, &buf.regs, plan.flags);
    let mut i = 0;
    while i < UNWIND_PLAN_SLOTS && i < plan.n as usize {
        let slot = plan.slots.get(i).copied().unwrap_or(0);
        let idx = slot as usize & (USER_STACK_COPY_WORDS - 1);
        let word = if (idx + 1) * 8 <= len { buf.words.get(idx).copied().unwrap_or(0) } else { 0 };
        h = signature_step(h, slot, word);
        i += 1;
    }
    stack_hash_finish(h, plan.n as u64)
}

/// Sets `s.key` to the plan key of the stack in `s.copy`: its first
/// return address, from the slot userspace found for its ip; false before
/// userspace knows it.
#[inline(always)]
// Looking up by reference: the key stays in map memory, off the stack.
#[allow(clippy::needless_borrows_for_generic_args)]
fn plan_key(s: &mut CopyScratch) -> bool {
    let buf = &s.copy;
    s.key = UnwindPlanKey { tgid: buf.tgid, _pad: 0, ip: buf.regs.ip, ra: 0 };
    // SAFETY: a map value read by value.
    let Some(root) = (unsafe { UNWIND_ROOTS.get(&s.key) }).copied() else {
        return false;
    };
    s.key.ra = match root {
        ROOT_LR => buf.regs.lr,
        ROOT_NONE => 0,
        slot => {
            let at = buf.regs.sp + u64::from(slot) * 8;
            // SAFETY: `s.key.ra` is 8 bytes of map memory; the helper checks
            // the user address and fails cleanly.
            let dst = unsafe { core::slice::from_raw_parts_mut((&raw mut s.key.ra).cast::<u8>(), 8) };
            // SAFETY: as above.
            if unsafe { bpf_probe_read_user_buf(at as *const u8, dst) }.is_err() {
                return false;
            }
            s.key.ra
        }
    };
    true
}

/// The user stack of the current task in process `tgid` (its address
/// space's owner): known by its signature, else copied and sent under an id
/// of its own. A BPF-to-BPF call of few arguments and no logging (the
/// counters say what failed), so that its frame stays within what the
/// pre-6.2 begin programs leave (512 bytes combined).
#[inline(never)]
// Looking up by reference: the keys stay in map memory, off the stack.
#[allow(clippy::needless_borrows_for_generic_args)]
pub fn capture_copy(tgid: u32) -> StackId {
    let cfg = config();
    let Some(scratch) = USER_STACK_COPY_SCRATCH.get_ptr_mut(0) else {
        return stack_error(7);
    };
    // SAFETY: this CPU's scratch slot from a successful lookup, valid for the
    // map's lifetime; programs on one CPU do not nest (the BUSY guard).
    let scratch: &mut CopyScratch = unsafe { &mut *scratch };
    let buf = &mut scratch.copy;
    match user_regs(cfg, &mut buf.regs) {
        Ok(()) => {}
        Err(NoRegs::KernelThread) => return USER_STACK_NONE,
        Err(NoRegs::NotFound) => {
            count(counter::USER_STACK_FAILED);
            return stack_error(ENODATA);
        }
    }
    buf.kind = EVENT_USER_STACK_COPY;
    buf.tgid = tgid;
    buf.plan.n = 0;
    buf.plan.flags = 0;
    if plan_key(scratch)
        && let Some(p) = UNWIND_PLANS.get_ptr(&scratch.key)
    {
        // SAFETY: a live map value of the plan's type, copied whole into
        // this CPU's scratch (no overlap).
        unsafe { core::ptr::copy_nonoverlapping(p, &mut scratch.copy.plan, 1) };
    }
    scratch.copy.signature = 0;
    if scratch.copy.plan.n != 0 {
        let reach = scratch.copy.plan.reach();
        if copy_reach(&mut scratch.copy, reach) {
            scratch.id = signature(&scratch.copy, reach);
            if USER_STACKS.get_ptr(&scratch.id).is_some() {
                count(counter::USER_STACK_SIGNED);
                return scratch.id;
            }
            scratch.copy.signature = scratch.id;
        }
    }
    // A copy is 8 KiB: with half the ring buffer waiting, copies would
    // crowd out the waits themselves.
    if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) > 2 * cfg.wakeup_bytes {
        count(counter::USER_STACK_FAILED);
        return stack_error(EBUSY);
    }
    let len = copy_prefix(&mut scratch.copy);
    send(&mut scratch.copy, len)
}

/// `-EBUSY`: no copy while the ring buffer is half full.
const EBUSY: u32 = 16;
/// `-ENODATA`: the user registers are not where the layout says.
const ENODATA: u32 = 61;

/// Sends the copy in `buf` (`len` bytes of stack) under an id of its own.
#[inline(always)]
fn send(buf: &mut UserStackCopy, len: usize) -> StackId {
    // SAFETY: helpers without preconditions.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    let h = stack_hash_step(stack_hash_step(user_stack_seed(buf.tgid), now), u64::from(cpu));
    let id = stack_hash_finish(stack_hash_step(h, buf.regs.sp), len as u64);
    buf.id = id;
    buf.len = len as u32;
    let copy: &UserStackCopy = buf;
    // Woken at once: a copy is 8 KiB, and while the ring buffer stays half
    // full the next copies are skipped (waits without a stack).
    match EVENTS.output::<UserStackCopy>(copy, u64::from(BPF_RB_FORCE_WAKEUP)) {
        Ok(()) => {
            count(counter::USER_STACK_COPIES);
            count(counter::EVENTS);
            id
        }
        Err(e) => {
            count(counter::RINGBUF_FULL);
            stack_error(e.unsigned_abs())
        }
    }
}
