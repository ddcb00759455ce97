//! What a recording written by an incident trigger says about itself: the
//! trigger, what fired it, the window around it and the system's state.

use serde::{Deserialize, Serialize};

/// An incident: the recording holds the profile of `window_start_unix_ms`
/// to `window_end_unix_ms`, around `fired_unix_ms`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentInfo {
    /// Its id: the file name without `.json` (time and trigger).
    pub id: String,
    /// The trigger, as canonical text.
    pub trigger: String,
    /// What fired it (`wait of 201 ms on ... by stall-waiter[1234]`).
    pub reason: String,
    /// When it fired (Unix time, ms).
    pub fired_unix_ms: u64,
    /// The window's start (Unix time, ms).
    pub window_start_unix_ms: u64,
    /// The window's end (Unix time, ms).
    pub window_end_unix_ms: u64,
    /// The system's state when it fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemState>,
}

impl IncidentInfo {
    /// Seconds of the window before the trigger fired.
    pub fn before_s(&self) -> f64 {
        self.fired_unix_ms.saturating_sub(self.window_start_unix_ms) as f64 / 1e3
    }

    /// Seconds of the window after it.
    pub fn after_s(&self) -> f64 {
        self.window_end_unix_ms.saturating_sub(self.fired_unix_ms) as f64 / 1e3
    }
}

/// Load and CPU use around the trigger (what was cheap to read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemState {
    /// 1, 5 and 15 minute load averages (`/proc/loadavg`).
    pub loadavg: [f64; 3],
    /// Runnable tasks (`procs_running` of `/proc/stat`).
    pub procs_running: u64,
    /// Tasks blocked on I/O (`procs_blocked`).
    pub procs_blocked: u64,
    /// Online CPUs.
    pub cpus: u32,
    /// The threads that used the most CPU from the trigger to the window's
    /// end, most first.
    pub top_tasks: Vec<CpuTask>,
}

/// One thread's CPU use over an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTask {
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Thread name.
    pub comm: String,
    /// Percent of one CPU.
    pub cpu_pct: f64,
}
