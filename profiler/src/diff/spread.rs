//! The spread of one side's rounds (`record --rounds N`): per lock, the
//! mean of contentions/s and wait/s over the rounds, their coefficient of
//! variation and their range: how much one round of this workload says.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{
    format::{fmt_rate, fmt_wait_rate},
    side::{RowKey, Side},
    summary::SideSummary,
    welch::mean_var,
};
use crate::{model::type_label, report::csv_field};

/// Values over rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    /// One per round.
    pub values: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Their standard deviation (n - 1).
    pub sd: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`.
    pub fn of(values: Vec<f64>) -> Spread {
        let (mean, var) = if values.is_empty() { (0.0, 0.0) } else { mean_var(&values) };
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Spread { mean, sd: var.sqrt(), min: min.min(max), max, values }
    }

    /// Standard deviation over mean, in percent (None for one value or a zero mean).
    pub fn cv_pct(&self) -> Option<f64> {
        (self.values.len() > 1 && self.mean > 0.0).then(|| self.sd / self.mean * 100.0)
    }

    fn json(&self) -> Value {
        json!({"mean": self.mean, "sd": self.sd, "cv_pct": self.cv_pct(), "min": self.min, "max": self.max, "rounds": self.values})
    }
}

/// One lock over the rounds.
#[derive(Clone, Debug)]
pub struct SpreadRow {
    /// Identity.
    pub key: RowKey,
    /// `rwlock:R`.
    pub type_label: String,
    /// Rounds that saw it.
    pub rounds_seen: usize,
    /// Contentions per second.
    pub contended_per_s: Spread,
    /// Wait per second (ns/s).
    pub wait_ns_per_s: Spread,
}

/// A set of rounds and its spread.
#[derive(Clone, Debug)]
pub struct Rounds {
    /// The rounds' facts.
    pub summary: SideSummary,
    /// Rows by mean wait per second, most first.
    pub rows: Vec<SpreadRow>,
    /// Rows cut by `--top`.
    pub cut: usize,
}

impl Rounds {
    /// The spread of `side`'s rows, the first `top`.
    pub fn of(side: &Side, top: Option<usize>) -> Rounds {
        let mut rows: Vec<SpreadRow> = side
            .rows
            .iter()
            .map(|(k, r)| SpreadRow {
                key: k.clone(),
                type_label: type_label(r.lock_type, r.mode),
                rounds_seen: r.cells.iter().flatten().count(),
                contended_per_s: Spread::of(side.contended_per_s(Some(r))),
                wait_ns_per_s: Spread::of(side.wait_ns_per_s(Some(r))),
            })
            .collect();
        rows.sort_by(|a, b| b.wait_ns_per_s.mean.total_cmp(&a.wait_ns_per_s.mean).then_with(|| a.key.cmp(&b.key)));
        let cut = top.map_or(0, |n| rows.len().saturating_sub(n));
        rows.truncate(rows.len() - cut);
        Rounds { summary: SideSummary::of(side), rows, cut }
    }
}

fn cv(s: &Spread) -> String {
    s.cv_pct().map_or_else(|| "-".into(), |c| format!("{c:.1}%"))
}

/// The spread as text.
pub fn render_text(r: &Rounds) -> String {
    let s = &r.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "lockprof: {} (kernel {}, {}){}",
        s.rounds_phrase(),
        s.kernel_text(),
        s.setups.join("; "),
        s.commands.first().map_or(String::new(), |c| format!(", command `{c}`"))
    );
    let _ = writeln!(
        out,
        "per-round spread: the mean over the rounds, the coefficient of variation (sd / mean) and the range; \
         a round that did not see a lock counts 0"
    );
    for (round, st) in &s.failed {
        let _ = writeln!(out, "note: round {round}: the command ended with {st}");
    }
    for (round, lost) in &s.losses {
        let _ = writeln!(out, "note: round {round} lost events ({lost})");
    }
    out.push('\n');
    let range = |sp: &Spread, f: fn(f64) -> String| format!("{}-{}", f(sp.min), f(sp.max));
    let cells: Vec<[String; 8]> = r
        .rows
        .iter()
        .map(|row| {
            let (c, w) = (&row.contended_per_s, &row.wait_ns_per_s);
            [
                fmt_rate(c.mean),
                cv(c),
                range(c, fmt_rate),
                fmt_wait_rate(w.mean),
                cv(w),
                range(w, fmt_wait_rate),
                format!("{}/{}", row.rounds_seen, s.rounds()),
                row.type_label.clone(),
            ]
        })
        .collect();
    let titles = ["contentions/s", "cv", "range", "wait/s", "cv", "range", "rounds", "type"];
    let widths: Vec<usize> =
        (0..8).map(|i| cells.iter().map(|c| c[i].len()).max().unwrap_or(0).max(titles[i].len())).collect();
    let line = |c: [&str; 8], name: &str| {
        let mut l = String::new();
        for (i, v) in c.iter().enumerate() {
            let w = widths[i];
            if i == 7 {
                let _ = write!(l, "{v:<w$}  ");
            } else {
                let _ = write!(l, "{v:>w$}  ");
            }
        }
        l.push_str(name);
        l.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(titles, "lock"));
    for (c, row) in cells.iter().zip(&r.rows) {
        let _ = writeln!(out, "{}", line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7]], &row.key.lock));
    }
    if r.cut > 0 {
        let _ = writeln!(out, "(+{} more locks; --top cuts them)", r.cut);
    }
    out
}

/// The spread as JSON (`lockprof-rounds/1`).
pub fn render_json(r: &Rounds) -> String {
    let s = &r.summary;
    let v = json!({
        "schema": "lockprof-rounds/1",
        "rounds": s.rounds(),
        "files": s.files,
        "duration_s": s.durations_s,
        "kernels": s.kernels,
        "setups": s.setups,
        "commands": s.commands,
        "failed_rounds": s.failed.iter().map(|(n, st)| json!({"round": n, "status": st})).collect::<Vec<_>>(),
        "lost_rounds": s.losses.iter().map(|(n, l)| json!({"round": n, "counters": l})).collect::<Vec<_>>(),
        "locks": r.rows.iter().map(|row| json!({
            "name": row.key.lock,
            "type": row.key.lock_type,
            "mode": row.key.mode,
            "rounds_seen": row.rounds_seen,
            "contended_per_s": row.contended_per_s.json(),
            "wait_ns_per_s": row.wait_ns_per_s.json(),
        })).collect::<Vec<_>>(),
    });
    let mut out = serde_json::to_string_pretty(&v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    out.push('\n');
    out
}

/// The spread as CSV, one row per lock.
pub fn render_csv(r: &Rounds, sep: char) -> String {
    let s = sep.to_string();
    let head = [
        "lock",
        "type",
        "mode",
        "rounds",
        "rounds_seen",
        "contended_per_s_mean",
        "contended_per_s_cv_pct",
        "contended_per_s_min",
        "contended_per_s_max",
        "wait_ns_per_s_mean",
        "wait_ns_per_s_cv_pct",
        "wait_ns_per_s_min",
        "wait_ns_per_s_max",
    ];
    let mut out = head.join(&s);
    out.push('\n');
    let num = |v: f64| format!("{v:.3}");
    for row in &r.rows {
        let (c, w) = (&row.contended_per_s, &row.wait_ns_per_s);
        let opt = |v: Option<f64>| v.map_or(String::new(), num);
        let fields = [
            csv_field(&row.key.lock, sep),
            row.key.lock_type.to_string(),
            row.key.mode.to_string(),
            r.summary.rounds().to_string(),
            row.rounds_seen.to_string(),
            num(c.mean),
            opt(c.cv_pct()),
            num(c.min),
            num(c.max),
            num(w.mean),
            opt(w.cv_pct()),
            num(w.min),
            num(w.max),
        ];
        out.push_str(&fields.join(&s));
        out.push('\n');
    }
    out
}
