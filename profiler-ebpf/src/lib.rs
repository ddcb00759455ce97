#![no_std]
// This file exists so `cargo metadata` and the profiler's build-dependency see a
// library target; the programs live in src/main.rs (the `profiler` bin).
