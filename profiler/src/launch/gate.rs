//! Starting the command held at a gate: forked, moved into its cgroup and
//! switched to its user, then stopped in a read of a pipe until lockprof
//! is attached and opens the gate (one byte: exec) or drops it (end of
//! file: the child exits without running anything).
//!
//! `Command::spawn` returns only once the child has exec'd, so it runs on a
//! thread of its own while lockprof attaches; the child says its pid on a
//! second pipe as soon as it is at the gate.

use std::{
    ffi::{CString, OsString},
    io::{self, Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::{ffi::OsStrExt as _, process::CommandExt as _},
    },
    path::PathBuf,
    process::{Child, Command},
    thread::JoinHandle,
};

use super::{LaunchError, RunAs};

/// What to start.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The file to execute ([`super::resolve`]).
    pub program: PathBuf,
    /// The arguments, `argv[0]` as the user typed it.
    pub argv: Vec<OsString>,
    /// The user to run as, if not lockprof's.
    pub run_as: Option<RunAs>,
    /// The cgroup to join before exec (its `cgroup.procs`), if any.
    pub cgroup_procs: Option<PathBuf>,
}

impl Spec {
    /// `argv[0]`, for messages.
    pub fn name(&self) -> String {
        self.argv.first().map_or_else(String::new, |a| a.to_string_lossy().into_owned())
    }
}

/// The command, forked and waiting at the gate.
pub struct Gate {
    name: String,
    pid: u32,
    go: Option<std::fs::File>,
    spawner: Option<JoinHandle<io::Result<Child>>>,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The calls the child makes between fork and exec: raw system calls only
/// (async-signal-safe: nothing allocates or locks), each checked.
struct InChild {
    go_read: i32,
    go_write: i32,
    ready_read: i32,
    ready_write: i32,
    cgroup_procs: Option<CString>,
    ids: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)>,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// What the child was doing when it failed before the gate (the one byte
/// it says instead of its pid).
const JOINING_CGROUP: u8 = 1;
const SWITCHING_USER: u8 = 2;

impl InChild {
    /// Says on the ready pipe which step failed (async-signal-safe).
    fn failed(&self, step: u8, e: io::Error) -> io::Error {
        // SAFETY: a one-byte write from a live local to an fd this child owns.
        unsafe { libc::write(self.ready_write, (&raw const step).cast(), 1) };
        e
    }

    fn run(&self) -> io::Result<()> {
        // SAFETY: every call below is async-signal-safe, on fds this child
        // inherited (its copies) and on memory owned by the closure, which
        // lives until exec.
        unsafe {
            // The parent's ends: a read of `go` must see end of file when
            // lockprof lets go of its end.
            libc::close(self.go_write);
            libc::close(self.ready_read);
            if let Some(path) = &self.cgroup_procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(self.failed(JOINING_CGROUP, io::Error::last_os_error()));
                }
                let n = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 2 {
                    return Err(self.failed(JOINING_CGROUP, err));
                }
            }
            if let Some((uid, gid, groups)) = &self.ids {
                check(libc::setgroups(groups.len(), groups.as_ptr()))
                    .and_then(|()| check(libc::setgid(*gid)))
                    .and_then(|()| check(libc::setuid(*uid)))
                    .map_err(|e| self.failed(SWITCHING_USER, e))?;
            }
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(self.ready_write, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            libc::close(self.ready_write);
            let mut b = 0u8;
            loop {
                match libc::read(self.go_read, (&raw mut b).cast(), 1) {
                    1 if b == 1 => break,
                    -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                    // lockprof let go without opening: run nothing.
                    _ => return Err(io::Error::from_raw_os_error(libc::ECANCELED)),
                }
            }
            libc::close(self.go_read);
            // lockprof holds SIGINT, SIGTERM and SIGHUP in every thread (and
            // the fork inherited that): the command starts with none held.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            check(libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()))?;
        }
        Ok(())
    }
}

impl Gate {
    /// Forks the command and waits until it is at the gate (in its cgroup,
    /// as its user); its pid is then known.
    pub fn spawn(spec: &Spec) -> Result<Gate, LaunchError> {
        let name = spec.name();
        let start = |detail: String| LaunchError::Start { program: name.clone(), detail };
        let (go_read, go_write) = pipe().map_err(|e| start(format!("pipe: {e}")))?;
        let (ready_read, ready_write) = pipe().map_err(|e| start(format!("pipe: {e}")))?;
        let cgroup_procs = match &spec.cgroup_procs {
            Some(p) => Some(CString::new(p.as_os_str().as_bytes()).map_err(|e| start(e.to_string()))?),
            None => None,
        };
        let in_child = InChild {
            go_read: go_read.as_raw_fd(),
            go_write: go_write.as_raw_fd(),
            ready_read: ready_read.as_raw_fd(),
            ready_write: ready_write.as_raw_fd(),
            cgroup_procs,
            ids: spec.run_as.as_ref().map(|u| (u.uid, u.gid, u.groups.clone())),
        };
        let mut cmd = Command::new(&spec.program);
        cmd.args(spec.argv.iter().skip(1));
        if let Some(a0) = spec.argv.first() {
            cmd.arg0(a0);
        }
        if let Some(u) = &spec.run_as {
            // As the user would have it outside sudo.
            cmd.env("HOME", &u.home).env("USER", &u.name).env("LOGNAME", &u.name);
            for k in ["SUDO_UID", "SUDO_GID", "SUDO_USER", "SUDO_COMMAND", "SUDO_HOME"] {
                cmd.env_remove(k);
            }
        }
        // SAFETY: `InChild::run` only makes async-signal-safe calls (see there).
        unsafe {
            cmd.pre_exec(move || in_child.run());
        }
        // The thread owns the child's ends until spawn returns (after exec,
        // or after the child failed): the fork must still find them open.
        let spawner = std::thread::Builder::new()
            .name("lockprof-spawn".into())
            .spawn(move || {
                let child = cmd.spawn();
                drop((go_read, ready_write));
                child
            })
            .map_err(|e| start(format!("thread: {e}")))?;
        let mut ready = std::fs::File::from(ready_read);
        // One atomic write: the pid (4 bytes), or the step that failed (1).
        let mut said = [0u8; 4];
        let n = loop {
            match ready.read(&mut said) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r.unwrap_or(0),
            }
        };
        let mut gate = Gate {
            name: name.clone(),
            pid: u32::from_ne_bytes(said),
            go: Some(std::fs::File::from(go_write)),
            spawner: Some(spawner),
        };
        if n == 4 {
            return Ok(gate);
        }
        // It failed before the gate: the spawner has the reason.
        let step = match (n, said[0]) {
            (1, JOINING_CGROUP) => "joining its cgroup",
            (1, SWITCHING_USER) => "switching to its user",
            _ => "before it could run",
        };
        Err(match gate.join() {
            Err(e) => start(format!("{step}: {}", super::error::os_text(&e))),
            Ok(mut child) => {
                let status = child.wait().map(super::ended).map(|e| e.text);
                start(format!("it ended before it could run ({})", status.unwrap_or_else(|e| e.to_string())))
            }
        })
    }

    /// The command's process id (it is at the gate).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn join(&mut self) -> io::Result<Child> {
        drop(self.go.take());
        match self.spawner.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the spawning thread panicked")),
            None => Err(io::Error::other("already started")),
        }
    }

    /// Lets it exec; the running child, or why it could not run (127 and
    /// 126 as a shell says). A child that died at the gate (a Ctrl-C while
    /// lockprof attached) is returned as it is: its status says so.
    pub fn open(mut self) -> Result<Child, LaunchError> {
        if let Some(go) = self.go.as_mut() {
            // EPIPE when it died at the gate: the spawner still has its child.
            let _ = go.write_all(&[1]);
        }
        let name = self.name.clone();
        self.join().map_err(|e| spawn_error(&name, e))
    }
}

/// What exec (or the steps before it) answered, as a shell reports it.
fn spawn_error(name: &str, e: io::Error) -> LaunchError {
    match e.kind() {
        io::ErrorKind::NotFound => LaunchError::NotFound { program: name.to_string() },
        io::ErrorKind::PermissionDenied | io::ErrorKind::IsADirectory | io::ErrorKind::ExecutableFileBusy => {
            LaunchError::CannotRun { program: name.to_string(), error: e }
        }
        _ if e.raw_os_error() == Some(libc::ENOEXEC) => LaunchError::CannotRun { program: name.to_string(), error: e },
        _ => LaunchError::Start { program: name.to_string(), detail: e.to_string() },
    }
}

impl Drop for Gate {
    /// Never opened: the child reads end of file and exits without running.
    fn drop(&mut self) {
        if self.spawner.is_some()
            && let Ok(mut child) = self.join()
        {
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> Spec {
        let program = super::super::resolve(argv[0].as_ref(), Some("/usr/bin:/bin".as_ref()), None).expect("found");
        Spec { program, argv: argv.iter().map(OsString::from).collect(), run_as: None, cgroup_procs: None }
    }

    #[test]
    fn the_command_waits_at_the_gate_until_opened() {
        let dir = std::env::temp_dir().join(format!("lockprof-gate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmpdir");
        let mark = dir.join("ran");
        let gate = Gate::spawn(&spec(&["sh", "-c", &format!("echo $$ > {}", mark.display())])).expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!mark.exists(), "it ran before the gate opened");
        let pid = gate.pid();
        let mut child = gate.open().expect("exec");
        assert_eq!(child.id(), pid);
        assert!(child.wait().expect("wait").success());
        assert_eq!(std::fs::read_to_string(&mark).expect("ran").trim(), pid.to_string(), "the pid the gate said");
        // Dropped without opening: nothing runs.
        let _ = std::fs::remove_file(&mark);
        drop(Gate::spawn(&spec(&["sh", "-c", &format!("touch {}", mark.display())])).expect("spawn"));
        assert!(!mark.exists(), "it ran though the gate was never opened");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn exec_failures_read_as_a_shell_says_them() {
        let dir = std::env::temp_dir().join(format!("lockprof-gate-noexec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmpdir");
        // A file without execute permission (exec refuses it even to root).
        let bad = dir.join("not-executable");
        std::fs::write(&bad, "#!/bin/sh\n").expect("write");
        let s = Spec { program: bad.clone(), argv: vec![bad.clone().into()], run_as: None, cgroup_procs: None };
        let e = Gate::spawn(&s).expect("at the gate").open().expect_err("exec refuses");
        assert_eq!(e.exit_code(), 126, "{e}");
        // It starts with no signal held, whatever lockprof holds.
        // SAFETY: sigset_t is plain data; pthread_sigmask only changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let mask = dir.join("mask");
        let held = Gate::spawn(&spec(&["sh", "-c", &format!("grep SigBlk /proc/self/status > {}", mask.display())]));
        let status = held.expect("spawn").open().expect("exec").wait().expect("wait");
        // SAFETY: as above.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        assert!(status.success());
        let mask = std::fs::read_to_string(&mask).expect("mask");
        assert_eq!(mask.trim(), "SigBlk:\t0000000000000000", "signals held in the command");
        // A cgroup that cannot be joined fails at the gate, before exec.
        let s = Spec { cgroup_procs: Some(dir.join("no-such-cgroup/cgroup.procs")), ..spec(&["true"]) };
        let e = Gate::spawn(&s).err().expect("cannot join");
        assert!(e.to_string().starts_with("cannot start true: joining its cgroup: "), "{e}");
        assert_eq!(e.exit_code(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
