//! The BTF type section parsed into a table: structs and unions with their
//! members and sizes, arrays, typedefs, functions.

/// Why offsets could not be found.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
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
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC: u32 = 12;
const KIND_FLOAT: u32 = 16;
const KIND_ENUM64: u32 = 19;

pub(super) struct Member {
    pub(super) name_off: u32,
    pub(super) type_id: u32,
    pub(super) bit_offset: u32,
}

pub(super) enum Ty {
    /// A struct or union.
    Composite {
        name_off: u32,
        size: u32,
        members: Vec<Member>,
    },
    /// An array of `nelems` elements of type `elem`.
    Array {
        elem: u32,
        nelems: u32,
    },
    /// A named alias.
    Typedef {
        name_off: u32,
        target: u32,
    },
    /// Qualifiers that point at another type.
    Ref(u32),
    /// A function (what fentry/fexit can attach to, or a kfunc).
    Func {
        name_off: u32,
    },
    /// A scalar or pointer of this many bytes.
    Sized(u32),
    Other,
}

/// Parsed types (id 0 is void) and the string section.
pub struct Types<'a> {
    pub(super) types: Vec<Ty>,
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
                    Ty::Composite { name_off, size: size_or_type, members }
                }
                KIND_ARRAY => Ty::Array { elem: u32_at(body, 0).unwrap_or(0), nelems: u32_at(body, 8).unwrap_or(0) },
                KIND_TYPEDEF => Ty::Typedef { name_off, target: size_or_type },
                9..=11 | 18 => Ty::Ref(size_or_type),
                KIND_FUNC => Ty::Func { name_off },
                KIND_INT | KIND_ENUM | KIND_FLOAT | KIND_ENUM64 => Ty::Sized(size_or_type),
                KIND_PTR => Ty::Sized(8),
                _ => Ty::Other,
            });
            at += 12 + extra;
        }
        Ok(Types { types, strings })
    }

    pub(super) fn name(&self, off: u32) -> &[u8] {
        let s = self.strings.get(off as usize..).unwrap_or(&[]);
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }

    /// The type `id` names, through typedefs and qualifiers.
    pub(super) fn resolve(&self, id: u32) -> Option<&Ty> {
        self.resolve_id(id).and_then(|id| self.types.get(id as usize))
    }

    fn resolve_id(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            match self.types.get(id as usize)? {
                Ty::Ref(next) | Ty::Typedef { target: next, .. } => id = *next,
                _ => return Some(id),
            }
        }
        None
    }

    /// Size in bytes of type `id`.
    pub(super) fn size_of(&self, id: u32) -> Option<u32> {
        match self.resolve(id)? {
            Ty::Composite { size, .. } | Ty::Sized(size) => Some(*size),
            Ty::Array { elem, nelems } => self.size_of(*elem)?.checked_mul(*nelems),
            _ => None,
        }
    }

    /// The struct (or union) called `name`.
    fn composite(&self, name: &str) -> Result<(u32, &[Member]), BtfError> {
        self.types
            .iter()
            .find_map(|t| match t {
                Ty::Composite { name_off, size, members } if self.name(*name_off) == name.as_bytes() => {
                    Some((*size, members.as_slice()))
                }
                _ => None,
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))
    }

    /// Whether the BTF describes a function called `name` (fentry/fexit can
    /// only attach to those).
    pub fn has_func(&self, name: &str) -> bool {
        self.func_id(name).is_some()
    }

    /// The type id of function `name` (a kfunc call names it by this id).
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| matches!(t, Ty::Func { name_off } if self.name(*name_off) == name.as_bytes()))
            .map(|i| i as u32)
    }

    /// The type id of `struct name` (0 when absent, as `bpf_rdonly_cast`
    /// callers treat it).
    pub fn struct_id(&self, name: &str) -> u32 {
        self.types
            .iter()
            .position(|t| matches!(t, Ty::Composite { name_off, .. } if self.name(*name_off) == name.as_bytes()))
            .map_or(0, |i| i as u32)
    }

    /// Size of `struct name`.
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        self.composite(name).map(|(size, _)| size)
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous
    /// struct and union members.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        self.member(name, member).map(|(off, _)| off)
    }

    /// Size in bytes of `member` of `struct name`.
    pub fn member_size(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let (_, ty) = self.member(name, member)?;
        self.size_of(ty).ok_or_else(|| BtfError::NoMember(name.to_string(), member.to_string()))
    }

    /// Byte offset and type of `member` in `struct name`.
    fn member(&self, name: &str, member: &str) -> Result<(u32, u32), BtfError> {
        let (_, members) = self.composite(name)?;
        self.find(members, member.as_bytes(), 0)
            .map(|(bits, ty)| (bits / 8, ty))
            .ok_or_else(|| BtfError::NoMember(name.to_string(), member.to_string()))
    }

    /// Byte offset of a dotted member path (`se.cfs_rq`) in `struct name`.
    pub fn path_offset(&self, name: &str, path: &str) -> Result<u32, BtfError> {
        let mut parts = path.split('.');
        let first = parts.next().unwrap_or_default();
        let (mut off, mut ty) = self.member(name, first)?;
        for part in parts {
            let Some(Ty::Composite { members, .. }) = self.resolve(ty) else {
                return Err(BtfError::NoMember(name.to_string(), path.to_string()));
            };
            let (bits, inner) = self
                .find(members, part.as_bytes(), 0)
                .ok_or_else(|| BtfError::NoMember(name.to_string(), path.to_string()))?;
            off += bits / 8;
            ty = inner;
        }
        Ok(off)
    }

    /// Elements of the array member `member` of `struct name`.
    pub fn array_len(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let (_, ty) = self.member(name, member)?;
        match self.resolve(ty) {
            Some(Ty::Array { nelems, .. }) => Ok(*nelems),
            _ => Err(BtfError::NoMember(name.to_string(), member.to_string())),
        }
    }

    /// (bit offset, type) of the member called `want`, searching anonymous
    /// members too.
    fn find(&self, members: &[Member], want: &[u8], depth: u32) -> Option<(u32, u32)> {
        if depth > 8 {
            return None;
        }
        for m in members {
            let n = self.name(m.name_off);
            if n == want {
                return Some((m.bit_offset, m.type_id));
            }
            if n.is_empty()
                && let Some(Ty::Composite { members: inner, .. }) = self.resolve(m.type_id)
                && let Some((off, ty)) = self.find(inner, want, depth + 1)
            {
                return Some((m.bit_offset + off, ty));
            }
        }
        None
    }
}

/// A BTF blob builder for tests.
#[cfg(test)]
pub(super) mod build {
    use super::MAGIC;

    /// Types added in order (ids from 1) and their strings.
    #[derive(Default)]
    pub struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        next: u32,
    }

    impl Blob {
        pub fn new() -> Blob {
            Blob { types: Vec::new(), strings: vec![0], next: 1 }
        }

        fn str(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn push(&mut self, words: &[u32]) -> u32 {
            words.iter().for_each(|w| self.types.extend(w.to_le_bytes()));
            self.next += 1;
            self.next - 1
        }

        pub fn int(&mut self, name: &str, size: u32) -> u32 {
            let n = self.str(name);
            self.push(&[n, 1 << 24, size, size * 8])
        }

        pub fn ptr(&mut self, to: u32) -> u32 {
            self.push(&[0, 2 << 24, to])
        }

        pub fn array(&mut self, elem: u32, nelems: u32) -> u32 {
            self.push(&[0, 3 << 24, 0, elem, elem, nelems])
        }

        /// A struct (or union) with (name, type, byte offset) members.
        pub fn composite(&mut self, union: bool, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
            let n = self.str(name);
            let kind = if union { 5 } else { 4 };
            let mut words = vec![n, (kind << 24) | members.len() as u32, size];
            for (m, ty, off) in members {
                let mn = self.str(m);
                words.extend([mn, *ty, off * 8]);
            }
            self.push(&words)
        }

        pub fn typedef(&mut self, name: &str, to: u32) -> u32 {
            let n = self.str(name);
            self.push(&[n, 8 << 24, to])
        }

        pub fn func(&mut self, name: &str) -> u32 {
            let n = self.str(name);
            self.push(&[n, 12 << 24, 0])
        }

        pub fn build(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend(MAGIC.to_le_bytes());
            b.extend([1u8, 0]);
            b.extend(24u32.to_le_bytes());
            b.extend(0u32.to_le_bytes());
            b.extend((self.types.len() as u32).to_le_bytes());
            b.extend((self.types.len() as u32).to_le_bytes());
            b.extend((self.strings.len() as u32).to_le_bytes());
            b.extend(&self.types);
            b.extend(&self.strings);
            b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{build::Blob, *};

    /// `struct task_struct { int state; union { int x; struct { int pad;
    /// int pid; }; }; int tgid; struct sched_entity se; }` with the union
    /// behind a typedef, `struct sched_entity { long x; void *cfs_rq; }`,
    /// `struct zone zones[4]` in `struct node`, and a function.
    fn blob() -> Vec<u8> {
        let mut b = Blob::new();
        let int = b.int("int", 4);
        let long = b.int("long", 8);
        let anon = b.composite(false, "", 8, &[("pad", int, 0), ("pid", int, 4)]);
        let union = b.composite(true, "", 8, &[("x", int, 0), ("", anon, 0)]);
        let td = b.typedef("u_t", union);
        let vp = b.ptr(0);
        let se = b.composite(false, "sched_entity", 16, &[("x", long, 0), ("cfs_rq", vp, 8)]);
        b.composite(false, "task_struct", 32, &[("state", int, 0), ("", td, 4), ("tgid", int, 12), ("se", se, 16)]);
        let zone = b.composite(false, "zone", 64, &[("lock", int, 8)]);
        let zones = b.array(zone, 4);
        b.composite(false, "node", 300, &[("id", int, 0), ("node_zones", zones, 8)]);
        b.func("bpf_get_kmem_cache");
        b.build()
    }

    #[test]
    fn members_paths_sizes_and_arrays() {
        let b = blob();
        let t = Types::parse(&b).expect("parse");
        assert_eq!(t.member_offset("task_struct", "pid"), Ok(8), "4 (union) + 4 (pid in the anonymous struct)");
        assert_eq!(t.member_offset("task_struct", "tgid"), Ok(12));
        assert_eq!(t.path_offset("task_struct", "se.cfs_rq"), Ok(24));
        assert!(t.path_offset("task_struct", "tgid.x").is_err(), "an int has no members");
        assert_eq!(t.struct_size("zone"), Ok(64));
        assert_eq!(t.array_len("node", "node_zones"), Ok(4));
        assert!(t.struct_size("sched_entity").is_ok() && t.struct_size("mm_struct").is_err());
        let id = t.struct_id("zone");
        assert!(matches!(&t.types[id as usize], Ty::Composite { size: 64, .. }));
        assert_eq!(t.struct_id("mm_struct"), 0);
    }

    #[test]
    fn functions_are_known_by_name_and_id() {
        let b = blob();
        let t = Types::parse(&b).expect("parse");
        assert!(t.has_func("bpf_get_kmem_cache"));
        assert!(!t.has_func("pid"), "a member is not a function");
        let id = t.func_id("bpf_get_kmem_cache").expect("id");
        assert!(matches!(t.types[id as usize], Ty::Func { .. }));
    }

    #[test]
    fn missing_struct_member_and_bad_blobs_are_errors() {
        let b = blob();
        let t = Types::parse(&b).expect("parse");
        assert_eq!(t.member_offset("mm_struct", "pid"), Err(BtfError::NoStruct("mm_struct".into())));
        assert_eq!(
            t.member_offset("task_struct", "nope"),
            Err(BtfError::NoMember("task_struct".into(), "nope".into()))
        );
        assert!(matches!(Types::parse(b"not btf"), Err(BtfError::Malformed(_))));
        assert!(matches!(Types::parse(&b[..b.len() - 20]), Err(BtfError::Malformed(_))));
    }
}
