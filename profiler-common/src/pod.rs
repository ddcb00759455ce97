//! `aya::Pod` for the types userspace reads from maps and the ring buffer.
//! Every type here is `#[repr(C)]`, made only of integers and byte arrays,
//! with no padding (the layout tests check the sizes), so every bit pattern
//! is a valid value.

macro_rules! pod {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: repr(C), integers and byte arrays only, no padding (sizes
        // are pinned by the layout tests); any bit pattern is valid.
        unsafe impl aya::Pod for $t {}
    )*};
}

pod!(
    super::ContentionEvent,
    super::YieldEvent,
    super::PendingWait,
    super::futex::FutexWait,
    super::CachedStack,
    super::Config,
    super::AggKey,
    super::AggVal,
    super::HoldKey,
    super::HoldStart,
    super::StackBudget,
    super::YieldStart,
    super::TaskOffsets,
    super::TpOffsets,
    super::Layout,
    super::AggSlot,
    super::AggLogEntry,
    super::StoredStack,
    super::StoredUserStack,
    super::UserStackEvent,
    super::LockIdent,
    super::Owner,
    super::Acquired,
    super::Holder,
    super::SlabRecord,
    super::UserRegs,
    super::UserRegsLayout,
    super::UnwindPlanKey,
    super::UnwindPlan,
    super::UserStackCopy,
);
