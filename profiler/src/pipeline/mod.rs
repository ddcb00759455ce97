//! The userspace pipeline, one straight path: ring buffer [`reader`] ->
//! typed [`record::Record`]s -> bounded channel -> [`aggregator`] (owns its
//! loop, publishes cheap snapshots) -> [`profile::ProfileBuilder`]
//! (symbolizes each stack once) -> the resolved profile every face reads,
//! and [`delta::Deltas`]: what each profile added, for the live faces.

pub mod aggregator;
pub mod delta;
pub mod profile;
pub mod reader;
pub mod record;

pub use aggregator::{Aggregator, Control, Limits, Msg, Snapshot};
pub use profile::{
    CgroupNames, NoCgroupNames, NoUserLockNames, NoUserStacks, ProfileBuilder, UserLockNames, UserStackTally,
    UserStacks, to_profile,
};
pub use record::Record;
