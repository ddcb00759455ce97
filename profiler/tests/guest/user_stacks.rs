//! `--user-stacks`: the C storm's writers' user frames joined above the
//! kernel's pipe mutex wait. The unfiltered recording of the cgroup check
//! records user stacks too; this check reads it first, and records its own
//! only when that one does not pass (or did not run).

use std::{
    collections::HashMap,
    sync::{Mutex, OnceLock},
};

use lockprof::{ebpf::BackendChoice, model::Profile};

use super::{
    c_storm::{CStorm, record_while, waits_only},
    checks::{self, Check},
};

type Recordings = Mutex<HashMap<&'static str, Profile>>;

fn recordings() -> &'static Recordings {
    static R: OnceLock<Recordings> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Keeps `p`, a recording of the C storm with user stacks on `backend`.
pub fn remember(backend: BackendChoice, p: Profile) {
    recordings().lock().unwrap_or_else(|e| e.into_inner()).insert(backend.name(), p);
}

/// The writer chain is there, taken the default way: unwound from copies
/// of the stack (some copied, the rest known by their signatures).
fn verdict(p: &Profile, of: &str) -> Check {
    let d = &p.meta.drops;
    let (copies, signed) = (d.bookkeeping.user_stack_copies, d.bookkeeping.user_stack_signed);
    let unwound = if copies > 0 && d.bookkeeping.unwind_stacks > 0 {
        Ok(())
    } else {
        Err(format!("no user stack was copied and unwound ({copies} copies, {} unwound)", d.bookkeeping.unwind_stacks))
    };
    unwound
        .and_then(|()| checks::user_writer_stack(p))
        .map(|what| format!("{what} (in {of}, {:.1} s; {copies} stacks copied, {signed} signed)", p.meta.duration_s))
        .map_err(|e| {
            format!(
                "{e} (in {of}, {:.1} s; user stacks copied {copies}, signed {signed}, failed {}, unpinned {}, evicted {})",
                p.meta.duration_s,
                d.losses.user_stack_failed,
                d.losses.user_stacks_unpinned,
                d.losses.user_stacks_evicted
            )
        })
}

/// The check on `backend`.
pub fn writer(backend: BackendChoice) -> Check {
    let kept = recordings().lock().unwrap_or_else(|e| e.into_inner()).remove(backend.name());
    if let Some(p) = kept
        && let Ok(what) = verdict(&p, "the cgroup check's recording")
    {
        return Ok(what);
    }
    let mut o = waits_only(backend);
    o.load.config.user_stacks = profiler_common::USER_STACKS_UNWIND;
    let start = || CStorm::start(4, None);
    let seen = |ps: &[&Profile], _: &CStorm| checks::user_writer_stack(ps[0]).is_ok();
    let (mut ps, storm) = record_while(vec![o], start, seen, CStorm::pause)?;
    drop(storm);
    verdict(&ps.remove(0), "a recording of its own")
}
