//! `Probes`: the object loaded and attached in phases (holds first, so that
//! hold tracking is on before the first wait ends; then yield_to; then the
//! first wait backend that attaches), and the maps handed to the session.

use std::os::fd::{AsFd as _, AsRawFd as _, RawFd};

use aya::{
    Btf, Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap},
    programs::Iter,
};
use profiler_common::{
    TaskOffsets,
    names::{map, prog},
};

use super::{
    AggMaps, KernelCounters, KernelStacks, LoadOptions, PendingMaps, TracefsError, WaitBackend,
    backend::{attach_tp_btf, attach_tracepoint},
    btf::{BtfError, Types},
    check_privileges,
    identities::{KernelIdentities, NamingMethods},
    object::{bump_memlock, load_object},
    probes::{
        ProbeKind, attach_releases, attach_waits, attach_yield, program, release_programs, unload_named,
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
    #[error("no wait backend could be attached ({}); `lockprof doctor` shows what this kernel supports", .0.iter().map(|(b, e)| format!("{b}: {e}")).collect::<Vec<_>>().join("; "))]
    NoBackend(Vec<(String, String)>),
    /// A map is missing or has an unexpected type.
    #[error("eBPF map {name}: {detail}")]
    Map {
        /// Map name.
        name: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// Something lockprof could not probe, with the short reason and the details.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unavailable {
    /// One short clause a user can act on.
    pub reason: String,
    /// Every attempt and the kernel's answer (shown with `-v` and by `doctor`).
    pub detail: String,
}

/// Loaded and attached programs with their maps.
pub struct Probes {
    ebpf: Ebpf,
    backend: WaitBackend,
    hold: Result<ProbeKind, Unavailable>,
    yield_kind: Result<ProbeKind, Unavailable>,
    notes: Vec<String>,
    naming: NamingMethods,
    slabs: Option<SlabIter>,
    blob: Option<Vec<u8>>,
}

/// Loads the `kmem_cache` iterator when the kernel has it (6.13+).
pub(super) fn load_slab_iter(ebpf: &mut Ebpf, naming: &mut NamingMethods) -> Option<SlabIter> {
    let r = (|| -> Result<SlabIter, String> {
        let btf = Btf::from_sys_fs().map_err(|e| e.to_string())?;
        let p: &mut Iter = program(ebpf, prog::SLAB_CACHES)?;
        p.load("kmem_cache", &btf).map_err(|e| super::error_chain(&e))?;
        let fd = p.fd().map_err(|e| e.to_string())?.try_clone().map_err(|e| e.to_string())?;
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
fn by_kinds(tried: &[(ProbeKind, super::probes::Attached)]) -> String {
    tried.iter().map(|(k, a)| format!("{} ({})", k.name(), a.reason(*k))).collect::<Vec<_>>().join(" or ")
}

/// Release probes, fentry then kprobe: the kind attached, or why none did.
fn attach_holds(ebpf: &mut Ebpf, btf: Option<&Btf>, notes: &mut Vec<String>) -> Result<ProbeKind, Unavailable> {
    let mut tried = Vec::new();
    for kind in ProbeKind::ALL {
        let a = attach_releases(ebpf, kind, btf);
        if a.ok.is_empty() {
            unload_named(ebpf, release_programs());
            tried.push((kind, a));
            continue;
        }
        for (f, e) in &a.failed {
            notes.push(format!(
                "hold times: {f} cannot be probed with {} ({e}); releases through it are not seen",
                kind.name()
            ));
        }
        return Ok(kind);
    }
    Err(Unavailable {
        reason: format!("release functions cannot be probed by {}", by_kinds(&tried)),
        detail: tried
            .iter()
            .map(|(k, a)| format!("hold/{}: {}", k.name(), a.summary(*k)))
            .collect::<Vec<_>>()
            .join("; "),
    })
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
        tried.push((kind, a));
    }
    Err(Unavailable {
        reason: format!("yield_to cannot be probed by {}", by_kinds(&tried)),
        detail: tried.iter().map(|(k, a)| format!("{}: {}", k.name(), a.summary(*k))).collect::<Vec<_>>().join("; "),
    })
}

/// Attaches one wait backend, noting functions that did not attach.
fn attach_backend(
    ebpf: &mut Ebpf,
    backend: WaitBackend,
    btf: Option<&Btf>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    match backend.probe_kind() {
        None if backend == WaitBackend::TpBtf => attach_tp_btf(ebpf, btf),
        None => attach_tracepoint(ebpf),
        Some(kind) => {
            let a = attach_waits(ebpf, kind, btf);
            if a.ok.is_empty() {
                return Err(a.summary(kind));
            }
            for (f, e) in &a.failed {
                notes.push(format!("waits: {f} cannot be probed with {} ({e})", kind.name()));
            }
            Ok(())
        }
    }
}

impl Probes {
    /// Checks privileges, loads the object with `opts`, and attaches.
    pub fn load(opts: &LoadOptions) -> Result<Probes, LoadError> {
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg));
        }
        bump_memlock();
        // The kernel's BTF, parsed once: offsets, kfunc ids.
        let blob = super::btf::kernel_blob();
        let types = blob.as_deref().map_err(Clone::clone).and_then(Types::parse);
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
        let mut naming = NamingMethods::of(&config, types.as_ref());
        let slabs = load_slab_iter(&mut ebpf, &mut naming);
        let blob = blob.ok().filter(|_| naming.struct_fields);
        if !opts.tgids.is_empty() {
            let m = ebpf
                .map_mut(map::TGID_FILTER)
                .ok_or(LoadError::Map { name: map::TGID_FILTER, detail: "missing".into() })?;
            let mut filter: HashMap<_, u32, u8> = HashMap::try_from(m).map_err(map_err(map::TGID_FILTER))?;
            for tgid in &opts.tgids {
                filter.insert(tgid, 1, 0).map_err(map_err(map::TGID_FILTER))?;
            }
        }

        let btf = Btf::from_sys_fs().ok();
        let mut notes = Vec::new();
        let hold = if opts.holds {
            attach_holds(&mut ebpf, btf.as_ref(), &mut notes)
        } else {
            Err(Unavailable { reason: "hold timing was turned off (--no-holds)".into(), detail: String::new() })
        };
        if hold.is_ok() {
            set_flag(&mut ebpf, map::HOLD_ON)?;
        }
        let yield_kind = match &task_offsets {
            Some(offsets) => attach_yields(&mut ebpf, btf.as_ref(), opts.yield_probe, offsets, &mut notes),
            None => Err(Unavailable {
                reason: "yield_to profiling was turned off (--no-yield-to)".into(),
                detail: String::new(),
            }),
        };
        let mut attempts = Vec::new();
        for &backend in opts.backend.order() {
            match attach_backend(&mut ebpf, backend, btf.as_ref(), &mut notes) {
                Ok(()) => {
                    log::info!("attached the {} wait backend", backend.name());
                    for (b, e) in &attempts {
                        log::info!("{b} backend unavailable: {e}");
                    }
                    for n in &notes {
                        log::info!("{n}");
                    }
                    if naming.slab_kfunc
                        && backend != WaitBackend::TpBtf
                        && backend.probe_kind() != Some(ProbeKind::Fentry)
                    {
                        naming.slab_kfunc = false;
                        naming.missing.push(format!("slab caches: the {} backend cannot call kfuncs", backend.name()));
                    }
                    notes.extend(naming.missing.iter().map(|m| format!("lock naming: {m}")));
                    return Ok(Probes { ebpf, backend, hold, yield_kind, notes, naming, slabs, blob });
                }
                Err(e) => {
                    unload_named(&mut ebpf, backend.programs());
                    attempts.push((backend.name().to_string(), e));
                }
            }
        }
        Err(LoadError::NoBackend(attempts))
    }

    /// The attached backend.
    pub fn backend(&self) -> WaitBackend {
        self.backend
    }

    /// The hold backend, or why there is none.
    pub fn hold(&self) -> Result<ProbeKind, &Unavailable> {
        self.hold.as_ref().copied()
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
            Array::try_from(self.take(map::ACTIVE)?).map_err(map_err(map::ACTIVE))?,
        ))
    }

    /// Takes the stack map (once).
    pub fn take_stacks(&mut self) -> Result<KernelStacks, LoadError> {
        Ok(KernelStacks(StackTraceMap::try_from(self.take(map::STACKS)?).map_err(map_err(map::STACKS))?))
    }

    /// Takes the counters (once).
    pub fn take_counters(&mut self) -> Result<KernelCounters, LoadError> {
        Ok(KernelCounters::new(PerCpuArray::try_from(self.take(map::COUNTERS)?).map_err(map_err(map::COUNTERS))?))
    }

    /// How lock identities are found on this kernel.
    pub fn naming(&self) -> &NamingMethods {
        &self.naming
    }

    /// Takes the lock identities (once): the programs' map, the slab
    /// iterator and the kernel's BTF for member paths.
    pub fn take_identities(&mut self) -> Result<KernelIdentities, LoadError> {
        let map = HashMap::try_from(self.take(map::IDENTITIES)?).map_err(map_err(map::IDENTITIES))?;
        Ok(KernelIdentities::new(map, self.slabs.take(), self.blob.take()))
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
    pub fn program_fds(&self) -> Vec<RawFd> {
        self.ebpf.programs().filter_map(|(_, p)| p.fd().ok().map(|fd| fd.as_fd().as_raw_fd())).collect()
    }

    /// Detaches and unloads every program; maps stay readable.
    pub fn detach(&mut self) {
        for (_, p) in self.ebpf.programs_mut() {
            unload_program(p);
        }
    }
}
