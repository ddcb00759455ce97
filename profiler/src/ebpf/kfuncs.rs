//! Kernel functions (kfuncs) bound into the object before loading. aya 0.14
//! cannot emit kfunc calls, so the programs call placeholder helper ids
//! (`profiler_common::KFUNC_CALL_*`) and this rewrites those call
//! instructions into kfunc calls (`src_reg = BPF_PSEUDO_KFUNC_CALL`, `imm` =
//! the function's id in the kernel's BTF). `Config::kfuncs` tells the
//! programs which calls were bound; the others stay unreachable.

use profiler_common::{
    KFUNC_CALL_GET_KMEM_CACHE, KFUNC_CALL_RDONLY_CAST, KFUNC_CALL_TASK_FROM_PID, KFUNC_CALL_TASK_RELEASE,
    KFUNC_GET_KMEM_CACHE, KFUNC_RDONLY_CAST, KFUNC_TASK_FROM_PID, KFUNC_TASK_RELEASE,
};

use super::btf::Types;

/// `BPF_JMP | BPF_CALL`.
const CALL: u8 = 0x85;
/// `src_reg` of a kfunc call.
const PSEUDO_KFUNC_CALL: u8 = 2;
/// ELF section flag of code.
const SHF_EXECINSTR: u64 = 0x4;

/// (placeholder id, kernel function, `Config::kfuncs` bit).
const KFUNCS: &[(u32, &str, u32)] = &[
    (KFUNC_CALL_GET_KMEM_CACHE, "bpf_get_kmem_cache", KFUNC_GET_KMEM_CACHE),
    (KFUNC_CALL_RDONLY_CAST, "bpf_rdonly_cast", KFUNC_RDONLY_CAST),
    (KFUNC_CALL_TASK_FROM_PID, "bpf_task_from_pid", KFUNC_TASK_FROM_PID),
    (KFUNC_CALL_TASK_RELEASE, "bpf_task_release", KFUNC_TASK_RELEASE),
];

/// An 8-byte aligned copy of an object (aya parses ELF structs in place).
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    fn new(bytes: &[u8]) -> AlignedObject {
        let mut o = AlignedObject { words: vec![0u64; bytes.len().div_ceil(8)], len: bytes.len() };
        o.bytes_mut().copy_from_slice(bytes);
        o
    }

    /// The object's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`, shared.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: viewing the owned, initialized u64 buffer (at least `len`
        // bytes) as bytes; u8 has no alignment or validity requirements.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// (file offset, size) of the ELF64 object's code sections.
fn code_sections(elf: &[u8]) -> Vec<(usize, usize)> {
    if elf.get(..4) != Some(b"\x7fELF".as_slice()) || elf.get(4) != Some(&2) {
        return Vec::new();
    }
    let (Some(shoff), Some(shentsize), Some(shnum)) = (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c)) else {
        return Vec::new();
    };
    (0..shnum)
        .filter_map(|i| {
            let h = shoff as usize + i * shentsize;
            let flags = u64_at(elf, h + 8)?;
            let (off, size) = (u64_at(elf, h + 0x18)? as usize, u64_at(elf, h + 0x20)? as usize);
            (flags & SHF_EXECINSTR != 0 && off.checked_add(size)? <= elf.len()).then_some((off, size))
        })
        .collect()
}

/// Rewrites every `call placeholder` in code sections into a kfunc call to
/// BTF id `id`; returns how many.
fn bind_calls(elf: &mut [u8], placeholder: u32, id: u32) -> usize {
    let mut n = 0;
    for (off, size) in code_sections(elf) {
        for insn in elf[off..off + size].chunks_exact_mut(8) {
            if insn[0] == CALL && insn[1] == 0 && insn[4..8] == placeholder.to_le_bytes() {
                insn[1] = PSEUDO_KFUNC_CALL << 4;
                insn[4..8].copy_from_slice(&id.to_le_bytes());
                n += 1;
            }
        }
    }
    n
}

/// The object with every kfunc this kernel has bound, and the
/// `Config::kfuncs` bits of those.
pub fn bind(object: &[u8], btf: Option<&Types<'_>>) -> (AlignedObject, u32) {
    let mut obj = AlignedObject::new(object);
    let mut bits = 0;
    for &(placeholder, name, bit) in KFUNCS {
        if let Some(id) = btf.and_then(|t| t.func_id(name))
            && bind_calls(obj.bytes_mut(), placeholder, id) > 0
        {
            bits |= bit;
        }
    }
    (obj, bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with one code section holding `insns`, and one data
    /// section holding the same bytes (which must stay untouched).
    fn elf(insns: &[[u8; 8]]) -> Vec<u8> {
        let code: Vec<u8> = insns.iter().flatten().copied().collect();
        let mut e = vec![0u8; 64];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        let code_off = e.len();
        e.extend(&code);
        let data_off = e.len();
        e.extend(&code);
        let shoff = e.len();
        e[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        e[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        e[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        e.extend([0u8; 64]); // null section
        for (flags, off) in [(SHF_EXECINSTR | 2, code_off), (2, data_off)] {
            let mut h = [0u8; 64];
            h[8..16].copy_from_slice(&flags.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(code.len() as u64).to_le_bytes());
            e.extend(h);
        }
        e
    }

    fn call(imm: u32) -> [u8; 8] {
        let mut i = [CALL, 0, 0, 0, 0, 0, 0, 0];
        i[4..].copy_from_slice(&imm.to_le_bytes());
        i
    }

    #[test]
    fn placeholder_calls_in_code_become_kfunc_calls() {
        let mut e = elf(&[call(1), call(KFUNC_CALL_GET_KMEM_CACHE), [0xb7, 0, 0, 0, 1, 0, 0xf0, 0x7f]]);
        let before = e.clone();
        assert_eq!(bind_calls(&mut e, KFUNC_CALL_GET_KMEM_CACHE, 4242), 1);
        let code = &e[64..88];
        assert_eq!(&code[..8], &call(1), "real helper calls stay");
        assert_eq!(code[8..16], [CALL, 0x20, 0, 0, 0x92, 0x10, 0, 0], "src_reg 2, imm = BTF id");
        assert_eq!(&code[16..24], &before[80..88], "a mov with the same immediate is not a call");
        assert_eq!(&e[88..112], &before[88..112], "data sections are not code");
    }

    #[test]
    fn nothing_is_bound_without_the_kernel_function() {
        let e = elf(&[call(KFUNC_CALL_GET_KMEM_CACHE)]);
        let (obj, bits) = bind(&e, None);
        assert_eq!(bits, 0);
        assert_eq!(obj.bytes(), e.as_slice());
        assert!(code_sections(b"not an elf").is_empty());
    }
}
