//! Recording files: what `record --output` writes and `report --input` reads.
//!
//! A recording is a JSON document `{"format": "lockprof-recording",
//! "version": 1, "profile": {...}}` holding the symbolized profile with full
//! histograms, so reports can be re-sorted and re-grouped later. `rounds`
//! names and reads the files of `record --rounds N`.

mod rounds;

pub use rounds::{Loaded, load_set, load_side, round_path};

use std::{
    fs::File,
    io::Read,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{
    model::Profile,
    output_file::{OutputFile, WriteError},
};

/// Value of the `format` field.
pub const FORMAT: &str = "lockprof-recording";
/// Current version.
pub const VERSION: u32 = 1;

/// Errors reading or writing recordings.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// File involved.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not a lockprof recording (not JSON, or another format).
    #[error("{path}: not a lockprof recording ({detail})")]
    Foreign {
        /// File involved.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// A recording from a newer lockprof.
    #[error("{path}: recording version {found} is newer than this lockprof understands ({VERSION})")]
    Version {
        /// File involved.
        path: PathBuf,
        /// Version in the file.
        found: u32,
    },
    /// The recording is damaged (truncated or edited).
    #[error("{path}: damaged recording: {detail}")]
    Corrupt {
        /// File involved.
        path: PathBuf,
        /// Parser message.
        detail: String,
    },
}

#[derive(Serialize)]
struct Out<'a> {
    format: &'static str,
    version: u32,
    profile: &'a Profile,
}

#[derive(Deserialize)]
struct Header {
    format: Option<String>,
    version: Option<u32>,
}

#[derive(Deserialize)]
struct In {
    profile: Profile,
}

/// The bytes of a recording of `profile` (`path` is only used in messages).
pub fn to_bytes(path: &Path, profile: &Profile) -> Result<Vec<u8>, RecordingError> {
    let mut bytes = serde_json::to_vec(&Out { format: FORMAT, version: VERSION, profile })
        .map_err(|e| RecordingError::Corrupt { path: path.to_path_buf(), detail: e.to_string() })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Writes a recording to `path`, whole or not at all (see [`OutputFile`]).
pub fn save(path: &Path, profile: &Profile) -> Result<PathBuf, RecordingError> {
    let out = OutputFile::open(path)?;
    Ok(out.write(&to_bytes(path, profile)?)?)
}

impl From<WriteError> for RecordingError {
    fn from(e: WriteError) -> Self {
        RecordingError::Io { path: e.path, source: e.source }
    }
}

/// Reads a recording.
pub fn load(path: &Path) -> Result<Profile, RecordingError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|source| RecordingError::Io { path: path.to_path_buf(), source })?;
    parse(path, &bytes)
}

/// Parses recording bytes (`path` is only used in messages).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Profile, RecordingError> {
    let foreign = |detail: String| RecordingError::Foreign { path: path.to_path_buf(), detail };
    let header: Header = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_eof() && !bytes.is_empty() {
            RecordingError::Corrupt { path: path.to_path_buf(), detail: format!("truncated: {e}") }
        } else if bytes.is_empty() {
            foreign("the file is empty".into())
        } else {
            foreign(format!("not a JSON object: {e}"))
        }
    })?;
    match header.format.as_deref() {
        Some(FORMAT) => {}
        Some(other) => return Err(foreign(format!("format is {other:?}"))),
        None => return Err(foreign("no \"format\" field".into())),
    }
    let version = header.version.unwrap_or(0);
    if version > VERSION {
        return Err(RecordingError::Version { path: path.to_path_buf(), found: version });
    }
    let rec: In = serde_json::from_slice(bytes)
        .map_err(|e| RecordingError::Corrupt { path: path.to_path_buf(), detail: e.to_string() })?;
    Ok(rec.profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ReportOptions, fixture, render_json, render_text};

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("lockprof-rec-{}-{name}", std::process::id()))
    }

    #[test]
    fn round_trip_renders_identically() {
        for (name, p) in [("rt", fixture::profile()), ("rt-yield", fixture::profile_with_yields())] {
            let path = tmp(name);
            save(&path, &p).expect("save");
            let back = load(&path).expect("load");
            let _ = std::fs::remove_file(&path);
            let opts = ReportOptions::default();
            assert_eq!(render_text(&back, &opts), render_text(&p, &opts));
            assert_eq!(render_json(&back, &opts), render_json(&p, &opts));
            assert_eq!(back.meta, p.meta);
            assert_eq!(back.yield_to.is_some(), p.yield_to.is_some());
        }
    }

    #[test]
    fn the_command_and_round_round_trip_and_older_recordings_have_neither() {
        use crate::model::{CommandRun, Round};
        let mut p = fixture::profile();
        let bytes = to_bytes(Path::new("x"), &p).expect("bytes");
        assert!(!String::from_utf8_lossy(&bytes).contains("\"command\""), "absent fields are not written");
        assert_eq!(parse(Path::new("x"), &bytes).expect("parse").meta.command, None);
        p.meta.command = Some(CommandRun {
            argv: vec!["make".into(), "-j".into(), "8".into()],
            pid: 42,
            uid: 1000,
            status: "exit 2".into(),
            exit_code: 2,
            only: Some("cgroup /lockprof-command-42".into()),
        });
        p.meta.round = Some(Round { index: 2, of: 5, set: "1700000000-7".into() });
        let back = parse(Path::new("x"), &to_bytes(Path::new("x"), &p).expect("bytes")).expect("parse");
        assert_eq!(back.meta, p.meta);
        let text = render_text(&back, &ReportOptions::default());
        assert!(text.contains("command: make -j 8 (pid 42, uid 1000): exit 2; only its processes: cgroup"), "{text}");
        assert!(text.contains("\nround 2 of 5\n"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&back, &ReportOptions::default())).expect("json");
        assert_eq!((json["command"]["exit_code"].as_u64(), json["round"]["of"].as_u64()), (Some(2), Some(5)));
    }

    /// Written by lockprof before its counters were typed (`drops` a plain
    /// name -> count map), with the reports it rendered from it.
    const UNTYPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/v1-untyped-counters");

    #[test]
    fn recordings_with_untyped_counters_load_and_render_as_before() {
        let dir = Path::new(UNTYPED);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("test data");
        let p = load(&dir.join("recording.json")).expect("load");
        let d = &p.meta.drops;
        assert_eq!(
            (d.losses.pending_map_full, d.losses.recursion_misses, d.bookkeeping.caller_keys_overflow),
            (30, 4, 7)
        );
        let opts = ReportOptions::default();
        // As before, but for counters added since, which an old recording
        // cannot have had: present in the new rendering, and 0.
        let mut now: serde_json::Value = serde_json::from_str(&render_json(&p, &opts)).expect("json");
        let then: serde_json::Value = serde_json::from_str(&read("report.json")).expect("json");
        let (Some(drops), Some(old)) = (now["drops"].as_object_mut(), then["drops"].as_object()) else {
            panic!("no drops object");
        };
        let added: Vec<String> = drops.keys().filter(|k| !old.contains_key(*k)).cloned().collect();
        for k in &added {
            assert_eq!(drops.remove(k), Some(serde_json::json!(0)), "{k}");
        }
        assert_eq!(
            added,
            [
                "agg_cache_missed",
                "cgroup_keys_overflow",
                "debuginfod_fetched",
                "debuginfod_missed",
                "futex_again",
                "futex_failed",
                "futex_interrupted",
                "futex_map_full",
                "futex_rewaits",
                "futex_timed_out",
                "futex_waits",
                "map_ops_refused",
                "nested",
                "owner_stack_skipped",
                "stack_proven",
                "stacks_cut",
                "stacks_evicted",
                "stacks_late",
                "stacks_read",
                "stacks_stored",
                "unwind_binaries_unreadable",
                "unwind_copy_short",
                "unwind_deep",
                "unwind_dropped",
                "unwind_map_refused",
                "unwind_no_rule",
                "unwind_plan_full",
                "unwind_process_gone",
                "unwind_stacks",
                "user_stack_copies",
                "user_stack_failed",
                "user_stack_left_code",
                "user_stack_signed",
                "user_stack_truncated",
                "user_stacks_evicted",
                "user_stacks_stored",
                "user_stacks_unpinned",
                "yield_skipped"
            ]
        );
        // cgroups came later too: none in an old recording.
        assert_eq!(now.as_object_mut().and_then(|o| o.remove("cgroups")), Some(serde_json::json!([])));
        for l in now["locks"].as_array_mut().into_iter().flatten() {
            // And --group-by site's process counts: null in a row per address.
            assert_eq!(l.as_object_mut().and_then(|o| o.remove("processes")), Some(serde_json::Value::Null));
            for c in l["callers"].as_array_mut().into_iter().flatten() {
                assert_eq!(c.as_object_mut().and_then(|o| o.remove("cgroups")), Some(serde_json::json!([])));
                // So did user stacks.
                assert_eq!(c.as_object_mut().and_then(|o| o.remove("user_caller")), Some(serde_json::Value::Null));
                // And the flag that a caller is known (each of these is a function).
                assert_eq!(
                    c.as_object_mut().and_then(|o| o.remove("caller_known")),
                    Some(serde_json::Value::Bool(true))
                );
            }
        }
        assert_eq!(now, then);
        // The text is the same but for the losses named on the counters line.
        let old = read("report.txt");
        let (losses, text) =
            (" (lost: hold_map_full ident_map_full pending_map_full recursion_misses)", render_text(&p, &opts));
        let counters = old.lines().nth(1).expect("a counters line");
        assert!(counters.starts_with("counters: "), "{counters}");
        assert_eq!(text, old.replacen(counters, &format!("{counters}{losses}"), 1));
        // A counter this version does not know (from another version) is skipped.
        let other =
            read("recording.json").replacen("\"agg_map_full\":0", "\"retired_counter\":5,\"agg_map_full\":0", 1);
        assert!(other.contains("retired_counter"));
        assert_eq!(parse(dir, other.as_bytes()).expect("parse").meta, p.meta);
    }

    #[test]
    fn bad_inputs_get_clear_errors() {
        let p = Path::new("in.json");
        let cases: [(&[u8], &str); 6] = [
            (b"", "empty"),
            (b"\x7fELF\x02\x01", "not a lockprof recording"),
            (br#"{"traceEvents": []}"#, "no \"format\" field"),
            (br#"{"format": "perf.data"}"#, "format is \"perf.data\""),
            (br#"{"format": "lockprof-recording", "version": 99, "profile": {}}"#, "newer"),
            (br#"{"format": "lockprof-recording", "version": 1, "profile": {"meta": 3}}"#, "damaged"),
        ];
        for (bytes, want) in cases {
            let err = parse(p, bytes).expect_err("must fail");
            assert!(err.to_string().contains(want), "{want:?} not in {err}");
        }
        let full =
            serde_json::to_vec(&Out { format: FORMAT, version: VERSION, profile: &fixture::profile() }).expect("ser");
        let err = parse(p, &full[..full.len() / 2]).expect_err("truncated");
        assert!(err.to_string().contains("damaged"), "{err}");
    }
}
