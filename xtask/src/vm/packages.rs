//! Which packages make up a Debian kernel, read from a suite's package
//! index (`apt-cache dumpavail`, no download): a package and the kernel
//! parts its `Depends` name, followed through virtual packages to their
//! providers. Debian has shipped a kernel as one `linux-image-<ver>` (image
//! and modules), as a meta package over `linux-binary-<ver>` (the image) and
//! `linux-modules-<ver>`, and as versions whose modules package has left the
//! archive; the plan says which, and nothing it lists is missing.

use std::collections::HashMap;

/// Package name prefixes that can hold a kernel image or its modules. Other
/// dependencies (`linux-base-*`, initramfs tools, kmod) matter to an
/// installed system, not to a guest booted from an initramfs.
const PARTS: &[&str] = &["linux-image-", "linux-binary-", "linux-modules-"];

/// Packages this small hold documentation and dependencies only (meta
/// packages are ~15 KiB installed; a kernel image alone is ~13 MiB).
const META_MAX_KIB: u64 = 1024;

fn is_part(name: &str) -> bool {
    PARTS.iter().any(|p| name.starts_with(p))
}

/// One package of the index (its candidate version).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Record {
    installed_kib: u64,
    /// `Depends`, each a list of alternatives, names only.
    depends: Vec<Vec<String>>,
}

/// The kernel packages of one suite's index.
#[derive(Debug, Default)]
pub struct Index {
    records: HashMap<String, Record>,
    /// Virtual name -> real packages that provide it.
    providers: HashMap<String, Vec<String>>,
}

/// Names of a relation field: `a (= 1), b | c:any` -> `[[a], [b, c]]`.
fn relation(field: &str) -> Vec<Vec<String>> {
    field
        .split(',')
        .map(|group| {
            group
                .split('|')
                .filter_map(|alt| alt.split_whitespace().next())
                .map(|n| n.split(':').next().unwrap_or(n).to_string())
                .collect::<Vec<_>>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

impl Index {
    /// Parses `apt-cache dumpavail` output, keeping the packages that can
    /// hold kernel parts.
    pub fn parse(dump: &str) -> Index {
        let mut idx = Index::default();
        for stanza in dump.split("\n\n") {
            let mut name = None;
            let mut rec = Record::default();
            let mut provides = Vec::new();
            // Continuation lines (leading space) belong to the field before; the
            // fields read here are single-line.
            for line in stanza.lines().filter(|l| !l.starts_with([' ', '\t'])) {
                let Some((k, v)) = line.split_once(':') else { continue };
                let v = v.trim();
                match k {
                    "Package" => name = Some(v.to_string()),
                    "Installed-Size" => rec.installed_kib = v.parse().unwrap_or(0),
                    "Depends" | "Pre-Depends" => rec.depends.extend(relation(v)),
                    "Provides" => provides = relation(v).into_iter().flatten().collect(),
                    _ => {}
                }
            }
            let Some(name) = name.filter(|n| is_part(n)) else { continue };
            for p in provides.into_iter().filter(|p| is_part(p)) {
                idx.providers.entry(p).or_default().push(name.clone());
            }
            idx.records.insert(name, rec);
        }
        idx
    }

    /// Whether the index has `name` as a real package.
    pub fn has(&self, name: &str) -> bool {
        self.records.contains_key(name)
    }

    /// Every `linux-image-*` that is a kernel (not debug symbols, not a
    /// signing template).
    pub fn images(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .records
            .keys()
            .map(String::as_str)
            .filter(|n| n.starts_with("linux-image-") && !n.ends_with("-dbg") && !n.ends_with("-signed-template"))
            .collect();
        v.sort_unstable();
        v
    }

    /// What a real package carries.
    fn carries(&self, name: &str) -> Carries {
        let big = self.records.get(name).is_some_and(|r| r.installed_kib > META_MAX_KIB);
        match name {
            _ if name.starts_with("linux-binary-") => Carries::Image,
            _ if !big => Carries::Nothing,
            _ if name.starts_with("linux-modules-") => Carries::Modules,
            _ => Carries::Both,
        }
    }

    /// The packages to fetch for kernel package `pkg`.
    pub fn plan(&self, pkg: &str) -> Result<Plan, String> {
        let mut plan = Plan::default();
        let mut todo = vec![pkg.to_string()];
        let mut seen = Vec::new();
        while let Some(name) = todo.pop() {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name.clone());
            let Some(real) = self.real(&name) else {
                plan.missing.push(name);
                continue;
            };
            let carries = self.carries(&real);
            if matches!(carries, Carries::Image | Carries::Both) && plan.image.is_none() {
                plan.image = Some(real.clone());
            }
            if matches!(carries, Carries::Modules | Carries::Both) && plan.modules.is_none() {
                plan.modules = Some(real.clone());
            }
            let rec = &self.records[&real];
            // The first alternative that is a kernel part: Debian's kernel
            // packages name theirs without alternatives.
            todo.extend(rec.depends.iter().rev().filter_map(|alts| alts.iter().find(|a| is_part(a)).cloned()));
            plan.fetch.push(real);
        }
        if plan.image.is_none() {
            return Err(format!(
                "{pkg}: no package among {} holds a kernel image{}",
                plan.fetch.join(", "),
                plan.missing_note()
            ));
        }
        Ok(plan)
    }

    /// `name` if real, else its first real provider.
    fn real(&self, name: &str) -> Option<String> {
        if self.has(name) {
            return Some(name.to_string());
        }
        self.providers.get(name)?.iter().find(|p| self.has(p)).cloned()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carries {
    Image,
    Modules,
    Both,
    Nothing,
}

/// The packages of one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Real packages to download and unpack, the asked-for one first.
    pub fetch: Vec<String>,
    /// The one holding the image.
    pub image: Option<String>,
    /// The one holding the modules, if the archive still has it.
    pub modules: Option<String>,
    /// Kernel parts named in `Depends` that the index does not have.
    pub missing: Vec<String>,
}

impl Plan {
    fn missing_note(&self) -> String {
        if self.missing.is_empty() {
            String::new()
        } else {
            format!(" (not in the archive: {})", self.missing.join(", "))
        }
    }

    /// Why the kernel comes without modules from `suite`, when it does.
    pub fn no_modules(&self, suite: &str) -> Option<String> {
        self.modules.is_none().then(|| {
            let named: Vec<&str> =
                self.missing.iter().map(String::as_str).filter(|m| m.starts_with("linux-modules-")).collect();
            if named.is_empty() {
                format!("no package of this kernel in {suite} holds modules")
            } else {
                format!("{} is not in {suite}", named.join(", "))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Index stanzas of each layout seen in Debian's archive (trimmed).
    const DUMP: &str = "\
Package: linux-image-6.1.0-57-amd64
Installed-Size: 410000
Depends: kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool
Provides: linux-latest-modules-6.1.0-57-amd64, wireguard-modules (= 1.0.0)

Package: linux-image-amd64
Installed-Size: 13
Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)

Package: linux-image-7.3.4+deb13-amd64
Installed-Size: 15
Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.3.4+deb13-amd64 (= 7.3.4-1), linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1), linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1)

Package: linux-binary-7.3.4+deb13-amd64
Installed-Size: 14180
Depends: linux-base-7.3.4+deb13-amd64 (= 7.3.4-1)

Package: linux-modules-7.3.4+deb13-amd64
Installed-Size: 106469
Depends: kmod, linux-base-7.3.4+deb13-amd64 (= 7.3.4-1)

Package: linux-image-7.0.13+deb13-amd64
Installed-Size: 15
Depends: dracut | initramfs-tools, linux-base-7.0.13+deb13-amd64 (= 7.0.13-1), linux-binary-7.0.13+deb13-amd64 (= 7.0.13-1), linux-modules-7.0.13+deb13-amd64 (= 7.0.13-1)

Package: linux-binary-7.0.13+deb13-amd64
Installed-Size: 13714
Depends: linux-base-7.0.13+deb13-amd64 (= 7.0.13-1)

Package: linux-image-9.9.9-amd64
Installed-Size: 15
Depends: linux-binary-9.9.9-amd64, linux-modules-9.9.9-amd64

Package: linux-binary-unsigned-9.9.9-amd64
Installed-Size: 14000
Provides: linux-binary-9.9.9-amd64

Package: linux-modules-unsigned-9.9.9-amd64
Installed-Size: 100000
Provides: linux-modules-9.9.9-amd64

Package: linux-image-amd64-dbg
Installed-Size: 13
Depends: linux-image-6.1.0-57-amd64-dbg

Package: linux-image-0.0-amd64
Installed-Size: 15
Depends: linux-modules-0.0-amd64
";

    fn plan(pkg: &str) -> Result<Plan, String> {
        Index::parse(DUMP).plan(pkg)
    }

    #[test]
    fn one_package_holds_image_and_modules() {
        let p = plan("linux-image-6.1.0-57-amd64").expect("plan");
        assert_eq!(p.fetch, ["linux-image-6.1.0-57-amd64"]);
        assert_eq!(p.image.as_deref(), Some("linux-image-6.1.0-57-amd64"));
        assert_eq!(p.modules, p.image);
        assert!(p.missing.is_empty() && p.no_modules("bookworm").is_none());
        // Through the meta package.
        assert_eq!(plan("linux-image-amd64").expect("meta").image.as_deref(), Some("linux-image-6.1.0-57-amd64"));
    }

    #[test]
    fn split_packages_are_followed_through_depends() {
        let p = plan("linux-image-7.3.4+deb13-amd64").expect("plan");
        assert_eq!(p.image.as_deref(), Some("linux-binary-7.3.4+deb13-amd64"));
        assert_eq!(p.modules.as_deref(), Some("linux-modules-7.3.4+deb13-amd64"));
        assert_eq!(p.fetch[0], "linux-image-7.3.4+deb13-amd64");
        assert_eq!(p.fetch.len(), 3, "{p:?}");
    }

    #[test]
    fn a_modules_package_gone_from_the_archive_leaves_the_image() {
        let p = plan("linux-image-7.0.13+deb13-amd64").expect("plan");
        assert_eq!(p.image.as_deref(), Some("linux-binary-7.0.13+deb13-amd64"));
        assert_eq!(p.modules, None);
        assert!(!p.fetch.iter().any(|f| f.starts_with("linux-modules-")), "never asks for what is not there: {p:?}");
        let why = p.no_modules("trixie-backports").expect("why");
        assert_eq!(why, "linux-modules-7.0.13+deb13-amd64 is not in trixie-backports");
    }

    #[test]
    fn virtual_parts_resolve_to_their_providers() {
        let p = plan("linux-image-9.9.9-amd64").expect("plan");
        assert_eq!(p.image.as_deref(), Some("linux-binary-unsigned-9.9.9-amd64"));
        assert_eq!(p.modules.as_deref(), Some("linux-modules-unsigned-9.9.9-amd64"));
    }

    #[test]
    fn no_image_is_an_error_naming_what_is_missing() {
        let e = plan("linux-image-0.0-amd64").expect_err("no image");
        assert!(e.contains("linux-modules-0.0-amd64"), "{e}");
        assert!(plan("linux-image-nope").is_err());
    }

    #[test]
    fn debug_symbols_and_templates_are_not_kernels() {
        let idx = Index::parse(DUMP);
        assert!(!idx.images().contains(&"linux-image-amd64-dbg"));
        assert!(idx.images().contains(&"linux-image-amd64"));
    }
}
