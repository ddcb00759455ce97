//! The survey on C programs built by the test (with and without frame
//! pointers and unwind tables), read from their files and running as
//! children: no root needed. Skips, saying why, without `cc` or `objcopy`;
//! with `CI=true` that is a failure (as `tests/support` decides).

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use super::*;

/// Nine functions calling each other, and a main that prints `ready` and,
/// with an argument, waits for a signal.
const SOURCE: &str = r#"
#include <stdio.h>
#include <unistd.h>

volatile unsigned long lockprof_sink;

__attribute__((noinline)) unsigned long step_last(unsigned long x) {
    for (unsigned long i = 0; i < x % 5 + 2; i++) lockprof_sink ^= x << i;
    return lockprof_sink;
}

#define STEP(name, next)                                            \
    __attribute__((noinline)) unsigned long name(unsigned long x) { \
        for (unsigned long i = 0; i < x % 7 + 3; i++)               \
            lockprof_sink += x * i;                                 \
        return next(x + lockprof_sink) + lockprof_sink;             \
    }

STEP(step_8, step_last)
STEP(step_7, step_8)
STEP(step_6, step_7)
STEP(step_5, step_6)
STEP(step_4, step_5)
STEP(step_3, step_4)
STEP(step_2, step_3)
STEP(step_1, step_2)

int main(int argc, char **argv) {
    (void)argv;
    printf("ready %lu\n", step_1((unsigned long)argc));
    fflush(stdout);
    if (argc > 1) pause();
    return 0;
}
"#;

/// No unwind tables from the compiler nor the linker.
const NO_TABLES: [&str; 3] =
    ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wl,--no-ld-generated-unwind-info"];

/// `true` if `cc` and `objcopy` run; prints why not otherwise (fails with
/// `CI=true`).
fn ready(test: &str) -> bool {
    let have =
        |bin: &str| Command::new(bin).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    let missing = [("cc", "gcc"), ("objcopy", "binutils")].into_iter().find(|(bin, _)| !have(bin));
    let Some((bin, pkg)) = missing else { return true };
    let reason = format!("needs {bin} (Debian's {pkg}; cargo xtask setup installs it)");
    assert!(!std::env::var("CI").is_ok_and(|v| v == "true" || v == "1"), "{test}: CI=true but {reason}");
    eprintln!("skipping test {test} - {reason}");
    false
}

/// A scratch directory holding the source, removed when dropped.
struct Builds(PathBuf);

impl Builds {
    fn new(test: &str) -> Builds {
        let d = std::env::temp_dir().join(format!("lockprof-audit-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmpdir");
        std::fs::write(d.join("prog.c"), SOURCE).expect("write the source");
        Builds(d)
    }

    /// `cc -O2 flags` into `name`; without its `.eh_frame` (and header)
    /// when `strip_eh`, for crt files bring theirs whatever the flags.
    fn build(&self, name: &str, flags: &[&str], strip_eh: bool) -> PathBuf {
        let bin = self.0.join(name);
        let out = Command::new("cc").arg("-O2").args(flags).arg("-o").arg(&bin).arg(self.0.join("prog.c")).output();
        let out = out.expect("run cc");
        assert!(out.status.success(), "cc {flags:?}: {}", String::from_utf8_lossy(&out.stderr));
        if strip_eh {
            objcopy(&["--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr"], &bin, &bin);
        }
        bin
    }
}

impl Drop for Builds {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn objcopy(args: &[&str], from: &Path, to: &Path) {
    let out = Command::new("objcopy").args(args).arg(from).arg(to).output().expect("run objcopy");
    assert!(out.status.success(), "objcopy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn info(bin: &Path) -> UnwindInfo {
    UnwindInfo::of_file(bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

#[test]
fn frameless_code_without_unwind_tables_is_the_one_that_cannot_be_unwound() {
    const TEST: &str = "frameless_code_without_unwind_tables_is_the_one_that_cannot_be_unwound";
    if !ready(TEST) {
        return;
    }
    let b = Builds::new("classify");
    let frameless = b.build("frameless", &[&["-fomit-frame-pointer"][..], &NO_TABLES].concat(), true);
    let fp = b.build("fp", &[&["-fno-omit-frame-pointer"][..], &NO_TABLES].concat(), true);
    let debug_frame = b.build("debug_frame", &[&["-fomit-frame-pointer", "-g"][..], &NO_TABLES].concat(), true);
    let default = b.build("default", &[], false);
    let stripped = b.0.join("stripped");
    objcopy(&["--strip-all"], &frameless, &stripped);

    let u = info(&frameless);
    assert!(!u.eh_frame && !u.eh_frame_hdr && !u.debug_frame, "{u:?}");
    assert_eq!(u.frame_pointers.verdict, Verdict::No, "{u:?}");
    // The nine functions and main at least (crt's too).
    assert!(u.frame_pointers.sampled >= 10, "{u:?}");
    assert!(u.cannot_unwind(), "{u:?}");
    assert!(u.frame_pointers.to_string().starts_with("no ("), "{}", u.frame_pointers);

    // Built with frame pointers: the frame-pointer walk passes, tables or not.
    let u = info(&fp);
    assert!(!u.eh_frame && !u.debug_frame, "{u:?}");
    assert_eq!(u.frame_pointers.verdict, Verdict::Yes, "{u:?}");
    assert!(!u.cannot_unwind(), "{u:?}");

    // -g writes .debug_frame when there are no .eh_frame tables.
    let u = info(&debug_frame);
    assert!(!u.eh_frame && u.debug_frame, "{u:?}");
    assert_eq!(u.frame_pointers.verdict, Verdict::No, "{u:?}");
    assert!(!u.cannot_unwind(), "{u:?}");

    let u = info(&default);
    assert!(u.eh_frame && u.eh_frame_hdr, "{u:?}");
    assert!(!u.cannot_unwind(), "{u:?}");

    // No symbol table, and no function of its own in .dynsym: cannot tell.
    let u = info(&stripped);
    assert!(!u.has_tables(), "{u:?}");
    assert_eq!(u.frame_pointers.verdict, Verdict::Unknown, "{u:?}");
    assert_eq!(u.frame_pointers.to_string(), "unknown (no function symbols to sample)");
    assert!(!u.cannot_unwind(), "{u:?}");

    // A Go binary (stripped, as distributions ship them): Go keeps frame
    // pointers whatever its few C functions do.
    let go = b.0.join("go");
    std::fs::write(b.0.join("buildinfo"), b"\xff Go buildinf:").expect("write the section");
    let section = format!(".go.buildinfo={}", b.0.join("buildinfo").display());
    objcopy(&["--add-section", &section], &stripped, &go);
    let u = info(&go);
    assert_eq!(u.frame_pointers.to_string(), "yes (Go code keeps frame pointers)");
    assert!(!u.has_tables() && !u.cannot_unwind(), "{u:?}");

    // Not ELF: a parse error, not a verdict.
    let e = UnwindInfo::of_file(&b.0.join("prog.c")).expect_err("C source is not ELF");
    assert!(matches!(e, ReadError::Parse { .. }), "{e:?}");
}

#[test]
fn half_the_sampled_functions_setting_up_a_frame_is_a_frame_pointer_build() {
    let fp = |k, n| FramePointers::of_sample(k, n);
    assert_eq!(fp(5, 10).verdict, Verdict::Yes);
    assert_eq!(fp(4, 10).verdict, Verdict::No);
    assert_eq!(fp(0, 200).verdict, Verdict::No);
    assert_eq!(fp(4, 4).verdict, Verdict::Unknown, "fewer than {MIN_SAMPLE} sampled tell nothing");
    assert_eq!(fp(0, 0).verdict, Verdict::Unknown);
    assert_eq!(fp(158, 200).to_string(), "yes (158 of 200 functions set up a frame)");
    assert_eq!(fp(3, 40).to_string(), "no (3 of 40 functions set up a frame)");
    assert_eq!(fp(0, 3).to_string(), "unknown (0 of 3 functions set up a frame: too few to tell)");
    assert_eq!(fp(0, 0).to_string(), "unknown (no function symbols to sample)");
    let json = serde_json::to_value(fp(3, 40)).expect("serializes");
    assert_eq!(json, serde_json::json!({"verdict": "no", "with_frame": 3, "sampled": 40}));
}

/// A built program waiting for a signal, killed (and reaped) when dropped.
struct Running(Child);

impl Running {
    /// Starts `bin wait` and waits for its `ready` line (it has exec'd and
    /// its libraries are mapped).
    fn start(bin: &Path) -> Running {
        let mut child = Command::new(bin).arg("wait").stdout(Stdio::piped()).spawn().expect("spawn the program");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        let running = Running(child);
        BufReader::new(stdout).read_line(&mut line).expect("read the ready line");
        assert!(line.starts_with("ready "), "{line:?}");
        running
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_survey_lists_a_running_frameless_binary_once_with_its_processes() {
    const TEST: &str = "the_survey_lists_a_running_frameless_binary_once_with_its_processes";
    if !ready(TEST) {
        return;
    }
    let b = Builds::new("survey");
    let frameless = b.build("frameless", &[&["-fomit-frame-pointer"][..], &NO_TABLES].concat(), true);
    let fp = b.build("fp", &[&["-fno-omit-frame-pointer"][..], &NO_TABLES].concat(), true);
    let running = [Running::start(&frameless), Running::start(&frameless), Running::start(&fp)];
    let pids: Vec<u32> = running.iter().map(Running::pid).collect();
    let path = |p: &Path| p.to_string_lossy().into_owned();

    // A pid no process has (past pid_max) is neither a process nor unreadable.
    let s = Survey::of(pids.iter().copied().chain([u32::MAX]));
    let a = s.audit();
    assert_eq!((a.processes, a.unreadable_processes), (3, 0), "{a:?}");
    let read: Vec<MappedBinary> = s.read().collect();
    assert_eq!(read.len() + a.unreadable_binaries, a.binaries);
    let mut paths: Vec<&str> = read.iter().map(|b| b.path.as_str()).collect();
    paths.sort_unstable();
    assert!(paths.windows(2).all(|w| w[0] != w[1]), "each binary once: {paths:?}");
    // The C library (and the loader), mapped by all three.
    assert!(read.iter().any(|b| b.processes == 3), "{read:#?}");

    let listed = a.without_unwind_info.iter().find(|b| b.path == path(&frameless));
    let listed = listed.unwrap_or_else(|| panic!("{} not listed: {a:#?}", frameless.display()));
    assert!(listed.cannot_unwind && listed.unwind.cannot_unwind(), "{listed:?}");
    assert_eq!(listed.processes, 2);
    assert!(pids[..2].contains(&listed.example_pid), "{listed:?}");
    assert_eq!(listed.example_comm, "frameless");
    assert!(a.cannot_unwind() >= 1);

    // The frame-pointer build was read, and is not listed.
    let fp_read = read.iter().find(|b| b.path == path(&fp)).expect("the fp build was read");
    assert_eq!(fp_read.unwind.frame_pointers.verdict, Verdict::Yes, "{fp_read:?}");
    assert!(a.without_unwind_info.iter().all(|b| b.path != path(&fp)), "{a:#?}");

    // The survey of every process finds it too.
    let all = audit().expect("/proc lists");
    let listed = all.without_unwind_info.iter().find(|b| b.path == path(&frameless));
    assert!(listed.is_some_and(|b| b.cannot_unwind && b.processes == 2), "{all:#?}");
}
