//! The futex floor: a bpftrace script that only counts the futex system
//! call's entries and exits, the cheapest thing that sees every futex wait
//! (and every wake). It stands beside `lockprof --futex` on the futex storm
//! as the price of merely being on those two tracepoints.

use std::{
    io::{BufRead, BufReader, Read as _},
    process::{Child, Command, Stdio},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// Where bpftrace is installed.
const BPFTRACE: &str = "/usr/bin/bpftrace";

/// Counts futex syscall entries (`@n`) and exits (`@x`), system-wide.
const SCRIPT: &str =
    "tracepoint:syscalls:sys_enter_futex { @n = count(); } tracepoint:syscalls:sys_exit_futex { @x = count(); }";

/// The probes of [`SCRIPT`].
const PROBES: u32 = 2;

/// bpftrace prints `Attaching N probes...` and then attaches them (BEGIN
/// would run before the others are attached, so it marks nothing): this
/// much time lets the two tracepoints be attached before the workload
/// starts. Only the count shown depends on it, never a ratio.
const SETTLE: Duration = Duration::from_millis(200);

/// What the counter saw: futex system calls entered and exited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counts {
    /// `sys_enter_futex` hits.
    pub enters: f64,
    /// `sys_exit_futex` hits.
    pub exits: f64,
}

/// A running counter: the process, and the reader of the rest of its output.
pub struct Counter {
    child: Child,
    rest: JoinHandle<String>,
}

impl Counter {
    /// The bpftrace process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// bpftrace on this machine, if any.
pub fn available() -> bool {
    std::path::Path::new(BPFTRACE).exists()
}

/// `Attaching N probes...` -> N.
fn attaching(line: &str) -> Option<u32> {
    line.strip_prefix("Attaching ")?.split_whitespace().next()?.parse().ok()
}

/// Starts the counter and returns once bpftrace has said it attaches both
/// probes (and [`SETTLE`] has passed).
pub fn start() -> Result<Counter> {
    let mut child = Command::new(BPFTRACE)
        .args(["-e", SCRIPT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {BPFTRACE}"))?;
    let stdout = child.stdout.take().context("bpftrace stdout")?;
    let mut stderr = child.stderr.take().context("bpftrace stderr")?;
    // bpftrace warns on stderr (RLIMIT_MEMLOCK, which it no longer needs):
    // drain it so it never blocks, and keep it to explain a failure.
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut lines = BufReader::new(stdout);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            bail!("bpftrace exited before attaching: {}", errs.join().unwrap_or_default().trim());
        }
        if let Some(n) = attaching(&line) {
            if n != PROBES {
                let _ = child.kill();
                bail!("bpftrace attaches {n} probes, not the script's {PROBES}");
            }
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("bpftrace did not attach in 30 s");
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = lines.read_to_string(&mut s);
        s
    });
    std::thread::sleep(SETTLE);
    Ok(Counter { child, rest })
}

/// Stops the counter (SIGTERM: bpftrace prints its maps and exits) and
/// returns its counts.
pub fn stop(c: Counter) -> Result<Counts> {
    let Counter { mut child, rest } = c;
    // SAFETY: kill(2) on our own child process, not yet reaped.
    if unsafe { libc::kill(child.id() as i32, libc::SIGTERM) } != 0 {
        bail!("SIGTERM to bpftrace failed");
    }
    let status = child.wait().context("waiting for bpftrace")?;
    let out = rest.join().unwrap_or_default();
    if !status.success() {
        bail!("bpftrace failed: {status}");
    }
    parse_counts(&out)
}

/// The two maps bpftrace prints on exit: `@n: 38919` and `@x: 39881`.
fn parse_counts(out: &str) -> Result<Counts> {
    let map = |name: &str| {
        out.lines().find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
    };
    let enters = map("@n").with_context(|| format!("no @n count in bpftrace's output {out:?}"))?;
    // A run that entered futex calls but has not returned from any yet has
    // no @x map: zero, not a failure.
    Ok(Counts { enters, exits: map("@x").unwrap_or(0.0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attaching_line_names_the_probes() {
        assert_eq!(attaching("Attaching 2 probes...\n"), Some(2));
        assert_eq!(attaching("Attaching 1 probe...\n"), Some(1));
        assert_eq!(attaching("ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK"), None);
        assert_eq!(attaching("Attaching probes..."), None);
    }

    #[test]
    fn counts_are_read_from_the_printed_maps() {
        let out = "\n\n@n: 38919\n@x: 39881\n";
        assert_eq!(parse_counts(out).ok(), Some(Counts { enters: 38919.0, exits: 39881.0 }));
        assert_eq!(parse_counts("@n: 5\n").ok(), Some(Counts { enters: 5.0, exits: 0.0 }));
        // `@nx` is another map, not `@n`.
        assert!(parse_counts("@nx: 5\n@x: 3\n").is_err());
        assert!(parse_counts("").is_err());
    }
}
