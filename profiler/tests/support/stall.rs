//! `lockprof stress stall` for a root test: its one stall line
//! (`stall waiter <tid> holder <tid> lead <tid> pid <pid> wait_ms <ms>
//! at_monotonic_ns <ns> stall_ms <ms>`) parsed. Included by the test files
//! that use it with `#[path = "support/stall.rs"] mod stall;`.

// Each file that includes this uses part of it.
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// `lockprof stress stall` with the stall `at` seconds in, for `secs`
/// seconds: its stall line (printed too, for the test's log).
pub fn run(at: f64, secs: f64) -> StallLine {
    let out = Command::new(env!("CARGO_BIN_EXE_lockprof"))
        .args(["stress", "stall", "--stall-ms", &STALL_MS.to_string()])
        .args(["--stall-at", &at.to_string(), "--duration", &secs.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("run lockprof stress stall");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stress stall exited {}: {text}", out.status);
    let s = StallLine::parse(&text);
    eprintln!("{}", s.line);
    s
}

/// The stall asked for, in milliseconds.
pub const STALL_MS: u64 = 200;

/// The workload's stall line, as key/value pairs after `stall`.
pub struct StallLine {
    pub line: String,
    pub waiter: u64,
    pub holder: u64,
    pub pid: u64,
    pub wait_ns: u64,
    pub at_ns: u64,
}

impl StallLine {
    pub fn parse(out: &str) -> StallLine {
        let line = out.lines().find(|l| l.starts_with("stall ")).unwrap_or_else(|| panic!("no stall line in {out}"));
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let get = |key: &str| -> &str {
            let i = words.iter().position(|w| *w == key).unwrap_or_else(|| panic!("no {key} in {line}"));
            words.get(i + 1).unwrap_or_else(|| panic!("no value for {key} in {line}"))
        };
        let int = |key: &str| get(key).parse::<u64>().unwrap_or_else(|e| panic!("{key} in {line}: {e}"));
        let wait_ms: f64 = get("wait_ms").parse().unwrap_or_else(|e| panic!("wait_ms in {line}: {e}"));
        assert_eq!(int("stall_ms"), STALL_MS, "{line}");
        StallLine {
            line: line.to_string(),
            waiter: int("waiter"),
            holder: int("holder"),
            pid: int("pid"),
            wait_ns: (wait_ms * 1e6).round() as u64,
            at_ns: int("at_monotonic_ns"),
        }
    }
}
