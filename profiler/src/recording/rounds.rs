//! Sets of rounds on disk: `record --rounds N --output before.lockprof`
//! writes `before.r1.lockprof` to `before.rN.lockprof`, and wherever a
//! recording is read for a comparison, `before.lockprof` names the whole
//! set when no such file exists but its first round does.

use std::path::{Path, PathBuf};

use super::{RecordingError, load};
use crate::model::Profile;

/// The file of round `k` of a set saved as `base`: `before.lockprof` ->
/// `before.r2.lockprof`, `before` -> `before.r2`.
pub fn round_path(base: &Path, k: u32) -> PathBuf {
    let name = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let named = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.r{k}.{ext}"),
        _ => format!("{name}.r{k}"),
    };
    base.with_file_name(named)
}

/// Recordings read for one side of a comparison, and what was odd about them.
#[derive(Debug, Default)]
pub struct Loaded {
    /// (the file as given or found, its profile), in order.
    pub recordings: Vec<(String, Profile)>,
    /// Rounds of a set that are missing or belong to another run.
    pub notes: Vec<String>,
}

/// Reads what `path` names: the recording itself, or, when no file is
/// there but `round_path(path, 1)` is, every round of that set (as many as
/// its first round says the set has; a round that is missing, or that
/// another run wrote, ends the set with a note).
pub fn load_set(path: &Path) -> Result<Loaded, RecordingError> {
    let first = round_path(path, 1);
    if path.exists() || !first.exists() {
        let p = load(path)?;
        return Ok(Loaded { recordings: vec![(path.display().to_string(), p)], notes: Vec::new() });
    }
    let p = load(&first)?;
    let (of, set) = p.meta.round.as_ref().map_or((u32::MAX, None), |r| (r.of, Some(r.set.clone())));
    let mut out = Loaded { recordings: vec![(first.display().to_string(), p)], notes: Vec::new() };
    for k in 2..=of {
        let file = round_path(path, k);
        if !file.exists() {
            if of != u32::MAX {
                out.notes.push(format!("{}: round {k} of {of} is missing (the run stopped early?)", path.display()));
            }
            break;
        }
        let p = load(&file)?;
        if p.meta.round.as_ref().map(|r| &r.set) != set.as_ref() {
            out.notes.push(format!("{}: another run wrote it, so the set ends at round {}", file.display(), k - 1));
            break;
        }
        out.recordings.push((file.display().to_string(), p));
    }
    Ok(out)
}

/// Reads every path of one side ([`load_set`] each), in order.
pub fn load_side(paths: &[PathBuf]) -> Result<Loaded, RecordingError> {
    let mut side = Loaded::default();
    for p in paths {
        let l = load_set(p)?;
        side.recordings.extend(l.recordings);
        side.notes.extend(l.notes);
    }
    Ok(side)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::Round, recording::save, report::fixture};

    #[test]
    fn round_files_are_named_from_the_output() {
        assert_eq!(round_path(Path::new("/tmp/before.lockprof"), 2), Path::new("/tmp/before.r2.lockprof"));
        assert_eq!(round_path(Path::new("before"), 10), Path::new("before.r10"));
        assert_eq!(round_path(Path::new("a.b.json"), 1), Path::new("a.b.r1.json"));
        assert_eq!(round_path(Path::new(".hidden"), 1), Path::new(".hidden.r1"));
    }

    #[test]
    fn a_base_name_loads_its_set_and_stops_at_a_stale_round() {
        let dir = std::env::temp_dir().join(format!("lockprof-rounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmpdir");
        let base = dir.join("prio.lockprof");
        let write = |k: u32, of: u32, set: &str| {
            let mut p = fixture::profile();
            p.meta.round = Some(Round { index: k, of, set: set.into() });
            save(&round_path(&base, k), &p).expect("save");
        };
        for k in 1..=3 {
            write(k, 4, "new");
        }
        write(4, 5, "old");
        write(5, 5, "old");
        let l = load_set(&base).expect("set");
        assert_eq!(l.recordings.len(), 3, "{:?}", l.notes);
        assert!(l.recordings[2].0.ends_with("prio.r3.lockprof"));
        assert!(l.notes[0].contains("another run wrote it, so the set ends at round 3"), "{:?}", l.notes);
        // One round, named explicitly: only it.
        let one = load_set(&round_path(&base, 2)).expect("one");
        assert_eq!(one.recordings.len(), 1);
        // Round 4 gone: the set is short, and says so.
        std::fs::remove_file(round_path(&base, 4)).expect("rm");
        let l = load_set(&base).expect("set");
        assert!(l.notes[0].contains("round 4 of 4 is missing"), "{:?}", l.notes);
        // Nothing at all: the error names the path asked for.
        let err = load_set(&dir.join("nothing.lockprof")).expect_err("missing");
        assert!(err.to_string().contains("nothing.lockprof"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
