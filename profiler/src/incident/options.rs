//! What the command line asks of incident capture: the triggers, how much
//! profile to keep around each, where to write it and how much.

use std::{path::PathBuf, time::Duration};

use super::trigger::Trigger;

/// Defaults of the incident options (the command line's too).
pub mod defaults {
    /// Seconds of profile kept before a trigger fires.
    pub const BEFORE_S: u64 = 30;
    /// Seconds of profile recorded after it fires.
    pub const AFTER_S: u64 = 5;
    /// Where incidents are written.
    pub const DIR: &str = "/var/lib/lockprof/incidents";
    /// Incidents written per hour at most.
    pub const MAX_PER_HOUR: u32 = 6;
    /// MiB the incident directory may hold: the oldest incidents are deleted beyond it.
    pub const MAX_DIR_MB: u64 = 256;
}

/// Triggered incident capture, as asked for.
#[derive(Clone, Debug)]
pub struct IncidentOptions {
    /// The triggers (none: no incident capture).
    pub triggers: Vec<Trigger>,
    /// Profile kept before a trigger fires.
    pub before: Duration,
    /// Profile recorded after it fires.
    pub after: Duration,
    /// Where incidents are written.
    pub dir: PathBuf,
    /// Incidents written per hour at most.
    pub max_per_hour: u32,
    /// Bytes the incident directory may hold: the oldest incidents are deleted beyond it.
    pub max_dir_bytes: u64,
}

impl Default for IncidentOptions {
    /// No triggers, and the defaults.
    fn default() -> IncidentOptions {
        IncidentOptions {
            triggers: Vec::new(),
            before: Duration::from_secs(defaults::BEFORE_S),
            after: Duration::from_secs(defaults::AFTER_S),
            dir: PathBuf::from(defaults::DIR),
            max_per_hour: defaults::MAX_PER_HOUR,
            max_dir_bytes: defaults::MAX_DIR_MB << 20,
        }
    }
}

impl IncidentOptions {
    /// Whether any trigger is set.
    pub fn enabled(&self) -> bool {
        !self.triggers.is_empty()
    }

    /// The smallest `wait>=` threshold (what the kernel must stream as outliers).
    pub fn min_wait_ns(&self) -> Option<u64> {
        super::trigger::min_wait_ns(&self.triggers)
    }
}
