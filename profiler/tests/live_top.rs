//! Root-only: `lockprof top` in a real terminal (tmux) against a real pipe storm.
//! Skips, saying why, without root or tmux; with `CI=true` those are failures.

mod support;

use std::{
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

fn ready() -> bool {
    let tmux = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    let reason = support::tracepoints_missing()
        .or_else(|| (!tmux).then(|| "needs tmux (cargo xtask setup installs it)".to_string()));
    support::ready_unless("top_in_tmux", reason)
}

struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(args).output().expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", &self.0, k]);
        }
    }
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", &self.0])
    }
    /// Waits until the screen satisfies `f`, returning it.
    fn wait_for(&self, what: &str, timeout: Duration, f: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if f(&s) {
                return s;
            }
            assert!(start.elapsed() < timeout, "timed out waiting for {what}; screen:\n{s}");
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.0]).status();
    }
}

/// Table rows: the lines between the header row and the footer.
fn rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("LOCK"))
        .skip(1)
        .take_while(|l| !l.starts_with("q quit") && !l.trim().is_empty() && !l.starts_with('┌'))
        .map(str::to_string)
        .collect()
}

fn count(s: &str) -> f64 {
    let (num, mul) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>().map(|v| v * mul).unwrap_or(-1.0)
}

#[test]
fn top_in_tmux_shows_sorts_filters_and_quits() {
    if !ready() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_lockprof");
    let mut storm = Command::new(bin)
        .args(["stress", "pipe", "--threads", "4", "--duration", "25"])
        .stdout(Stdio::null())
        .spawn()
        .expect("stress");
    let t = Tmux(format!("lockprof-top-{}", std::process::id()));
    let cmd = format!("{bin} top --interval 1; echo TOP-DONE rc=$?; sleep 30");
    t.run(&["new-session", "-d", "-s", &t.0, "-x", "120", "-y", "30", &cmd]);

    // Within two refreshes of attaching, the pipe mutex and its writer show up.
    t.wait_for("the dashboard", Duration::from_secs(15), |s| s.contains("lockprof top"));
    let start = Instant::now();
    let s = t.wait_for("the pipe mutex row", Duration::from_secs(4), |s| {
        rows(s).iter().any(|r| r.starts_with("mutex @ anon_pipe") || r.starts_with("mutex @ pipe"))
    });
    assert!(start.elapsed() < Duration::from_millis(3500), "more than two refreshes");
    assert!(s.contains("sort: wait total"), "{s}");
    let before = rows(&s);

    // Expand shows the writer callers of the selected (top) lock.
    t.keys(&["Enter"]);
    t.wait_for("callers in the detail pane", Duration::from_secs(3), |s| s.contains("anon_pipe_write+"));
    t.keys(&["Enter"]);

    // Sort by contentions: the indicator changes and the CONT column is in order.
    t.keys(&["s"]);
    let s = t.wait_for("the contended sort", Duration::from_secs(3), |s| s.contains("sort: contended"));
    let header = s.lines().find(|l| l.starts_with("LOCK")).expect("header").to_string();
    let col = header.find("CONT ").expect("CONT column");
    let conts: Vec<f64> =
        rows(&s).iter().filter_map(|r| r.get(col..).and_then(|x| x.split_whitespace().next()).map(count)).collect();
    assert!(conts.len() >= 2, "{s}");
    assert!(conts.windows(2).all(|w| w[0] >= w[1]), "rows ordered by contentions: {conts:?}\n{s}");

    // A filter hides rows that do not match.
    t.keys(&["/", "anon_pipe_write", "Enter"]);
    let s = t.wait_for("the filter", Duration::from_secs(3), |s| s.contains("/anon_pipe_write"));
    let after = rows(&s);
    assert!(!after.is_empty() && after.len() < before.len(), "filter hides rows: {before:?} -> {after:?}");
    assert!(after.iter().all(|r| !r.contains("rcu_") && !r.contains("tick_")), "{after:?}");

    // Help, then quit: the shell gets its screen back.
    t.keys(&["?"]);
    t.wait_for("help", Duration::from_secs(3), |s| s.contains("keys (any key closes)"));
    // One key at a time, the help seen closed in between: an Escape and a `q`
    // that reach the terminal in one read are one key, Alt-q (which closes
    // the help and quits nothing).
    t.keys(&["Escape"]);
    t.wait_for("help closed", Duration::from_secs(3), |s| !s.contains("keys (any key closes)"));
    t.keys(&["q"]);
    let s = t.wait_for("exit", Duration::from_secs(10), |s| s.contains("TOP-DONE"));
    assert!(s.contains("TOP-DONE rc=0"), "{s}");
    assert!(!s.contains("lockprof top  "), "alternate screen left: {s}");
    let _ = storm.kill();
    let _ = storm.wait();
}
