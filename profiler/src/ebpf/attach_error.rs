//! Why a program did not load or attach, kept typed (aya's errors and the
//! kernel's errno) until it is shown: one line for messages, the verifier's
//! log apart (for `-v` and `doctor --json`), and the cause a user can act on
//! read from the error's type and errno, never from its text.

use aya::programs::{ProgramError, kprobe::KProbeError};

use super::{TracefsError, error_chain, probe_kind::ProbeKind};

/// Why one program could not be loaded or attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The object has no program of that name.
    #[error("program {0} missing from the object")]
    Missing(&'static str),
    /// The program is not of the expected type.
    #[error("program {prog}: {}", error_chain(.error))]
    WrongType {
        /// Program name.
        prog: &'static str,
        /// aya's answer.
        error: ProgramError,
    },
    /// The kernel (or aya, before the syscall) refused to load it.
    #[error("loading {prog}: {}", one_line(.error))]
    Load {
        /// Program name.
        prog: &'static str,
        /// aya's answer, with the verifier's log when there is one.
        error: ProgramError,
    },
    /// Loaded, but the kernel refused to attach it.
    #[error("attaching {prog} to {target}: {}", one_line(.error))]
    Attach {
        /// Program name.
        prog: &'static str,
        /// Function or tracepoint.
        target: String,
        /// aya's answer.
        error: ProgramError,
    },
    /// The kernel's BTF is missing or unreadable.
    #[error("no kernel BTF (/sys/kernel/btf/vmlinux): it needs CONFIG_DEBUG_INFO_BTF")]
    NoBtf,
    /// The classic tracepoints need tracefs.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// A file descriptor of a loaded program could not be duplicated.
    #[error("duplicating the fd of {prog}: {error}")]
    Fd {
        /// Program name.
        prog: &'static str,
        /// The system's answer.
        error: std::io::Error,
    },
}

/// What a failure means, in words a user can act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The kernel has no kprobe PMU.
    NoKprobes,
    /// The kernel refuses BPF trampolines (EPERM on a fentry/fexit program).
    TrampolinesRefused,
    /// The function is not in this kernel (absent from kallsyms or BTF).
    NotInKernel,
    /// The verifier gave up on the program's size or complexity (E2BIG).
    TooLarge,
    /// The verifier rejected the program (its log says why).
    Verifier,
}

impl Cause {
    /// A short clause.
    pub fn short(self) -> &'static str {
        match self {
            Cause::NoKprobes => "no kprobes",
            Cause::TrampolinesRefused => "BPF trampolines refused",
            Cause::NotInKernel => "function not in this kernel",
            Cause::TooLarge => "program too large for this kernel's verifier",
            Cause::Verifier => "rejected by the verifier",
        }
    }

    /// The explanation.
    pub fn explained(self) -> &'static str {
        match self {
            Cause::NoKprobes => "no kprobe PMU: the kernel was built without CONFIG_KPROBES",
            Cause::TrampolinesRefused => {
                "the kernel refused a BPF trampoline: fentry/fexit need CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, and lockdown or the hypervisor may forbid them"
            }
            Cause::NotInKernel => "the function is not in this kernel (renamed or inlined)",
            Cause::TooLarge => "the verifier of this kernel gave up on the program's size (E2BIG)",
            Cause::Verifier => "the verifier of this kernel rejected the program; -v or doctor --json show its log",
        }
    }
}

/// aya's error in one line: the verifier's log, which aya puts in its
/// message, is left out (see [`AttachError::verifier_log`]).
fn one_line(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError { io_error, verifier_log } => {
            let log = verifier_log.to_string();
            match verdict(&log) {
                Some(v) => format!("the BPF_PROG_LOAD syscall returned {io_error}; the verifier: {v}"),
                None => format!("the BPF_PROG_LOAD syscall returned {io_error}"),
            }
        }
        e => error_chain(e),
    }
}

/// The verifier's verdict from the end of its log: its last line that is
/// not the statistics' (`processed N insns ...`), with those statistics
/// when the program was too large for it.
fn verdict(log: &str) -> Option<String> {
    let mut lines = log.lines().map(str::trim).filter(|l| !l.is_empty()).rev();
    let mut stats = None;
    for l in lines.by_ref() {
        if l.starts_with("processed ") {
            stats = Some(l);
            continue;
        }
        if l.starts_with("verification time") || l.starts_with("stack depth") {
            continue;
        }
        return Some(match stats {
            Some(s) if l.contains("too large") || l.contains("too complex") => format!("{l} ({s})"),
            _ => l.to_string(),
        });
    }
    stats.map(str::to_string)
}

impl AttachError {
    /// The kernel's errno, when the failure is one.
    pub fn os_error(&self) -> Option<i32> {
        let program = match self {
            AttachError::Load { error, .. } | AttachError::Attach { error, .. } => error,
            AttachError::Fd { error, .. } => return error.raw_os_error(),
            _ => return None,
        };
        match program {
            ProgramError::LoadError { io_error, .. } => io_error.raw_os_error(),
            ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
            ProgramError::KProbeError(KProbeError::FileError { io_error, .. }) => io_error.raw_os_error(),
            _ => None,
        }
    }

    /// The verifier's log, when the verifier rejected the program.
    pub fn verifier_log(&self) -> Option<String> {
        match self {
            AttachError::Load { error: ProgramError::LoadError { verifier_log, .. }, .. } => {
                Some(verifier_log.to_string()).filter(|l| !l.trim().is_empty())
            }
            _ => None,
        }
    }

    /// What the failure means, when that is known.
    pub fn cause(&self, kind: ProbeKind) -> Option<Cause> {
        let errno = self.os_error();
        match self {
            // aya reads the kprobe PMU's type from sysfs first: absent, no kprobes.
            AttachError::Attach { error: ProgramError::KProbeError(KProbeError::FileError { .. }), .. }
                if errno == Some(libc::ENOENT) =>
            {
                Some(Cause::NoKprobes)
            }
            // fentry/fexit programs name their function's BTF type at load.
            AttachError::Load { error: ProgramError::Btf(aya::BtfError::UnknownBtfTypeName { .. }), .. } => {
                Some(Cause::NotInKernel)
            }
            AttachError::Attach { .. } if errno == Some(libc::ENOENT) => Some(Cause::NotInKernel),
            AttachError::Load { .. } | AttachError::Attach { .. }
                if kind == ProbeKind::Fentry && errno == Some(libc::EPERM) =>
            {
                Some(Cause::TrampolinesRefused)
            }
            AttachError::Load { .. } if errno == Some(libc::E2BIG) => Some(Cause::TooLarge),
            AttachError::Load { .. } if self.verifier_log().is_some() => Some(Cause::Verifier),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Error;

    #[test]
    fn the_verifier_verdict_is_its_last_word() {
        let log = "0: (bf) r6 = r1\n...\nBPF program is too large. Processed 1000001 insn\n\
processed 1000001 insns (limit 1000000) max_states_per_insn 33 total_states 9000 peak_states 4000 mark_read 12\n";
        assert_eq!(
            verdict(log).as_deref(),
            Some(
                "BPF program is too large. Processed 1000001 insn (processed 1000001 insns (limit 1000000) \
max_states_per_insn 33 total_states 9000 peak_states 4000 mark_read 12)"
            )
        );
        let log = "10: (79) r0 = *(u64 *)(r1 +0)\nR1 invalid mem access 'scalar'\nprocessed 12 insns (limit 1000000)\n";
        assert_eq!(verdict(log).as_deref(), Some("R1 invalid mem access 'scalar'"));
        assert_eq!(verdict("  \n"), None);
    }

    use aya::{programs::ProgramError, sys::SyscallError};

    use super::*;
    use crate::ebpf::probes::Attached;

    fn rejected(errno: i32, log: &str) -> AttachError {
        AttachError::Load {
            prog: "fr_mutex_unlock",
            error: ProgramError::LoadError {
                io_error: Error::from_raw_os_error(errno),
                verifier_log: aya_obj::VerifierLog::new(log.into()),
            },
        }
    }

    fn attach_failed(errno: i32) -> AttachError {
        AttachError::Attach {
            prog: "kp_release",
            target: "mutex_unlock".into(),
            error: ProgramError::SyscallError(SyscallError {
                call: "perf_event_open",
                io_error: Error::from_raw_os_error(errno),
            }),
        }
    }

    #[test]
    fn causes_come_from_the_error_types_and_errno() {
        let log =
            "0: (79) r1 = *(u64 *)(r1 +0)\nR1 pointer arithmetic with >>= operator prohibited\nprocessed 97 insns";
        let verifier = rejected(libc::EACCES, log);
        assert_eq!(verifier.cause(ProbeKind::Fentry), Some(Cause::Verifier));
        assert_eq!(verifier.verifier_log().as_deref(), Some(log));
        assert_eq!(rejected(libc::E2BIG, log).cause(ProbeKind::Fentry), Some(Cause::TooLarge));
        assert_eq!(rejected(libc::EPERM, "").cause(ProbeKind::Fentry), Some(Cause::TrampolinesRefused));
        assert_eq!(rejected(libc::EPERM, "").cause(ProbeKind::Kprobe), None);
        assert_eq!(attach_failed(libc::ENOENT).cause(ProbeKind::Kprobe), Some(Cause::NotInKernel));
        assert_eq!(attach_failed(libc::EPERM).cause(ProbeKind::Fentry), Some(Cause::TrampolinesRefused));
        let no_pmu = AttachError::Attach {
            prog: "kp_release",
            target: "mutex_unlock".into(),
            error: ProgramError::KProbeError(KProbeError::FileError {
                filename: "/sys/bus/event_source/devices/kprobe/type".into(),
                io_error: Error::from_raw_os_error(libc::ENOENT),
            }),
        };
        assert_eq!(no_pmu.cause(ProbeKind::Kprobe), Some(Cause::NoKprobes));
        let unknown = AttachError::Load {
            prog: "fr_rt_read_unlock",
            error: ProgramError::Btf(aya::BtfError::UnknownBtfTypeName { type_name: "rt_read_unlock".into() }),
        };
        assert_eq!(unknown.cause(ProbeKind::Fentry), Some(Cause::NotInKernel));
    }

    #[test]
    fn messages_are_one_line_and_the_verifier_log_stays_apart() {
        let log = "func#0 @0\n".repeat(500) + "R1 pointer arithmetic with >>= operator prohibited\n";
        let a = Attached {
            kind: ProbeKind::Fentry,
            ok: vec!["up_read"],
            failed: vec![("mutex_unlock", rejected(libc::EACCES, &log))],
        };
        for text in [a.summary(), a.reason(), a.failed[0].1.to_string()] {
            assert!(!text.contains('\n') && !text.contains("func#0") && text.len() < 300, "{text}");
        }
        assert_eq!(a.reason(), "rejected by the verifier");
        assert!(a.summary().starts_with("mutex_unlock: loading fr_mutex_unlock: the BPF_PROG_LOAD syscall returned"));
        let logs: Vec<_> = a.verifier_logs().collect();
        assert_eq!(logs.len(), 1);
        assert_eq!((logs[0].0, logs[0].1.as_str()), ("mutex_unlock", log.as_str()));
    }
}
