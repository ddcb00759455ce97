//! The data model shared by every face of lockprof: statistics, lock kinds,
//! and the resolved [`Profile`] that reports, recordings and exports read.

mod counters;
mod frames;
mod grouping;
mod histogram;
mod incident;
mod key;
mod kind;
pub mod placeholders;
mod profile;
mod run;
mod stats;
mod yields;

pub use counters::{Bookkeeping, Counter, CounterKind, Counters, Field, Losses};
pub use grouping::{grouped_by_name, grouped_by_site};
pub use incident::{CpuTask, IncidentInfo, SystemState};
pub use key::LockKey;
pub use kind::{mode_name, parse_type, type_label, type_name};
pub use profile::{
    CallerProfile, Callers, CgroupLock, CgroupProfile, CgroupShare, Frames, LockProfile, Meta, NameSource, OwnerKind,
    OwnerProfile, Profile, SlowWait, TaskProfile, merge_shares,
};
pub use run::{CommandRun, Round, shell_line};
pub use stats::{DETAIL_SIGFIG, LOCK_SIGFIG, Stats};
pub use yields::{RqContention, YieldCaller, YieldPair, YieldProfile, YieldStats};
