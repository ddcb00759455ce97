//! Just enough of a BTF reader for what the programs and the naming need
//! (aya 0.14 keeps its type lookups crate-private): member offsets of
//! kernel structs ([`layout`]), kfunc ids, and the field a lock is inside
//! an object ([`fields`]).

mod fields;
mod layout;
mod types;

pub use fields::{field_path, slab_struct};
pub use layout::{kernel_blob, layout, task_offsets, task_starts_with_word, user_regs_layout};
pub use types::{BtfError, Types};
