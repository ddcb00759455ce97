//! The incident directory: incidents written whole (as recordings), at
//! most so many per hour, and the oldest deleted beyond a size cap. Only
//! files lockprof named (`incident-*.json`) are listed or deleted.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::{
    model::Profile,
    recording::{self, RecordingError},
};

/// File names of incidents start with this.
pub const PREFIX: &str = "incident-";
const SUFFIX: &str = ".json";

/// Errors of the incident directory.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory cannot be made or written.
    #[error("incident directory {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    /// An incident could not be written.
    #[error("writing an incident: {0}")]
    Write(#[from] RecordingError),
}

/// One incident file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its id (the file name without `.json`).
    pub id: String,
    /// Its size.
    pub bytes: u64,
}

/// Whether `id` can name an incident file (no path tricks).
pub fn valid_id(id: &str) -> bool {
    id.starts_with(PREFIX)
        && id.len() <= 200
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !id.contains("..")
}

/// The incident files in `dir`, oldest first (ids sort by time).
pub fn list(dir: &Path) -> Vec<Stored> {
    let mut out: Vec<Stored> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(SUFFIX)?;
            (valid_id(id) && e.file_type().ok()?.is_file())
                .then(|| Stored { id: id.to_string(), bytes: e.metadata().map_or(0, |m| m.len()) })
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The file of incident `id` in `dir`, if it is one.
pub fn path_of(dir: &Path, id: &str) -> Option<PathBuf> {
    valid_id(id).then(|| dir.join(format!("{id}{SUFFIX}"))).filter(|p| p.is_file())
}

/// See the module documentation.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    max_per_hour: u32,
    max_bytes: u64,
    written: VecDeque<Instant>,
    /// Incidents deleted for the size cap.
    pub deleted: u64,
}

impl Store {
    /// The directory `dir`, made if missing; checked writable now, so a
    /// daemon fails at start rather than at its first incident.
    pub fn open(dir: &Path, max_per_hour: u32, max_bytes: u64) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Dir(dir.to_path_buf(), e))?;
        let probe = dir.join(format!(".lockprof-write-test-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(|e| StoreError::Dir(dir.to_path_buf(), e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(Store {
            dir: dir.to_path_buf(),
            max_per_hour: max_per_hour.max(1),
            max_bytes,
            written: VecDeque::new(),
            deleted: 0,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether one more incident may be written at `now` (fewer than the
    /// hourly limit in the last hour).
    pub fn admit(&mut self, now: Instant) -> bool {
        while self.written.front().is_some_and(|&t| now.saturating_duration_since(t) >= Duration::from_secs(3600)) {
            self.written.pop_front();
        }
        self.written.len() < self.max_per_hour as usize
    }

    /// Writes `profile` as incident `id` (whole or not at all), then
    /// deletes the oldest incidents beyond the size cap (never this one).
    pub fn write(&mut self, id: &str, profile: &Profile, now: Instant) -> Result<PathBuf, StoreError> {
        let path = self.dir.join(format!("{id}{SUFFIX}"));
        let path = recording::save(&path, profile)?;
        self.written.push_back(now);
        self.enforce_cap(id);
        Ok(path)
    }

    /// The incident files, oldest first.
    pub fn list(&self) -> Vec<Stored> {
        list(&self.dir)
    }

    /// The file of incident `id`, if it is one.
    pub fn path_of(&self, id: &str) -> Option<PathBuf> {
        path_of(&self.dir, id)
    }

    fn enforce_cap(&mut self, keep: &str) {
        let all = self.list();
        let mut total: u64 = all.iter().map(|s| s.bytes).sum();
        for s in all.iter().filter(|s| s.id != keep) {
            if total <= self.max_bytes {
                break;
            }
            match std::fs::remove_file(self.dir.join(format!("{}{SUFFIX}", s.id))) {
                Ok(()) => {
                    total = total.saturating_sub(s.bytes);
                    self.deleted += 1;
                }
                Err(e) => log::warn!("deleting old incident {}: {e}", s.id),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lockprof-incidents-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn ids_cannot_leave_the_directory() {
        assert!(valid_id("incident-20261201T231502.123Z-wait-ge-50ms"));
        for bad in ["../etc/passwd", "incident-../../x", "incident-a/b", "other.json", "incident-\u{e9}"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn rate_limit_and_size_cap() {
        let d = dir("cap");
        let mut s = Store::open(&d, 2, 1).expect("open");
        let t0 = Instant::now();
        let p = crate::report::fixture::profile();
        assert!(s.admit(t0));
        s.write("incident-1", &p, t0).expect("write");
        assert!(s.admit(t0));
        s.write("incident-2", &p, t0).expect("write");
        assert!(!s.admit(t0), "two per hour");
        assert!(s.admit(t0 + Duration::from_secs(3601)), "an hour later");
        // A 1-byte cap keeps only the newest.
        assert_eq!(s.list().iter().map(|x| x.id.as_str()).collect::<Vec<_>>(), ["incident-2"]);
        assert_eq!(s.deleted, 1);
        // Files lockprof did not name are left alone.
        std::fs::write(d.join("notes.txt"), b"mine").expect("write");
        s.write("incident-3", &p, t0).expect("write");
        assert!(d.join("notes.txt").exists());
        assert_eq!(s.path_of("incident-3"), Some(d.join("incident-3.json")));
        assert_eq!(s.path_of("incident-1"), None);
        let back = crate::recording::load(&d.join("incident-3.json")).expect("a recording");
        assert_eq!(back.locks.len(), p.locks.len());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unwritable_directory_is_refused_at_open() {
        let f = dir("file");
        std::fs::write(&f, b"x").expect("write");
        let e = Store::open(&f.join("sub"), 1, 1).expect_err("a file is in the way");
        assert!(e.to_string().contains("incident directory"), "{e}");
        let _ = std::fs::remove_file(&f);
    }
}
