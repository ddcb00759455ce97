//! The JSON report (stable schema, documented in the README).

use serde_json::{Value, json};

use super::ReportOptions;
use crate::model::{Profile, Stats, YieldStats, mode_name, placeholders, type_name};

/// Schema identifier carried in every JSON report.
pub const SCHEMA: &str = "lockprof-report/1";

fn hold_fields(h: Option<&Stats>) -> (Value, Value, Value, Value) {
    match h {
        Some(h) => (json!(h.total_ns()), json!(h.max_ns()), json!(h.avg_ns()), json!(h.quantile_ns(0.99))),
        None => (Value::Null, Value::Null, Value::Null, Value::Null),
    }
}

fn yield_fields(s: &YieldStats) -> serde_json::Map<String, Value> {
    let l = &s.latency;
    [
        ("calls", s.calls()),
        ("yielded", s.yielded),
        ("failed", s.failed),
        ("errors", s.errors),
        ("latency_total_ns", l.total_ns()),
        ("latency_max_ns", l.max_ns()),
        ("latency_avg_ns", l.avg_ns()),
        ("latency_p99_ns", l.quantile_ns(0.99)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), json!(v)))
    .collect()
}

/// The `yield_to` object: always present; `available` says whether
/// `yield_to` was probed (else `unavailable_reason` says why and the
/// counts are zero).
fn yield_json(p: &Profile, opts: &ReportOptions) -> Value {
    let empty = YieldStats::default();
    let y = p.yield_to.as_ref();
    let mut obj = yield_fields(y.map_or(&empty, |y| &y.total));
    obj.insert("available".into(), json!(p.meta.yield_backend.is_some()));
    obj.insert("backend".into(), json!(p.meta.yield_backend));
    obj.insert("unavailable_reason".into(), json!(p.meta.yield_unavailable));
    let callers: Vec<Value> = opts
        .query
        .yield_callers(p)
        .into_iter()
        .map(|c| {
            let mut m = yield_fields(&c.stats);
            m.insert("caller".into(), json!(c.caller));
            m.insert("path".into(), json!(c.path));
            m.insert("stack".into(), json!(c.stack));
            Value::Object(m)
        })
        .collect();
    let pairs: Vec<Value> = opts
        .query
        .yield_pairs(p)
        .into_iter()
        .map(|pr| {
            let mut m = yield_fields(&pr.stats);
            for (k, v) in [
                ("tid", json!(pr.tid)),
                ("pid", json!(pr.pid)),
                ("comm", json!(pr.comm)),
                ("target_tid", json!(pr.target_tid)),
                ("target_pid", json!(pr.target_pid)),
                ("target_comm", json!(pr.target_comm)),
            ] {
                m.insert(k.into(), v);
            }
            Value::Object(m)
        })
        .collect();
    obj.insert("callers".into(), json!(callers));
    obj.insert("pairs".into(), json!(pairs));
    let rq = y.map(|y| y.rq_contention.clone()).unwrap_or_default();
    obj.insert(
        "rq_contention".into(),
        json!({
            "waits": rq.waits, "wait_total_ns": rq.wait_total_ns, "wait_max_ns": rq.wait_max_ns, "locks": rq.locks,
        }),
    );
    Value::Object(obj)
}

/// Whether a caller row names a caller: not a bracketed reason (no stack,
/// no frame outside the lock functions), except the caller cap's overflow
/// row, whose waits had callers, folded.
fn caller_known(caller: &str) -> bool {
    !placeholders::is_placeholder(caller) || caller == placeholders::OTHER_STACKS
}

/// The report as a JSON value.
pub fn to_json(p: &Profile, opts: &ReportOptions) -> Value {
    let locks: Vec<Value> = opts
        .query
        .locks(p)
        .into_iter()
        .map(|l| {
            let (ht, hm, ha, hp) = hold_fields(l.hold.as_ref());
            let callers: Vec<Value> = l
                .callers
                .iter()
                .map(|c| {
                    let (ht, hm, ha, hp) = hold_fields(c.hold.as_ref());
                    json!({
                        "caller": c.caller,
                        "caller_known": caller_known(&c.caller),
                        "user_caller": c.user_caller,
                        "stack": c.stack,
                        "contended": c.wait.count(),
                        "wait_total_ns": c.wait.total_ns(),
                        "wait_max_ns": c.wait.max_ns(),
                        "wait_avg_ns": c.wait.avg_ns(),
                        "wait_p99_ns": c.wait.quantile_ns(0.99),
                        "hold_total_ns": ht, "hold_max_ns": hm, "hold_avg_ns": ha, "hold_p99_ns": hp,
                        "cgroups": c.cgroups.iter().map(|s| json!({
                            "cgroup_id": s.id, "contended": s.count, "wait_total_ns": s.wait_ns, "wait_max_ns": s.max_ns,
                        })).collect::<Vec<Value>>(),
                    })
                })
                .collect();
            let mut row = json!({
                "name": l.name,
                "name_source": l.name_source,
                "class": l.class,
                "slab": l.slab,
                "field": l.field,
                "rt_base": l.rt_base,
                "addr": format!("{:#x}", l.addr),
                "addresses": l.addresses,
                "processes": l.processes,
                "type": type_name(l.lock_type),
                "mode": mode_name(l.mode),
                "contended": l.wait.count(),
                "wait_total_ns": l.wait.total_ns(),
                "wait_min_ns": l.wait.min_ns(),
                "wait_max_ns": l.wait.max_ns(),
                "wait_avg_ns": l.wait.avg_ns(),
                "wait_p50_ns": l.wait.quantile_ns(0.5),
                "wait_p90_ns": l.wait.quantile_ns(0.9),
                "wait_p99_ns": l.wait.quantile_ns(0.99),
                "hold_total_ns": ht, "hold_max_ns": hm, "hold_avg_ns": ha, "hold_p99_ns": hp,
                "callers": callers,
                "owners": l.owners.iter().map(|o| json!({
                    "owner_kind": o.kind,
                    "owner_comm": o.comm,
                    "owner_tid": o.tid,
                    "owner_pid": o.pid,
                    "owner_caller": o.caller,
                    "owner_stack": o.stack,
                    "owner_asleep_stack": o.asleep_stack,
                    "waits": o.waits,
                    "wait_caused_ns": o.wait_caused_ns,
                    "wait_caused_max_ns": o.wait_caused_max_ns,
                })).collect::<Vec<Value>>(),
            });
            // A user-space lock's process (kernel locks have none; a row
            // summing several processes has no pid, and no process unless
            // they share its name).
            if let Some(obj) = row.as_object_mut() {
                if let Some(pid) = l.pid {
                    obj.insert("pid".into(), json!(pid));
                }
                if l.pid.is_some() || l.process.is_some() {
                    obj.insert("process".into(), json!(l.process));
                }
            }
            row
        })
        .collect();
    let tasks: Vec<Value> = opts
        .query
        .tasks(p)
        .into_iter()
        .map(|t| {
            json!({
                "tid": t.tid, "pid": t.tgid, "comm": t.comm,
                "contended": t.wait.count(),
                "wait_total_ns": t.wait.total_ns(),
                "wait_max_ns": t.wait.max_ns(),
                "wait_avg_ns": t.wait.avg_ns(),
                "wait_p99_ns": t.wait.quantile_ns(0.99),
            })
        })
        .collect();
    let slowest: Vec<Value> = p
        .slowest
        .iter()
        .map(|w| {
            json!({
                "wait_ns": w.wait_ns, "end_monotonic_ns": w.end_monotonic_ns,
                "addr": format!("{:#x}", w.addr), "type": type_name(w.lock_type), "mode": mode_name(w.mode),
                "lock": w.lock, "tid": w.tid, "pid": w.tgid, "comm": w.comm, "caller": w.caller, "stack": w.stack,
            })
        })
        .collect();
    let cgroups: Vec<Value> = opts
        .query
        .cgroups(p)
        .into_iter()
        .map(|c| {
            let locks: Vec<Value> = opts
                .query
                .cgroup_locks(p, c)
                .into_iter()
                .map(|l| {
                    json!({
                        "lock": l.lock, "addr": format!("{:#x}", l.addr),
                        "type": type_name(l.lock_type), "mode": mode_name(l.mode),
                        "contended": l.count, "wait_total_ns": l.wait_ns, "wait_max_ns": l.max_ns,
                        "caller": l.caller, "user_caller": l.user_caller,
                    })
                })
                .collect();
            json!({
                "cgroup_id": c.id, "name": c.name, "path": c.path,
                "contended": c.wait.count(),
                "wait_total_ns": c.wait.total_ns(),
                "wait_max_ns": c.wait.max_ns(),
                "wait_avg_ns": c.wait.avg_ns(),
                "wait_p99_ns": c.wait.quantile_ns(0.99),
                "locks": locks,
            })
        })
        .collect();
    let m = &p.meta;
    let mut v = json!({
        "schema": SCHEMA,
        "backend": m.backend,
        "mode": m.mode,
        "kernel": m.kernel,
        "hostname": m.hostname,
        "duration_s": m.duration_s,
        "started_unix_s": m.started_unix_s,
        "events": m.events,
        "drops": m.drops,
        "hold_unavailable": m.hold_unavailable,
        "hold_backend": m.hold_backend,
        "notes": m.notes,
        "filters": m.filters,
        "locks": locks,
        "tasks": tasks,
        "slowest": slowest,
        "cgroups": cgroups,
        "yield_to": yield_json(p, opts),
    });
    if let Some(o) = v.as_object_mut() {
        // Only a recording an incident trigger wrote has this object.
        if let Some(i) = &p.incident {
            o.insert("incident".into(), json!(i));
        }
        // Only a recording made around a command (`record -- COMMAND`), or
        // one round of several, has these.
        if let Some(c) = &m.command {
            o.insert("command".into(), json!(c));
        }
        if let Some(r) = &m.round {
            o.insert("round".into(), json!(r));
        }
    }
    v
}

/// Renders the JSON report, pretty-printed with a trailing newline.
pub fn render_json(p: &Profile, opts: &ReportOptions) -> String {
    let mut s = serde_json::to_string_pretty(&to_json(p, opts)).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn schema_fields_and_values() {
        let v = to_json(&fixture::profile(), &ReportOptions::default());
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["backend"], "tp_btf");
        assert_eq!(v["kernel"], "6.18.0-test");
        assert_eq!(v["duration_s"], 5.0);
        assert_eq!(v["drops"]["stack_failed"], 2);
        let l = &v["locks"][0];
        assert_eq!(l["name"], "tasklist_lock");
        assert_eq!(l["name_source"], "inferred");
        assert_eq!(l["addr"], "0xffffffff82a00000");
        assert_eq!(l["type"], "rwlock");
        assert_eq!(l["mode"], "write");
        assert_eq!(l["contended"], 5);
        assert_eq!(l["wait_total_ns"], 100_000);
        assert_eq!(l["wait_min_ns"], 1_000);
        assert_eq!(l["wait_max_ns"], 90_000);
        assert_eq!(l["wait_avg_ns"], 20_000);
        assert!(l["wait_p50_ns"].as_u64().is_some_and(|p| (2_900..=3_100).contains(&p)), "{}", l["wait_p50_ns"]);
        assert_eq!(l["wait_p99_ns"], 90_000);
        assert!(l["hold_total_ns"].is_null() && l["hold_max_ns"].is_null() && l["hold_avg_ns"].is_null());
        let c = &l["callers"][0];
        assert_eq!(c["caller"], "copy_process+0x6f1");
        assert_eq!(c["caller_known"], true);
        assert_eq!(c["stack"][1], "copy_process+0x6f1");
        assert_eq!(c["contended"], 3);
        assert_eq!(c["wait_total_ns"], 96_000);
        assert_eq!(c["wait_max_ns"], 90_000);
        let pipe = &v["locks"][1];
        assert!(pipe["name"].is_null() && pipe["name_source"].is_null());
        assert_eq!(pipe["class"], "mutex @ anon_pipe_write");
        assert_eq!(pipe["mode"], "exclusive");
        assert_eq!(v["tasks"][0]["comm"], "forker");
        assert_eq!(v["mode"], "aggregate");
        let slow = &v["slowest"][0];
        assert_eq!(slow["wait_ns"], 90_000);
        assert_eq!(slow["lock"], "tasklist_lock");
        assert_eq!(slow["type"], "rwlock");
        assert_eq!(slow["caller"], "copy_process+0x6f1");
    }

    #[test]
    fn yield_to_object() {
        let v = to_json(&fixture::profile_with_yields(), &ReportOptions::default());
        let y = &v["yield_to"];
        assert_eq!(y["available"], true);
        assert_eq!(y["backend"], "fentry");
        assert_eq!((y["calls"].as_u64(), y["yielded"].as_u64()), (Some(5), Some(3)));
        assert_eq!((y["failed"].as_u64(), y["errors"].as_u64()), (Some(1), Some(1)));
        assert_eq!(y["latency_total_ns"], 153_000);
        assert_eq!(y["latency_max_ns"], 60_000);
        let c = &y["callers"][0];
        assert_eq!(c["caller"], "kvm_vcpu_yield_to+0x5f [kvm]");
        assert_eq!(c["path"], "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall");
        assert_eq!(c["calls"], 4);
        assert_eq!(c["stack"][2], "kvm_sched_yield+0x8a [kvm]");
        let pr = &y["pairs"][0];
        assert_eq!((pr["tid"].as_u64(), pr["target_tid"].as_u64()), (Some(301), Some(302)));
        assert_eq!(pr["target_comm"], "vcpu1");
        assert_eq!(pr["yielded"], 3);
        assert_eq!(y["rq_contention"]["waits"], 2);

        let v = to_json(&fixture::profile(), &ReportOptions::default());
        let y = &v["yield_to"];
        assert_eq!(y["available"], false);
        assert_eq!(y["unavailable_reason"], "yield_to cannot be probed on this kernel");
        assert_eq!(y["calls"], 0);
        assert_eq!(y["callers"].as_array().map(Vec::len), Some(0));
    }

    #[test]
    fn empty_profile_is_valid_json_with_empty_locks() {
        let s = render_json(&Profile::default(), &ReportOptions::default());
        let v: Value = serde_json::from_str(&s).expect("valid json");
        assert_eq!(v["locks"].as_array().map(Vec::len), Some(0));
    }

    #[test]
    fn owners_are_listed_under_their_lock() {
        use crate::model::{OwnerKind, OwnerProfile};
        let mut p = fixture::profile();
        p.locks[1].owners = vec![OwnerProfile {
            kind: OwnerKind::Task,
            tid: 12,
            pid: 10,
            comm: "writer".into(),
            caller: "anon_pipe_write+0x43".into(),
            stack: vec!["anon_pipe_write+0x43".into(), "vfs_write+0x398".into()],
            asleep_stack: Vec::new(),
            waits: 3,
            wait_caused_ns: 3_000,
            wait_caused_max_ns: 2_000,
        }];
        let v: Value = serde_json::from_str(&render_json(&p, &ReportOptions::default())).expect("json");
        let o = &v["locks"][1]["owners"][0];
        assert_eq!(o["owner_kind"], "task");
        assert_eq!(o["owner_comm"], "writer");
        assert_eq!(o["owner_tid"], 12);
        assert_eq!(o["owner_stack"][1], "vfs_write+0x398");
        assert_eq!(
            (o["waits"].as_u64(), o["wait_caused_ns"].as_u64(), o["wait_caused_max_ns"].as_u64()),
            (Some(3), Some(3_000), Some(2_000))
        );
        assert_eq!(v["locks"][0]["owners"].as_array().map(Vec::len), Some(0));
    }

    #[test]
    fn cgroups_keep_their_raw_path_and_split_callers() {
        let v = to_json(&fixture::profile_with_cgroups(), &ReportOptions::default());
        let c = &v["cgroups"][1];
        assert_eq!(c["name"], "docker:3f2a9c1b7d4e");
        assert!(c["path"].as_str().is_some_and(|p| p.starts_with("/system.slice/docker-3f2a9c1b7d4e5f60")));
        assert_eq!((c["cgroup_id"].as_u64(), c["contended"].as_u64()), (Some(4242), Some(3)));
        assert_eq!(c["locks"][0]["lock"], "mutex @ anon_pipe_write");
        let split = &v["locks"][1]["callers"][0]["cgroups"];
        assert_eq!(split[0]["cgroup_id"], 4242);
        assert_eq!(split[1]["wait_total_ns"], 500);
    }

    #[test]
    fn a_site_row_has_its_process_and_counts_but_no_pid() {
        use crate::report::{Format, GroupBy, render};
        let opts = ReportOptions { group_by: GroupBy::Site, format: Format::Json, ..Default::default() };
        let v: Value =
            serde_json::from_slice(&render(&fixture::profile_with_backends(), &opts).expect("rendered")).expect("json");
        let sem = v["locks"].as_array().and_then(|l| l.iter().find(|l| l["type"] == "futex")).expect("the futex row");
        assert_eq!((sem["processes"].as_u64(), sem["addresses"].as_u64()), (Some(3), Some(3)));
        assert_eq!(sem["process"], "postgres");
        assert!(sem.get("pid").is_none(), "{sem}");
        let kernel = &v["locks"][0];
        assert!(kernel["processes"].is_null() && kernel.get("process").is_none(), "{kernel}");
        let plain = to_json(&fixture::profile_with_backends(), &ReportOptions::default());
        let one = plain["locks"].as_array().and_then(|l| l.iter().find(|l| l["type"] == "futex")).expect("a futex");
        assert_eq!((one["pid"].as_u64(), one["process"].as_str()), (Some(8510), Some("postgres")));
        assert!(one["processes"].is_null() && one["addresses"].is_null());
    }

    #[test]
    fn a_caller_is_known_unless_it_is_a_reason_but_the_callers_overflow_had_callers() {
        assert!(caller_known("copy_process+0x6f1"));
        assert!(!caller_known(placeholders::STACK_SKIPPED));
        assert!(!caller_known(placeholders::UNKNOWN_CALLER));
        assert!(caller_known(placeholders::OTHER_STACKS));
    }
}
