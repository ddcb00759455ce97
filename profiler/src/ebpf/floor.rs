//! The overhead floor of `cargo xtask bench` (feature `bench`): programs on
//! the same tracepoints that only count. Never in the product binary.

use aya::{Btf, Ebpf, EbpfLoader, maps::PerCpuArray, programs::BtfTracePoint};
use profiler_common::names::floor;

use super::{
    AttachError, LoadError, WaitBackend, check_privileges, object::bump_memlock, object_bytes, probes::program,
};

/// The counting-only tp_btf programs, attached.
pub struct FloorProbes {
    ebpf: Ebpf,
}

impl FloorProbes {
    /// Loads and attaches the counting-only programs.
    pub fn attach() -> Result<FloorProbes, LoadError> {
        if let Some(msg) = check_privileges().missing() {
            return Err(LoadError::Privileges(msg));
        }
        bump_memlock();
        let mut ebpf = EbpfLoader::new().load(object_bytes()).map_err(|e| LoadError::Object(Box::new(e)))?;
        let fail = |e: AttachError| LoadError::NoBackend(vec![(WaitBackend::TpBtf, e.into())]);
        let btf = Btf::from_sys_fs().map_err(|_| fail(AttachError::NoBtf))?;
        for (prog, tp) in [(floor::END_BTF, "contention_end"), (floor::BEGIN_BTF, "contention_begin")] {
            let p: &mut BtfTracePoint = program(&mut ebpf, prog).map_err(fail)?;
            p.load(tp, &btf).map_err(|error| fail(AttachError::Load { prog, error }))?;
            p.attach().map_err(|error| fail(AttachError::Attach { prog, target: tp.into(), error }))?;
        }
        Ok(FloorProbes { ebpf })
    }

    /// Tracepoint hits counted so far: (begins, ends). Every contention has
    /// one end (a mutex that spins, then sleeps, begins twice).
    pub fn counts(&self) -> (u64, u64) {
        (self.sum(floor::BEGINS), self.sum(floor::ENDS))
    }

    /// Contentions counted so far on spinlocks and on rwlocks (their
    /// begins: a pure spinning wait begins once).
    pub fn spinning(&self) -> (u64, u64) {
        (self.sum(floor::SPINLOCK_BEGINS), self.sum(floor::RWLOCK_BEGINS))
    }

    fn sum(&self, idx: u32) -> u64 {
        let arr = self.ebpf.map(floor::MAP).and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok());
        arr.and_then(|a| a.get(&idx, 0).ok()).map(|v| v.iter().sum()).unwrap_or(0)
    }
}
