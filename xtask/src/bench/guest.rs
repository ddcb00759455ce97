//! The guest-kernel part of the bench: what the host cannot show (its
//! kernel has no kprobes and refuses fentry), measured inside the default
//! guest kernel under QEMU: the pipe storm untraced, with lockprof timing
//! waits only, and with hold timing (release probes) on top. TCG makes the
//! absolute numbers meaningless; the ratios, taken round by round in
//! rotating order like the host rotation, still compare.

use std::{fmt::Write as _, time::Duration};

use anyhow::{Context as _, Result, bail};
use profiler_common::counter;
use serde_json::Value;

use super::stats::stats;

/// Guest modes: label and `lockprof record` arguments (`None`: untraced).
const MODES: &[(&str, Option<&str>)] = &[
    ("untraced", None),
    ("lockprof --no-holds --no-owners", Some("--no-holds --no-owners")),
    ("lockprof --no-holds", Some("--no-holds")),
    ("lockprof (holds timed, owners read)", Some("")),
];

/// The guest's script: `rounds` rounds of every mode in rotating order,
/// each a `secs`-second pipe storm; prints one `LOCKPROF-BENCH` line per
/// run and, for traced runs, lockprof's JSON between markers.
fn script(rounds: usize, secs: f64) -> String {
    let mut s = format!(
        r#"storm() {{ /lockprof stress pipe --threads 4 --duration {secs} | grep ' ops in '; }}
untraced() {{ echo "LOCKPROF-BENCH label='$1' round=$2 $(storm)"; }}
traced() {{
  /lockprof record --no-yield-to $3 --format json > /tmp/out.json 2> /tmp/err & P=$!
  i=0
  while ! grep -q 'recording with' /tmp/err; do
    if ! kill -0 $P 2>/dev/null || [ $i -gt 900 ]; then
      echo "LOCKPROF-BENCH-ERROR label='$1' round=$2 $(tail -n 3 /tmp/err | tr '
' ' ')"
      kill $P 2>/dev/null; wait $P; return
    fi
    sleep 0.2; i=$((i+1))
  done
  echo "LOCKPROF-BENCH label='$1' round=$2 $(storm)"
  kill -TERM $P; wait $P
  echo LOCKPROF-BENCH-JSON-BEGIN; cat /tmp/out.json; echo; echo LOCKPROF-BENCH-JSON-END
}}
"#
    );
    let n = MODES.len();
    for round in 0..rounds {
        for k in 0..n {
            let (label, args) = MODES[(round + k) % n];
            let _ = match args {
                None => writeln!(s, "untraced '{label}' {round}"),
                Some(a) => writeln!(s, "traced '{label}' {round} '{a}'"),
            };
        }
    }
    s.push_str("echo LOCKPROF-BENCH-DONE\n");
    s
}

/// One run in the guest.
#[derive(Debug, Clone)]
pub struct GuestSample {
    /// Mode label.
    pub label: String,
    /// Round.
    pub round: usize,
    /// Workload ops/s.
    pub ops_per_s: f64,
    /// lockprof's JSON (traced runs).
    pub json: Option<Value>,
}

/// What came back from the guest.
pub struct GuestRuns {
    /// Kernel package.
    pub package: String,
    /// Kernel release.
    pub release: String,
    /// Every run.
    pub samples: Vec<GuestSample>,
    /// Runs that failed to start, with lockprof's last words.
    pub errors: Vec<String>,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    let rest = &line[at..];
    if let Some(quoted) = rest.strip_prefix('\'') {
        return quoted.split('\'').next();
    }
    rest.split_whitespace().next()
}

/// Parses the console: samples in order, each traced run followed by its JSON.
pub fn parse(lines: &[String]) -> Result<(Vec<GuestSample>, Vec<String>)> {
    let mut samples: Vec<GuestSample> = Vec::new();
    let mut errors = Vec::new();
    let mut json: Option<String> = None;
    let mut done = false;
    for raw in lines {
        let raw = raw.trim_end_matches('\r');
        if let Some(buf) = json.as_mut() {
            let line = raw;
            if line.trim() == "LOCKPROF-BENCH-JSON-END" {
                match serde_json::from_str::<Value>(buf) {
                    Ok(v) => {
                        if let Some(last) = samples.last_mut() {
                            last.json = Some(v);
                        }
                    }
                    // A run whose lockprof wrote no report: shown, not used.
                    Err(e) => {
                        if let Some(last) = samples.pop() {
                            errors.push(format!(
                                "label='{}' round={} lockprof wrote no JSON report ({e}): run left out",
                                last.label, last.round
                            ));
                        }
                    }
                }
                json = None;
            } else {
                buf.push_str(line);
                buf.push('\n');
            }
            continue;
        }
        // The console may put terminal escapes before a marker.
        let Some(at) = raw.find("LOCKPROF-BENCH") else { continue };
        let line = &raw[at..];
        if line.trim() == "LOCKPROF-BENCH-JSON-BEGIN" {
            json = Some(String::new());
        } else if line.trim() == "LOCKPROF-BENCH-DONE" {
            done = true;
        } else if let Some(rest) = line.strip_prefix("LOCKPROF-BENCH-ERROR ") {
            errors.push(rest.to_string());
        } else if line.starts_with("LOCKPROF-BENCH ") {
            let label = field(line, "label").context("bench line without label")?.to_string();
            let round = field(line, "round").and_then(|r| r.parse().ok()).context("bench line without round")?;
            // `... Pipe: N ops in S s (R ops/s, T threads)`
            let ops_per_s = line
                .rsplit('(')
                .next()
                .and_then(|t| t.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .with_context(|| format!("no ops/s in {line:?}"))?;
            samples.push(GuestSample { label, round, ops_per_s, json: None });
        }
    }
    if !done {
        bail!("the guest benchmark did not finish (no LOCKPROF-BENCH-DONE on the console)");
    }
    Ok((samples, errors))
}

/// Boots the default guest kernel and runs the guest benchmark.
pub fn run(rounds: usize, secs: f64) -> Result<GuestRuns> {
    let timeout = Duration::from_secs_f64(600.0 + rounds as f64 * MODES.len() as f64 * (secs + 60.0));
    let (package, release, lines) = crate::vm::run_script(&script(rounds, secs), timeout)?;
    let (samples, errors) = parse(&lines)?;
    Ok(GuestRuns { package, release, samples, errors })
}

fn contentions_per_s(v: &Value) -> Option<f64> {
    Some(v["events"].as_f64()? / v["duration_s"].as_f64()?.max(1e-9))
}

/// The guest section of BENCHMARKS.md.
pub fn render(g: &GuestRuns) -> String {
    let mut md = String::new();
    let rounds = g.samples.iter().map(|s| s.round + 1).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "## Guest kernel: hold timing\n\nInside `{}` ({}) under QEMU (TCG, 4 vCPUs): the pipe storm (4 threads), {rounds} \
rounds, modes in rotating order. Throughput is the median of each round's ratio to that round's untraced run. Absolute \
numbers under TCG mean little; the ratios compare the modes.\n",
        g.package, g.release
    );
    let _ = writeln!(
        md,
        "| mode | ops/s (median) | throughput (min-max) | contentions/s seen | holds timed/s | hold backend |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (label, _) in MODES {
        let runs: Vec<&GuestSample> = g.samples.iter().filter(|s| s.label == *label).collect();
        let ops = stats(runs.iter().map(|s| s.ops_per_s).collect());
        let ratios = stats(
            runs.iter()
                .filter_map(|s| {
                    let base = g.samples.iter().find(|u| u.label == MODES[0].0 && u.round == s.round)?;
                    Some(s.ops_per_s / base.ops_per_s.max(1e-9))
                })
                .collect(),
        );
        let rate = stats(runs.iter().filter_map(|s| s.json.as_ref().and_then(contentions_per_s)).collect());
        let holds = stats(
            runs.iter()
                .filter_map(|s| {
                    let v = s.json.as_ref()?;
                    let holds = v["drops"][counter::NAMES[counter::HOLDS as usize]].as_f64()?;
                    Some(holds / v["duration_s"].as_f64()?.max(1e-9))
                })
                .collect(),
        );
        let backend = runs
            .iter()
            .find_map(|s| s.json.as_ref().map(|v| v["hold_backend"].as_str().unwrap_or("none").to_string()))
            .unwrap_or_else(|| "-".into());
        let f = |x: Option<(f64, f64, f64)>| x.map_or("-".to_string(), |(m, _, _)| format!("{m:.0}"));
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {} | {} | {backend} |",
            f(ops),
            ratios.map_or("-".to_string(), |(m, lo, hi)| format!("{m:.3}x ({lo:.3}-{hi:.3})")),
            f(rate),
            f(holds),
        );
    }
    for e in &g.errors {
        let _ = writeln!(md, "\n- a run did not start: {e}");
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_rotates_every_mode_through_every_round() {
        let s = script(2, 1.5);
        let runs: Vec<&str> = s.lines().filter(|l| l.starts_with("untraced '") || l.starts_with("traced '")).collect();
        assert_eq!(runs.len(), 2 * MODES.len());
        assert_eq!(runs.iter().filter(|l| l.starts_with("traced")).count(), 2 * (MODES.len() - 1));
        assert!(s.contains("--duration 1.5"));
        assert!(runs[0].ends_with(" 0") && runs[MODES.len()].contains("' 1"), "{runs:?}");
        assert_ne!(
            runs[0].split('\'').nth(1),
            runs[MODES.len()].split('\'').nth(1),
            "round 1 starts with another mode"
        );
    }

    #[test]
    fn console_lines_parse_into_samples_with_their_json() {
        let lines: Vec<String> = [
            "vm noise",
            "\u{1b}[2JLOCKPROF-BENCH-ERROR label='x' round=9 escapes before a marker",
            "LOCKPROF-BENCH label='untraced' round=0 Pipe: 3000 ops in 2.00 s (1500 ops/s, 4 threads)",
            "LOCKPROF-BENCH label='lockprof --no-holds' round=0 Pipe: 2800 ops in 2.00 s (1400 ops/s, 4 threads)\r",
            "LOCKPROF-BENCH-JSON-BEGIN",
            "{\"events\": 40,",
            " \"duration_s\": 2.0, \"drops\": {\"holds\": 0}, \"hold_backend\": null}",
            "LOCKPROF-BENCH-JSON-END",
            "LOCKPROF-BENCH label='lockprof (holds timed)' round=0 Pipe: 2000 ops in 2.00 s (1000 ops/s, 4 threads)",
            "LOCKPROF-BENCH-ERROR label='lockprof (holds timed)' round=1 no kprobes",
            "LOCKPROF-BENCH-DONE",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (samples, errors) = parse(&lines).expect("parses");
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[2].ops_per_s, 1000.0, "parentheses in a label are not the ops/s");
        assert_eq!(
            (samples[1].label.as_str(), samples[1].round, samples[1].ops_per_s),
            ("lockprof --no-holds", 0, 1400.0)
        );
        assert_eq!(samples[1].json.as_ref().and_then(contentions_per_s), Some(20.0));
        assert!(samples[0].json.is_none());
        assert_eq!(errors.len(), 2);
        let g = GuestRuns { package: "p".into(), release: "r".into(), samples, errors };
        let md = render(&g);
        assert!(md.contains("| lockprof --no-holds | 1400 | 0.933x (0.933-0.933) | 20 | 0 | none |"), "{md}");
        assert!(parse(&lines[..3]).is_err(), "an unfinished run is an error");
    }
}
