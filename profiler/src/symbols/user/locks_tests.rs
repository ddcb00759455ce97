//! The namer on this test process (and a short-lived child), no root needed.

use std::fs;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{UserLockName, UserLockNamer, UserLockNamerCounters};

/// A C-style lock array: zero-initialized, so in `.bss`.
#[unsafe(no_mangle)]
static LOCKPROF_TEST_FUTEXES: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Large enough that most of it lies past the file's last page, in the
/// anonymous mapping after the image.
#[unsafe(no_mangle)]
static LOCKPROF_TEST_BIG_FUTEXES: [AtomicU64; 1 << 17] = [const { AtomicU64::new(0) }; 1 << 17];

/// A Rust lock, with a mangled symbol.
static RUST_TEST_LOCK: Mutex<u64> = Mutex::new(0);

fn addr_of<T>(value: &T) -> u64 {
    value as *const T as u64
}

fn self_pid() -> u32 {
    std::process::id()
}

/// The pathname column of the mapping holding `addr` in `pid`.
fn mapping_path(pid: u32, addr: u64) -> String {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    maps.lines()
        .filter_map(super::Mapping::parse)
        .find(|map| map.start <= addr && addr < map.end)
        .map(|map| map.path)
        .expect("a mapping holds the address")
}

#[test]
fn a_no_mangle_static_is_named_by_its_symbol_and_offset() {
    LOCKPROF_TEST_FUTEXES[1].fetch_add(1, Ordering::Relaxed);
    let mut namer = UserLockNamer::new();
    let start = addr_of(&LOCKPROF_TEST_FUTEXES);

    let name = namer.name(self_pid(), start).clone();
    assert_eq!(name.symbol.as_deref(), Some("LOCKPROF_TEST_FUTEXES"), "{name:?}");
    assert_eq!(name.label(), "LOCKPROF_TEST_FUTEXES");
    let exe = std::env::current_exe().expect("current exe");
    let exe_name = exe.file_name().and_then(|name| name.to_str()).expect("exe name");
    assert_eq!(name.mapping.as_deref(), Some(exe_name));

    let inside = namer.name(self_pid(), start + 8);
    assert_eq!((inside.symbol.as_deref(), inside.offset), (Some("LOCKPROF_TEST_FUTEXES"), 8));
    assert_eq!(inside.label(), "LOCKPROF_TEST_FUTEXES+0x8");
}

#[test]
fn bss_past_the_file_is_named_from_the_image_before_it() {
    let last = LOCKPROF_TEST_BIG_FUTEXES.len() - 1;
    LOCKPROF_TEST_BIG_FUTEXES[last].fetch_add(1, Ordering::Relaxed);
    let addr = addr_of(&LOCKPROF_TEST_BIG_FUTEXES[last]);
    // The case this test is for: the address is not in a file mapping.
    let path = mapping_path(self_pid(), addr);
    assert!(path.is_empty() || path == "[heap]", "mapping {path:?}");

    let name = UserLockNamer::new().name(self_pid(), addr).clone();
    assert_eq!(name.symbol.as_deref(), Some("LOCKPROF_TEST_BIG_FUTEXES"), "{name:?}");
    assert_eq!(name.offset, 8 * last as u64);
}

#[test]
fn a_rust_static_is_named_by_its_demangled_path() {
    *RUST_TEST_LOCK.lock().expect("lock") += 1;
    let name = UserLockNamer::new().name(self_pid(), addr_of(&RUST_TEST_LOCK)).clone();
    let symbol = name.symbol.as_deref().expect("a symbol");
    assert!(symbol.ends_with("locks::tests::RUST_TEST_LOCK"), "{symbol}");
    assert_eq!(name.offset, 0);
}

#[test]
fn a_heap_allocation_is_named_by_its_mapping() {
    let boxed = Box::new(AtomicU64::new(0));
    let name = UserLockNamer::new().name(self_pid(), addr_of(&*boxed)).clone();
    assert_eq!(name.symbol, None);
    // glibc serves a test thread from an mmap'd arena, the main thread from brk.
    let mapping = name.mapping.as_deref().expect("a mapping");
    assert!(mapping == "[heap]" || mapping == "[anon]", "{mapping}");
}

#[test]
fn a_thread_stack_is_anonymous() {
    let name = std::thread::spawn(|| {
        let local = AtomicU64::new(0);
        UserLockNamer::new().name(self_pid(), addr_of(&local)).clone()
    })
    .join()
    .expect("thread");
    assert_eq!(name, UserLockName { symbol: None, offset: 0, mapping: Some("[anon]".into()) });
}

#[test]
fn a_name_outlives_its_process() {
    let mut child = Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().expect("spawn sleep");
    let maps = fs::read_to_string(format!("/proc/{}/maps", child.id())).expect("child maps");
    let stack =
        maps.lines().filter_map(super::Mapping::parse).find(|map| map.path == "[stack]").expect("a [stack] mapping");
    let mut namer = UserLockNamer::new();
    assert_eq!(namer.name(child.id(), stack.start + 16).label(), "[stack]");

    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    assert_eq!(namer.name(child.id(), stack.start + 16).label(), "[stack]");
    assert_eq!(namer.counters(), UserLockNamerCounters { named: 1, unknown: 0, cached: 1 });
    // A namer that did not see it alive knows nothing.
    assert!(UserLockNamer::new().name(child.id(), stack.start + 16).is_unknown());
}

#[test]
fn a_missing_process_is_unknown_once() {
    // Above any pid_max.
    let pid = u32::MAX;
    let mut namer = UserLockNamer::new();
    let name = namer.name(pid, 0x1000);
    assert!(name.is_unknown());
    assert_eq!(name.label(), UserLockName::UNKNOWN);
    namer.name(pid, 0x1000);
    assert_eq!(namer.counters(), UserLockNamerCounters { named: 1, unknown: 1, cached: 1 });
}

#[test]
fn a_shared_file_mapping_is_named_by_its_basename() {
    use std::os::fd::AsRawFd;
    let name = format!("lockprof-ulocks-shared-{}", self_pid());
    let path = std::env::temp_dir().join(&name);
    let file = fs::File::options().read(true).write(true).create(true).truncate(true).open(&path).expect("create");
    file.set_len(4096).expect("size");
    // SAFETY: a fresh shared mapping of a 4096-byte file we own; only its
    // address is used, and it is unmapped below.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(mapped, libc::MAP_FAILED);
    let named = UserLockNamer::new().name(self_pid(), mapped as u64 + 64).clone();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(mapped, 4096) };
    fs::remove_file(&path).expect("remove");
    assert_eq!(named, UserLockName { symbol: None, offset: 0, mapping: Some(name) });
}

#[test]
fn shared_anonymous_memory_is_named_as_shared_memory() {
    // What PostgreSQL maps its buffers and LWLocks in: MAP_SHARED | MAP_ANONYMOUS,
    // which /proc/<pid>/maps lists as `/dev/zero (deleted)`.
    // SAFETY: a fresh 4096-byte shared anonymous mapping; only its address is
    // used, and it is unmapped below.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mapped, libc::MAP_FAILED);
    let named = UserLockNamer::new().name(self_pid(), mapped as u64 + 64).clone();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(mapped, 4096) };
    assert_eq!(named.mapping.as_deref(), Some("[shm: /dev/zero (deleted)]"), "{named:?}");
    assert_eq!(named.label(), "[shm: /dev/zero (deleted)]");
}

#[test]
fn every_kind_of_shared_memory_keeps_the_kernels_path() {
    let class = |line: &str| super::Mapping::parse(line).map(|m| m.class());
    let at = "7f0000000000-7f0000001000 rw-s 00000000 00:01 1234";
    assert_eq!(class(&format!("{at} /SYSV0052e2c1 (deleted)")).as_deref(), Some("[shm: /SYSV0052e2c1 (deleted)]"));
    assert_eq!(class(&format!("{at} /memfd:pool (deleted)")).as_deref(), Some("[shm: /memfd:pool (deleted)]"));
    assert_eq!(class(&format!("{at} /dev/shm/pg.1")).as_deref(), Some("[shm: /dev/shm/pg.1]"));
    // A deleted file that is not shared memory (an upgraded binary) keeps its basename.
    assert_eq!(class(&format!("{at} /usr/lib/postgresql/15/bin/postgres (deleted)")).as_deref(), Some("postgres"));
    assert_eq!(class("7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ").as_deref(), Some("[anon]"));
}
