//! Root-only: faults during a session, each produced for real against the
//! `lockprof` binary: a map update the kernel refuses (the map frozen from
//! outside), a full ring buffer, `/proc/kallsyms` unreadable after start, a
//! full stack map, a full disk, SIGTERM while attaching, SIGHUP. Each must be
//! counted or said in one line, the session must go on or end with its
//! report, and no lockprof program may stay loaded. Skips, saying why,
//! without root or the lock tracepoints; with `CI=true` those are failures.

use std::{
    io::Read as _,
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

#[path = "support/programs.rs"]
mod programs;
#[path = "support/recorder.rs"]
mod recorder;
mod support;

use programs::assert_nothing_attached;
use recorder::Recorder;

/// One storm and one lockprof at a time on the machine's two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

/// The longest a test drives its workload waiting to see what it checks.
const DEADLINE: Duration = Duration::from_secs(90);

fn ready(test: &str) -> bool {
    support::ready_unless(test, support::tracepoints_missing())
}

fn lockprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockprof"))
}

/// A child killed (and reaped) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lockprof stress KIND`, returned once all its threads run.
fn storm(kind: &str, threads: usize) -> Guard {
    let child = lockprof()
        .args(["stress", kind, "--threads", &threads.to_string(), "--duration", "600"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn stress");
    let pid = child.id();
    let g = Guard(child);
    let start = Instant::now();
    while std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0) <= threads {
        assert!(start.elapsed() < Duration::from_secs(10), "the {kind} storm did not start its threads");
        thread::sleep(Duration::from_millis(20));
    }
    g
}

/// `record --format json` for `secs` with `args`: the exit status, the JSON
/// report and stderr.
fn record_json(secs: &str, args: &[&str]) -> (std::process::ExitStatus, serde_json::Value, String) {
    let out = lockprof().args(["record", "--format", "json", "--duration", secs]).args(args).output().expect("record");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {err}"));
    (out.status, report, err)
}

fn drop_count(report: &serde_json::Value, name: &str) -> u64 {
    report["drops"][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {}", report["drops"]))
}

/// The one stderr line that mentions `needle`, asserting there is exactly one.
fn one_line<'a>(stderr: &'a str, needle: &str) -> &'a str {
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(lines.len(), 1, "want one line with {needle:?}: {stderr}");
    lines[0]
}

/// The id of the map `name` that process `pid` holds.
fn map_id_of(pid: u32, name: &str) -> u32 {
    let ids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("map_id:")?.trim().parse().ok()))
        .collect();
    ids.iter()
        .copied()
        .find(|&id| aya::maps::MapInfo::from_id(id).is_ok_and(|m| m.name_as_str() == Some(name)))
        .unwrap_or_else(|| panic!("process {pid} holds no map {name} (maps {ids:?})"))
}

/// Kernel counter `idx` of process `pid`, read from its `COUNTERS` map.
fn kernel_counter_of(pid: u32, idx: u32) -> u64 {
    let data = aya::maps::MapData::from_id(map_id_of(pid, profiler_common::names::map::COUNTERS)).expect("COUNTERS");
    let map = aya::maps::Map::from_map_data(data).expect("a map");
    let counters: aya::maps::PerCpuArray<aya::maps::MapData, u64> = map.try_into().expect("a per-CPU array");
    counters.get(&idx, 0).map(|v| v.iter().sum()).expect("read COUNTERS")
}

/// BPF_MAP_FREEZE on the map `name` of process `pid`: from then on the
/// kernel refuses every update through bpf(2) (EPERM), as a refusing kernel
/// would; the programs still write it.
fn freeze_map_of(pid: u32, name: &str) {
    let info = aya::maps::MapInfo::from_id(map_id_of(pid, name)).expect("map info");
    let fd = info.fd().expect("map fd");
    let mut attr = [0u32; 32];
    attr[0] = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&fd)) as u32;
    const BPF_MAP_FREEZE: libc::c_long = 22;
    // SAFETY: bpf(BPF_MAP_FREEZE) reads map_fd from a zeroed, owned attr of
    // the size passed; the fd stays open for the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_FREEZE, attr.as_mut_ptr(), std::mem::size_of_val(&attr)) };
    assert_eq!(rc, 0, "BPF_MAP_FREEZE: {}", std::io::Error::last_os_error());
}

#[test]
fn a_refused_map_update_is_counted_said_once_and_loses_no_wait() {
    const TEST: &str = "a_refused_map_update_is_counted_said_once_and_loses_no_wait";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _storm = storm("pipe", 2);
    let rec = Recorder::start(&["--format", "json", "--duration", "4"]);
    freeze_map_of(rec.pid(), profiler_common::names::map::ACTIVE);
    let (out, stderr) = rec.wait();
    let report: serde_json::Value = serde_json::from_slice(&out).expect("JSON report");
    let refused = drop_count(&report, "map_ops_refused");
    // Every interval's flip after the freeze was refused (about 3 in 4 s).
    assert!(refused >= 2, "map_ops_refused = {refused}; stderr: {stderr}");
    let line = one_line(&stderr, "refused a map operation");
    assert!(line.contains("flipping the aggregate maps") && line.contains("map_ops_refused"), "{line}");
    // The programs kept writing the generation the flip could not leave; it
    // was drained at stop: the storm's waits are in the report.
    let events = report["events"].as_u64().expect("events");
    assert!(events > 10_000, "only {events} waits reached the report");
    assert_nothing_attached(TEST);
}

#[test]
fn a_full_ring_buffer_is_counted_and_the_report_comes_out() {
    const TEST: &str = "a_full_ring_buffer_is_counted_and_the_report_comes_out";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _storm = storm("pipe", 4);
    // The reader keeps up with the storm even with the smallest ring (1 MiB,
    // 16k waits): the ring fills when the reader stalls. It is stopped
    // (SIGSTOP) until the programs count a full ring, then resumed.
    let rec = Recorder::start(&["--format", "json", "--mode", "stream", "--ringbuf-mb", "1"]);
    rec.signal(libc::SIGSTOP);
    let start = Instant::now();
    let full = loop {
        let n = kernel_counter_of(rec.pid(), profiler_common::counter::RINGBUF_FULL);
        if n > 0 {
            break n;
        }
        assert!(start.elapsed() < DEADLINE, "the stalled 1 MiB ring buffer never filled");
        thread::sleep(Duration::from_millis(20));
    };
    rec.signal(libc::SIGCONT);
    let report: serde_json::Value = serde_json::from_slice(&rec.stop()).expect("JSON report");
    let counted = drop_count(&report, "ringbuf_full");
    eprintln!("{TEST}: ringbuf_full {full} while stalled, {counted} in the report, {} waits", report["events"]);
    assert!(counted >= full, "the report counts {counted} ring-buffer losses, the kernel had {full}");
    assert!(report["events"].as_u64().is_some_and(|e| e > 0), "no waits in the report");
    assert_nothing_attached(TEST);
}

#[test]
fn a_full_stack_map_shows_as_a_stack_loss() {
    // The stack map is an LRU map keyed by stack content: when full it
    // forgets stacks, it never refuses one. A stack forgotten before it was
    // read is a loss (`stacks_evicted`), named on the counters line and shown
    // where it was used; no capture fails.
    const TEST: &str = "a_full_stack_map_shows_as_a_stack_loss";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _storm = storm("fork", 2);
    let start = Instant::now();
    for round in 1.. {
        let out = lockprof()
            .args(["record", "--duration", "3", "--stack-map-size", "16", "--stack-rate", "0", "--callers", "1000"])
            .output()
            .expect("record");
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{}: {err}", out.status);
        assert_nothing_attached(TEST);
        let counters = text.lines().find(|l| l.starts_with("counters:")).unwrap_or_else(|| panic!("{text}"));
        assert!(!counters.contains("stack_failed="), "a full stack map must not fail captures: {counters}");
        let lost = counters.split_once("(lost: ").map_or("", |(_, l)| l.trim_end_matches(')'));
        let evicted: u64 =
            counters.split_whitespace().find_map(|kv| kv.strip_prefix("stacks_evicted=")?.parse().ok()).unwrap_or(0);
        eprintln!("{TEST}: round {round}: {counters}");
        if evicted > 0 {
            assert!(lost.split_whitespace().any(|n| n == "stacks_evicted"), "not named lost: {counters}");
            assert!(text.contains("[stack evicted"), "{evicted} stacks evicted, none shown:\n{text}");
            return;
        }
        assert!(start.elapsed() < DEADLINE, "no stack evicted in {round} rounds with a 16-entry stack map: {counters}");
    }
}

/// A fresh mount namespace for the child, its mounts private (so what the
/// test mounts there is seen by it alone).
fn in_private_mounts(cmd: &mut Command) -> &mut Command {
    // SAFETY: only async-signal-safe calls (unshare, mount) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn kallsyms_unreadable_after_start_changes_nothing() {
    const TEST: &str = "kallsyms_unreadable_after_start_changes_nothing";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _storm = storm("pipe", 2);
    let rec = Recorder::attach(in_private_mounts(&mut lockprof()).args(["record", "--duration", "3"]));
    let pid = rec.pid().to_string();
    let nsenter = |args: &[&str]| Command::new("nsenter").args(["-t", &pid, "-m", "--"]).args(args).output();
    let hidden = nsenter(&["mount", "--bind", "/dev/null", "/proc/kallsyms"]).expect("nsenter mount");
    assert!(hidden.status.success(), "bind mount: {}", String::from_utf8_lossy(&hidden.stderr));
    let now = nsenter(&["cat", "/proc/kallsyms"]).expect("nsenter cat");
    assert!(now.stdout.is_empty(), "/proc/kallsyms still readable in the session's namespace");
    let (out, stderr) = rec.wait();
    let text = String::from_utf8_lossy(&out);
    // Nothing reads kallsyms after start: callers are named from the table
    // read then, and nothing is said about it.
    assert!(text.contains("anon_pipe_"), "pipe callers not named: {text}");
    assert!(!stderr.contains("kallsyms"), "{stderr}");
    assert_nothing_attached(TEST);
}

/// A 64 KiB tmpfs mounted (and unmounted when dropped) for the test, filled
/// to the last byte.
struct FullDisk(PathBuf);

impl FullDisk {
    fn mount(name: &str) -> FullDisk {
        let dir = std::env::temp_dir().join(format!("lockprof-full-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"]).arg(&dir).status();
        assert!(st.expect("mount").success(), "mounting a tmpfs at {}", dir.display());
        let fill = FullDisk(dir);
        let filler = std::fs::write(fill.0.join("filler"), vec![0u8; 1 << 20]).expect_err("64 KiB holds no 1 MiB");
        assert_eq!(filler.raw_os_error(), Some(libc::ENOSPC));
        fill
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn assert_no_partial(dir: &Path, want: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into())
        .collect();
    names.sort();
    assert_eq!(names, want, "files left on the full disk");
}

#[test]
fn a_full_disk_loses_no_report() {
    const TEST: &str = "a_full_disk_loses_no_report";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = FullDisk::mount("rec");
    let _storm = storm("pipe", 2);

    // The recording: one line naming the file and ENOSPC, the report still
    // on stdout, exit status 1, no partial file.
    let rec = disk.file("rec.lockprof");
    let (status, report, err) = record_json("2", &["--output", rec.to_str().expect("utf-8 path")]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(report["events"].as_u64().is_some_and(|e| e > 0), "no waits in the report");
    let line = one_line(&err, "cannot save the recording");
    assert!(line.contains(&rec.display().to_string()) && line.contains("No space left on device"), "{line}");
    assert_no_partial(&disk.0, &["filler"]);
    assert_nothing_attached(TEST);

    // An earlier recording at that path is kept.
    std::fs::remove_file(disk.file("filler")).expect("free the disk");
    std::fs::write(&rec, b"earlier").expect("an earlier file");
    let _ = std::fs::write(disk.file("filler"), vec![0u8; 1 << 20]);
    let (status, _, err) = record_json("1", &["--output", rec.to_str().expect("utf-8 path")]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(std::fs::read(&rec).expect("kept"), b"earlier");

    // A bigger format: a live flamegraph's SVG.
    let svg = disk.file("out.svg");
    let out = lockprof().args(["flamegraph", "--duration", "2", "--output"]).arg(&svg).output().expect("flamegraph");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = one_line(&err, "cannot write");
    assert!(line.contains(&svg.display().to_string()) && line.contains("No space left on device"), "{line}");
    assert_no_partial(&disk.0, &["filler", "rec.lockprof"]);
    assert_nothing_attached(TEST);
}

#[test]
fn sigterm_while_attaching_ends_cleanly() {
    const TEST: &str = "sigterm_while_attaching_ends_cleanly";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut outcomes = Vec::new();
    // `None`: SIGTERM at once, maybe before lockprof's main held it (the
    // dynamic loader's first instants). `Some(ms)`: `ms` after main held it
    // (seen in /proc, not guessed from a delay): always handled.
    for delay in [None, Some(0u64), Some(2), Some(5), Some(10), Some(20), Some(50), Some(100), Some(200), Some(400)] {
        let rec = Recorder::spawn(lockprof().args(["record", "--duration", "30"]));
        if let Some(ms) = delay {
            wait_until_sigterm_held(rec.pid());
            thread::sleep(Duration::from_millis(ms));
        }
        rec.signal(libc::SIGTERM);
        let started = Instant::now();
        let out = rec.finish();
        let (text, err) = (String::from_utf8_lossy(&out.stdout), &out.stderr);
        assert!(started.elapsed() < Duration::from_secs(10), "{delay:?}: SIGTERM took {:?}", started.elapsed());
        assert!(!err.contains("panicked"), "{delay:?}: {err}");
        match (out.status.code(), out.status.signal(), delay) {
            // Handled: stopped cleanly, with its report.
            (Some(0), _, _) => assert!(text.starts_with("lockprof: "), "{delay:?}: no report: {text} {err}"),
            // Before main held the signal: the default action, nothing attached yet.
            (None, Some(libc::SIGTERM), None) => assert!(err.is_empty(), "{delay:?}: {err}"),
            other => panic!("{delay:?}: exit {other:?}: {err}"),
        }
        assert_nothing_attached(&format!("{TEST} ({delay:?}, {})", out.status));
        outcomes.push((delay, out.status.code()));
    }
    eprintln!("{TEST}: (delay after the signal was held, exit code) {outcomes:?}");
}

/// Waits until process `pid` holds SIGTERM (lockprof's main blocks it before
/// loading anything) or catches it (its handler is set), or has exited.
fn wait_until_sigterm_held(pid: u32) {
    let bit = 1u64 << (libc::SIGTERM - 1);
    let start = Instant::now();
    loop {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return };
        let mask = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .unwrap_or(0)
        };
        // Held (blocked), or already handled (caught): either way, handled.
        let held = (mask("SigBlk:") | mask("SigCgt:")) & bit != 0;
        if held || status.lines().any(|l| l.starts_with("State:") && l.contains('Z')) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "lockprof never held SIGTERM:\n{status}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// `GET /healthz` answers 200.
fn healthz(port: u16) -> bool {
    use std::io::Write as _;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut answer = String::new();
    write!(s, "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_ok()
        && s.read_to_string(&mut answer).is_ok()
        && answer.lines().next().is_some_and(|l| l.starts_with("HTTP/1.") && l.contains(" 200 "))
}

/// `cmd` with SIGHUP's default disposition, as started from a terminal.
fn sighup_default(cmd: &mut Command) -> &mut Command {
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        })
    }
}

#[test]
fn sighup_stops_record_with_its_report_and_serve_ignores_it() {
    const TEST: &str = "sighup_stops_record_with_its_report_and_serve_ignores_it";
    if !ready(TEST) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("lockprof-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let rec = dir.join("hup.lockprof");

    // record (its terminal closed): stops at once, saves, reports, exit 0.
    // SIGHUP's default restored for it, whatever this test inherited (CI
    // started under nohup ignores it, and an ignored SIGHUP stays ignored).
    let session =
        Recorder::attach(sighup_default(&mut lockprof()).args(["record", "--duration", "60", "--output"]).arg(&rec));
    let hup = Instant::now();
    session.signal(libc::SIGHUP);
    let (out, stderr) = session.wait();
    assert!(hup.elapsed() < Duration::from_secs(10), "record took {:?} to stop", hup.elapsed());
    one_line(&stderr, "SIGHUP");
    assert!(String::from_utf8_lossy(&out).starts_with("lockprof: "), "no report");
    assert!(std::fs::metadata(&rec).is_ok_and(|m| m.len() > 0), "no recording saved");
    assert_nothing_attached(TEST);

    // record under nohup (SIGHUP ignored when it started): keeps ignoring it.
    let mut child = lockprof();
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        child.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let session = Recorder::attach(child.args(["record", "--duration", "2"]));
    let started = Instant::now();
    session.signal(libc::SIGHUP);
    let (_, stderr) = session.wait();
    assert!(started.elapsed() >= Duration::from_millis(1500), "a nohup'd record stopped on SIGHUP");
    assert!(!stderr.contains("SIGHUP"), "{stderr}");
    assert_nothing_attached(TEST);

    // serve (a daemon): says once that it ignores SIGHUP, keeps serving,
    // stops on SIGTERM counting the SIGHUPs.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let mut serve =
        Recorder::attach(sighup_default(&mut lockprof()).args(["serve", "--listen", &format!("127.0.0.1:{port}")]));
    serve.signal(libc::SIGHUP);
    serve.stderr_until("serve's answer to SIGHUP", |t| t.contains("SIGHUP ignored:"));
    // /healthz answers 200 once profiles come, within a second or two.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthz(port) {
        assert!(Instant::now() < deadline, "serve stopped answering after SIGHUP");
        thread::sleep(Duration::from_millis(100));
    }
    assert!(serve.running(), "serve exited on SIGHUP");
    serve.signal(libc::SIGTERM);
    let (_, stderr) = serve.wait();
    one_line(&stderr, "SIGHUP ignored:");
    assert!(stderr.contains("programs detached (1 SIGHUP ignored)"), "{stderr}");
    assert_nothing_attached(TEST);
    let _ = std::fs::remove_dir_all(&dir);
}
