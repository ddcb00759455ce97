//! Kernel symbols: kallsyms parsing, caller selection and lock naming; `user`
//! symbolizes user-space stacks.

mod caller;
mod kallsyms;
mod naming;
mod resolve;
pub mod user;

pub use caller::{KRETPROBE_TRAMPOLINES, frame_fn, is_lock_internal, rt_base, select_caller, yield_caller_index};
pub use kallsyms::{Kallsyms, KallsymsError, Symbol};
pub use naming::{
    Identities, KernelIdentity, LockName, NoIdentities, TASKLIST_CALLERS, lock_class, lock_class_by, name_lock,
};
pub use resolve::{CUT_MARK, ResolvedStack, Resolver, StackSource};
