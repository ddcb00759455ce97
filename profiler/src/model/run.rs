//! How a recording was made, beyond the kernel's side: the command it was
//! made around (`record -- COMMAND`) and its round (`record --rounds N`).
//! Both are optional in recordings: older ones have neither.

use serde::{Deserialize, Serialize};

/// The command a recording lasted for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRun {
    /// Its arguments, the program first (lossy UTF-8).
    pub argv: Vec<String>,
    /// Its process id.
    pub pid: u32,
    /// The user id it ran as.
    pub uid: u32,
    /// How it ended, as a shell says it: `exit 0`, `killed by SIGKILL`.
    pub status: String,
    /// The exit status lockprof passed on (128 + N for a death by signal N).
    pub exit_code: u8,
    /// How only its processes were recorded (`--only-command`), when they
    /// were: `cgroup /lockprof-command-...` or `pid N (not its children)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
}

impl CommandRun {
    /// The command line, as a shell would read it back (arguments with
    /// spaces or quotes single-quoted).
    pub fn line(&self) -> String {
        shell_line(&self.argv)
    }
}

/// `argv` as one line a shell reads back as the same arguments.
pub fn shell_line(argv: &[String]) -> String {
    let plain = |a: &str| !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
    argv.iter()
        .map(|a| if plain(a) { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One round of `record --rounds N`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// This round, from 1.
    pub index: u32,
    /// Rounds asked for.
    pub of: u32,
    /// Names the run the rounds belong to (its start time and lockprof's
    /// pid): files of one set share it, so a stale file from an earlier run
    /// is never taken for one of its rounds.
    pub set: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let argv: Vec<String> = ["lockprof", "stress", "prio", "--duration", "1.5", "a b", "it's", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_line(&argv), r"lockprof stress prio --duration 1.5 'a b' 'it'\''s' ''");
    }
}
