//! The engine on synthetic snapshots, one per second of a made-up clock.

use std::{collections::HashMap, path::PathBuf};

use profiler_common::{ContentionEvent, EVENT_CONTENTION, StackId, USER_STACK_OFF, lcb, owner};

use super::*;
use crate::{
    model::Meta,
    pipeline::{Aggregator, Limits, ProfileBuilder},
    symbols::{Kallsyms, Resolver},
};

/// Builds windows with no stacks and no names (classes only).
struct Plain(ProfileBuilder<HashMap<StackId, Vec<u64>>>);

impl WindowBuilder for Plain {
    fn window(&mut self, snap: &Snapshot) -> Profile {
        self.0.build_window(snap, Meta::default())
    }
}

fn plain() -> Plain {
    Plain(ProfileBuilder::new(Resolver::new(Arc::new(Kallsyms::default()), HashMap::new())))
}

const SEC: u64 = 1_000_000_000;
const UNIX0_MS: u64 = 1_796_166_902_000;

fn wait(addr: u64, ns: u64, tid: u32, end_s: u64) -> ContentionEvent {
    let mut comm = [0u8; 16];
    let name = format!("task{tid}");
    comm[..name.len()].copy_from_slice(name.as_bytes());
    ContentionEvent {
        comm,
        kind: EVENT_CONTENTION,
        lock_addr: addr,
        wait_ns: ns,
        end_ns: end_s * SEC,
        tid,
        tgid: tid,
        flags: lcb::MUTEX,
        stack_id: 7,
        user_stack_id: USER_STACK_OFF,
        ..Default::default()
    }
}

struct Run {
    engine: Engine,
    log: watch::Receiver<Arc<IncidentLog>>,
    agg: Aggregator,
    t0: Instant,
    builder: Plain,
    dir: PathBuf,
}

impl Run {
    fn new(name: &str, triggers: &[&str], before: u64, after: u64, per_hour: u32) -> Run {
        let dir = std::env::temp_dir().join(format!("lockprof-engine-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let triggers: Vec<Trigger> = triggers.iter().map(|t| t.parse().expect("a trigger")).collect();
        let opts = IncidentOptions {
            triggers,
            before: Duration::from_secs(before),
            after: Duration::from_secs(after),
            dir: dir.clone(),
            max_per_hour: per_hour,
            max_dir_bytes: 1 << 30,
        };
        let store = Store::open(&dir, per_hour, 1 << 30).expect("store");
        let (mut engine, log) = Engine::new(&opts, store);
        let t0 = Instant::now();
        engine.start = Slot { at: t0, mono_ns: 0, unix_ms: UNIX0_MS, snap: Arc::new(Snapshot::default()) };
        let agg = Aggregator::new(Limits::default()).with_recent(min_wait_ns(&opts.triggers).unwrap_or(u64::MAX));
        Run { engine, log, agg, t0, builder: plain(), dir }
    }

    /// Second `s` of the made-up clock: its waits, then its snapshot.
    fn second(&mut self, s: u64, waits: &[ContentionEvent]) {
        for w in waits {
            self.agg.ingest(w);
        }
        let slot = Slot {
            at: self.t0 + Duration::from_secs(s),
            mono_ns: s * SEC,
            unix_ms: UNIX0_MS + s * 1000,
            snap: Arc::new(self.agg.snapshot()),
        };
        self.engine.observe_at(slot, &mut self.builder);
    }

    fn log(&self) -> Arc<IncidentLog> {
        self.log.borrow().clone()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn one_long_wait_writes_one_incident_with_the_seconds_around_it() {
    let mut r = Run::new("one", &["wait>=50ms"], 3, 2, 6);
    let mut stall = wait(0x200, 200_000_000, 42, 6);
    stall.owner.kind = owner::TASK;
    stall.owner.tid = 41;
    stall.owner.tgid = 40;
    for s in 1..=12 {
        let mut waits = vec![wait(0x100, 1_000, 7, s)];
        if s == 6 {
            waits.push(stall);
        }
        r.second(s, &waits);
        let log = r.log();
        assert_eq!(log.capturing, (6..8).contains(&s), "second {s}");
        assert_eq!(log.written.len(), usize::from(s >= 8), "second {s}");
    }
    let log = r.log();
    assert_eq!(log.fired, [("wait>=50ms".to_string(), 1)]);
    assert_eq!((log.merged, log.rate_limited, log.failed), (0, 0, 0));
    let w = &log.written[0];
    assert!(w.reason.starts_with("a wait of 200"), "{}", w.reason);
    assert!(w.id.starts_with("incident-20261201T231508.000Z-"), "{}", w.id);
    let p = crate::recording::load(&w.path).expect("a recording");
    let i = p.incident.as_ref().expect("incident info");
    assert_eq!((i.before_s(), i.after_s()), (3.0, 2.0));
    assert_eq!(p.meta.duration_s, 5.0);
    assert_eq!(p.meta.started_unix_s, (UNIX0_MS + 3_000) / 1000);
    // The stall's lock, its wait, its waiter and its owner.
    let stalled = p.locks.iter().find(|l| l.addr == 0x200).expect("the stalled lock");
    assert_eq!((stalled.wait.count(), stalled.wait.max_ns()), (1, 200_000_000));
    assert!(stalled.owners.iter().any(|o| o.tid == 41), "{:?}", stalled.owners);
    assert_eq!(p.slowest[0].tid, 42);
    assert_eq!(p.slowest[0].wait_ns, 200_000_000);
    // The other lock's waits of seconds 4 to 8: the window, not the session.
    let other = p.locks.iter().find(|l| l.addr == 0x100).expect("the busy lock");
    assert_eq!(other.wait.count(), 5);
    assert_eq!(log.last.as_ref().map(|l| l.locks.len()), Some(2));
}

#[test]
fn fires_during_a_capture_merge_and_the_hourly_limit_holds() {
    let mut r = Run::new("limits", &["wait>=10ms"], 1, 2, 1);
    r.second(1, &[wait(0x100, 20_000_000, 1, 1)]);
    r.second(2, &[wait(0x100, 30_000_000, 2, 2)]);
    r.second(3, &[]);
    r.second(4, &[]);
    assert_eq!((r.log().written.len(), r.log().merged), (1, 1));
    r.second(5, &[wait(0x100, 40_000_000, 3, 5)]);
    r.second(9, &[]);
    let log = r.log();
    assert_eq!((log.written.len(), log.rate_limited), (1, 1), "one per hour");
    // The merged wait is in the one incident.
    let p = log.last.as_ref().expect("an incident");
    assert_eq!(p.locks[0].wait.count(), 2);
}

#[test]
fn filters_choose_the_lock_and_rates_and_percentiles_fire() {
    let mut r = Run::new(
        "filters",
        &["lock=0x300,process=task1,wait>=10ms", "contentions>=5/s", "p99(0x500)>=1ms/2s"],
        1,
        0,
        6,
    );
    r.second(1, &[wait(0x200, 50_000_000, 1, 1), wait(0x300, 50_000_000, 2, 1)]);
    assert_eq!(r.log().written.len(), 0, "another lock's wait, another task's");
    r.second(2, &[wait(0x300, 50_000_000, 1, 2)]);
    assert_eq!(r.log().fired[0].1, 1, "its own lock's wait");
    let burst: Vec<ContentionEvent> = (0..12).map(|i| wait(0x400, 1_000, 10 + i, 3)).collect();
    r.second(3, &burst);
    let log = r.log();
    assert_eq!(log.fired[1].1, 1, "12 waits in a second: {:?}", log.fired);
    assert!(log.written[1].reason.contains("contentions/s"), "{}", log.written[1].reason);
    r.second(4, &[wait(0x500, 3_000_000, 30, 4)]);
    assert_eq!(r.log().fired[2].1, 1, "{:?}", r.log().fired);
}

#[test]
fn finishing_captures_an_open_window() {
    let mut r = Run::new("finish", &["wait>=10ms"], 5, 30, 6);
    r.second(1, &[wait(0x100, 20_000_000, 1, 1)]);
    assert!(r.log().capturing);
    r.engine.finish(&mut r.builder);
    let log = r.log();
    assert!(!log.capturing);
    assert_eq!(log.written.len(), 1);
    let i = log.last.as_ref().and_then(|p| p.incident.clone()).expect("info");
    assert_eq!(i.before_s(), 1.0, "the session was younger than --before");
}
