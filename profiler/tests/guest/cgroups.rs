//! cgroup attribution: two C storms, one in each of two child cgroups of
//! the cgroup2 mount, recorded by a session filtered to the first (as
//! `--cgroup` makes it) and an unfiltered one over the same window (both
//! attached before the storms start, the storms stopped before either
//! session ends).

use std::os::unix::fs::MetadataExt as _;

use lockprof::{
    cgroups::CgroupFs,
    ebpf::BackendChoice,
    model::Profile,
    session::{CgroupOptions, SessionOptions},
};

use super::{
    c_storm::{CStorm, ChildCgroup, record_while, waits_only},
    checks::{self, Check},
    user_stacks,
};

/// Why the kernel cannot attribute waits to cgroups v2, if so.
pub fn missing() -> Option<String> {
    let fss = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    (!fss.split_whitespace().any(|f| f == "cgroup2")).then(|| "the kernel has no cgroup2 filesystem".into())
}

/// The session options of `record [--cgroup ROOT]`.
fn session(backend: BackendChoice, fs: &CgroupFs, root: Option<&str>) -> Result<SessionOptions, String> {
    let mut o = waits_only(backend);
    let roots = match root {
        Some(spec) => vec![fs.resolve(spec).map_err(|e| format!("--cgroup {spec}: {e}"))?],
        None => Vec::new(),
    };
    o.load.cgroup_ids = roots.iter().flat_map(|r| fs.subtree_ids(r)).collect();
    o.load.config.cgroups = 1;
    o.load.config.filter_cgroup = u32::from(root.is_some());
    o.cgroups = Some(CgroupOptions { fs: fs.clone(), roots });
    Ok(o)
}

/// The check on `backend`.
pub fn filter(backend: BackendChoice) -> Check {
    let fs = CgroupFs::discover().map_err(|e| format!("the guest mounts cgroup2 but: {e}"))?;
    let b = backend.name();
    let (inside, outside) = (
        ChildCgroup::new(fs.root(), &format!("lockprof-{b}-in"))?,
        ChildCgroup::new(fs.root(), &format!("lockprof-{b}-out"))?,
    );
    let id =
        |c: &ChildCgroup| std::fs::metadata(&c.dir).map(|m| m.ino()).map_err(|e| format!("{}: {e}", c.dir.display()));
    let (in_id, out_id) = (id(&inside)?, id(&outside)?);
    let (in_path, out_path) = (format!("/lockprof-{b}-in"), format!("/lockprof-{b}-out"));
    let mut unfiltered = session(backend, &fs, None)?;
    // The user-stack check of this backend reads this recording first.
    unfiltered.load.config.user_stacks = profiler_common::USER_STACKS_UNWIND;
    let start = || Ok((CStorm::start(4, Some(&inside.dir))?, CStorm::start(4, Some(&outside.dir))?));
    let both = |ps: &[&Profile], (a, o): &(CStorm, CStorm)| {
        checks::cgroup_filtered(ps[0], in_id, a.pid, o.pid).is_ok()
            && checks::cgroup_attributed(ps[1], (in_id, &in_path), (out_id, &out_path)).is_ok()
    };
    let pause = |(a, o): &(CStorm, CStorm)| {
        a.pause();
        o.pause();
    };
    let (mut ps, (a, o)) = record_while(vec![session(backend, &fs, Some(&in_path))?, unfiltered], start, both, pause)?;
    let (a_pid, o_pid) = (a.pid, o.pid);
    drop((a, o));
    let secs = ps[0].meta.duration_s;
    let said = |r: Check| r.map_err(|e| format!("{e} (in a {secs:.1} s recording)"));
    let filtered = said(checks::cgroup_filtered(&ps[0], in_id, a_pid, o_pid))?;
    let attributed = said(checks::cgroup_attributed(&ps[1], (in_id, &in_path), (out_id, &out_path)))?;
    // Shown, not judged: on the newest kernel's fentry backend the
    // unfiltered session (user stacks on) once counted a quarter fewer.
    let count = |p: &Profile| p.cgroups.iter().filter(|c| c.id == in_id).map(|c| c.wait.count()).sum::<u64>();
    let same = format!("the cgroup's waits: {} filtered, {} unfiltered", count(&ps[0]), count(&ps[1]));
    user_stacks::remember(backend, ps.remove(1));
    Ok(format!("--cgroup {in_path}: {filtered}; unfiltered: {attributed}; {same} (in a {secs:.1} s recording)"))
}
