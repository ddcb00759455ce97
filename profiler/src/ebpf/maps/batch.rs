//! `BPF_MAP_LOOKUP_AND_DELETE_BATCH` on a per-CPU hash map (Linux 5.6+),
//! which aya 0.14 does not wrap: one bpf(2) call reads and deletes hundreds
//! of keys, where aya's per-key path takes three (next key, lookup,
//! delete) and a heap allocation per key. On a fork storm, whose waits
//! arrive under a new thread id each, the per-key path was most of
//! lockprof's own CPU time.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
};

/// `bpf(2)` commands (uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;

/// Keys asked for per call. A hash map's batch stops at a bucket
/// boundary and refuses (ENOSPC) a bucket larger than what is left, and
/// buckets hold a handful of keys: a few hundred leaves ample room.
pub const BATCH_KEYS: usize = 256;

/// The `batch` member of `union bpf_attr` (uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Bytes one CPU's copy of a `value_size`-byte value takes in a per-CPU
/// map's value buffer: the kernel rounds each up to 8.
pub fn per_cpu_stride(value_size: usize) -> usize {
    value_size.div_ceil(8) * 8
}

/// Reads and deletes every key of the per-CPU hash map `map`, in calls of
/// up to [`BATCH_KEYS`] keys, handing each call's raw keys and values to
/// `each` (`n` keys of `key_size` bytes; for key `i`, `cpus` values of
/// [`per_cpu_stride`] bytes from `i * cpus * stride`). Returns the keys
/// read; an error of the first call (a kernel without batch operations)
/// has read and deleted nothing.
pub fn lookup_and_delete_all(
    map: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    cpus: usize,
    bufs: &mut (Vec<u8>, Vec<u8>),
    mut each: impl FnMut(&[u8], &[u8], usize),
) -> io::Result<usize> {
    let stride = per_cpu_stride(value_size) * cpus;
    let (keys, values) = bufs;
    keys.resize(BATCH_KEYS * key_size, 0);
    values.resize(BATCH_KEYS * stride, 0);
    // The kernel's batch position (a bucket index, u32 for hash maps).
    let mut token = [0u64; 1];
    let mut first = true;
    let mut total = 0;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { token.as_ptr() as u64 },
            out_batch: token.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH_KEYS as u32,
            map_fd: map.as_fd().as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        let err = batch_call(BPF_MAP_LOOKUP_AND_DELETE_BATCH, &mut attr).err();
        let done = matches!(&err, Some(e) if e.raw_os_error() == Some(libc::ENOENT));
        if let Some(e) = err.filter(|_| !done) {
            return Err(if first { e } else { io::Error::new(e.kind(), format!("{e} after {total} keys")) });
        }
        let n = (attr.count as usize).min(BATCH_KEYS);
        if n > 0 {
            each(&keys[..n * key_size], &values[..n * stride], n);
        }
        total += n;
        if done {
            return Ok(total);
        }
        first = false;
    }
}

/// One batch command; the caller sized `attr`'s buffers for `count`
/// keys and values (and the token).
fn batch_call(cmd: libc::c_long, attr: &mut BatchAttr) -> io::Result<()> {
    // SAFETY: bpf(2) reads the attr union's `batch` member (a prefix of the
    // union, the size passed), reads the token and writes at most `count`
    // keys, `count` per-CPU values and the token, into buffers the caller
    // sized for that and keeps alive across the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut BatchAttr, std::mem::size_of::<BatchAttr>()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Reads entries `first..first + n` of the per-CPU array `map` (u32 keys)
/// in one call into `values` (for entry `i`, `cpus` values of
/// [`per_cpu_stride`] bytes from `i * cpus * stride`); the number read.
pub fn lookup_array_range(
    map: BorrowedFd<'_>,
    first: u32,
    n: usize,
    value_size: usize,
    cpus: usize,
    bufs: &mut (Vec<u8>, Vec<u8>),
) -> io::Result<usize> {
    let (keys, values) = bufs;
    keys.resize(n * 4, 0);
    values.resize(n * per_cpu_stride(value_size) * cpus, 0);
    // The batch starts after the key in `in_batch`: none for the first entry.
    let prev = [first.wrapping_sub(1), 0];
    let mut token = [0u32; 2];
    let mut attr = BatchAttr {
        in_batch: if first == 0 { 0 } else { prev.as_ptr() as u64 },
        out_batch: token.as_mut_ptr() as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: n as u32,
        map_fd: map.as_fd().as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    match batch_call(BPF_MAP_LOOKUP_BATCH, &mut attr) {
        Ok(()) => Ok((attr.count as usize).min(n)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok((attr.count as usize).min(n)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cpu_values_are_padded_to_eight_bytes() {
        assert_eq!(per_cpu_stride(8), 8);
        assert_eq!(per_cpu_stride(12), 16);
        assert_eq!(per_cpu_stride(1), 8);
    }

    #[test]
    fn the_attr_is_the_uapi_batch_member() {
        // in_batch, out_batch, keys, values, count, map_fd, elem_flags, flags.
        assert_eq!(std::mem::size_of::<BatchAttr>(), 56);
    }
}
