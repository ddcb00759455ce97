//! The embedded eBPF object and what is written into it before loading:
//! the `CONFIG` global (filters, knobs, tracepoint and kernel structure
//! offsets, bound kfuncs), the kfunc calls, and the map sizes.

use aya::{Ebpf, EbpfLoader};
use profiler_common::{
    AGG_LOG_ENTRIES, Config, DEFAULT_AGG_ENTRIES, DEFAULT_PENDING_ENTRIES, DEFAULT_RINGBUF_BYTES,
    DEFAULT_STACK_ENTRIES, KFUNC_RDONLY_CAST, Layout, MODE_AGGREGATE, OWNER_STACKS, STACK_WORDS, TaskOffsets,
    TpOffsets, UNWIND_PLAN_ENTRIES, USER_STACKS_UNWIND, UserRegsLayout,
    futex::FUTEX_WAIT_ENTRIES,
    names::{self, map},
};

use super::{
    BackendChoice, TraceFs,
    btf::{Types, layout, task_starts_with_word, user_regs_layout},
    kfuncs,
    probes::ProbeKind,
};

/// The eBPF object built by build.rs, embedded at compile time.
pub fn object_bytes() -> &'static [u8] {
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"))
}

/// What to load and how.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Backend choice.
    pub backend: BackendChoice,
    /// Filters and knobs (the loader fills in the kernel-specific offsets).
    pub config: Config,
    /// Processes to record (empty: all).
    pub tgids: Vec<u32>,
    /// cgroups (v2 ids) to record, with `Config::filter_cgroup` (the
    /// `--cgroup` cgroups and their descendants at load time).
    pub cgroup_ids: Vec<u64>,
    /// Ring buffer size in bytes (power of two, multiple of the page size).
    pub ringbuf_bytes: u32,
    /// Stack map capacity.
    pub stack_entries: u32,
    /// Pending-wait map capacity.
    pub pending_entries: u32,
    /// Capacity of each aggregate map (aggregate mode).
    pub agg_entries: u32,
    /// Measure hold times when release functions can be probed (fentry, then kprobe).
    pub holds: bool,
    /// Profile KVM directed yield (`yield_to`) when it can be probed (fentry, then kprobe).
    pub yield_to: bool,
    /// Probe `yield_to` only this way (default: fentry, then kprobe).
    pub yield_probe: Option<ProbeKind>,
    /// Trace futex waits (user-space locks) at the futex system calls.
    pub futex: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            backend: BackendChoice::Auto,
            config: Config::default(),
            tgids: Vec::new(),
            cgroup_ids: Vec::new(),
            ringbuf_bytes: DEFAULT_RINGBUF_BYTES,
            stack_entries: DEFAULT_STACK_ENTRIES,
            pending_entries: DEFAULT_PENDING_ENTRIES,
            agg_entries: DEFAULT_AGG_ENTRIES,
            holds: true,
            yield_to: true,
            yield_probe: None,
            futex: false,
        }
    }
}

/// Classic tracepoint field offsets from tracefs when it is there.
fn tracepoint_offsets() -> TpOffsets {
    let tfs = TraceFs::find();
    let off = |name: &str, field: &str, default: u32| {
        tfs.as_ref().and_then(|t| t.field_offset("lock", name, field)).unwrap_or(default)
    };
    let d = TpOffsets::DEFAULT;
    TpOffsets {
        begin_lock: off("contention_begin", "lock_addr", d.begin_lock),
        begin_flags: off("contention_begin", "flags", d.begin_flags),
        end_lock: off("contention_end", "lock_addr", d.end_lock),
        _pad: 0,
    }
}

/// Whether the tp_btf programs may prove cached kernel stacks by reading
/// their own kernel stack ([`STACK_WORDS`], `stack_proof` in the eBPF
/// crate). A proof checks every return address from the first above the
/// program's context to the proof frame: when it checked one word, the
/// deepest, a Debian 7.3 guest's pipe storm put the same address at the same
/// place under its reader's and writer's frames, and one path's stack was
/// reported for the other's waits.
const PROVEN_STACKS: bool = true;

/// Loads the object with `opts` (nothing is attached yet). `task` holds the
/// `struct task_struct` offsets found in the kernel's BTF, if any.
pub(super) fn load_object(
    opts: &LoadOptions,
    task: Option<TaskOffsets>,
    types: Option<&Types<'_>>,
) -> Result<(Ebpf, Config), aya::EbpfError> {
    let (object, mut kfuncs) = kfuncs::bind(object_bytes(), types);
    if PROVEN_STACKS && kfuncs & KFUNC_RDONLY_CAST != 0 && types.is_some_and(task_starts_with_word) {
        kfuncs |= STACK_WORDS;
    }
    let config = Config {
        wakeup_bytes: u64::from(opts.ringbuf_bytes / 4),
        tp: tracepoint_offsets(),
        task: task.unwrap_or_default(),
        layout: types.map_or(Layout::UNKNOWN, layout),
        kfuncs,
        self_tgid: std::process::id(),
        ..opts.config
    };
    let trampoline = super::probes::kretprobe_trampoline();
    let user_regs = types.map_or(UserRegsLayout::UNKNOWN, user_regs_layout);
    let unwind_entries = if opts.config.user_stacks == USER_STACKS_UNWIND { UNWIND_PLAN_ENTRIES } else { 1 };
    let ebpf = EbpfLoader::new()
        .override_global(names::CONFIG, &config, true)
        .override_global(names::KRETPROBE_TRAMPOLINE, &trampoline, true)
        .override_global(names::USER_REGS_LAYOUT, &user_regs, true)
        .map_max_entries(map::EVENTS, opts.ringbuf_bytes)
        .map_max_entries(map::STACKS, opts.stack_entries)
        // The user stack map costs ~1 KiB per entry: sized only when used.
        .map_max_entries(map::USER_STACKS, if opts.config.user_stacks != 0 { opts.stack_entries } else { 1 })
        .map_max_entries(map::UNWIND_ROOTS, unwind_entries)
        .map_max_entries(map::UNWIND_PLANS, unwind_entries)
        .map_max_entries(map::PENDING, opts.pending_entries)
        .map_max_entries(map::FUTEX_WAITS, if opts.futex { FUTEX_WAIT_ENTRIES } else { 1 })
        .map_max_entries(
            map::OWNER_ASLEEP,
            if opts.config.owners & OWNER_STACKS != 0 { DEFAULT_PENDING_ENTRIES } else { 1 },
        )
        // The per-CPU log (576 KiB per CPU) is written in aggregate mode only.
        .map_max_entries(map::AGG_LOG, if opts.config.mode == MODE_AGGREGATE { 2 * AGG_LOG_ENTRIES } else { 1 })
        .map_max_entries(map::AGG_A, opts.agg_entries)
        .map_max_entries(map::AGG_B, opts.agg_entries)
        .load(object.bytes())?;
    Ok((ebpf, config))
}

/// A fresh copy of the object with default knobs and this kernel's offsets
/// and kfuncs, for one `doctor` check (dropping it detaches and unloads what
/// the check attached).
pub(super) fn fresh_object(types: Option<&Types<'_>>) -> Result<Ebpf, aya::EbpfError> {
    load_object(&LoadOptions::default(), None, types).map(|(ebpf, _)| ebpf)
}

/// Raises RLIMIT_MEMLOCK for kernels without memcg accounting of BPF memory.
/// Fails without CAP_SYS_RESOURCE, which is fine on kernels >= 5.11.
pub(super) fn bump_memlock() {
    let rlim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads a valid, initialized rlimit struct.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
    if rc != 0 {
        log::debug!(
            "setrlimit(RLIMIT_MEMLOCK) failed ({}); relying on memcg accounting of BPF memory",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod stack_chains;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use profiler_common::names::{map, prog};

    use super::*;

    /// Every program and map userspace asks for exists in the built object,
    /// and the object holds nothing userspace does not know about.
    #[test]
    fn object_holds_exactly_the_names_userspace_uses() {
        let obj = aya_obj::Object::parse(object_bytes()).expect("the embedded object parses");
        let programs: BTreeSet<&str> = obj.programs.keys().map(String::as_str).collect();
        let want: BTreeSet<&str> = prog::ALL.iter().copied().collect();
        #[cfg(feature = "bench")]
        let want: BTreeSet<&str> = want
            .into_iter()
            .chain([profiler_common::names::floor::BEGIN_BTF, profiler_common::names::floor::END_BTF])
            .collect();
        assert_eq!(programs, want, "programs in the object vs profiler_common::names::prog::ALL");
        let maps: BTreeSet<&str> = obj
            .maps
            .keys()
            .map(String::as_str)
            .filter(|m| !m.starts_with('.') && *m != "AYA_LOGS" && *m != "AYA_LOG_BUF")
            .collect();
        let want: BTreeSet<&str> = map::ALL.iter().copied().collect();
        #[cfg(feature = "bench")]
        let want: BTreeSet<&str> = want.into_iter().chain([profiler_common::names::floor::MAP]).collect();
        assert_eq!(maps, want, "maps in the object vs profiler_common::names::map::ALL");
        // The globals are symbols of a data section, which aya overrides by name
        // (must exist: loading fails without them).
        assert!(
            obj.maps.keys().any(|m| m.starts_with(".rodata") || m.starts_with(".data")),
            "no data section for CONFIG"
        );
    }
}
