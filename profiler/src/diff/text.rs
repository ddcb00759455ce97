//! The comparison as text (a terminal table, perf-like: numbers first, the
//! lock last) and as Markdown (a table to paste into a mail or a commit).

use std::fmt::Write as _;

use super::{
    compare::Diff,
    format::{files, fmt_p, fmt_rate, fmt_wait_rate, pair, rate_change, value_change},
    row::{DiffRow, Values},
};
use crate::report::fmt_ns;

/// The cells of one row, before layout.
struct Cells {
    contended: String,
    contended_change: String,
    wait: String,
    wait_change: String,
    avg: String,
    avg_change: String,
    p99: String,
    p99_change: String,
    hold: String,
    hold_change: String,
    p: String,
    verdict: String,
    kind: String,
    title: String,
}

fn cells(r: &DiffRow, arrow: &str) -> Cells {
    let side = |v: &Option<Values>, f: &dyn Fn(&Values) -> String| v.as_ref().map(f);
    // A side that did not see the row had 0 contentions and 0 wait.
    let rate =
        |v: &Option<Values>, f: &dyn Fn(&Values) -> f64, fmt: fn(f64) -> String| Some(fmt(v.as_ref().map_or(0.0, f)));
    Cells {
        contended: pair(
            rate(&r.before, &|v| v.contended_per_s, fmt_rate),
            rate(&r.after, &|v| v.contended_per_s, fmt_rate),
            arrow,
        ),
        contended_change: rate_change(r, r.change.contended_per_s),
        wait: pair(
            rate(&r.before, &|v| v.wait_ns_per_s, fmt_wait_rate),
            rate(&r.after, &|v| v.wait_ns_per_s, fmt_wait_rate),
            arrow,
        ),
        wait_change: rate_change(r, r.change.wait_ns_per_s),
        avg: pair(side(&r.before, &|v| fmt_ns(v.wait_avg_ns)), side(&r.after, &|v| fmt_ns(v.wait_avg_ns)), arrow),
        avg_change: value_change(r.change.wait_avg_ns),
        p99: pair(side(&r.before, &|v| fmt_ns(v.wait_p99_ns)), side(&r.after, &|v| fmt_ns(v.wait_p99_ns)), arrow),
        p99_change: value_change(r.change.wait_p99_ns),
        hold: pair(
            r.before.as_ref().and_then(|v| v.hold_avg_ns).map(fmt_ns),
            r.after.as_ref().and_then(|v| v.hold_avg_ns).map(fmt_ns),
            arrow,
        ),
        hold_change: value_change(r.change.hold_avg_ns),
        p: r.p_holm.map_or_else(|| "-".into(), fmt_p),
        verdict: r.verdict.name().into(),
        kind: r.type_label(),
        title: r.title(),
    }
}

/// Whether any row has hold times (then the hold columns are shown).
fn has_holds(d: &Diff) -> bool {
    d.rows.iter().any(|r| [&r.before, &r.after].iter().any(|v| v.as_ref().is_some_and(|v| v.hold_avg_ns.is_some())))
}

/// The lines above the table: sides, kernels, the method, notes.
fn header_lines(d: &Diff, code: &dyn Fn(&str) -> String) -> Vec<String> {
    let (b, a) = (&d.before, &d.after);
    let mut lines = vec![format!("before: {} -> after: {}", b.rounds_phrase(), a.rounds_phrase())];
    if d.kernels_differ() {
        lines.push(format!("kernels differ: {} -> {}", b.kernel_text(), a.kernel_text()));
    } else {
        lines.push(format!("kernel {} on both sides", b.kernel_text()));
    }
    for (name, s) in [("before", b), ("after", a)] {
        let what = match s.commands.as_slice() {
            [] => String::new(),
            cmds => format!("{} ", cmds.iter().map(|c| code(c)).collect::<Vec<_>>().join(", ")),
        };
        lines.push(format!("{name}: {what}[{}]", files(&s.files)));
    }
    lines.push(format!("test: {}", d.method()));
    lines.extend(d.notes.iter().map(|n| format!("note: {n}")));
    lines
}

/// The text table.
pub fn render_text(d: &Diff) -> String {
    let mut out = String::new();
    let header = header_lines(d, &|c| format!("`{c}`"));
    let _ = writeln!(out, "lockprof diff: {}", header[0]);
    for l in &header[1..] {
        let _ = writeln!(out, "{l}");
    }
    out.push('\n');
    if d.rows.is_empty() {
        out.push_str("no lock contention on either side\n");
        return out;
    }
    let holds = has_holds(d);
    let rows: Vec<Cells> = d.rows.iter().map(|r| cells(r, "->")).collect();
    let w = |f: fn(&Cells) -> &String, title: &str| rows.iter().map(|c| f(c).len()).max().unwrap_or(0).max(title.len());
    let widths = [
        w(|c| &c.contended, "contentions/s"),
        w(|c| &c.contended_change, "change"),
        w(|c| &c.wait, "wait/s"),
        w(|c| &c.wait_change, "change"),
        w(|c| &c.avg, "avg wait"),
        w(|c| &c.avg_change, "change"),
        w(|c| &c.p99, "p99 wait"),
        w(|c| &c.p99_change, "change"),
        w(|c| &c.hold, "avg hold"),
        w(|c| &c.hold_change, "change"),
        w(|c| &c.p, "p (Holm)"),
        w(|c| &c.verdict, "verdict"),
        w(|c| &c.kind, "type"),
    ];
    let line = |c: [&str; 14]| {
        let mut s = String::new();
        for (i, (v, wd)) in c.iter().zip(widths).enumerate() {
            if (8..10).contains(&i) && !holds {
                continue;
            }
            // Numbers right-aligned, words left-aligned.
            if i >= 11 {
                let _ = write!(s, "{v:<wd$}  ");
            } else {
                let _ = write!(s, "{v:>wd$}  ");
            }
        }
        s.push_str(c[13]);
        s.trim_end().to_string()
    };
    let titles = [
        "contentions/s",
        "change",
        "wait/s",
        "change",
        "avg wait",
        "change",
        "p99 wait",
        "change",
        "avg hold",
        "change",
        "p (Holm)",
        "verdict",
        "type",
        "lock",
    ];
    let _ = writeln!(out, "{}", line(titles));
    for c in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([
                &c.contended,
                &c.contended_change,
                &c.wait,
                &c.wait_change,
                &c.avg,
                &c.avg_change,
                &c.p99,
                &c.p99_change,
                &c.hold,
                &c.hold_change,
                &c.p,
                &c.verdict,
                &c.kind,
                &c.title,
            ])
        );
    }
    if d.cut > 0 {
        let _ = writeln!(out, "(+{} more rows; --top cuts them)", d.cut);
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The Markdown table, with the header as a short list above it.
pub fn render_markdown(d: &Diff) -> String {
    let mut out = String::new();
    let header = header_lines(d, &|c| format!("`{c}`"));
    let _ = writeln!(out, "**lockprof diff**: {}\n", header[0]);
    for l in &header[1..] {
        let _ = writeln!(out, "- {}", md_escape(l));
    }
    out.push('\n');
    if d.rows.is_empty() {
        out.push_str("No lock contention on either side.\n");
        return out;
    }
    let holds = has_holds(d);
    let mut titles = vec!["lock", "type", "contentions/s", "change", "wait/s", "change", "avg wait", "change"];
    titles.extend(["p99 wait", "change"]);
    if holds {
        titles.extend(["avg hold", "change"]);
    }
    titles.extend(["p (Holm)", "verdict"]);
    let _ = writeln!(out, "| {} |", titles.join(" | "));
    let align: Vec<&str> =
        titles.iter().enumerate().map(|(i, _)| if i < 2 || i + 1 == titles.len() { "---" } else { "---:" }).collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for r in &d.rows {
        let c = cells(r, "→");
        let mut v = vec![md_escape(&c.title), c.kind, c.contended, c.contended_change, c.wait, c.wait_change];
        v.extend([c.avg, c.avg_change, c.p99, c.p99_change]);
        if holds {
            v.extend([c.hold, c.hold_change]);
        }
        let verdict = if r.verdict.significant() { format!("**{}**", c.verdict) } else { c.verdict };
        v.extend([c.p, verdict]);
        let _ = writeln!(out, "| {} |", v.join(" | "));
    }
    if d.cut > 0 {
        let _ = writeln!(out, "\n(+{} more rows)", d.cut);
    }
    out
}
