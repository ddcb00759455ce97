//! The eBPF side's per-CPU counters and the kernel's per-program statistics.

use std::os::fd::RawFd;

use aya::maps::{MapData, PerCpuArray};
use profiler_common::counter;

/// The `COUNTERS` per-CPU array.
pub struct KernelCounters(PerCpuArray<MapData, u64>);

impl KernelCounters {
    pub(crate) fn new(map: PerCpuArray<MapData, u64>) -> KernelCounters {
        KernelCounters(map)
    }

    /// Sums over all CPUs, indexed by `profiler_common::counter` (a counter
    /// that cannot be read is 0).
    pub fn read(&self) -> CounterValues {
        let mut out = [0u64; counter::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.0.get(&(i as u32), 0).map(|v| v.iter().sum()).unwrap_or(0);
        }
        CounterValues(out)
    }

    /// Reads one counter, failing as the kernel answers (e.g. EPERM when
    /// map access needs a capability this process no longer has).
    pub fn probe(&self) -> std::io::Result<()> {
        self.0.get(&0, 0).map(|_| ()).map_err(|e| match e {
            aya::maps::MapError::SyscallError(s) => s.io_error,
            other => std::io::Error::other(other.to_string()),
        })
    }
}

/// Counter totals over all CPUs, indexed by `profiler_common::counter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterValues(pub [u64; counter::COUNT as usize]);

// By hand: the standard library derives `Default` for arrays of up to 32.
impl Default for CounterValues {
    fn default() -> Self {
        CounterValues([0; counter::COUNT as usize])
    }
}

impl CounterValues {
    /// A counter by index.
    pub fn get(&self, idx: u32) -> u64 {
        self.0.get(idx as usize).copied().unwrap_or(0)
    }

    /// Adds `n` to counter `idx` (one counted outside `COUNTERS`).
    pub fn add(&mut self, idx: u32, n: u64) {
        if let Some(v) = self.0.get_mut(idx as usize) {
            *v = v.saturating_add(n);
        }
    }

    /// (name, value) pairs.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        counter::NAMES.iter().copied().zip(self.0.iter().copied())
    }
}

/// A loaded program's name and file descriptor (for its fdinfo statistics).
#[derive(Clone, Debug)]
pub struct ProgramFd {
    /// The program's name (`profiler_common::names::prog`).
    pub name: String,
    /// Its fd, valid until the programs are detached.
    pub fd: RawFd,
}

/// Program runs the kernel skipped, from /proc/self/fdinfo's `recursion_misses`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecursionMisses {
    /// Over every program.
    pub total: u64,
    /// Of those, the `yield_to` programs' (each a call not measured).
    pub yield_to: u64,
}

/// Sums `recursion_misses` over `progs`. A kprobe's run is skipped whenever
/// any BPF program, or a BPF map syscall preempted mid-operation, holds the
/// CPU's `bpf_prog_active`; trampolines and raw tracepoints only skip nested
/// runs of the same program.
pub fn recursion_misses(progs: &[ProgramFd]) -> RecursionMisses {
    let mut out = RecursionMisses::default();
    for p in progs {
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", p.fd)) else { continue };
        let n = parse_fdinfo(&info, "recursion_misses").unwrap_or(0);
        out.total += n;
        if profiler_common::names::prog::YIELD.contains(&p.name.as_str()) {
            out.yield_to += n;
        }
    }
    out
}

fn parse_fdinfo(info: &str, key: &str) -> Option<u64> {
    info.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_kept_outside_the_map_adds_to_its_counter() {
        let mut c = CounterValues::default();
        c.0[counter::AGG_CACHE_MISSED as usize] = 5;
        c.add(counter::AGG_CACHE_MISSED, 8);
        c.add(counter::COUNT, 1);
        assert_eq!(c.get(counter::AGG_CACHE_MISSED), 13);
        assert_eq!(c.named().find(|(n, _)| *n == "agg_cache_missed"), Some(("agg_cache_missed", 13)));
        assert_eq!(c.0.iter().sum::<u64>(), 13, "an index past the counters adds nothing");
    }

    #[test]
    fn fdinfo_field() {
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t7\nverified_insns:\t120\n";
        assert_eq!(parse_fdinfo(info, "recursion_misses"), Some(7));
        assert_eq!(parse_fdinfo(info, "run_cnt"), Some(0));
        assert_eq!(parse_fdinfo(info, "missing"), None);
        assert_eq!(recursion_misses(&[]), RecursionMisses::default());
    }

    #[test]
    fn counters_are_named_in_order() {
        let mut c = CounterValues::default();
        c.0[counter::RINGBUF_FULL as usize] = 3;
        let named: Vec<_> = c.named().collect();
        assert_eq!(named.len(), counter::COUNT as usize);
        assert_eq!(named[1], ("ringbuf_full", 3));
        assert_eq!(c.get(counter::RINGBUF_FULL), 3);
        assert_eq!(c.get(99), 0);
    }
}
