//! Real symbolization, in this test process and in a child that exits.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// The kernel's hard pid limit on 64-bit (PID_MAX_LIMIT): no process has a
/// larger pid.
const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

#[inline(never)]
fn lockprof_usym_probe_target(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(31)
}

fn probe_addr() -> u64 {
    lockprof_usym_probe_target as *const () as usize as u64
}

fn exe() -> PathBuf {
    std::env::current_exe().expect("current_exe")
}

fn exe_basename() -> String {
    exe().file_name().expect("exe name").to_string_lossy().into_owned()
}

/// The mappings of `pid` backed by `path`: (start, end, file offset, perms).
fn mappings_of(pid: u32, path: &Path) -> Vec<(u64, u64, u64, String)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 || Path::new(fields[5]) != path {
                return None;
            }
            let (start, end) = fields[0].split_once('-')?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
                u64::from_str_radix(fields[2], 16).ok()?,
                fields[1].to_string(),
            ))
        })
        .collect()
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn symbolizes_a_function_of_this_process() {
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    let pinned = symbolizer.pin(std::process::id(), &[probe_addr()]);
    assert!(pinned.is_pinned());
    let stack = symbolizer.symbolize(&pinned);
    let frame = &stack.frames[0];
    let function = frame.function.as_deref().unwrap_or_default();
    assert_eq!(function, "lockprof::symbols::user::tests::lockprof_usym_probe_target", "{frame:?}");
    assert_eq!(frame.offset, 0, "{frame:?}");
    assert_eq!(frame.addr, probe_addr());
    assert_eq!(&*frame.module, exe_basename());
    assert_eq!(Path::new(&*frame.path), exe());
    // This debug test build has DWARF: file and line come from it.
    assert!(frame.file.as_deref().unwrap_or_default().ends_with("tests.rs"), "{frame:?}");
    assert!(frame.line.is_some(), "{frame:?}");
    let note = blazesym::helper::read_elf_build_id(&exe()).expect("read the ELF").expect("a build id note");
    let build_id = frame.build_id.as_deref().expect("build id");
    assert!(!build_id.is_empty() && build_id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(build_id, pin::hex(&note));
    assert_eq!(frame.text(), format!("{function}+0x0 (tests.rs:{})", frame.line.unwrap_or_default()));
    // One frame: a frame-pointer walk that went nowhere.
    assert!(stack.truncated);
    let counters = symbolizer.counters();
    assert_eq!((counters.pinned, counters.truncated, counters.binaries_opened), (1, 1, 1));
}

#[test]
fn outer_frames_are_looked_up_at_the_call_before_the_return_address() {
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    let is_probe =
        |frame: &UserFrame| frame.function.as_deref().unwrap_or_default().contains("lockprof_usym_probe_target");
    // probe+1 as a caller frame is a return address after a call at the
    // probe's first byte: the probe, offset 1, like the innermost frame.
    let pinned = symbolizer.pin(std::process::id(), &[probe_addr() + 1, probe_addr() + 1]);
    let stack = symbolizer.symbolize(&pinned);
    for frame in &stack.frames {
        assert!(is_probe(frame) && frame.offset == 1, "{frame:?}");
    }
    // The probe's own start as a caller frame returns into it from a call
    // ending the code before it: not the probe. Innermost, it is the probe.
    let pinned = symbolizer.pin(std::process::id(), &[probe_addr(), probe_addr()]);
    let stack = symbolizer.symbolize(&pinned);
    assert!(is_probe(&stack.frames[0]) && stack.frames[0].offset == 0, "{:?}", stack.frames[0]);
    assert!(!is_probe(&stack.frames[1]), "{:?}", stack.frames[1]);
}

#[test]
fn exited_process_still_symbolizes_and_shares_the_binary() {
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    // This process's file offset of the probe: the child runs the same binary.
    let own = symbolizer.pin(std::process::id(), &[probe_addr()]);
    let own = symbolizer.symbolize(&own);
    let file_offset = own.frames[0].file_offset;
    assert!(own.frames[0].function.is_some(), "{:?}", own.frames[0]);

    // The child execs this binary and stops at once: it asks to be traced, so
    // the kernel stops it with SIGTRAP when its exec completes, before any of
    // its code runs. Its own mappings (its own load address) stay until it is killed.
    let mut cmd = Command::new(exe());
    cmd.arg("--list").stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: the closure runs between fork and exec and makes one system
    // call (async-signal-safe), touching no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            let none = std::ptr::null_mut::<libc::c_void>();
            if libc::ptrace(libc::PTRACE_TRACEME, 0, none, none) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn the child");
    let mut child = KillOnDrop(child);
    let pid = child.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ip = loop {
        let text = mappings_of(pid, &exe()).into_iter().find(|(start, end, offset, perms)| {
            perms.contains('x') && (*offset..*offset + (end - start)).contains(&file_offset)
        });
        if let Some((start, _, offset, _)) = text {
            break start + file_offset - offset;
        }
        assert!(Instant::now() < deadline, "the child's text mapping never showed in /proc/{pid}/maps");
        std::thread::sleep(Duration::from_millis(10));
    };
    let pinned = symbolizer.pin(pid, &[ip]);
    assert!(pinned.is_pinned());
    child.0.kill().expect("kill the child");
    child.0.wait().expect("reap the child");

    let stack = symbolizer.symbolize(&pinned);
    let frame = &stack.frames[0];
    assert!(frame.function.as_deref().unwrap_or_default().contains("lockprof_usym_probe_target"), "{frame:?}");
    assert_eq!((frame.addr, frame.file_offset), (ip, file_offset));
    // Two processes of one binary: opened once.
    let counters = symbolizer.counters();
    assert_eq!((counters.pinned, counters.binaries_opened), (2, 1), "{counters:?}");
}

/// The first address of `path`'s executable mapping in `pid`, once it shows.
fn text_start(pid: u32, path: &Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((start, ..)) = mappings_of(pid, path).into_iter().find(|(.., perms)| perms.contains('x')) {
            return start;
        }
        assert!(Instant::now() < deadline, "{} never showed in /proc/{pid}/maps", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_copy_of_a_held_binary_shares_its_descriptor_and_keeps_its_path() {
    // As the kernel names it (/bin is often a link to /usr/bin).
    let original = std::fs::canonicalize("/bin/sleep").expect("find /bin/sleep");
    let original = original.as_path();
    let dir = std::env::temp_dir().join(format!("lockprof-usym-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("make the directory");
    let copy = dir.join("sleep-copy");
    std::fs::copy(original, &copy).expect("copy /bin/sleep");
    let spawn = |path: &Path| {
        let child = Command::new(path).arg("120").spawn().expect("spawn sleep");
        KillOnDrop(child)
    };
    let (first, second) = (spawn(original), spawn(&copy));
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    let mut frames = Vec::new();
    for (child, path) in [(&first, original), (&second, copy.as_path())] {
        let pid = child.0.id();
        let pinned = symbolizer.pin(pid, &[text_start(pid, path)]);
        frames.push(symbolizer.symbolize(&pinned).frames[0].clone());
    }
    std::fs::remove_dir_all(&dir).expect("remove the directory");
    let build_id = frames[0].build_id.as_deref().expect("/bin/sleep has a build id note");
    assert_eq!(frames[1].build_id.as_deref(), Some(build_id));
    assert_eq!(frames[1].file_offset, frames[0].file_offset);
    // Each frame names the file its own process mapped.
    assert_eq!(Path::new(&*frames[0].path), original, "{:?}", frames[0]);
    assert_eq!(Path::new(&*frames[1].path), copy, "{:?}", frames[1]);
    assert_eq!(&*frames[1].module, "sleep-copy");
    assert_eq!(symbolizer.counters().binaries_opened, 1);
}

#[test]
fn a_missing_process_keeps_raw_ips() {
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    let ips = [0x7f00_dead_b000, 0x5555_0000_1234];
    let pinned = symbolizer.pin(PID_MAX_LIMIT + 1, &ips);
    assert!(!pinned.is_pinned());
    assert_eq!(pinned.ips().collect::<Vec<_>>(), ips);
    let stack = symbolizer.symbolize(&pinned);
    let text: Vec<String> = stack.frames.iter().map(UserFrame::text).collect();
    assert_eq!(text, ["0x7f00deadb000", "0x555500001234"]);
    assert!(!stack.truncated);
    let counters = symbolizer.counters();
    assert_eq!((counters.pinned, counters.unpinned), (0, 1));
}

#[test]
fn a_walk_that_leaves_mapped_code_stops_there_and_is_counted() {
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    // Page zero is never mapped: what a frame-pointer walk through code
    // without frame pointers reads as a "return address" (0x163, 0x1ea).
    // Neither it nor anything the walk found after it is shown.
    let pinned = symbolizer.pin(std::process::id(), &[probe_addr(), 0x163, probe_addr()]);
    let stack = symbolizer.symbolize(&pinned);
    assert_eq!(stack.frames.len(), 1, "{:?}", stack.frames);
    assert!(stack.frames[0].function.is_some(), "{:?}", stack.frames[0]);
    assert!(stack.truncated);
    let counters = symbolizer.counters();
    assert_eq!((counters.truncated, counters.left_code), (1, 1));
    // The innermost ip is where the thread is, whatever it is mapped to: kept.
    let pinned = symbolizer.pin(std::process::id(), &[0x10, probe_addr()]);
    let stack = symbolizer.symbolize(&pinned);
    let text: Vec<String> = stack.frames.iter().map(UserFrame::text).collect();
    assert_eq!(text[0], "[unknown] 0x10", "{text:?}");
    assert_eq!(text.len(), 2, "{text:?}");
    assert_eq!(symbolizer.counters().left_code, 1);
}

#[test]
fn an_unsymbolizable_frame_keeps_module_and_build_id_and_is_looked_up_once() {
    // A binary blazesym cannot read (not ELF), as a stripped or damaged one.
    let path = std::env::temp_dir().join(format!("lockprof-usym-not-elf-{}", std::process::id()));
    std::fs::write(&path, b"not an ELF file").expect("write the file");
    let file = std::fs::File::open(&path).expect("open the file");
    std::fs::remove_file(&path).expect("remove the file");
    let binary = Arc::new(pin::Binary {
        id: 1,
        path: Arc::from("/opt/app/libdamaged.so"),
        module: Arc::from("libdamaged.so"),
        build_id: Some(Arc::from("5a1f3c9e0b1d2e3f")),
        file: Some(Arc::new(file)),
    });
    let frames = vec![pin::PinnedFrame::Binary { addr: 0x7f00_0010_e7d9, file_offset: 0x10e7d9, binary }];
    let pinned = PinnedStack::new(1, true, true, frames);
    let mut symbolizer = BlazeSymbolizer::new(&DebugFileOptions::default()).expect("start the symbolizer");
    for _ in 0..2 {
        let stack = symbolizer.symbolize(&pinned);
        assert_eq!(stack.frames[0].text(), "libdamaged.so+0x10e7d9 [build-id 5a1f3c9e]");
        assert_eq!(&*stack.frames[0].path, "/opt/app/libdamaged.so");
    }
    // The second stack came from the frame cache.
    assert_eq!(symbolizer.counters().symbolize_failures, 1);
}

#[test]
fn maps_parsing_and_procmap_query_pin_alike() {
    let ips = [probe_addr(), probe_addr() + 1, 0x10];
    let supported = blazesym::helper::is_procmap_query_supported().expect("probe PROCMAP_QUERY");
    if !supported {
        eprintln!("this kernel lacks the PROCMAP_QUERY ioctl (6.11+): only /proc/<pid>/maps parsing is checked");
    }
    let mut texts = Vec::new();
    for procmap_query in [false].into_iter().chain(supported.then_some(true)) {
        let mut pinner = pin::Pinner::with_procmap_query(procmap_query);
        let mut counters = Counters::default();
        let pinned = pinner.pin(std::process::id(), &ips, &mut counters);
        let stack = symbolize::FrameSymbolizer::new(&DebugFileOptions::default()).symbolize(&pinned, &mut counters);
        let text: Vec<String> = stack.frames.iter().map(UserFrame::text).collect();
        assert!(text[0].contains("lockprof_usym_probe_target"), "{text:?}");
        // The walk left mapped code at 0x10: cut there.
        assert_eq!(text.len(), 2, "{text:?}");
        assert_eq!((counters.pinned, counters.binaries_opened, counters.left_code), (1, 1, 1));
        texts.push(text);
    }
    assert!(texts.windows(2).all(|pair| pair[0] == pair[1]), "{texts:?}");
}
