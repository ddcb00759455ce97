//! tracefs: finding or mounting it, and reading tracepoint field offsets.

use std::path::{Path, PathBuf};

/// tracefs problems.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// Not mounted and mounting failed.
    #[error(
        "tracefs is not mounted at /sys/kernel/tracing and mounting it failed ({0}); mount it with `mount -t tracefs nodev /sys/kernel/tracing`, or use the tp_btf backend"
    )]
    Mount(std::io::Error),
    /// The kernel has no `lock:contention_*` tracepoints.
    #[error(
        "this kernel has no lock:contention_begin/end tracepoints (they appeared in Linux 5.19); use a kprobe or fentry backend"
    )]
    NoLockEvents,
}

/// A usable tracefs mount.
#[derive(Clone, Debug)]
pub struct TraceFs {
    root: PathBuf,
}

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

impl TraceFs {
    /// Finds a mounted tracefs (one that has `events/`).
    pub fn find() -> Option<TraceFs> {
        CANDIDATES.iter().map(Path::new).find(|p| p.join("events").is_dir()).map(|p| TraceFs { root: p.to_path_buf() })
    }

    /// Finds tracefs, mounting it at /sys/kernel/tracing if needed.
    pub fn find_or_mount() -> Result<TraceFs, TracefsError> {
        if let Some(t) = Self::find() {
            return Ok(t);
        }
        let target = c"/sys/kernel/tracing";
        // SAFETY: all pointers are valid NUL-terminated strings (or null for
        // data), living across the call; mount(2) does not retain them.
        let rc = unsafe { libc::mount(c"nodev".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            return Err(TracefsError::Mount(std::io::Error::last_os_error()));
        }
        log::info!("mounted tracefs at /sys/kernel/tracing");
        Self::find().ok_or(TracefsError::Mount(std::io::Error::other("mounted, but events/ is missing")))
    }

    /// Mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the lock contention tracepoints exist.
    pub fn has_lock_events(&self) -> bool {
        self.root.join("events/lock/contention_begin").is_dir() && self.root.join("events/lock/contention_end").is_dir()
    }

    /// Whether tracepoint `category/name` exists.
    pub fn has_event(&self, category: &str, name: &str) -> bool {
        self.root.join("events").join(category).join(name).is_dir()
    }

    /// Offset of `field` in the record of tracepoint `category/name`.
    pub fn field_offset(&self, category: &str, name: &str, field: &str) -> Option<u32> {
        let text = std::fs::read_to_string(self.root.join("events").join(category).join(name).join("format")).ok()?;
        parse_field_offset(&text, field)
    }
}

/// Finds `offset:N;` of `field` in a tracepoint format description.
pub(crate) fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let ident = decl.split(|c: char| c.is_whitespace() || c == '*').rfind(|s| !s.is_empty())?;
        if ident.split('[').next()? != field {
            return None;
        }
        let off = rest.split_once("offset:")?.1.split(';').next()?;
        off.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "name: contention_begin\nID: 408\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned int flags;\toffset:16;\tsize:4;\tsigned:0;\n";

    #[test]
    fn parses_offsets_from_format() {
        assert_eq!(parse_field_offset(BEGIN, "lock_addr"), Some(8));
        assert_eq!(parse_field_offset(BEGIN, "flags"), Some(16));
        assert_eq!(parse_field_offset(BEGIN, "common_pid"), Some(4));
        assert_eq!(parse_field_offset(BEGIN, "ret"), None);
        assert_eq!(parse_field_offset("field:char comm[16];\toffset:24;\tsize:16;", "comm"), Some(24));
    }
}
