//! Root-only: `record` on the live kernel around `lockprof stress stall`,
//! which makes one long wait on a pipe's mutex by a known waiter on a
//! known holder and prints them (`stall waiter <tid> holder <tid> ...`).
//! The recording must show that wait among its slowest, as long as the
//! workload measured it, and blame it on the holder with the holder's
//! acquire stack (through splice); with `--owner-stacks`, also with the
//! stack the holder sleeps in while it holds the mutex (the send). Skips,
//! saying why, without root or the lock tracepoints (and, for owner stacks,
//! without the kernel's `bpf_task_from_pid`); with `CI=true` that is a
//! failure.

use std::sync::Mutex;

use serde_json::Value;

#[path = "support/recorder.rs"]
mod recorder;
#[path = "support/stall.rs"]
mod stall;
mod support;

use recorder::Recorder;
use stall::STALL_MS;

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no number {k} in {v}"))
}

/// The tests run one at a time: each stall is alone on the machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Why owners' stacks cannot be walked on this kernel, if they cannot: the
/// kfunc that hands programs a task reference (6.2+) is not in its BTF.
fn task_kfuncs_missing() -> Option<String> {
    let blob = std::fs::read("/sys/kernel/btf/vmlinux").ok()?;
    let types = lockprof::ebpf::btf::Types::parse(&blob).ok()?;
    (!types.has_func("bpf_task_from_pid")).then(|| "the kernel has no bpf_task_from_pid kfunc (Linux 6.2+)".into())
}

fn json(report: &[u8]) -> Value {
    serde_json::from_slice(report).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(report)))
}

fn frames(v: &Value) -> Vec<&str> {
    v.as_array().expect("stack").iter().map(|f| f.as_str().expect("frame")).collect()
}

#[test]
fn stall_is_the_slowest_wait_and_blames_the_holder() {
    const TEST: &str = "stall_is_the_slowest_wait_and_blames_the_holder";
    if !support::ready_unless(TEST, support::tracepoints_missing()) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Waits of 50 ms and more are kept one by one: the stall is one. Every
    // contention's stack is walked (`--stack-rate 0`): a wait's stack is
    // taken when it begins (a mutex's: when its spin begins, before it is
    // known to sleep), under a per-CPU budget that a storm elsewhere on the
    // machine (a parallel `stress pipe`) spends, and the stall's waiter and
    // holder then got no stack (seen: an empty `stack` on the 200 ms wait).
    let rec = Recorder::start(&["--outlier-us", "50000", "--stack-rate", "0", "--type", "mutex", "--format", "json"]);
    let s = stall::run(1.0, 2.0);
    let v = json(&rec.stop());

    // The waiter's wait, as long as the workload measured it (its measure
    // is an upper bound: from before the write to after it).
    let slowest = v["slowest"].as_array().expect("slowest");
    let mine: Vec<&Value> = slowest.iter().filter(|w| n(w, "tid") == s.waiter).collect();
    let [w] = mine[..] else { panic!("want one slow wait by the waiter {}: {slowest:?}", s.waiter) };
    eprintln!("recorded: {w}");
    assert_eq!((n(w, "pid"), w["type"].as_str()), (s.pid, Some("mutex")), "{w}");
    let wait = n(w, "wait_ns");
    assert!(wait >= STALL_MS * 1_000_000, "the waiter waited {wait} ns, less than the {STALL_MS} ms stall: {w}");
    // The printed measure is rounded to the microsecond.
    assert!(wait <= s.wait_ns + 1_000, "the recorded wait {wait} ns is longer than the measured {} ns", s.wait_ns);
    assert!(wait * 10 >= s.wait_ns * 9, "the recorded wait {wait} ns is not within 10% of {} ns", s.wait_ns);
    let end = n(w, "end_monotonic_ns");
    assert!(end >= s.at_ns && end <= s.at_ns + s.wait_ns + 1_000, "the wait ended at {end} ns, outside the write");
    let stack = frames(&w["stack"]);
    assert!(stack.iter().any(|f| f.contains("pipe_write")), "the wait is not in a pipe write: {stack:?}");

    // Its lock is the pipe mutex, and the holder is blamed for the wait,
    // with its acquire stack: the splice that took the mutex.
    let locks = v["locks"].as_array().expect("locks");
    let lock = locks.iter().find(|l| l["addr"] == w["addr"]).unwrap_or_else(|| panic!("no lock {}", w["addr"]));
    let owners = lock["owners"].as_array().unwrap_or_else(|| panic!("no owners read: {lock}"));
    let held: Vec<&Value> = owners.iter().filter(|o| o["owner_tid"].as_u64() == Some(s.holder)).collect();
    let [o] = held[..] else { panic!("want the holder {} among the owners once: {owners:?}", s.holder) };
    eprintln!("owner: {o}");
    assert_eq!((o["owner_kind"].as_str(), n(o, "owner_pid")), (Some("task"), s.pid), "{o}");
    assert_eq!(o["owner_comm"], "stall-holder", "{o}");
    assert!(n(o, "wait_caused_max_ns") >= wait, "the holder did not cause the {wait} ns wait: {o}");
    let acquired = frames(&o["owner_stack"]);
    assert!(acquired.iter().any(|f| f.contains("splice")), "the holder's acquire stack has no splice: {acquired:?}");
}

#[test]
fn owner_stacks_show_where_the_holder_sleeps_holding_the_lock() {
    const TEST: &str = "owner_stacks_show_where_the_holder_sleeps_holding_the_lock";
    if !support::ready_unless(TEST, support::tracepoints_missing().or_else(task_kfuncs_missing)) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Every stack walked (see above); the holder is asleep in its send to a
    // full socket, holding the pipe mutex, when the waiter's wait begins.
    let rec = Recorder::start(&["--owner-stacks", "--stack-rate", "0", "--type", "mutex", "--format", "json"]);
    let s = stall::run(1.0, 2.0);
    let v = json(&rec.stop());
    let notes = v["notes"].to_string();
    assert!(!notes.contains("owner stacks"), "owner stacks are off: {notes}");
    let owners: Vec<&Value> = v["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["owners"].as_array())
        .flatten()
        .filter(|o| o["owner_tid"].as_u64() == Some(s.holder))
        .collect();
    let stalled: Vec<&&Value> = owners.iter().filter(|o| n(o, "wait_caused_max_ns") >= STALL_MS * 1_000_000).collect();
    let [o] = stalled[..] else { panic!("want one owner row of the holder {} with the stall: {owners:?}", s.holder) };
    eprintln!("owner: {o}");
    let asleep = frames(&o["owner_asleep_stack"]);
    assert!(
        asleep.iter().any(|f| f.contains("sendmsg")),
        "the holder's stack while asleep holding the mutex is not in its send: {asleep:?}"
    );
    // Its acquire stack is still there, beside it.
    let acquired = frames(&o["owner_stack"]);
    assert!(acquired.iter().any(|f| f.contains("splice")), "the holder's acquire stack has no splice: {acquired:?}");
}
