//! The symbolized user stack: one frame per captured ip, innermost first.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// `module` of a frame whose ip lies in no file-backed executable mapping
/// (anonymous memory, `[stack]`, a frame-pointer walk gone astray).
pub const UNMAPPED_MODULE: &str = "[unknown]";
/// `module` of a frame whose process had exited before its stack was pinned:
/// only the raw ip is known.
pub const UNPINNED_MODULE: &str = "[unpinned]";
/// `module` of a frame in the kernel-provided vDSO.
pub const VDSO_MODULE: &str = "[vdso]";

/// Hex digits of the build id shown in a frame's text.
const BUILD_ID_TEXT_LEN: usize = 8;

/// One user-space frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFrame {
    /// The function containing the ip (demangled), when symbolized.
    pub function: Option<String>,
    /// Offset of the ip from the start of `function` (0 without a function).
    pub offset: u64,
    /// Source file (as recorded in DWARF, directory included when known).
    pub file: Option<String>,
    /// Source line, when DWARF line info is present.
    pub line: Option<u32>,
    /// Basename of the binary, or one of `[unknown]`, `[unpinned]`, `[vdso]`.
    pub module: Arc<str>,
    /// Full path of the binary as the process saw it (empty when unknown).
    pub path: Arc<str>,
    /// The binary's GNU build id, in hex.
    pub build_id: Option<Arc<str>>,
    /// Offset of the ip in the binary's file (0 when not in a binary).
    pub file_offset: u64,
    /// The virtual ip as captured.
    pub addr: u64,
}

impl UserFrame {
    /// A frame whose process was gone before it could be pinned.
    pub fn unpinned(addr: u64) -> Self {
        Self::bare(UNPINNED_MODULE, addr)
    }

    /// A frame whose ip lies in no file-backed mapping.
    pub fn unmapped(addr: u64) -> Self {
        Self::bare(UNMAPPED_MODULE, addr)
    }

    fn bare(module: &str, addr: u64) -> Self {
        Self {
            function: None,
            offset: 0,
            file: None,
            line: None,
            module: Arc::from(module),
            path: Arc::from(""),
            build_id: None,
            file_offset: 0,
            addr,
        }
    }

    /// Whether the ip was inside a mapped binary (or the vDSO).
    pub fn is_mapped(&self) -> bool {
        !matches!(&*self.module, UNMAPPED_MODULE | UNPINNED_MODULE)
    }

    /// One line for the frame: `function+0xoff (file:line)` when symbolized,
    /// `module+0xfileoff [build-id abcdef12]` when only the binary is known,
    /// `[unknown] 0x7f..` outside any mapping and `0x7f..` when unpinned.
    pub fn text(&self) -> String {
        if let Some(function) = &self.function {
            let mut text = format!("{function}+{:#x}", self.offset);
            if let (Some(file), Some(line)) = (&self.file, self.line) {
                let base = file.rsplit('/').next().unwrap_or(file);
                text.push_str(&format!(" ({base}:{line})"));
            }
            return text;
        }
        match &*self.module {
            UNPINNED_MODULE => format!("{:#x}", self.addr),
            UNMAPPED_MODULE => format!("{UNMAPPED_MODULE} {:#x}", self.addr),
            module => {
                let mut text = format!("{module}+{:#x}", self.file_offset);
                if let Some(build_id) = &self.build_id {
                    let short = build_id.get(..BUILD_ID_TEXT_LEN).unwrap_or(build_id);
                    text.push_str(&format!(" [build-id {short}]"));
                }
                text
            }
        }
    }
}

/// A symbolized user stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStack {
    /// Innermost first.
    pub frames: Vec<UserFrame>,
    /// The walk was cut short: one frame only, or the outermost frame is not
    /// inside a mapped binary (typically code built without frame pointers).
    pub truncated: bool,
}

/// Modules of the C library and the dynamic loader: their frames are the
/// system-call wrappers and lock loops the application called, not the
/// application.
fn is_runtime_module(module: &str) -> bool {
    ["libc.so", "libc-", "ld-linux", "ld-musl", "libpthread"].iter().any(|p| module.starts_with(p))
}

/// Whether `function` is Rust's standard library (inlined or
/// monomorphized into the application: `std::sync::...::Mutex<T>::lock`).
fn is_rust_std(function: &str) -> bool {
    let f = function.trim_start_matches('<');
    ["std::", "core::", "alloc::"].iter().any(|p| f.starts_with(p))
}

impl UserStack {
    /// The application's frame nearest the kernel: the innermost frame
    /// outside the C library and the loader, and outside Rust's standard
    /// library when the application has a frame of its own (its `text()`),
    /// if any.
    pub fn app_frame(&self) -> Option<String> {
        let outside_runtime = || self.frames.iter().filter(|f| f.is_mapped() && !is_runtime_module(&f.module));
        outside_runtime()
            .find(|f| !f.function.as_deref().is_some_and(is_rust_std))
            .or_else(|| outside_runtime().next())
            .map(UserFrame::text)
    }
}

/// The truncation rule, shared by pinned and symbolized stacks.
pub(super) fn is_truncated(frame_count: usize, outermost_mapped: Option<bool>) -> bool {
    frame_count == 1 || outermost_mapped == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary_frame() -> UserFrame {
        UserFrame {
            function: None,
            offset: 0,
            file: None,
            line: None,
            module: Arc::from("libc.so.6"),
            path: Arc::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            build_id: Some(Arc::from("5a1f3c9e0b1d2e3f")),
            file_offset: 0x10e7d9,
            addr: 0x7f00_0010_e7d9,
        }
    }

    #[test]
    fn text_names_the_function_and_line_when_symbolized() {
        let frame = UserFrame {
            function: Some("lockprof_test_writer".into()),
            offset: 9,
            file: Some("/tmp/x/lockprof_test.c".into()),
            line: Some(31),
            ..binary_frame()
        };
        assert_eq!(frame.text(), "lockprof_test_writer+0x9 (lockprof_test.c:31)");
        let no_line = UserFrame { line: None, ..frame };
        assert_eq!(no_line.text(), "lockprof_test_writer+0x9");
    }

    #[test]
    fn text_falls_back_to_module_offset_and_build_id() {
        assert_eq!(binary_frame().text(), "libc.so.6+0x10e7d9 [build-id 5a1f3c9e]");
        let no_id = UserFrame { build_id: None, ..binary_frame() };
        assert_eq!(no_id.text(), "libc.so.6+0x10e7d9");
    }

    #[test]
    fn text_of_unmapped_and_unpinned_frames_keeps_the_ip() {
        assert_eq!(UserFrame::unmapped(0x7ffd_1234).text(), "[unknown] 0x7ffd1234");
        assert_eq!(UserFrame::unpinned(0x5555_0000_1000).text(), "0x555500001000");
        assert!(!UserFrame::unmapped(1).is_mapped());
        assert!(binary_frame().is_mapped());
    }

    #[test]
    fn truncation_is_one_frame_or_an_unmapped_outermost_frame() {
        assert!(is_truncated(1, Some(true)));
        assert!(is_truncated(3, Some(false)));
        assert!(!is_truncated(3, Some(true)));
        assert!(!is_truncated(0, None));
    }

    #[test]
    fn the_application_frame_skips_the_c_library_and_rusts_standard_library() {
        let f = |function: &str, module: &str| UserFrame {
            function: Some(function.into()),
            module: Arc::from(module),
            ..binary_frame()
        };
        let stack = |frames: Vec<UserFrame>| UserStack { frames, truncated: false };
        let s = stack(vec![
            f("syscall", "libc.so.6"),
            f("std::sys::pal::unix::futex::futex_wait", "app"),
            f("<std::sync::poison::mutex::Mutex<T>>::lock", "app"),
            f("app::take_lock", "app"),
        ]);
        assert_eq!(s.app_frame().as_deref(), Some("app::take_lock+0x0"));
        // Nothing but the standard library outside libc: its innermost frame.
        let only_std = stack(vec![f("syscall", "libc.so.6"), f("std::thread::park", "app")]);
        assert_eq!(only_std.app_frame().as_deref(), Some("std::thread::park+0x0"));
        assert_eq!(stack(vec![f("__lll_lock_wait", "libc.so.6")]).app_frame(), None);
    }
}
