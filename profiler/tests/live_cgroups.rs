//! Root-only: cgroup attribution on the live kernel. Pipe storms are started
//! inside child cgroups the tests create under the cgroup2 mount (named
//! `lockprof-test-<pid>-...`, removed on every exit path) and must show
//! under them with `--by cgroup`; `--cgroup` must keep only the cgroup it
//! names (counts compared with an unfiltered recording of the same window);
//! container-style paths must get their short names in JSON, pprof (read by
//! `go tool pprof`) and flamegraphs; and `serve` must fold all but the
//! busiest cgroup into `[other]` (checked by `promtool`). Skips, saying why,
//! without root, the lock tracepoints, a cgroup2 mount, `go` or `promtool`;
//! with `CI=true` those are failures.

use std::{
    ffi::CString,
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use lockprof::cgroups::CgroupFs;
use serde_json::Value;

#[path = "support/recorder.rs"]
mod recorder;
mod support;

use recorder::Recorder;

/// One storm set and its recorders at a time on the machine's two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

/// The longest a test polls for what must come (a daemon up, a series
/// shown, a cgroup emptied).
const DEADLINE: Duration = Duration::from_secs(30);

/// `true` if the test can run; prints why not otherwise (fails in CI).
fn ready(test: &str, tools: &[(&str, &str)]) -> bool {
    let reason = support::tracepoints_missing()
        .or_else(|| CgroupFs::discover().err().map(|e| format!("no cgroup v2 hierarchy: {e}")))
        .or_else(|| support::tools_missing(tools));
    support::ready_unless(test, reason)
}

fn lockprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockprof"))
}

/// The cgroups a test made below `lockprof-test-<pid>-<tag>`: everything
/// in them is killed and they are removed, leaves first, when dropped.
struct Cgroups {
    mount: PathBuf,
    top: String,
    made: Vec<PathBuf>,
}

impl Cgroups {
    fn new(tag: &str) -> Cgroups {
        let fs = CgroupFs::discover().expect("cgroup2 mount");
        let mut cg = Cgroups {
            mount: fs.root().to_path_buf(),
            top: format!("lockprof-test-{}-{tag}", std::process::id()),
            made: Vec::new(),
        };
        cg.mkdir("");
        cg
    }

    /// The path of `sub` relative to the mount, as lockprof shows it.
    fn rel(&self, sub: &str) -> String {
        if sub.is_empty() { format!("/{}", self.top) } else { format!("/{}/{sub}", self.top) }
    }

    fn dir(&self, sub: &str) -> PathBuf {
        self.mount.join(self.rel(sub).trim_start_matches('/'))
    }

    /// Creates `sub` (and what is above it) below the top cgroup.
    fn mkdir(&mut self, sub: &str) -> PathBuf {
        let mut d = self.mount.join(&self.top);
        for c in std::iter::once("").chain(sub.split('/').filter(|c| !c.is_empty())) {
            d = if c.is_empty() { d } else { d.join(c) };
            if !d.exists() {
                std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
                self.made.push(d.clone());
            }
        }
        d
    }

    /// The id the kernel records for `sub`: its directory's inode number.
    fn id(&self, sub: &str) -> u64 {
        std::fs::metadata(self.dir(sub)).expect("cgroup dir").ino()
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        let top = self.mount.join(&self.top);
        let _ = std::fs::write(top.join("cgroup.kill"), "1");
        for d in self.made.iter().rev() {
            let start = Instant::now();
            loop {
                for pid in std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default().lines() {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        // SAFETY: kill(2) with a pid read from our own test cgroup.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
                if std::fs::remove_dir(d).is_ok() || !d.exists() || start.elapsed() > DEADLINE {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A child killed (and reaped) when dropped.
struct Guard(Child);

impl Guard {
    fn wait_ok(&mut self) {
        let s = self.0.wait().expect("wait");
        assert!(s.success(), "exited {s}");
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lockprof stress pipe` started inside the cgroup at `dir`: it moves itself
/// there before exec, so every thread it starts is inside.
fn storm_in(dir: &Path, threads: u32, secs: &str) -> Guard {
    let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).expect("path");
    let mut cmd = lockprof();
    cmd.args(["stress", "pipe", "--threads", &threads.to_string(), "--duration", secs]).stdout(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and calls
    // only open, write and close (async-signal-safe) on memory allocated
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n == 1 { Ok(()) } else { Err(err) }
        });
    }
    let g = Guard(cmd.spawn().unwrap_or_else(|e| panic!("stress in {}: {e}", dir.display())));
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", g.0.id())).expect("/proc/<pid>/cgroup");
    let dir_s = dir.display().to_string();
    assert!(own.lines().any(|l| l.starts_with("0::") && dir_s.ends_with(&l[3..])), "storm not in {dir_s}: {own}");
    g
}

/// `lockprof <args>`, which must succeed: its stdout.
fn run_ok(args: &[&str]) -> Vec<u8> {
    let out = lockprof().args(args).output().expect("run lockprof");
    assert!(out.status.success(), "lockprof {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn arr<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v[k].as_array().map_or_else(|| panic!("no {k}[] in {v}"), Vec::as_slice)
}

/// The cgroups[] entry of cgroup `id`.
fn cgroup(v: &Value, id: u64) -> Option<&Value> {
    arr(v, "cgroups").iter().find(|c| c["cgroup_id"] == id)
}

fn cgroup_rows(v: &Value) -> Vec<(u64, String, u64)> {
    arr(v, "cgroups").iter().map(|c| (n(c, "cgroup_id"), c["path"].to_string(), n(c, "contended"))).collect()
}

/// The locks[] row at `addr` (one mode: a mutex has one).
fn lock_at<'a>(v: &'a Value, addr: &str) -> Option<&'a Value> {
    arr(v, "locks").iter().find(|l| l["addr"] == addr)
}

/// A pipe mutex: a mutex some caller reached through anon_pipe_write.
fn is_pipe_mutex(l: &Value) -> bool {
    l["type"] == "mutex"
        && arr(l, "callers")
            .iter()
            .any(|c| arr(c, "stack").iter().any(|f| f.as_str().is_some_and(|f| f.starts_with("anon_pipe_write+"))))
}

/// The address and waits of the pipe mutex cgroup `id` waited on most.
fn pipe_of(v: &Value, id: u64) -> (String, u64) {
    let cg = cgroup(v, id).unwrap_or_else(|| panic!("cgroup {id} not among {:?}", cgroup_rows(v)));
    arr(cg, "locks")
        .iter()
        .filter(|l| l["addr"].as_str().and_then(|a| lock_at(v, a)).is_some_and(is_pipe_mutex))
        .max_by_key(|l| n(l, "contended"))
        .map(|l| (l["addr"].as_str().expect("addr").to_string(), n(l, "contended")))
        .unwrap_or_else(|| panic!("cgroup {id} waited on no pipe mutex: {cg}"))
}

#[test]
fn a_storm_in_a_child_cgroup_shows_under_it() {
    const TEST: &str = "a_storm_in_a_child_cgroup_shows_under_it";
    if !ready(TEST, &[]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cg = Cgroups::new("child");
    let dir = cg.mkdir("storm.scope");
    let id = cg.id("storm.scope");
    // Outlives the recording; killed when dropped.
    let storm = storm_in(&dir, 3, "600");
    let v = json(&run_ok(&["record", "--by", "cgroup", "--format", "json", "--duration", "2"]));
    drop(storm);
    let entry = cgroup(&v, id).unwrap_or_else(|| panic!("cgroup {id} not among {:?}", cgroup_rows(&v)));
    assert_eq!(entry["path"], cg.rel("storm.scope"), "{entry}");
    assert_eq!(entry["name"], "storm.scope", "{entry}");
    let (addr, in_cg) = pipe_of(&v, id);
    let lock = lock_at(&v, &addr).expect("the pipe mutex's row");
    // The callers' split by cgroup adds up to the cgroup's row for the lock.
    let split: u64 = arr(lock, "callers")
        .iter()
        .flat_map(|c| arr(c, "cgroups"))
        .filter(|c| c["cgroup_id"] == id)
        .map(|c| n(c, "contended"))
        .sum();
    assert_eq!(split, in_cg, "callers' cgroup split vs cgroups[].locks for {addr}");
    let all = n(lock, "contended");
    assert!(in_cg * 100 >= all * 95, "only {in_cg} of {all} waits on the storm's pipe mutex are under its cgroup");
}

#[test]
fn cgroup_filter_keeps_only_that_cgroup() {
    const TEST: &str = "cgroup_filter_keeps_only_that_cgroup";
    if !ready(TEST, &[]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cg = Cgroups::new("filter");
    let (xd, yd) = (cg.mkdir("x.scope"), cg.mkdir("y.scope"));
    let (x, y, top) = (cg.id("x.scope"), cg.id("y.scope"), cg.id(""));
    let xs = cg.rel("x.scope");
    let ts = cg.rel("");
    let json_args = ["--by", "cgroup", "--format", "json"];
    // Attached before the storms start and stopped after they end: the three
    // see the same waits of both storms.
    let filtered = Recorder::start(&[&json_args[..], &["--cgroup", xs.trim_start_matches('/')]].concat());
    let parent = Recorder::start(&[&json_args[..], &["--cgroup", &ts]].concat());
    let all = Recorder::start(&json_args);
    let (mut a, mut b) = (storm_in(&xd, 3, "2"), storm_in(&yd, 3, "2"));
    a.wait_ok();
    b.wait_ok();
    let (all, filtered, parent) = (json(&all.stop()), json(&filtered.stop()), json(&parent.stop()));

    // Which waits a storm makes (its pipe mutex, the run-queue locks) is up
    // to the scheduler; what the filter must do is not: the filtered run
    // holds exactly the unfiltered run's waits of X, on X's locks only.
    let x_all = cgroup(&all, x).unwrap_or_else(|| panic!("cgroup X not among {:?}", cgroup_rows(&all)));
    assert!(cgroup(&all, y).is_some(), "cgroup Y not among {:?}", cgroup_rows(&all));
    for c in arr(&filtered, "cgroups") {
        assert_eq!(c["cgroup_id"], x, "the filtered run shows another cgroup: {c}");
    }
    let x_filtered = cgroup(&filtered, x).unwrap_or_else(|| panic!("X missing: {:?}", cgroup_rows(&filtered)));
    let (fx, ux) = (n(x_filtered, "contended"), n(x_all, "contended"));
    assert!(ux > 0, "storm A made no waits: {x_all}");
    assert!(fx.abs_diff(ux) <= ux / 100 + 10, "cgroup X: {fx} waits filtered, {ux} unfiltered");
    // Every lock of the filtered run is one X waited on (a few waits of
    // slack: the three sessions' programs can each miss a wait, counted).
    let x_locks: Vec<&Value> = arr(x_all, "locks").iter().map(|l| &l["addr"]).collect();
    let foreign: u64 =
        arr(&filtered, "locks").iter().filter(|l| !x_locks.contains(&&l["addr"])).map(|l| n(l, "contended")).sum();
    assert!(foreign <= 10, "{foreign} filtered waits on locks X never waited on");
    // The parent keeps both (a subtree), and nothing else.
    for c in arr(&parent, "cgroups") {
        let id = n(c, "cgroup_id");
        assert!([x, y, top].contains(&id), "the parent's run shows a cgroup outside it: {c}");
    }
    for (id, name) in [(x, "X"), (y, "Y")] {
        let (p, u) = (cgroup(&parent, id), cgroup(&all, id));
        let (p, u) = (p.map_or(0, |c| n(c, "contended")), u.map_or(0, |c| n(c, "contended")));
        assert!(p.abs_diff(u) <= u / 100 + 10, "cgroup {name} under the parent filter: {p} waits, {u} unfiltered");
    }

    // A cgroup that does not exist: one line, exit 2, nothing attached.
    let out = lockprof()
        .args(["record", "--duration", "1", "--cgroup", &format!("nosuch-{}.service", std::process::id())])
        .output()
        .expect("run record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("nosuch-") && !err.contains("recording"), "{err}");
    assert!(out.stdout.is_empty());
}

/// A 64-hex container id whose first 12 digits differ by `n` and test run.
fn cid(n: u32) -> String {
    format!("{n:x}{:011x}{}", std::process::id(), "0123456789abcdef".repeat(4)).chars().take(64).collect()
}

#[test]
fn container_style_paths_get_short_names() {
    const TEST: &str = "container_style_paths_get_short_names";
    if !ready(TEST, &[("go", "golang-go")]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cg = Cgroups::new("names");
    let uid = format!("{:08x}-aaaa-4bbb-8ccc-0123456789ab", std::process::id());
    let (c1, c2, c3) = (cid(1), cid(2), cid(3));
    let cases = [
        (format!("system.slice/docker-{c1}.scope"), format!("docker:{}", &c1[..12])),
        (
            format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{c2}.scope",
                uid.replace('-', "_")
            ),
            format!("pod:{}/containerd:{}", &uid[..8], &c2[..12]),
        ),
        (format!("kubepods/burstable/pod{uid}/{c3}"), format!("pod:{}/{}", &uid[..8], &c3[..12])),
    ];
    let dirs: Vec<PathBuf> = cases.iter().map(|(p, _)| cg.mkdir(p)).collect();
    let tmp = std::env::temp_dir().join(format!("lockprof-cg-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmpdir");
    let rec = tmp.join("names.lockprof");
    let r = Recorder::start(&["--by", "cgroup", "--format", "json", "--output", rec.to_str().expect("utf-8")]);
    let mut storms: Vec<Guard> = dirs.iter().map(|d| storm_in(d, 2, "1.5")).collect();
    storms.iter_mut().for_each(Guard::wait_ok);
    let v = json(&r.stop());
    for (path, name) in &cases {
        let id = cg.id(path);
        let e = cgroup(&v, id).unwrap_or_else(|| panic!("{path} ({id}) not among {:?}", cgroup_rows(&v)));
        assert_eq!(e["name"], name.as_str(), "{e}");
        assert_eq!(e["path"], cg.rel(path), "{e}");
        assert!(n(e, "contended") > 0);
    }

    // pprof: the cgroup label carries the short name.
    let pb = tmp.join("names.pb.gz");
    run_ok(&[
        "report",
        "--format",
        "pprof",
        "--input",
        rec.to_str().expect("utf-8"),
        "--output",
        pb.to_str().expect("utf-8"),
    ]);
    let traces = support::go_pprof("-traces", &pb);
    let labels: Vec<&str> = traces.lines().filter_map(|l| l.trim().strip_prefix("cgroup:")).map(str::trim).collect();
    // Folded stacks with the cgroup at the root.
    let folded = tmp.join("names.folded");
    run_ok(&[
        "flamegraph",
        "--cgroup-root",
        "--input",
        rec.to_str().expect("utf-8"),
        "--folded",
        folded.to_str().expect("utf-8"),
    ]);
    let text = std::fs::read_to_string(&folded).expect("folded");
    let _ = std::fs::remove_dir_all(&tmp);
    for (_, name) in &cases {
        assert!(labels.contains(&name.as_str()), "no pprof sample labelled cgroup:{name}: {labels:?}");
        let root = format!("{name} [cgroup];");
        assert!(
            text.lines().any(|l| l.starts_with(&root) && l.contains("anon_pipe_write")),
            "no folded stack rooted at {root}:\n{text}"
        );
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// GET `path` on loopback: (status, body).
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no header end"))?;
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

#[test]
fn serve_folds_all_but_the_busiest_cgroup_into_other() {
    const TEST: &str = "serve_folds_all_but_the_busiest_cgroup_into_other";
    if !ready(TEST, &[("promtool", "prometheus")]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cg = Cgroups::new("serve");
    let (busy, quiet) = (cg.mkdir("busy.scope"), cg.mkdir("quiet.scope"));
    let _storms = (storm_in(&busy, 4, "600"), storm_in(&quiet, 1, "600"));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _d = Guard(
        lockprof()
            .args(["serve", "--listen", &listen, "--max-cgroups", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn lockprof serve"),
    );
    let metric = "lockprof_cgroup_lock_contentions_total{";
    let named =
        |t: &str, cgroup: &str| t.lines().any(|l| l.starts_with(metric) && l.contains(&format!("cgroup=\"{cgroup}\"")));
    let start = Instant::now();
    let text = loop {
        if let Ok((200, t)) = get(port, "/metrics")
            && named(&t, "busy.scope")
            && named(&t, "[other]")
        {
            break t;
        }
        assert!(start.elapsed() < DEADLINE, "no busy.scope and [other] series on {listen} in {DEADLINE:?}");
        thread::sleep(Duration::from_millis(500));
    };
    let cgroups: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.split("cgroup=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(cgroups, ["[other]", "busy.scope"].into_iter().collect(), "--max-cgroups 1: one named cgroup");
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    c.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    let out = c.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
