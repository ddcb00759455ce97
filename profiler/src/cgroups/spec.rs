//! A user's `--cgroup` spec to the cgroup it names.

use std::{
    collections::HashSet,
    path::{Component, Path},
};

use super::{CgroupError, CgroupFs, short_name, walk::within};

/// How many matches an ambiguity error lists.
const MATCHES_SHOWN: usize = 5;

impl CgroupFs {
    /// The path (relative to the mount, "/..." ) of the cgroup `spec` names:
    /// an absolute path under the mount (`/sys/fs/cgroup/unified/x/y`), a
    /// path relative to the mount (`system.slice/nginx.service`, with or
    /// without a leading '/'), a last component such as a unit name
    /// (`nginx.service`, `docker-<64 hex>.scope`), or a short name as
    /// [`short_name`] gives it (`docker:3f2a9c1b7d4e`). A name must match
    /// one cgroup, or several that all lie in the subtree of one of them
    /// (that one is taken); otherwise the error lists up to five matches.
    pub fn resolve(&self, spec: &str) -> Result<String, CgroupError> {
        let s = spec.trim();
        if s.is_empty() {
            return Err(CgroupError::BadSpec { spec: spec.to_string(), why: "an empty name names no cgroup" });
        }
        let ids = self.walk();
        let paths: HashSet<&str> = ids.values().map(String::as_str).collect();
        if s.contains('/') {
            let rel = self.relative(s)?;
            if paths.contains(rel.as_str()) {
                return Ok(rel);
            }
        }
        let last = |p: &str| !s.contains('/') && p.rsplit('/').next() == Some(s);
        let short = |p: &str| short_name(p) == s;
        for matches in [&last as &dyn Fn(&str) -> bool, &short] {
            let mut found: Vec<&str> = paths.iter().copied().filter(|p| matches(p)).collect();
            found.sort_unstable();
            let Some(top) = found.iter().copied().min_by_key(|p| p.len()) else { continue };
            if found.iter().all(|p| within(p, top)) {
                return Ok(top.to_string());
            }
            return Err(CgroupError::Ambiguous {
                spec: s.to_string(),
                root: self.root.clone(),
                matches: found.iter().take(MATCHES_SHOWN).map(|p| p.to_string()).collect(),
                total: found.len(),
            });
        }
        Err(CgroupError::NotFound { spec: s.to_string(), root: self.root.clone() })
    }

    /// `s` as a path relative to the mount, "/" first: with the mount point
    /// stripped if it starts with it, `.` and repeated or trailing '/' dropped.
    fn relative(&self, s: &str) -> Result<String, CgroupError> {
        let p = Path::new(s);
        let rest = p.strip_prefix(&self.root).unwrap_or(p);
        let mut rel = String::new();
        for c in rest.components() {
            match c {
                Component::Normal(n) => {
                    rel.push('/');
                    rel.push_str(&n.to_string_lossy());
                }
                Component::ParentDir => {
                    return Err(CgroupError::BadSpec {
                        spec: s.to_string(),
                        why: "'..' is not allowed: give the path below the cgroup2 mount",
                    });
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        if rel.is_empty() {
            rel.push('/');
        }
        Ok(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::{super::test_tree::TempTree, *};

    const CID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef";
    const UID: &str = "1c2d3e4f-aaaa-4bbb-8ccc-0123456789ab";

    fn tree(name: &str) -> TempTree {
        TempTree::new(
            name,
            &[
                "system.slice/nginx.service",
                "system.slice/cron.service",
                &format!("system.slice/docker-{CID}.scope/system.slice/redis.service"),
                &format!("kubepods/burstable/pod{UID}/{}", &CID.replace('3', "4")),
                "user.slice/user-1000.slice/session-3.scope",
            ],
        )
    }

    #[test]
    fn paths_absolute_under_the_mount_or_relative_to_it() {
        let t = tree("paths");
        let abs = format!("{}/system.slice/nginx.service", t.fs.root().display());
        assert_eq!(t.fs.resolve(&abs).expect("absolute"), "/system.slice/nginx.service");
        for spec in ["system.slice/nginx.service", "/system.slice/nginx.service", "system.slice//nginx.service/"] {
            assert_eq!(t.fs.resolve(spec).expect(spec), "/system.slice/nginx.service", "{spec}");
        }
        assert_eq!(t.fs.resolve(&t.fs.root().display().to_string()).expect("the mount itself"), "/");
        assert_eq!(t.fs.resolve("/").expect("the root"), "/");
        assert!(matches!(t.fs.resolve("system.slice/nope.service"), Err(CgroupError::NotFound { .. })));
        let err = t.fs.resolve("../system.slice").expect_err("climbing out");
        assert!(matches!(err, CgroupError::BadSpec { .. }), "{err:?}");
        assert!(matches!(t.fs.resolve("  "), Err(CgroupError::BadSpec { .. })));
    }

    #[test]
    fn unit_names_and_short_names() {
        let t = tree("names");
        assert_eq!(t.fs.resolve("nginx.service").expect("unit"), "/system.slice/nginx.service");
        let scope = format!("/system.slice/docker-{CID}.scope");
        assert_eq!(t.fs.resolve(&format!("docker-{CID}.scope")).expect("scope"), scope);
        assert_eq!(t.fs.resolve("docker:3f2a9c1b7d4e").expect("docker short name"), scope);
        assert_eq!(
            t.fs.resolve("docker:3f2a9c1b7d4e/redis.service").expect("nested"),
            format!("{scope}/system.slice/redis.service")
        );
        let pod = format!("/kubepods/burstable/pod{UID}");
        assert_eq!(t.fs.resolve("pod:1c2d3e4f").expect("pod"), pod);
        assert_eq!(
            t.fs.resolve("pod:1c2d3e4f/4f2a9c1b7d4e").expect("container"),
            format!("{pod}/{}", CID.replace('3', "4"))
        );
        assert_eq!(
            t.fs.resolve("session-3.scope (uid 1000)").expect("user unit"),
            "/user.slice/user-1000.slice/session-3.scope"
        );
        let err = t.fs.resolve("docker:000000000000").expect_err("no such container");
        let text = err.to_string();
        assert!(text.starts_with("no cgroup matches 'docker:000000000000' under "), "{text}");
        assert!(text.contains(&t.fs.root().display().to_string()) && text.contains("nginx.service"), "{text}");
    }

    #[test]
    fn ambiguous_names_list_their_matches() {
        let t = tree("ambiguous");
        t.mkdir("user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service");
        let err = t.fs.resolve("nginx.service").expect_err("two nginx.service");
        let CgroupError::Ambiguous { matches, total, .. } = &err else { panic!("{err:?}") };
        assert_eq!(*total, 2);
        assert_eq!(
            matches,
            &["/system.slice/nginx.service", "/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service"]
        );
        let text = err.to_string();
        assert!(text.contains("/system.slice/nginx.service, /user.slice/") && !text.contains("..."), "{text}");
        // The same name nested inside itself is one subtree: the outer one is taken.
        t.mkdir("system.slice/cron.service/jobs/cron.service");
        assert_eq!(t.fs.resolve("cron.service").expect("one subtree"), "/system.slice/cron.service");
        // More than five: five listed, and the total.
        for i in 0..6 {
            t.mkdir(&format!("s{i}.slice/worker.service"));
        }
        let err = t.fs.resolve("worker.service").expect_err("six workers");
        let CgroupError::Ambiguous { matches, total, .. } = &err else { panic!("{err:?}") };
        assert_eq!((matches.len(), *total), (5, 6));
        assert!(
            err.to_string().contains("matches 6 cgroups")
                && err.to_string().ends_with(", ...; give the path of the one you mean"),
            "{err}"
        );
    }
}
