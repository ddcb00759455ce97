//! pprof export: a gzipped `profile.proto` with the sample types of Go's
//! mutex profile (`contentions/count`, `delay/nanoseconds`), readable by
//! `go tool pprof`, Pyroscope and Parca. Encoding is done by prost.

use std::{collections::HashMap, io::Write, sync::Arc};

use flate2::{Compression, write::GzEncoder};
use prost::Message;

use crate::{
    model::{CallerProfile, Profile, placeholders},
    symbols::user::{UserFrame, UserStack},
};

/// The messages of pprof's profile.proto that lockprof writes.
pub mod proto {
    /// A profile.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// Sample types (one per value in each sample).
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// Samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// Mappings.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// Locations.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// Functions.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Strings; index 0 is "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// Collection time, ns since the epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// Duration, ns.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What one period is.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// Period.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// Comments (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// Default sample type (string index).
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A (type, unit) pair of string indices.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// Type.
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// Unit.
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// One sample: a stack (leaf first) and its values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Location ids, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// Values, one per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Labels.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A label.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Key (string index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// String value (string index).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// Numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    /// A memory mapping: the kernel, and each user-space binary. A user
    /// binary's mapping starts at 0 with file offset 0, so its locations'
    /// addresses are file offsets (what a symbolizer with the binary, found
    /// by its build id, needs).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Start address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// End address.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// File offset of the start.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// File name (string index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// Build id (string index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Functions are symbolized.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// File names are known.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// Line numbers are known.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
    }

    /// A location: one symbolized frame.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Mapping id.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// Address in the mapping (user frames: the file offset).
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Lines (one).
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    /// A line of a location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// Function id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// Source line (0: unknown).
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Name (string index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// System name (string index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Source file (string index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

#[derive(Default)]
struct Builder {
    p: proto::Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<String, u64>,
    locations: HashMap<String, u64>,
    /// User binaries' mappings by (path, build id).
    mappings: HashMap<(Arc<str>, Option<Arc<str>>), u64>,
    /// User frames' locations by (mapping, file offset).
    user_locations: HashMap<(u64, u64), u64>,
}

impl Builder {
    fn s(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.strings.get(v) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(v.to_string());
        self.strings.insert(v.to_string(), i);
        i
    }

    /// The function `name` (in `file`), created once.
    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let key = match file {
            Some(f) => format!("{name}\0{f}"),
            None => name.to_string(),
        };
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        let name = self.s(name);
        let filename = file.map_or(0, |f| self.s(f));
        self.p.function.push(proto::Function { id, name, system_name: name, filename });
        self.functions.insert(key, id);
        id
    }

    /// A location per distinct frame text (`function+0xoff`), a function per name.
    fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.locations.get(frame) {
            return id;
        }
        let func = frame.split("+0x").next().unwrap_or(frame).to_string();
        let fid = self.function(&func, None);
        let id = self.p.location.len() as u64 + 1;
        let line = vec![proto::Line { function_id: fid, line: 0 }];
        self.p.location.push(proto::Location { id, mapping_id: 1, address: 0, line });
        self.locations.insert(frame.to_string(), id);
        id
    }

    /// The mapping of a user frame's binary, created once.
    fn mapping(&mut self, f: &UserFrame) -> u64 {
        let key = (f.path.clone(), f.build_id.clone());
        if let Some(&id) = self.mappings.get(&key) {
            return id;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let name = if f.path.is_empty() { &*f.module } else { &*f.path };
        let filename = self.s(name);
        let build_id = f.build_id.as_deref().map_or(0, |b| self.s(b));
        self.p.mapping.push(proto::Mapping {
            id,
            memory_start: 0,
            memory_limit: u64::MAX,
            file_offset: 0,
            filename,
            build_id,
            has_functions: f.function.is_some(),
            has_filenames: f.file.is_some(),
            has_line_numbers: f.line.is_some(),
        });
        self.mappings.insert(key, id);
        id
    }

    /// A location per (binary, file offset) of a user frame: symbolized
    /// when lockprof could, else an address for the profile's reader to
    /// symbolize by build id.
    fn user_location(&mut self, f: &UserFrame) -> u64 {
        if !f.is_mapped() {
            return self.location(&f.text());
        }
        let mapping_id = self.mapping(f);
        if let Some(&id) = self.user_locations.get(&(mapping_id, f.file_offset)) {
            return id;
        }
        let line = match &f.function {
            Some(func) => {
                let function_id = self.function(func, f.file.as_deref());
                vec![proto::Line { function_id, line: f.line.map_or(0, i64::from) }]
            }
            None => Vec::new(),
        };
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(proto::Location { id, mapping_id, address: f.file_offset, line });
        self.user_locations.insert((mapping_id, f.file_offset), id);
        id
    }
}

/// What a profile's samples measure: (type, unit) per value, and the
/// default type shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleTypes {
    /// (type, unit) of each value of a sample.
    pub types: Vec<(&'static str, &'static str)>,
    /// The type viewers show first.
    pub default: &'static str,
}

impl SampleTypes {
    /// Go's mutex profile: `contentions/count` and `delay/nanoseconds`.
    pub fn mutex() -> SampleTypes {
        SampleTypes { types: vec![("contentions", "count"), ("delay", "nanoseconds")], default: "delay" }
    }
}

/// The whole-profile facts of a pprof profile.
#[derive(Clone, Debug)]
pub struct PprofHeader {
    /// Sample types.
    pub types: SampleTypes,
    /// Start, ns since the epoch.
    pub time_nanos: i64,
    /// Length, ns.
    pub duration_nanos: i64,
    /// One comment line.
    pub comment: String,
}

impl PprofHeader {
    /// The header of a recording's profile with `types`.
    pub fn of(profile: &Profile, types: SampleTypes) -> PprofHeader {
        PprofHeader {
            types,
            time_nanos: (profile.meta.started_unix_s as i64).saturating_mul(1_000_000_000),
            duration_nanos: (profile.meta.duration_s * 1e9) as i64,
            comment: format!(
                "lockprof {} on {} ({}, {} mode)",
                env!("CARGO_PKG_VERSION"),
                profile.meta.kernel,
                profile.meta.backend,
                profile.meta.mode
            ),
        }
    }
}

/// One sample: a lock, a stack (innermost first) and its values.
#[derive(Clone, Debug)]
pub struct PprofSample<'a> {
    /// Lock name (label `lock`).
    pub lock: &'a str,
    /// Type label (label `lock_type`).
    pub lock_type: &'a str,
    /// Lock address (label `lock_addr`).
    pub addr: u64,
    /// Frames, innermost first (never empty: the caller alone when unknown).
    pub frames: &'a [String],
    /// The user frames after the `[kernel]` frame of `frames`, with their
    /// binaries (`--user-stacks`).
    pub user: Option<&'a UserStack>,
    /// The waiting tasks' cgroup (label `cgroup`), when the sample is one
    /// cgroup's part of a caller.
    pub cgroup: Option<&'a str>,
    /// One value per sample type.
    pub values: Vec<i64>,
}

/// Builds pprof messages from samples.
pub fn build_pprof<'a>(h: &PprofHeader, samples: impl IntoIterator<Item = PprofSample<'a>>) -> proto::Profile {
    let mut b = Builder::default();
    b.s("");
    b.p.sample_type = h.types.types.iter().map(|(t, u)| proto::ValueType { r#type: b.s(t), unit: b.s(u) }).collect();
    b.p.period_type = b.p.sample_type.first().cloned();
    b.p.period = 1;
    b.p.default_sample_type = b.s(h.types.default);
    let kernel = b.s("[kernel.kallsyms]");
    b.p.mapping = vec![proto::Mapping { id: 1, filename: kernel, has_functions: true, ..proto::Mapping::default() }];
    b.p.time_nanos = h.time_nanos;
    b.p.duration_nanos = h.duration_nanos;
    let c = b.s(&h.comment);
    b.p.comment = vec![c];
    let (k_lock, k_type, k_addr, k_cgroup) = (b.s("lock"), b.s("lock_type"), b.s("lock_addr"), b.s("cgroup"));
    for smp in samples {
        let (lock, ty, addr) = (b.s(smp.lock), b.s(smp.lock_type), b.s(&format!("{:#x}", smp.addr)));
        let marker = smp.frames.iter().position(|f| f == placeholders::KERNEL_MARKER);
        let location_id = match (smp.user, marker) {
            (Some(user), Some(m)) => {
                let kernel = smp.frames[..=m].iter().map(|f| b.location(f)).collect::<Vec<_>>();
                kernel.into_iter().chain(user.frames.iter().map(|f| b.user_location(f))).collect()
            }
            _ => smp.frames.iter().map(|f| b.location(f)).collect(),
        };
        let mut label = vec![
            proto::Label { key: k_lock, str: lock, num: 0 },
            proto::Label { key: k_type, str: ty, num: 0 },
            proto::Label { key: k_addr, str: addr, num: 0 },
        ];
        if let Some(cg) = smp.cgroup {
            label.push(proto::Label { key: k_cgroup, str: b.s(cg), num: 0 });
        }
        b.p.sample.push(proto::Sample { location_id, value: smp.values, label });
    }
    b.p
}

fn ns(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// A caller's (cgroup name, count, wait) parts: one per cgroup its waits
/// were recorded in, and the rest without a cgroup (all of it when no
/// cgroups were recorded), so the parts sum to the caller.
pub fn cgroup_parts<'a>(profile: &'a Profile, c: &CallerProfile) -> Vec<(Option<&'a str>, u64, u64)> {
    let mut parts = Vec::with_capacity(c.cgroups.len() + 1);
    let (mut count, mut wait) = (c.wait.count(), c.wait.total_ns());
    for s in &c.cgroups {
        count = count.saturating_sub(s.count);
        wait = wait.saturating_sub(s.wait_ns);
        let name = profile.cgroups.iter().find(|g| g.id == s.id).map(|g| g.name.as_str());
        parts.push((Some(name.unwrap_or(crate::model::placeholders::NO_CGROUP)), s.count, s.wait_ns));
    }
    if count > 0 || wait > 0 || parts.is_empty() {
        parts.push((None, count, wait));
    }
    parts
}

/// The profile as pprof messages (not yet encoded): Go's mutex profile
/// types, one sample per (lock, caller stack, cgroup).
pub fn pprof_profile(profile: &Profile) -> proto::Profile {
    let header = PprofHeader::of(profile, SampleTypes::mutex());
    let types: Vec<String> = profile.locks.iter().map(|l| l.type_label()).collect();
    let samples = profile.locks.iter().zip(&types).flat_map(|(l, ty)| {
        l.callers.iter().flat_map(move |c| {
            cgroup_parts(profile, c).into_iter().map(move |(cgroup, count, wait)| PprofSample {
                lock: l.display_name(),
                lock_type: ty,
                addr: l.addr,
                frames: c.frames(),
                user: c.user.as_deref(),
                cgroup,
                values: vec![ns(count), ns(wait)],
            })
        })
    });
    build_pprof(&header, samples)
}

/// Gzipped, encoded pprof messages.
pub fn gzip_pprof(p: &proto::Profile) -> std::io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&p.encode_to_vec())?;
    gz.finish()
}

/// Gzipped, encoded pprof profile.
pub fn encode_pprof(profile: &Profile) -> std::io::Result<Vec<u8>> {
    gzip_pprof(&pprof_profile(profile))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::report::fixture;

    fn decode(gz: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz).read_to_end(&mut raw).expect("gunzip");
        proto::Profile::decode(raw.as_slice()).expect("decode")
    }

    #[test]
    fn decodes_back_to_the_same_totals() {
        let p = fixture::profile();
        let d = decode(&encode_pprof(&p).expect("encode"));
        let st = |i: i64| d.string_table[i as usize].as_str();
        assert_eq!(st(d.sample_type[0].r#type), "contentions");
        assert_eq!(st(d.sample_type[0].unit), "count");
        assert_eq!(st(d.sample_type[1].r#type), "delay");
        assert_eq!(st(d.sample_type[1].unit), "nanoseconds");
        assert_eq!(d.string_table[0], "");
        let count: i64 = d.sample.iter().map(|s| s.value[0]).sum();
        let delay: i64 = d.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(count as u64, p.contended());
        assert_eq!(delay as u64, p.locks.iter().map(|l| l.wait.total_ns()).sum::<u64>());
        // Every sample's leaf is a known function, and the lock is a label.
        let tl = d
            .sample
            .iter()
            .find(|s| s.label.iter().any(|l| st(l.key) == "lock" && st(l.str) == "tasklist_lock"))
            .expect("tasklist_lock sample");
        let leaf = &d.location[(tl.location_id[0] - 1) as usize];
        let func = &d.function[(leaf.line[0].function_id - 1) as usize];
        assert_eq!(st(func.name), "queued_write_lock_slowpath");
        assert_eq!(d.duration_nanos, 5_000_000_000);
    }

    #[test]
    fn empty_recording_is_a_valid_empty_profile() {
        let d = decode(&encode_pprof(&Profile::default()).expect("encode"));
        assert!(d.sample.is_empty());
        assert_eq!(d.sample_type.len(), 2);
    }

    #[test]
    fn cgroups_split_samples_under_a_cgroup_label_and_sum_to_the_caller() {
        let p = fixture::profile_with_cgroups();
        let d = decode(&encode_pprof(&p).expect("encode"));
        let st = |i: i64| d.string_table[i as usize].as_str();
        let label = |s: &proto::Sample, k: &str| s.label.iter().find(|l| st(l.key) == k).map(|l| st(l.str).to_string());
        let pipe: Vec<&proto::Sample> =
            d.sample.iter().filter(|s| label(s, "lock").as_deref() == Some("mutex @ anon_pipe_write")).collect();
        let mut by_cgroup: Vec<(Option<String>, i64, i64)> =
            pipe.iter().map(|s| (label(s, "cgroup"), s.value[0], s.value[1])).collect();
        by_cgroup.sort();
        assert_eq!(
            by_cgroup,
            [(Some("docker:3f2a9c1b7d4e".into()), 3, 2_700), (Some("nginx.service".into()), 1, 500)],
            "the caller's 4 waits, 3.2 us, split by cgroup"
        );
        let total: i64 = d.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(total as u64, p.locks.iter().map(|l| l.wait.total_ns()).sum::<u64>());
        // Without cgroups there is no cgroup label at all.
        let plain = decode(&encode_pprof(&fixture::profile()).expect("encode"));
        assert!(plain.sample.iter().all(|s| s.label.len() == 3));
    }

    #[test]
    fn user_frames_get_mappings_with_build_ids_and_file_offsets() {
        let d = decode(&encode_pprof(&fixture::profile_with_user_stacks()).expect("encode"));
        let st = |i: i64| d.string_table[i as usize].as_str();
        let exe = d.mapping.iter().find(|m| st(m.filename) == "/tmp/lockprof_test").expect("the binary's mapping");
        assert_eq!(st(exe.build_id), "5a1f3c9e0b1d2e3f40516273849a0b1c2d3e4f50");
        assert!(exe.has_functions && exe.has_line_numbers);
        let libc = d.mapping.iter().find(|m| st(m.filename).ends_with("libc.so.6")).expect("libc's mapping");
        assert_eq!(st(libc.build_id), "0011223344556677");
        assert!(!libc.has_functions, "libc was not symbolized: its reader symbolizes it by build id");
        let at = |mapping: u64| d.location.iter().find(|l| l.mapping_id == mapping).expect("a location");
        let w = at(exe.id);
        assert_eq!(w.address, 0x1452);
        let f = d.function.iter().find(|f| f.id == w.line[0].function_id).expect("function");
        assert_eq!((st(f.name), st(f.filename), w.line[0].line), ("lockprof_test_writer", "lockprof_test.c", 42));
        let l = at(libc.id);
        assert!(l.line.is_empty() && l.address == 0x89305);
        // Leaf first: the kernel frames, [kernel], then the user frames.
        let sample = d.sample.iter().find(|s| s.location_id.contains(&w.id)).expect("the writer's sample");
        let names: Vec<String> = sample
            .location_id
            .iter()
            .map(|id| {
                let loc = &d.location[*id as usize - 1];
                loc.line.first().map_or(format!("@{:#x}", loc.address), |ln| {
                    st(d.function[ln.function_id as usize - 1].name).to_string()
                })
            })
            .collect();
        assert_eq!(names[names.len() - 3..], ["[kernel]", "lockprof_test_writer", "@0x89305"]);
        assert_eq!(names[1], "anon_pipe_write");
    }
}
