//! lockprof: a live lock-contention profiler for Linux, on eBPF.
//!
//! Architecture, by folder: `ebpf/` loads and attaches the kernel programs and
//! probes features; `pipeline/` reads the ring buffer, aggregates and
//! snapshots; `symbols/` resolves stacks, picks callers and names locks;
//! `model/` holds the profile every face reads; `report/` renders it;
//! `commands/` wires the CLI (`cli.rs`) to all of that.

pub mod cli;
pub mod commands;
pub mod ebpf;
pub mod export;
pub mod model;
pub mod pipeline;
pub mod recording;
pub mod report;
pub mod shutdown;
pub mod symbols;
pub mod tui;
pub mod workload;
