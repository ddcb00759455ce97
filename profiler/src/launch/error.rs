//! What can go wrong starting the command, with the exit status a shell
//! would give.

use std::{io, path::PathBuf};

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Nothing by that name on PATH, or no such file (exit status 127).
    #[error("{program}: command not found")]
    NotFound {
        /// The program as given.
        program: String,
    },
    /// Found, but it cannot be run: a directory, not executable, or exec
    /// refused it (exit status 126).
    #[error("{program}: {}", os_text(error))]
    CannotRun {
        /// The program as given.
        program: String,
        /// What the kernel answered.
        error: io::Error,
    },
    /// The user SUDO_UID names cannot be looked up or switched to.
    #[error("{0}")]
    User(String),
    /// The command's cgroup could not be made.
    #[error("cannot make the command's cgroup {}: {}", path.display(), os_text(error))]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// What the kernel answered.
        error: io::Error,
    },
    /// A signal arrived while lockprof attached: the command was not run
    /// (exit status 128 + the signal, as if it had killed it).
    #[error("{program} was not run: {signal} arrived while lockprof attached")]
    NotRun {
        /// The program as given.
        program: String,
        /// The signal's name.
        signal: &'static str,
        /// Its number.
        signo: i32,
    },
    /// Starting it failed before it could run (pipes, fork, the cgroup move,
    /// the user switch), or it died at the gate.
    #[error("cannot start {program}: {detail}")]
    Start {
        /// The program as given.
        program: String,
        /// What failed.
        detail: String,
    },
}

/// What the kernel answered, as a shell says it (`Permission denied`,
/// without Rust's ` (os error 13)`).
pub(super) fn os_text(e: &io::Error) -> String {
    let t = e.to_string();
    t.split(" (os error ").next().unwrap_or(&t).to_string()
}

impl LaunchError {
    /// The exit status lockprof ends with: 127 not found, 126 cannot run
    /// (as a shell), 2 bad input, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::NotFound { .. } => 127,
            LaunchError::CannotRun { .. } => 126,
            LaunchError::User(_) => 2,
            LaunchError::NotRun { signo, .. } => u8::try_from(128 + signo).unwrap_or(1),
            LaunchError::Cgroup { .. } | LaunchError::Start { .. } => 1,
        }
    }
}
