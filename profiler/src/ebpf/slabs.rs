//! Slab caches by address, from the `kmem_cache` iterator program (6.13+).
//! The program stays loaded; each read creates a link and an iterator with
//! the bpf(2) commands aya 0.14 keeps private, so the reader can live apart
//! from the object (in the profile builder) and re-read when a cache it has
//! not seen turns up.

use std::{
    collections::HashMap,
    io::Read,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
};

use aya::programs::ProgramFd;
use profiler_common::SlabRecord;

/// `bpf(2)` commands and the iterator attach type (uapi/linux/bpf.h).
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// The loaded iterator program.
pub struct SlabIter {
    prog: ProgramFd,
}

/// `bpf(cmd, attr)` returning a new fd.
fn bpf_fd(cmd: libc::c_long, attr: &mut [u32; 16]) -> std::io::Result<OwnedFd> {
    // SAFETY: bpf(2) reads `size` bytes of a valid, zero-padded attr union.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Records in the iterator's output (whole records only).
pub fn parse_records(bytes: &[u8]) -> Vec<SlabRecord> {
    let size = std::mem::size_of::<SlabRecord>();
    bytes
        .chunks_exact(size)
        .map(|c| {
            // SAFETY: SlabRecord is repr(C) POD (any bit pattern is valid) and
            // `c` holds exactly its size; read_unaligned copes with alignment.
            unsafe { std::ptr::read_unaligned(c.as_ptr() as *const SlabRecord) }
        })
        .collect()
}

impl SlabIter {
    /// Wraps the loaded program (an fd of its own).
    pub fn new(prog: ProgramFd) -> SlabIter {
        SlabIter { prog }
    }

    /// Every slab cache now.
    pub fn read(&self) -> std::io::Result<Vec<SlabRecord>> {
        let mut attr = [0u32; 16];
        attr[0] = self.prog.as_fd().as_raw_fd() as u32;
        attr[2] = BPF_TRACE_ITER;
        let link = bpf_fd(BPF_LINK_CREATE, &mut attr)?;
        let mut attr = [0u32; 16];
        attr[0] = link.as_raw_fd() as u32;
        let iter = bpf_fd(BPF_ITER_CREATE, &mut attr)?;
        let mut bytes = Vec::new();
        std::fs::File::from(iter).read_to_end(&mut bytes)?;
        Ok(parse_records(&bytes))
    }
}

/// A slab cache's facts, by its `struct kmem_cache` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabCache {
    /// Cache name (`kmalloc-cg-192`, `task_struct`).
    pub name: String,
    /// Object stride in the slab.
    pub size: u32,
    /// Object size.
    pub object_size: u32,
    /// Slab page order.
    pub order: u32,
    /// Red zone before each object.
    pub red_left_pad: u32,
}

impl SlabCache {
    /// Offset of `addr` inside its object: slabs are naturally aligned
    /// buddy allocations of `PAGE_SIZE << order` bytes, objects follow each
    /// other at `size` from the slab's start, after `red_left_pad`.
    pub fn offset_in_object(&self, addr: u64, page_size: u64) -> Option<u32> {
        if self.size == 0 {
            return None;
        }
        let slab_bytes = page_size.checked_shl(self.order)?;
        let in_slab = addr & (slab_bytes - 1);
        let in_obj = (in_slab % u64::from(self.size)).checked_sub(u64::from(self.red_left_pad))?;
        (in_obj < u64::from(self.object_size)).then_some(in_obj as u32)
    }
}

/// Slab caches by address.
pub fn by_address(records: &[SlabRecord]) -> HashMap<u64, SlabCache> {
    records
        .iter()
        .map(|r| {
            let end = r.name.iter().position(|&b| b == 0).unwrap_or(r.name.len());
            let cache = SlabCache {
                name: String::from_utf8_lossy(&r.name[..end]).into_owned(),
                size: r.size,
                object_size: r.object_size,
                order: r.order,
                red_left_pad: r.red_left_pad,
            };
            (r.cache, cache)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use profiler_common::SLAB_NAME_LEN;

    use super::*;

    fn record(cache: u64, name: &str, size: u32) -> SlabRecord {
        let mut n = [0u8; SLAB_NAME_LEN];
        n[..name.len()].copy_from_slice(name.as_bytes());
        SlabRecord { cache, size, object_size: size - 8, order: 1, red_left_pad: 0, name: n }
    }

    #[test]
    fn iterator_output_parses_into_caches_by_address() {
        let recs = [record(0x1000, "kmalloc-cg-192", 192), record(0x2000, "task_struct", 4160)];
        let mut bytes: Vec<u8> = Vec::new();
        for r in &recs {
            // SAFETY: viewing a repr(C) POD value as its bytes, for its size.
            bytes.extend(unsafe {
                std::slice::from_raw_parts(r as *const SlabRecord as *const u8, std::mem::size_of::<SlabRecord>())
            });
        }
        bytes.extend([1, 2, 3]); // a torn tail is ignored
        let parsed = parse_records(&bytes);
        assert_eq!(parsed, recs);
        let caches = by_address(&parsed);
        assert_eq!(caches[&0x2000].name, "task_struct");
        assert_eq!(caches[&0x1000].size, 192);
    }

    #[test]
    fn offsets_inside_objects_follow_the_slab_layout() {
        let c = SlabCache { name: "x".into(), size: 192, object_size: 184, order: 1, red_left_pad: 0 };
        // Slab of 8 KiB at 0xffff888100002000; object 3 starts at +576.
        assert_eq!(c.offset_in_object(0xffff_8881_0000_2000 + 576 + 40, 4096), Some(40));
        assert_eq!(c.offset_in_object(0xffff_8881_0000_2000 + 576 + 188, 4096), None, "in the padding");
        let red = SlabCache { red_left_pad: 16, ..c.clone() };
        assert_eq!(red.offset_in_object(0xffff_8881_0000_2000 + 16 + 8, 4096), Some(8));
        assert_eq!(red.offset_in_object(0xffff_8881_0000_2000 + 4, 4096), None, "inside the red zone");
    }
}
