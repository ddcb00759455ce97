//! Files lockprof writes whole (recordings, reports, flamegraphs): opened
//! before the work, so an unwritable path fails before anything is
//! attached; replaced all at once, so a failed write (a full disk) leaves
//! no partial file, and an earlier file at that path is kept.

use std::{
    fs::{File, OpenOptions},
    io::{Seek as _, Write as _},
    path::{Path, PathBuf},
};

/// A write that failed, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct WriteError {
    /// The file asked for.
    pub path: PathBuf,
    /// What the kernel answered (e.g. ENOSPC).
    pub source: std::io::Error,
}

/// An output file, opened (created if missing) but not yet written.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    file: File,
    /// Created by [`OutputFile::open`]: removed again if the write fails.
    created: bool,
}

impl OutputFile {
    /// Opens (creating if needed) `path` for writing without truncating it.
    pub fn open(path: &Path) -> Result<OutputFile, WriteError> {
        let err = |source| WriteError { path: path.to_path_buf(), source };
        let opened = OpenOptions::new().write(true).create_new(true).open(path);
        let (file, created) = match opened {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (OpenOptions::new().write(true).open(path).map_err(err)?, false)
            }
            Err(e) => return Err(err(e)),
        };
        Ok(OutputFile { path: path.to_path_buf(), file, created })
    }

    /// The path asked for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's content with `bytes`. A regular file is replaced
    /// by renaming a fully written sibling over it; anything else (a device,
    /// a pipe, or a directory lockprof may not create in) is written in
    /// place. On failure no partial file is left and an earlier file is kept.
    pub fn write(mut self, bytes: &[u8]) -> Result<PathBuf, WriteError> {
        // From here the file is written or removed: not left to the drop.
        let created = std::mem::replace(&mut self.created, false);
        let path = std::mem::take(&mut self.path);
        let regular = self.file.metadata().is_ok_and(|m| m.is_file());
        let written = match regular.then(|| sibling(&path)).flatten() {
            Some((tmp, file)) => replace(file, &tmp, &path, bytes),
            None => in_place(&mut self.file, bytes),
        };
        match written {
            Ok(()) => Ok(path),
            Err(source) => {
                if created && regular {
                    let _ = std::fs::remove_file(&path);
                }
                Err(WriteError { path, source })
            }
        }
    }
}

impl Drop for OutputFile {
    /// Never written (the recording failed or was abandoned): a file
    /// [`OutputFile::open`] created is removed again, so no empty file is
    /// left behind; an earlier file at the path is kept as it was.
    fn drop(&mut self) {
        if self.created && self.file.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A new file next to `path`, to be renamed over it.
fn sibling(path: &Path) -> Option<(PathBuf, File)> {
    let name = path.file_name()?.to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let file = OpenOptions::new().write(true).create_new(true).open(&tmp).ok()?;
    Some((tmp, file))
}

fn replace(mut file: File, tmp: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let done = file.write_all(bytes).and_then(|()| file.sync_all()).and_then(|()| std::fs::rename(tmp, path));
    if done.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    done
}

fn in_place(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    // Devices and pipes cannot be truncated or rewound: that is fine.
    let _ = file.set_len(0);
    let _ = file.rewind();
    file.write_all(bytes)?;
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("lockprof-out-{}-{name}", std::process::id()))
    }

    #[test]
    fn keeps_old_content_until_written_and_leaves_no_sibling() {
        let path = tmp("keep");
        std::fs::write(&path, "old content").expect("write");
        let out = OutputFile::open(&path).expect("open");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "old content");
        out.write(b"new").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
        let dir = path.parent().expect("a directory");
        let prefix = format!(".{}", path.file_name().expect("a name").to_string_lossy());
        let left = std::fs::read_dir(dir).expect("list").filter_map(Result::ok);
        assert!(!left.into_iter().any(|e| e.file_name().to_string_lossy().starts_with(&prefix)));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_opened_but_never_written_is_removed_again() {
        let path = tmp("abandoned");
        let _ = std::fs::remove_file(&path);
        drop(OutputFile::open(&path).expect("open"));
        assert!(!path.exists(), "an empty file was left behind");
        std::fs::write(&path, "earlier").expect("write");
        drop(OutputFile::open(&path).expect("open"));
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), "earlier");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn writes_to_devices_in_place() {
        OutputFile::open(Path::new("/dev/null")).expect("open").write(b"x").expect("write");
    }

    #[test]
    fn unwritable_paths_fail_at_open_naming_the_file() {
        let err = OutputFile::open(Path::new("/nonexistent-dir/x.lockprof")).expect_err("must fail");
        assert!(err.to_string().contains("/nonexistent-dir/x.lockprof"), "{err}");
    }

    #[test]
    fn a_failed_write_names_the_file_and_removes_what_it_created() {
        // /dev/full fails every write with ENOSPC, like a full disk; written
        // in place (a device), so the failure path is the same.
        let err = OutputFile::open(Path::new("/dev/full")).expect("open").write(b"x").expect_err("ENOSPC");
        assert_eq!(err.source.raw_os_error(), Some(libc::ENOSPC));
        assert!(err.to_string().starts_with("/dev/full: "), "{err}");
    }
}
