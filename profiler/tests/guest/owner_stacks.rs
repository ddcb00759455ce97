//! `--owner-stacks`: the stall workload's holder sleeps in a send to a full
//! socket while it holds a pipe's mutex; the waiter's wait must be blamed on
//! it with the stack it sleeps in (the send) beside its acquire stack
//! (the splice). Tracing backends only (tp_btf, fentry: the programs that may
//! call the kfuncs), on kernels with `bpf_task_from_pid` (6.2+).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use lockprof::{
    ebpf::BackendChoice,
    model::{OwnerKind, Profile},
    session::Session,
    workload::{self, StallOptions, Workload},
};

use super::{checks::Check, options, runtime};

/// The stall: 200 ms, 1 s into the run; the run ends once it is reported.
const STALL: StallOptions = StallOptions { stall: Duration::from_millis(200), at: Duration::from_secs(1) };

/// The check on `backend`.
pub fn asleep(backend: BackendChoice) -> Check {
    let mut o = options(backend);
    o.load.config.owners |= profiler_common::OWNER_STACKS;
    let (p, holder) = runtime().block_on(async {
        let s = Session::start(o).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let holder = Arc::new(Mutex::new(None));
        let run = {
            let (stop, holder) = (stop.clone(), holder.clone());
            tokio::task::spawn_blocking(move || {
                let mut report = |st: &workload::Stall| {
                    *holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(st.holder);
                    stop.store(true, Ordering::Relaxed);
                };
                workload::run_with(Workload::Stall, 1, Duration::from_secs(30), STALL, &mut report, stop.clone())
            })
        };
        run.await.map_err(|e| e.to_string())?.map_err(|e| format!("the stall workload: {e}"))?;
        let p = s.finish().await.map_err(|e| e.to_string())?;
        let holder = holder.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or("the stall never happened")?;
        Ok::<(Profile, u32), String>((p, holder))
    })?;
    if p.meta.backend != backend.name() {
        return Err(format!("asked for the {} backend, got {}", backend.name(), p.meta.backend));
    }
    if let Some(n) = p.meta.notes.iter().find(|n| n.contains("owner stacks")) {
        return Err(n.clone());
    }
    let rows: Vec<_> = p
        .locks
        .iter()
        .flat_map(|l| &l.owners)
        .filter(|o| {
            o.kind == OwnerKind::Task && o.tid == holder && o.wait_caused_max_ns >= STALL.stall.as_nanos() as u64
        })
        .collect();
    let [row] = rows[..] else {
        return Err(format!("want one row blaming the stall's holder {holder}, got {}", rows.len()));
    };
    let (asleep, acquired) = (&row.asleep_stack, &row.stack);
    if !asleep.iter().any(|f| f.contains("sendmsg")) {
        return Err(format!("the holder's stack while asleep is not in its send: {asleep:?}"));
    }
    if !acquired.iter().any(|f| f.contains("splice")) {
        return Err(format!("the holder's acquire stack has no splice: {acquired:?}"));
    }
    Ok(format!("holder {holder} asleep in {} (acquired in {})", asleep[0], row.caller))
}
