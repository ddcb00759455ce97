//! One compared row and what is said of it: the metric tested, whether the
//! row is on both sides, each side's values, the changes and the verdict.

use profiler_common::{LockMode, LockType};

use super::side::RowKey;

/// The metric the p-value and verdict judge.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum TestMetric {
    /// Contentions per second.
    #[default]
    Contended,
    /// Wait time per second.
    Wait,
    /// Mean wait.
    Avg,
}

impl TestMetric {
    /// Stable name, as typed after `--metric`.
    pub fn name(self) -> &'static str {
        match self {
            TestMetric::Contended => "contentions",
            TestMetric::Wait => "wait",
            TestMetric::Avg => "avg",
        }
    }

    /// The JSON field it judges (`contended_per_s`).
    pub fn field(self) -> &'static str {
        match self {
            TestMetric::Contended => "contended_per_s",
            TestMetric::Wait => "wait_ns_per_s",
            TestMetric::Avg => "wait_avg_ns",
        }
    }

    /// How the text says it.
    pub fn label(self) -> &'static str {
        match self {
            TestMetric::Contended => "contentions/s",
            TestMetric::Wait => "wait/s",
            TestMetric::Avg => "mean wait",
        }
    }
}

/// Whether a row is on both sides.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Seen before and after.
    Both,
    /// Only after.
    New,
    /// Only before.
    Gone,
}

impl Status {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Both => "both",
            Status::New => "new",
            Status::Gone => "gone",
        }
    }
}

/// What the test says of a row.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Significantly less contention after.
    Better,
    /// Significantly more.
    Worse,
    /// Tested, not significant: not shown to differ (which is not "unchanged").
    WithinNoise,
    /// Not tested: a side has one round.
    OneRound,
    /// Not tested: fewer contentions per round than the threshold on both sides.
    TooFew,
    /// Not tested: no round-to-round spread on either side to judge against.
    NoSpread,
}

impl Verdict {
    /// Stable name (JSON, CSV, text).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::WithinNoise => "within noise",
            Verdict::OneRound => "one round",
            Verdict::TooFew => "too few",
            Verdict::NoSpread => "no spread",
        }
    }

    /// Significant either way.
    pub fn significant(self) -> bool {
        matches!(self, Verdict::Better | Verdict::Worse)
    }
}

/// One side of a row, summed over its rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Values {
    /// Rounds that saw the row.
    pub rounds_seen: usize,
    /// Contentions, all rounds.
    pub contended: u64,
    /// Contentions per second, per round (0 where a round did not see it).
    pub contended_per_s_rounds: Vec<f64>,
    /// Their mean.
    pub contended_per_s: f64,
    /// Wait per second (ns/s), per round.
    pub wait_ns_per_s_rounds: Vec<f64>,
    /// Their mean.
    pub wait_ns_per_s: f64,
    /// Mean wait over all rounds.
    pub wait_avg_ns: u64,
    /// 99th percentile wait over all rounds (the histograms merged).
    pub wait_p99_ns: u64,
    /// Mean hold, where releases were seen.
    pub hold_avg_ns: Option<u64>,
}

/// Changes, in percent of before (None where before is 0 or a side has no value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// Contentions per second.
    pub contended_per_s: Option<f64>,
    /// Wait per second.
    pub wait_ns_per_s: Option<f64>,
    /// Mean wait.
    pub wait_avg_ns: Option<f64>,
    /// p99 wait.
    pub wait_p99_ns: Option<f64>,
    /// Mean hold.
    pub hold_avg_ns: Option<f64>,
}

/// One row compared.
#[derive(Clone, Debug)]
pub struct DiffRow {
    /// Identity.
    pub key: RowKey,
    /// Lock type.
    pub lock_type: LockType,
    /// Mode.
    pub mode: LockMode,
    /// On both sides, or one.
    pub status: Status,
    /// Before, when seen.
    pub before: Option<Values>,
    /// After, when seen.
    pub after: Option<Values>,
    /// Changes in percent.
    pub change: Changes,
    /// Welch's two-sided p over rounds, when tested.
    pub p_value: Option<f64>,
    /// Holm-adjusted, when tested.
    pub p_holm: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
}

impl DiffRow {
    /// The change of `m`, in percent.
    pub fn change_of(&self, m: TestMetric) -> Option<f64> {
        match m {
            TestMetric::Contended => self.change.contended_per_s,
            TestMetric::Wait => self.change.wait_ns_per_s,
            TestMetric::Avg => self.change.wait_avg_ns,
        }
    }

    /// A short type label like the report's (`rwlock:R`).
    pub fn type_label(&self) -> String {
        crate::model::type_label(self.lock_type, self.mode)
    }

    /// The row's name column: the lock, `<- caller` with `--by caller`.
    pub fn title(&self) -> String {
        match &self.key.caller {
            Some(c) => format!("{} <- {c}", self.key.lock),
            None => self.key.lock.clone(),
        }
    }
}
