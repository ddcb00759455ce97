//! The C workload with known user frames (`/lockprof_test`, built
//! statically by `vm-test` from `profiler/tests/data/ustack/lockprof_test.c`)
//! run as its own process, optionally inside a cgroup, and recordings of
//! it, driven until the sessions' live profiles show what a check wants.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Instant,
};

use lockprof::{
    ebpf::BackendChoice,
    model::Profile,
    session::{Session, SessionOptions},
};

use super::{POLL, began, options, runtime, until};

/// Where `vm-test` puts the C workload (`$LOCKPROF_TEST_PROGRAM` elsewhere).
pub fn program() -> String {
    std::env::var("LOCKPROF_TEST_PROGRAM").unwrap_or_else(|_| "/lockprof_test".into())
}

/// Longer than any check drives it: a storm is killed when dropped.
const STORM_SECS: &str = "600";

/// `/lockprof_test raw`: writer threads on one pipe, each writing from
/// `lockprof_test_thread -> lockprof_test_loop -> lockprof_test_writer`.
pub struct CStorm {
    child: Child,
    /// Its process id.
    pub pid: u32,
}

impl CStorm {
    /// Starts `threads` writers, inside the cgroup directory `cgroup` from
    /// its first instruction on (a shell moves itself there, then execs the
    /// program); returns once the program says it is ready.
    pub fn start(threads: u32, cgroup: Option<&Path>) -> Result<CStorm, String> {
        let program = program();
        let threads = threads.to_string();
        let mut cmd = match cgroup {
            Some(dir) => {
                let mut c = Command::new("sh");
                c.args(["-c", r#"echo $$ > "$1/cgroup.procs" && exec "$2" raw "$3" "$4""#, "sh"]).arg(dir).args([
                    program.as_str(),
                    STORM_SECS,
                    &threads,
                ]);
                c
            }
            None => {
                let mut c = Command::new(&program);
                c.args(["raw", STORM_SECS, &threads]);
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))?;
        let mut storm = CStorm { pid: child.id(), child };
        let out = storm.child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).map_err(|e| format!("reading {program}: {e}"))?;
        if line.trim() != format!("ready {}", storm.pid) {
            let status = storm.child.try_wait().ok().flatten();
            return Err(format!("{program} said {line:?}, not that it was ready (exit: {status:?})"));
        }
        Ok(storm)
    }
}

impl CStorm {
    /// Stops the writers (SIGSTOP) without ending the process: no more
    /// waits, while its maps stay readable for the user-stack symbolizer.
    pub fn pause(&self) {
        // SAFETY: kill(2) on our own child, which is not reaped before drop.
        unsafe { libc::kill(self.pid as i32, libc::SIGSTOP) };
    }
}

impl Drop for CStorm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child cgroup of the cgroup2 mount, removed when dropped (after the
/// storms in it, which are dropped first).
pub struct ChildCgroup {
    /// Its directory.
    pub dir: PathBuf,
}

impl ChildCgroup {
    /// Makes `<root>/<name>` (fresh: a leftover is removed first).
    pub fn new(root: &Path, name: &str) -> Result<ChildCgroup, String> {
        let dir = root.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
        Ok(ChildCgroup { dir })
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        // A killed process leaves its cgroup a little after wait() returns.
        let deadline = Instant::now() + until::PATIENCE;
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
    }
}

/// The session options of these checks on `backend`: waits only (neither
/// release functions nor yield_to probed: they do not need them, and under
/// TCG every trampoline costs seconds to attach).
pub fn waits_only(backend: BackendChoice) -> SessionOptions {
    let mut o = options(backend);
    o.load.holds = false;
    o.load.yield_to = false;
    o
}

/// Records with one session per entry of `opts`; once they are attached,
/// `start` starts the workload (storms, dropped by the caller after the
/// sessions finished), and the sessions record until `seen` accepts their
/// live profiles or the check's time is up; then `pause` stops the
/// workload, so that every session ends on the same window. Returns the
/// final profiles and the workload.
pub fn record_while<T>(
    opts: Vec<SessionOptions>,
    start: impl FnOnce() -> Result<T, String>,
    seen: impl Fn(&[&Profile], &T) -> bool,
    pause: impl FnOnce(&T),
) -> Result<(Vec<Profile>, T), String> {
    runtime().block_on(async {
        let mut sessions = Vec::new();
        for o in opts {
            sessions.push(Session::start(o).map_err(|e| e.to_string())?);
        }
        let live: Vec<_> = sessions.iter_mut().map(|s| s.profiles()).collect();
        let work = start();
        if let Ok(w) = &work {
            let deadline = Instant::now() + until::patience(began().elapsed());
            while Instant::now() < deadline {
                tokio::time::sleep(POLL).await;
                let now: Vec<Arc<Profile>> = live.iter().map(|rx| rx.borrow().clone()).collect();
                if seen(&now.iter().map(|p| &**p).collect::<Vec<_>>(), w) {
                    break;
                }
            }
            pause(w);
            // The writers stop at their next return to user space.
            tokio::time::sleep(POLL).await;
        }
        let mut out = Vec::new();
        for s in sessions {
            out.push(s.finish().await.map_err(|e| e.to_string())?);
        }
        Ok((out, work?))
    })
}
