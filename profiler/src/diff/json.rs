//! The comparison as JSON (`lockprof-diff/1`, documented in the README) and
//! as CSV (one row per lock or caller, header first).

use serde_json::{Value, json};

use super::{
    compare::Diff,
    row::{DiffRow, Values},
    summary::SideSummary,
};
use crate::report::csv_field;

/// Schema identifier of the JSON comparison.
pub const SCHEMA: &str = "lockprof-diff/1";

fn side_json(s: &SideSummary) -> Value {
    json!({
        "files": s.files,
        "rounds": s.rounds(),
        "duration_s": s.durations_s,
        "kernels": s.kernels,
        "setups": s.setups,
        "hostnames": s.hostnames,
        "commands": s.commands,
        "failed_rounds": s.failed.iter().map(|(r, st)| json!({"round": r, "status": st})).collect::<Vec<_>>(),
        "lost_rounds": s.losses.iter().map(|(r, l)| json!({"round": r, "counters": l})).collect::<Vec<_>>(),
    })
}

/// A side's values; a side that did not see the row had no contention in
/// any of its `rounds`: its rates are 0, its per-wait values null.
fn side_values(v: Option<&Values>, rounds: usize) -> Value {
    match v {
        Some(v) => values_json(v),
        None => json!({
            "rounds_seen": 0,
            "contended": 0,
            "contended_per_s": 0.0,
            "contended_per_s_rounds": vec![0.0; rounds],
            "wait_ns_per_s": 0.0,
            "wait_ns_per_s_rounds": vec![0.0; rounds],
            "wait_avg_ns": null,
            "wait_p99_ns": null,
            "hold_avg_ns": null,
        }),
    }
}

fn values_json(v: &Values) -> Value {
    json!({
        "rounds_seen": v.rounds_seen,
        "contended": v.contended,
        "contended_per_s": v.contended_per_s,
        "contended_per_s_rounds": v.contended_per_s_rounds,
        "wait_ns_per_s": v.wait_ns_per_s,
        "wait_ns_per_s_rounds": v.wait_ns_per_s_rounds,
        "wait_avg_ns": v.wait_avg_ns,
        "wait_p99_ns": v.wait_p99_ns,
        "hold_avg_ns": v.hold_avg_ns,
    })
}

fn row_json(d: &Diff, r: &DiffRow) -> Value {
    let c = &r.change;
    json!({
        "name": r.key.lock,
        "type": r.key.lock_type,
        "mode": r.key.mode,
        "caller": r.key.caller,
        "status": r.status.name(),
        "before": side_values(r.before.as_ref(), d.before.rounds()),
        "after": side_values(r.after.as_ref(), d.after.rounds()),
        "change_pct": r.change_of(d.options.metric),
        "changes_pct": {
            "contended_per_s": c.contended_per_s,
            "wait_ns_per_s": c.wait_ns_per_s,
            "wait_avg_ns": c.wait_avg_ns,
            "wait_p99_ns": c.wait_p99_ns,
            "hold_avg_ns": c.hold_avg_ns,
        },
        "p_value": r.p_value,
        "p_holm": r.p_holm,
        "significant": r.verdict.significant(),
        "verdict": r.verdict.name(),
    })
}

/// The comparison as a JSON value.
pub fn to_json(d: &Diff) -> Value {
    let o = &d.options;
    json!({
        "schema": SCHEMA,
        "by": o.by.name(),
        "test": {
            "name": "welch_t",
            "description": "Welch's unequal-variances t-test, two-sided, on the logarithms of the per-round values",
            "scale": "log",
            "metric": o.metric.field(),
            "alpha": o.alpha,
            "correction": "holm",
            "tested": d.tested,
            "min_contended_per_round": o.min_per_round,
            "available": d.tests(),
        },
        "kernels_differ": d.kernels_differ(),
        "before": side_json(&d.before),
        "after": side_json(&d.after),
        "notes": d.notes,
        "locks": d.rows.iter().map(|r| row_json(d, r)).collect::<Vec<_>>(),
        "rows_cut": d.cut,
    })
}

/// The JSON comparison, pretty-printed with a trailing newline.
pub fn render_json(d: &Diff) -> String {
    let mut s = serde_json::to_string_pretty(&to_json(d)).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

const CSV_HEADER: [&str; 26] = [
    "lock",
    "type",
    "mode",
    "caller",
    "status",
    "before_rounds",
    "after_rounds",
    "before_contended_per_s",
    "after_contended_per_s",
    "contended_per_s_change_pct",
    "before_wait_ns_per_s",
    "after_wait_ns_per_s",
    "wait_ns_per_s_change_pct",
    "before_wait_avg_ns",
    "after_wait_avg_ns",
    "wait_avg_change_pct",
    "before_wait_p99_ns",
    "after_wait_p99_ns",
    "wait_p99_change_pct",
    "before_hold_avg_ns",
    "after_hold_avg_ns",
    "hold_avg_change_pct",
    "metric",
    "p_value",
    "p_holm",
    "verdict",
];

/// The comparison as CSV: one row per lock (or caller), header first.
pub fn render_csv(d: &Diff, sep: char) -> String {
    let num = |v: Option<f64>| {
        v.map_or(String::new(), |v| format!("{v:.6}").trim_end_matches('0').trim_end_matches('.').to_string())
    };
    let int = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    let s = sep.to_string();
    let mut out = CSV_HEADER.join(&s);
    out.push('\n');
    for r in &d.rows {
        let (b, a) = (r.before.as_ref(), r.after.as_ref());
        // A side that did not see the row had no contention at all.
        let rate = |v: Option<&Values>, f: fn(&Values) -> f64| num(Some(v.map_or(0.0, f)));
        let c = &r.change;
        let fields = [
            csv_field(&r.key.lock, sep),
            r.key.lock_type.to_string(),
            r.key.mode.to_string(),
            csv_field(r.key.caller.as_deref().unwrap_or(""), sep),
            r.status.name().to_string(),
            d.before.rounds().to_string(),
            d.after.rounds().to_string(),
            rate(b, |v| v.contended_per_s),
            rate(a, |v| v.contended_per_s),
            num(c.contended_per_s),
            rate(b, |v| v.wait_ns_per_s),
            rate(a, |v| v.wait_ns_per_s),
            num(c.wait_ns_per_s),
            int(b.map(|v| v.wait_avg_ns)),
            int(a.map(|v| v.wait_avg_ns)),
            num(c.wait_avg_ns),
            int(b.map(|v| v.wait_p99_ns)),
            int(a.map(|v| v.wait_p99_ns)),
            num(c.wait_p99_ns),
            int(b.and_then(|v| v.hold_avg_ns)),
            int(a.and_then(|v| v.hold_avg_ns)),
            num(c.hold_avg_ns),
            d.options.metric.field().to_string(),
            r.p_value.map_or(String::new(), |p| format!("{p:e}")),
            r.p_holm.map_or(String::new(), |p| format!("{p:e}")),
            csv_field(r.verdict.name(), sep),
        ];
        out.push_str(&fields.join(&s));
        out.push('\n');
    }
    out
}
