//! How a kernel function is probed: the kind every attach result and error names.

/// Which probe mechanism.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// fentry/fexit (BPF trampolines).
    Fentry,
    /// kprobe/kretprobe.
    Kprobe,
}

impl ProbeKind {
    /// Both, in the order they are tried.
    pub const ALL: [ProbeKind; 2] = [ProbeKind::Fentry, ProbeKind::Kprobe];

    /// Name, as in reports.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Fentry => "fentry",
            ProbeKind::Kprobe => "kprobe",
        }
    }
}

/// Something lockprof could not probe, with the short reason and the details.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unavailable {
    /// One short clause a user can act on.
    pub reason: String,
    /// Every attempt and the kernel's answer, one line (logged with `-v`).
    pub detail: String,
}
