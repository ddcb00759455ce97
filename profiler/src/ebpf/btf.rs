//! Just enough of a BTF reader to find member offsets of a kernel struct
//! (aya 0.14 keeps its type lookups crate-private). Used for the `pid`,
//! `tgid` and `comm` of `struct task_struct`, so the yield_to programs can
//! name the task a vCPU yields to.

use profiler_common::{Layout, TaskOffsets, UNKNOWN_OFFSET};

/// Why offsets could not be found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// The blob is not BTF or is cut short.
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    /// No struct of that name.
    #[error("no struct {0} in the kernel BTF")]
    NoStruct(String),
    /// The struct has no such member (also searched in anonymous members).
    #[error("struct {0} has no member {1}")]
    NoMember(String, String),
    /// Reading /sys/kernel/btf/vmlinux failed.
    #[error("/sys/kernel/btf/vmlinux: {0}")]
    Io(String),
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_FUNC: u32 = 12;

struct Member {
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
}

enum Ty {
    Composite {
        name_off: u32,
        members: Vec<Member>,
    },
    /// Typedefs and qualifiers that point at another type.
    Ref(u32),
    /// A function (what fentry/fexit can attach to).
    Func {
        name_off: u32,
    },
    Other,
}

/// Parsed types (id 0 is void) and the string section.
pub struct Types<'a> {
    types: Vec<Ty>,
    strings: &'a [u8],
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Bytes of kind-specific data after a 12-byte type header.
fn trailer(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
        3 => 12,                      // ARRAY
        4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
        6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
        2 | 7..=12 | 16 | 18 => 0,    // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        _ => return None,
    })
}

impl<'a> Types<'a> {
    /// Parses a little-endian BTF blob.
    pub fn parse(b: &'a [u8]) -> Result<Types<'a>, BtfError> {
        let bad = BtfError::Malformed;
        if u16_at(b, 0) != Some(MAGIC) {
            return Err(bad("bad magic (not little-endian BTF)"));
        }
        let hdr_len = u32_at(b, 4).ok_or(bad("short header"))? as usize;
        let field = |i: usize| u32_at(b, 8 + 4 * i).map(|v| v as usize).ok_or(bad("short header"));
        let (type_off, type_len, str_off, str_len) = (field(0)?, field(1)?, field(2)?, field(3)?);
        let types_sec = b.get(hdr_len + type_off..hdr_len + type_off + type_len).ok_or(bad("type section"))?;
        let strings = b.get(hdr_len + str_off..hdr_len + str_off + str_len).ok_or(bad("string section"))?;
        let mut types = vec![Ty::Other];
        let mut at = 0;
        while at < types_sec.len() {
            let name_off = u32_at(types_sec, at).ok_or(bad("type header"))?;
            let info = u32_at(types_sec, at + 4).ok_or(bad("type header"))?;
            let size_or_type = u32_at(types_sec, at + 8).ok_or(bad("type header"))?;
            let (kind, vlen, kflag) = ((info >> 24) & 0x1f, (info & 0xffff) as usize, info >> 31 == 1);
            let extra = trailer(kind, vlen).ok_or(bad("unknown type kind"))?;
            let body = types_sec.get(at + 12..at + 12 + extra).ok_or(bad("type cut short"))?;
            types.push(match kind {
                KIND_STRUCT | KIND_UNION => {
                    let members = (0..vlen)
                        .map(|i| {
                            let m = 12 * i;
                            let off = u32_at(body, m + 8).unwrap_or(0);
                            Member {
                                name_off: u32_at(body, m).unwrap_or(0),
                                type_id: u32_at(body, m + 4).unwrap_or(0),
                                // With kind_flag, the top 8 bits are a bitfield size.
                                bit_offset: if kflag { off & 0x00ff_ffff } else { off },
                            }
                        })
                        .collect();
                    Ty::Composite { name_off, members }
                }
                8..=11 | 18 => Ty::Ref(size_or_type),
                KIND_FUNC => Ty::Func { name_off },
                _ => Ty::Other,
            });
            at += 12 + extra;
        }
        Ok(Types { types, strings })
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = self.strings.get(off as usize..).unwrap_or(&[]);
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }

    fn resolve(&self, mut id: u32) -> Option<&Ty> {
        for _ in 0..32 {
            match self.types.get(id as usize)? {
                Ty::Ref(next) => id = *next,
                t => return Some(t),
            }
        }
        None
    }

    /// Whether the BTF describes a function called `name` (fentry/fexit can
    /// only attach to those).
    pub fn has_func(&self, name: &str) -> bool {
        self.types.iter().any(|t| matches!(t, Ty::Func { name_off } if self.name(*name_off) == name.as_bytes()))
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous
    /// struct and union members.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let members = self
            .types
            .iter()
            .find_map(|t| match t {
                Ty::Composite { name_off, members } if self.name(*name_off) == name.as_bytes() => Some(members),
                _ => None,
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))?;
        self.find(members, member.as_bytes(), 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember(name.to_string(), member.to_string()))
    }

    fn find(&self, members: &[Member], want: &[u8], depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        for m in members {
            let n = self.name(m.name_off);
            if n == want {
                return Some(m.bit_offset);
            }
            if n.is_empty()
                && let Some(Ty::Composite { members: inner, .. }) = self.resolve(m.type_id)
                && let Some(off) = self.find(inner, want, depth + 1)
            {
                return Some(m.bit_offset + off);
            }
        }
        None
    }
}

/// `pid`, `tgid` and `comm` offsets of `struct task_struct` in a BTF blob.
pub fn task_offsets(blob: &[u8]) -> Result<TaskOffsets, BtfError> {
    let t = Types::parse(blob)?;
    Ok(TaskOffsets {
        pid: t.member_offset("task_struct", "pid")?,
        tgid: t.member_offset("task_struct", "tgid")?,
        comm: t.member_offset("task_struct", "comm")?,
        _pad: 0,
    })
}

/// Offsets of the other members the programs read ([`UNKNOWN_OFFSET`] for
/// those this kernel lacks).
pub fn layout(blob: &[u8]) -> Result<Layout, BtfError> {
    let t = Types::parse(blob)?;
    let known = |r: Result<u32, BtfError>| r.unwrap_or(UNKNOWN_OFFSET);
    Ok(Layout {
        mutex_owner: known(t.member_offset("mutex", "owner")),
        task_state: known(
            t.member_offset("task_struct", "__state").or_else(|_| t.member_offset("task_struct", "state")),
        ),
    })
}

/// The running kernel's BTF blob.
pub fn kernel_blob() -> Result<Vec<u8>, BtfError> {
    std::fs::read("/sys/kernel/btf/vmlinux").map_err(|e| BtfError::Io(e.to_string()))
}

/// The running kernel's `struct task_struct` offsets.
pub fn kernel_task_offsets() -> Result<TaskOffsets, BtfError> {
    task_offsets(&kernel_blob()?)
}

/// The running kernel's [`Layout`] (all unknown without kernel BTF).
pub fn kernel_layout() -> Layout {
    match kernel_blob().and_then(|b| layout(&b)) {
        Ok(l) => l,
        Err(e) => {
            log::debug!("kernel layout unknown: {e}");
            Layout::UNKNOWN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: `struct task_struct { int state; union { int x;
    /// struct { int pad; int pid; }; }; int tgid; char comm[16]; }` with the
    /// anonymous struct behind a typedef-free direct reference.
    fn blob() -> Vec<u8> {
        let mut strings = b"\0task_struct\0state\0x\0pad\0pid\0tgid\0comm\0int\0".to_vec();
        let off = |s: &str| {
            let needle = format!("\0{s}\0");
            strings.windows(needle.len()).position(|w| w == needle.as_bytes()).map(|p| p as u32 + 1).unwrap_or(0)
        };
        let (o_task, o_state, o_x, o_pad, o_pid, o_tgid, o_comm, o_int) =
            (off("task_struct"), off("state"), off("x"), off("pad"), off("pid"), off("tgid"), off("comm"), off("int"));
        let mut ty = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| ty.extend(w.to_le_bytes()));
        // 1: int
        push(&[o_int, 1 << 24, 4, 32]);
        // 2: char[16] (ARRAY: elem 1, index 1, nelems 16)
        push(&[0, 3 << 24, 0, 1, 1, 16]);
        // 3: anonymous struct { int pad; int pid; }
        push(&[0, (4 << 24) | 2, 8, o_pad, 1, 0, o_pid, 1, 32]);
        // 4: anonymous union { int x; struct 3; }
        push(&[0, (5 << 24) | 2, 8, o_x, 1, 0, 0, 3, 0]);
        // 5: typedef to 4 (checks references are followed)
        push(&[0, 8 << 24, 4]);
        // 6: struct task_struct (kind_flag set: bitfield encoding of offsets)
        push(&[o_task, (1 << 31) | (4 << 24) | 4, 40, o_state, 1, 0, 0, 5, 64, o_tgid, 1, 128, o_comm, 2, 160]);
        // 7: a function named "state" (FUNC, pointing at no prototype here)
        push(&[o_state, 12 << 24, 0]);
        strings.push(0);
        let mut b = Vec::new();
        b.extend(MAGIC.to_le_bytes());
        b.extend([1u8, 0]);
        b.extend(24u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((ty.len() as u32).to_le_bytes());
        b.extend((ty.len() as u32).to_le_bytes());
        b.extend((strings.len() as u32).to_le_bytes());
        b.extend(&ty);
        b.extend(&strings);
        b
    }

    #[test]
    fn finds_direct_and_anonymous_members() {
        let o = task_offsets(&blob()).expect("offsets");
        assert_eq!(o.pid, 12, "8 (union) + 4 (pid inside the anonymous struct)");
        assert_eq!(o.tgid, 16);
        assert_eq!(o.comm, 20);
    }

    #[test]
    fn functions_are_known_by_name() {
        let b = blob();
        let t = Types::parse(&b).expect("parse");
        assert!(t.has_func("state"));
        assert!(!t.has_func("pid"), "a member is not a function");
    }

    #[test]
    fn missing_struct_member_and_bad_blobs_are_errors() {
        let t_blob = blob();
        let t = Types::parse(&t_blob).expect("parse");
        assert_eq!(t.member_offset("mm_struct", "pid"), Err(BtfError::NoStruct("mm_struct".into())));
        assert_eq!(
            t.member_offset("task_struct", "nope"),
            Err(BtfError::NoMember("task_struct".into(), "nope".into()))
        );
        assert!(matches!(Types::parse(b"not btf"), Err(BtfError::Malformed(_))));
        assert!(matches!(Types::parse(&t_blob[..t_blob.len() - 20]), Err(BtfError::Malformed(_))));
    }

    #[test]
    fn reads_the_running_kernel_when_it_has_btf() {
        let Ok(blob) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("skipped: no /sys/kernel/btf/vmlinux on this machine");
            return;
        };
        let o = task_offsets(&blob).expect("task_struct offsets from the kernel BTF");
        // pid and tgid are adjacent pid_t members; comm lies after them.
        assert_eq!(o.tgid, o.pid + 4);
        assert!(o.comm > o.tgid && o.pid > 0);
    }
}
