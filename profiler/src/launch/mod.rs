//! The command `record -- COMMAND` lasts for: found on PATH before anything
//! is attached (a shell's 127 and 126 when it cannot be), started and held
//! at a gate until the session is attached (so no wait at its start is
//! missed), in a cgroup of its own with `--only-command`, as the user who ran
//! sudo; the signals lockprof gets passed on to it; its end noticed without
//! reaping it (its pid stays its own while signals may still go to it), and
//! its exit status kept as a shell says it.
//!
//! `path` finds the program, `user` the user to run it as, `cgroup` makes
//! and removes its cgroup, `gate` starts it, `signals` catches and passes on
//! signals, `wait` notices its end, `status` says how it ended.

mod cgroup;
mod error;
mod gate;
mod path;
mod signals;
mod status;
mod user;
mod wait;

pub use cgroup::CommandCgroup;
pub use error::LaunchError;
pub use gate::{Gate, Spec};
pub use path::resolve;
pub use signals::{Caught, Signals};
pub use status::{Ended, ended};
pub use user::RunAs;
pub use wait::exited;
