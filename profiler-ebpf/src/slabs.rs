//! The `kmem_cache` iterator (6.13+): one [`SlabRecord`] per slab cache,
//! read by userspace to name the caches `bpf_get_kmem_cache` returns and to
//! find a lock's offset inside its object.

use aya_ebpf::{
    bindings::seq_file,
    cty::c_void,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes, bpf_seq_write},
};
use profiler_common::{SLAB_NAME_LEN, SlabRecord, known};

use crate::context::config;

/// A u32 member of the cache (0 when unknown or unreadable).
#[inline(always)]
fn member_u32(cache: u64, off: u32) -> u32 {
    if !known(off) {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel checks the address.
    unsafe { bpf_probe_read_kernel((cache + u64::from(off)) as *const u32) }.unwrap_or(0)
}

/// Iterator program: `ctx` is `struct bpf_iter__kmem_cache { struct
/// bpf_iter_meta *meta; struct kmem_cache *s; }` (`s` is NULL after the last
/// cache).
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/kmem_cache")]
pub extern "C" fn slab_caches(ctx: *mut c_void) -> i32 {
    match try_slab_caches(ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_slab_caches(ctx: *mut c_void) -> Result<i32, i32> {
    // SAFETY: the iterator context's two pointer members, read the way the
    // verifier types them (meta: bpf_iter_meta, s: kmem_cache or NULL).
    let (meta, cache) = unsafe {
        let args = ctx as *const u64;
        (core::ptr::read_volatile(args), core::ptr::read_volatile(args.add(1)))
    };
    if cache == 0 || meta == 0 {
        return Ok(0);
    }
    // SAFETY: `seq` is bpf_iter_meta's first member.
    let seq = unsafe { core::ptr::read_volatile(meta as *const u64) } as *mut seq_file;
    let l = &config().layout;
    let mut rec = SlabRecord {
        cache,
        size: member_u32(cache, l.cache_size),
        object_size: member_u32(cache, l.cache_object_size),
        order: member_u32(cache, l.cache_oo) >> 16,
        red_left_pad: member_u32(cache, l.cache_red_left_pad),
        name: [0; SLAB_NAME_LEN],
    };
    if known(l.cache_name) {
        // SAFETY: bpf_probe_read_kernel checks the address.
        let name = unsafe { bpf_probe_read_kernel((cache + u64::from(l.cache_name)) as *const u64) }.unwrap_or(0);
        // SAFETY: writes at most the name buffer's length (NUL included);
        // the source is checked by the helper. A failed read leaves it empty.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut rec.name) };
    }
    // SAFETY: `seq` is the iterator's seq_file; the record is initialized
    // stack memory of the length given.
    unsafe {
        bpf_seq_write(seq, &rec as *const SlabRecord as *const c_void, core::mem::size_of::<SlabRecord>() as u32)
    };
    Ok(0)
}
