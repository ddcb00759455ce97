//! The comparison end to end on synthetic rounds: matching, statuses, the
//! test and its correction, every format; and the procedure's false-positive
//! rate on simulated rounds of one workload.

use profiler_common::{LockMode, LockType};

use super::*;
use crate::model::{
    CallerProfile, CommandRun, DETAIL_SIGFIG, LOCK_SIGFIG, LockProfile, Meta, NameSource, Profile, Stats,
};

/// A lock row: `count` waits of `wait_ns` each, from `callers` (function, share of waits).
fn lock(
    name: &str,
    t: LockType,
    m: LockMode,
    addr: u64,
    count: u64,
    wait_ns: u64,
    callers: &[(&str, u64)],
) -> LockProfile {
    let mut wait = Stats::new(LOCK_SIGFIG);
    wait.record_n(wait_ns, count);
    let total: u64 = callers.iter().map(|c| c.1).sum();
    let callers: Vec<CallerProfile> = callers
        .iter()
        .map(|(f, share)| {
            let mut s = Stats::new(DETAIL_SIGFIG);
            s.record_n(wait_ns, count * share / total.max(1));
            CallerProfile {
                caller: format!("{f}+0x{:x}", addr & 0xfff),
                stack: vec![format!("{f}+0x10")].into(),
                wait: s,
                hold: None,
                user_caller: None,
                cgroups: Vec::new(),
                user: None,
            }
        })
        .collect();
    LockProfile {
        addr,
        lock_type: t,
        mode: m,
        pid: None,
        process: None,
        name: Some(name.to_string()),
        name_source: Some(NameSource::Kallsyms),
        class: format!("rwlock @ {}", callers.first().map_or("x", |c| c.caller.as_str())),
        slab: None,
        field: None,
        addresses: None,
        processes: None,
        rt_base: None,
        wait,
        hold: None,
        callers: callers.into(),
        owners: Vec::new(),
    }
}

fn round(kernel: &str, secs: f64, locks: Vec<LockProfile>) -> Profile {
    Profile {
        meta: Meta {
            backend: "tp_btf".into(),
            mode: "aggregate".into(),
            kernel: kernel.into(),
            hostname: "vm".into(),
            duration_s: secs,
            ..Meta::default()
        },
        locks,
        ..Profile::default()
    }
}

const W: LockMode = LockMode::Write;
const R: LockMode = LockMode::Read;
const X: LockMode = LockMode::Exclusive;

/// Before: a fork + pipe storm (tasklist_lock both sides, the pipe mutex);
/// after: the pipe storm alone. Addresses differ per round (other boots).
fn storm(tasklist: &[u64], pipe: &[u64], kernel: &str) -> Vec<(String, Profile)> {
    pipe.iter()
        .enumerate()
        .map(|(i, &p)| {
            let a = (i as u64) << 20;
            let mut locks = vec![lock(
                "mutex @ anon_pipe_write",
                LockType::Mutex,
                X,
                0xffff_8880_0000_0000 + a,
                p,
                600,
                &[("anon_pipe_write", 1)],
            )];
            if let Some(&t) = tasklist.get(i) {
                locks.push(lock(
                    "tasklist_lock",
                    LockType::Rwlock,
                    W,
                    0xffff_ffff_8300_8080,
                    t,
                    2_300,
                    &[("copy_process", 3), ("release_task", 1)],
                ));
                locks.push(lock(
                    "tasklist_lock",
                    LockType::Rwlock,
                    R,
                    0xffff_ffff_8300_8080,
                    t / 4,
                    2_000,
                    &[("__do_wait", 1)],
                ));
            }
            (format!("r{}.lockprof", i + 1), round(kernel, 2.0, locks))
        })
        .collect()
}

fn diff(before: &[(String, Profile)], after: &[(String, Profile)], o: &DiffOptions) -> Diff {
    let (b, a) = sides(before, after, &SideOptions { by: o.by, lock: None });
    compare(&b, &a, o)
}

fn row<'d>(d: &'d Diff, lock: &str, mode: &str) -> &'d DiffRow {
    d.rows.iter().find(|r| r.key.lock == lock && r.key.mode == mode).unwrap_or_else(|| panic!("no {lock} {mode}"))
}

#[test]
fn a_lock_gone_after_the_change_is_gone_and_significant() {
    let before = storm(&[16_000, 16_900, 15_400, 16_300], &[300_000, 310_000, 295_000, 305_000], "6.18.44");
    let after = storm(&[], &[302_000, 298_000, 307_000, 301_000], "6.18.44");
    let d = diff(&before, &after, &DiffOptions::default());
    let tl = row(&d, "tasklist_lock", "write");
    assert_eq!(tl.status, Status::Gone);
    assert_eq!(tl.verdict, Verdict::Better, "{tl:?}");
    assert!(tl.p_holm.is_some_and(|p| p < 0.01), "{tl:?}");
    assert_eq!(tl.change.contended_per_s, Some(-100.0));
    assert_eq!(tl.change.wait_avg_ns, None, "no mean wait after: no change");
    let pipe = row(&d, "mutex @ anon_pipe_write", "exclusive");
    assert_eq!((pipe.status, pipe.verdict), (Status::Both, Verdict::WithinNoise), "{pipe:?}");
    assert_eq!(d.tested, 3, "every row busy enough is tested");
    assert!(d.rows[0].verdict.significant(), "significant rows first");
    assert!(!d.kernels_differ());
    // The other way round, the lock is new and worse.
    let d = diff(&after, &before, &DiffOptions::default());
    let tl = row(&d, "tasklist_lock", "write");
    assert_eq!((tl.status, tl.verdict), (Status::New, Verdict::Worse));
    assert_eq!(tl.change.contended_per_s, None, "from nothing: no percentage");
}

#[test]
fn one_round_per_side_has_changes_but_no_p_values() {
    let before = storm(&[16_000], &[300_000], "6.18.44");
    let after = storm(&[8_000], &[150_000], "6.19.0");
    let d = diff(&before, &after, &DiffOptions::default());
    assert!(d.rows.iter().all(|r| r.p_value.is_none() && r.verdict == Verdict::OneRound));
    let tl = row(&d, "tasklist_lock", "write");
    assert_eq!(tl.change.contended_per_s, Some(-50.0));
    assert!(d.kernels_differ());
    assert_eq!(d.tested, 0);
    let text = render(&d, DiffFormat::Text, ',');
    assert!(text.contains("kernels differ: 6.18.44 -> 6.19.0"), "{text}");
    assert!(text.contains("no p-values"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&render(&d, DiffFormat::Json, ',')).expect("json");
    assert_eq!(v["kernels_differ"], true);
    let l = v["locks"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "tasklist_lock" && l["mode"] == "write"))
        .expect("row");
    assert!(l["p_value"].is_null());
    assert_eq!(l["change_pct"], -50.0);
    assert_eq!(l["before"]["contended_per_s"], 8_000.0);
    assert_eq!(l["after"]["contended_per_s"], 4_000.0);
    assert_eq!(l["type"], "rwlock");
}

#[test]
fn rows_with_few_contentions_or_no_spread_are_not_tested() {
    let quiet = |n: u64| {
        (
            format!("q{n}"),
            round("k", 1.0, vec![lock("pidmap_lock", LockType::Spinlock, X, 1, n, 500, &[("alloc_pid", 1)])]),
        )
    };
    let d = diff(&[quiet(3), quiet(5)], &[quiet(4), quiet(2)], &DiffOptions::default());
    assert_eq!(d.rows[0].verdict, Verdict::TooFew);
    let d = diff(&[quiet(300), quiet(300)], &[quiet(500), quiet(500)], &DiffOptions::default());
    assert_eq!(d.rows[0].verdict, Verdict::NoSpread, "identical rounds: nothing to judge against");
    assert_eq!(d.tested, 0);
}

#[test]
fn by_caller_matches_callers_by_function_and_tests_them() {
    let before = storm(&[16_000, 16_900, 15_400], &[300_000, 310_000, 295_000], "k");
    let after = storm(&[], &[302_000, 298_000, 307_000], "k");
    let o = DiffOptions { by: DiffBy::Caller, ..DiffOptions::default() };
    let d = diff(&before, &after, &o);
    let callers: Vec<(&str, Option<&str>)> =
        d.rows.iter().map(|r| (r.key.lock.as_str(), r.key.caller.as_deref())).collect();
    assert!(callers.contains(&("tasklist_lock", Some("copy_process"))), "{callers:?}");
    assert!(
        callers.contains(&("mutex @ anon_pipe_write", Some("anon_pipe_write"))),
        "offsets differ per round, functions match: {callers:?}"
    );
    assert_eq!(d.rows.len(), 4);
    assert_eq!(d.tested, 4);
    let text = render(&d, DiffFormat::Text, ',');
    assert!(text.contains("tasklist_lock <- copy_process"), "{text}");
    assert!(text.contains("over the 4 callers"), "{text}");
}

#[test]
fn every_format_renders_the_same_rows() {
    let mut before = storm(&[16_000, 16_900, 15_400], &[300_000, 310_000, 295_000], "6.18.44");
    let after = storm(&[], &[302_000, 298_000, 307_000], "6.18.44");
    for (_, p) in &mut before {
        p.meta.command = Some(CommandRun {
            argv: vec!["lockprof".into(), "stress".into(), "fork".into()],
            status: "exit 0".into(),
            ..CommandRun::default()
        });
    }
    let d = diff(&before, &after, &DiffOptions::default());
    let text = render(&d, DiffFormat::Text, ',');
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("lockprof diff: before: 3 rounds of 2.00 s -> after: 3 rounds of 2.00 s"), "{text}");
    assert!(text.contains("kernel 6.18.44 on both sides"), "{text}");
    assert!(text.contains("before: `lockprof stress fork` [r1.lockprof .. r3.lockprof (3 files)]"), "{text}");
    assert!(text.contains("Welch's t-test (two-sided) on the log of contentions/s per round"), "{text}");
    assert!(text.contains("note: with 3 rounds on a side"), "{text}");
    let table = lines.iter().position(|l| l.trim_start().starts_with("contentions/s")).expect("table header");
    assert!(lines[table].ends_with("lock"), "{}", lines[table]);
    let tl = lines.iter().find(|l| l.ends_with("tasklist_lock") && l.contains("rwlock:W")).expect("row");
    assert!(tl.contains("8.05k -> 0") && tl.contains("gone") && tl.contains("better"), "{tl}");
    assert_eq!(lines[table + 1..].len(), 3);

    let md = render(&d, DiffFormat::Markdown, ',');
    assert!(md.starts_with("**lockprof diff**: before: 3 rounds"), "{md}");
    assert!(md.contains("| lock | type | contentions/s | change |"), "{md}");
    assert!(md.contains("| tasklist_lock | rwlock:W | 8.05k → 0 | gone |"), "{md}");
    assert!(md.contains("**better**"), "{md}");
    let pipes = md.lines().filter(|l| l.starts_with('|')).count();
    assert_eq!(pipes, 2 + 3, "header, alignment and a row per lock");

    let csv = render(&d, DiffFormat::Csv, ',');
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let head = r.headers().expect("header").clone();
    assert_eq!(head.len(), 26);
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
    assert_eq!(rows.len(), 3);
    let gone = rows.iter().find(|x| &x[0] == "tasklist_lock" && &x[2] == "write").expect("row");
    assert_eq!((&gone[4], &gone[8], &gone[9], &gone[25]), ("gone", "0", "-100", "better"));
    assert!(gone[23].parse::<f64>().is_ok_and(|p| p < 0.01), "{gone:?}");

    let v: serde_json::Value = serde_json::from_str(&render(&d, DiffFormat::Json, ',')).expect("json");
    assert_eq!(v["schema"], "lockprof-diff/1");
    assert_eq!(v["test"]["name"], "welch_t");
    assert_eq!(v["test"]["correction"], "holm");
    assert_eq!(v["before"]["commands"][0], "lockprof stress fork");
    for l in v["locks"].as_array().expect("locks") {
        for k in ["name", "type", "mode", "status", "before", "after", "change_pct", "p_value", "p_holm", "verdict"] {
            assert!(l.get(k).is_some(), "{k} missing: {l}");
        }
    }
    let gone = v["locks"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["status"] == "gone" && l["mode"] == "write"))
        .expect("gone");
    assert_eq!(
        (gone["after"]["contended_per_s"].as_f64(), gone["after"]["rounds_seen"].as_u64()),
        (Some(0.0), Some(0))
    );
    assert!(gone["after"]["wait_avg_ns"].is_null(), "no wait after: no mean");
    assert_eq!(gone["before"]["contended_per_s_rounds"].as_array().map(Vec::len), Some(3));
    assert_eq!(gone["significant"], true);
}

#[test]
fn setups_that_differ_are_said() {
    let before = storm(&[1_000, 1_100], &[300_000, 310_000], "6.18.44");
    let mut after = storm(&[1_000, 1_100], &[300_000, 310_000], "6.19.1");
    after[0].1.meta.backend = "tracepoint".into();
    after[1].1.meta.drops.losses.ringbuf_full = 7;
    after[1].1.meta.command = Some(CommandRun { status: "exit 3".into(), ..CommandRun::default() });
    let d = diff(&before, &after, &DiffOptions::default());
    let notes = d.notes.join("\n");
    assert!(
        notes.contains("the after rounds were measured differently: tracepoint aggregate; tp_btf aggregate"),
        "{notes}"
    );
    assert!(notes.contains("after round 2 lost events (ringbuf_full=7)"), "{notes}");
    assert!(notes.contains("after round 2: the command ended with exit 3"), "{notes}");
    assert!(d.kernels_differ());
}

#[test]
fn the_spread_of_rounds_says_how_much_one_round_is_worth() {
    let rounds = storm(&[10_000, 12_000, 8_000], &[300_000, 300_000, 300_000], "k");
    let side = Side::new(&rounds, &SideOptions::default());
    let r = Rounds::of(&side, None);
    let tl = r.rows.iter().find(|x| x.key.lock == "tasklist_lock" && x.key.mode == "write").expect("row");
    assert_eq!(tl.contended_per_s.mean, 5_000.0);
    assert_eq!((tl.contended_per_s.min, tl.contended_per_s.max), (4_000.0, 6_000.0));
    assert!(tl.contended_per_s.cv_pct().is_some_and(|cv| (cv - 20.0).abs() < 1e-9));
    let text = render_rounds(&r, DiffFormat::Text, ',');
    assert!(text.starts_with("lockprof: 3 rounds of 2.00 s (kernel k, tp_btf aggregate)"), "{text}");
    assert!(
        text.lines().any(|l| l.contains("5.00k")
            && l.contains("20.0%")
            && l.contains("4.00k-6.00k")
            && l.ends_with("tasklist_lock")),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&render_rounds(&r, DiffFormat::Json, ',')).expect("json");
    assert_eq!(v["schema"], "lockprof-rounds/1");
    assert_eq!(v["locks"][0]["contended_per_s"]["rounds"].as_array().map(Vec::len), Some(3));
    let csv = render_rounds(&r, DiffFormat::Csv, ';');
    assert!(csv.starts_with("lock;type;mode;rounds;"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 3);
}

/// xorshift64*: a fixed-seed generator, so the simulation is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.next().max(1e-300), self.next());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Rounds of one workload on both sides: 30 locks whose per-round counts
/// vary by 4% to 120% (the spreads BENCHMARKS.md measured), 3 rounds a side,
/// 2000 comparisons. Holm keeps the chance that a comparison flags any lock
/// at most alpha (1%), 20 of 2000 (it flags 4: Holm is conservative);
/// one lock at a time at p < 0.01, uncorrected, flags one comparison in seven.
#[test]
fn rounds_of_one_workload_rarely_flag_anything() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let locks: Vec<(String, f64, f64)> = (0..30)
        .map(|i| (format!("lock{i}"), 200.0 * (1.0 + f64::from(i)), 0.04 + 1.16 * f64::from(i) / 29.0))
        .collect();
    let rounds = |rng: &mut Rng| -> Vec<(String, Profile)> {
        (0..3)
            .map(|r| {
                let ls = locks
                    .iter()
                    .enumerate()
                    .map(|(i, (name, mean, cv))| {
                        // Log-normal: positive and skewed like real counts.
                        let n = (mean * (cv * rng.normal() - cv * cv / 2.0).exp()).round() as u64;
                        lock(name, LockType::Spinlock, X, i as u64, n.max(1), 1_000, &[("f", 1)])
                    })
                    .collect();
                (format!("r{r}"), round("k", 1.0, ls))
            })
            .collect()
    };
    let (mut flagged, mut raw) = (0, 0);
    for _ in 0..2000 {
        let (b, a) = (rounds(&mut rng), rounds(&mut rng));
        let d = diff(&b, &a, &DiffOptions::default());
        flagged += usize::from(d.rows.iter().any(|r| r.verdict.significant()));
        raw += usize::from(d.rows.iter().any(|r| r.p_value.is_some_and(|p| p < 0.01)));
    }
    assert!(flagged <= 20, "{flagged} of 2000 comparisons of one workload flagged a lock");
    assert!(raw > 150, "uncorrected, many more would be: {raw}");
}

#[test]
fn a_lock_filter_keeps_the_rounds_where_the_lock_had_another_class() {
    // An unnamed pipe mutex whose top caller flips: its own class is
    // `mutex @ anon_pipe_read` in the first round, `... anon_pipe_write` after.
    let pipe = |top: &str, read: u64, write: u64| {
        let mut l = lock(
            "-",
            LockType::Mutex,
            X,
            0xffff_8880_0000_1000,
            read + write,
            600,
            &[("anon_pipe_write", write), ("anon_pipe_read", read)],
        );
        (l.name, l.name_source, l.class) = (None, None, format!("mutex @ {top}"));
        l
    };
    let rounds: Vec<(String, Profile)> =
        [("anon_pipe_read", 600, 500), ("anon_pipe_write", 400, 700), ("anon_pipe_write", 300, 800)]
            .iter()
            .enumerate()
            .map(|(i, &(top, r, w))| (format!("r{}.lockprof", i + 1), round("6.18", 2.0, vec![pipe(top, r, w)])))
            .collect();
    let o = SideOptions { by: DiffBy::Lock, lock: Some("mutex @ anon_pipe_write".into()) };
    let (side, _) = sides(&rounds, &rounds, &o);
    let [(key, row)] = side.rows.iter().collect::<Vec<_>>()[..] else {
        panic!("one row: {:?}", side.rows.keys().collect::<Vec<_>>());
    };
    assert_eq!(key.lock, "mutex @ anon_pipe_write");
    let counts: Vec<u64> = row.cells.iter().map(|c| c.as_ref().map_or(0, |c| c.wait.count())).collect();
    assert_eq!(counts, [1100, 1100, 1100], "no round dropped by its own class");
}
