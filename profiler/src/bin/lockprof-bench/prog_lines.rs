//! Where a loaded BPF program spends its time, by source line: sampled
//! instruction addresses (`perf script -F ip`) mapped through the
//! program's jited line info to the source lines its BTF carries. The
//! kernel keeps both (`bpf_prog_info.jited_line_info`, `.line_info`);
//! `bpftool prog dump jited` would need a disassembler that Debian's
//! bpftool is built without, this does not.

use std::{
    collections::HashMap,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use serde_json::{Value, json};

/// bpf(2) commands (uapi `enum bpf_cmd`).
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_BTF_GET_FD_BY_ID: libc::c_int = 19;

/// uapi `struct bpf_prog_info`, up to `attach_btf_id`.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
    ifindex: u32,
    gpl_compatible: u32,
    netns_dev: u64,
    netns_ino: u64,
    nr_jited_ksyms: u32,
    nr_jited_func_lens: u32,
    jited_ksyms: u64,
    jited_func_lens: u64,
    btf_id: u32,
    func_info_rec_size: u32,
    func_info: u64,
    nr_func_info: u32,
    nr_line_info: u32,
    line_info: u64,
    jited_line_info: u64,
    nr_jited_line_info: u32,
    line_info_rec_size: u32,
    jited_line_info_rec_size: u32,
    nr_prog_tags: u32,
    prog_tags: u64,
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
    verified_insns: u32,
    attach_btf_obj_id: u32,
    attach_btf_id: u32,
    _pad: u32,
}

/// uapi `struct bpf_btf_info`.
#[repr(C)]
#[derive(Default)]
struct BtfInfo {
    btf: u64,
    btf_size: u32,
    id: u32,
    name: u64,
    name_len: u32,
    kernel_btf: u32,
}

/// bpf(2) with `attr` (a uapi `union bpf_attr` prefix).
fn bpf<A>(cmd: libc::c_int, attr: &mut A) -> io::Result<i64> {
    // SAFETY: `attr` is a live, initialised `#[repr(C)]` value of the size
    // passed; the kernel reads (and for GET_INFO writes) at most that many
    // bytes, and writes into the buffers it points to only up to the
    // lengths set beside them.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// An fd for object `id` (`cmd`: a GET_FD_BY_ID command).
fn fd_by_id(cmd: libc::c_int, id: u32) -> io::Result<OwnedFd> {
    let mut attr = [id, 0, 0];
    let fd = bpf(cmd, &mut attr)?;
    // SAFETY: a new fd the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info`.
fn info_by_fd<I>(fd: &OwnedFd, info: &mut I) -> io::Result<()> {
    #[repr(C)]
    struct Attr {
        fd: u32,
        len: u32,
        info: u64,
    }
    let mut attr = Attr { fd: fd.as_raw_fd() as u32, len: size_of::<I>() as u32, info: info as *mut I as u64 };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// One line-info record: where it starts in the jited image, and its line.
struct Line {
    addr: u64,
    text: String,
}

/// Program `id`'s line records, sorted by address.
fn lines(id: u32) -> io::Result<Vec<Line>> {
    let prog = fd_by_id(BPF_PROG_GET_FD_BY_ID, id)?;
    let mut sizes = ProgInfo::default();
    info_by_fd(&prog, &mut sizes)?;
    let n = sizes.nr_line_info.min(sizes.nr_jited_line_info) as usize;
    if n == 0 || sizes.line_info_rec_size < 16 || sizes.jited_line_info_rec_size != 8 {
        return Err(io::Error::other(format!("program {id} has no jited line info")));
    }
    let rec = sizes.line_info_rec_size as usize;
    let mut line_info = vec![0u8; n * rec];
    let mut jited = vec![0u64; n];
    // Only the two arrays asked for: every other length stays 0.
    let mut want = ProgInfo {
        nr_line_info: n as u32,
        line_info: line_info.as_mut_ptr() as u64,
        line_info_rec_size: rec as u32,
        nr_jited_line_info: n as u32,
        jited_line_info: jited.as_mut_ptr() as u64,
        jited_line_info_rec_size: 8,
        ..ProgInfo::default()
    };
    info_by_fd(&prog, &mut want)?;
    let strings = btf_strings(sizes.btf_id)?;
    let text = |off: u32| -> String {
        let s = strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    let mut out: Vec<Line> = (0..n)
        .map(|i| {
            let r = &line_info[i * rec..i * rec + 16];
            let word = |k: usize| u32::from_ne_bytes([r[k], r[k + 1], r[k + 2], r[k + 3]]);
            let file = text(word(4));
            let file = file.rsplit('/').next().unwrap_or_default().to_string();
            let source: String = text(word(8)).trim().chars().take(100).collect();
            Line { addr: jited[i], text: format!("{file}:{} {source}", word(12) >> 10) }
        })
        .collect();
    out.sort_by_key(|l| l.addr);
    Ok(out)
}

/// The string section of BTF object `id`.
fn btf_strings(id: u32) -> io::Result<Vec<u8>> {
    let btf = fd_by_id(BPF_BTF_GET_FD_BY_ID, id)?;
    let mut sizes = BtfInfo::default();
    info_by_fd(&btf, &mut sizes)?;
    let mut raw = vec![0u8; sizes.btf_size as usize];
    let mut want = BtfInfo { btf: raw.as_mut_ptr() as u64, btf_size: sizes.btf_size, ..BtfInfo::default() };
    info_by_fd(&btf, &mut want)?;
    // struct btf_header: magic u16, version u8, flags u8, hdr_len, type_off,
    // type_len, str_off, str_len (u32 each).
    let word = |k: usize| raw.get(k..k + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let start = word(4) + word(16);
    Ok(raw.get(start..start + word(20)).unwrap_or_default().to_vec())
}

/// Per source line of program `id`, the samples among `ips` (hex
/// instruction addresses, one per line) that fall in it, most first.
pub fn prog_lines(id: u32, ips: &str) -> anyhow::Result<Value> {
    let lines = lines(id)?;
    let (total, rows) = by_line(&lines, ips);
    Ok(json!({
        "samples": total,
        "lines": rows.iter().map(|(line, n)| json!({"line": line, "samples": n})).collect::<Vec<_>>(),
    }))
}

/// The samples among `ips` in the program whose line records (sorted by
/// address) are `lines`, per line, most first; and their total. A sample
/// belongs to the last record at or below it, within a page of it (past
/// the last record: another program's).
fn by_line<'a>(lines: &'a [Line], ips: &str) -> (u64, Vec<(&'a str, u64)>) {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    let mut total = 0u64;
    for ip in ips.lines().filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok()) {
        let k = lines.partition_point(|l| l.addr <= ip);
        let Some(line) = k.checked_sub(1).map(|k| &lines[k]).filter(|l| ip - l.addr < 4096) else { continue };
        *counts.entry(line.text.as_str()).or_default() += 1;
        total += 1;
    }
    let mut rows: Vec<(&str, u64)> = counts.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    (total, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_go_to_the_last_line_at_or_below_them() {
        let line = |addr: u64, text: &str| Line { addr, text: text.to_string() };
        let lines = [line(0x1000, "a.rs:1 x"), line(0x1010, "a.rs:2 y"), line(0x1040, "a.rs:1 x")];
        // Two samples on line 1's first record, three on line 2, one on
        // line 1's second record; one before the program, one a page past
        // its last record, one not an address.
        let ips = "1000\n100f\n1010\n1011\n103f\n1044\n0fff\n2040\nzz\n";
        let (total, rows) = by_line(&lines, ips);
        assert_eq!(total, 6);
        assert_eq!(rows, [("a.rs:1 x", 3), ("a.rs:2 y", 3)]);
    }
}
