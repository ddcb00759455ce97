//! How command-line words become library values: clap's `ValueEnum` for the
//! library's enums (whose names they own), and the value parsers every
//! subcommand shares (one duration parser, one type-list parser).

use clap::{ValueEnum, builder::PossibleValue};
use profiler_common::LockType;

use crate::{
    diff::{DiffBy, DiffFormat, TestMetric},
    ebpf::BackendChoice,
    export::Metric,
    model::{parse_type, type_name},
    query::SortKey,
    report::{By, Format, GroupBy},
    session::{Mode, UserUnwind},
    workload::Workload,
};

/// `ValueEnum` for a library enum with `name()`: its variants and their help.
macro_rules! value_enum {
    ($t:ty { $($v:path => $help:literal),* $(,)? }) => {
        impl ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($v),*]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(PossibleValue::new(self.name()).help(match self {
                    $($v => $help,)*
                }))
            }
        }
    };
}

value_enum!(GroupBy {
    GroupBy::Address => "one row per lock address",
    GroupBy::Name => "one row per lock name: every mmap_lock summed, like lock_stat's classes",
    GroupBy::Site => "one row per call site (class) and, for user-space locks, process name: one code path in many processes summed",
});

value_enum!(BackendChoice {
    BackendChoice::Auto => "tp_btf, tracepoint, fentry, kprobe: the first that attaches",
    BackendChoice::TpBtf => "BTF-typed raw tracepoints lock:contention_{begin,end} (no tracefs needed)",
    BackendChoice::Tracepoint => "classic tracepoints lock:contention_{begin,end} through tracefs",
    BackendChoice::Fentry => "fentry/fexit on the lock slowpaths (BPF trampolines)",
    BackendChoice::Kprobe => "kprobe/kretprobe on the lock slowpaths",
});

value_enum!(Mode {
    Mode::Aggregate => "fold waits into per-CPU maps in the kernel, drained every second (lowest overhead)",
    Mode::Stream => "send every wait through the ring buffer",
});

value_enum!(UserUnwind {
    UserUnwind::Copy => "copy the registers and top of the stack at the wait and unwind them from each binary's .eh_frame (code with or without frame pointers)",
    UserUnwind::FramePointers => "the kernel's frame-pointer walk (cheaper; stops in code built without frame pointers)",
});

value_enum!(Format {
    Format::Text => "a table like perf lock contention",
    Format::Json => "the stable JSON schema (README)",
    Format::Csv => "comma-separated values with a header row",
    Format::Pprof => "gzipped pprof profile.proto (binary): go tool pprof, Pyroscope, Parca",
});

value_enum!(By {
    By::Lock => "one row per lock, top callers nested",
    By::Caller => "one row per (lock, caller stack)",
    By::Owner => "blame: one row per (lock, owner): who held it and the wait that caused",
    By::Task => "one row per waiting thread",
    By::Cgroup => "one row per cgroup of the waiting tasks (service, container, pod), its locks nested",
    By::YieldCaller => "KVM directed yield: one row per yield_to call path",
    By::YieldPair => "KVM directed yield: one row per (yielding thread, target)",
});

value_enum!(SortKey {
    SortKey::Contended => "number of contentions",
    SortKey::WaitTotal => "total wait time",
    SortKey::WaitMax => "longest wait",
    SortKey::WaitAvg => "mean wait",
    SortKey::WaitP99 => "99th percentile wait",
});

value_enum!(Metric {
    Metric::Wait => "total wait time (ns)",
    Metric::Hold => "total hold time (ns), where releases are probed",
    Metric::Count => "number of contentions",
    Metric::Blame => "blame: the wait each lock owner caused (ns), by the owner's stack",
    Metric::Yield => "KVM directed yield: yield_to latency (ns) by caller",
});

value_enum!(DiffBy {
    DiffBy::Lock => "one row per lock (name, type, mode)",
    DiffBy::Caller => "one row per (lock, calling function)",
});

value_enum!(DiffFormat {
    DiffFormat::Text => "a table for the terminal",
    DiffFormat::Json => "the lockprof-diff/1 JSON document (README)",
    DiffFormat::Csv => "one row per lock or caller, header first",
    DiffFormat::Markdown => "a Markdown table to paste into a mail",
});

value_enum!(TestMetric {
    TestMetric::Contended => "contentions per second",
    TestMetric::Wait => "wait time per second",
    TestMetric::Avg => "mean wait",
});

value_enum!(Workload {
    Workload::Pipe => "writers on one pipe (the pipe mutex), one reader draining it",
    Workload::Fork => "threads creating and reaping tasks that exit at once (tasklist_lock write vs read)",
    Workload::Unlink => "threads creating and unlinking files in one directory (its i_rwsem)",
    Workload::Prio => "getpriority(PRIO_PGRP) readers against a forker (tasklist_lock read side)",
    Workload::Mmap => "mmap/munmap loops against page-faulting threads (mmap_lock)",
    Workload::Pgrp => "setpgid(0, 0) loops against kill(0, 0) loops (tasklist_lock)",
    Workload::Futex => "threads taking a glibc or a Rust mutex at random (user-space futex locks)",
    Workload::FutexPi => "threads taking one glibc priority-inheritance mutex (FUTEX_LOCK_PI)",
    Workload::Condvar => "consumers idle on a condition variable, fed by one producer (waits, not contention)",
    Workload::Stall => "one long wait on a pipe's mutex at --stall-at, its holder asleep in splice (prints who and when)",
});

/// A command-line value that makes no sense (clap prints it after the option's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not a lock type lockprof knows.
    #[error("unknown lock type {given:?}; known types: {}", known_types())]
    LockType {
        /// What was typed.
        given: String,
    },
    /// Not a value of the expected kind or range.
    #[error("must be {expected}, not {given:?}")]
    Invalid {
        /// What the option takes.
        expected: &'static str,
        /// What was typed.
        given: String,
    },
}

fn known_types() -> String {
    LockType::ALL.iter().map(|t| type_name(*t)).collect::<Vec<_>>().join(", ")
}

fn invalid(expected: &'static str, given: &str) -> ValueError {
    ValueError::Invalid { expected, given: given.to_string() }
}

/// A lock type (`--type` word, or a common alias).
pub fn lock_type(s: &str) -> Result<LockType, ValueError> {
    parse_type(s).ok_or_else(|| ValueError::LockType { given: s.to_string() })
}

/// A positive, finite number of seconds.
pub fn seconds(s: &str) -> Result<f64, ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(invalid("a positive number of seconds", s)),
    }
}

/// A refresh interval: at least 0.1 seconds.
pub fn interval(s: &str) -> Result<f64, ValueError> {
    match seconds(s) {
        Ok(v) if v >= 0.1 => Ok(v),
        _ => Err(invalid("at least 0.1 seconds", s)),
    }
}

/// A thread count: 1 to 1024.
pub fn threads(s: &str) -> Result<usize, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(v) if (1..=1024).contains(&v) => Ok(v),
        _ => Err(invalid("a whole number from 1 to 1024", s)),
    }
}

/// A listening address: `ADDR:PORT` with an IP address (`[::1]:9464` for IPv6).
pub fn listen(s: &str) -> Result<std::net::SocketAddr, ValueError> {
    s.trim().parse().map_err(|_| invalid("ADDR:PORT with an IP address, e.g. 127.0.0.1:9464 or 0.0.0.0:9464", s))
}

/// A series cap: 1 to 10000.
pub fn max_series(s: &str) -> Result<usize, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(v) if (1..=10_000).contains(&v) => Ok(v),
        _ => Err(invalid("a whole number from 1 to 10000", s)),
    }
}

/// A span of time: `30s`, `500ms`, `2m` or bare seconds, from 0 to `max_s` seconds.
fn span(s: &str, max_s: f64, expected: &'static str) -> Result<std::time::Duration, ValueError> {
    let t = s.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let scale = match t[end..].trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" => 60.0,
        _ => return Err(invalid(expected, s)),
    };
    match t[..end].parse::<f64>() {
        Ok(v) if (v * scale).is_finite() && v * scale <= max_s => Ok(std::time::Duration::from_secs_f64(v * scale)),
        _ => Err(invalid(expected, s)),
    }
}

/// A significance threshold: above 0, below 1.
pub fn alpha(s: &str) -> Result<f64, ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(invalid("a probability between 0 and 1, such as 0.01", s)),
    }
}

/// A count that may be 0: finite, not negative.
pub fn count(s: &str) -> Result<f64, ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(invalid("a number, 0 or more", s)),
    }
}

/// Profile kept before a trigger fires: up to an hour.
pub fn before(s: &str) -> Result<std::time::Duration, ValueError> {
    span(s, 3600.0, "a duration up to 3600 s, such as 30s, 500ms, 2m or 45 (seconds)")
}

/// Profile recorded after a trigger fires: up to ten minutes.
pub fn after(s: &str) -> Result<std::time::Duration, ValueError> {
    span(s, 600.0, "a duration up to 600 s, such as 5s, 500ms, 2m or 10 (seconds)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_value_round_trips_through_its_name() {
        fn check<T: ValueEnum + PartialEq + std::fmt::Debug>() {
            for v in T::value_variants() {
                let name = v.to_possible_value().expect("named").get_name().to_string();
                assert_eq!(T::from_str(&name, false).as_ref(), Ok(v), "{name}");
            }
        }
        check::<BackendChoice>();
        check::<Mode>();
        check::<Format>();
        check::<By>();
        check::<SortKey>();
        check::<Metric>();
        check::<Workload>();
        check::<DiffBy>();
        check::<DiffFormat>();
        check::<TestMetric>();
        assert_eq!(BackendChoice::value_variants().len(), BackendChoice::ALL.len());
        assert_eq!(Workload::value_variants().len(), Workload::ALL.len());
    }

    #[test]
    fn parsers_reject_what_makes_no_sense() {
        assert_eq!(seconds("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert!(interval("0.05").is_err());
        assert_eq!(interval("0.1"), Ok(0.1));
        assert!(threads("0").is_err() && threads("1025").is_err() && threads("-2").is_err());
        assert_eq!(threads("4"), Ok(4));
        assert_eq!(listen("127.0.0.1:9464").map(|a| a.port()), Ok(9464));
        assert!(listen("[::1]:80").is_ok_and(|a| a.ip().is_loopback()));
        assert!(listen(":9464").is_err() && listen("localhost:9464").is_err() && listen("1.2.3.4").is_err());
        assert!(max_series("0").is_err() && max_series("10001").is_err());
        assert_eq!(max_series("5"), Ok(5));
        assert_eq!(lock_type("rwlock_t"), Ok(LockType::Rwlock));
        let secs = std::time::Duration::from_secs;
        assert_eq!(before("30s"), Ok(secs(30)));
        assert_eq!(before("2m"), Ok(secs(120)));
        assert_eq!(before("45"), Ok(secs(45)));
        assert_eq!(before("3600"), Ok(secs(3600)));
        assert_eq!(after("500ms"), Ok(std::time::Duration::from_millis(500)));
        assert_eq!(after("10m"), Ok(secs(600)));
        for bad in ["3601", "61m", "-1s", "1h", "s", "", "1.2.3s", "inf"] {
            assert!(before(bad).is_err(), "{bad}");
        }
        assert!(after("601s").is_err_and(|e| e.to_string().contains("up to 600 s")));
        assert_eq!(alpha("0.05"), Ok(0.05));
        assert!(alpha("0").is_err() && alpha("1").is_err() && alpha("x").is_err());
        assert_eq!(count("0"), Ok(0.0));
        assert!(count("-1").is_err() && count("inf").is_err());
        assert!(lock_type("semaphore").is_err_and(|e| e.to_string().contains("known types: unknown, spinlock")));
    }
}
