//! Helpers shared by the serve tests, and tests of the small types.

use profiler_common::{LockMode, LockType};

use super::*;
use crate::model::{CallerProfile, DETAIL_SIGFIG, LOCK_SIGFIG, LockProfile, Stats};

/// Callers of a test lock: (stack leaf, waits of that caller).
pub(crate) type TestCallers<'a> = &'a [(&'a str, &'a [u64])];

/// A profile of `locks`: (addr, callers).
pub(crate) fn profile(locks: &[(u64, TestCallers<'_>)]) -> Profile {
    let mut p = Profile::default();
    p.meta.backend = "tp_btf".into();
    p.meta.mode = "aggregate".into();
    for (addr, callers) in locks {
        let mut wait = Stats::new(LOCK_SIGFIG);
        let mut cs = Vec::new();
        for (leaf, waits) in callers.iter() {
            let mut s = Stats::new(DETAIL_SIGFIG);
            for w in waits.iter() {
                s.record(*w);
                wait.record(*w);
            }
            cs.push(CallerProfile {
                caller: format!("{leaf}+0x10"),
                stack: vec!["__mutex_lock+0x1".to_string(), format!("{leaf}+0x10")].into(),
                wait: s,
                hold: None,
                cgroups: Vec::new(),
                user_caller: None,
                user: None,
            });
        }
        p.meta.events += wait.count();
        p.locks.push(LockProfile {
            addr: *addr,
            lock_type: LockType::Mutex,
            mode: LockMode::Exclusive,
            pid: None,
            process: None,
            name: None,
            name_source: None,
            class: format!("mutex @ lock{addr:x}"),
            rt_base: None,
            slab: None,
            field: None,
            addresses: None,
            processes: None,
            wait,
            hold: None,
            callers: cs.into(),
            owners: Vec::new(),
        });
    }
    p
}

#[test]
fn metrics_parse_and_give_one_value_per_sample_type() {
    assert_eq!(ProfileMetric::parse("wait"), Ok(ProfileMetric::Wait));
    assert_eq!(ProfileMetric::parse("count"), Ok(ProfileMetric::Count));
    assert_eq!(ProfileMetric::parse("blame"), Ok(ProfileMetric::Blame));
    assert!(ProfileMetric::parse("Wait").is_err_and(|e| e.to_string().contains("wait, hold, count or blame")));
    assert!(ProfileMetric::parse("yield").is_err(), "yield_to latency is not served");
    let v = Values { count: 3, wait_ns: 30, hold_count: 1, hold_ns: 7, blame_count: 2, blame_ns: 20 };
    assert_eq!(ProfileMetric::Wait.values(&v), [3, 30]);
    assert_eq!(ProfileMetric::Hold.values(&v), [1, 7]);
    assert_eq!(ProfileMetric::Count.values(&v), [3]);
    assert_eq!(ProfileMetric::Blame.values(&v), [2, 20]);
    for m in ProfileMetric::ALL {
        assert_eq!(m.sample_types().types.len(), m.values(&v).len());
    }
    let p = profile(&[]);
    assert!(ProfileMetric::Hold.unavailable(&p).is_some_and(|w| w.starts_with("hold times are not measured")));
    assert_eq!(ProfileMetric::Wait.unavailable(&p), None);
    assert!(ProfileMetric::Yield.unavailable(&p).is_some());
}

#[test]
fn values_grow_or_restart() {
    let a = Values { count: 5, wait_ns: 50, ..Values::default() };
    let b = Values { count: 8, wait_ns: 90, ..Values::default() };
    assert_eq!(b.since(&a), Values { count: 3, wait_ns: 40, ..Values::default() });
    assert_eq!(a.since(&b), a, "a row that shrank was created again: all of it is new");
    assert!(a.since(&a).is_zero());
}

#[test]
fn served_wait_profiles_split_callers_by_cgroup() {
    use std::io::Read as _;

    use prost::Message as _;

    use crate::{export::proto, report::fixture, serve::http::ProfileQuery};
    let opts = ServeOptions {
        listen: ([127, 0, 0, 1], 0).into(),
        window: std::time::Duration::from_secs(60),
        max_series: 10,
        max_cgroups: 10,
        max_window_entries: 1000,
    };
    let mut state = State::new(&opts);
    let p = fixture::profile_with_cgroups();
    state.update(Arc::new(p.clone()), std::time::Instant::now());
    let decode = |gz: Vec<u8>| {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut raw).expect("gunzip");
        proto::Profile::decode(raw.as_slice()).expect("decode")
    };
    let d = decode(http::render(&state, &ProfileQuery { seconds: None, metric: ProfileMetric::Wait }).expect("render"));
    let st = |i: i64| d.string_table[i as usize].clone();
    let mut labels: Vec<(String, i64)> = d
        .sample
        .iter()
        .filter_map(|s| s.label.iter().find(|l| st(l.key) == "cgroup").map(|l| (st(l.str), s.value[1])))
        .collect();
    labels.sort();
    let want =
        [("cron.service", 4_000), ("cron.service", 96_000), ("docker:3f2a9c1b7d4e", 2_700), ("nginx.service", 500)];
    assert_eq!(labels, want.map(|(c, w)| (c.to_string(), w)), "one sample per (caller, cgroup)");
    let total: i64 = d.sample.iter().map(|s| s.value[1]).sum();
    assert_eq!(total as u64, p.locks.iter().map(|l| l.wait.total_ns()).sum::<u64>());
}
