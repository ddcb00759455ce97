//! One unwind of a copied stack with framehop, and the stack slots it
//! depended on (the stack's plan, see `profiler_common::UnwindPlan`).

use std::{
    cell::{Cell, RefCell},
    collections::HashSet,
};

use framehop::{CacheNative, Error, MayAllocateDuringUnwind, Module, Unwinder, UnwinderNative};
use profiler_common::{MAX_STACK_DEPTH, PLAN_USES_FP, UserRegs};

use super::modules::Data;

/// The native unwinder over a process's modules.
pub type NativeUnwinder = UnwinderNative<Data, MayAllocateDuringUnwind>;
/// Its rule cache.
pub type NativeCache = CacheNative<MayAllocateDuringUnwind>;

/// How an unwind ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// At the outermost frame.
    Complete,
    /// It needed stack beyond the copy.
    CopyShort,
    /// At the depth limit.
    Deep,
    /// The unwinder could not go on (no usable rule, a loop, a null
    /// return address).
    Stuck,
}

/// An unwind: the frames (innermost first: the ip, then return addresses),
/// how it ended, the words it read (word index from the stack pointer,
/// value) in order, and for each frame after the first the slot its
/// return address was read from, if it was read from the stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    pub frames: Vec<u64>,
    pub end: End,
    pub reads: Vec<(u16, u64)>,
    pub ra_slots: Vec<u16>,
}

/// A copied stack: registers and words from the stack pointer up.
pub struct Copy<'a> {
    pub regs: UserRegs,
    pub words: &'a [u64],
}

/// Return addresses signed with pointer authentication (arm64) carry the
/// signature above the 48 address bits of a user address.
#[cfg(target_arch = "aarch64")]
const ADDRESS_MASK: u64 = (1 << 48) - 1;

#[cfg(target_arch = "x86_64")]
fn regs_of(r: &UserRegs) -> framehop::UnwindRegsNative {
    framehop::UnwindRegsNative::new(r.ip, r.sp, r.fp)
}

#[cfg(target_arch = "aarch64")]
fn regs_of(r: &UserRegs) -> framehop::UnwindRegsNative {
    framehop::UnwindRegsNative::new_with_ptr_auth_mask(framehop::aarch64::PtrAuthMask(ADDRESS_MASK), r.lr, r.sp, r.fp)
}

/// Unwinds `copy`; `alter` replaces the word read at a slot (the frames'
/// dependence on it is what [`plan`] tests).
fn walk_with(
    unwinder: &NativeUnwinder,
    cache: &mut NativeCache,
    copy: &Copy<'_>,
    alter: &dyn Fn(u16, u64) -> u64,
) -> Walk {
    let sp = copy.regs.sp;
    let reads = RefCell::new(Vec::new());
    let short = Cell::new(false);
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let off = addr.checked_sub(sp).ok_or(())?;
        if off % 8 != 0 {
            return Err(());
        }
        let slot = off / 8;
        match copy.words.get(slot as usize) {
            Some(w) => {
                let w = alter(slot as u16, *w);
                reads.borrow_mut().push((slot as u16, w));
                Ok(w)
            }
            None => {
                short.set(true);
                Err(())
            }
        }
    };
    let mut frames = Vec::new();
    let mut ra_slots = Vec::new();
    let end = {
        let mut it = unwinder.iter_frames(copy.regs.ip, regs_of(&copy.regs), cache, &mut read_stack);
        let mut seen = 0;
        loop {
            if frames.len() >= MAX_STACK_DEPTH {
                break End::Deep;
            }
            match it.next() {
                Ok(Some(f)) => {
                    let addr = f.address();
                    if !frames.is_empty() {
                        // The return address is the last word read for this frame that holds it.
                        let r = reads.borrow();
                        if let Some((slot, _)) = r[seen..].iter().rev().find(|(_, w)| strip(*w) == addr) {
                            ra_slots.push(*slot);
                        }
                        seen = r.len();
                    }
                    frames.push(addr);
                }
                Ok(None) => break End::Complete,
                Err(Error::CouldNotReadStack(_)) => break End::CopyShort,
                Err(_) => break End::Stuck,
            }
        }
    };
    let end = if end == End::CopyShort && !short.get() { End::Stuck } else { end };
    Walk { frames, end, reads: reads.into_inner(), ra_slots }
}

/// A return address as framehop reports it (pointer authentication stripped).
fn strip(word: u64) -> u64 {
    #[cfg(target_arch = "aarch64")]
    {
        word & ADDRESS_MASK
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        word
    }
}

/// Unwinds `copy`.
pub fn walk(unwinder: &NativeUnwinder, cache: &mut NativeCache, copy: &Copy<'_>) -> Walk {
    walk_with(unwinder, cache, copy, &|_, w| w)
}

/// A value no real frame pointer or saved register is expected to hold.
const POISON: u64 = 0x5a5a_5a5a_5a5a_5a50;

/// The slots (sorted) and flags whose words decide `w`, an unwind of
/// `copy`: the return addresses' slots, and each other slot read (and the
/// frame pointer) whose change alone changes the frames; provided the
/// frames stay the same with all the others changed at once, else every
/// slot read and the frame pointer.
pub fn plan(unwinder: &NativeUnwinder, cache: &mut NativeCache, copy: &Copy<'_>, w: &Walk) -> (Vec<u16>, u32) {
    let same = |other: &Walk| other.frames == w.frames && other.end == w.end;
    let mut keep: HashSet<u16> = w.ra_slots.iter().copied().collect();
    let others: Vec<u16> = w.reads.iter().map(|(s, _)| *s).filter(|s| !keep.contains(s)).collect();
    for s in &others {
        let poisoned = walk_with(unwinder, cache, copy, &|slot, word| if slot == *s { word ^ POISON } else { word });
        if !same(&poisoned) {
            keep.insert(*s);
        }
    }
    let fp_regs = Copy { regs: UserRegs { fp: copy.regs.fp ^ POISON, ..copy.regs }, words: copy.words };
    let fp = !same(&walk_with(unwinder, cache, &fp_regs, &|_, word| word));
    // All the words left out changed at once (and the frame pointer, unless
    // it is in): still the same frames, or the plan is every word read.
    let regs = if fp { copy } else { &fp_regs };
    let all = walk_with(unwinder, cache, regs, &|slot, word| if keep.contains(&slot) { word } else { word ^ POISON });
    let (mut slots, flags): (Vec<u16>, u32) = if same(&all) {
        (keep.into_iter().collect(), if fp { PLAN_USES_FP } else { 0 })
    } else {
        (w.reads.iter().map(|(s, _)| *s).collect(), PLAN_USES_FP)
    };
    slots.sort_unstable();
    slots.dedup();
    (slots, flags)
}

/// Builds the native unwinder over `modules`.
pub fn unwinder(modules: impl IntoIterator<Item = Module<Data>>) -> NativeUnwinder {
    let mut u = NativeUnwinder::new();
    for m in modules {
        u.add_module(m);
    }
    u
}
