//! What an export's weights or a profile's samples measure: one enum for
//! folded stacks, flamegraphs, pprof files and `lockprof serve`'s
//! `?metric=`. A new metric is one variant here and one arm in each match.

use super::SampleTypes;
use crate::model::Profile;

/// A `?metric=` value that is not a served [`Metric`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metric must be wait, hold, count or blame, not {0:?}")]
pub struct UnknownMetric(pub String);

/// The text of a 400 answer.
impl From<UnknownMetric> for String {
    fn from(e: UnknownMetric) -> String {
        e.to_string()
    }
}

/// What a frame's width (or a sample's value) means.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Metric {
    /// Total wait time, ns (Go's mutex profile: contentions and delay).
    #[default]
    Wait,
    /// Total hold time, ns (backends that see releases).
    Hold,
    /// Number of contentions.
    Count,
    /// Blame: the wait each owner caused, ns, by the owner's acquire stack
    /// (Go's mutex profile charges the unlocker likewise).
    Blame,
    /// KVM directed yield: `yield_to` latency, ns, by caller stack.
    Yield,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 5] = [Metric::Wait, Metric::Hold, Metric::Count, Metric::Blame, Metric::Yield];

    /// The metrics `lockprof serve` serves (`?metric=`).
    pub const SERVED: [Metric; 4] = [Metric::Wait, Metric::Hold, Metric::Count, Metric::Blame];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Wait => "wait",
            Metric::Hold => "hold",
            Metric::Count => "count",
            Metric::Blame => "blame",
            Metric::Yield => "yield",
        }
    }

    /// Parses a served metric's name (`?metric=`); the error is one line for a 400.
    pub fn parse(s: &str) -> Result<Metric, UnknownMetric> {
        Metric::SERVED.into_iter().find(|m| m.name() == s).ok_or_else(|| UnknownMetric(s.to_string()))
    }

    /// Unit of the weights.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Wait | Metric::Hold | Metric::Blame | Metric::Yield => "ns",
            Metric::Count => "contentions",
        }
    }

    /// Title for the flamegraph.
    pub fn title(self) -> &'static str {
        match self {
            Metric::Wait => "Lock wait time (ns)",
            Metric::Hold => "Lock hold time (ns)",
            Metric::Count => "Lock contentions (count)",
            Metric::Blame => "Lock wait caused, by owner stack (ns)",
            Metric::Yield => "KVM directed yield: yield_to latency (ns)",
        }
    }

    /// The sample types of its pprof profiles.
    pub fn sample_types(self) -> SampleTypes {
        match self {
            Metric::Wait => SampleTypes::mutex(),
            Metric::Hold => SampleTypes { types: vec![("holds", "count"), ("hold", "nanoseconds")], default: "hold" },
            Metric::Count => SampleTypes { types: vec![("contentions", "count")], default: "contentions" },
            Metric::Blame => SampleTypes {
                types: vec![("waits_caused", "count"), ("wait_caused", "nanoseconds")],
                default: "wait_caused",
            },
            Metric::Yield => SampleTypes {
                types: vec![("yield_to_calls", "count"), ("yield_to_latency", "nanoseconds")],
                default: "yield_to_latency",
            },
        }
    }

    /// Why this metric cannot be served for `p`, if it cannot.
    pub fn unavailable(self, p: &Profile) -> Option<String> {
        match self {
            Metric::Hold if p.meta.hold_backend.is_none() => Some(format!(
                "hold times are not measured here ({})",
                p.meta.hold_unavailable.as_deref().unwrap_or("no release probes")
            )),
            Metric::Yield => Some("yield_to latency is exported by `lockprof flamegraph --metric yield` only".into()),
            _ => None,
        }
    }
}
