//! The eBPF object's stack, program by program, as the verifiers of the
//! oldest kernels count it: each BPF-to-BPF frame rounded up to 32 bytes,
//! summed along the deepest chain of calls, at most 512 (`MAX_BPF_STACK`).
//! A chain over it loads on newer kernels, whose verifiers prune dead
//! branches before counting, and is refused on 5.10 and 6.1 with "combined
//! stack size of N calls is M": this finds it on the host, not in a guest.

use std::collections::{BTreeMap, HashMap};

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolKind};

/// A section's index (`object::SectionIndex` is not ordered) and an
/// instruction's index in it.
type At = (usize, u64);

/// The verifiers' limit on a chain of frames.
const MAX_BPF_STACK: u64 = 512;
/// `BPF_JMP | BPF_CALL`, and the source register of a BPF-to-BPF call.
const CALL: u8 = 0x85;
const PSEUDO_CALL: u8 = 1;
/// The frame pointer register.
const FP: u8 = 10;

/// A function of the object: whether it is a program (in a program's
/// section; `.text` holds the functions programs call), the deepest stack
/// byte it touches, and the functions it calls.
#[derive(Default)]
struct Function {
    name: String,
    program: bool,
    depth: u64,
    calls: Vec<At>,
}

/// Every function of `bytes`, by (section, first instruction).
fn functions(bytes: &[u8]) -> BTreeMap<At, Function> {
    let obj = object::File::parse(bytes).expect("the embedded object parses");
    let mut out = BTreeMap::new();
    for section in obj.sections() {
        let Ok(code) = section.data() else { continue };
        let mut starts: Vec<(u64, String)> = obj
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.section_index() == Some(section.index()))
            .map(|s| (s.address() / 8, s.name().unwrap_or("?").to_string()))
            .collect();
        if starts.is_empty() {
            continue;
        }
        starts.sort();
        starts.dedup_by_key(|s| s.0);
        // Calls across sections (a program calling into .text) are
        // relocations against the callee's symbol or section.
        let relocations: HashMap<u64, At> = section
            .relocations()
            .filter_map(|(at, r)| match r.target() {
                RelocationTarget::Symbol(i) => {
                    let sym = obj.symbol_by_index(i).ok()?;
                    Some((at / 8, (sym.section_index()?.0, sym.address())))
                }
                _ => None,
            })
            .collect();
        let n = code.len() as u64 / 8;
        for (k, (start, name)) in starts.iter().enumerate() {
            let end = starts.get(k + 1).map_or(n, |s| s.0);
            let program = section.name() != Ok(".text");
            let mut f = Function { name: name.clone(), program, ..Function::default() };
            // The register last set to the frame pointer (`rX = r10`),
            // whose `rX += -N` points N bytes down the stack.
            let mut fp_copy = None;
            for i in *start..end {
                let b = &code[(i * 8) as usize..(i * 8 + 8) as usize];
                let (op, dst, src) = (b[0], b[1] & 0xf, b[1] >> 4);
                let off = i64::from(i16::from_le_bytes([b[2], b[3]]));
                let imm = i64::from(i32::from_le_bytes([b[4], b[5], b[6], b[7]]));
                let base = match op & 0x07 {
                    0x01 => Some(src),        // BPF_LDX
                    0x02 | 0x03 => Some(dst), // BPF_ST, BPF_STX
                    _ => None,
                };
                if base == Some(FP) && off < 0 {
                    f.depth = f.depth.max(off.unsigned_abs());
                }
                match op {
                    // rX = r10 (BPF_ALU64 | BPF_MOV | BPF_X)
                    0xbf if src == FP => {
                        fp_copy = Some(dst);
                        continue;
                    }
                    // rX += imm (BPF_ALU64 | BPF_ADD | BPF_K) on that copy
                    0x07 if fp_copy == Some(dst) && imm < 0 => f.depth = f.depth.max(imm.unsigned_abs()),
                    CALL if src == PSEUDO_CALL => {
                        let target = match relocations.get(&i) {
                            Some(&(s, addr)) => (s, (addr as i64 / 8 + imm + 1) as u64),
                            None => (section.index().0, (i as i64 + 1 + imm) as u64),
                        };
                        f.calls.push(target);
                    }
                    _ => {}
                }
                // Anything else that writes the copy ends it, and so does a
                // call when the copy is in r0-r5 (which calls clobber).
                let writes = matches!(op & 0x07, 0x00 | 0x01 | 0x04 | 0x07) && fp_copy == Some(dst);
                if writes || (op == CALL && fp_copy.is_some_and(|r| r <= 5)) {
                    fp_copy = None;
                }
            }
            out.insert((section.index().0, *start), f);
        }
    }
    out
}

/// The deepest chain from `at`: its bytes (frames rounded up to 32) and
/// the functions along it.
fn deepest(fs: &BTreeMap<At, Function>, at: At, seen: &mut Vec<At>) -> (u64, Vec<String>) {
    let Some(f) = fs.get(&at) else {
        return (0, vec![format!("[no function at {at:?}]")]);
    };
    seen.push(at);
    let mut below = (0, Vec::new());
    for &c in &f.calls {
        if !seen.contains(&c) {
            let d = deepest(fs, c, seen);
            if d.0 > below.0 || below.1.is_empty() {
                below = d;
            }
        }
    }
    seen.pop();
    let mut chain = vec![format!("{} ({} B)", short(&f.name), f.depth)];
    chain.extend(below.1);
    (f.depth.max(1).next_multiple_of(32) + below.0, chain)
}

/// The last identifier of a Rust v0 mangled name (`_RNvNt..5futex7release`:
/// `release`); other names as they are.
fn short(name: &str) -> &str {
    if !name.starts_with("_R") {
        return name;
    }
    let b = name.as_bytes();
    for start in 0..b.len() {
        if !b[start].is_ascii_digit() || (start > 0 && b[start - 1].is_ascii_digit()) {
            continue;
        }
        let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        let n: usize = name[start..start + digits].parse().unwrap_or(0);
        if start + digits + n == b.len() && n > 0 {
            return &name[start + digits..];
        }
    }
    name
}

#[test]
fn mangled_names_shorten_to_their_last_identifier() {
    assert_eq!(short("_RNvNtCs97M8BLd8Gqn_8profiler5futex7release"), "release");
    assert_eq!(short("futex_enter"), "futex_enter");
}

#[test]
fn every_program_fits_the_oldest_verifiers_stack() {
    let fs = functions(super::object_bytes());
    let programs: Vec<_> = fs.iter().filter(|(_, f)| f.program).map(|(&at, _)| at).collect();
    assert!(programs.len() > 10, "only {} programs found in the object", programs.len());
    let mut over = Vec::new();
    for p in programs {
        let (bytes, chain) = deepest(&fs, p, &mut Vec::new());
        if bytes > MAX_BPF_STACK {
            over.push(format!("{bytes} B: {}", chain.join(" -> ")));
        }
    }
    assert!(over.is_empty(), "chains of frames over {MAX_BPF_STACK} bytes (refused before 6.x):\n{}", over.join("\n"));
}
