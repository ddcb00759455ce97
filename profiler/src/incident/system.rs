//! The system's state around a trigger, from `/proc` (cheap reads, once per
//! incident): load, runnable and blocked tasks, and the threads that used
//! the most CPU from the trigger to the end of the window.

use std::collections::HashMap;
use std::time::Instant;

use crate::model::{CpuTask, SystemState};

/// How many of the busiest threads an incident lists.
pub const TOP_TASKS: usize = 10;

/// CPU time of every thread at one moment.
#[derive(Debug)]
pub struct CpuSample {
    at: Instant,
    /// tid -> (pid, comm, user + system clock ticks).
    ticks: HashMap<u32, (u32, String, u64)>,
}

/// A thread's name and CPU ticks from the text of `/proc/<pid>/task/<tid>/stat`.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3 of proc(5), utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

fn numeric_dirs(path: &str) -> impl Iterator<Item = u32> {
    std::fs::read_dir(path).into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
}

impl CpuSample {
    /// Reads every thread's CPU time now.
    pub fn take() -> CpuSample {
        let mut ticks = HashMap::new();
        for pid in numeric_dirs("/proc") {
            for tid in numeric_dirs(&format!("/proc/{pid}/task")) {
                if let Some((comm, t)) =
                    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok().and_then(|s| parse_stat(&s))
                {
                    ticks.insert(tid, (pid, comm, t));
                }
            }
        }
        CpuSample { at: Instant::now(), ticks }
    }

    /// The busiest threads from `self` to `later`, most CPU first.
    pub fn busiest(&self, later: &CpuSample, n: usize) -> Vec<CpuTask> {
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let secs = later.at.saturating_duration_since(self.at).as_secs_f64().max(1e-3);
        let mut out: Vec<CpuTask> = later
            .ticks
            .iter()
            .filter_map(|(&tid, (pid, comm, t))| {
                let before = self.ticks.get(&tid).map_or(0, |b| b.2);
                let used = t.saturating_sub(before);
                (used > 0).then(|| CpuTask {
                    tid,
                    pid: *pid,
                    comm: comm.clone(),
                    cpu_pct: used as f64 / hz / secs * 100.0,
                })
            })
            .collect();
        out.sort_by(|a, b| b.cpu_pct.total_cmp(&a.cpu_pct).then(a.tid.cmp(&b.tid)));
        out.truncate(n);
        out
    }
}

/// Load averages, runnable and blocked tasks and CPUs, now (no top tasks yet).
pub fn state_now() -> SystemState {
    let mut s = SystemState::default();
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        for (slot, v) in s.loadavg.iter_mut().zip(l.split_whitespace()) {
            *slot = v.parse().unwrap_or(0.0);
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        for line in stat.lines() {
            let mut it = line.split_whitespace();
            match (it.next(), it.next().and_then(|v| v.parse().ok())) {
                (Some("procs_running"), Some(v)) => s.procs_running = v,
                (Some("procs_blocked"), Some(v)) => s.procs_blocked = v,
                _ => {}
            }
        }
    }
    s.cpus = std::thread::available_parallelism().map_or(0, |n| n.get() as u32);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 1 0 12345 0 0";
        assert_eq!(parse_stat(line), Some(("we (ird) name".to_string(), 42)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_seen_and_its_busy_thread_ranks_first() {
        let before = CpuSample::take();
        assert!(before.ticks.contains_key(&std::process::id()), "the sample sees this process");
        // Burn CPU until the kernel's tick accounting shows it (no fixed time).
        // SAFETY: gettid has no memory effects.
        let tid = unsafe { libc::gettid() } as u32;
        let start = Instant::now();
        let mut x = 0u64;
        loop {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            let now = CpuSample::take();
            if now.ticks.get(&tid).map_or(0, |t| t.2) > before.ticks.get(&tid).map_or(0, |t| t.2) + 2 {
                let top = before.busiest(&now, 50);
                assert!(top.iter().any(|t| t.tid == tid && t.cpu_pct > 0.0), "{top:?}");
                break;
            }
            assert!(start.elapsed().as_secs() < 60, "no CPU time accounted in 60 s");
        }
        std::hint::black_box(x);
        let s = state_now();
        assert!(s.cpus >= 1);
    }
}
