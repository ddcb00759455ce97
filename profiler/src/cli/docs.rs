//! Man pages and shell completions, generated from the clap definitions
//! (clap_mangen, clap_complete), so they cannot drift from `--help`.
//! Written by `lockprof-docs` for `cargo xtask dist`.

use std::{io, path::Path};

use clap::CommandFactory as _;
use clap_complete::Shell;

use super::Cli;

/// The shells completions are made for, with the file name each expects.
pub const SHELLS: [(Shell, &str); 3] =
    [(Shell::Bash, "lockprof.bash"), (Shell::Zsh, "_lockprof"), (Shell::Fish, "lockprof.fish")];

/// The command tree, built (global options propagated to the subcommands).
fn command() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// The subcommands that get a page: clap's own `help` is `--help`'s twin.
fn pages_of(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// `lockprof.1` and one page per subcommand (`lockprof-record.1`, ...):
/// (file name, roff).
pub fn man_pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    let cmd = command();
    let mut pages = Vec::new();
    let mut top = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut top)?;
    pages.push(("lockprof.1".to_string(), top));
    for sub in pages_of(&cmd) {
        let name = format!("lockprof-{}", sub.get_name());
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone().name(&name).bin_name(format!("lockprof {}", sub.get_name())))
            .render(&mut page)?;
        pages.push((format!("{name}.1"), page));
    }
    Ok(pages)
}

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "lockprof", &mut out);
    out
}

/// Writes the man pages into `dir/man1` and the completions into
/// `dir/completions`; returns the files written.
pub fn write_all(dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    let (man, comp) = (dir.join("man1"), dir.join("completions"));
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&comp)?;
    let mut written = Vec::new();
    for (name, roff) in man_pages()? {
        let path = man.join(name);
        std::fs::write(&path, roff)?;
        written.push(path);
    }
    for (shell, name) in SHELLS {
        let path = comp.join(name);
        std::fs::write(&path, completion(shell))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Roff as text: clap_mangen writes `-` as `\-`.
    fn text(roff: &[u8]) -> String {
        String::from_utf8_lossy(roff).replace("\\-", "-")
    }

    fn longs(cmd: &clap::Command) -> Vec<String> {
        cmd.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| !["help", "version"].contains(l))
            .map(|l| format!("--{l}"))
            .collect()
    }

    #[test]
    fn every_subcommand_and_option_is_in_the_man_pages() {
        let pages = man_pages().expect("render");
        let page = |name: &str| {
            pages.iter().find(|(n, _)| n == name).map(|(_, r)| text(r)).unwrap_or_else(|| panic!("no page {name}"))
        };
        let cmd = command();
        let top = page("lockprof.1");
        let subs: Vec<_> = pages_of(&cmd).collect();
        assert!(subs.len() >= 7, "{} subcommands", subs.len());
        assert_eq!(pages.len(), subs.len() + 1);
        for l in longs(&cmd) {
            assert!(top.contains(&l), "lockprof.1 lacks {l}");
        }
        let mut checked = 0;
        for sub in subs {
            assert!(top.contains(sub.get_name()), "lockprof.1 does not list {}", sub.get_name());
            let p = page(&format!("lockprof-{}.1", sub.get_name()));
            assert!(p.contains(&format!("lockprof-{}", sub.get_name())), "title of {}", sub.get_name());
            for l in longs(sub) {
                assert!(p.contains(&l), "lockprof-{}.1 lacks {l}", sub.get_name());
                checked += 1;
            }
            for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
                assert!(p.contains(nested.get_name()), "lockprof-{}.1 lacks {}", sub.get_name(), nested.get_name());
            }
        }
        // The record page alone has dozens: the walk found the options.
        assert!(checked > 50, "only {checked} options checked");
    }

    #[test]
    fn completions_know_every_subcommand_and_option() {
        let cmd = command();
        for (shell, _) in SHELLS {
            let script = String::from_utf8(completion(shell)).expect("utf-8");
            for sub in pages_of(&cmd) {
                assert!(script.contains(sub.get_name()), "{shell} completion lacks {}", sub.get_name());
                for l in longs(sub) {
                    // fish writes `-l name`, bash and zsh `--name`.
                    let bare = l.trim_start_matches('-');
                    assert!(script.contains(&l) || script.contains(&format!("-l {bare}")), "{shell}: {l}");
                }
            }
        }
    }

    #[test]
    fn version_names_the_commit_and_the_target() {
        let v = command().render_version();
        let rest = v.trim().strip_prefix(&format!("lockprof {} (commit ", env!("CARGO_PKG_VERSION"))).expect("prefix");
        let (commit, target) = rest.strip_suffix(')').and_then(|r| r.split_once(", ")).expect("(commit C, T)");
        let hex = commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit());
        assert!(hex || commit == "unknown", "{v}");
        assert!(target.contains("-linux-") && !target.contains(' '), "{v}");
    }
}
