//! The hold backend: release functions are probed with fentry wherever BPF
//! trampolines work (kprobes are only the fallback), with none of the common
//! release functions left out (5.10's verifier once refused the release
//! programs' lock hash, and holds fell back to kprobes unnoticed).

use libtest_mimic::Trial;
use lockprof::ebpf::{BackendChoice, LoadOptions, Probes, probes::ProbeKind};

use super::{checks::Check, facts::Facts, trial};

/// Release functions every kernel of the matrix has out of line.
const COMMON_RELEASES: [&str; 3] = ["mutex_unlock", "up_read", "up_write"];

/// Loads with holds on (no yield_to) and reads which kind timed them.
fn fentry_holds(f: &Facts) -> Check {
    let opts = LoadOptions { backend: BackendChoice::Auto, holds: true, yield_to: false, ..Default::default() };
    let mut probes = Probes::load(&opts).map_err(|e| format!("loading: {e}"))?;
    let hold = probes.hold().map_err(|u| format!("no hold backend: {} ({})", u.reason, u.detail));
    let notes = probes.notes().to_vec();
    probes.detach();
    match hold? {
        ProbeKind::Fentry => {}
        k => return Err(format!("holds are timed with {} where fentry works; notes: {notes:?}", k.name())),
    }
    let expected: Vec<&str> = COMMON_RELEASES.iter().copied().filter(|r| f.has_function(r)).collect();
    let left_out: Vec<&String> =
        notes.iter().filter(|n| expected.iter().any(|r| n.starts_with(&format!("hold times: {r} ")))).collect();
    if !left_out.is_empty() {
        return Err(format!("fentry holds leave out common release functions: {left_out:?}"));
    }
    Ok(format!("holds timed with fentry, including {}", expected.join(", ")))
}

/// The trial: skipped only where fentry cannot work or the kernel inlines mutex_unlock.
pub fn trials(f: &'static Facts) -> Vec<Trial> {
    let missing = f.fentry_missing().or_else(|| f.release_missing("mutex_unlock"));
    vec![trial("holds::fentry_where_trampolines_work".into(), missing, move || fentry_holds(f))]
}
