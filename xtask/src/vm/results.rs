//! What a guest run says: libtest's own lines (`test NAME ... ok`,
//! `... FAILED`, `... ignored (reason)`), its summary, `doctor --json`, the
//! exit status, and any kernel oops. The verdict is the harness's, checked
//! against doctor's own account of the kernel.

use serde_json::Value;

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Skipped, with the kernel's reason.
    Skip(String),
}

/// One check.
#[derive(Clone, Debug)]
pub struct Check {
    /// `backend::check`, `yield_to::kind`, ...
    pub name: String,
    /// Outcome.
    pub outcome: Outcome,
    /// A failed check's message (libtest's `---- NAME ----` section).
    pub message: Option<String>,
}

impl Check {
    /// (backend, check) for the summary table.
    pub fn split(&self) -> (&str, &str) {
        match self.name.split_once("::") {
            Some(("yield_to", kind)) => (kind, "yield_to"),
            Some((b, c)) => (b, c),
            None => ("-", self.name.as_str()),
        }
    }
}

/// A guest run, parsed.
#[derive(Debug, Default)]
pub struct Run {
    /// The guest reached /init.
    pub began: bool,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// libtest's closing `test result:` line.
    pub summary: Option<String>,
    /// The test binary's exit status.
    pub exit: Option<i32>,
    /// `lockprof doctor --json`.
    pub doctor: Option<Value>,
    /// Oops, BUG or panic lines.
    pub oops: Vec<String>,
}

/// Parses the console.
pub fn parse(lines: &[String]) -> Run {
    let mut r = Run::default();
    let mut doctor = None::<String>;
    // The failure whose message lines are being read.
    let mut failure = None::<(String, Vec<String>)>;
    for line in lines {
        let t = line.trim();
        if let Some((name, msg)) = failure.as_mut() {
            if t.is_empty() || t == "failures:" || t.starts_with("---- ") || t.starts_with("LOCKPROF-VM-EXIT=") {
                let text = msg.join(" / ");
                if let Some(c) = r.checks.iter_mut().find(|c| c.name == *name) {
                    c.message = Some(text);
                }
                failure = None;
            } else {
                msg.push(t.to_string());
                continue;
            }
        }
        if let Some(name) = t.strip_prefix("---- ").and_then(|n| n.strip_suffix(" ----")) {
            failure = Some((name.trim().to_string(), Vec::new()));
        } else if t.contains("LOCKPROF-VM-BEGIN") {
            r.began = true;
        } else if t == "LOCKPROF-DOCTOR-BEGIN" {
            doctor = Some(String::new());
        } else if t == "LOCKPROF-DOCTOR-END" {
            r.doctor = doctor.take().and_then(|d| serde_json::from_str(&d).ok());
        } else if let Some(d) = doctor.as_mut() {
            d.push_str(line);
            d.push('\n');
        } else if let Some(code) = t.strip_prefix("LOCKPROF-VM-EXIT=") {
            r.exit = code.trim().parse().ok();
        } else if t.starts_with("test result:") {
            r.summary = Some(t.to_string());
        } else if let Some(rest) = t.strip_prefix("test ")
            && let Some((name, verdict)) = rest.split_once(" ... ")
        {
            let v = verdict.trim();
            let outcome = if v == "ok" {
                Outcome::Pass
            } else if v == "FAILED" {
                Outcome::Fail
            } else if let Some(reason) = v.strip_prefix("ignored") {
                Outcome::Skip(reason.trim().trim_start_matches('(').trim_end_matches(')').to_string())
            } else {
                continue;
            };
            r.checks.push(Check { name: name.trim().to_string(), outcome, message: None });
        }
        if ["Oops", "BUG:", "Kernel panic", "general protection fault"].iter().any(|m| line.contains(m)) {
            r.oops.push(line.clone());
        }
    }
    r
}

impl Run {
    /// (passed, failed, skipped).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.checks.iter().fold((0, 0, 0), |(p, f, s), c| match c.outcome {
            Outcome::Pass => (p + 1, f, s),
            Outcome::Fail => (p, f + 1, s),
            Outcome::Skip(_) => (p, f, s + 1),
        })
    }

    /// Everything wrong with the run, beyond failed checks: a guest that never
    /// started, a missing summary or exit status, an oops, and doctor
    /// disagreeing with what the checks found the kernel can do.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.began {
            out.push("the guest never reached /init".to_string());
        }
        if !self.oops.is_empty() {
            out.push(format!("the guest kernel oopsed: {:?}", self.oops));
        }
        if self.summary.is_none() || self.exit.is_none() {
            out.push("the guest test binary reported no result (timeout or crash)".to_string());
        }
        match &self.doctor {
            None => out.push("no doctor --json output".to_string()),
            Some(d) => {
                for backend in ["kprobe", "fentry", "tracepoint", "tp_btf"] {
                    let says = d["backends"]
                        .as_array()
                        .and_then(|bs| bs.iter().find(|b| b["name"] == backend))
                        .and_then(|b| b["available"].as_bool());
                    let ran: Vec<&Check> =
                        self.checks.iter().filter(|c| c.split().0 == backend && c.split().1 != "yield_to").collect();
                    if ran.is_empty() {
                        continue;
                    }
                    let usable = ran.iter().any(|c| !matches!(c.outcome, Outcome::Skip(_)));
                    if says != Some(usable) {
                        out.push(format!(
                            "doctor says the {backend} backend is {} but the kernel facts say it {}",
                            match says {
                                Some(true) => "available",
                                Some(false) => "unavailable",
                                None => "unknown",
                            },
                            if usable { "must work" } else { "cannot work" }
                        ));
                    }
                }
            }
        }
        if self.exit.is_some_and(|e| e != 0) && self.counts().1 == 0 {
            out.push(format!("the guest test binary exited {:?} with no failed check", self.exit));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    const CONSOLE: &str = r#"LOCKPROF-VM-BEGIN 6.1.0-57-amd64
LOCKPROF-DOCTOR-BEGIN
{"backends": [{"name": "kprobe", "available": true}, {"name": "fentry", "available": false}]}
LOCKPROF-DOCTOR-END
running 3 tests
test kprobe::pipe_mutex ... ok
test fentry::pipe_mutex ... ignored (the kernel refuses BPF trampolines)
test kprobe::mmap_lock ... FAILED
test yield_to::kprobe ... ok

failures:

---- kprobe::mmap_lock ----
the Mmap workload made no progress
(after 30 s)


failures:
    kprobe::mmap_lock

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 9.00s
LOCKPROF-VM-EXIT=101
"#;

    #[test]
    fn libtest_lines_doctor_and_exit_are_read() {
        let r = parse(&lines(CONSOLE));
        assert!(r.began);
        assert_eq!(r.counts(), (2, 1, 1));
        assert_eq!(r.checks[1].outcome, Outcome::Skip("the kernel refuses BPF trampolines".into()));
        assert_eq!(r.checks[3].split(), ("kprobe", "yield_to"));
        assert_eq!(r.checks[2].message.as_deref(), Some("the Mmap workload made no progress / (after 30 s)"));
        assert_eq!(r.checks[0].message, None);
        assert_eq!(r.exit, Some(101));
        assert!(r.summary.as_deref().is_some_and(|s| s.contains("1 failed")));
        assert!(r.problems().is_empty(), "{:?}", r.problems());
    }

    #[test]
    fn doctor_disagreeing_with_the_kernel_facts_is_a_problem() {
        let bad = CONSOLE.replace(r#""name": "fentry", "available": false"#, r#""name": "fentry", "available": true"#);
        let r = parse(&lines(&bad));
        assert!(
            r.problems().iter().any(|p| p.contains("doctor says the fentry backend is available")),
            "{:?}",
            r.problems()
        );
        let r = parse(&lines(&CONSOLE.replace("LOCKPROF-VM-EXIT=101\n", "")));
        assert!(r.problems().iter().any(|p| p.contains("reported no result")));
        let r = parse(&lines(&format!("{CONSOLE}\n[ 1.0] BUG: kernel NULL pointer dereference\n")));
        assert!(r.problems().iter().any(|p| p.contains("oopsed")));
    }
}
