//! Two sides compared row by row: before -> after and the change of each
//! metric, and, with at least two rounds per side, Welch's t-test over the
//! rounds on one metric, Holm-corrected over every row tested, and a verdict.

use super::{
    row::{Changes, DiffRow, Status, TestMetric, Values, Verdict},
    side::{DiffBy, RowKey, Side, SideRow, avg_per_round},
    summary::SideSummary,
    welch::{holm, mean_var, welch},
};

/// How to compare.
#[derive(Clone, Debug)]
pub struct DiffOptions {
    /// What the test judges.
    pub metric: TestMetric,
    /// Significance threshold, on Holm-adjusted p-values.
    pub alpha: f64,
    /// Rows are tested only with at least this many contentions per round,
    /// on average, on one side at least.
    pub min_per_round: f64,
    /// Rows per lock or per caller.
    pub by: DiffBy,
    /// Keep the first N rows.
    pub top: Option<usize>,
}

/// Defaults of [`DiffOptions`].
pub mod defaults {
    /// Significance threshold.
    pub const ALPHA: f64 = 0.01;
    /// Contentions per round a row needs to be tested.
    pub const MIN_PER_ROUND: f64 = 20.0;
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            metric: TestMetric::default(),
            alpha: defaults::ALPHA,
            min_per_round: defaults::MIN_PER_ROUND,
            by: DiffBy::default(),
            top: None,
        }
    }
}

/// A whole comparison.
#[derive(Clone, Debug)]
pub struct Diff {
    /// The before side's facts.
    pub before: SideSummary,
    /// The after side's.
    pub after: SideSummary,
    /// How it was compared.
    pub options: DiffOptions,
    /// Rows tested (the Holm family's size).
    pub tested: usize,
    /// Rows, significant first (by adjusted p), then by the size of the change.
    pub rows: Vec<DiffRow>,
    /// Rows cut by `--top`.
    pub cut: usize,
    /// What the reader must know: differing setups, losses, power.
    pub notes: Vec<String>,
}

impl Diff {
    /// The kernels differ between the sides (usually the point).
    pub fn kernels_differ(&self) -> bool {
        self.before.kernels != self.after.kernels
    }

    /// Both sides have at least two rounds: p-values are computed.
    pub fn tests(&self) -> bool {
        self.before.rounds() >= 2 && self.after.rounds() >= 2
    }

    /// One line saying which test, on what, corrected how, and the threshold.
    pub fn method(&self) -> String {
        let o = &self.options;
        if !self.tests() {
            return format!(
                "no p-values: Welch's t-test over rounds needs at least 2 rounds per side (record --rounds N), \
                 there are {} before and {} after",
                self.before.rounds(),
                self.after.rounds()
            );
        }
        format!(
            "Welch's t-test (two-sided) on the log of {} per round, {} rounds before and {} after; Holm-corrected \
             over the {} {} with at least {} contentions per round on one side; significant when the corrected p < {}",
            o.metric.label(),
            self.before.rounds(),
            self.after.rounds(),
            self.tested,
            if o.by == DiffBy::Caller { "callers" } else { "locks" },
            o.min_per_round,
            o.alpha
        )
    }
}

fn pct(before: f64, after: f64) -> Option<f64> {
    (before > 0.0 && before.is_finite() && after.is_finite()).then(|| (after - before) / before * 100.0)
}

fn mean(x: &[f64]) -> f64 {
    if x.is_empty() { 0.0 } else { mean_var(x).0 }
}

fn values(side: &Side, row: &SideRow) -> Values {
    let contended_per_s_rounds = side.contended_per_s(Some(row));
    let wait_ns_per_s_rounds = side.wait_ns_per_s(Some(row));
    let wait = row.wait();
    Values {
        rounds_seen: row.cells.iter().flatten().count(),
        contended: row.contended(),
        contended_per_s: mean(&contended_per_s_rounds),
        contended_per_s_rounds,
        wait_ns_per_s: mean(&wait_ns_per_s_rounds),
        wait_ns_per_s_rounds,
        wait_avg_ns: wait.as_ref().map_or(0, |w| w.avg_ns()),
        wait_p99_ns: wait.as_ref().map_or(0, |w| w.quantile_ns(0.99)),
        hold_avg_ns: row.hold().map(|h| h.avg_ns()),
    }
}

fn changes(b: Option<&Values>, a: Option<&Values>) -> Changes {
    // A side that did not see the row had no contention: its rates are 0.
    let rate = |v: Option<&Values>, f: fn(&Values) -> f64| v.map_or(0.0, f);
    let both = |f: fn(&Values) -> f64| match (b, a) {
        (Some(b), Some(a)) => pct(f(b), f(a)),
        _ => None,
    };
    Changes {
        contended_per_s: pct(rate(b, |v| v.contended_per_s), rate(a, |v| v.contended_per_s)),
        wait_ns_per_s: pct(rate(b, |v| v.wait_ns_per_s), rate(a, |v| v.wait_ns_per_s)),
        wait_avg_ns: both(|v| v.wait_avg_ns as f64),
        wait_p99_ns: both(|v| v.wait_p99_ns as f64),
        hold_avg_ns: match (b.and_then(|v| v.hold_avg_ns), a.and_then(|v| v.hold_avg_ns)) {
            (Some(b), Some(a)) => pct(b as f64, a as f64),
            _ => None,
        },
    }
}

/// The per-round samples the test compares, on the log scale: contention
/// changes by factors (a patch halves it) and a storm's round-to-round
/// spread grows with its rate, so the logarithm makes the spread of busy and
/// quiet rows alike and the noise closer to normal. A round that did not see
/// the row is `ln(pseudo / seconds)`: one contention, or a microsecond of
/// wait, less than any round that saw it.
fn samples(
    metric: TestMetric,
    (before, b): (&Side, Option<&SideRow>),
    (after, a): (&Side, Option<&SideRow>),
) -> (Vec<f64>, Vec<f64>) {
    let count = |c: &super::side::Cell| c.wait.count() as f64;
    let wait = |c: &super::side::Cell| c.wait.total_ns() as f64;
    let ln_avg = |r| avg_per_round(r).into_iter().map(|v| v.max(1.0).ln()).collect::<Vec<f64>>();
    match metric {
        TestMetric::Contended => (before.log_rate(b, count, 1.0), after.log_rate(a, count, 1.0)),
        TestMetric::Wait => (before.log_rate(b, wait, 1_000.0), after.log_rate(a, wait, 1_000.0)),
        TestMetric::Avg => (ln_avg(b), ln_avg(a)),
    }
}

/// Compares `before` with `after`.
pub fn compare(before: &Side, after: &Side, options: &DiffOptions) -> Diff {
    let keys: std::collections::BTreeSet<&RowKey> = before.rows.keys().chain(after.rows.keys()).collect();
    let rounds = (before.rounds.len(), after.rounds.len());
    let mut rows = Vec::with_capacity(keys.len());
    let mut tested_p = Vec::new();
    for key in keys {
        let (b, a) = (before.rows.get(key), after.rows.get(key));
        let Some(any) = b.or(a) else { continue };
        let (bv, av) = (b.map(|r| values(before, r)), a.map(|r| values(after, r)));
        let status = match (b, a) {
            (Some(_), Some(_)) => Status::Both,
            (None, _) => Status::New,
            (_, None) => Status::Gone,
        };
        let per_round = |r: Option<&SideRow>, n: usize| r.map_or(0.0, |r| r.contended() as f64 / n.max(1) as f64);
        let busy = per_round(b, rounds.0).max(per_round(a, rounds.1));
        let (xs, ys) = samples(options.metric, (before, b), (after, a));
        let (verdict, p) = if rounds.0 < 2 || rounds.1 < 2 {
            (Verdict::OneRound, None)
        } else if busy < options.min_per_round || xs.len() < 2 || ys.len() < 2 {
            (Verdict::TooFew, None)
        } else {
            match welch(&xs, &ys) {
                Some(w) => {
                    tested_p.push((rows.len(), w.p));
                    (Verdict::WithinNoise, Some(w.p))
                }
                None => (Verdict::NoSpread, None),
            }
        };
        rows.push(DiffRow {
            key: key.clone(),
            lock_type: any.lock_type,
            mode: any.mode,
            status,
            change: changes(bv.as_ref(), av.as_ref()),
            before: bv,
            after: av,
            p_value: p,
            p_holm: None,
            verdict,
        });
    }
    let adjusted = holm(&tested_p.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    for ((i, _), adj) in tested_p.iter().zip(&adjusted) {
        let row = &mut rows[*i];
        row.p_holm = Some(*adj);
        if *adj < options.alpha {
            let (xs, ys) =
                samples(options.metric, (before, before.rows.get(&row.key)), (after, after.rows.get(&row.key)));
            row.verdict = if mean(&ys) > mean(&xs) { Verdict::Worse } else { Verdict::Better };
        }
    }
    let metric = options.metric;
    let size = |r: &DiffRow| {
        let v = |s: &Option<Values>| {
            s.as_ref().map_or(0.0, |v| match metric {
                TestMetric::Contended => v.contended_per_s,
                TestMetric::Wait => v.wait_ns_per_s,
                TestMetric::Avg => v.wait_avg_ns as f64 * v.contended_per_s,
            })
        };
        (v(&r.after) - v(&r.before)).abs()
    };
    rows.sort_by(|x, y| {
        let sig = |r: &DiffRow| if r.verdict.significant() { r.p_holm.unwrap_or(1.0) } else { 2.0 };
        sig(x).total_cmp(&sig(y)).then(size(y).total_cmp(&size(x))).then_with(|| x.key.cmp(&y.key))
    });
    let cut = options.top.map_or(0, |n| rows.len().saturating_sub(n));
    rows.truncate(rows.len() - cut);
    let (before_summary, after_summary) = (SideSummary::of(before), SideSummary::of(after));
    let notes = super::summary::notes(&before_summary, &after_summary);
    Diff {
        before: before_summary,
        after: after_summary,
        options: options.clone(),
        tested: tested_p.len(),
        rows,
        cut,
        notes,
    }
}
