//! Plain-old-data types and names shared by lockprof's eBPF programs and its
//! userspace.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of pointers and padding-stable,
//! so the same bytes mean the same thing on both sides of the ring buffer and
//! the maps. Every name and constant both sides use is defined here once.
//! The `user` feature adds `aya::Pod` impls; the eBPF side never sees aya.
#![no_std]

mod aggregate;
mod config;
pub mod counter;
pub mod futex;
mod ident;
mod layout;
mod lock;
pub mod names;
#[cfg(feature = "user")]
mod pod;
mod record;
mod stack;
mod state;
mod unwind;

pub use aggregate::{
    AGG_BLAME, AGG_CACHE_SLOTS, AGG_HOLD, AGG_LOG_ENTRIES, AggKey, AggLogEntry, AggSlot, AggVal, HIST_BUCKETS,
    agg_cache_index, hist_bucket, hist_bucket_low,
};
pub use config::{
    CGROUP_FILTER_ENTRIES, Config, DEFAULT_AGG_ENTRIES, DEFAULT_PENDING_ENTRIES, DEFAULT_RINGBUF_BYTES,
    DEFAULT_STACK_ENTRIES, KFUNC_GET_KMEM_CACHE, KFUNC_RDONLY_CAST, KFUNC_TASK_FROM_PID, KFUNC_TASK_RELEASE,
    KFUNCS_OWNER_STACKS, MAX_STACK_DEPTH, MODE_AGGREGATE, MODE_STREAM, OWNER_STACKS, OWNERS_ON, STACK_WINDOW_NS,
    STACK_WINDOWS_PER_S, STACK_WORDS, TGID_FILTER_ENTRIES, TaskOffsets, TpOffsets, YIELD_PENDING_ENTRIES,
};
pub use ident::{
    IDENT_ENTRIES, IDENT_SEEN_SLOTS, KFUNC_CALL_GET_KMEM_CACHE, KFUNC_CALL_RDONLY_CAST, KFUNC_CALL_TASK_FROM_PID,
    KFUNC_CALL_TASK_RELEASE, LockIdent, SLAB_NAME_LEN, SlabRecord, ident_seen_index, kind,
};
pub use layout::{Layout, UNKNOWN_OFFSET, known};
pub use lock::{LockMode, LockType, is_spinning, lcb, probe_flags};
pub use record::{
    ContentionEvent, EVENT_AGG_OVERFLOW, EVENT_CONTENTION, EVENT_HOLD, EVENT_OUTLIER, EVENT_USER_STACK,
    EVENT_USER_STACK_COPY, EVENT_YIELD, UserStackEvent, YieldEvent, record_size,
};
pub use stack::{
    CALLER_DEPTH, NO_STACK_BASE, STACK_CUT, STACK_HASH_SEED, STACK_OVERFLOW, STACK_SKIPPED, STACK_USER_LOCK, StackId,
    StoredStack, StoredUserStack, USER_STACK_NONE, USER_STACK_OFF, USER_STACK_SEED, is_stack, stack_errno, stack_error,
    stack_hash_finish, stack_hash_step, stack_id_of, user_stack_id_of, user_stack_seed,
};
pub use state::{
    ACQUIRED_SLOTS, Acquired, CachedStack, HoldKey, HoldStart, Holder, MUTEX_SPIN_SLOT, NESTED_SPIN_SLOT, Owner,
    OwnerAsleep, PROOF_WORDS, PendingWait, SPIN_SLOT, SPIN_SLOTS, STACK_CACHE_SLOTS, STACK_CACHE_WAYS, StackBudget,
    YieldStart, acquired_index, owner, proof_hash_step, stack_cache_index, stack_cache_set, task_key,
};
pub use unwind::{
    PLAN_USES_FP, ROOT_LR, ROOT_NONE, SIGNATURE_SEED, UNWIND_PLAN_ENTRIES, UNWIND_PLAN_SLOTS, USER_STACK_COPY_BYTES,
    USER_STACK_COPY_TAIL, USER_STACK_COPY_WORDS, USER_STACKS_FRAME_POINTERS, USER_STACKS_OFF, USER_STACKS_UNWIND,
    UnwindPlan, UnwindPlanKey, UserRegs, UserRegsLayout, UserStackCopy, signature, signature_start, signature_step,
};
