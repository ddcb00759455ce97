//! Judging the triggers on a new snapshot: the held long waits (once their
//! lock's figures are in) for `wait>=`, the window of the last seconds for
//! rates and percentiles.

use std::{sync::Arc, time::Duration};

use profiler_common::ContentionEvent;

use super::{Engine, HOLD_FOR, WindowBuilder};
use crate::{
    incident::{
        ring::Slot,
        trigger::{Condition, Filter},
    },
    model::{LockProfile, Profile, SlowWait},
    report::fmt_ns,
};

/// Windows built in one round of judging, by their length.
struct Windows<'a> {
    built: Vec<(Duration, Arc<Profile>, f64)>,
    builder: &'a mut dyn WindowBuilder,
}

impl Windows<'_> {
    /// The profile of the window from `base` to `now`, and its seconds.
    fn get(&mut self, over: Duration, base: &Slot, now: &Slot) -> (Arc<Profile>, f64) {
        if let Some((_, p, s)) = self.built.iter().find(|(o, ..)| *o == over) {
            return (p.clone(), *s);
        }
        let p = Arc::new(self.builder.window(&now.snap.since(&base.snap, base.mono_ns, &[])));
        let secs = now.at.saturating_duration_since(base.at).as_secs_f64();
        self.built.push((over, p.clone(), secs));
        (p, secs)
    }
}

/// Whether `filter`'s cgroup (a path below the mount, or a short name)
/// names cgroup `id` of `p`.
fn cgroup_ok(filter: &Filter, p: &Profile, id: u64) -> bool {
    let Some(want) = filter.cgroup.as_deref() else { return true };
    let want = want.trim_matches('/');
    p.cgroups.iter().filter(|c| c.id == id).any(|c| {
        c.name == want
            || c.path.as_deref().is_some_and(|path| {
                let path = path.trim_matches('/');
                path == want || path.starts_with(&format!("{want}/")) || path.ends_with(&format!("/{want}"))
            })
    })
}

/// Whether slow wait `s` is the long wait `e`.
fn same_wait(e: &ContentionEvent, s: &SlowWait) -> bool {
    e.tid == s.tid && e.end_ns == s.end_monotonic_ns && e.lock_addr == s.addr
}

/// A filter judged on a wait whose lock has no row yet: its type, and an
/// address given as `lock=0x...`; names cannot match.
fn unnamed_lock_ok(filter: &Filter, s: &SlowWait) -> bool {
    filter.lock_type.is_none_or(|t| t == s.lock_type)
        && filter.lock.as_deref().is_none_or(|f| {
            f.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()).is_some_and(|a| a == s.addr)
        })
}

/// The lock of a slow wait in `p`.
fn lock_of<'a>(p: &'a Profile, w: &SlowWait) -> Option<&'a LockProfile> {
    p.locks.iter().find(|l| {
        l.addr == w.addr && l.lock_type == w.lock_type && l.mode == w.mode && l.pid.is_none_or(|pid| pid == w.tgid)
    })
}

impl Engine {
    /// The first trigger that fires on `now`, why, and when the wait that
    /// fired it ended (CLOCK_MONOTONIC; `wait>=` only).
    pub(super) fn judge(
        &mut self,
        now: &Slot,
        builder: &mut dyn WindowBuilder,
    ) -> Option<(usize, String, Option<u64>)> {
        let mut windows = Windows { built: Vec::new(), builder };
        // The held long waits, as the slowest waits of the last seconds'
        // window (their locks named there), and which can be judged now:
        // those whose lock is in it, and those held long enough.
        let held: Vec<ContentionEvent> = self.held.iter().map(|(e, _)| *e).collect();
        let judged = if held.is_empty() {
            None
        } else {
            let base = self.base_at(now.at.checked_sub(HOLD_FOR + Duration::from_secs(2)));
            let w = windows.builder.window(&now.snap.since(&base.snap, base.mono_ns, &held));
            let ready: Vec<bool> = self
                .held
                .iter()
                .map(|(e, at)| {
                    now.at.saturating_duration_since(*at) >= HOLD_FOR
                        || w.slowest.iter().any(|s| same_wait(e, s) && lock_of(&w, s).is_some())
                })
                .collect();
            let mut keep = ready.iter().map(|r| !r);
            self.held.retain(|_| keep.next().unwrap_or(false));
            Some((w, held, ready))
        };
        for (i, t) in self.triggers.iter().enumerate() {
            let mut ended = None;
            let reason = match t.condition {
                Condition::Wait { min_ns } => {
                    let Some((w, held, ready)) = &judged else { continue };
                    // The process term is the waiting task's here, not the lock's.
                    let lock_filter = Filter { process: None, ..t.filter.clone() };
                    w.slowest
                        .iter()
                        .filter(|s| s.wait_ns >= min_ns && t.filter.process_ok(s.tgid, Some(&s.comm)))
                        .filter(|s| {
                            let Some(at) = held.iter().position(|e| same_wait(e, s)).filter(|&k| ready[k]) else {
                                return false;
                            };
                            let lock_ok = match lock_of(w, s) {
                                Some(l) => lock_filter.lock_ok(l),
                                None => unnamed_lock_ok(&lock_filter, s),
                            };
                            lock_ok && cgroup_ok(&t.filter, w, held[at].cgroup_id)
                        })
                        .max_by_key(|s| s.wait_ns)
                        .map(|s| {
                            ended = Some(s.end_monotonic_ns);
                            format!("a wait of {} on {} by {}[{}]", fmt_ns(s.wait_ns), s.lock, s.comm, s.tid)
                        })
                }
                Condition::Quantile { q, min_ns, over } => {
                    let base = self.base_at(now.at.checked_sub(over));
                    let (w, secs) = windows.get(over, &base, now);
                    w.locks
                        .iter()
                        .filter(|l| t.filter.lock_ok(l))
                        .map(|l| (l, l.wait.quantile_ns(q)))
                        .filter(|(_, v)| *v >= min_ns)
                        .max_by_key(|(_, v)| *v)
                        .map(|(l, v)| {
                            format!(
                                "p{} of {} over {secs:.1} s is {} ({} waits)",
                                q * 100.0,
                                l.process_name(),
                                fmt_ns(v),
                                l.wait.count()
                            )
                        })
                }
                Condition::Rate { min_per_s, over } => {
                    let base = self.base_at(now.at.checked_sub(over));
                    let (w, secs) = windows.get(over, &base, now);
                    if secs < 0.5 {
                        continue;
                    }
                    let mut total = 0u64;
                    let mut busiest: Option<(&LockProfile, u64)> = None;
                    for l in w.locks.iter().filter(|l| t.filter.lock_ok(l)) {
                        let n = match t.filter.cgroup {
                            None => l.wait.count(),
                            Some(_) => l
                                .callers
                                .iter()
                                .flat_map(|c| &c.cgroups)
                                .filter(|s| cgroup_ok(&t.filter, &w, s.id))
                                .map(|s| s.count)
                                .sum(),
                        };
                        total += n;
                        if busiest.is_none_or(|(_, b)| n > b) {
                            busiest = Some((l, n));
                        }
                    }
                    let rate = total as f64 / secs;
                    (rate >= min_per_s && total > 0).then(|| {
                        let top = busiest.map(|(l, _)| l.process_name()).unwrap_or_default();
                        format!("{rate:.0} contentions/s over {secs:.1} s (most on {top})")
                    })
                }
            };
            if let Some(r) = reason {
                return Some((i, r, ended));
            }
        }
        None
    }
}
