//! Names of user-space locks for the profile builder: the lock namer
//! (data symbols, mapping classes) and each process's name, both looked up
//! while the process lives and kept.

use std::collections::HashMap;

use crate::{pipeline::UserLockNames, symbols::user::UserLockNamer};

/// Processes (and threads) whose answers are kept (the namer keeps its own
/// bounded cache).
const MAX_PROCESSES: usize = 4096;
const MAX_THREADS: usize = 1 << 16;

/// [`UserLockNames`] over `/proc`.
#[derive(Default)]
pub struct ProcNames {
    namer: UserLockNamer,
    processes: HashMap<u32, Option<String>>,
    threads: HashMap<(u32, u32), bool>,
}

impl UserLockNames for ProcNames {
    fn lock(&mut self, pid: u32, addr: u64) -> (Option<String>, Option<String>) {
        let n = self.namer.name(pid, addr);
        let symbol = n.symbol.as_ref().map(|_| n.label());
        (symbol, n.mapping.clone())
    }

    fn process(&mut self, pid: u32) -> Option<String> {
        if self.processes.len() >= MAX_PROCESSES && !self.processes.contains_key(&pid) {
            self.processes.clear();
        }
        self.processes.entry(pid).or_insert_with(|| super::task_comm(pid)).clone()
    }

    fn is_thread(&mut self, pid: u32, tid: u32) -> bool {
        if self.threads.len() >= MAX_THREADS && !self.threads.contains_key(&(pid, tid)) {
            self.threads.clear();
        }
        *self
            .threads
            .entry((pid, tid))
            .or_insert_with(|| std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists())
    }
}
