//! The userspace pipeline: ring buffer reader -> bounded channel ->
//! aggregator -> periodic snapshots -> symbolized profile.

pub mod aggregator;
pub mod reader;
mod session;
pub mod snapshot;

pub use aggregator::{Aggregator, Limits, LockKey, Snapshot};
pub use session::{Control, Session, SessionError, SessionOptions};
pub use snapshot::to_profile;
