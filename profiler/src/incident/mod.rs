//! Triggered incident capture: when a trigger fires during `record`, `top`
//! or `serve`, the profile of the seconds before and after it is written as
//! a recording into an incident directory.
//!
//! [`trigger`] parses the `--trigger` text into a [`trigger::Trigger`] (a
//! filter and one condition); [`options`] holds what the command line asks
//! for (triggers, the time around them, where and how many incidents).

pub mod options;
pub mod trigger;
