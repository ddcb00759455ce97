//! CSV output, one row per lock, caller or task, header first (like perf's `-x`).

use super::{By, ReportOptions};
use crate::model::{Profile, Stats, YieldStats, mode_name, type_name};

/// One CSV field, quoted as RFC 4180 when it holds the separator, a quote or a line break.
pub(crate) fn field(s: &str, sep: char) -> String {
    if s.contains(sep) || s.contains('"') || s.contains('\n') || s.contains('\r') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn stats(s: &Stats) -> [String; 6] {
    [s.count(), s.total_ns(), s.min_ns(), s.max_ns(), s.avg_ns(), s.quantile_ns(0.99)].map(|v| v.to_string())
}

const STAT_HEADER: [&str; 6] =
    ["contended", "wait_total_ns", "wait_min_ns", "wait_max_ns", "wait_avg_ns", "wait_p99_ns"];

const YIELD_HEADER: [&str; 8] =
    ["calls", "yielded", "failed", "errors", "latency_total_ns", "latency_max_ns", "latency_avg_ns", "latency_p99_ns"];

fn yield_stats(s: &YieldStats) -> [String; 8] {
    let l = &s.latency;
    [s.calls(), s.yielded, s.failed, s.errors, l.total_ns(), l.max_ns(), l.avg_ns(), l.quantile_ns(0.99)]
        .map(|v| v.to_string())
}

/// Renders CSV with `opts.separator`.
pub fn render_csv(p: &Profile, opts: &ReportOptions) -> String {
    let sep = opts.separator;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let hold = |h: Option<&Stats>| match h {
        Some(h) => [h.total_ns().to_string(), h.max_ns().to_string(), h.avg_ns().to_string()],
        None => [String::new(), String::new(), String::new()],
    };
    match opts.by {
        By::Lock => {
            let mut h: Vec<String> =
                ["name", "name_source", "class", "slab", "field", "addr", "type", "mode"].map(String::from).to_vec();
            h.extend(STAT_HEADER.map(String::from));
            h.extend(["hold_total_ns", "hold_max_ns", "hold_avg_ns"].map(String::from));
            h.extend(["pid", "process", "addresses", "processes"].map(String::from));
            rows.push(h);
            let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
            for l in opts.query.locks(p) {
                let mut r = vec![
                    l.name.clone().unwrap_or_default(),
                    l.name_source.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_default(),
                    l.class.clone(),
                    l.slab.clone().unwrap_or_default(),
                    l.field.clone().unwrap_or_default(),
                    format!("{:#x}", l.addr),
                    type_name(l.lock_type).to_string(),
                    mode_name(l.mode).to_string(),
                ];
                r.extend(stats(&l.wait));
                r.extend(hold(l.hold.as_ref()));
                r.extend([opt(l.pid), l.process.clone().unwrap_or_default(), opt(l.addresses), opt(l.processes)]);
                rows.push(r);
            }
        }
        By::Caller => {
            let mut h: Vec<String> = ["lock", "addr", "type", "mode", "caller", "stack"].map(String::from).to_vec();
            h.extend(STAT_HEADER.map(String::from));
            h.extend(["hold_total_ns", "hold_max_ns", "hold_avg_ns"].map(String::from));
            rows.push(h);
            for (l, c) in opts.query.callers(p) {
                let mut r = vec![
                    l.display_name().to_string(),
                    format!("{:#x}", l.addr),
                    type_name(l.lock_type).to_string(),
                    mode_name(l.mode).to_string(),
                    c.caller.clone(),
                    c.stack.join(";"),
                ];
                r.extend(stats(&c.wait));
                r.extend(hold(c.hold.as_ref()));
                rows.push(r);
            }
        }
        By::Owner => {
            rows.push(
                [
                    "lock",
                    "addr",
                    "type",
                    "mode",
                    "owner_kind",
                    "owner_tid",
                    "owner_pid",
                    "owner_comm",
                    "owner_caller",
                    "owner_stack",
                    "owner_asleep_stack",
                    "waits",
                    "wait_caused_ns",
                    "wait_caused_max_ns",
                ]
                .map(String::from)
                .to_vec(),
            );
            for (l, o) in opts.query.owners(p) {
                rows.push(vec![
                    l.display_name().to_string(),
                    format!("{:#x}", l.addr),
                    type_name(l.lock_type).to_string(),
                    mode_name(l.mode).to_string(),
                    format!("{:?}", o.kind).to_lowercase(),
                    o.tid.to_string(),
                    o.pid.to_string(),
                    o.comm.clone(),
                    o.caller.clone(),
                    o.stack.join(";"),
                    o.asleep_stack.join(";"),
                    o.waits.to_string(),
                    o.wait_caused_ns.to_string(),
                    o.wait_caused_max_ns.to_string(),
                ]);
            }
        }
        By::Task => {
            let mut h: Vec<String> = ["tid", "pid", "comm"].map(String::from).to_vec();
            h.extend(STAT_HEADER.map(String::from));
            rows.push(h);
            for t in opts.query.tasks(p) {
                let mut r = vec![t.tid.to_string(), t.tgid.to_string(), t.comm.clone()];
                r.extend(stats(&t.wait));
                rows.push(r);
            }
        }
        By::Cgroup => {
            rows.push(
                [
                    "cgroup",
                    "path",
                    "cgroup_id",
                    "lock",
                    "addr",
                    "type",
                    "mode",
                    "contended",
                    "wait_total_ns",
                    "wait_max_ns",
                    "caller",
                    "user_caller",
                ]
                .map(String::from)
                .to_vec(),
            );
            for c in opts.query.cgroups(p) {
                for l in opts.query.cgroup_locks(p, c) {
                    rows.push(vec![
                        c.name.clone(),
                        c.path.clone().unwrap_or_default(),
                        c.id.to_string(),
                        l.lock.clone(),
                        format!("{:#x}", l.addr),
                        type_name(l.lock_type).to_string(),
                        mode_name(l.mode).to_string(),
                        l.count.to_string(),
                        l.wait_ns.to_string(),
                        l.max_ns.to_string(),
                        l.caller.clone(),
                        l.user_caller.clone().unwrap_or_default(),
                    ]);
                }
            }
        }
        By::YieldCaller => {
            let mut h: Vec<String> = ["caller", "path", "stack"].map(String::from).to_vec();
            h.extend(YIELD_HEADER.map(String::from));
            rows.push(h);
            for c in opts.query.yield_callers(p) {
                let mut r = vec![c.caller.clone(), c.path.clone(), c.stack.join(";")];
                r.extend(yield_stats(&c.stats));
                rows.push(r);
            }
        }
        By::YieldPair => {
            let mut h: Vec<String> =
                ["tid", "pid", "comm", "target_tid", "target_pid", "target_comm"].map(String::from).to_vec();
            h.extend(YIELD_HEADER.map(String::from));
            rows.push(h);
            for pr in opts.query.yield_pairs(p) {
                let mut r = vec![
                    pr.tid.to_string(),
                    pr.pid.to_string(),
                    pr.comm.clone(),
                    pr.target_tid.to_string(),
                    pr.target_pid.to_string(),
                    pr.target_comm.clone(),
                ];
                r.extend(yield_stats(&pr.stats));
                rows.push(r);
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().map(|f| field(f, sep)).collect();
        out.push_str(&line.join(&sep.to_string()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    fn parse(s: &str, sep: u8) -> Vec<csv::StringRecord> {
        let mut rd = csv::ReaderBuilder::new().has_headers(false).delimiter(sep).from_reader(s.as_bytes());
        rd.records().collect::<Result<_, _>>().expect("valid csv")
    }

    #[test]
    fn lock_rows_parse_with_a_real_csv_reader() {
        let out = render_csv(&fixture::profile(), &ReportOptions::default());
        let rows = parse(&out, b',');
        assert_eq!(rows.len(), 3);
        assert_eq!(&rows[0][0], "name");
        assert_eq!(rows[0].len(), rows[1].len());
        let col = |name: &str| rows[0].iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
        assert_eq!(&rows[1][col("name")], "tasklist_lock");
        assert_eq!(&rows[1][col("name_source")], "inferred");
        assert_eq!(&rows[1][col("type")], "rwlock");
        assert_eq!(&rows[1][col("contended")], "5");
        assert_eq!(&rows[1][col("wait_total_ns")], "100000");
        assert_eq!(&rows[1][col("slab")], "", "no slab cache known");
        assert_eq!(&rows[1][col("hold_total_ns")], "", "hold is empty when unavailable");
    }

    #[test]
    fn separator_and_quoting() {
        let opts = ReportOptions { by: By::Task, separator: ';', ..Default::default() };
        let out = render_csv(&fixture::profile(), &opts);
        let rows = parse(&out, b';');
        assert_eq!(&rows[2][2], "writer, \"quoted\"");
        let opts = ReportOptions { by: By::Task, ..Default::default() };
        let rows = parse(&render_csv(&fixture::profile(), &opts), b',');
        assert_eq!(&rows[2][2], "writer, \"quoted\"");
    }

    #[test]
    fn caller_rows() {
        let opts = ReportOptions { by: By::Caller, ..Default::default() };
        let rows = parse(&render_csv(&fixture::profile(), &opts), b',');
        assert_eq!(rows.len(), 4);
        assert_eq!(&rows[1][4], "copy_process+0x6f1");
        assert!(rows[1][5].contains("kernel_clone+0x9d"));
    }

    #[test]
    fn yield_caller_and_pair_rows() {
        let p = fixture::profile_with_yields();
        let rows = parse(&render_csv(&p, &ReportOptions { by: By::YieldCaller, ..Default::default() }), b',');
        assert_eq!(rows.len(), 3);
        assert_eq!(&rows[0][3], "calls");
        assert_eq!(&rows[1][1], "kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall");
        assert_eq!((&rows[1][3], &rows[1][4], &rows[1][5], &rows[1][6]), ("4", "3", "1", "0"));
        assert_eq!(&rows[1][7], "152000");
        let rows = parse(&render_csv(&p, &ReportOptions { by: By::YieldPair, ..Default::default() }), b',');
        assert_eq!(rows.len(), 3);
        assert_eq!((&rows[1][0], &rows[1][3], &rows[1][5]), ("301", "302", "vcpu1"));
        assert_eq!(&rows[2][9], "1", "errors of the second pair");
        // Without yield data: the header only.
        let rows =
            parse(&render_csv(&fixture::profile(), &ReportOptions { by: By::YieldPair, ..Default::default() }), b',');
        assert_eq!(rows.len(), 1);
    }

    #[test]
    fn empty_profile_has_header_only() {
        let rows = parse(&render_csv(&Profile::default(), &ReportOptions::default()), b',');
        assert_eq!(rows.len(), 1);
    }

    #[test]
    fn by_cgroup_has_one_row_per_cgroup_and_lock() {
        let p = fixture::profile_with_cgroups();
        let rows = parse(&render_csv(&p, &ReportOptions { by: By::Cgroup, ..Default::default() }), b',');
        let cells = |r: usize, from: usize, to: usize| (from..to).map(|i| rows[r][i].to_string()).collect::<Vec<_>>();
        assert_eq!(cells(0, 0, 4), ["cgroup", "path", "cgroup_id", "lock"]);
        assert_eq!(rows.len(), 4);
        assert_eq!(cells(1, 0, 4), ["cron.service", "/system.slice/cron.service", "12", "tasklist_lock"]);
        assert_eq!(cells(2, 7, 12), ["3", "2700", "1100", "anon_pipe_write+0x1c4", ""]);
    }

    #[test]
    fn lock_rows_carry_process_and_counts() {
        use crate::report::{Format, GroupBy};
        let opts = ReportOptions { group_by: GroupBy::Site, format: Format::Csv, ..Default::default() };
        let out = crate::report::render(&fixture::profile_with_backends(), &opts).expect("rendered");
        let rows = parse(std::str::from_utf8(&out).expect("utf-8"), b',');
        let col = |name: &str| rows[0].iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
        let sem = rows.iter().find(|r| &r[col("type")] == "futex").expect("the futex row");
        assert_eq!(
            (&sem[col("pid")], &sem[col("process")], &sem[col("processes")], &sem[col("addresses")]),
            ("", "postgres", "3", "3")
        );
        let address = parse(&render_csv(&fixture::profile_with_backends(), &ReportOptions::default()), b',');
        let one = address.iter().find(|r| &r[col("type")] == "futex").expect("a futex");
        assert_eq!((&one[col("pid")], &one[col("process")], &one[col("processes")]), ("8510", "postgres", ""));
    }
}
