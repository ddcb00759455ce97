//! Kernel symbols: kallsyms parsing, caller selection and lock naming.

mod caller;
mod kallsyms;
mod naming;
mod resolve;

pub use caller::{is_lock_internal, select_caller};
pub use kallsyms::{Kallsyms, KallsymsError, Symbol};
pub use naming::{LockName, TASKLIST_CALLERS, name_lock};
pub use resolve::{OVERFLOW_STACK, ResolvedStack, Resolver, StackSource};
