//! Whether a function's first instructions set up a frame pointer: the
//! sign, read from a sample of a binary's functions, that it was built with
//! frame pointers (a frame-pointer walk passes through its functions).

/// The instruction sets whose prologues are recognized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    X86_64,
    Aarch64,
}

impl Isa {
    /// The instruction set of an object file's architecture, if recognized.
    pub fn of(arch: object::Architecture) -> Option<Isa> {
        match arch {
            object::Architecture::X86_64 => Some(Isa::X86_64),
            object::Architecture::Aarch64 => Some(Isa::Aarch64),
            _ => None,
        }
    }
}

/// The bytes of a function's start that [`sets_up_frame`] reads: room for
/// the instructions compilers schedule into an x86_64 prologue (four arm64
/// instructions are read of them).
pub const PROLOGUE_BYTES: usize = 32;

/// Whether `code`, a function's first bytes, sets up a frame pointer.
pub fn sets_up_frame(isa: Isa, code: &[u8]) -> bool {
    match isa {
        Isa::X86_64 => x86_64(code),
        Isa::Aarch64 => aarch64(code),
    }
}

/// `push %rbp`.
const PUSH_RBP: u8 = 0x55;
/// `mov %rsp,%rbp`, in either encoding.
const MOV_RSP_RBP: [[u8; 3]; 2] = [[0x48, 0x89, 0xe5], [0x48, 0x8b, 0xec]];

/// `push %rbp`, then `mov %rsp,%rbp`, in the first [`PROLOGUE_BYTES`].
/// They need not be adjacent nor first: gcc -O2 schedules other
/// instructions before and between them (`movabs $..,%rax; push %rbp;
/// mov %rdi,%r8; xor %esi,%esi; mul %rdi; mov %rdi,%rax; mov %rsp,%rbp`),
/// and CET code starts with an endbr64. Frameless code never copies %rsp to
/// %rbp (save where it needs a frame: alloca, variable-length arrays). The
/// bytes are not decoded: a `55` inside an earlier instruction passes for
/// the push, a rare error next to the move's three bytes.
fn x86_64(code: &[u8]) -> bool {
    let code = &code[..code.len().min(PROLOGUE_BYTES)];
    code.windows(3).position(|w| MOV_RSP_RBP.iter().any(|m| w == m)).is_some_and(|at| code[..at].contains(&PUSH_RBP))
}

/// Arm64 instructions read: room for a `paciasp` or `bti c`, and a
/// `sub sp` before the pair is stored.
const ARM64_INSNS: usize = 4;

/// `stp x29, x30, [sp, #-N]!` (or `[sp, #N]` after a `sub sp`), then
/// `mov x29, sp` (or `add x29, sp, #N`), within the first four instructions.
fn aarch64(code: &[u8]) -> bool {
    let insns: Vec<u32> =
        code.chunks_exact(4).take(ARM64_INSNS).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    insns.iter().position(|&i| stores_fp_lr(i)).is_some_and(|at| insns[at + 1..].iter().any(|&i| sets_fp_from_sp(i)))
}

/// `stp x29, x30, [sp, #imm]!` (pre-index) or `stp x29, x30, [sp, #imm]`
/// (signed offset), any immediate.
fn stores_fp_lr(insn: u32) -> bool {
    const FIXED: u32 = 0xffc0_7fff; // all but imm7
    const PRE_INDEX: u32 = 0xa980_7bfd;
    const SIGNED_OFFSET: u32 = 0xa900_7bfd;
    matches!(insn & FIXED, PRE_INDEX | SIGNED_OFFSET)
}

/// `add x29, sp, #imm` (unshifted), which is `mov x29, sp` for imm 0.
fn sets_fp_from_sp(insn: u32) -> bool {
    const FIXED: u32 = 0xffc0_03ff; // all but imm12
    insn & FIXED == 0x9100_03fd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(insns: &[u32]) -> Vec<u8> {
        insns.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    #[test]
    fn x86_64_push_rbp_then_mov_rsp_rbp_early_in_the_function() {
        let yes = |code: &[u8]| sets_up_frame(Isa::X86_64, code);
        // push %rbp; mov %rsp,%rbp; sub $0x10,%rsp
        assert!(yes(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10]));
        // The other encoding of the move.
        assert!(yes(&[0x55, 0x48, 0x8b, 0xec, 0xc3]));
        // endbr64 first.
        assert!(yes(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]));
        // gcc 12 -O2 -fno-omit-frame-pointer: movabs $0x2492492492492493,%rax;
        // push %rbp; mov %rdi,%r8; xor %esi,%esi; mul %rdi; mov %rdi,%rax;
        // mov %rsp,%rbp.
        let scheduled = [
            0x48, 0xb8, 0x93, 0x24, 0x49, 0x92, 0x24, 0x49, 0x92, 0x24, 0x55, 0x49, 0x89, 0xf8, 0x31, 0xf6, 0x48, 0xf7,
            0xe7, 0x48, 0x89, 0xf8, 0x48, 0x89, 0xe5, 0x48, 0x29, 0xd0,
        ];
        assert!(yes(&scheduled));
        // The same with an endbr64 before it: the move ends at byte 29.
        let cet: Vec<u8> = [0xf3, 0x0f, 0x1e, 0xfa].iter().chain(&scheduled).copied().collect();
        assert!(yes(&cet));
        // Beyond the bytes read: the frame is set up after the function's
        // start, not in its prologue (shrink-wrapped).
        let late: Vec<u8> = [0x90; 30].iter().chain(&[0x55, 0x48, 0x89, 0xe5]).copied().collect();
        assert!(!yes(&late));
        // push %rbp as a callee-saved register: push %rbp; push %rbx; sub $8,%rsp.
        assert!(!yes(&[0x55, 0x53, 0x48, 0x83, 0xec, 0x08, 0x90, 0x90]));
        // The move with no push before it (after it does not count).
        assert!(!yes(&[0x48, 0x89, 0xe5, 0x55, 0xc3]));
        // Frameless: sub $0x18,%rsp; mov %rdi,%rax; ret.
        assert!(!yes(&[0x48, 0x83, 0xec, 0x18, 0x48, 0x89, 0xf8, 0xc3]));
        // endbr64 then a frameless body.
        assert!(!yes(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x18]));
        // Cut short.
        assert!(!yes(&[0x55, 0x48, 0x89]));
        assert!(!yes(&[]));
    }

    #[test]
    fn aarch64_frame_record_stored_then_x29_set_from_sp() {
        const STP_PRE: u32 = 0xa9bf_7bfd; // stp x29, x30, [sp, #-16]!
        const STP_PRE_48: u32 = 0xa9bd_7bfd; // stp x29, x30, [sp, #-48]!
        const STP_OFF: u32 = 0xa901_7bfd; // stp x29, x30, [sp, #16]
        const MOV_FP: u32 = 0x9100_03fd; // mov x29, sp
        const ADD_FP_16: u32 = 0x9100_43fd; // add x29, sp, #16
        const PACIASP: u32 = 0xd503_233f;
        const BTI_C: u32 = 0xd503_245f;
        const SUB_SP: u32 = 0xd100_83ff; // sub sp, sp, #32
        const STP_X19_X20: u32 = 0xa9bf_53f3; // stp x19, x20, [sp, #-16]!
        const NOP: u32 = 0xd503_201f;
        const RET: u32 = 0xd65f_03c0;
        for (insns, frame) in [
            (&[STP_PRE, MOV_FP, NOP, RET][..], true),
            (&[STP_PRE_48, MOV_FP][..], true),
            (&[PACIASP, STP_PRE, MOV_FP, RET][..], true),
            (&[BTI_C, STP_PRE, NOP, MOV_FP][..], true),
            (&[SUB_SP, STP_OFF, ADD_FP_16, RET][..], true),
            // The pair stored but x29 never set: a frameless function
            // saving x29 as a callee-saved register.
            (&[STP_PRE, NOP, NOP, RET][..], false),
            // x29 set before the pair is stored.
            (&[MOV_FP, STP_PRE, NOP, RET][..], false),
            // Other registers saved.
            (&[STP_X19_X20, MOV_FP, NOP, RET][..], false),
            // The frame set up beyond the first four instructions.
            (&[NOP, NOP, NOP, STP_PRE, MOV_FP][..], false),
            (&[SUB_SP, NOP, NOP, RET][..], false),
            (&[][..], false),
        ] {
            assert_eq!(sets_up_frame(Isa::Aarch64, &arm(insns)), frame, "{insns:08x?}");
        }
        // The x86_64 prologue's bytes are not an arm64 one, nor the reverse.
        assert!(!sets_up_frame(Isa::Aarch64, &[0x55, 0x48, 0x89, 0xe5, 0x55, 0x48, 0x89, 0xe5]));
        assert!(!sets_up_frame(Isa::X86_64, &arm(&[STP_PRE, MOV_FP])));
    }

    #[test]
    fn only_x86_64_and_arm64_are_read() {
        assert_eq!(Isa::of(object::Architecture::X86_64), Some(Isa::X86_64));
        assert_eq!(Isa::of(object::Architecture::Aarch64), Some(Isa::Aarch64));
        assert_eq!(Isa::of(object::Architecture::Riscv64), None);
    }
}
