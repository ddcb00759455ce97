//! Exports: folded stacks, flamegraph SVGs (inferno) and pprof profiles.

mod folded;
mod metric;
mod pprof;
mod svg;

pub use folded::{FoldOptions, folded_lines, mean_per_round};
pub use metric::{Metric, UnknownMetric};
pub use pprof::{
    PprofHeader, PprofSample, SampleTypes, build_pprof, cgroup_parts, encode_pprof, gzip_pprof, pprof_profile, proto,
};
pub use svg::{SvgOptions, diff_svg, svg};

/// Export errors.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Hold times were asked for but the recording has none.
    #[error("this recording has no hold times ({0}); use --metric wait or count")]
    NoHold(String),
    /// Blame was asked for but the recording has no owners.
    #[error("this recording has no lock owners (no mutex or rwsem waits with a known owner); use --metric wait")]
    NoBlame,
    /// yield_to latency was asked for but the recording has no yield_to data.
    #[error("this recording has no yield_to data ({0}); use --metric wait, hold or count")]
    NoYield(String),
    /// cgroups were asked for but the recording has none.
    #[error("this recording has no cgroups (recorded with --no-cgroups, or without a cgroup v2 hierarchy)")]
    NoCgroups,
    /// cgroups are recorded for waits only.
    #[error("--cgroup-root applies to --metric wait and count (holds and blame are not split by cgroup)")]
    CgroupMetric,
    /// Writing the SVG failed.
    #[error("drawing the flamegraph: {0}")]
    Svg(#[from] std::io::Error),
}
