//! A guest kernel from Debian's packages, whatever layout the package has:
//! the packages its index entry names ([`super::packages`]: one package, or
//! an image and a modules package behind a meta package), unpacked, never
//! installed; then the image found where it is (`/boot` or
//! `usr/lib/modules/<ver>/vmlinuz`) and the modules (under `/lib` or
//! `/usr/lib`, plain or compressed: `.ko.xz`, `.ko.zst`). A kernel whose
//! modules package has left the archive boots without modules, saying so.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use super::{
    apt::{Apt, SUITES},
    packages::Index,
};
use crate::{
    dist::{AARCH64, ARCHES, Arch, X86_64},
    util::run,
};

/// Which kernel to boot, for which architecture.
#[derive(Clone, Debug)]
pub enum Spec {
    /// The package a meta package (`linux-image-<arch>`, `linux-image-rt-<arch>`) of a suite names today.
    Meta {
        /// Short label for the summary.
        label: &'static str,
        /// Suite name.
        suite: &'static str,
        /// The meta package's flavour: `""` or `"rt-"`.
        flavour: &'static str,
        /// The kernel's architecture.
        arch: Arch,
    },
    /// An exact kernel package name (any Debian suite the harness knows).
    Package {
        /// The package.
        name: String,
        /// Its architecture.
        arch: Arch,
    },
}

impl Spec {
    /// The matrix: on x86_64 the oldest kernel Debian still ships, current
    /// stable, the newest in backports and the PREEMPT_RT flavour of the
    /// newest; on arm64 current stable and the newest.
    pub const MATRIX: [Spec; 6] = [
        Spec::Meta { label: "5.10 (bullseye)", suite: "bullseye", flavour: "", arch: X86_64 },
        Spec::Meta { label: "6.1 (bookworm)", suite: "bookworm", flavour: "", arch: X86_64 },
        Spec::Meta { label: "newest (trixie-backports)", suite: "trixie-backports", flavour: "", arch: X86_64 },
        Spec::Meta { label: "PREEMPT_RT (trixie-backports)", suite: "trixie-backports", flavour: "rt-", arch: X86_64 },
        Spec::Meta { label: "arm64 6.1 (bookworm)", suite: "bookworm", flavour: "", arch: AARCH64 },
        Spec::Meta { label: "arm64 newest (trixie-backports)", suite: "trixie-backports", flavour: "", arch: AARCH64 },
    ];

    /// The default kernel of `arch`: Debian stable's.
    pub fn default_kernel(arch: Arch) -> Spec {
        Spec::Meta { label: "6.1 (bookworm)", suite: "bookworm", flavour: "", arch }
    }

    /// The newest kernel of `arch` in the matrix (trixie-backports).
    pub fn newest(arch: Arch) -> Spec {
        Spec::MATRIX
            .into_iter()
            .find(|s| matches!(s, Spec::Meta { suite: "trixie-backports", flavour: "", .. }) && s.arch() == arch)
            .unwrap_or_else(|| Spec::default_kernel(arch))
    }

    /// An exact package; errs when its name says it is for another architecture.
    pub fn package(name: &str, arch: Arch) -> Result<Spec> {
        if let Some(other) = ARCHES.iter().find(|a| **a != arch && name.split('-').any(|part| part == a.deb)) {
            bail!("{name} is an {} kernel: add --arch {}", other.deb, other.name);
        }
        Ok(Spec::Package { name: name.to_string(), arch })
    }

    /// The architecture the kernel is for.
    pub fn arch(&self) -> Arch {
        match self {
            Spec::Meta { arch, .. } | Spec::Package { arch, .. } => *arch,
        }
    }

    /// What the summary calls it.
    pub fn label(&self) -> String {
        match self {
            Spec::Meta { label, .. } => label.to_string(),
            Spec::Package { name, .. } => name.clone(),
        }
    }
}

/// An unpacked kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The image package.
    pub package: String,
    /// The kernel release (the modules directory's name).
    pub release: String,
    /// The compressed image to boot.
    pub vmlinuz: PathBuf,
    /// `<root>/[usr/]lib/modules/<release>`, or why the kernel has none here.
    pub modules: Result<PathBuf, String>,
}

/// The image packages a meta package names, newest first (one per version of
/// the meta package, for when a mirror lacks the newest file).
fn images_of(apt: &Apt, meta: &str) -> Vec<String> {
    let mut out = Vec::new();
    for v in apt.versions(meta) {
        for d in apt.depends(&format!("{meta}={v}")) {
            if d.starts_with("linux-image-") && d != meta && !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

fn find_vmlinuz(root: &Path) -> Option<PathBuf> {
    let boot = std::fs::read_dir(root.join("boot")).ok().into_iter().flatten().filter_map(|e| e.ok()).map(|e| e.path());
    let usr = ["usr/lib/modules", "lib/modules"]
        .iter()
        .filter_map(|m| std::fs::read_dir(root.join(m)).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .flat_map(|e| [e.path().join("vmlinuz"), e.path().join("vmlinuz.unsigned")]);
    boot.filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-")))
        .chain(usr)
        .find(|p| p.is_file())
}

fn find_modules(root: &Path) -> Option<PathBuf> {
    ["lib/modules", "usr/lib/modules"]
        .iter()
        .filter_map(|m| std::fs::read_dir(root.join(m)).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.join("kernel").is_dir())
}

fn unpack(deb: &Path, dir: &Path) -> Result<()> {
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir)).with_context(|| format!("unpacking {}", deb.display()))
}

/// The release a kernel image is for: `boot/vmlinuz-<release>` or
/// `usr/lib/modules/<release>/vmlinuz`.
fn release_of(vmlinuz: &Path) -> String {
    let file = vmlinuz.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    match file.strip_prefix("vmlinuz-") {
        Some(r) => r.to_string(),
        None => {
            vmlinuz.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        }
    }
}

/// Downloads and unpacks the packages of `pkg` (its plan in `index`) into `dir`.
fn fetch(apt: &Apt, index: &Index, pkg: &str, dir: &Path) -> Result<Kernel> {
    let plan = index.plan(pkg).map_err(|e| anyhow::anyhow!("{e} ({})", apt.suite.name))?;
    let done = dir.join(".unpacked");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        for p in &plan.fetch {
            unpack(&apt.download(p)?, dir)?;
        }
        std::fs::write(&done, plan.fetch.join("\n"))?;
    }
    let image = plan.image.as_deref().unwrap_or(pkg);
    let vmlinuz = find_vmlinuz(dir).with_context(|| format!("{image}: no vmlinuz under boot/ or usr/lib/modules/"))?;
    let modules = match (find_modules(dir), plan.no_modules(apt.suite.name)) {
        (Some(m), _) => Ok(m),
        (None, Some(why)) => {
            eprintln!("xtask: {pkg}: {why}; booting it without modules");
            Err(why)
        }
        (None, None) => {
            bail!("{}: no modules under lib/modules or usr/lib/modules", plan.modules.as_deref().unwrap_or(pkg))
        }
    };
    let release = match &modules {
        Ok(m) => m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        Err(_) => release_of(&vmlinuz),
    };
    Ok(Kernel { package: pkg.to_string(), release, vmlinuz, modules })
}

/// Resolves every kernel package (`linux-image-*` but debug symbols and
/// signing templates) of every suite to the packages that hold its image
/// and modules, from the package indices alone; one line per suite. Errs
/// if any has no image to boot.
pub fn check_packages(root: &Path) -> Result<String> {
    let mut report = String::new();
    let mut failures = Vec::new();
    for (suite, arch) in SUITES.iter().flat_map(|s| ARCHES.map(|a| (s, a))) {
        let index = Apt::open(&root.join("apt"), *suite, arch)?.index()?;
        let images = index.images();
        let (mut both, mut image_only) = (0, Vec::new());
        for img in &images {
            match index.plan(img) {
                Ok(p) if p.modules.is_some() => both += 1,
                Ok(_) => image_only.push(*img),
                Err(e) => failures.push(format!("{} ({}): {e}", suite.name, arch.deb)),
            }
        }
        report.push_str(&format!(
            "{} ({}): {} kernel packages: {both} with image and modules, {} image only{}\n",
            suite.name,
            arch.deb,
            images.len(),
            image_only.len(),
            if image_only.is_empty() {
                String::new()
            } else {
                format!(" (their modules package is not in the archive; they boot without): {}", image_only.join(" "))
            }
        ));
    }
    if !failures.is_empty() {
        bail!("{report}{} kernel package(s) with no image to boot:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(report)
}

/// Resolves, downloads and unpacks `spec` under `root` (cached).
pub fn prepare(spec: &Spec, root: &Path) -> Result<Kernel> {
    let apt_root = root.join("apt");
    match spec {
        Spec::Meta { suite, flavour, arch, .. } => {
            let suite = SUITES.iter().find(|s| s.name == *suite).with_context(|| format!("unknown suite {suite}"))?;
            let apt = Apt::open(&apt_root, *suite, *arch)?;
            let index = apt.index()?;
            let meta = &format!("linux-image-{flavour}{}", arch.deb);
            let images = images_of(&apt, meta);
            if images.is_empty() {
                bail!("{meta} in {} names no linux-image package", suite.name);
            }
            let mut errors = Vec::new();
            for img in &images {
                match fetch(&apt, &index, img, &root.join("kernels").join(img)) {
                    Ok(k) => return Ok(k),
                    Err(e) => {
                        eprintln!("xtask: {img}: {e:#}; trying an older one");
                        errors.push(format!("{img}: {e:#}"));
                    }
                }
            }
            bail!("no kernel of {meta} ({}) could be fetched: {}", suite.name, errors.join("; "))
        }
        Spec::Package { name: pkg, arch } => {
            for suite in SUITES {
                let apt = Apt::open(&apt_root, *suite, *arch)?;
                let index = apt.index()?;
                if index.has(pkg) {
                    return fetch(&apt, &index, pkg, &root.join("kernels").join(pkg));
                }
            }
            bail!(
                "{pkg} is in none of the suites the harness knows ({})",
                SUITES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

/// Finds module `name` (`-` and `_` alike; `.ko`, `.ko.xz`, `.ko.zst`).
fn find_module(root: &Path, name: &str) -> Option<PathBuf> {
    let stems = [name.replace('_', "-"), name.replace('-', "_")];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let Some(file) = p.file_name().and_then(|n| n.to_str()) else { continue };
            let stem = file
                .strip_suffix(".ko")
                .or_else(|| file.strip_suffix(".ko.xz"))
                .or_else(|| file.strip_suffix(".ko.zst"));
            if stem.is_some_and(|s| stems.iter().any(|w| w == s)) {
                return Some(p);
            }
        }
    }
    None
}

/// A module's bytes, decompressed (busybox insmod cannot read `.ko.zst`,
/// and the `depends=` field is inside the compressed data).
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else {
        None
    };
    match tool {
        None => std::fs::read(path).with_context(|| format!("reading {}", path.display())),
        Some(t) => {
            let out = Command::new(t).arg("-dc").arg(path).output().with_context(|| format!("running {t} -dc"))?;
            if !out.status.success() {
                bail!("{t} -dc {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
            }
            Ok(out.stdout)
        }
    }
}

/// The `depends=` field of a module's .modinfo section.
fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    let Some(at) = ko.windows(key.len()).position(|w| w == key) else { return Vec::new() };
    let rest = &ko[at + key.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).split(',').filter(|d| !d.is_empty()).map(str::to_string).collect()
}

/// Modules to insmod for `wanted`, dependencies first: (name, decompressed bytes).
pub fn module_order(modules: &Path, wanted: &[&str]) -> Result<Vec<(String, Vec<u8>)>> {
    fn visit(root: &Path, name: &str, out: &mut Vec<(String, Vec<u8>)>, depth: u32) -> Result<()> {
        if depth > 16 || out.iter().any(|(n, _)| n == name) {
            return Ok(());
        }
        let path = find_module(root, name).with_context(|| format!("module {name} not in the kernel package"))?;
        let bytes = module_bytes(&path)?;
        for d in module_depends(&bytes) {
            visit(root, &d, out, depth + 1)?;
        }
        out.push((name.to_string(), bytes));
        Ok(())
    }
    let mut out = Vec::new();
    for w in wanted {
        visit(modules, w, &mut out, 0)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_of_another_architecture_names_the_option() {
        let e = Spec::package("linux-image-6.1.0-57-arm64", X86_64).expect_err("arm64 kernel on x86_64");
        assert_eq!(e.to_string(), "linux-image-6.1.0-57-arm64 is an arm64 kernel: add --arch aarch64");
        let e = Spec::package("linux-image-6.1.0-57-cloud-amd64", AARCH64).expect_err("amd64 kernel on arm64");
        assert!(e.to_string().ends_with("add --arch x86_64"), "{e}");
        let ok = Spec::package("linux-image-6.1.0-57-arm64", AARCH64).expect("arm64 kernel on arm64");
        assert_eq!((ok.arch(), ok.label()), (AARCH64, "linux-image-6.1.0-57-arm64".to_string()));
    }

    #[test]
    fn the_matrix_has_both_architectures_and_defaults_are_stable() {
        for arch in ARCHES {
            assert!(Spec::MATRIX.iter().any(|s| s.arch() == arch), "{arch:?} has no matrix row");
            assert!(matches!(Spec::default_kernel(arch), Spec::Meta { suite: "bookworm", .. }));
        }
    }

    #[test]
    fn modinfo_depends_are_read() {
        let ko = b"\x7fELF....license=GPL\0depends=kvm,ccp\0intree=Y\0";
        assert_eq!(module_depends(ko), ["kvm", "ccp"]);
        assert!(module_depends(b"depends=\0").is_empty());
        assert!(module_depends(b"nothing here").is_empty());
    }

    #[test]
    fn every_layout_finds_its_image_and_modules() {
        let base = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        let layouts: [(&str, &[&str]); 3] = [
            ("boot", &["boot/vmlinuz-6.1.0-57-amd64", "lib/modules/6.1.0-57-amd64/kernel/arch/x86/kvm/kvm-amd.ko"]),
            ("merged", &["boot/vmlinuz-6.12.1", "usr/lib/modules/6.12.1/kernel/arch/x86/kvm/kvm_amd.ko.xz"]),
            ("split", &["usr/lib/modules/7.3.4/vmlinuz", "usr/lib/modules/7.3.4/kernel/virt/lib/irqbypass.ko.zst"]),
        ];
        for (name, files) in layouts {
            let root = base.join(name);
            for f in files {
                let p = root.join(f);
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(&p, b"x").expect("write");
            }
            assert!(find_vmlinuz(&root).is_some(), "{name}: vmlinuz");
            let m = find_modules(&root).expect("modules dir");
            let module = if name == "split" { "irqbypass" } else { "kvm-amd" };
            assert!(find_module(&m, module).is_some(), "{name}: {module}");
        }
        let _ = std::fs::remove_dir_all(base);
    }
}
