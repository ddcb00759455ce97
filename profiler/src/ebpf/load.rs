//! `Probes`: the object loaded and attached in phases, like perf's
//! `bpf_lock_contention.c`: the kernel's BTF read once; the object loaded
//! (offsets, kfuncs, map sizes); the filters set; then each family attached
//! (holds first, so that hold tracking is on before the first wait ends;
//! then yield_to; then the first wait backend that attaches; then, with
//! `--futex`, the futex system calls); then the lock naming methods; and
//! the maps handed to the session.

use std::os::fd::{AsFd as _, AsRawFd as _};

use aya::{
    Btf, Ebpf, Endianness,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::Iter,
};
use profiler_common::{
    Config, KFUNC_RDONLY_CAST, KFUNC_TASK_FROM_PID, KFUNC_TASK_RELEASE, OWNER_STACKS, TaskOffsets, known,
    names::{map, prog},
};

use super::{
    AggMaps, CgroupFilter, FutexMaps, KernelCounters, KernelStacks, KernelUnwindSink, KernelUserStacks, LoadOptions,
    PendingMaps, ProgramFd, TracefsError, WaitBackend,
    attach_error::AttachError,
    backend::{BackendFailure, attach_tp_btf, attach_tracepoint},
    btf::{BtfError, Types},
    check_privileges,
    identities::{KernelIdentities, NamingMethods},
    object::{bump_memlock, load_object},
    probe_kind::Unavailable,
    probes::{
        Attached, ProbeKind, attach_releases, attach_waits, attach_yield, program, release_programs, unload_named,
        unload_program, yield_programs,
    },
    slabs::SlabIter,
};

/// Errors loading or attaching.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not enough privileges (message names what is missing).
    #[error("{0}")]
    Privileges(String),
    /// The kernel rejected the object (maps or BTF).
    #[error("loading the eBPF object failed: {0}")]
    Object(#[source] Box<aya::EbpfError>),
    /// tracefs is needed but unavailable.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// No backend could be attached; each attempt and its error is listed.
    #[error("no wait backend could be attached ({}); `lockprof doctor` shows what this kernel supports", .0.iter().map(|(b, e)| format!("{}: {e}", b.name())).collect::<Vec<_>>().join("; "))]
    NoBackend(Vec<(WaitBackend, BackendFailure)>),
    /// A map is missing or has an unexpected type.
    #[error("eBPF map {name}: {detail}")]
    Map {
        /// Map name.
        name: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// Loaded and attached programs with their maps.
pub struct Probes {
    ebpf: Ebpf,
    backend: WaitBackend,
    hold: Result<ProbeKind, Unavailable>,
    yield_kind: Result<ProbeKind, Unavailable>,
    futex: Result<Vec<&'static str>, Unavailable>,
    notes: Vec<String>,
    slabs: Option<SlabIter>,
    blob: Option<Vec<u8>>,
}

/// The running kernel's BTF, read once: the raw bytes (lockprof's own
/// reader, [`Types`], and the identities' member paths) and aya's parse of
/// the same bytes (loading fentry, fexit, tp_btf and iterator programs).
pub(super) struct KernelBtf {
    /// The bytes, or why they could not be read.
    pub blob: Result<Vec<u8>, BtfError>,
    /// aya's parse, when the bytes were read and parse.
    pub aya: Option<Btf>,
}

impl KernelBtf {
    /// Reads /sys/kernel/btf/vmlinux.
    pub fn read() -> KernelBtf {
        let blob = super::btf::kernel_blob();
        let aya = blob.as_deref().ok().and_then(|b| match Btf::parse(b, Endianness::default()) {
            Ok(btf) => Some(btf),
            Err(e) => {
                log::info!("aya cannot parse the kernel BTF ({e}): no tp_btf, fentry or iterator programs");
                None
            }
        });
        KernelBtf { blob, aya }
    }

    /// lockprof's reader over the bytes.
    pub fn types(&self) -> Result<Types<'_>, BtfError> {
        self.blob.as_deref().map_err(Clone::clone).and_then(Types::parse)
    }
}

/// Loads the `kmem_cache` iterator when the kernel has it (6.13+).
pub(super) fn load_slab_iter(ebpf: &mut Ebpf, btf: Option<&Btf>, naming: &mut NamingMethods) -> Option<SlabIter> {
    let r = (|| -> Result<SlabIter, AttachError> {
        let btf = btf.ok_or(AttachError::NoBtf)?;
        let prog = prog::SLAB_CACHES;
        let p: &mut Iter = program(ebpf, prog)?;
        p.load("kmem_cache", btf).map_err(|error| AttachError::Load { prog, error })?;
        let fd = p.fd().map_err(|error| AttachError::Load { prog, error })?;
        let fd = fd.try_clone().map_err(|error| AttachError::Fd { prog, error })?;
        Ok(SlabIter::new(fd))
    })();
    match r {
        Ok(it) => {
            naming.slab_iterator = true;
            Some(it)
        }
        Err(e) => {
            naming.slab_iterator = false;
            naming.missing.push(format!("slab cache names: the kmem_cache iterator does not load (6.13+): {e}"));
            if let Some(log) = e.verifier_log() {
                log::info!("the kmem_cache iterator's verifier log:\n{log}");
            }
            None
        }
    }
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> LoadError {
    move |e| LoadError::Map { name, detail: e.to_string() }
}

fn set_flag(ebpf: &mut Ebpf, name: &'static str) -> Result<(), LoadError> {
    let m = ebpf.map_mut(name).ok_or(LoadError::Map { name, detail: "missing".into() })?;
    let mut a: Array<_, u32> = Array::try_from(m).map_err(map_err(name))?;
    a.set(0, 1, 0).map_err(map_err(name))
}

/// `fentry (why) or kprobe (why)`: the probe kinds tried and the short reasons.
fn by_kinds(tried: &[Attached]) -> String {
    tried.iter().map(|a| format!("{} ({})", a.kind.name(), a.reason())).collect::<Vec<_>>().join(" or ")
}

/// Logs (with `-v`) the verifier's logs of failed attempts.
fn log_verifier(what: &str, logs: impl IntoIterator<Item = (&'static str, String)>) {
    for (f, log) in logs {
        log::info!("{what}: the verifier's log for {f}:\n{log}");
    }
}

/// Why a family was not probed, from the kinds tried; the details and the
/// verifier's logs are logged (`-v`).
fn unavailable(what: &str, tried: &[Attached]) -> Unavailable {
    let u = Unavailable {
        reason: format!("{what} cannot be probed by {}", by_kinds(tried)),
        detail: tried.iter().map(|a| format!("{}: {a}", a.kind.name())).collect::<Vec<_>>().join("; "),
    };
    log::info!("{}: {}", u.reason, u.detail);
    for a in tried {
        log_verifier(what, a.verifier_logs());
    }
    u
}

/// Release probes, fentry then kprobe: the kind attached, or why none did.
fn attach_holds(ebpf: &mut Ebpf, btf: Option<&Btf>, notes: &mut Vec<String>) -> Result<ProbeKind, Unavailable> {
    let mut tried = Vec::new();
    for kind in ProbeKind::ALL {
        let a = attach_releases(ebpf, kind, btf);
        if a.ok.is_empty() {
            unload_named(ebpf, release_programs());
            tried.push(a);
            continue;
        }
        for (f, e) in &a.failed {
            notes.push(format!(
                "hold times: {f} cannot be probed with {} ({e}); releases through it are not seen",
                kind.name()
            ));
        }
        log_verifier("hold times", a.verifier_logs());
        for t in &tried {
            log::info!("hold times: not with {}: {t}", t.kind.name());
            log_verifier("hold times", t.verifier_logs());
        }
        return Ok(kind);
    }
    Err(unavailable("release functions", &tried))
}

/// yield_to probes, fentry then kprobe (or only `only`).
fn attach_yields(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    only: Option<ProbeKind>,
    offsets: &Result<TaskOffsets, BtfError>,
    notes: &mut Vec<String>,
) -> Result<ProbeKind, Unavailable> {
    let kinds = match only {
        Some(k) => vec![k],
        None => ProbeKind::ALL.to_vec(),
    };
    let mut tried = Vec::new();
    for kind in kinds {
        let a = attach_yield(ebpf, kind, btf);
        if a.failed.is_empty() {
            if let Err(e) = offsets {
                notes.push(format!("yield_to: targets are not named ({e})"));
            }
            return Ok(kind);
        }
        unload_named(ebpf, yield_programs(kind));
        tried.push(a);
    }
    Err(unavailable("yield_to", &tried))
}

/// Attaches one wait backend, noting functions that did not attach.
fn attach_backend(
    ebpf: &mut Ebpf,
    backend: WaitBackend,
    btf: Option<&Btf>,
    modern: bool,
    notes: &mut Vec<String>,
) -> Result<(), BackendFailure> {
    match backend.probe_kind() {
        None if backend == WaitBackend::TpBtf => Ok(attach_tp_btf(ebpf, btf, modern)?),
        None => Ok(attach_tracepoint(ebpf, modern)?),
        Some(kind) => {
            let a = attach_waits(ebpf, kind, btf);
            if a.ok.is_empty() {
                return Err(BackendFailure::Slowpaths(a));
            }
            for (f, e) in &a.failed {
                notes.push(format!("waits: {f} cannot be probed with {} ({e})", kind.name()));
            }
            log_verifier("waits", a.verifier_logs());
            Ok(())
        }
    }
}

/// The first wait backend of `opts` that attaches; the others are unloaded.
fn attach_wait_backend(
    ebpf: &mut Ebpf,
    opts: &LoadOptions,
    btf: Option<&Btf>,
    config: &Config,
    notes: &mut Vec<String>,
) -> Result<WaitBackend, LoadError> {
    let modern = config.modern_begin();
    let mut attempts = Vec::new();
    for &backend in opts.backend.order() {
        match attach_backend(ebpf, backend, btf, modern, notes) {
            Ok(()) => {
                log::info!("attached the {} wait backend", backend.name());
                for (b, e) in &attempts {
                    log::info!("{} backend unavailable: {e}", WaitBackend::name(*b));
                    log_verifier(b.name(), BackendFailure::verifier_logs(e));
                }
                return Ok(backend);
            }
            Err(e) => {
                unload_named(ebpf, backend.programs());
                attempts.push((backend, e));
            }
        }
    }
    for (b, e) in &attempts {
        log_verifier(b.name(), e.verifier_logs());
    }
    Err(LoadError::NoBackend(attempts))
}

/// The process and cgroup filters.
fn set_filters(ebpf: &mut Ebpf, opts: &LoadOptions) -> Result<(), LoadError> {
    if !opts.tgids.is_empty() {
        let m = ebpf
            .map_mut(map::TGID_FILTER)
            .ok_or(LoadError::Map { name: map::TGID_FILTER, detail: "missing".into() })?;
        let mut filter: HashMap<_, u32, u8> = HashMap::try_from(m).map_err(map_err(map::TGID_FILTER))?;
        for tgid in &opts.tgids {
            filter.insert(tgid, 1, 0).map_err(map_err(map::TGID_FILTER))?;
        }
    }
    if !opts.cgroup_ids.is_empty() {
        let m = ebpf
            .map_mut(map::CGROUP_FILTER)
            .ok_or(LoadError::Map { name: map::CGROUP_FILTER, detail: "missing".into() })?;
        let mut filter: HashMap<_, u64, u8> = HashMap::try_from(m).map_err(map_err(map::CGROUP_FILTER))?;
        for id in &opts.cgroup_ids {
            filter.insert(id, 1, 0).map_err(map_err(map::CGROUP_FILTER))?;
        }
    }
    Ok(())
}

/// How locks are named with what attached: the methods the object's
/// configuration allows, the slab iterator, and the slab kfunc only where
/// the wait backend may call kfuncs.
fn naming(
    ebpf: &mut Ebpf,
    config: &Config,
    types: Option<&Types<'_>>,
    btf: Option<&Btf>,
    backend: WaitBackend,
) -> (NamingMethods, Option<SlabIter>) {
    let mut naming = NamingMethods::of(config, types);
    let slabs = load_slab_iter(ebpf, btf, &mut naming);
    if naming.slab_kfunc && backend != WaitBackend::TpBtf && backend.probe_kind() != Some(ProbeKind::Fentry) {
        naming.slab_kfunc = false;
        naming.missing.push(format!("slab caches: the {} backend cannot call kfuncs", backend.name()));
    }
    (naming, slabs)
}

/// Why `--owner-stacks`, asked for, cannot walk owners' stacks with what
/// attached (None: it can, or it was not asked for).
fn owner_stacks_missing(config: &Config, backend: WaitBackend) -> Option<String> {
    if config.owners & OWNER_STACKS == 0 {
        return None;
    }
    let missing: Vec<&str> = [
        ("bpf_task_from_pid", KFUNC_TASK_FROM_PID),
        ("bpf_task_release", KFUNC_TASK_RELEASE),
        ("bpf_rdonly_cast", KFUNC_RDONLY_CAST),
    ]
    .into_iter()
    .filter(|&(_, bit)| config.kfuncs & bit == 0)
    .map(|(name, _)| name)
    .collect();
    if !missing.is_empty() {
        return Some(format!("this kernel lacks {} (Linux 6.2+)", missing.join(", ")));
    }
    if backend != WaitBackend::TpBtf && backend.probe_kind() != Some(ProbeKind::Fentry) {
        return Some(format!("the {} backend cannot call kfuncs (use --backend tp_btf or fentry)", backend.name()));
    }
    if !known(config.layout.task_nvcsw) || !known(config.layout.task_state) {
        return Some("this kernel's BTF lacks task_struct.__state or nvcsw".into());
    }
    None
}

impl Probes {
    /// Checks privileges, loads the object with `opts`, and attaches.
    pub fn load(opts: &LoadOptions) -> Result<Probes, LoadError> {
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg));
        }
        bump_memlock();
        // The object: the kernel's BTF, read once, gives the offsets and kfunc ids.
        let kernel = KernelBtf::read();
        let types = kernel.types();
        if let Err(e) = &types {
            log::info!("kernel BTF unavailable ({e}): no yield_to target names, no kernel-confirmed lock names");
        }
        let types = types.ok();
        // task_struct offsets name the task a vCPU yields to.
        let task_offsets = opts
            .yield_to
            .then(|| types.as_ref().ok_or(BtfError::Io("no kernel BTF".into())).and_then(super::btf::task_offsets));
        let known = task_offsets.as_ref().and_then(|r| r.as_ref().ok()).copied();
        let (mut ebpf, config) =
            load_object(opts, known, types.as_ref()).map_err(|e| LoadError::Object(Box::new(e)))?;
        set_filters(&mut ebpf, opts)?;

        // Each family: holds, yield_to, then the wait backend.
        let btf = kernel.aya.as_ref();
        let mut notes = Vec::new();
        let hold = if opts.holds {
            attach_holds(&mut ebpf, btf, &mut notes)
        } else {
            Err(Unavailable { reason: "hold timing was turned off (--no-holds)".into(), detail: String::new() })
        };
        if hold.is_ok() {
            set_flag(&mut ebpf, map::HOLD_ON)?;
        }
        let yield_kind = match &task_offsets {
            Some(offsets) => attach_yields(&mut ebpf, btf, opts.yield_probe, offsets, &mut notes),
            None => Err(Unavailable {
                reason: "yield_to profiling was turned off (--no-yield-to)".into(),
                detail: String::new(),
            }),
        };
        let backend = attach_wait_backend(&mut ebpf, opts, btf, &config, &mut notes)?;
        if let Some(why) = owner_stacks_missing(&config, backend) {
            notes.push(format!("owner stacks (--owner-stacks) are off: {why}"));
        }
        let futex = if opts.futex {
            super::futex::attach(&mut ebpf, &mut notes)
        } else {
            Err(Unavailable { reason: "futex waits are traced with --futex".into(), detail: String::new() })
        };
        if let (true, Err(u)) = (opts.futex, &futex) {
            notes.push(u.reason.clone());
        }

        // Naming, with what attached.
        let (naming, slabs) = naming(&mut ebpf, &config, types.as_ref(), btf, backend);
        notes.extend(naming.missing.iter().map(|m| format!("lock naming: {m}")));
        for n in &notes {
            log::info!("{n}");
        }
        let blob = kernel.blob.ok().filter(|_| naming.struct_fields);
        Ok(Probes { ebpf, backend, hold, yield_kind, futex, notes, slabs, blob })
    }

    /// The attached backend.
    pub fn backend(&self) -> WaitBackend {
        self.backend
    }

    /// The hold backend, or why there is none.
    pub fn hold(&self) -> Result<ProbeKind, &Unavailable> {
        self.hold.as_ref().copied()
    }

    /// The futex tracepoints attached, or why futex waits are not traced.
    pub fn futex(&self) -> Result<&[&'static str], &Unavailable> {
        self.futex.as_ref().map(Vec::as_slice)
    }

    /// How `yield_to` is probed, or why it is not.
    pub fn yield_kind(&self) -> Result<ProbeKind, &Unavailable> {
        self.yield_kind.as_ref().copied()
    }

    /// Degradations: functions that could not be probed.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Mutable access for the aya-log logger.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    fn take(&mut self, name: &'static str) -> Result<aya::maps::Map, LoadError> {
        self.ebpf.take_map(name).ok_or(LoadError::Map { name, detail: "missing or already taken".into() })
    }

    /// Takes the event ring buffer (once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, LoadError> {
        RingBuf::try_from(self.take(map::EVENTS)?).map_err(map_err(map::EVENTS))
    }

    /// Takes the aggregate maps and their selector (once).
    pub fn take_aggregates(&mut self) -> Result<AggMaps, LoadError> {
        Ok(AggMaps::new(
            PerCpuHashMap::try_from(self.take(map::AGG_A)?).map_err(map_err(map::AGG_A))?,
            PerCpuHashMap::try_from(self.take(map::AGG_B)?).map_err(map_err(map::AGG_B))?,
            PerCpuArray::try_from(self.take(map::AGG_CACHE)?).map_err(map_err(map::AGG_CACHE))?,
            PerCpuArray::try_from(self.take(map::AGG_LOG)?).map_err(map_err(map::AGG_LOG))?,
            PerCpuArray::try_from(self.take(map::AGG_LOG_LEN)?).map_err(map_err(map::AGG_LOG_LEN))?,
            Array::try_from(self.take(map::ACTIVE)?).map_err(map_err(map::ACTIVE))?,
        ))
    }

    /// Takes the stack map (once).
    pub fn take_stacks(&mut self) -> Result<KernelStacks, LoadError> {
        Ok(KernelStacks(HashMap::try_from(self.take(map::STACKS)?).map_err(map_err(map::STACKS))?))
    }

    /// Takes the `--cgroup` filter map, for adding cgroups created under a
    /// filtered one while recording (once).
    pub fn take_cgroup_filter(&mut self) -> Result<CgroupFilter, LoadError> {
        Ok(CgroupFilter(HashMap::try_from(self.take(map::CGROUP_FILTER)?).map_err(map_err(map::CGROUP_FILTER))?))
    }

    /// Takes the user stack map (`--user-stacks`; once).
    pub fn take_user_stacks(&mut self) -> Result<KernelUserStacks, LoadError> {
        Ok(KernelUserStacks(HashMap::try_from(self.take(map::USER_STACKS)?).map_err(map_err(map::USER_STACKS))?))
    }

    /// The maps the user-stack unwinder writes (`--user-unwind copy`): takes
    /// the plan map (once) and opens the user stack map a second time (call
    /// before [`Self::take_user_stacks`]).
    pub fn take_unwind_sink(&mut self) -> Result<KernelUnwindSink, LoadError> {
        let roots = HashMap::try_from(self.take(map::UNWIND_ROOTS)?).map_err(map_err(map::UNWIND_ROOTS))?;
        let plans = HashMap::try_from(self.take(map::UNWIND_PLANS)?).map_err(map_err(map::UNWIND_PLANS))?;
        let stacks = self
            .ebpf
            .map(map::USER_STACKS)
            .ok_or(LoadError::Map { name: map::USER_STACKS, detail: "missing or already taken".into() })?;
        let fd = match stacks {
            aya::maps::Map::LruHashMap(m) => m.fd().as_fd().try_clone_to_owned(),
            _ => return Err(LoadError::Map { name: map::USER_STACKS, detail: "not an LRU hash map".into() }),
        }
        .map_err(|e| LoadError::Map { name: map::USER_STACKS, detail: e.to_string() })?;
        let data = MapData::from_fd(fd).map_err(map_err(map::USER_STACKS))?;
        let stacks = HashMap::try_from(aya::maps::Map::LruHashMap(data)).map_err(map_err(map::USER_STACKS))?;
        Ok(KernelUnwindSink { roots, plans, stacks })
    }

    /// Takes the counters (once).
    pub fn take_counters(&mut self) -> Result<KernelCounters, LoadError> {
        Ok(KernelCounters::new(PerCpuArray::try_from(self.take(map::COUNTERS)?).map_err(map_err(map::COUNTERS))?))
    }

    /// Takes the lock identities (once): the programs' map, the slab
    /// iterator and the kernel's BTF for member paths.
    pub fn take_identities(&mut self) -> Result<KernelIdentities, LoadError> {
        let map = HashMap::try_from(self.take(map::IDENTITIES)?).map_err(map_err(map::IDENTITIES))?;
        Ok(KernelIdentities::new(map, self.slabs.take(), self.blob.take()))
    }

    /// Takes the futex wait map (once).
    pub fn take_futex(&mut self) -> Result<FutexMaps, LoadError> {
        Ok(FutexMaps::new(HashMap::try_from(self.take(map::FUTEX_WAITS)?).map_err(map_err(map::FUTEX_WAITS))?))
    }

    /// Takes the pending-wait maps (once).
    pub fn take_pending(&mut self) -> Result<PendingMaps, LoadError> {
        Ok(PendingMaps::new(
            HashMap::try_from(self.take(map::PENDING)?).map_err(map_err(map::PENDING))?,
            PerCpuArray::try_from(self.take(map::SPIN_PENDING)?).map_err(map_err(map::SPIN_PENDING))?,
        ))
    }

    /// File descriptors of the loaded programs (for their fdinfo statistics;
    /// valid until [`detach`](Probes::detach)).
    pub fn program_fds(&self) -> Vec<ProgramFd> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                p.fd().ok().map(|fd| ProgramFd { name: name.to_string(), fd: fd.as_fd().as_raw_fd() })
            })
            .collect()
    }

    /// Detaches and unloads every program; maps stay readable.
    pub fn detach(&mut self) {
        for (_, p) in self.ebpf.programs_mut() {
            unload_program(p);
        }
    }
}
