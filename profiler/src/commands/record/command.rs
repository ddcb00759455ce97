//! One round of `record -- COMMAND`: the command held at its gate while the
//! session attaches, then let go; the recording ends when it exits. With
//! `--only-command` the session keeps only its processes: a cgroup made
//! for it (its children included), or, where none can be made, its own pid.

use std::ffi::OsString;

use anyhow::Context as _;

use crate::{
    cgroups::CgroupFs,
    cli::{RecordArgs, SessionArgs, UsageError},
    ebpf::{LoadError, check_privileges},
    launch::{self, Caught, CommandCgroup, Ended, Gate, LaunchError, RunAs, Signals, Spec},
    model::{CommandRun, Profile, shell_line},
    session::{Session, SessionOptions},
    shutdown::say,
};

/// The command, run once per round.
pub(super) struct CommandRounds {
    spec: Spec,
    argv: Vec<String>,
    session: SessionArgs,
    only: bool,
    signals: Signals,
    /// A signal arrived: the current round is the last.
    stopped: Option<Caught>,
}

/// A signal's name for messages.
fn sig_name(signo: i32) -> &'static str {
    match signo {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Why `--only-command` keeps only the command's own process, when it does.
fn pid_only_because(e: &dyn std::fmt::Display) -> String {
    format!("no cgroup could be made for the command ({e}): only its own process is recorded, not those it starts")
}

impl CommandRounds {
    /// Finds the command (127/126 when it cannot run) and the user it runs
    /// as, and starts taking signals; nothing is attached yet.
    pub(super) fn new(args: &RecordArgs) -> anyhow::Result<CommandRounds> {
        let argv0 = args.command.first().ok_or_else(|| UsageError("no command after --".into()))?;
        // Missing privileges are said before anything is made or started.
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg).into());
        }
        let run_as = RunAs::from_sudo(args.keep_root)?;
        let program = launch::resolve(argv0, std::env::var_os("PATH").as_deref(), run_as.as_ref())?;
        let spec = Spec { program, argv: args.command.clone(), run_as, cgroup_procs: None };
        let argv = args.command.iter().map(|a: &OsString| a.to_string_lossy().into_owned()).collect();
        let signals = Signals::catch().context("taking SIGINT, SIGTERM and SIGHUP")?;
        Ok(CommandRounds { spec, argv, session: args.session.clone(), only: args.only_command, signals, stopped: None })
    }

    /// A signal ended the rounds.
    pub(super) fn stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// The error of a command a signal kept from starting (exit status 128 + N).
    pub(super) fn not_run(&self) -> LaunchError {
        let signo = self.stopped.map_or(libc::SIGINT, |c| c.signo);
        LaunchError::NotRun { program: self.spec.name(), signal: sig_name(signo), signo }
    }

    /// The command's cgroup for `--only-command`, or why there is none.
    fn cgroup(&self, round: u32) -> Result<CommandCgroup, String> {
        let fs = CgroupFs::discover().map_err(|e| pid_only_because(&e))?;
        let name = format!("lockprof-command-{}-{round}", std::process::id());
        CommandCgroup::create(&fs, &name).map_err(|e| pid_only_because(&e))
    }

    /// Records one run of the command: its profile and how it ended; None
    /// when a signal came before it could start (it is then not run).
    pub(super) async fn round(&mut self, round: u32, what: &str) -> anyhow::Result<Option<(Profile, Ended)>> {
        // A signal during the round before (its finishing) ends the rounds here.
        if let Some(c) = self.signals.pending() {
            self.stopped = Some(c);
            return Ok(None);
        }
        let cgroup = if self.only { Some(self.cgroup(round)) } else { None };
        let mut spec = self.spec.clone();
        spec.cgroup_procs = cgroup.as_ref().and_then(|c| c.as_ref().ok()).map(CommandCgroup::procs);
        let gate = Gate::spawn(&spec)?;
        let pid = gate.pid();
        let mut session_args = self.session.clone();
        let only = match &cgroup {
            Some(Ok(c)) => {
                session_args.cgroup.push(c.rel().to_string());
                Some(format!("cgroup {}", c.rel()))
            }
            Some(Err(why)) => {
                say(&format!("lockprof: {why}"));
                session_args.pid.push(pid);
                Some(format!("pid {pid} (not the processes it starts: {why})"))
            }
            None => None,
        };
        let mut opts = SessionOptions::try_from(&session_args)?;
        // The filter the recording names is the command, the same every
        // round (its cgroup or pid changes from round to round).
        let own = |f: &String| match &cgroup {
            Some(Ok(c)) => f.strip_prefix("cgroup=") == Some(c.rel()),
            Some(Err(_)) => f.strip_prefix("pid=") == Some(&pid.to_string()),
            None => false,
        };
        opts.filters.retain(|f| !own(f));
        match &cgroup {
            Some(Ok(_)) => opts.filters.push("only-command".into()),
            Some(Err(why)) => {
                opts.filters.push("only-command(pid)".into());
                opts.notes.push(format!("--only-command: {why}"));
            }
            None => {}
        }
        let session = Session::start(opts)?;
        if let Some(c) = self.signals.pending() {
            // Held at the gate: dropping it ends it without running anything.
            drop(gate);
            self.stopped = Some(c);
            session.finish().await.context("finishing the recording")?;
            return Ok(None);
        }
        let line = shell_line(&self.argv);
        let mut child = match gate.open() {
            Ok(c) => c,
            Err(e) => {
                session.finish().await.context("finishing the recording")?;
                return Err(e.into());
            }
        };
        let whose = only.as_ref().map_or(String::new(), |o| format!("; only its processes: {o}"));
        say(&format!(
            "lockprof: recording{what} with the {} backend while `{line}` runs (pid {pid}{whose}); signals are passed on to it",
            session.backend()
        ));
        let mut exited = launch::exited(pid);
        loop {
            tokio::select! {
                _ = &mut exited => break,
                Some(c) = self.signals.recv() => self.pass_on(c, pid),
            }
        }
        let ended = launch::ended(child.wait().context("reaping the command")?);
        let mut profile = session.finish().await.context("finishing the recording")?;
        // Removed once the session no longer reads it.
        drop(cgroup);
        say(&format!("lockprof: `{line}` ended: {}", ended.text));
        let uid = self.spec.run_as.as_ref().map_or_else(
            // SAFETY: getuid has no preconditions.
            || unsafe { libc::getuid() },
            |u| u.uid,
        );
        profile.meta.command = Some(CommandRun {
            argv: self.argv.clone(),
            pid,
            uid,
            status: ended.text.clone(),
            exit_code: ended.code,
            only,
        });
        Ok(Some((profile, ended)))
    }

    /// Passes a signal on to the command (still unreaped, so `pid` is its),
    /// unless the terminal sent it to the whole foreground group already or
    /// the command sent it itself. Every one ends the rounds.
    fn pass_on(&mut self, c: Caught, pid: u32) {
        let first = self.stopped.is_none();
        self.stopped = Some(c);
        let name = sig_name(c.signo);
        if c.from_terminal || c.sender == pid as i32 {
            if first {
                say(&format!("lockprof: {name}: the command got it too; recording until it exits"));
            }
            return;
        }
        // SAFETY: kill(2) on our child, not yet reaped (it is waited for
        // without WNOWAIT only after the loop that calls this).
        let rc = unsafe { libc::kill(pid as libc::pid_t, c.signo) };
        if rc == 0 {
            say(&format!("lockprof: {name} passed on to the command (pid {pid}); recording until it exits"));
        }
    }
}
