//! BENCHMARKS.md's incident section: what armed triggers cost the pipe
//! storm when none fires (lockprof with and without them, untraced), and
//! the memory of the incident ring at 100k keys as the share of keys that
//! grow each second rises.

use std::fmt::Write as _;

use serde_json::Value;

use super::{
    WorkloadRuns,
    markdown::{self, pct, rows},
};

/// The section's heading (`cargo xtask bench --incidents-only` replaces it).
pub const INCIDENT_HEADING: &str = "## Incident triggers: what they cost";

/// Where the section goes in a document that has none yet.
const BEFORE: [&str; 2] = ["## Userspace and start-up", "## Design notes"];

/// The triggers armed in the rotation: one of each kind, none of which
/// fires on a pipe storm (the rate and percentile ones build their window
/// every second: the most work an armed trigger does).
pub const TRIGGERS: [&str; 3] = ["wait>=10s", "contentions>=1G/s", "p99>=10s/5s"];

fn n(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// The section, from the rotation and the ring measurements.
pub fn render(facts: &str, w: &WorkloadRuns, rings: &[Value]) -> String {
    let mut md = format!("{INCIDENT_HEADING}\n\n{facts}\n\n");
    let _ = writeln!(
        md,
        "Armed triggers that do not fire: `lockprof record` with `{}` against lockprof alone and untraced, \
{} storm, {} rounds in rotation (medians). Target: no measurable cost.\n",
        TRIGGERS.iter().map(|t| format!("--trigger '{t}'")).collect::<Vec<_>>().join(" "),
        w.name,
        w.samples.first().map_or(0, Vec::len)
    );
    let _ = writeln!(md, "| tracer | ops/s | throughput | spread |\n|---|---|---|---|");
    for (t, r) in w.tracers.iter().zip(rows(w)) {
        let _ = writeln!(md, "| {} | {:.0} | {} | {:.0}% |", t.label(), r.ops, pct(r.throughput), r.spread_pct);
    }
    let _ = writeln!(
        md,
        "\nThe incident ring at 100k distinct (lock, stack) keys, every key kept, the default `--before 30s` \
(a snapshot every second for the seconds the triggers read, one every 3.75 s before that) and its 64 MiB \
budget (`lockprof-bench incident-ring`): the rows only the ring still holds, as the share of keys that grow \
each second rises. A slot of a quiet second costs nothing; beyond the budget the oldest slots go (counted; \
a window then starts later than `--before`).\n"
    );
    let _ = writeln!(
        md,
        "| keys growing per second | slots kept | estimated ring bytes | RSS growth | slots dropped | slowest push |\n\
|---|---|---|---|---|---|"
    );
    for r in rings {
        let _ = writeln!(
            md,
            "| {:.0}% | {:.0} | {:.1} MiB | {:.1} MiB | {:.0} | {:.1} ms |",
            n(r, "churn_pct"),
            n(r, "slots"),
            n(r, "ring_bytes_estimated") / 1048576.0,
            n(r, "rss_growth_kib") / 1024.0,
            n(r, "slots_dropped"),
            n(r, "push_ms_max"),
        );
    }
    let _ = writeln!(md, "\n`cargo xtask bench --incidents-only` regenerates this section alone.\n");
    md
}

/// `doc` with `section` in place of its incident section (or added).
pub fn put(doc: &str, section: &str) -> String {
    markdown::put_section(doc, INCIDENT_HEADING, section, &BEFORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_goes_before_the_design_notes_and_replaces_itself() {
        let doc = "# B\n\n## Design notes\n\nx\n";
        let one = put(doc, &format!("{INCIDENT_HEADING}\n\nfirst\n\n"));
        assert!(one.find("first").unwrap_or(usize::MAX) < one.find("## Design notes").unwrap_or(0), "{one}");
        let two = put(&one, &format!("{INCIDENT_HEADING}\n\nsecond\n\n"));
        assert!(two.contains("second") && !two.contains("first"), "{two}");
    }
}
