//! What a release binary must be: an ELF for its architecture that needs no
//! loader (no `PT_INTERP`: static, or static-pie as Rust's musl targets link).

use std::path::Path;

use anyhow::{Context as _, Result, bail, ensure};

use super::Arch;

const PT_INTERP: u32 = 3;

/// `e_machine` of an architecture.
fn machine(arch: Arch) -> u16 {
    match arch.name {
        "aarch64" => 183,
        _ => 62,
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Checks the ELF header's machine and the program headers.
pub fn check(bytes: &[u8], arch: Arch) -> Result<()> {
    ensure!(bytes.get(..4) == Some(b"\x7fELF"), "not an ELF file");
    ensure!(bytes.get(4) == Some(&2) && bytes.get(5) == Some(&1), "not a 64-bit little-endian ELF");
    let m = u16_at(bytes, 18).context("truncated ELF header")?;
    ensure!(m == machine(arch), "built for machine {m}, not {} ({})", arch.name, machine(arch));
    let phoff = u64_at(bytes, 32).context("truncated ELF header")? as usize;
    let phentsize = usize::from(u16_at(bytes, 54).context("truncated ELF header")?);
    let phnum = usize::from(u16_at(bytes, 56).context("truncated ELF header")?);
    for i in 0..phnum {
        let ty = u32_at(bytes, phoff + i * phentsize).context("truncated program headers")?;
        if ty == PT_INTERP {
            bail!("dynamically linked (it names a program interpreter): not the static binary a release ships");
        }
    }
    Ok(())
}

/// [`check`] on a file.
pub fn check_static(path: &Path, arch: Arch) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    check(&bytes, arch).with_context(|| format!("{}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::{AARCH64, X86_64};

    /// A minimal ELF64 header with one program header of type `ty`.
    fn elf(machine: u16, ty: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        (b[4], b[5]) = (2, 1);
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&ty.to_le_bytes());
        b
    }

    #[test]
    fn static_binaries_of_the_right_machine_pass() {
        assert!(check(&elf(62, 1), X86_64).is_ok());
        assert!(check(&elf(183, 1), AARCH64).is_ok());
        let e = check(&elf(62, PT_INTERP), X86_64).expect_err("dynamic");
        assert!(e.to_string().contains("dynamically linked"), "{e}");
        let e = check(&elf(62, 1), AARCH64).expect_err("wrong machine");
        assert!(e.to_string().contains("machine 62"), "{e}");
        assert!(check(b"#!/bin/sh\n", X86_64).is_err());
        assert!(check(&elf(62, 1)[..40], X86_64).is_err());
    }

    #[test]
    fn the_running_xtask_is_dynamic() {
        // xtask itself is a glibc binary: the check must see its interpreter.
        let me = std::env::current_exe().expect("current_exe");
        let bytes = std::fs::read(me).expect("read");
        let arch = if cfg!(target_arch = "aarch64") { AARCH64 } else { X86_64 };
        assert!(check(&bytes, arch).is_err());
    }
}
