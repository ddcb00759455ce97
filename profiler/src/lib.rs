//! lockprof: a live lock-contention profiler for Linux, on eBPF.
//!
//! Architecture, by folder, top down: `cli/` turns the command line into
//! options (clap lives only there); `commands/` runs each subcommand;
//! `tui/` is the live dashboard; `serve/` is the
//! daemon's HTTP face (Prometheus metrics, pprof profiles); `session/` drives one recording in phases;
//! `pipeline/` reads the ring buffer into typed records, aggregates them
//! (its own loop, cheap snapshots) and builds profiles; `ebpf/` loads and
//! attaches the kernel programs and probes features; `symbols/` resolves
//! stacks, picks callers and names locks; `cgroups/` maps cgroup ids to
//! paths and container names; `query` picks and orders rows for
//! every face; `report/` and `export/` render profiles; `model/` holds the
//! profile every face reads; `workload/` generates contention; `incident/`
//! captures the profile around a trigger; `launch/` runs the command a
//! recording lasts for (`record -- COMMAND`); `diff/` compares recordings
//! before and after a change, with a test over rounds.

pub mod cgroups;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod diff;
pub mod ebpf;
pub mod export;
pub mod incident;
pub mod launch;
pub mod model;
pub mod output_file;
pub mod pipeline;
pub mod query;
pub mod recording;
pub mod report;
pub mod serve;
pub mod session;
pub mod shutdown;
pub mod symbols;
pub mod tui;
pub mod workload;
