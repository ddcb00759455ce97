use std::time::Duration;

use profiler_common::{LockMode, LockType};

use super::*;
use crate::model::{LOCK_SIGFIG, LockProfile, Stats};

fn parse(s: &str) -> Trigger {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn error(s: &str) -> String {
    match s.parse::<Trigger>() {
        Ok(t) => panic!("{s:?} parsed as {t:?}"),
        Err(e) => e.to_string(),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn lock(name: &str) -> Filter {
    Filter { lock: Some(name.into()), ..Filter::default() }
}

#[test]
fn the_issue_examples_parse_to_their_conditions() {
    let cases = [
        ("wait>=10ms", Filter::default(), Condition::Wait { min_ns: 10_000_000 }),
        (
            "p99(tasklist_lock)>=1ms/5s",
            lock("tasklist_lock"),
            Condition::Quantile { q: 0.99, min_ns: 1_000_000, over: secs(5) },
        ),
        ("p99()>=1ms/5s", Filter::default(), Condition::Quantile { q: 0.99, min_ns: 1_000_000, over: secs(5) }),
        ("p99>=1ms/5s", Filter::default(), Condition::Quantile { q: 0.99, min_ns: 1_000_000, over: secs(5) }),
        ("p99.9>=20ms/10s", Filter::default(), Condition::Quantile { q: 0.999, min_ns: 20_000_000, over: secs(10) }),
        ("p50>=250us/1s", Filter::default(), Condition::Quantile { q: 0.5, min_ns: 250_000, over: secs(1) }),
        ("contentions(rq_lock)>=100k/s", lock("rq_lock"), Condition::Rate { min_per_s: 100_000.0, over: secs(1) }),
        ("contentions()>=500/5s", Filter::default(), Condition::Rate { min_per_s: 100.0, over: secs(5) }),
        ("contentions>=1.5M/s", Filter::default(), Condition::Rate { min_per_s: 1_500_000.0, over: secs(1) }),
        ("lock=mmap_lock,wait>=5ms", lock("mmap_lock"), Condition::Wait { min_ns: 5_000_000 }),
        ("lock=&task_struct, wait >= 1.5ms", lock("&task_struct"), Condition::Wait { min_ns: 1_500_000 }),
        ("lock=0xffff888100a0b0c0,wait>=2s", lock("0xffff888100a0b0c0"), Condition::Wait { min_ns: 2_000_000_000 }),
        (
            "  type=futex , process=myapp, p99.9(task_struct.pi_lock) >= 20ms / 10s ",
            Filter {
                lock: Some("task_struct.pi_lock".into()),
                lock_type: Some(LockType::Futex),
                process: Some("myapp".into()),
                ..Filter::default()
            },
            Condition::Quantile { q: 0.999, min_ns: 20_000_000, over: secs(10) },
        ),
        (
            "cgroup=system.slice/nginx.service,type=rwsem,contentions>=10k/s",
            Filter {
                lock_type: Some(LockType::Rwsem),
                cgroup: Some("system.slice/nginx.service".into()),
                ..Filter::default()
            },
            Condition::Rate { min_per_s: 10_000.0, over: secs(1) },
        ),
        (
            "process=4242,wait>=100us",
            Filter { process: Some("4242".into()), ..Filter::default() },
            Condition::Wait { min_ns: 100_000 },
        ),
    ];
    for (text, filter, condition) in cases {
        let t = parse(text);
        assert_eq!(t.text, text.trim(), "{text}");
        assert_eq!(t.filter, filter, "{text}");
        assert_eq!(t.condition, condition, "{text}");
    }
}

#[test]
fn display_is_canonical_and_parses_back_to_the_same_trigger() {
    for (text, canonical) in [
        ("wait>=10ms", "wait>=10ms"),
        ("wait>=1500us", "wait>=1500us"),
        ("wait>=0.0015s", "wait>=1500us"),
        ("wait>=1000ms", "wait>=1s"),
        ("wait >= 7ns", "wait>=7ns"),
        ("p99()>=1ms/5s", "p99>=1ms/5s"),
        ("lock=tasklist_lock,p99>=1ms/5000ms", "p99(tasklist_lock)>=1ms/5s"),
        ("p99.90>=1ms/5s", "p99.9>=1ms/5s"),
        ("p05>=1ms/5s", "p5>=1ms/5s"),
        ("p99.99(x)>=1ms/60s", "p99.99(x)>=1ms/60s"),
        ("contentions(rq_lock)>=100000/1s", "contentions(rq_lock)>=100k/s"),
        ("contentions>=500/5s", "contentions>=500/5s"),
        ("contentions>=100k/3s", "contentions>=100k/3s"),
        ("contentions>=1.1k/7s", "contentions>=1100/7s"),
        ("contentions>=2G/s", "contentions>=2G/s"),
        ("contentions>=0.5/s", "contentions>=0.5/s"),
        ("wait>=5ms,lock=mmap_lock", "lock=mmap_lock,wait>=5ms"),
        ("process=myapp,type=futex_pi,p90(big)>=2ms/2s", "type=futex-pi,process=myapp,p90(big)>=2ms/2s"),
        ("cgroup=docker:3f2a9c1b7d4e,wait>=3ms,type=spinlock_t", "type=spinlock,cgroup=docker:3f2a9c1b7d4e,wait>=3ms"),
        ("process=(sd-pam),wait>=1ms", "process=(sd-pam),wait>=1ms"),
    ] {
        let t = parse(text);
        assert_eq!(t.to_string(), canonical, "{text}");
        let back = parse(&t.to_string());
        assert_eq!((&back.filter, &back.condition), (&t.filter, &t.condition), "{text}");
        assert_eq!(back.to_string(), canonical, "{text}: canonical text is a fixed point");
    }
}

#[test]
fn slugs_are_short_and_filename_safe() {
    for (text, slug) in [
        ("wait>=10ms", "wait-ge-10ms"),
        ("p99(tasklist_lock)>=1ms/5s", "p99-tasklist_lock-ge-1ms-5s"),
        ("contentions(rq_lock)>=100k/s", "contentions-rq_lock-ge-100k-per-s"),
        ("lock=mmap_lock,wait>=5ms", "lock-mmap_lock-wait-ge-5ms"),
        ("contentions>=500/5s", "contentions-ge-500-per-5s"),
        ("p99.9>=20ms/10s", "p99.9-ge-20ms-10s"),
        ("lock=&task_struct,type=mutex,wait>=1ms", "lock-_task_struct-type-mutex-wait-ge-1ms"),
        ("cgroup=system.slice/nginx.service,wait>=1ms", "cgroup-system.slice_nginx.service-wait-ge-1ms"),
        ("lock=mutex @ anon_pipe_write,wait>=1ms", "lock-mutex_anon_pipe_write-wait-ge-1ms"),
    ] {
        assert_eq!(parse(text).slug(), slug, "{text}");
    }
    let long = parse(&format!(
        "lock={},cgroup={},process={},type=rwsem,wait>=1500us",
        "a".repeat(100),
        "/x/y".repeat(30),
        "p".repeat(40)
    ));
    let slug = long.slug();
    assert!(slug.len() <= 64, "{slug}");
    assert!(slug.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')), "{slug}");
    assert!(slug.starts_with("lock-aaaa") && slug.ends_with("-wait-ge-1500us"), "{slug}: the condition is kept whole");
    let long_lock = parse(&format!("contentions({})>=1.5k/60s", "l".repeat(80))).slug();
    assert_eq!(long_lock, format!("contentions-{}-ge-1500-per-60s", "l".repeat(32)));
}

#[test]
fn history_is_the_window_the_condition_reads() {
    assert_eq!(parse("wait>=10ms").history(), secs(1));
    assert_eq!(parse("p99>=1ms/30s").history(), secs(30));
    assert_eq!(parse("contentions>=1k/s").history(), secs(1));
    assert_eq!(parse("contentions>=5k/5s").history(), secs(5));
}

#[test]
fn each_mistake_gets_one_line_saying_what_is_expected() {
    for (text, says) in [
        ("", "empty trigger"),
        ("   ", "empty trigger"),
        ("wait>=10", "needs a unit: ns, us, ms or s"),
        ("p99>=1/5s", "needs a unit: ns, us, ms or s"),
        ("wait>=10m", "unknown unit \"m\""),
        ("wait>=", "expected a duration"),
        ("wait>=0ms", "more than zero"),
        ("wait>=-1ms", "not a duration"),
        ("wait>=1.5ns", "finer than a nanosecond"),
        ("wait>=99999999999999999999s", "too long"),
        ("wait>10ms", "operator \">\" after wait: expected >="),
        ("wait<=10ms", "operator \"<=\" after wait: expected >="),
        ("wait=10ms", "expected >="),
        ("wait 10ms", "expected >= after wait"),
        ("contentions(x)>100/s", "expected >="),
        ("lock>=x,wait>=1ms", "operator \">=\" after lock: expected ="),
        ("lock=,wait>=1ms", "lock= needs a value"),
        ("frobs>=3,wait>=1ms", "unknown term \"frobs>=3\": known terms are lock=, type="),
        ("p99(x)>=1ms/5s,wait>=1ms", "one condition"),
        ("lock=a,lock=b,wait>=1ms", "the lock is given twice"),
        ("p99(a)>=1ms/5s,lock=b", "the lock is given twice"),
        ("cgroup=a,cgroup=b,wait>=1ms", "cgroup= is given twice"),
        ("p99(a\nb)>=1ms/5s,lock=b", "the lock is given twice"),
        ("contentions>=1\n0", "needs a rate"),
        ("p99>=1\nms", "needs a window"),
        ("type=mutex,type=rwsem,wait>=1ms", "type= is given twice"),
        ("type=semaphore,wait>=1ms", "unknown lock type; known types: unknown, spinlock"),
        ("lock=x", "has no condition"),
        ("lock=x,p99(y)>=1ms/5s", "the lock is given twice"),
        ("wait(x)>=1ms", "add a lock=NAME term"),
        ("p99(x>=1ms/5s", "closing parenthesis"),
        ("p99>=1ms", "needs a window"),
        ("p99>=1ms/1.5s", "whole seconds from 1s to 3600s"),
        ("p99>=1ms/2h", "unknown unit \"h\""),
        ("p99>=1ms/3601s", "whole seconds from 1s to 3600s"),
        ("p100>=1ms/5s", "above 0 and below 100"),
        ("p0>=1ms/5s", "above 0 and below 100"),
        ("p99.>=1ms/5s", "above 0 and below 100"),
        ("contentions>=100k", "needs a rate"),
        ("contentions>=100K/s", "unknown suffix \"K\": expected k, M or G"),
        ("contentions>=0/s", "more than zero"),
        ("contentions>=many/s", "not a number"),
        ("contentions>=10/0s", "more than zero"),
        ("wait>=1ms,,lock=x", "empty term"),
        ("wait>=1ms,", "empty term"),
        ("cgroup=a.service,p99>=1ms/5s", "percentiles are per lock; a cgroup filter works with wait>= and contentions"),
        ("wait>=1ms,process=a\nb,lock=\n", "lock= needs a value"),
        ("wait>=1ms,fr\nobs", "unknown term \"fr\\nobs\""),
    ] {
        let e = error(text);
        assert!(e.contains(says), "{text:?}: {e:?} does not say {says:?}");
        assert!(!e.contains('\n'), "{text:?}: {e:?} is more than one line");
    }
}

fn profile(name: &str, lock_type: LockType, process: Option<(u32, &str)>) -> LockProfile {
    LockProfile {
        addr: 0xffff_8881_0000_1000,
        lock_type,
        mode: LockMode::Exclusive,
        pid: process.map(|p| p.0),
        process: process.map(|p| p.1.to_string()),
        name: Some(name.into()),
        name_source: None,
        class: format!("mutex @ {name}_user"),
        slab: Some("task_struct".into()),
        field: Some("task_struct.pi_lock".into()),
        addresses: None,
        processes: None,
        rt_base: None,
        wait: Stats::new(LOCK_SIGFIG),
        hold: None,
        callers: Vec::new().into(),
        owners: Vec::new(),
    }
}

#[test]
fn the_filter_keeps_the_locks_its_terms_name() {
    let kernel = profile("tasklist_lock", LockType::Rwlock, None);
    let user = profile("big_lock", LockType::Futex, Some((4242, "myapp")));
    let f = |text: &str| parse(text).filter;
    assert!(f("wait>=1ms").is_empty() && f("wait>=1ms").lock_ok(&kernel) && f("wait>=1ms").lock_ok(&user));
    assert!(!f("type=mutex,wait>=1ms").is_empty());
    for (text, kernel_ok, user_ok) in [
        ("p99(tasklist_lock)>=1ms/5s", true, false),
        ("lock=&task_struct,wait>=1ms", true, true),
        ("lock=task_struct.pi_lock,wait>=1ms", true, true),
        ("lock=0xffff888100001000,wait>=1ms", true, true),
        ("lock=0xffff888100001001,wait>=1ms", false, false),
        ("type=rwlock,wait>=1ms", true, false),
        ("type=futex,contentions>=1/s", false, true),
        ("process=myapp,contentions>=1/s", false, true),
        ("process=4242,contentions>=1/s", false, true),
        ("process=4243,contentions>=1/s", false, false),
        ("process=other,contentions>=1/s", false, false),
        ("cgroup=a.service,contentions>=1/s", true, true),
        ("type=futex,process=myapp,p99(big_lock)>=1ms/5s", false, true),
        ("type=rwlock,process=myapp,p99(big_lock)>=1ms/5s", false, false),
    ] {
        assert_eq!(f(text).lock_ok(&kernel), kernel_ok, "{text}: kernel lock");
        assert_eq!(f(text).lock_ok(&user), user_ok, "{text}: user-space lock");
    }
    let by_name = f("process=myapp,wait>=1ms");
    assert!(
        by_name.process_ok(7, Some("myapp")) && !by_name.process_ok(7, Some("other")) && !by_name.process_ok(7, None)
    );
    let by_pid = f("process=7,wait>=1ms");
    assert!(by_pid.process_ok(7, None) && !by_pid.process_ok(8, Some("7x")));
    assert!(Filter::default().process_ok(1, None), "no process term keeps every process");
}
