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
/// `module` of a frame in JIT code named by the process's perf map.
pub const JIT_MODULE: &str = "[jit]";

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

/// Modules of the language runtimes and the dynamic loader (glibc and musl,
/// ld.so, the C++ standard library and its unwinder support): their frames
/// are the system-call wrappers, lock loops and `std::mutex` wrappers the
/// application called, not the application.
fn is_runtime_module(module: &str) -> bool {
    const RUNTIMES: [&str; 10] = [
        "libc.so",
        "libc-",
        "ld-linux",
        "ld-musl",
        "ld64.so",
        "libpthread",
        "libstdc++",
        "libgcc_s",
        "libc++",
        "libatomic",
    ];
    RUNTIMES.iter().any(|p| module.starts_with(p))
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
        self.app_user_frame().map(UserFrame::text)
    }

    /// [`app_frame`](Self::app_frame)'s function alone, short: no C++
    /// parameter list or return type, no perf-map annotation
    /// (`v8::base::ConditionVariable::WaitFor`, `JS:~handler`); the frame's
    /// text when it has no function.
    pub fn app_function(&self) -> Option<String> {
        let f = self.app_user_frame()?;
        let short = if &*f.module == JIT_MODULE { short_jit_function } else { short_function };
        Some(f.function.as_deref().map_or_else(|| f.text(), |name| short(name).to_string()))
    }

    /// The application's innermost frame. In a stack that runs JIT code (a
    /// frame named from a perf map) that code is the application and the
    /// binary around it (node, java) its runtime: the innermost JIT frame.
    fn app_user_frame(&self) -> Option<&UserFrame> {
        if let Some(jit) = self.frames.iter().find(|f| &*f.module == JIT_MODULE) {
            return Some(jit);
        }
        let outside_runtime = || self.frames.iter().filter(|f| f.is_mapped() && !is_runtime_module(&f.module));
        outside_runtime().find(|f| !f.function.as_deref().is_some_and(is_rust_std)).or_else(|| outside_runtime().next())
    }
}

/// A function name without what follows it: a demangled C++ name's
/// parameter list (and a template's return type before it); the whole name
/// when nothing is left. Templates (`<...>`), lambdas (`{lambda()#1}`),
/// `(anonymous namespace)` and operators (`operator()`, `operator<`,
/// `operator new`) are kept.
pub fn short_function(name: &str) -> &str {
    const ANON: &str = "(anonymous namespace)";
    const OPERATOR: &str = "operator";
    let bytes = name.as_bytes();
    let (mut depth, mut start, mut end, mut i) = (0usize, 0usize, name.len(), 0usize);
    while i < bytes.len() {
        let rest = &name[i..];
        let word_start = i == 0 || matches!(bytes[i - 1], b':' | b' ');
        match bytes[i] {
            b'(' if rest.starts_with(ANON) => i += ANON.len() - 1,
            b'o' if word_start && rest.starts_with(OPERATOR) => {
                // The operator's own symbols are part of the name.
                i += OPERATOR.len();
                if name[i..].starts_with("()") {
                    i += 2;
                } else if name[i..].starts_with(' ') {
                    // operator new, operator delete[], operator bool
                    i += 1;
                    while i < bytes.len()
                        && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'[' | b']'))
                    {
                        i += 1;
                    }
                } else {
                    while i < bytes.len() && b"<>=!+-*/%^&|~[],".contains(&bytes[i]) {
                        i += 1;
                    }
                }
                continue;
            }
            b'(' if depth == 0 => {
                end = i;
                break;
            }
            b'<' | b'{' => depth += 1,
            b'>' | b'}' => depth = depth.saturating_sub(1),
            // A space outside templates before the parameter list ends a
            // return type.
            b' ' if depth == 0 => start = i + 1,
            _ => {}
        }
        i += 1;
    }
    match name.get(start.min(end)..end) {
        Some(short) if !short.trim().is_empty() => short,
        _ => name,
    }
}

/// A JIT function's name as a perf map gives it, without the annotation
/// after its first space (V8's `JS:~handler /app/x.js:8:24`); the whole
/// name when nothing is left.
pub fn short_jit_function(name: &str) -> &str {
    match name.split(' ').next() {
        Some(short) if !short.is_empty() => short,
        _ => name,
    }
}

/// The truncation rule, shared by pinned and symbolized stacks.
pub(super) fn is_truncated(frame_count: usize, outermost_mapped: Option<bool>) -> bool {
    frame_count == 1 || outermost_mapped == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `function` in `module`.
    fn named(function: &str, module: &str) -> UserFrame {
        UserFrame { function: Some(function.into()), module: Arc::from(module), ..binary_frame() }
    }

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
        let stack = |frames: Vec<UserFrame>| UserStack { frames, truncated: false };
        let s = stack(vec![
            named("syscall", "libc.so.6"),
            named("std::sys::pal::unix::futex::futex_wait", "app"),
            named("<std::sync::poison::mutex::Mutex<T>>::lock", "app"),
            named("app::take_lock", "app"),
        ]);
        assert_eq!(s.app_frame().as_deref(), Some("app::take_lock+0x0"));
        // Nothing but the standard library outside libc: its innermost frame.
        let only_std = stack(vec![named("syscall", "libc.so.6"), named("std::thread::park", "app")]);
        assert_eq!(only_std.app_frame().as_deref(), Some("std::thread::park+0x0"));
        assert_eq!(stack(vec![named("__lll_lock_wait", "libc.so.6")]).app_frame(), None);
    }

    #[test]
    fn short_functions_drop_parameters_return_types_and_annotations() {
        assert_eq!(
            short_function("v8::base::ConditionVariable::WaitFor(v8::base::Mutex*, v8::base::TimeDelta const&)"),
            "v8::base::ConditionVariable::WaitFor"
        );
        assert_eq!(
            short_function("v8::internal::Object v8::internal::FutexEmulation::WaitSync<int>(v8::internal::Isolate*)"),
            "v8::internal::FutexEmulation::WaitSync<int>"
        );
        assert_eq!(
            short_function("v8::internal::(anonymous namespace)::Invoke(v8::internal::Isolate*)"),
            "v8::internal::(anonymous namespace)::Invoke"
        );
        assert_eq!(short_function("std::map<int, long>::find(int const&)"), "std::map<int, long>::find");
        assert_eq!(short_jit_function("JS:~lockprofJsWait /tmp/jit/jit.js:8:24"), "JS:~lockprofJsWait");
        assert_eq!(short_jit_function("JS:~Module._compile node:internal/x:1:1"), "JS:~Module._compile");
        assert_eq!(short_jit_function(" odd"), " odd");
        assert_eq!(short_function("PGSemaphoreLock"), "PGSemaphoreLock");
        assert_eq!(short_function("Foo::operator()(int) const"), "Foo::operator()");
        assert_eq!(short_function("main::{lambda()#1}::operator()() const"), "main::{lambda()#1}::operator()");
        assert_eq!(short_function("main::{lambda()#2}::operator()() const"), "main::{lambda()#2}::operator()");
        assert_eq!(short_function("Foo::operator<(Foo const&) const"), "Foo::operator<");
        assert_eq!(short_function("std::operator<<(std::ostream&, char const*)"), "std::operator<<");
        assert_eq!(short_function("operator new(unsigned long)"), "operator new");
        assert_eq!(short_function("Foo::operator bool() const"), "Foo::operator bool");
        assert_eq!(short_function("<myapp::Pool as myapp::Get>::get"), "<myapp::Pool as myapp::Get>::get");
        assert_eq!(
            short_function("void (*signal(int, void (*)(int)))(int)"),
            "void (*signal(int, void (*)(int)))(int)"
        );
        assert_eq!(short_function("unwindme::unwindme_take_lock"), "unwindme::unwindme_take_lock");
    }

    #[test]
    fn in_jit_code_the_application_frame_is_the_innermost_jit_frame() {
        let s = UserStack {
            frames: vec![
                named("__futex_abstimed_wait_common", "libc.so.6"),
                named("v8::base::ConditionVariable::WaitFor(v8::base::Mutex*, v8::base::TimeDelta const&)", "node"),
                named("Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit", "node"),
                named("JS:~lockprofJsWait /tmp/jit/jit.js:8:24", JIT_MODULE),
                named("JS:~lockprofJsLoop /tmp/jit/jit.js:17:24", JIT_MODULE),
            ],
            truncated: false,
        };
        assert_eq!(s.app_function().as_deref(), Some("JS:~lockprofJsWait"));
        let native = UserStack { frames: s.frames[..3].to_vec(), truncated: false };
        assert_eq!(native.app_function().as_deref(), Some("v8::base::ConditionVariable::WaitFor"));
    }

    #[test]
    fn the_application_frame_skips_the_cpp_runtime_and_the_loader() {
        let s = UserStack {
            frames: vec![
                named("__lll_lock_wait", "libc.so.6"),
                named("std::__shared_mutex_pthread::lock", "libstdc++.so.6"),
                named("_Unwind_Find_FDE", "libgcc_s.so.1"),
                named("_dl_catch_exception", "ld-linux-x86-64.so.2"),
                named("Cache::insert", "server"),
            ],
            truncated: false,
        };
        assert_eq!(s.app_frame().as_deref(), Some("Cache::insert+0x0"));
    }
}
