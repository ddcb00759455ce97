//! `lockprof record` running in the background for a root test: attached
//! once [`Recorder::start`] returns (it waits for the "lockprof: recording"
//! line lockprof prints after attaching), stopped with SIGTERM (it then
//! prints its report) or killed when dropped. Included by the test files
//! that use it with `#[path = "support/recorder.rs"] mod recorder;`.

// Each file that includes this uses part of it.
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader, Read as _},
    process::{Child, Command, Stdio},
    thread::{self, JoinHandle},
};

pub struct Recorder {
    child: Option<Child>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<String>>,
}

impl Recorder {
    /// `lockprof record <args>`, once its programs are attached.
    pub fn start(args: &[&str]) -> Recorder {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockprof"))
            .arg("record")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockprof record");
        let mut out = child.stdout.take().expect("stdout");
        let stdout = thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        });
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).expect("read stderr") == 0 {
                let status = child.wait().expect("wait");
                panic!("lockprof record {args:?} exited ({status}) before attaching: {seen}");
            }
            seen.push_str(&line);
            if line.starts_with("lockprof: recording") {
                break;
            }
        }
        let stderr = thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            seen + &rest
        });
        Recorder { child: Some(child), stdout: Some(stdout), stderr: Some(stderr) }
    }

    /// SIGTERM; its report (stdout), after checking it exited cleanly.
    pub fn stop(mut self) -> Vec<u8> {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let status = child.wait().expect("wait");
        let out = self.stdout.take().expect("stdout").join().expect("stdout reader");
        let err = self.stderr.take().expect("stderr").join().expect("stderr reader");
        assert!(status.success(), "lockprof record exited {status}: {err}");
        out
    }
}

impl Recorder {
    /// Waits for it to exit by itself (`--duration`, a trigger's incident):
    /// its report (stdout) and stderr, after checking it exited cleanly.
    pub fn wait(mut self) -> (Vec<u8>, String) {
        let status = self.child.take().expect("running").wait().expect("wait");
        let out = self.stdout.take().expect("stdout").join().expect("stdout reader");
        let err = self.stderr.take().expect("stderr").join().expect("stderr reader");
        assert!(status.success(), "lockprof record exited {status}: {err}");
        (out, err)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
