//! Triggered incident capture: when a trigger fires during `record`, `top`
//! or `serve`, the profile of the seconds before and after it is written as
//! a recording into an incident directory.
//!
//! [`trigger`] parses the `--trigger` text into a [`trigger::Trigger`] (a
//! filter and one condition); [`options`] holds what the command line asks
//! for (triggers, the time around them, where and how many incidents).
//! [`engine`] judges them on the session's snapshots and writes the
//! windows through [`store`] (the directory, its limits); [`system`] reads
//! the machine's state around a trigger.

pub mod engine;
pub mod options;
pub mod ring;
pub mod store;
pub mod system;
pub mod trigger;

pub use engine::{Engine, IncidentLog, WindowBuilder, Written};
pub use options::IncidentOptions;
pub use store::{Store, StoreError};
