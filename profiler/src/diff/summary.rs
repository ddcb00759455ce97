//! What a side's recordings say about themselves, for the comparison's
//! header: kernels, backends, commands, durations; and the notes a reader
//! must see before trusting the table (the kernels differ, the sides were
//! measured differently, events were lost, few rounds).

use super::side::{RoundInfo, Side};

/// One side's facts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SideSummary {
    /// The recordings, in order.
    pub files: Vec<String>,
    /// Each round's seconds.
    pub durations_s: Vec<f64>,
    /// Kernel releases, each once, in order of first appearance.
    pub kernels: Vec<String>,
    /// Backends and modes (`tp_btf aggregate`), each once.
    pub setups: Vec<String>,
    /// Host names, each once.
    pub hostnames: Vec<String>,
    /// Commands (shell lines), each once.
    pub commands: Vec<String>,
    /// Rounds whose command did not exit 0: (round from 1, status).
    pub failed: Vec<(usize, String)>,
    /// Filter sets, each once (`cgroup=/x pid=3`, or empty).
    pub filters: Vec<String>,
    /// Rounds that lost events: (round from 1, counters).
    pub losses: Vec<(usize, String)>,
}

fn distinct(rounds: &[RoundInfo], f: impl Fn(&RoundInfo) -> Option<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in rounds.iter().filter_map(f) {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

impl SideSummary {
    /// The facts of `side`.
    pub fn of(side: &Side) -> SideSummary {
        let r = &side.rounds;
        SideSummary {
            files: r.iter().map(|r| r.file.clone()).collect(),
            durations_s: side.durations(),
            kernels: distinct(r, |r| Some(if r.kernel.is_empty() { "?".into() } else { r.kernel.clone() })),
            setups: distinct(r, |r| Some(format!("{} {}", r.backend, r.mode).trim().to_string())),
            hostnames: distinct(r, |r| (!r.hostname.is_empty()).then(|| r.hostname.clone())),
            commands: distinct(r, |r| r.command.clone()),
            failed: r
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.command_status.clone().filter(|s| s != "exit 0").map(|s| (i + 1, s)))
                .collect(),
            filters: distinct(r, |r| Some(r.filters.join(" "))),
            losses: r
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.losses.is_empty())
                .map(|(i, r)| (i + 1, r.losses.join(" ")))
                .collect(),
        }
    }

    /// Rounds.
    pub fn rounds(&self) -> usize {
        self.files.len()
    }

    /// Mean seconds per round.
    pub fn mean_duration_s(&self) -> f64 {
        self.durations_s.iter().sum::<f64>() / self.durations_s.len().max(1) as f64
    }

    /// `5 rounds of 2.00 s` (`1 recording of 2.00 s`; `3 rounds of 1.9-2.1 s`).
    pub fn rounds_phrase(&self) -> String {
        let n = self.rounds();
        let (lo, hi) = self.durations_s.iter().fold((f64::MAX, 0.0f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        let secs = if n == 0 {
            "0 s".to_string()
        } else if hi - lo < 0.01 {
            format!("{:.2} s", self.mean_duration_s())
        } else {
            format!("{lo:.2}-{hi:.2} s")
        };
        match n {
            1 => format!("1 recording of {secs}"),
            n => format!("{n} rounds of {secs}"),
        }
    }

    /// The kernels, joined.
    pub fn kernel_text(&self) -> String {
        self.kernels.join(", ")
    }
}

/// What a reader must see before the table.
pub fn notes(before: &SideSummary, after: &SideSummary) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, s) in [("before", before), ("after", after)] {
        if s.kernels.len() > 1 {
            notes.push(format!("the {name} rounds ran on different kernels: {}", s.kernel_text()));
        }
        if s.setups.len() > 1 {
            notes.push(format!("the {name} rounds were measured differently: {}", s.setups.join("; ")));
        }
        for (round, status) in &s.failed {
            notes.push(format!("{name} round {round}: the command ended with {status}"));
        }
        for (round, lost) in &s.losses {
            notes.push(format!("{name} round {round} lost events ({lost}): its counts are low"));
        }
    }
    if before.setups != after.setups && before.setups.len() == 1 && after.setups.len() == 1 {
        notes.push(format!(
            "the sides were measured differently ({} -> {}): part of a change may be the measurement's",
            before.setups.join(""),
            after.setups.join("")
        ));
    }
    if before.filters != after.filters {
        notes.push(format!(
            "the sides were filtered differently: [{}] -> [{}]",
            before.filters.join("; "),
            after.filters.join("; ")
        ));
    }
    if before.hostnames != after.hostnames && !before.hostnames.is_empty() && !after.hostnames.is_empty() {
        notes.push(format!("hosts differ: {} -> {}", before.hostnames.join(", "), after.hostnames.join(", ")));
    }
    let (bn, an) = (before.rounds(), after.rounds());
    if bn >= 2 && an >= 2 && bn.min(an) <= 3 {
        notes.push(format!(
            "with {} rounds on a side only large, steady changes can reach significance: \"within noise\" means \
             not shown to differ, not unchanged (more rounds: more power)",
            bn.min(an)
        ));
    }
    notes
}
