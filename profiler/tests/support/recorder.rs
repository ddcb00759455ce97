//! A `lockprof` session (`record`, or `serve`) running in the background for
//! a root test: attached once [`Recorder::start`] or [`Recorder::attach`]
//! returns (they wait for the "lockprof: recording" or "lockprof: serving"
//! line lockprof prints after attaching), stopped with SIGTERM (it then
//! prints its report) or by itself, and killed when dropped, so a test that
//! panics leaves nothing attached for the next one. Included by the test
//! files that use it with `#[path = "support/recorder.rs"] mod recorder;`.

// Each file that includes this uses part of it.
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader, Read as _},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

/// The longest a session may take to attach, or to say what a test waits
/// for: far beyond any machine's start-up, short of a hung test run.
const PATIENCE: Duration = Duration::from_secs(120);

/// Its stderr so far, and whether it has ended (EOF).
#[derive(Default)]
struct Stderr {
    text: String,
    ended: bool,
}

pub struct Recorder {
    child: Option<Child>,
    /// Its exit status, once `running` has reaped it (its pid is free then).
    exited: Option<ExitStatus>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Arc<(Mutex<Stderr>, Condvar)>,
    stderr_reader: Option<JoinHandle<()>>,
}

/// How a session ended: its exit status, report (stdout) and stderr.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Recorder {
    /// `lockprof record <args>`, once its programs are attached.
    pub fn start(args: &[&str]) -> Recorder {
        Recorder::attach(Command::new(env!("CARGO_BIN_EXE_lockprof")).arg("record").args(args))
    }

    /// `cmd` (a lockprof `record` or `serve` command), once it says it is
    /// attached; panics with its stderr if it exits first.
    pub fn attach(cmd: &mut Command) -> Recorder {
        let rec = Recorder::spawn(cmd);
        rec.stderr_until("its programs attached", |t| {
            t.lines().any(|l| l.starts_with("lockprof: recording") || l.starts_with("lockprof: serving"))
        });
        rec
    }

    /// `cmd` started, attached or not yet (a test of signals during start-up).
    pub fn spawn(cmd: &mut Command) -> Recorder {
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let mut out = child.stdout.take().expect("stdout");
        let stdout = thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        });
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let stderr = Arc::new((Mutex::new(Stderr::default()), Condvar::new()));
        let shared = stderr.clone();
        let stderr_reader = thread::spawn(move || {
            let (lock, changed) = &*shared;
            loop {
                // Bytes, not UTF-8: a stray byte must not end the reading
                // (the pipe would close under lockprof's next message).
                let mut line = Vec::new();
                let n = err.read_until(b'\n', &mut line).unwrap_or(0);
                let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                s.text.push_str(&String::from_utf8_lossy(&line));
                s.ended = n == 0;
                changed.notify_all();
                if n == 0 {
                    return;
                }
            }
        });
        Recorder { child: Some(child), exited: None, stdout: Some(stdout), stderr, stderr_reader: Some(stderr_reader) }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends `sig` to it (never after `running` found it exited: its pid may
    /// be another process's by then).
    pub fn signal(&self, sig: libc::c_int) {
        assert!(self.exited.is_none(), "lockprof already exited ({:?}): no signal sent", self.exited);
        let pid = self.pid();
        // SAFETY: kill(2) on a child we spawned and have not reaped (checked above).
        assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill({pid}, {sig})");
    }

    /// Whether it is still running (not exited; an exited one is reaped and
    /// its status kept for [`Recorder::finish`]).
    pub fn running(&mut self) -> bool {
        if self.exited.is_none() {
            self.exited = self.child.as_mut().expect("running").try_wait().expect("try_wait");
        }
        self.exited.is_none()
    }

    /// Its stderr once `done` holds of it; panics, saying `what` it waited
    /// for, if its stderr ends first or after [`PATIENCE`].
    pub fn stderr_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let (lock, changed) = &*self.stderr;
        let deadline = Instant::now() + PATIENCE;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if done(&s.text) {
                return s.text.clone();
            }
            assert!(!s.ended, "lockprof ended before {what}: {}", s.text);
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "lockprof: no sign of {what} after {PATIENCE:?}: {}", s.text);
            s = changed.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Waits for it to exit: its status, stdout and stderr.
    pub fn finish(mut self) -> Finished {
        let mut child = self.child.take().expect("running");
        let status = match self.exited {
            Some(status) => status,
            None => child.wait().expect("wait"),
        };
        let stdout = self.stdout.take().expect("stdout").join().expect("stdout reader");
        self.stderr_reader.take().expect("stderr").join().expect("stderr reader");
        let stderr = std::mem::take(&mut self.stderr.0.lock().unwrap_or_else(|e| e.into_inner()).text);
        Finished { status, stdout, stderr }
    }

    /// SIGTERM; its report (stdout), after checking it exited cleanly.
    pub fn stop(self) -> Vec<u8> {
        self.signal(libc::SIGTERM);
        let f = self.finish();
        assert!(f.status.success(), "lockprof exited {}: {}", f.status, f.stderr);
        f.stdout
    }

    /// Waits for it to exit by itself (`--duration`, a trigger's incident):
    /// its report (stdout) and stderr, after checking it exited cleanly.
    pub fn wait(self) -> (Vec<u8>, String) {
        let f = self.finish();
        assert!(f.status.success(), "lockprof exited {}: {}", f.status, f.stderr);
        (f.stdout, f.stderr)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A stopped (SIGSTOP) child dies of SIGKILL too.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
