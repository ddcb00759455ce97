//! Loading the eBPF object and attaching the wait backend.

use std::collections::HashMap as StdHashMap;

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{HashMap, MapData, RingBuf, StackTraceMap},
    programs::{BtfTracePoint, TracePoint},
};
use profiler_common::{Config, DEFAULT_PENDING_ENTRIES, DEFAULT_RINGBUF_BYTES, DEFAULT_STACK_ENTRIES};

use super::{
    TraceFs, TracefsError, check_privileges,
    counters::KernelCounters,
    probes::{
        ProbeKind, RELEASE_TARGETS, WAIT_TARGETS, attach_releases, attach_waits, attach_yield, yield_hint,
        yield_programs,
    },
};
use crate::symbols::StackSource;

/// The user's `--backend` choice.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    /// tp_btf if the kernel takes it, else classic tracepoints.
    #[default]
    Auto,
    /// BTF-typed raw tracepoints (no tracefs needed).
    #[value(name = "tp_btf")]
    TpBtf,
    /// Classic tracepoints through tracefs.
    Tracepoint,
    /// fentry/fexit on the lock slowpaths (BPF trampolines).
    Fentry,
    /// kprobe/kretprobe on the lock slowpaths.
    Kprobe,
}

/// The wait backend actually attached.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WaitBackend {
    /// `tp_btf/contention_{begin,end}`.
    TpBtf,
    /// `tracepoint/lock/contention_{begin,end}`.
    Tracepoint,
    /// fentry/fexit on the slowpaths.
    Fentry,
    /// kprobe/kretprobe on the slowpaths.
    Kprobe,
}

impl WaitBackend {
    /// Stable name, as in reports.
    pub fn name(self) -> &'static str {
        match self {
            WaitBackend::TpBtf => "tp_btf",
            WaitBackend::Tracepoint => "tracepoint",
            WaitBackend::Fentry => "fentry",
            WaitBackend::Kprobe => "kprobe",
        }
    }

    fn programs(self) -> Vec<&'static str> {
        // End first: attaching begin before end could leave waits whose end
        // was never seen in the pending map.
        match self {
            WaitBackend::TpBtf => vec!["contention_end_btf", "contention_begin_btf"],
            WaitBackend::Tracepoint => vec!["contention_end_tp", "contention_begin_tp"],
            WaitBackend::Fentry => WAIT_TARGETS.iter().flat_map(|t| [t.fentry, t.fexit]).collect(),
            WaitBackend::Kprobe => {
                let mut v: Vec<&str> = WAIT_TARGETS.iter().map(|t| t.kprobe).collect();
                v.extend(["krp_sleep", "krp_spin"]);
                v.dedup();
                v
            }
        }
    }
}

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
    #[error("no wait backend could be attached:\n{}", .0.iter().map(|(b, e)| format!("  {b}: {e}")).collect::<Vec<_>>().join("\n"))]
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

/// Options for loading.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Backend choice.
    pub backend: BackendChoice,
    /// Type filter and pid-filter switch.
    pub config: Config,
    /// Processes to record (empty: all).
    pub tgids: Vec<u32>,
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
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            backend: BackendChoice::Auto,
            config: Config::default(),
            tgids: Vec::new(),
            ringbuf_bytes: DEFAULT_RINGBUF_BYTES,
            stack_entries: DEFAULT_STACK_ENTRIES,
            pending_entries: DEFAULT_PENDING_ENTRIES,
            agg_entries: profiler_common::DEFAULT_AGG_ENTRIES,
            holds: true,
            yield_to: true,
            yield_probe: None,
        }
    }
}

/// Loaded and attached programs with their maps.
pub struct Probes {
    ebpf: Ebpf,
    backend: WaitBackend,
    hold: Option<ProbeKind>,
    yield_kind: Option<ProbeKind>,
    yield_unavailable: Option<String>,
    attempts: Vec<(String, String)>,
    notes: Vec<String>,
}

/// The overhead floor for benchmarks: programs on the same tracepoints that
/// only count.
pub struct FloorProbes {
    ebpf: Ebpf,
}

impl FloorProbes {
    /// Loads and attaches the counting-only tp_btf programs.
    pub fn attach() -> Result<FloorProbes, LoadError> {
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg));
        }
        bump_memlock();
        let mut ebpf = EbpfLoader::new().load(super::object_bytes()).map_err(|e| LoadError::Object(Box::new(e)))?;
        let btf = Btf::from_sys_fs().map_err(|e| LoadError::NoBackend(vec![("floor".into(), e.to_string())]))?;
        for (prog, tp) in [("floor_end_btf", "contention_end"), ("floor_begin_btf", "contention_begin")] {
            let fail = |e: String| LoadError::NoBackend(vec![("floor".into(), e)]);
            let p: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .ok_or_else(|| fail(format!("{prog} missing")))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| fail(e.to_string()))?;
            p.load(tp, &btf).map_err(|e| fail(super::error_chain(&e)))?;
            p.attach().map_err(|e| fail(super::error_chain(&e)))?;
        }
        Ok(FloorProbes { ebpf })
    }

    /// Tracepoint hits counted so far (begin + end).
    pub fn count(&self) -> u64 {
        self.ebpf
            .map("FLOOR")
            .and_then(|m| aya::maps::PerCpuArray::<_, u64>::try_from(m).ok())
            .and_then(|a| a.get(&0, 0).ok())
            .map(|v| v.iter().sum())
            .unwrap_or(0)
    }
}

/// Kernel stack map as a [`StackSource`].
pub struct KernelStacks(StackTraceMap<MapData>);

impl StackSource for KernelStacks {
    fn frames(&mut self, id: u32) -> Option<Vec<u64>> {
        self.0.get(&id, 0).ok().map(|st| st.frames().iter().map(|f| f.ip).collect())
    }
}

fn attach_tp_btf(ebpf: &mut Ebpf) -> Result<(), String> {
    let btf = Btf::from_sys_fs().map_err(|e| format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}"))?;
    for (prog, tp) in [("contention_end_btf", "contention_end"), ("contention_begin_btf", "contention_begin")] {
        let p: &mut BtfTracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| format!("program {prog} missing from the object"))?
            .try_into()
            .map_err(|e| format!("{prog}: {e}"))?;
        p.load(tp, &btf).map_err(|e| format!("loading {prog}: {}", super::error_chain(&e)))?;
        p.attach().map_err(|e| format!("attaching {prog}: {}", super::error_chain(&e)))?;
    }
    Ok(())
}

fn attach_tracepoint(ebpf: &mut Ebpf) -> Result<(), String> {
    let tfs = TraceFs::find_or_mount().map_err(|e| e.to_string())?;
    if !tfs.has_lock_events() {
        return Err(TracefsError::NoLockEvents.to_string());
    }
    for (prog, tp) in [("contention_end_tp", "contention_end"), ("contention_begin_tp", "contention_begin")] {
        let p: &mut TracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| format!("program {prog} missing from the object"))?
            .try_into()
            .map_err(|e| format!("{prog}: {e}"))?;
        p.load().map_err(|e| format!("loading {prog}: {}", super::error_chain(&e)))?;
        p.attach("lock", tp).map_err(|e| format!("attaching {prog}: {}", super::error_chain(&e)))?;
    }
    Ok(())
}

fn unload_program(p: &mut aya::programs::Program) {
    use aya::programs::Program;
    let r = match p {
        Program::BtfTracePoint(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        _ => Ok(()),
    };
    if let Err(e) = r {
        log::debug!("unloading: {e}");
    }
}

fn unload(ebpf: &mut Ebpf, backend: WaitBackend) {
    for name in backend.programs() {
        if let Some(p) = ebpf.program_mut(name) {
            unload_program(p);
        }
    }
}

fn unload_releases(ebpf: &mut Ebpf) {
    let names = RELEASE_TARGETS.iter().map(|(_, p)| *p).chain(["kp_release"]);
    for name in names {
        if let Some(p) = ebpf.program_mut(name) {
            unload_program(p);
        }
    }
}

/// Attaches the yield_to probes, fentry first, then kprobe. Returns the kind
/// attached, or why none did.
fn attach_yields(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    only: Option<ProbeKind>,
    offsets: Option<Result<profiler_common::TaskOffsets, super::btf::BtfError>>,
    notes: &mut Vec<String>,
) -> (Option<ProbeKind>, Option<String>) {
    let mut tried = Vec::new();
    let kinds = match only {
        Some(k) => vec![k],
        None => vec![ProbeKind::Fentry, ProbeKind::Kprobe],
    };
    for kind in kinds {
        match attach_yield(ebpf, kind, btf) {
            Ok(()) => {
                if let Some(Err(e)) = offsets {
                    notes.push(format!("yield_to: targets are not named ({e})"));
                }
                return (Some(kind), None);
            }
            Err(e) => {
                for name in yield_programs(kind) {
                    if let Some(p) = ebpf.program_mut(name) {
                        unload_program(p);
                    }
                }
                tried.push(format!("{}: {}", kind.name(), yield_hint(kind, &e)));
            }
        }
    }
    (None, Some(format!("yield_to cannot be probed on this kernel ({})", tried.join("; "))))
}

impl Probes {
    /// Checks privileges, loads the object with `opts`, and attaches a backend.
    pub fn load(opts: &LoadOptions) -> Result<Probes, LoadError> {
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg));
        }
        bump_memlock();

        // Classic tracepoint field offsets from tracefs when it is there.
        let tfs = TraceFs::find();
        let off = |name: &str, field: &str, default: u32| {
            tfs.as_ref().and_then(|t| t.field_offset("lock", name, field)).unwrap_or(default)
        };
        let begin_lock = off("contention_begin", "lock_addr", 8);
        let begin_flags = off("contention_begin", "flags", 16);
        let end_lock = off("contention_end", "lock_addr", 8);
        // task_struct offsets name the task a vCPU yields to.
        let task_offsets = if opts.yield_to { Some(super::btf::kernel_task_offsets()) } else { None };

        let mut ebpf = EbpfLoader::new()
            .override_global("CONFIG", &opts.config, true)
            .override_global("WAKEUP_BYTES", &u64::from(opts.ringbuf_bytes / 4), true)
            .override_global("TP_BEGIN_LOCK_OFF", &begin_lock, true)
            .override_global("TP_BEGIN_FLAGS_OFF", &begin_flags, true)
            .override_global("TP_END_LOCK_OFF", &end_lock, true)
            .override_global(
                "TASK_OFFSETS",
                &task_offsets.as_ref().and_then(|r| r.as_ref().ok()).copied().unwrap_or_default(),
                true,
            )
            .map_max_entries("EVENTS", opts.ringbuf_bytes)
            .map_max_entries("STACKS", opts.stack_entries)
            .map_max_entries("PENDING", opts.pending_entries)
            .map_max_entries("AGG_A", opts.agg_entries)
            .map_max_entries("AGG_B", opts.agg_entries)
            .load(super::object_bytes())
            .map_err(|e| LoadError::Object(Box::new(e)))?;

        if !opts.tgids.is_empty() {
            let mut filter: HashMap<_, u32, u8> = HashMap::try_from(
                ebpf.map_mut("TGID_FILTER").ok_or(LoadError::Map { name: "TGID_FILTER", detail: "missing".into() })?,
            )
            .map_err(|e| LoadError::Map { name: "TGID_FILTER", detail: e.to_string() })?;
            for tgid in &opts.tgids {
                filter.insert(tgid, 1, 0).map_err(|e| LoadError::Map { name: "TGID_FILTER", detail: e.to_string() })?;
            }
        }

        let btf = Btf::from_sys_fs().ok();
        let mut attempts = Vec::new();
        let mut notes = Vec::new();
        // Holds first, so that HOLD_ON is set before the first wait ends.
        let mut hold = None;
        if opts.holds {
            for kind in [ProbeKind::Fentry, ProbeKind::Kprobe] {
                let a = attach_releases(&mut ebpf, kind, btf.as_ref());
                if a.ok.is_empty() {
                    unload_releases(&mut ebpf);
                    attempts.push((format!("hold/{}", kind.name()), a.summary(kind)));
                    continue;
                }
                for (f, e) in &a.failed {
                    notes.push(format!(
                        "hold times: {f} cannot be probed with {} ({e}); releases through it are not seen",
                        kind.name()
                    ));
                }
                hold = Some(kind);
                break;
            }
            if hold.is_some() {
                let mut on: aya::maps::Array<_, u32> = aya::maps::Array::try_from(
                    ebpf.map_mut("HOLD_ON").ok_or(LoadError::Map { name: "HOLD_ON", detail: "missing".into() })?,
                )
                .map_err(|e| LoadError::Map { name: "HOLD_ON", detail: e.to_string() })?;
                on.set(0, 1, 0).map_err(|e| LoadError::Map { name: "HOLD_ON", detail: e.to_string() })?;
            }
        }
        let (yield_kind, yield_unavailable) = if opts.yield_to {
            attach_yields(&mut ebpf, btf.as_ref(), opts.yield_probe, task_offsets, &mut notes)
        } else {
            (None, Some("yield_to profiling was turned off (--no-yield-to)".to_string()))
        };
        let order: &[WaitBackend] = match opts.backend {
            BackendChoice::Auto => {
                &[WaitBackend::TpBtf, WaitBackend::Tracepoint, WaitBackend::Fentry, WaitBackend::Kprobe]
            }
            BackendChoice::TpBtf => &[WaitBackend::TpBtf],
            BackendChoice::Tracepoint => &[WaitBackend::Tracepoint],
            BackendChoice::Fentry => &[WaitBackend::Fentry],
            BackendChoice::Kprobe => &[WaitBackend::Kprobe],
        };
        for &backend in order {
            let r = match backend {
                WaitBackend::TpBtf => attach_tp_btf(&mut ebpf),
                WaitBackend::Tracepoint => attach_tracepoint(&mut ebpf),
                WaitBackend::Fentry | WaitBackend::Kprobe => {
                    let kind = if backend == WaitBackend::Fentry { ProbeKind::Fentry } else { ProbeKind::Kprobe };
                    let a = attach_waits(&mut ebpf, kind, btf.as_ref());
                    if a.ok.is_empty() {
                        Err(a.summary(kind))
                    } else {
                        for (f, e) in &a.failed {
                            notes.push(format!("waits: {f} cannot be probed with {} ({e})", kind.name()));
                        }
                        Ok(())
                    }
                }
            };
            match r {
                Ok(()) => {
                    log::info!("attached the {} wait backend; holds: {:?}", backend.name(), hold.map(ProbeKind::name));
                    for n in &notes {
                        log::warn!("{n}");
                    }
                    return Ok(Probes { ebpf, backend, hold, yield_kind, yield_unavailable, attempts, notes });
                }
                Err(e) => {
                    log::warn!("{} backend unavailable: {e}", backend.name());
                    unload(&mut ebpf, backend);
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

    /// Backends tried before the one attached, with their errors.
    pub fn attempts(&self) -> &[(String, String)] {
        &self.attempts
    }

    /// The hold backend, if release functions could be probed.
    pub fn hold(&self) -> Option<ProbeKind> {
        self.hold
    }

    /// How `yield_to` is probed, if it is.
    pub fn yield_kind(&self) -> Option<ProbeKind> {
        self.yield_kind
    }

    /// Why `yield_to` is not profiled (None when it is).
    pub fn yield_unavailable(&self) -> Option<String> {
        self.yield_unavailable.clone()
    }

    /// Degradations: functions that could not be probed.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Why there are no hold times (None when there are).
    pub fn hold_unavailable(&self) -> Option<String> {
        if self.hold.is_some() {
            return None;
        }
        let tried: Vec<String> =
            self.attempts.iter().filter(|(b, _)| b.starts_with("hold/")).map(|(b, e)| format!("{b}: {e}")).collect();
        Some(if tried.is_empty() {
            format!("the {} backend sees waits only and hold tracking was off", self.backend.name())
        } else {
            format!("release functions cannot be probed on this kernel ({})", tried.join("; "))
        })
    }

    /// Mutable access for the aya-log logger.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Takes the event ring buffer (once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, LoadError> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .ok_or(LoadError::Map { name: "EVENTS", detail: "missing or already taken".into() })?;
        RingBuf::try_from(map).map_err(|e| LoadError::Map { name: "EVENTS", detail: e.to_string() })
    }

    /// Takes the aggregate maps and their selector (once).
    pub fn take_aggregates(&mut self) -> Result<super::AggMaps, LoadError> {
        let mut take = |name: &'static str| {
            self.ebpf.take_map(name).ok_or(LoadError::Map { name, detail: "missing or already taken".into() })
        };
        let (a, b, active) = (take("AGG_A")?, take("AGG_B")?, take("ACTIVE")?);
        let conv = |name: &'static str, e: aya::maps::MapError| LoadError::Map { name, detail: e.to_string() };
        Ok(super::AggMaps::new(
            aya::maps::PerCpuHashMap::try_from(a).map_err(|e| conv("AGG_A", e))?,
            aya::maps::PerCpuHashMap::try_from(b).map_err(|e| conv("AGG_B", e))?,
            aya::maps::Array::try_from(active).map_err(|e| conv("ACTIVE", e))?,
        ))
    }

    /// Takes the stack map (once).
    pub fn take_stacks(&mut self) -> Result<KernelStacks, LoadError> {
        let map = self
            .ebpf
            .take_map("STACKS")
            .ok_or(LoadError::Map { name: "STACKS", detail: "missing or already taken".into() })?;
        StackTraceMap::try_from(map)
            .map(KernelStacks)
            .map_err(|e| LoadError::Map { name: "STACKS", detail: e.to_string() })
    }

    /// Sums of the per-CPU counters.
    pub fn counters(&self) -> Result<KernelCounters, LoadError> {
        let map = self.ebpf.map("COUNTERS").ok_or(LoadError::Map { name: "COUNTERS", detail: "missing".into() })?;
        KernelCounters::read(map).map_err(|e| LoadError::Map { name: "COUNTERS", detail: e.to_string() })
    }

    /// Takes the pending-wait maps (once).
    pub fn take_pending(&mut self) -> Result<super::PendingMaps, LoadError> {
        let mut take = |name: &'static str| {
            self.ebpf.take_map(name).ok_or(LoadError::Map { name, detail: "missing or already taken".into() })
        };
        let (tasks, spin) = (take("PENDING")?, take("SPIN_PENDING")?);
        let conv = |name: &'static str, e: aya::maps::MapError| LoadError::Map { name, detail: e.to_string() };
        Ok(super::PendingMaps::new(
            HashMap::try_from(tasks).map_err(|e| conv("PENDING", e))?,
            aya::maps::PerCpuArray::try_from(spin).map_err(|e| conv("SPIN_PENDING", e))?,
        ))
    }

    /// Program run skips by the kernel's recursion protection, per loaded program.
    pub fn recursion_misses(&self) -> StdHashMap<String, u64> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                let fd = p.fd().ok()?;
                Some((name.to_string(), super::recursion_misses(fd)?))
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

/// Raises RLIMIT_MEMLOCK for kernels without memcg accounting of BPF memory.
/// Fails without CAP_SYS_RESOURCE, which is fine on kernels >= 5.11.
fn bump_memlock() {
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
