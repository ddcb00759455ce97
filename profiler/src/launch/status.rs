//! How the command ended, as a shell says it and passes it on.

use std::os::unix::process::ExitStatusExt as _;

/// The end of the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// `exit 3`, `killed by SIGINT`, `killed by SIGSEGV (core dumped)`.
    pub text: String,
    /// The status to exit with: the exit code, or 128 + the signal.
    pub code: u8,
}

/// A signal's name (`SIGINT`), or its number.
fn signal_name(sig: i32) -> String {
    const NAMES: [(i32, &str); 15] = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
    ];
    NAMES.iter().find(|(n, _)| *n == sig).map_or_else(|| format!("signal {sig}"), |(_, s)| s.to_string())
}

/// How `status` reads and what lockprof exits with for it.
pub fn ended(status: std::process::ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(c), _) => Ended { text: format!("exit {c}"), code: u8::try_from(c & 0xff).unwrap_or(1) },
        (None, Some(s)) => Ended {
            text: format!("killed by {}{}", signal_name(s), if status.core_dumped() { " (core dumped)" } else { "" }),
            code: u8::try_from(128 + (s & 0x7f)).unwrap_or(255),
        },
        (None, None) => Ended { text: format!("ended ({status})"), code: 1 },
    }
}

#[cfg(test)]
mod tests {
    use std::process::ExitStatus;

    use super::*;

    #[test]
    fn statuses_read_as_a_shell_passes_them_on() {
        let raw = ExitStatus::from_raw;
        assert_eq!(ended(raw(0)), Ended { text: "exit 0".into(), code: 0 });
        assert_eq!(ended(raw(3 << 8)), Ended { text: "exit 3".into(), code: 3 });
        assert_eq!(ended(raw(libc::SIGINT)), Ended { text: "killed by SIGINT".into(), code: 130 });
        assert_eq!(ended(raw(libc::SIGKILL)).code, 137);
        assert_eq!(ended(raw(libc::SIGSEGV | 0x80)).text, "killed by SIGSEGV (core dumped)");
        assert_eq!(ended(raw(40)).text, "killed by signal 40");
    }
}
