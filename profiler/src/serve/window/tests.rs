//! Window tests: growth per (lock, stack), expiry, the row cap.

use std::time::{Duration, Instant};

use super::*;
use crate::serve::tests::profile;

#[test]
fn keeps_each_profiles_growth_for_its_length() {
    let t0 = Instant::now();
    let mut w = Window::new(Duration::from_secs(10), 1000);
    w.update(&profile(&[(0x1, &[("a", &[100, 200]), ("b", &[5])])]), t0);
    w.update(&profile(&[(0x1, &[("a", &[100, 200, 300]), ("b", &[5])])]), t0 + Duration::from_secs(1));
    let now = t0 + Duration::from_secs(1);
    let last1 = w.last(Duration::from_secs(1), now);
    assert_eq!(last1.len(), 1, "only a grew in the last second");
    assert_eq!((last1[0].values.count, last1[0].values.wait_ns), (1, 300));
    let all = w.last(Duration::from_secs(10), now);
    let total: u64 = all.iter().map(|e| e.values.count).sum();
    assert_eq!(total, 4, "everything since start");
    assert_eq!(all[0].stack.last().map(String::as_str), Some("a+0x10"), "largest wait first");
    // After the length, the first slot is gone.
    w.update(&profile(&[(0x1, &[("a", &[100, 200, 300]), ("b", &[5])])]), t0 + Duration::from_millis(10_500));
    let later: u64 =
        w.last(Duration::from_secs(10), t0 + Duration::from_millis(10_500)).iter().map(|e| e.values.count).sum();
    assert_eq!(later, 1);
    assert_eq!(w.entries(), 1);
}

#[test]
fn the_row_cap_folds_and_counts() {
    let t0 = Instant::now();
    let mut w = Window::new(Duration::from_secs(60), 2);
    let callers: Vec<(String, Vec<u64>)> = (0..5).map(|i| (format!("f{i}"), vec![10 + i])).collect();
    let refs: Vec<(&str, &[u64])> = callers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
    w.update(&profile(&[(0x1, &refs)]), t0);
    assert_eq!(w.folded(), 3);
    let rows = w.last(Duration::from_secs(60), t0);
    assert_eq!(rows.iter().map(|e| e.values.count).sum::<u64>(), 5, "totals stay exact");
    assert!(rows.iter().any(|e| e.stack[0].starts_with("[window full")));
}

#[test]
fn a_lock_created_again_counts_from_zero() {
    let t0 = Instant::now();
    let mut w = Window::new(Duration::from_secs(60), 100);
    w.update(&profile(&[(0x1, &[("a", &[100, 100, 100])])]), t0);
    w.update(&profile(&[(0x1, &[("a", &[100])])]), t0 + Duration::from_secs(1));
    let rows = w.last(Duration::from_secs(1), t0 + Duration::from_secs(1));
    assert_eq!(rows.iter().map(|e| e.values.count).sum::<u64>(), 1);
}

#[test]
fn owner_rows_grow_apart_from_the_waiters_stacks() {
    use crate::model::{OwnerKind, OwnerProfile};
    let owner = |waits, ns| OwnerProfile {
        kind: OwnerKind::Task,
        tid: 7,
        pid: 7,
        comm: "writer".into(),
        caller: "a+0x10".into(),
        // The same stack as the waiter's: the root frame keeps them apart.
        stack: vec!["a+0x10".into()],
        asleep_stack: Vec::new(),
        waits,
        wait_caused_ns: ns,
        wait_caused_max_ns: ns,
    };
    let t0 = Instant::now();
    let mut w = Window::new(Duration::from_secs(60), 100);
    let mut p = profile(&[(0x1, &[("a", &[100, 200])])]);
    let mut other = owner(0, 0);
    other.tid = 8;
    p.locks[0].owners = vec![owner(1, 200), other];
    w.update(&p, t0);
    let mut p = profile(&[(0x1, &[("a", &[100, 200, 300])])]);
    // A second thread of the same name, same stack: the same row.
    let mut other = owner(1, 100);
    other.tid = 8;
    p.locks[0].owners = vec![owner(1, 400), other.clone()];
    w.update(&p, t0 + Duration::from_secs(1));
    let rows = w.last(Duration::from_secs(1), t0 + Duration::from_secs(1));
    let blame: Vec<&Entry> = rows.iter().filter(|e| e.values.blame_count > 0).collect();
    assert_eq!(blame.len(), 1, "{rows:?}");
    assert_eq!((blame[0].values.blame_count, blame[0].values.blame_ns, blame[0].values.count), (1, 300, 0));
    assert_eq!(blame[0].stack.last().map(String::as_str), Some("[held by writer]"));
    let waits: u64 = rows.iter().map(|e| e.values.count).sum();
    assert_eq!(waits, 1, "the waiter's row grew by one wait, the owner's row adds none");
}
