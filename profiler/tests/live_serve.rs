//! Root-only: `lockprof serve` during a pipe storm, read by the real
//! consumers: `promtool check metrics` and a Prometheus server (Debian's
//! `prometheus`), `go tool pprof` (Debian's `golang-go`). Skips, saying why,
//! without root or those tools (`cargo xtask setup` installs them); with
//! `CI=true` those are failures.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use prost::Message as _;

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/programs.rs"]
mod programs;
mod support;

use daemon::{Daemon, Guard, free_port, get, lockprof, request};
use programs::{lockprof_programs, programs_when};

/// One daemon and one storm at a time on the machine's two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

/// `true` if the test can run; prints why not otherwise (fails in CI).
fn ready(test: &str, tools: &[(&str, &str)]) -> bool {
    let reason = support::tracepoints_missing().or_else(|| support::tools_missing(tools));
    support::ready_unless(test, reason)
}

fn storm() -> Guard {
    let child = lockprof()
        .args(["stress", "pipe", "--threads", "4", "--duration", "600"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn stress");
    thread::sleep(Duration::from_millis(300));
    Guard(child)
}

/// The value of the first sample of `name` whose line contains every needle.
fn sample(text: &str, name: &str, needles: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A pipe mutex's series (its class names the pipe function that contends most: read or write).
const PIPE: [&str; 2] = ["type=\"mutex\"", "pipe_"];

fn promtool_check(text: &str) -> (bool, String) {
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    c.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    let out = c.wait_with_output().expect("promtool");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn serve_passes_promtool_counts_up_answers_bad_requests_and_detaches_on_sigterm() {
    if !ready(
        "serve_passes_promtool_counts_up_answers_bad_requests_and_detaches_on_sigterm",
        &[("promtool", "prometheus")],
    ) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = programs_when(|v| v.is_empty()).len();
    let _storm = storm();
    let mut d = Daemon::start(&["--max-series", "20"]);
    assert!(lockprof_programs().len() >= before + 2, "serve attached its programs");

    // Least privilege: nothing left but what map access needs, no way back.
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).expect("status");
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim).unwrap_or("?").to_string();
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    let eff = u64::from_str_radix(&field("CapEff:"), 16).expect("CapEff");
    assert_eq!(eff & !(1 << 39), 0, "at most CAP_BPF kept: CapEff {eff:x}");
    assert_eq!(field("CapPrm:"), field("CapEff:"));

    // The storm's pipe mutex shows once an interval with it is published.
    let (first, w1) = until("the pipe mutex in /metrics", || {
        let r = get(d.port, "/metrics");
        assert_eq!(r.status, 200);
        let text = r.text();
        let w = sample(&text, "lockprof_lock_wait_seconds_total", &PIPE);
        w.map(|w| (text, w)).ok_or_else(|| r.text())
    });
    let (ok, lint) = promtool_check(&first);
    assert!(ok, "promtool check metrics: {lint}\n{first}");
    let c1 = sample(&first, "lockprof_lock_contentions_total", &PIPE).expect("pipe contentions");
    assert!(first.contains("lockprof_dropped_events_total{reason=\"ringbuf_full\",kind=\"loss\"}"), "{first}");
    assert!(first.contains("lockprof_build_info{"), "{first}");
    assert!(first.lines().filter(|l| l.starts_with("lockprof_lock_contentions_total{")).count() <= 20 + 8 * 3);

    // Bad input: one line each, and the daemon keeps serving.
    for (method, path, want) in [
        ("GET", "/nope", 404),
        ("GET", "/metrics/extra", 404),
        ("POST", "/metrics", 405),
        ("DELETE", "/debug/pprof/mutex", 405),
        ("GET", "/debug/pprof/mutex?seconds=abc", 400),
        ("GET", "/debug/pprof/mutex?seconds=0", 400),
        ("GET", "/debug/pprof/mutex?seconds=100000", 400),
        ("GET", "/debug/pprof/mutex?seconds=1&seconds=2", 400),
        ("GET", "/debug/pprof/mutex?metric=wait", 400),
        ("GET", "/debug/pprof/lockprof?metric=frobs", 400),
        ("GET", "/debug/pprof/lockprof?seconds=%ZZ", 400),
    ] {
        let r = request(d.port, method, path).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert_eq!(r.status, want, "{method} {path}: {}", r.text());
        let t = r.text();
        assert_eq!(t.trim_end().lines().count(), 1, "{method} {path}: one line, got {t:?}");
    }
    assert_eq!(get(d.port, "/").status, 200);
    assert!(get(d.port, "/").text().contains("/debug/pprof/mutex"));

    // Counters grow with the storm's next published interval.
    let second = until("the pipe mutex's counters to grow between scrapes", || {
        let text = get(d.port, "/metrics").text();
        let w2 = sample(&text, "lockprof_lock_wait_seconds_total", &PIPE).expect("pipe mutex again");
        let c2 = sample(&text, "lockprof_lock_contentions_total", &PIPE).expect("pipe contentions again");
        if w2 > w1 && c2 > c1 { Ok(text) } else { Err(format!("wait {w1} -> {w2}, contentions {c1} -> {c2}")) }
    });
    let (ok, lint) = promtool_check(&second);
    assert!(ok, "{lint}");

    let (status, stderr) = d.stop();
    assert!(status.success(), "exit {status:?}: {stderr}");
    assert!(stderr.contains("programs detached"), "{stderr}");
    let after = programs_when(|v| v.len() <= before);
    assert_eq!(after.len(), before, "programs left attached after SIGTERM: {after:?}");
}

/// `f`'s value once it gives one, polled every 250 ms; panics with `what`
/// and `f`'s last word after 60 s (far beyond a published interval's 1 s).
fn until<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) => assert!(start.elapsed() < Duration::from_secs(60), "no sign of {what}: {last}"),
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn temp_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lockprof-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn a_real_prometheus_scrapes_the_pipe_mutex_wait() {
    if !ready("a_real_prometheus_scrapes_the_pipe_mutex_wait", &[("prometheus", "prometheus")]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _storm = storm();
    let d = Daemon::start(&[]);
    let dir = temp_dir("prometheus");
    let prom_port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: lockprof\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            d.port
        ),
    )
    .expect("config");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let prom = Guard(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus"),
    );
    let query = encode("max(lockprof_lock_wait_seconds_total{type=\"mutex\",class=~\".*pipe_.*\"})");
    let start = Instant::now();
    let mut last = String::new();
    let value = loop {
        if let Ok(r) = request(prom_port, "GET", &format!("/api/v1/query?query={query}")) {
            last = r.text();
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let got = v["data"]["result"][0]["value"][1].as_str().and_then(|s| s.parse::<f64>().ok());
            if let Some(x) = got.filter(|x| *x > 0.0) {
                break x;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never saw the pipe mutex's wait; last answer: {last}\nlog: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(500));
    };
    assert!(value > 0.0);
    // The scrape target is healthy in Prometheus's own eyes.
    let targets = get(prom_port, "/api/v1/targets").text();
    assert!(targets.contains("\"health\":\"up\""), "{targets}");
    drop(prom);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (contentions, delay) summed over the samples of `go tool pprof -raw`.
fn go_raw_totals(path: &Path) -> (i64, i64, String) {
    let text = support::go_pprof("-raw", path);
    let mut totals = (0, 0);
    for l in text.lines().skip_while(|l| !l.starts_with("Samples:")).skip(2).take_while(|l| !l.starts_with("Locations"))
    {
        let Some((values, _)) = l.split_once(':') else { continue };
        let v: Vec<i64> = values.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if let [c, d] = v[..] {
            totals.0 += c;
            totals.1 += d;
        }
    }
    (totals.0, totals.1, text)
}

/// The sum of the first value of the samples labelled `lock_addr:[addr]` in
/// `go tool pprof -raw` output.
fn first_value_of(text: &str, addr: &str) -> i64 {
    let mut sum = 0;
    let mut lines = text.lines().skip_while(|l| !l.starts_with("Samples:")).skip(2).peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("Locations") {
            break;
        }
        let labels = lines.peek().copied().unwrap_or_default();
        if labels.contains(&format!("lock_addr:[{addr}]")) {
            sum += l.split_whitespace().next().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0);
        }
    }
    sum
}

#[test]
fn go_tool_pprof_reads_the_mutex_profile_and_its_totals_match() {
    if !ready("go_tool_pprof_reads_the_mutex_profile_and_its_totals_match", &[("go", "golang-go")]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let storm = storm();
    // A window far longer than the test: every wait since start stays in it.
    let d = Daemon::start(&["--window", "600"]);
    // A 2 s profile (our own decoding of it) once the window holds two
    // seconds of the storm.
    let (r, p) = until("a 2 s mutex profile with the storm in it", || {
        let r = get(d.port, "/debug/pprof/mutex?seconds=2");
        assert_eq!(r.status, 200, "{}", r.text());
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(r.body.as_slice()).read_to_end(&mut raw).expect("gzip");
        let p = lockprof::export::proto::Profile::decode(raw.as_slice()).expect("profile.proto");
        let n: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        if n > 1000 { Ok((r, p)) } else { Err(format!("{n} contentions")) }
    });
    let dir = temp_dir("pprof");
    let file = dir.join("mutex.pb.gz");
    std::fs::write(&file, &r.body).expect("write profile");
    let st = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!((st(p.sample_type[0].r#type), st(p.sample_type[0].unit)), ("contentions", "count"));
    assert_eq!((st(p.sample_type[1].r#type), st(p.sample_type[1].unit)), ("delay", "nanoseconds"));
    assert_eq!(p.duration_nanos, 2_000_000_000);
    let ours = p.sample.iter().fold((0, 0), |t, s| (t.0 + s.value[0], t.1 + s.value[1]));

    let (count, delay, text) = go_raw_totals(&file);
    assert_eq!((count, delay), ours, "go tool pprof and lockprof disagree:\n{text}");
    assert!(count > 1000 && delay > 0, "two seconds of a pipe storm: {count} contentions\n{text}");
    assert!(text.contains("pipe_write"), "the pipe writers' stacks: {text}");

    // With the storm stopped, the window (all of the daemon's life) holds
    // every wait the counters saw for the pipe mutex: compared once the
    // storm's last interval is published (the two agree from then on; until
    // then either may be an interval ahead).
    drop(storm);
    let (addr, counted) = until("the window to hold every wait the counters saw", || {
        let metrics = get(d.port, "/metrics").text();
        let line = metrics
            .lines()
            .filter(|l| l.starts_with("lockprof_lock_contentions_total{") && PIPE.iter().all(|n| l.contains(n)))
            .max_by_key(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
            .expect("pipe mutex");
        let counted = line.rsplit(' ').next().and_then(|v| v.parse::<i64>().ok()).expect("count");
        let addr = line.split("addr=\"").nth(1).and_then(|a| a.split('"').next()).expect("addr label").to_string();
        let all = get(d.port, "/debug/pprof/mutex?seconds=600");
        std::fs::write(&file, &all.body).expect("write profile");
        let (_, _, text) = go_raw_totals(&file);
        let in_window = first_value_of(&text, &addr);
        if in_window == counted {
            Ok((addr, counted))
        } else {
            Err(format!("window {in_window} vs counters {counted} for the pipe mutex:\n{metrics}\n{text}"))
        }
    });

    // Blame: the same waits, charged to whoever held the pipe mutex (with
    // an "[owner unknown]" row for the rest, so they add up).
    let blame = get(d.port, "/debug/pprof/lockprof?seconds=600&metric=blame");
    assert_eq!(blame.status, 200, "{}", blame.text());
    std::fs::write(&file, &blame.body).expect("write profile");
    let (_, _, text) = go_raw_totals(&file);
    assert_eq!(first_value_of(&text, &addr), counted, "blame vs counters for the pipe mutex:\n{text}");
    assert!(text.contains("[held by "), "waits charged to owner tasks: {text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One byte of a request that never ends, or a close seen: `true` once the
/// server has closed `s` (non-blocking reads: EOF or reset).
fn closed_by_server(mut s: &TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Junk number `i`: TLS and HTTP/2 openings, binary noise, broken HTTP,
/// an endless header line.
fn garbage(i: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ i as u64;
    let mut noise = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    match i % 6 {
        0 => b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        1 => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        2 => (0..1500).map(|_| noise()).collect(),
        3 => b"GET /metrics HTTP/1.1\r\nHost x\r\n\0\r\n\r\n".to_vec(),
        4 => b"\0\0\0\0\r\n\r\n".to_vec(),
        _ => format!("GET /metrics HTTP/1.1\r\nX-Long: {}", "a".repeat(64 * 1024)).into_bytes(),
    }
}

#[test]
fn slow_and_garbage_clients_do_not_keep_metrics_from_answering() {
    if !ready("slow_and_garbage_clients_do_not_keep_metrics_from_answering", &[]) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut d = Daemon::start(&[]);
    let open = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|_| {
                let s = TcpStream::connect(("127.0.0.1", d.port)).expect("connect");
                s.set_nonblocking(true).expect("non-blocking");
                s
            })
            .collect()
    };

    // Every hostile connection is open (queued in order before any probe)
    // before the first probe.
    let mut slow = open(200);
    for s in &mut slow {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n").expect("request line");
    }
    let mut junk = open(50);
    for (i, s) in junk.iter_mut().enumerate() {
        // The server may close before taking it all.
        let _ = s.write(&garbage(i));
    }

    // Probe /metrics while the slow clients trickle a header byte each per
    // round, until the server has dropped every one of them (its header
    // timeout), and keep count of what each probe took.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut probes, mut slowest) = (0, Duration::ZERO);
    loop {
        for s in &mut slow {
            let _ = s.write(b"X");
        }
        let slow_open = slow.iter().filter(|s| !closed_by_server(s)).count();
        let junk_open = junk.iter().filter(|s| !closed_by_server(s)).count();
        let t = Instant::now();
        let r = get(d.port, "/metrics");
        let took = t.elapsed();
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("lockprof_build_info{"), "{}", r.text());
        assert!(
            took < Duration::from_secs(1),
            "/metrics took {took:?} with {slow_open} slow, {junk_open} junk clients"
        );
        probes += 1;
        slowest = slowest.max(took);
        if slow_open == 0 && junk_open == 0 && probes >= 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 90 s, {slow_open} of 200 trickling clients and {junk_open} of 50 junk ones are still connected"
        );
        thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{probes} probes of /metrics, slowest {slowest:?}");

    // Shutdown does not wait on clients that never finish a request.
    let mut stuck = open(20);
    for s in &mut stuck {
        s.write_all(b"GET /metrics HTTP/1.1\r\n").expect("request line");
    }
    assert_eq!(get(d.port, "/healthz").status, 200);
    let (status, stderr) = d.stop();
    assert!(status.success(), "exit {status:?}: {stderr}");
    assert!(stderr.contains("programs detached"), "{stderr}");
}
