//! Doctor's section on `--user-stacks`: the running binaries that have
//! neither unwind tables nor frame pointers, whose callers no unwinding
//! can show (surveyed by [`crate::symbols::user::unwind::audit`]).

use std::fmt::Write as _;

use crate::symbols::user::unwind::{AuditError, UnwindAudit};

/// Binaries listed at most; the rest are counted.
const MAX_ROWS: usize = 20;

/// `n` and the noun, singular or plural.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The section: a heading, the binaries without unwind information (the
/// first [`MAX_ROWS`]), the summary, and what could not be read.
pub fn unwinding_text(found: &Result<UnwindAudit, AuditError>) -> String {
    let mut s = String::from("user-stack unwinding (--user-stacks):\n");
    let a = match found {
        Ok(a) => a,
        Err(_) => {
            let _ = writeln!(s, "  {}", unwinding_summary(found));
            return s;
        }
    };
    for b in a.without_unwind_info.iter().take(MAX_ROWS) {
        let _ = writeln!(
            s,
            "  {}: {} (e.g. {}[{}]); frame pointers: {}",
            b.path,
            count(b.processes, "process", "processes"),
            b.example_comm,
            b.example_pid,
            b.unwind.frame_pointers
        );
    }
    if let Some(more) = a.without_unwind_info.len().checked_sub(MAX_ROWS).filter(|&n| n > 0) {
        let _ = writeln!(s, "  ... and {more} more");
    }
    let _ = writeln!(s, "  {}", unwinding_summary(found));
    let mut unread = Vec::new();
    if a.unreadable_processes > 0 {
        unread.push(format!(
            "{} could not be read (no permission for /proc/PID/maps): {} binaries are not included",
            count(a.unreadable_processes, "process", "processes"),
            if a.unreadable_processes == 1 { "its" } else { "their" }
        ));
    }
    if a.unreadable_binaries > 0 {
        unread.push(format!("{} could not be opened or parsed", count(a.unreadable_binaries, "binary", "binaries")));
    }
    if !unread.is_empty() {
        let _ = writeln!(s, "  {}", unread.join("; "));
    }
    s
}

/// The one-line summary (the text's last line but one, and the JSON's
/// detail), or why there is none.
pub fn unwinding_summary(found: &Result<UnwindAudit, AuditError>) -> String {
    let a = match found {
        Ok(a) => a,
        Err(e) => return format!("unknown ({e}): the running binaries were not surveyed"),
    };
    let mut s = format!(
        "{} mapped by {}; ",
        count(a.binaries, "binary", "binaries"),
        count(a.processes, "process", "processes")
    );
    let none = a.cannot_unwind();
    let unknown = a.without_unwind_info.len() - none;
    let has = |n: usize| if n == 1 { "has" } else { "have" };
    let mut parts = Vec::new();
    if none > 0 {
        parts.push(format!(
            "{none} {} no unwind information (.eh_frame/.debug_frame) and no frame pointers: their callers cannot be shown",
            has(none)
        ));
    }
    if unknown > 0 {
        parts.push(format!(
            "{unknown} {} no unwind information and too few function symbols to tell whether frame pointers \
             show their callers",
            has(unknown)
        ));
    }
    if parts.is_empty() {
        s.push_str("every running binary has .eh_frame, .debug_frame or frame pointers");
    } else {
        s.push_str(&parts.join("; "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::user::unwind::{FramePointers, MappedBinary, UnwindInfo};

    fn binary(path: &str, processes: usize, fp: FramePointers) -> MappedBinary {
        let unwind = UnwindInfo { eh_frame: false, eh_frame_hdr: false, debug_frame: false, frame_pointers: fp };
        MappedBinary {
            path: path.into(),
            processes,
            example_pid: 4242,
            example_comm: "worker".into(),
            cannot_unwind: unwind.cannot_unwind(),
            unwind,
        }
    }

    #[test]
    fn each_binary_without_unwind_information_is_listed_then_summed_up() {
        let a = UnwindAudit {
            processes: 12,
            unreadable_processes: 3,
            binaries: 40,
            unreadable_binaries: 1,
            without_unwind_info: vec![
                binary("/opt/app/bin/server", 2, FramePointers::of_sample(1, 90)),
                binary("/opt/app/lib/libtiny.so", 1, FramePointers::of_sample(0, 2)),
            ],
        };
        let text = unwinding_text(&Ok(a));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "user-stack unwinding (--user-stacks):",
                "  /opt/app/bin/server: 2 processes (e.g. worker[4242]); frame pointers: no (1 of 90 functions set up \
                 a frame)",
                "  /opt/app/lib/libtiny.so: 1 process (e.g. worker[4242]); frame pointers: unknown (0 of 2 functions \
                 set up a frame: too few to tell)",
                "  40 binaries mapped by 12 processes; 1 has no unwind information (.eh_frame/.debug_frame) and no \
                 frame pointers: their callers cannot be shown; 1 has no unwind information and too few function \
                 symbols to tell whether frame pointers show their callers",
                "  3 processes could not be read (no permission for /proc/PID/maps): their binaries are not \
                 included; 1 binary could not be opened or parsed",
            ]
        );
    }

    #[test]
    fn the_list_is_capped_and_a_clean_machine_says_so() {
        let many = (0..MAX_ROWS + 3).map(|i| binary(&format!("/bin/p{i}"), 1, FramePointers::of_sample(0, 50)));
        let a = UnwindAudit { processes: 30, binaries: 60, without_unwind_info: many.collect(), ..Default::default() };
        let text = unwinding_text(&Ok(a));
        assert_eq!(text.lines().filter(|l| l.starts_with("  /bin/p")).count(), MAX_ROWS, "{text}");
        assert!(text.contains("\n  ... and 3 more\n"), "{text}");
        assert!(
            text.contains("; 23 have no unwind information (.eh_frame/.debug_frame) and no frame pointers"),
            "{text}"
        );
        assert!(!text.contains("could not be"), "{text}");

        let clean = UnwindAudit { processes: 1, unreadable_processes: 1, binaries: 1, ..Default::default() };
        let text = unwinding_text(&Ok(clean.clone()));
        assert!(
            text.ends_with(
                "\n  1 process could not be read (no permission for /proc/PID/maps): its binaries are not included\n"
            ),
            "{text}"
        );
        assert_eq!(
            unwinding_summary(&Ok(clean)),
            "1 binary mapped by 1 process; every running binary has .eh_frame, .debug_frame or frame pointers"
        );
        let failed = Err(AuditError::Proc { source: std::io::Error::from(std::io::ErrorKind::PermissionDenied) });
        let text = unwinding_text(&failed);
        assert!(text.starts_with("user-stack unwinding (--user-stacks):\n  unknown (listing /proc: "), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }
}
