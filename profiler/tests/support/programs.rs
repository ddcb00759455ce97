//! Which of lockprof's BPF programs the kernel has loaded right now, for the
//! root tests that check a session attaches them and leaves none behind.
//! Included by the test files that use it with
//! `#[path = "support/programs.rs"] mod programs;`.

// Each file that includes this uses part of it.
#![allow(dead_code)]

use std::{
    thread,
    time::{Duration, Instant},
};

/// Names of the lockprof programs loaded (the kernel keeps 15 characters).
pub fn lockprof_programs() -> Vec<String> {
    let ours: Vec<&str> = profiler_common::names::prog::ALL.iter().map(|n| &n[..n.len().min(15)]).collect();
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| ours.contains(&n.as_str()))
        .collect()
}

/// The kernel frees an exited process's programs asynchronously, after an
/// RCU grace period that takes seconds on a busy machine: what is loaded is
/// polled for up to this long.
pub const FREED_WITHIN: Duration = Duration::from_secs(10);

/// lockprof's programs once `done` holds of them, or after [`FREED_WITHIN`].
pub fn programs_when(done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + FREED_WITHIN;
    loop {
        let v = lockprof_programs();
        if done(&v) || Instant::now() >= deadline {
            return v;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts no lockprof program stays loaded once `what` has ended.
pub fn assert_nothing_attached(what: &str) {
    let left = programs_when(|v| v.is_empty());
    assert!(left.is_empty(), "{what}: lockprof programs still loaded {FREED_WITHIN:?} after: {left:?}");
}
