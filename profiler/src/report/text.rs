//! The text report, laid out like `perf lock contention`.

use std::fmt::Write as _;

use super::{By, GroupBy, ReportOptions, fmt_ns};
use crate::model::{
    CallerProfile, Counter, CounterKind, Counters, LockProfile, NameSource, OwnerKind, Profile, Stats, YieldProfile,
    YieldStats, placeholders, type_label,
};

/// The non-zero counters by name, then which of them lost data (the
/// others are bookkeeping), so that a loss is not read as one more count.
fn counters_line(c: &Counters) -> String {
    let mut nonzero: Vec<Counter> = c.iter().filter(|c| c.value > 0).collect();
    if nonzero.is_empty() {
        return "all zero (nothing lost)".into();
    }
    nonzero.sort_by_key(|c| c.name);
    let counts: Vec<String> = nonzero.iter().map(|c| format!("{}={}", c.name, c.value)).collect();
    let lost: Vec<&str> = nonzero.iter().filter(|c| c.kind == CounterKind::Loss).map(|c| c.name).collect();
    if lost.is_empty() {
        format!("{} (nothing lost)", counts.join(" "))
    } else {
        format!("{} (lost: {})", counts.join(" "), lost.join(" "))
    }
}

fn stat_cols(s: &Stats) -> String {
    format!(
        "{:>10} {:>11} {:>11} {:>11} {:>11}",
        s.count(),
        fmt_ns(s.total_ns()),
        fmt_ns(s.max_ns()),
        fmt_ns(s.avg_ns()),
        fmt_ns(s.quantile_ns(0.99))
    )
}

const HEADER: &str = " contended  total wait    max wait    avg wait    p99 wait";

/// A lock's name column: name (with provenance), or class, and address;
/// a user-space lock also names its process. A row summing several locks
/// (`--group-by`) has no one address: it says how many locks it sums, in
/// how many processes. By call site, the class (the row's key) comes first.
pub(crate) fn lock_title(l: &LockProfile, group_by: GroupBy) -> String {
    let title = match group_by {
        GroupBy::Site => site_title(l),
        GroupBy::Address | GroupBy::Name => kernel_title(l),
    };
    format!("{}{}", l.in_process(&title), summed(l))
}

/// ` @ address`, unless the row sums several locks (or is the overflow row).
fn at(l: &LockProfile) -> String {
    if l.addr == 0 || l.addresses.is_some_and(|n| n > 1) { String::new() } else { format!(" @ {:#x}", l.addr) }
}

/// How many locks (and processes) a summed row holds: ` (16 processes, 16
/// addresses)`; nothing for a single lock.
fn summed(l: &LockProfile) -> String {
    match (l.addresses, l.processes) {
        (Some(a), Some(p)) if a > 1 => format!(" ({p} process{}, {a} addresses)", if p == 1 { "" } else { "es" }),
        (Some(a), None) if a > 1 => format!(" ({a} addresses)"),
        _ => String::new(),
    }
}

fn kernel_title(l: &LockProfile) -> String {
    let at = at(l);
    match (&l.name, l.name_source) {
        (Some(n), Some(NameSource::Inferred)) => format!("{n} (inferred; {}){at}", l.class),
        // Only the slab cache is known: the class says it (`... in &kmalloc-cg-192`).
        (Some(n), Some(NameSource::Btf)) if n.starts_with('&') => format!("{}{at}", l.class),
        (Some(n), _) => match &l.field {
            Some(f) if f != n => format!("{n} ({f}){at}"),
            _ => format!("{n}{at}"),
        },
        (None, _) => format!("{}{at}", l.class),
    }
}

/// The class first, then the name its locks share, if any
/// (`rwsem @ vm_mmap_pgoff (mmap_lock)`).
fn site_title(l: &LockProfile) -> String {
    let name = match (&l.name, l.name_source) {
        (Some(_), _) if l.display_name() == l.class => String::new(),
        (Some(n), Some(NameSource::Inferred)) => format!(" ({n}, inferred)"),
        (Some(n), _) => format!(" ({n})"),
        (None, _) => String::new(),
    };
    format!("{}{name}{}", l.class, at(l))
}

fn header(p: &Profile, out: &mut String) {
    let m = &p.meta;
    // Rows summing locks (--group-by) count each lock they sum.
    let locks: u64 = p.locks.iter().map(|l| u64::from(l.addresses.unwrap_or(1))).sum();
    let rows = p.locks.len() as u64;
    let on = if locks == rows { format!("{locks} locks") } else { format!("{locks} locks in {rows} rows") };
    let _ = writeln!(
        out,
        "lockprof: {} contentions on {on} in {:.2} s (backend {}{}, kernel {}{})",
        p.contended(),
        m.duration_s,
        if m.backend.is_empty() { "?" } else { &m.backend },
        if m.mode.is_empty() { String::new() } else { format!(", {} mode", m.mode) },
        if m.kernel.is_empty() { "?" } else { &m.kernel },
        if m.hostname.is_empty() { String::new() } else { format!(", host {}", m.hostname) },
    );
    let _ = writeln!(out, "counters: {}", counters_line(&m.drops));
    if let Some(c) = &m.command {
        let only = c.only.as_ref().map_or(String::new(), |o| format!("; only its processes: {o}"));
        let _ = writeln!(out, "command: {} (pid {}, uid {}): {}{only}", c.line(), c.pid, c.uid, c.status);
    }
    if let Some(r) = &m.round {
        let _ = writeln!(out, "round {} of {}", r.index, r.of);
    }
    if let Some(i) = &p.incident {
        incident(i, out);
    }
    if !m.filters.is_empty() {
        let _ = writeln!(out, "filters: {}", m.filters.join(" "));
    }
    if let Some(why) = &m.hold_unavailable {
        let _ = writeln!(out, "hold times: not available: {why}; `lockprof doctor` explains");
    }
    if let Some(b) = &m.hold_backend {
        let _ = writeln!(out, "hold times: measured with {b} on the release functions (contended acquisitions only)");
    }
    if let Some(why) = &m.yield_unavailable {
        let _ = writeln!(out, "yield_to: not profiled: {why}; `lockprof doctor` explains");
    }
    for n in &m.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out.push('\n');
}

/// Which trigger wrote the recording, why, and the system around it.
fn incident(i: &crate::model::IncidentInfo, out: &mut String) {
    let _ = writeln!(out, "incident {}: {}", i.id, i.reason);
    let _ = writeln!(
        out,
        "  trigger `{}`; window: {:.1} s before it fired to {:.1} s after",
        i.trigger,
        i.before_s(),
        i.after_s()
    );
    if let Some(s) = &i.system {
        let top: Vec<String> =
            s.top_tasks.iter().take(5).map(|t| format!("{}[{}] {:.0}%", t.comm, t.tid, t.cpu_pct)).collect();
        let _ = writeln!(
            out,
            "  system: load {:.2} {:.2} {:.2}, {} runnable, {} blocked, {} CPUs; busiest threads after it: {}",
            s.loadavg[0],
            s.loadavg[1],
            s.loadavg[2],
            s.procs_running,
            s.procs_blocked,
            s.cpus,
            if top.is_empty() { "-".to_string() } else { top.join(", ") }
        );
    }
}

fn yield_cols(s: &YieldStats) -> String {
    let l = &s.latency;
    format!(
        "{:>8} {:>8} {:>7} {:>7} {:>11} {:>11} {:>11} {:>11}",
        s.calls(),
        s.yielded,
        s.failed,
        s.errors,
        fmt_ns(l.total_ns()),
        fmt_ns(l.max_ns()),
        fmt_ns(l.avg_ns()),
        fmt_ns(l.quantile_ns(0.99))
    )
}

const YIELD_HEADER: &str = "   calls  yielded  failed  errors  total time    max time    avg time    p99 time";

/// KVM directed yield: totals, callers, pairs, run-queue lock waits.
fn yields(p: &Profile, y: &YieldProfile, opts: &ReportOptions, rows: Option<usize>, out: &mut String) {
    let t = &y.total;
    let _ = writeln!(
        out,
        "KVM directed yield (yield_to via {}): {} calls, {} yielded, {} failed, {} errors",
        p.meta.yield_backend.as_deref().unwrap_or("?"),
        t.calls(),
        t.yielded,
        t.failed,
        t.errors
    );
    if t.calls() == 0 {
        let _ = writeln!(out, "  no yield_to calls (no KVM vCPU yielded while recording)");
    } else {
        let _ = writeln!(out, "{YIELD_HEADER}  caller path");
        let callers = opts.query.yield_callers(p);
        let shown = rows.unwrap_or(callers.len()).min(callers.len());
        for c in &callers[..shown] {
            let _ = writeln!(out, "{}  {}", yield_cols(&c.stats), c.path);
            if opts.by == By::YieldCaller {
                for f in c.stack.iter() {
                    let _ = writeln!(out, "{:>86}{f}", "");
                }
            }
        }
        if callers.len() > shown {
            let _ = writeln!(out, "{:>86}(+{} more callers)", "", callers.len() - shown);
        }
        let _ = writeln!(out, "{YIELD_HEADER}  yielder -> target (tid/pid comm)");
        let pairs = opts.query.yield_pairs(p);
        let shown = rows.unwrap_or(pairs.len()).min(pairs.len());
        for pr in &pairs[..shown] {
            let target = if pr.target_tid == 0 {
                placeholders::UNKNOWN_TARGET.to_string()
            } else {
                format!("{}/{} {}", pr.target_tid, pr.target_pid, pr.target_comm)
            };
            let _ = writeln!(out, "{}  {}/{} {} -> {target}", yield_cols(&pr.stats), pr.tid, pr.pid, pr.comm);
        }
        if pairs.len() > shown {
            let _ = writeln!(out, "{:>86}(+{} more pairs)", "", pairs.len() - shown);
        }
    }
    let rq = &y.rq_contention;
    if rq.waits > 0 {
        let _ = writeln!(
            out,
            "run-queue lock contention inside yield_to: {} waits, {} total, {} max ({})",
            rq.waits,
            fmt_ns(rq.wait_total_ns),
            fmt_ns(rq.wait_max_ns),
            rq.locks.join(", ")
        );
    } else if !p.meta.backend.starts_with("tp") && p.meta.backend != "tracepoint" {
        let _ = writeln!(
            out,
            "run-queue lock contention inside yield_to: not visible with the {} backend (spinlocks need the lock tracepoints)",
            p.meta.backend
        );
    }
}

/// A lock's callers merged by caller frame (stacks that differ only further
/// out share a line here; `--by caller` shows them apart), sorted.
/// A caller's name in the lock view: its kernel caller, and the
/// application's frame above it when user stacks were recorded.
fn caller_title(c: &CallerProfile) -> String {
    match &c.user_caller {
        Some(u) => format!("{} <- {u}", c.caller),
        None => c.caller.clone(),
    }
}

fn callers_by_frame(l: &LockProfile, opts: &ReportOptions) -> Vec<(String, Stats)> {
    let mut merged: Vec<(String, Stats)> = Vec::new();
    for c in l.callers.iter() {
        let title = caller_title(c);
        match merged.iter_mut().find(|(name, _)| *name == title) {
            Some((_, st)) => st.merge(&c.wait),
            None => merged.push((title, c.wait.clone())),
        }
    }
    merged.sort_by(|a, b| opts.query.sort.value(&b.1).cmp(&opts.query.sort.value(&a.1)).then(a.0.cmp(&b.0)));
    merged
}

/// The longest individual waits.
fn slowest(p: &Profile, out: &mut String) {
    const SHOWN: usize = 5;
    if p.slowest.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nslowest waits:");
    for w in p.slowest.iter().take(SHOWN) {
        let _ = writeln!(
            out,
            "{:>11}  {:<13} {}  tid {} ({})  <- {}",
            fmt_ns(w.wait_ns),
            type_label(w.lock_type, w.mode),
            w.lock,
            w.tid,
            w.comm,
            w.caller
        );
    }
}

/// Renders the text report.
pub fn render_text(p: &Profile, opts: &ReportOptions) -> String {
    let mut out = String::new();
    header(p, &mut out);
    if matches!(opts.by, By::YieldCaller | By::YieldPair) {
        match &p.yield_to {
            Some(y) => yields(p, y, opts, None, &mut out),
            None => out.push_str("no yield_to data (see the yield_to line above)\n"),
        }
        return out;
    }
    if p.locks.is_empty() {
        out.push_str("no lock contention recorded\n");
    } else {
        locks_view(p, opts, &mut out);
    }
    if let Some(y) = &p.yield_to
        && opts.by == By::Lock
    {
        out.push('\n');
        yields(p, y, opts, Some(opts.callers_per_lock), &mut out);
    }
    out
}

fn locks_view(p: &Profile, opts: &ReportOptions, out: &mut String) {
    match opts.by {
        By::Lock => {
            let _ = writeln!(out, "{HEADER}  type          name");
            for l in opts.query.locks(p) {
                let _ =
                    writeln!(out, "{}  {:<13} {}", stat_cols(&l.wait), l.type_label(), lock_title(l, opts.group_by));
                if let Some(h) = &l.hold {
                    let _ = writeln!(out, "{}  hold (contended acquisitions, from wait end to release)", stat_cols(h));
                }
                let callers = callers_by_frame(l, opts);
                let shown = opts.callers_per_lock.min(callers.len());
                for (caller, st) in &callers[..shown] {
                    let _ = writeln!(out, "{}    <- {caller}", stat_cols(st));
                }
                if callers.len() > shown {
                    let _ = writeln!(out, "{:>58}    (+{} more callers)", "", callers.len() - shown);
                }
            }
            slowest(p, out);
        }
        By::Caller => {
            let _ = writeln!(out, "{HEADER}  type          caller / lock");
            for (l, c) in opts.query.callers(p) {
                let _ = writeln!(
                    out,
                    "{}  {:<13} {}  [{}]",
                    stat_cols(&c.wait),
                    l.type_label(),
                    c.caller,
                    lock_title(l, opts.group_by)
                );
                for f in c.stack.iter() {
                    let _ = writeln!(out, "{:>72}{f}", "");
                }
            }
        }
        By::Owner => {
            let _ = writeln!(out, "     waits  caused wait  max caused  owner / lock");
            for (l, o) in opts.query.owners(p) {
                let who = match o.kind {
                    OwnerKind::Task => format!("{} ({}/{}) {}", o.comm, o.pid, o.tid, o.caller),
                    OwnerKind::Readers => "readers".to_string(),
                    OwnerKind::Writer => "a writer (a qrwlock records no owner)".to_string(),
                    OwnerKind::Unknown => "unknown (no owner recorded or seen)".to_string(),
                };
                let _ = writeln!(
                    out,
                    "{:>10}  {:>11}  {:>10}  {who}  [{}]",
                    super::fmt_count(o.waits),
                    fmt_ns(o.wait_caused_ns),
                    // The unknown row is what is left over: no single wait of its own.
                    if o.kind == OwnerKind::Unknown { "-".to_string() } else { fmt_ns(o.wait_caused_max_ns) },
                    lock_title(l, opts.group_by)
                );
                for f in &o.stack {
                    let _ = writeln!(out, "{:>40}{f}", "");
                }
                if !o.asleep_stack.is_empty() {
                    let _ = writeln!(out, "{:>40}{}", "", placeholders::OWNER_ASLEEP);
                    for f in &o.asleep_stack {
                        let _ = writeln!(out, "{:>42}{f}", "");
                    }
                }
            }
        }
        By::Task => {
            let _ = writeln!(out, "{HEADER}      tid      pid  comm");
            for t in opts.query.tasks(p) {
                let _ = writeln!(out, "{} {:>8} {:>8}  {}", stat_cols(&t.wait), t.tid, t.tgid, t.comm);
            }
        }
        By::Cgroup => cgroups_view(p, opts, out),
        By::YieldCaller | By::YieldPair => {}
    }
}

/// One row per cgroup, its locks nested.
fn cgroups_view(p: &Profile, opts: &ReportOptions, out: &mut String) {
    if p.cgroups.is_empty() {
        out.push_str("no cgroups recorded (see the notes above; --no-cgroups turns them off)\n");
        return;
    }
    let _ = writeln!(out, "{HEADER}  cgroup");
    for c in opts.query.cgroups(p) {
        let path = match &c.path {
            Some(path) if path != &c.name => format!("  ({path})"),
            Some(_) => String::new(),
            None => "  (removed)".into(),
        };
        let _ = writeln!(out, "{}  {}{path}", stat_cols(&c.wait), c.name);
        let locks = opts.query.cgroup_locks(p, c);
        let shown = opts.callers_per_lock.min(locks.len());
        for l in &locks[..shown] {
            let from = match &l.user_caller {
                Some(u) => format!("  from {u} via {}", l.caller),
                None if l.caller.is_empty() => String::new(),
                None => format!("  via {}", l.caller),
            };
            let _ = writeln!(
                out,
                "{:>10} {:>11} {:>11} {:>35}<- {:<13} {}{from}",
                l.count,
                fmt_ns(l.wait_ns),
                fmt_ns(l.max_ns),
                "",
                type_label(l.lock_type, l.mode),
                l.lock
            );
        }
        if locks.len() > shown {
            let _ = writeln!(out, "{:>58}    (+{} more locks)", "", locks.len() - shown);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        query::{Query, SortKey},
        report::fixture,
    };

    #[test]
    fn counters_line_says_what_was_lost() {
        let mut c = Counters::default();
        assert_eq!(counters_line(&c), "all zero (nothing lost)");
        c.bookkeeping.stack_reused = 9;
        c.bookkeeping.holds = 4;
        assert_eq!(counters_line(&c), "holds=4 stack_reused=9 (nothing lost)");
        c.losses.ringbuf_full = 2;
        c.losses.reentered = 1;
        assert_eq!(
            counters_line(&c),
            "holds=4 reentered=1 ringbuf_full=2 stack_reused=9 (lost: reentered ringbuf_full)"
        );
    }

    #[test]
    fn lock_view_golden() {
        let got = render_text(&fixture::profile(), &ReportOptions::default());
        let want = "\
lockprof: 9 contentions on 2 locks in 5.00 s (backend tp_btf, aggregate mode, kernel 6.18.0-test, host testhost)
counters: stack_failed=2 (lost: stack_failed)
hold times: not available: tracepoints see waits only; `lockprof doctor` explains
yield_to: not profiled: yield_to cannot be probed on this kernel; `lockprof doctor` explains

 contended  total wait    max wait    avg wait    p99 wait  type          name
         5      100 us     90.0 us     20.0 us     90.0 us  rwlock:W      tasklist_lock (inferred; rwlock @ copy_process) @ 0xffffffff82a00000
         3     96.0 us     90.0 us     32.0 us     90.0 us    <- copy_process+0x6f1
         2     4.00 us     3.00 us     2.00 us     3.00 us    <- release_task+0x5a
         4     3.20 us     1.10 us      800 ns     1.10 us  mutex         mutex @ anon_pipe_write @ 0xffff888004a1b2c0
         4     3.20 us     1.10 us      800 ns     1.10 us    <- anon_pipe_write+0x1c4

slowest waits:
    90.0 us  rwlock:W      tasklist_lock  tid 4242 (forker)  <- copy_process+0x6f1
";
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn sort_and_top_pick_rows() {
        let opts = ReportOptions {
            query: Query { sort: SortKey::Contended, top: Some(1), ..Default::default() },
            ..Default::default()
        };
        let got = render_text(&fixture::profile(), &opts);
        assert!(got.contains("tasklist_lock"));
        assert!(!got.contains("anon_pipe_write @"));
        let opts = ReportOptions {
            query: Query { sort: SortKey::WaitAvg, top: Some(1), ..Default::default() },
            by: By::Task,
            ..Default::default()
        };
        let got = render_text(&fixture::profile(), &opts);
        assert!(got.contains("forker"), "{got}");
        assert!(!got.contains("writer"), "{got}");
    }

    #[test]
    fn lock_filter_by_name_or_address() {
        let opts = ReportOptions {
            query: Query { lock: Some("tasklist_lock".into()), ..Default::default() },
            ..Default::default()
        };
        let got = render_text(&fixture::profile(), &opts);
        assert!(got.contains("tasklist_lock (inferred") && !got.contains("mutex @ anon_pipe_write @"), "{got}");
        let opts = ReportOptions {
            query: Query { lock: Some("0xffff888004a1b2c0".into()), ..Default::default() },
            by: By::Caller,
            ..Default::default()
        };
        let got = render_text(&fixture::profile(), &opts);
        assert!(got.contains("anon_pipe_write+0x1c4") && !got.contains("copy_process+0x6f1"), "{got}");
    }

    #[test]
    fn caller_view_lists_stacks() {
        let opts = ReportOptions { by: By::Caller, ..Default::default() };
        let got = render_text(&fixture::profile(), &opts);
        let first = got.lines().find(|l| l.contains("<-") || l.contains("copy_process+0x6f1  [")).expect("row");
        assert!(first.contains("copy_process+0x6f1"), "{got}");
        assert!(got.contains("kernel_clone+0x9d"));
    }

    #[test]
    fn yield_section_golden() {
        let got = render_text(&fixture::profile_with_yields(), &ReportOptions::default());
        let section = got.split("KVM directed yield").nth(1).expect("yield section");
        let want = " (yield_to via fentry): 5 calls, 3 yielded, 1 failed, 1 errors
   calls  yielded  failed  errors  total time    max time    avg time    p99 time  caller path
       4        3       1       0      152 us     60.0 us     38.0 us     60.0 us  kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall
       1        0       0       1     1.00 us     1.00 us     1.00 us     1.00 us  kvm_vcpu_yield_to <- kvm_vcpu_on_spin
   calls  yielded  failed  errors  total time    max time    avg time    p99 time  yielder -> target (tid/pid comm)
       4        3       1       0      152 us     60.0 us     38.0 us     60.0 us  301/300 vcpu0 -> 302/300 vcpu1
       1        0       0       1     1.00 us     1.00 us     1.00 us     1.00 us  302/300 vcpu1 -> 301/300 vcpu0
run-queue lock contention inside yield_to: 2 waits, 3.00 us total, 2.00 us max (spinlock @ double_rq_lock)
";
        assert_eq!(section, want, "\n{got}");
        assert!(!got.contains("yield_to: not profiled"), "{got}");
    }

    #[test]
    fn yield_views_list_stacks_or_pairs_only() {
        let opts = ReportOptions { by: By::YieldCaller, ..Default::default() };
        let got = render_text(&fixture::profile_with_yields(), &opts);
        assert!(got.contains("kvm_emulate_hypercall+0x3c1 [kvm]"), "{got}");
        assert!(!got.contains("tasklist_lock (inferred"), "{got}");
        let got = render_text(&fixture::profile(), &opts);
        assert!(got.contains("no yield_to data"), "{got}");
    }

    #[test]
    fn empty_profile_says_so() {
        let got = render_text(&crate::model::Profile::default(), &ReportOptions::default());
        assert!(got.contains("no lock contention recorded"), "{got}");
    }

    #[test]
    fn by_cgroup_lists_cgroups_with_their_locks() {
        let p = fixture::profile_with_cgroups();
        let text = render_text(&p, &ReportOptions { by: By::Cgroup, ..Default::default() });
        let rows: Vec<&str> = text.lines().skip_while(|l| !l.ends_with("  cgroup")).collect();
        assert!(rows[1].ends_with("cron.service  (/system.slice/cron.service)"), "{text}");
        assert!(
            rows[2].contains("<- rwlock:W ") && rows[2].ends_with(" tasklist_lock  via copy_process+0x6f1"),
            "{text}"
        );
        assert!(rows[3].contains("docker:3f2a9c1b7d4e  (/system.slice/docker-3f2a9c1b7d4e"), "{text}");
        let only = Query { lock: Some("tasklist_lock".into()), ..Query::default() };
        let text = render_text(&p, &ReportOptions { by: By::Cgroup, query: only, ..Default::default() });
        assert!(text.contains("cron.service") && !text.contains("nginx"), "{text}");
        let none = render_text(&fixture::profile(), &ReportOptions { by: By::Cgroup, ..Default::default() });
        assert!(none.contains("no cgroups recorded"), "{none}");
    }

    #[test]
    fn with_user_stacks_callers_name_the_application_frame_too() {
        let mut p = fixture::profile_with_user_stacks();
        // What the builder does: the innermost frame outside libc.
        let c = std::sync::Arc::make_mut(&mut p.locks[1].callers);
        c[0].user_caller = c[0].user.as_ref().and_then(|u| u.app_frame());
        let text = render_text(&p, &ReportOptions::default());
        assert!(text.contains("<- anon_pipe_write+0x1c4 <- lockprof_test_writer+0x22 (lockprof_test.c:42)"), "{text}");
        let by_caller = render_text(&p, &ReportOptions { by: By::Caller, ..Default::default() });
        let stack: Vec<&str> = by_caller.lines().map(str::trim).collect();
        let k = stack.iter().position(|l| *l == "[kernel]").expect("the marker");
        assert_eq!(stack[k - 1], "vfs_write+0x2a1");
        assert_eq!(stack[k + 1], "lockprof_test_writer+0x22 (lockprof_test.c:42)");
        assert!(stack[k + 2].starts_with("libc.so.6+0x89305 [build-id 00112233"), "{by_caller}");
    }

    #[test]
    fn summed_rows_say_how_many_processes_and_addresses() {
        let p = fixture::profile_with_backends();
        let by = |group_by| {
            let out = crate::report::render(&p, &ReportOptions { group_by, ..Default::default() }).expect("rendered");
            String::from_utf8(out).expect("utf-8")
        };
        let title = |text: &str, start: &str| {
            let line = text.lines().find(|l| l.contains(start)).unwrap_or_else(|| panic!("no {start}:\n{text}"));
            line[line.find(start).expect("found")..].to_string()
        };
        let site = by(GroupBy::Site);
        assert_eq!(
            title(&site, "futex @ PGSemaphoreLock"),
            "futex @ PGSemaphoreLock in [shm: /dev/zero (deleted)] in postgres (3 processes, 3 addresses)"
        );
        assert_eq!(title(&site, "rwlock @"), "rwlock @ copy_process (tasklist_lock, inferred) @ 0xffffffff82a00000");
        assert_eq!(title(&site, "mutex @"), "mutex @ anon_pipe_write @ 0xffff888004a1b2c0", "one lock: as by address");
        assert!(site.contains("lockprof: 21 contentions on 5 locks in 3 rows"), "{site}");
        let name = by(GroupBy::Name);
        assert_eq!(
            title(&name, "futex @ PGSemaphoreLock"),
            "futex @ PGSemaphoreLock in [shm: /dev/zero (deleted)] in postgres (3 processes, 3 addresses)"
        );
        let address = by(GroupBy::Address);
        assert_eq!(
            title(&address, "futex @ PGSemaphoreLock"),
            "futex @ PGSemaphoreLock in [shm: /dev/zero (deleted)] @ 0x7ffa00001000 in postgres[8510]"
        );
    }
}
