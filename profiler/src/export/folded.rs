//! Folded stacks (FlameGraph format): `root;...;leaf weight`, one line per stack.

use std::collections::BTreeMap;

use super::{ExportError, Metric};
use crate::{
    model::{CallerProfile, LockProfile, Profile},
    query::Query,
};

/// Which stacks and how.
#[derive(Clone, Debug, Default)]
pub struct FoldOptions {
    /// Weight.
    pub metric: Metric,
    /// Lock frame at the root instead of the leaf.
    pub lock_root: bool,
    /// Keep `+0xoff` on frames (default: function names only, so call sites merge).
    pub offsets: bool,
    /// The waiting task's cgroup as the root frame.
    pub cgroup_root: bool,
    /// Which locks (`lock` and `types`; sort and top do not apply).
    pub query: Query,
}

fn clean(frame: &str, offsets: bool) -> String {
    let f = if offsets { frame } else { frame.split("+0x").next().unwrap_or(frame) };
    f.replace(';', ":").replace(['\n', '\r'], " ")
}

fn weight(l: &LockProfile, c: &CallerProfile, m: Metric) -> Result<u64, ExportError> {
    Ok(match m {
        Metric::Wait => c.wait.total_ns(),
        Metric::Count => c.wait.count(),
        Metric::Hold => match &c.hold {
            Some(h) => h.total_ns(),
            None => return Err(ExportError::NoHold(format!("lock {}", l.display_name()))),
        },
        Metric::Yield | Metric::Blame => 0,
    })
}

/// Owners' acquire stacks weighted by the wait they caused, under the
/// owner's root frame ([`OwnerProfile::frames`](crate::model::OwnerProfile::frames)),
/// the lock as the leaf (or root).
fn blame_lines(p: &Profile, o: &FoldOptions) -> Result<Vec<String>, ExportError> {
    fold_per_lock(p, o, |l| {
        Ok(l.owners.iter().map(|ow| (root_first(&ow.frames(), o.offsets), ow.wait_caused_ns)).collect())
    })
}

/// Folds the rows `rows` gives for each lock `o` picks (frames root first,
/// weight), the lock's frame added at the leaf (or root); rows of weight 0
/// are left out, identical stacks merged, lines sorted.
fn fold_per_lock<'p>(
    p: &'p Profile,
    o: &FoldOptions,
    rows: impl Fn(&'p LockProfile) -> Result<Vec<(Vec<String>, u64)>, ExportError>,
) -> Result<Vec<String>, ExportError> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    let labels = p.labels();
    let which = Query { lock: o.query.lock.clone(), types: o.query.types.clone(), ..Query::default() };
    for l in which.locks(p) {
        let label = labels.get(&l.addr).map_or(l.display_name(), String::as_str);
        let lock_frame = clean(&format!("{label} [{}]", l.type_label()), true);
        for (mut frames, w) in rows(l)? {
            if w == 0 {
                continue;
            }
            if o.lock_root {
                // Below the cgroup when that is the root.
                frames.insert(usize::from(o.cgroup_root).min(frames.len()), lock_frame.clone());
            } else {
                frames.push(lock_frame.clone());
            }
            *merged.entry(frames.join(";")).or_default() += w;
        }
    }
    Ok(merged.into_iter().map(|(k, v)| format!("{k} {v}")).collect())
}

/// Frames (innermost first) root first, cleaned.
fn root_first(frames: &[String], offsets: bool) -> Vec<String> {
    frames.iter().rev().map(|f| clean(f, offsets)).collect()
}

/// `yield_to` caller stacks weighted by latency, `yield_to` as the leaf.
fn yield_lines(p: &Profile, o: &FoldOptions) -> Result<Vec<String>, ExportError> {
    let y = p.yield_to.as_ref().ok_or_else(|| {
        ExportError::NoYield(p.meta.yield_unavailable.clone().unwrap_or_else(|| "yield_to was not probed".into()))
    })?;
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for c in &y.callers {
        let w = c.stats.latency.total_ns();
        if w == 0 {
            continue;
        }
        let mut frames = root_first(c.frames(), o.offsets);
        // The stack's innermost frames are yield_to itself (fentry/kprobe):
        // one leaf frame carries it, with the outcomes.
        while frames.last().is_some_and(|f| crate::symbols::frame_fn(f) == "yield_to") {
            frames.pop();
        }
        frames.push("yield_to".to_string());
        *merged.entry(frames.join(";")).or_default() += w;
    }
    Ok(merged.into_iter().map(|(k, v)| format!("{k} {v}")).collect())
}

/// Folded lines, sorted, identical stacks merged.
pub fn folded_lines(p: &Profile, o: &FoldOptions) -> Result<Vec<String>, ExportError> {
    if o.cgroup_root {
        return cgroup_lines(p, o);
    }
    if o.metric == Metric::Yield {
        return yield_lines(p, o);
    }
    if o.metric == Metric::Blame {
        if p.locks.iter().all(|l| l.owners.is_empty()) {
            return Err(ExportError::NoBlame);
        }
        return blame_lines(p, o);
    }
    if o.metric == Metric::Hold && p.locks.iter().all(|l| l.hold.is_none()) {
        return Err(ExportError::NoHold(
            p.meta.hold_unavailable.clone().unwrap_or_else(|| "backend sees waits only".into()),
        ));
    }
    fold_per_lock(p, o, |l| {
        l.callers.iter().map(|c| Ok((root_first(c.frames(), o.offsets), weight(l, c, o.metric)?))).collect()
    })
}

/// The root frame of cgroup `id`'s rows.
fn cgroup_frame(p: &Profile, id: u64) -> String {
    let name = p.cgroups.iter().find(|c| c.id == id).map_or_else(|| format!("cgroup {id}"), |c| c.name.clone());
    clean(&format!("{name} [cgroup]"), true)
}

/// Wait or count lines split by the waiting task's cgroup, which is the
/// root frame (the waits of a caller no cgroup was recorded for, if any,
/// under `[no cgroup]`, so the weights still sum to the lock's).
fn cgroup_lines(p: &Profile, o: &FoldOptions) -> Result<Vec<String>, ExportError> {
    if !matches!(o.metric, Metric::Wait | Metric::Count) {
        return Err(ExportError::CgroupMetric);
    }
    if p.cgroups.is_empty() {
        return Err(ExportError::NoCgroups);
    }
    let names: BTreeMap<u64, String> = p.cgroups.iter().map(|c| (c.id, cgroup_frame(p, c.id))).collect();
    let count = o.metric == Metric::Count;
    fold_per_lock(p, o, |l| {
        let mut rows = Vec::new();
        for c in l.callers.iter() {
            let frames = root_first(c.frames(), o.offsets);
            let mut rest = weight(l, c, o.metric)?;
            for s in &c.cgroups {
                let w = if count { s.count } else { s.wait_ns };
                rest = rest.saturating_sub(w);
                let root = names.get(&s.id).cloned().unwrap_or_else(|| cgroup_frame(p, s.id));
                rows.push((std::iter::once(root).chain(frames.iter().cloned()).collect(), w));
            }
            if rest > 0 {
                let root = crate::model::placeholders::NO_CGROUP.to_string();
                rows.push((std::iter::once(root).chain(frames.iter().cloned()).collect(), rest));
            }
        }
        Ok(rows)
    })
}

/// Folded lines of several rounds merged into their mean per round: each
/// stack's weights summed and divided by the number of rounds (rounded; a
/// stack whose mean rounds to 0 is left out). One round is returned as it is.
pub fn mean_per_round(rounds: &[Vec<String>]) -> Vec<String> {
    if let [one] = rounds {
        return one.clone();
    }
    let mut sum: BTreeMap<&str, u128> = BTreeMap::new();
    for line in rounds.iter().flatten() {
        if let Some((stack, w)) = line.rsplit_once(' ')
            && let Ok(w) = w.parse::<u64>()
        {
            *sum.entry(stack).or_default() += u128::from(w);
        }
    }
    let n = rounds.len().max(1) as u128;
    sum.into_iter()
        .filter_map(|(stack, w)| {
            let mean = u64::try_from((w + n / 2) / n).unwrap_or(u64::MAX);
            (mean > 0).then(|| format!("{stack} {mean}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn rounds_merge_into_their_mean() {
        let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let rounds = [r(&["a;b 10", "a;c 3"]), r(&["a;b 20"]), r(&["a;b 30", "x 1"])];
        assert_eq!(mean_per_round(&rounds), ["a;b 20", "a;c 1"], "x's mean rounds to 0");
        assert_eq!(mean_per_round(&rounds[..1]), rounds[0], "one round as it is");
        assert!(mean_per_round(&[]).is_empty());
    }

    #[test]
    fn golden_wait_lines() {
        let lines = folded_lines(&fixture::profile(), &FoldOptions::default()).expect("fold");
        assert_eq!(
            lines,
            [
                "kernel_clone;copy_process;queued_write_lock_slowpath;tasklist_lock [rwlock:W] 96000",
                "release_task;queued_write_lock_slowpath;tasklist_lock [rwlock:W] 4000",
                "vfs_write;anon_pipe_write;__mutex_lock.constprop.0;mutex @ anon_pipe_write [mutex] 3200",
            ]
        );
    }

    #[test]
    fn weights_sum_to_the_lock_totals() {
        let p = fixture::profile();
        for m in [Metric::Wait, Metric::Count] {
            let lines = folded_lines(&p, &FoldOptions { metric: m, ..Default::default() }).expect("fold");
            let sum: u64 =
                lines.iter().map(|l| l.rsplit(' ').next().and_then(|w| w.parse::<u64>().ok()).unwrap_or(0)).sum();
            let want: u64 =
                p.locks.iter().map(|l| if m == Metric::Wait { l.wait.total_ns() } else { l.wait.count() }).sum();
            assert_eq!(sum, want, "{m:?}");
        }
    }

    #[test]
    fn lock_root_offsets_and_filters() {
        let p = fixture::profile();
        let o = FoldOptions {
            lock_root: true,
            offsets: true,
            query: Query { lock: Some("tasklist_lock".into()), ..Default::default() },
            ..Default::default()
        };
        let lines = folded_lines(&p, &o).expect("fold");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| l.starts_with("tasklist_lock [rwlock:W];")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("copy_process+0x6f1")));
        let by_addr = FoldOptions {
            query: Query { lock: Some("0xffff888004a1b2c0".into()), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(folded_lines(&p, &by_addr).expect("fold").len(), 1);
        let by_type = FoldOptions {
            query: Query { types: vec![profiler_common::LockType::Mutex], ..Default::default() },
            ..Default::default()
        };
        assert!(folded_lines(&p, &by_type).expect("fold").iter().all(|l| l.contains("[mutex]")));
    }

    #[test]
    fn hold_without_hold_times_is_a_clear_error() {
        let err = folded_lines(&fixture::profile(), &FoldOptions { metric: Metric::Hold, ..Default::default() })
            .expect_err("no hold");
        assert!(err.to_string().contains("no hold times"), "{err}");
    }

    #[test]
    fn yield_metric_folds_yield_to_callers_by_latency() {
        let p = fixture::profile_with_yields();
        let lines = folded_lines(&p, &FoldOptions { metric: Metric::Yield, ..Default::default() }).expect("fold");
        assert_eq!(
            lines,
            [
                "kvm_emulate_hypercall;kvm_sched_yield;kvm_vcpu_yield_to;yield_to 152000",
                "kvm_vcpu_on_spin;kvm_vcpu_yield_to;yield_to 1000",
            ]
        );
        let err = folded_lines(&fixture::profile(), &FoldOptions { metric: Metric::Yield, ..Default::default() })
            .expect_err("no yield data");
        assert!(err.to_string().contains("yield_to cannot be probed"), "{err}");
    }

    #[test]
    fn distinct_locks_with_one_name_stay_apart() {
        let mut p = fixture::profile();
        let mut second = p.locks[1].clone();
        second.addr += 0x1000;
        p.locks.push(second);
        let lines = folded_lines(&p, &FoldOptions::default()).expect("fold");
        let pipes: Vec<&String> = lines.iter().filter(|l| l.contains("[mutex]")).collect();
        assert_eq!(pipes.len(), 2, "{lines:?}");
        assert!(pipes.iter().any(|l| l.contains(";mutex @ anon_pipe_write #a1b2c0 [mutex]")), "{lines:?}");
        assert!(pipes.iter().any(|l| l.contains(";mutex @ anon_pipe_write #a1c2c0 [mutex]")), "{lines:?}");
    }

    #[test]
    fn blame_lines_are_rooted_at_the_owner_as_in_pprof() {
        use crate::model::{OwnerKind, OwnerProfile, placeholders};
        let owner = |kind, comm: &str, caller: &str, stack: &[&str], ns| OwnerProfile {
            kind,
            tid: 9,
            pid: 9,
            comm: comm.into(),
            caller: caller.into(),
            stack: stack.iter().map(|f| f.to_string()).collect(),
            asleep_stack: Vec::new(),
            waits: 1,
            wait_caused_ns: ns,
            wait_caused_max_ns: ns,
        };
        let mut p = fixture::profile();
        let stack = ["mutex_lock+0x1", "pipe_write+0x5", "vfs_write+0x9"];
        p.locks[1].owners = vec![
            owner(OwnerKind::Task, "writer", "pipe_write+0x5", &stack, 300),
            owner(OwnerKind::Unknown, "", placeholders::OWNER_UNKNOWN, &[], 100),
        ];
        let lines = folded_lines(&p, &FoldOptions { metric: Metric::Blame, ..Default::default() }).expect("fold");
        assert_eq!(
            lines,
            [
                "[held by writer];vfs_write;pipe_write;mutex_lock;mutex @ anon_pipe_write [mutex] 300",
                "[owner unknown];mutex @ anon_pipe_write [mutex] 100",
            ]
        );
        let root_first: Vec<String> = p.locks[1].owners[0].frames().into_iter().rev().collect();
        assert!(lines[0].starts_with(&root_first[0]), "the frames pprof and serve draw: {root_first:?}");
    }

    #[test]
    fn empty_profile_has_no_lines() {
        assert!(folded_lines(&Profile::default(), &FoldOptions::default()).expect("fold").is_empty());
    }

    #[test]
    fn cgroup_root_puts_each_cgroup_at_the_root_and_keeps_the_weights() {
        let p = fixture::profile_with_cgroups();
        let o = FoldOptions { cgroup_root: true, ..FoldOptions::default() };
        let lines = folded_lines(&p, &o).expect("lines");
        assert!(lines.iter().all(|l| l.contains(" [cgroup];")), "{lines:?}");
        assert!(lines.contains(
            &"docker:3f2a9c1b7d4e [cgroup];vfs_write;anon_pipe_write;__mutex_lock.constprop.0;mutex @ anon_pipe_write [mutex] 2700"
                .to_string()
        ), "{lines:?}");
        let sum: u64 =
            lines.iter().map(|l| l.rsplit(' ').next().and_then(|w| w.parse::<u64>().ok()).unwrap_or(0)).sum();
        assert_eq!(sum, p.locks.iter().map(|l| l.wait.total_ns()).sum::<u64>());
        let counts = folded_lines(&p, &FoldOptions { metric: Metric::Count, ..o.clone() }).expect("counts");
        assert!(counts.iter().any(|l| l.starts_with("nginx.service [cgroup];") && l.ends_with(" 1")), "{counts:?}");
        let both = folded_lines(&p, &FoldOptions { lock_root: true, ..o.clone() }).expect("both");
        assert!(both.iter().all(|l| l.split(';').nth(1).is_some_and(|f| f.ends_with("]") && !f.ends_with("[cgroup]"))));
        assert!(matches!(folded_lines(&fixture::profile(), &o), Err(ExportError::NoCgroups)));
        assert!(matches!(folded_lines(&p, &FoldOptions { metric: Metric::Hold, ..o }), Err(ExportError::CgroupMetric)));
    }
}
