//! Which futex rows of a lockprof profile are the stress workload's own
//! locks. lockprof names a user-space lock by its process's symbols only
//! while the process lives, and its JSON rows carry no pid; the workload
//! has exited when the profile is written. So the rows are found by
//! address: each lock is a static of the (position-independent) lockprof
//! binary, at its ELF symbol's value plus the process's page-aligned load
//! base, and the workload's rows are the ones that share one base.

use std::{collections::BTreeMap, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// Page size the load base is aligned to.
const PAGE: u64 = 4096;

/// A data symbol: name, value, size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sym {
    /// Symbol name.
    pub name: String,
    /// Its value (address before relocation).
    pub value: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// The workload locks' symbols (`lockprof_stress_*`) of `bin`, from `nm -S`.
pub fn stress_symbols(bin: &Path) -> Result<Vec<Sym>> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(bin)
        .output()
        .context("running nm (binutils) to read the workload's lock symbols")?;
    if !out.status.success() {
        bail!("nm {} failed: {}", bin.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(parse_nm(&String::from_utf8_lossy(&out.stdout)))
}

/// `0000000000f2c530 0000000000000128 B lockprof_stress_mutex` lines.
fn parse_nm(out: &str) -> Vec<Sym> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [value, size, _kind, name] = w[..] else { return None };
            name.starts_with("lockprof_stress_").then_some(Sym {
                name: name.to_string(),
                value: u64::from_str_radix(value, 16).ok()?,
                size: u64::from_str_radix(size, 16).ok()?,
            })
        })
        .collect()
}

/// The page-aligned base that puts `addr` inside `s`, if one does.
fn base_of(addr: u64, s: &Sym) -> Option<u64> {
    let base = addr.checked_sub(s.value)? / PAGE * PAGE;
    (addr - base < s.value + s.size).then_some(base)
}

/// Futex contentions of the profile `v` on each of `locks` (the symbols
/// the workload counted), found by address: the load base that the most
/// of `locks` share (then the most contentions) is the workload's.
pub fn seen_per_lock(v: &Value, syms: &[Sym], locks: &[String]) -> Vec<(String, f64)> {
    let syms: Vec<&Sym> = syms.iter().filter(|s| locks.contains(&s.name)).collect();
    let rows: Vec<(u64, f64)> = v["locks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|l| matches!(l["type"].as_str(), Some("futex" | "futex-pi")))
        .filter_map(|l| {
            let addr = u64::from_str_radix(l["addr"].as_str()?.trim_start_matches("0x"), 16).ok()?;
            Some((addr, l["contended"].as_f64().unwrap_or(0.0)))
        })
        .collect();
    // base -> symbol -> contentions.
    let mut by_base: BTreeMap<u64, BTreeMap<&str, f64>> = BTreeMap::new();
    for (addr, n) in &rows {
        for s in &syms {
            if let Some(b) = base_of(*addr, s) {
                *by_base.entry(b).or_default().entry(s.name.as_str()).or_default() += n;
            }
        }
    }
    let best = by_base.values().max_by(|a, b| {
        (a.len(), a.values().sum::<f64>())
            .partial_cmp(&(b.len(), b.values().sum::<f64>()))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    locks.iter().map(|l| (l.clone(), best.and_then(|m| m.get(l.as_str())).copied().unwrap_or(0.0))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syms() -> Vec<Sym> {
        parse_nm(
            "0000000000f2c408 0000000000000128 B lockprof_stress_cond_mutex\n\
0000000000f2c530 0000000000000128 B lockprof_stress_mutex\n\
0000000000f2c658 0000000000000108 B lockprof_stress_std_mutex\n\
0000000000001000 0000000000000010 T main\n\
                 U pthread_mutex_lock\n",
        )
    }

    #[test]
    fn nm_lines_give_the_stress_symbols() {
        let s = syms();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1], Sym { name: "lockprof_stress_mutex".into(), value: 0xf2c530, size: 0x128 });
    }

    #[test]
    fn rows_are_the_workloads_by_their_shared_base() {
        let v = serde_json::json!({"locks": [
            {"addr": "0x55c333cd6530", "type": "futex", "contended": 14333},
            {"addr": "0x55c333cd6658", "type": "futex", "contended": 1038},
            {"addr": "0x55c333cd6660", "type": "futex", "contended": 2},
            // Another process's heap futex whose page offset happens to fall in a symbol.
            {"addr": "0x7f5ccec6d540", "type": "futex", "contended": 50000},
            {"addr": "0xffff888627c2ba80", "type": "spinlock", "contended": 765},
        ]});
        let locks = vec!["lockprof_stress_mutex".to_string(), "lockprof_stress_std_mutex".to_string()];
        assert_eq!(
            seen_per_lock(&v, &syms(), &locks),
            vec![("lockprof_stress_mutex".to_string(), 14333.0), ("lockprof_stress_std_mutex".to_string(), 1040.0)]
        );
        let none = serde_json::json!({"locks": []});
        assert_eq!(seen_per_lock(&none, &syms(), &locks)[0].1, 0.0);
    }
}
