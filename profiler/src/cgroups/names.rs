//! Short, container- and service-friendly names for cgroup paths.
//!
//! Containers are recognised by the names their runtimes give their cgroups,
//! anywhere in the path (rootless and nested setups put them below
//! `user.slice/...` or a test's own directory); the outermost one decides
//! the kind, and what is below it is appended by the systemd rule. Paths that
//! say neither keep their full path.

/// Runtime scopes (`<prefix><64 hex>.scope`) and the kind each names.
const SCOPES: [(&str, &str); 6] = [
    ("docker-", "docker"),
    ("cri-containerd-", "containerd"),
    ("crio-conmon-", "crio-conmon"),
    ("crio-", "crio"),
    ("libpod-conmon-", "podman-conmon"),
    ("libpod-", "podman"),
];

/// Kubernetes pod slices under the systemd cgroup driver, by QoS class.
const POD_SLICES: [&str; 3] = ["kubepods-pod", "kubepods-besteffort-pod", "kubepods-burstable-pod"];

/// Suffixes of systemd units that hold processes (slices only group them).
const UNITS: [&str; 5] = [".service", ".scope", ".socket", ".mount", ".swap"];

/// How many characters of a container id and a pod uid are shown.
const CID_SHOWN: usize = 12;
const UID_SHOWN: usize = 8;

/// The short name of a cgroup path relative to the mount ("/" for the root).
///
/// `/system.slice/docker-<id>.scope/system.slice/nginx.service` is
/// `docker:<id 12>/nginx.service`; `/kubepods/burstable/pod<uid>/<id>` is
/// `pod:<uid 8>/<id 12>`; `/user.slice/user-1000.slice/session-2.scope` is
/// `session-2.scope (uid 1000)`; `/system.slice/nginx.service` is
/// `nginx.service`.
pub fn short_name(path: &str) -> String {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    if comps.is_empty() {
        return "/".to_string();
    }
    if let Some((name, rest)) = container(&comps) {
        if rest.is_empty() {
            return name;
        }
        return format!("{name}/{}", systemd(rest).unwrap_or_else(|| rest.join("/")));
    }
    systemd(&comps).unwrap_or_else(|| path.to_string())
}

/// The outermost container (or pod) in `comps`: its name and what is below it.
fn container<'a, 'p>(comps: &'a [&'p str]) -> Option<(String, &'a [&'p str])> {
    for (i, c) in comps.iter().enumerate() {
        if let Some(uid) = pod(&comps[..i], c) {
            let pod = format!("pod:{}", &uid[..UID_SHOWN]);
            return Some(match comps.get(i + 1) {
                Some(child) if is_hex64(child) => (format!("{pod}/{}", &child[..CID_SHOWN]), &comps[i + 2..]),
                Some(child) => match scope(child) {
                    Some((kind, id)) => (format!("{pod}/{kind}:{}", &id[..CID_SHOWN]), &comps[i + 2..]),
                    None => (pod, &comps[i + 1..]),
                },
                None => (pod, &comps[i + 1..]),
            });
        }
        if let Some((kind, id)) = scope(c) {
            return Some((format!("{kind}:{}", &id[..CID_SHOWN]), &comps[i + 1..]));
        }
        if is_hex64(c) && i > 0 && comps[i - 1] == "docker" {
            return Some((format!("docker:{}", &c[..CID_SHOWN]), &comps[i + 1..]));
        }
    }
    None
}

/// The uid of a Kubernetes pod cgroup: `kubepods[-<qos>]-pod<uid with _>.slice`
/// (systemd driver), or `pod<uid>` under `kubepods[/<qos>]` (cgroupfs driver).
fn pod<'p>(above: &[&str], c: &'p str) -> Option<&'p str> {
    if let Some(uid) = POD_SLICES.iter().find_map(|p| c.strip_prefix(p)?.strip_suffix(".slice")) {
        return is_uuid(uid, b'_').then_some(uid);
    }
    let uid = c.strip_prefix("pod").filter(|u| is_uuid(u, b'-'))?;
    let under_kubepods = match above {
        [.., "kubepods"] => true,
        [.., "kubepods", qos] => *qos == "besteffort" || *qos == "burstable",
        _ => false,
    };
    under_kubepods.then_some(uid)
}

/// A runtime's container scope (`docker-<64 hex>.scope`...): its kind and id.
fn scope(c: &str) -> Option<(&'static str, &str)> {
    let stem = c.strip_suffix(".scope")?;
    SCOPES.iter().find_map(|(prefix, kind)| stem.strip_prefix(prefix).filter(|id| is_hex64(id)).map(|id| (*kind, id)))
}

/// The systemd name of `comps`: the deepest unit with what is below it, else
/// the deepest slice if it is the last component; with `(uid N)` when below
/// a user's slice or manager. `None` when systemd names none of it.
fn systemd(comps: &[&str]) -> Option<String> {
    let d = comps.iter().rposition(|c| is_unit(c) || c.strip_suffix(".slice").is_some_and(|s| !s.is_empty()))?;
    let name = if is_unit(comps[d]) {
        comps[d..].join("/")
    } else if d + 1 == comps.len() {
        comps[d].to_string()
    } else {
        return None;
    };
    let manager = user_uid(comps[d], "user@", ".service");
    let uid = comps[..d].iter().rev().find_map(|c| user_uid(c, "user-", ".slice").or(user_uid(c, "user@", ".service")));
    Some(match uid {
        Some(uid) if manager.is_none() => format!("{name} (uid {uid})"),
        _ => name,
    })
}

/// `N` of `<prefix>N<suffix>` when N is a decimal number.
fn user_uid<'p>(c: &'p str, prefix: &str, suffix: &str) -> Option<&'p str> {
    c.strip_prefix(prefix)?.strip_suffix(suffix).filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A systemd unit that holds processes (`nginx.service`, `session-2.scope`).
fn is_unit(c: &str) -> bool {
    UNITS.iter().any(|u| c.strip_suffix(u).is_some_and(|stem| !stem.is_empty()))
}

/// Lowercase hex digits only.
fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A full container id: 64 lowercase hex digits.
fn is_hex64(s: &str) -> bool {
    s.len() == 64 && is_hex(s)
}

/// A UUID (8-4-4-4-12 lowercase hex) with `sep` between the groups.
fn is_uuid(s: &str, sep: u8) -> bool {
    let groups: Vec<&str> = s.split(char::from(sep)).collect();
    groups.len() == 5 && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && is_hex(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef";
    const UID: &str = "1c2d3e4f-aaaa-4bbb-8ccc-0123456789ab";

    #[test]
    fn short_names_of_real_looking_paths() {
        let uid_ = UID.replace('-', "_");
        let cases: Vec<(String, String)> = [
            ("/", "/"),
            ("/init.scope", "init.scope"),
            ("/system.slice", "system.slice"),
            ("/system.slice/nginx.service", "nginx.service"),
            ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service"),
            // A service that made sub-cgroups of its own: the unit, then what is below.
            ("/system.slice/containerd.service/worker", "containerd.service/worker"),
            ("/user.slice/user-1000.slice", "user-1000.slice"),
            ("/user.slice/user-1000.slice/session-3.scope", "session-3.scope (uid 1000)"),
            ("/user.slice/user-1000.slice/user@1000.service", "user@1000.service"),
            ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-foo.scope", "app-foo.scope (uid 1000)"),
            ("/system.slice/docker-{CID}.scope", "docker:3f2a9c1b7d4e"),
            ("/docker/{CID}", "docker:3f2a9c1b7d4e"),
            ("/system.slice/docker-{CID}.scope/system.slice/nginx.service", "docker:3f2a9c1b7d4e/nginx.service"),
            ("/docker/{CID}/init.scope", "docker:3f2a9c1b7d4e/init.scope"),
            // Rootless Docker under the user's manager: the container decides.
            ("/user.slice/user-1000.slice/user@1000.service/user.slice/docker-{CID}.scope", "docker:3f2a9c1b7d4e"),
            ("/system.slice/cri-containerd-{CID}.scope", "containerd:3f2a9c1b7d4e"),
            ("/machine.slice/crio-{CID}.scope", "crio:3f2a9c1b7d4e"),
            ("/machine.slice/crio-conmon-{CID}.scope", "crio-conmon:3f2a9c1b7d4e"),
            ("/machine.slice/libpod-{CID}.scope/container", "podman:3f2a9c1b7d4e/container"),
            ("/machine.slice/libpod-conmon-{CID}.scope", "podman-conmon:3f2a9c1b7d4e"),
            // Kubernetes, systemd driver, each QoS class.
            ("/kubepods.slice/kubepods-pod{UID_}.slice", "pod:1c2d3e4f"),
            (
                "/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
                "pod:1c2d3e4f/containerd:3f2a9c1b7d4e",
            ),
            (
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope",
                "pod:1c2d3e4f/crio:3f2a9c1b7d4e",
            ),
            (
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/docker-{CID}.scope",
                "pod:1c2d3e4f/docker:3f2a9c1b7d4e",
            ),
            // Kubernetes, cgroupfs driver, each QoS class.
            ("/kubepods/pod{UID}/{CID}", "pod:1c2d3e4f/3f2a9c1b7d4e"),
            ("/kubepods/burstable/pod{UID}", "pod:1c2d3e4f"),
            ("/kubepods/besteffort/pod{UID}/{CID}", "pod:1c2d3e4f/3f2a9c1b7d4e"),
            // Nested: a kind-in-docker node's pods, below a test's own directory.
            ("/lockprof-test/kubepods/besteffort/pod{UID}/{CID}", "pod:1c2d3e4f/3f2a9c1b7d4e"),
            ("/kubepods.slice", "kubepods.slice"),
            // Fallbacks: the path.
            ("/kubepods/besteffort", "/kubepods/besteffort"),
            // Upper-case ids are not the runtime's: only the systemd unit is named.
            (
                "/system.slice/docker-3F2A9C1B7D4E5F60718293A4B5C6D7E8F90112233445566778899AABBCCDDEEF.scope",
                "docker-3F2A9C1B7D4E5F60718293A4B5C6D7E8F90112233445566778899AABBCCDDEEF.scope",
            ),
            ("/system.slice/{CID}", "/system.slice/{CID}"),
            ("/{CID}", "/{CID}"),
            ("/other/pod{UID}", "/other/pod{UID}"),
            ("/system.slice/docker-{CID}.scope.d", "/system.slice/docker-{CID}.scope.d"),
            ("/lockprof-test/child", "/lockprof-test/child"),
        ]
        .iter()
        .map(|(p, n)| {
            let fill = |s: &str| s.replace("{CID}", CID).replace("{UID_}", &uid_).replace("{UID}", UID);
            (fill(p), fill(n))
        })
        .collect();
        for (path, want) in &cases {
            assert_eq!(&short_name(path), want, "{path}");
        }
    }

    #[test]
    fn ids_of_the_wrong_length_are_not_containers() {
        let short = &CID[..63];
        assert_eq!(short_name(&format!("/docker/{short}")), format!("/docker/{short}"));
        assert_eq!(short_name(&format!("/system.slice/docker-{short}.scope")), format!("docker-{short}.scope"));
        let bad_uid = &UID[..35];
        assert_eq!(short_name(&format!("/kubepods/pod{bad_uid}")), format!("/kubepods/pod{bad_uid}"));
        // The systemd driver's uid uses '_', not '-'.
        assert_eq!(short_name(&format!("/kubepods.slice/kubepods-pod{UID}.slice")), format!("kubepods-pod{UID}.slice"));
    }
}
