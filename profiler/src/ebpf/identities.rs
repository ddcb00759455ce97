//! Lock identities the programs confirmed (`IDENTITIES`), resolved for the
//! profile: kinds by name, slab caches by name (the `kmem_cache` iterator),
//! and the member a lock is in its object (BTF), each worked out once per
//! distinct fact.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use profiler_common::{Config, KFUNC_GET_KMEM_CACHE, LockIdent, kind, known};

use super::{
    btf::{Types, field_path, slab_struct},
    slabs::{SlabCache, SlabIter, by_address},
};
use crate::symbols::{Identities, KernelIdentity};

/// Resolved identities kept before the memo starts over.
const RESOLVED_KEPT: usize = 2 * profiler_common::IDENT_ENTRIES as usize;

/// Re-read the slab caches at most this often (when an unknown one shows up).
const SLAB_REREAD: Duration = Duration::from_secs(5);

/// How lock identities are found on this kernel (for `doctor` and logs).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NamingMethods {
    /// Per-task, run-queue and zone locks compared against kernel structures
    /// at BTF offsets.
    pub kernel_structures: bool,
    /// `bpf_get_kmem_cache` tells the slab cache of a lock's object.
    pub slab_kfunc: bool,
    /// The `kmem_cache` iterator names the caches.
    pub slab_iterator: bool,
    /// Member paths inside objects from BTF.
    pub struct_fields: bool,
    /// Why a method is off, one line each.
    pub missing: Vec<String>,
}

impl NamingMethods {
    /// What the loaded object can do, from its configuration and the BTF.
    pub fn of(config: &Config, types: Option<&Types<'_>>) -> NamingMethods {
        let l = &config.layout;
        let mut m = NamingMethods {
            kernel_structures: known(l.task_mm) && known(l.mm_mmap_lock) && known(l.rq_lock),
            slab_kfunc: config.kfuncs & KFUNC_GET_KMEM_CACHE != 0,
            slab_iterator: false,
            struct_fields: types.is_some(),
            missing: Vec::new(),
        };
        if types.is_none() {
            m.missing.push("kernel structures and member paths: no kernel BTF (/sys/kernel/btf/vmlinux)".into());
        } else if !m.kernel_structures {
            m.missing.push(
                "per-task and run-queue locks: the kernel BTF lacks task_struct.mm, mm_struct.mmap_lock or rq.__lock"
                    .into(),
            );
        }
        if !m.slab_kfunc {
            m.missing.push("slab caches: the kernel has no bpf_get_kmem_cache kfunc (6.13+)".into());
        }
        m
    }
}

/// The live kernel's identities.
pub struct KernelIdentities {
    map: BpfHashMap<MapData, u64, LockIdent>,
    slabs: Option<SlabIter>,
    caches: HashMap<u64, SlabCache>,
    last_read: Option<Instant>,
    btf: Option<Vec<u8>>,
    resolved: HashMap<(u64, LockIdent), KernelIdentity>,
    fields: HashMap<(String, u32), Option<String>>,
    page_size: u64,
}

impl KernelIdentities {
    /// Over the programs' map, the slab iterator (if loaded) and the
    /// kernel's BTF blob (for member paths).
    pub fn new(map: BpfHashMap<MapData, u64, LockIdent>, slabs: Option<SlabIter>, btf: Option<Vec<u8>>) -> Self {
        // SAFETY: sysconf has no preconditions.
        let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut k = KernelIdentities {
            map,
            slabs,
            caches: HashMap::new(),
            last_read: None,
            btf,
            resolved: HashMap::new(),
            fields: HashMap::new(),
            page_size,
        };
        k.read_slabs();
        k
    }

    fn read_slabs(&mut self) {
        let Some(it) = &self.slabs else { return };
        self.last_read = Some(Instant::now());
        match it.read() {
            Ok(recs) => self.caches = by_address(&recs),
            Err(e) => log::debug!("reading slab caches: {e}"),
        }
    }

    /// The cache at `addr`, re-reading the list (rate-limited) when unknown.
    fn cache(&mut self, addr: u64) -> Option<SlabCache> {
        if !self.caches.contains_key(&addr) && self.last_read.is_none_or(|t| t.elapsed() >= SLAB_REREAD) {
            self.read_slabs();
        }
        self.caches.get(&addr).cloned()
    }

    /// The member path of a lock at `offset` in objects of `cache`.
    fn field(&mut self, cache: &SlabCache, offset: u32) -> Option<String> {
        let key = (cache.name.clone(), offset);
        if let Some(f) = self.fields.get(&key) {
            return f.clone();
        }
        let f = self.btf.as_deref().and_then(|blob| {
            let t = Types::parse(blob).ok()?;
            let st = slab_struct(&t, &cache.name, cache.object_size)?;
            field_path(&t, st, offset)
        });
        self.fields.insert(key, f.clone());
        f
    }

    fn resolve(&mut self, addr: u64, id: LockIdent) -> KernelIdentity {
        let kind = (id.kind != kind::NONE)
            .then(|| kind::NAMES.get(id.kind as usize).map(|s| s.to_string()))
            .flatten()
            .filter(|s| !s.is_empty());
        let cache = (id.cache != 0).then(|| self.cache(id.cache)).flatten();
        let field =
            cache.as_ref().and_then(|c| c.offset_in_object(addr, self.page_size).and_then(|o| self.field(c, o)));
        KernelIdentity { kind, slab: cache.map(|c| c.name), field }
    }
}

impl Identities for KernelIdentities {
    fn identity(&mut self, addr: u64) -> Option<KernelIdentity> {
        let id = self.map.get(&addr, 0).ok()?;
        if let Some(r) = self.resolved.get(&(addr, id)) {
            return Some(r.clone());
        }
        let r = self.resolve(addr, id);
        if self.resolved.len() >= RESOLVED_KEPT {
            // Addresses come and go (objects are freed and reused): start over.
            self.resolved.clear();
        }
        self.resolved.insert((addr, id), r.clone());
        Some(r)
    }
}
