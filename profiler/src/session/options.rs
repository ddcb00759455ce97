//! One options type for every session (record, top, flamegraph, serve),
//! built once from the command line by `cli`.

use std::time::Duration;

use profiler_common::{DEFAULT_STACK_ENTRIES, MODE_AGGREGATE, MODE_STREAM, OWNERS_ON, STACK_WINDOWS_PER_S};

use crate::{
    cgroups::CgroupFs, ebpf::LoadOptions, incident::IncidentOptions, pipeline::Limits, symbols::user::DebugFileOptions,
};

/// How waits reach userspace.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Per-CPU maps in the kernel, drained each interval.
    #[default]
    Aggregate,
    /// Every wait through the ring buffer.
    Stream,
}

/// How user stacks are taken (`--user-unwind`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum UserUnwind {
    /// A copy of the stack, unwound in userspace from `.eh_frame`.
    #[default]
    Copy,
    /// The kernel's frame-pointer walk.
    FramePointers,
}

impl UserUnwind {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            UserUnwind::Copy => "copy",
            UserUnwind::FramePointers => "fp",
        }
    }

    /// The `Config::user_stacks` value when user stacks are on.
    pub fn config_value(self) -> u32 {
        match self {
            UserUnwind::Copy => profiler_common::USER_STACKS_UNWIND,
            UserUnwind::FramePointers => profiler_common::USER_STACKS_FRAME_POINTERS,
        }
    }
}

impl Mode {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Aggregate => "aggregate",
            Mode::Stream => "stream",
        }
    }

    /// The `Config::mode` value.
    pub fn config_value(self) -> u32 {
        match self {
            Mode::Aggregate => MODE_AGGREGATE,
            Mode::Stream => MODE_STREAM,
        }
    }
}

/// Defaults of the tuning options (the CLI shows and uses these).
pub mod defaults {
    /// `--stack-rate`: kernel stack walks per second per CPU.
    pub const STACK_RATE: u32 = 10_000;
    /// `--outlier-us`: waits at least this long are listed individually.
    pub const OUTLIER_US: u64 = 1_000;
    /// `--ringbuf-mb`.
    pub const RINGBUF_MB: u32 = 4;
    /// `--stack-map-size`.
    pub const STACK_MAP_SIZE: u32 = super::DEFAULT_STACK_ENTRIES;
    /// `--max-callers`.
    pub const MAX_CALLERS: usize = 50_000;
}

/// cgroup attribution: the cgroup2 mount, and the `--cgroup` roots.
#[derive(Clone, Debug)]
pub struct CgroupOptions {
    /// The cgroup v2 hierarchy.
    pub fs: CgroupFs,
    /// `--cgroup` cgroups (paths relative to the mount): their tasks and
    /// their descendants' are recorded, and cgroups created below them
    /// while recording join within an interval.
    pub roots: Vec<String>,
}

/// Everything a session needs.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// What to load and how.
    pub load: LoadOptions,
    /// Aggregator key caps.
    pub limits: Limits,
    /// Snapshot publish (and housekeeping) interval.
    pub publish_interval: Duration,
    /// Capacity of the reader -> aggregator channel, in batches.
    pub channel_batches: usize,
    /// How often the reader drains the ring buffer when the kernel has not
    /// forced a wakeup.
    pub poll_interval: Duration,
    /// Filters as typed by the user (recorded in the profile's meta).
    pub filters: Vec<String>,
    /// Forward the eBPF programs' own diagnostics (aya-log) to the log (`-v`).
    pub ebpf_logs: bool,
    /// cgroup attribution and filter (None: no cgroup v2 hierarchy, or not asked for).
    pub cgroups: Option<CgroupOptions>,
    /// Notes for the profile's meta (what the session could not do).
    pub notes: Vec<String>,
    /// Incident triggers, and where their incidents go (None: no triggers).
    pub incidents: Option<IncidentOptions>,
    /// Where user stacks' separate debug files are looked for.
    pub debug_files: DebugFileOptions,
}

impl Default for SessionOptions {
    /// The raw machinery with nothing tuned: stream mode, every stack walked.
    fn default() -> Self {
        SessionOptions {
            load: LoadOptions::default(),
            limits: Limits::default(),
            publish_interval: Duration::from_secs(1),
            channel_batches: 256,
            poll_interval: Duration::from_millis(50),
            filters: Vec::new(),
            ebpf_logs: false,
            cgroups: None,
            notes: Vec::new(),
            incidents: None,
            debug_files: DebugFileOptions::default(),
        }
    }
}

impl SessionOptions {
    /// What `lockprof record` uses by default: aggregate mode, the default
    /// stack budget, waits of 1 ms or more listed individually.
    pub fn recommended() -> SessionOptions {
        let mut o = SessionOptions::default();
        o.set_mode(Mode::Aggregate);
        o.set_stack_rate(defaults::STACK_RATE);
        o.load.config.outlier_ns = defaults::OUTLIER_US * 1_000;
        o.load.config.owners = OWNERS_ON;
        o.load.config.cgroups = 1;
        o.limits.max_callers = defaults::MAX_CALLERS;
        o
    }

    /// Sets the mode.
    pub fn set_mode(&mut self, m: Mode) {
        self.load.config.mode = m.config_value();
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        if self.load.config.mode == MODE_AGGREGATE { Mode::Aggregate } else { Mode::Stream }
    }

    /// Judges `incidents`' triggers in this session (nothing when it has
    /// none): waits as long as the shortest `wait>=` threshold are then
    /// streamed from the kernel as outliers, whatever `--outlier-us` says.
    pub fn with_incidents(mut self, incidents: IncidentOptions) -> SessionOptions {
        if !incidents.enabled() {
            return self;
        }
        if let Some(min) = incidents.min_wait_ns() {
            let o = &mut self.load.config.outlier_ns;
            *o = if *o == 0 { min } else { (*o).min(min) };
        }
        self.incidents = Some(incidents);
        self
    }

    /// Sets the stack budget from walks per second per CPU (0: unlimited).
    pub fn set_stack_rate(&mut self, per_s: u32) {
        self.load.config.stacks_per_window = per_s.div_ceil(STACK_WINDOWS_PER_S);
    }
}
