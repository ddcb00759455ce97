//! Generated sections of README.md: the text between a begin and an end
//! mark, replaced by a run's table (the kernel matrix, the phase table).

use anyhow::{Context as _, Result};

use crate::util::workspace_root;

/// `readme` with the text between `begin` and `end` replaced by `table`
/// (None: a mark is missing, or they are out of order).
pub fn splice(readme: &str, begin: &str, end: &str, table: &str) -> Option<String> {
    let b = readme.find(begin)?;
    let e = readme.find(end)?;
    (b < e).then(|| format!("{}{begin}\n{table}{}", &readme[..b], &readme[e..]))
}

/// Writes `table` between `begin` and `end` in the workspace's README.md,
/// saying so (`what` names the table); a README without the marks is left alone.
pub fn write_section(begin: &str, end: &str, table: &str, what: &str) -> Result<()> {
    let path = workspace_root().join("README.md");
    let readme = std::fs::read_to_string(&path).context("reading README.md")?;
    match splice(&readme, begin, end, table) {
        Some(new) if new != readme => {
            std::fs::write(&path, new).context("writing README.md")?;
            eprintln!("xtask: README.md's {what} updated from this run");
        }
        Some(_) => {}
        None => eprintln!("xtask: README.md has no {what} marks; the table was not written"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_between_the_marks() {
        let readme = "a\n<b>\nold\n<e>\nb\n";
        assert_eq!(splice(readme, "<b>", "<e>", "new\n").as_deref(), Some("a\n<b>\nnew\n<e>\nb\n"));
        assert_eq!(splice("no marks", "<b>", "<e>", "new"), None);
        assert_eq!(splice("<e> then <b>", "<b>", "<e>", "new"), None, "marks out of order");
    }
}
