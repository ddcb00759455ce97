//! lockprof's eBPF programs, split by concern like perf's `bpf_skel/`:
//!
//! - [`maps`]: every map and the `CONFIG` global;
//! - [`context`]: counters, the re-entrancy guard, the current task;
//! - [`stack`]: the per-CPU stack-walk budget and stack selection;
//! - [`stack_proof`]: stacks reused without a walk, proven by the kernel
//!   stack itself;
//! - [`ringbuf`]: the one routine that sends a record to userspace;
//! - [`waits`]: begin/end of a wait, shared by every wait backend;
//! - [`backends`]: the wait backends' entry points (tp_btf, tracepoint,
//!   kprobe, fentry);
//! - [`aggregate`]: in-kernel per-CPU aggregation (aggregate mode);
//! - [`identity`]: which lock an address is, confirmed once per CPU;
//! - [`slabs`]: the `kmem_cache` iterator that names slab caches;
//! - [`owners`]: who holds a lock when a wait begins (blame);
//! - [`holds`]: hold times from the release functions;
//! - [`yields`]: KVM directed yield (`yield_to`);
//! - [`futex`]: user-space locks from the futex system calls;
//! - `floor` (feature `floor`, benchmarks only): counting-only programs.
//!
//! Cost model: everything costly (the stack walk) happens when a wait
//! begins, while the task is waiting anyway. When it ends the task has just
//! acquired the lock, so only CPU-local map work (or one ring-buffer record)
//! happens there.
#![no_std]
#![no_main]

mod aggregate;
mod backends;
mod context;
#[cfg(feature = "floor")]
mod floor;
mod futex;
mod holds;
mod identity;
mod maps;
mod owners;
mod ringbuf;
mod slabs;
mod stack;
mod stack_proof;
mod unwind;
mod waits;
mod yields;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
