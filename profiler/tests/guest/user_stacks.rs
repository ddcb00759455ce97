//! `--user-stacks`: the C storm's writers' user frames joined above the
//! kernel's pipe mutex wait.

use lockprof::ebpf::BackendChoice;

use super::{
    c_storm::{CStorm, record_while},
    checks::{self, Check},
    options,
};

/// The check on `backend`.
pub fn writer(backend: BackendChoice) -> Check {
    let mut o = options(backend);
    o.load.config.user_stacks = 1;
    let storm = CStorm::start(4, None)?;
    let p = record_while(vec![o], &|ps| checks::user_writer_stack(ps[0]).is_ok())?.remove(0);
    drop(storm);
    let d = &p.meta.drops;
    checks::user_writer_stack(&p).map(|what| format!("{what} (in a {:.1} s recording)", p.meta.duration_s)).map_err(
        |e| {
            format!(
                "{e} (in a {:.1} s recording; user stacks stored {}, unpinned {}, evicted {})",
                p.meta.duration_s,
                d.bookkeeping.user_stacks_stored,
                d.losses.user_stacks_unpinned,
                d.losses.user_stacks_evicted
            )
        },
    )
}
